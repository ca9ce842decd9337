package report

import "fmt"

// Incarnations tells apart the pods of a timeline that share a name. A
// StatefulSet's pod keeps its name when it is replaced (naive-sts-2 is
// deleted, then created again at the new revision), so a name alone does
// not say which pod an event or a response was about. Each incarnation
// gets a key: the name for the first, NAME#2, NAME#3, ... for the ones
// after it.
//
// The rule, over events in timeline order: a pod created (or present)
// under a name whose last incarnation is gone starts a new incarnation; an
// endpoint event goes to the incarnation that had its address (the old
// pod's endpoint can be removed after its successor exists); every other
// event goes to the name's last incarnation (the pod watch delivers one
// object's events in order, and the old object is gone before a new one
// can take its name). The zero value is not ready: NewIncarnations.
type Incarnations struct {
	last  map[string]*incarnation // by pod name
	count map[string]int          // incarnations by pod name
	byIP  map[string]string       // "name ip" → key
}

type incarnation struct {
	key  string
	gone bool
}

// NewIncarnations makes an empty keyer.
func NewIncarnations() *Incarnations {
	return &Incarnations{last: map[string]*incarnation{}, count: map[string]int{}, byIP: map[string]string{}}
}

// Key returns the key of the incarnation e is about ("" for an event about
// no pod), folding e in.
func (in *Incarnations) Key(e Event) string {
	if e.Pod == "" {
		return ""
	}
	cur := in.last[e.Pod]
	if cur != nil && e.Kind.IsEndpoint() && e.IP != "" {
		if key, ok := in.byIP[e.Pod+" "+e.IP]; ok {
			return key
		}
	}
	if cur == nil || (cur.gone && (e.Kind == PodCreated || e.Kind == PodPresent)) {
		n := in.count[e.Pod] + 1
		in.count[e.Pod] = n
		cur = &incarnation{key: IncarnationKey(e.Pod, n)}
		in.last[e.Pod] = cur
	}
	if e.IP != "" {
		in.byIP[e.Pod+" "+e.IP] = cur.key
	}
	if e.Kind == PodGone {
		cur.gone = true
	}
	return cur.key
}

// IncarnationKey is the key of a pod name's nth incarnation (from 1).
func IncarnationKey(name string, n int) string {
	if n <= 1 {
		return name
	}
	return fmt.Sprintf("%s#%d", name, n)
}
