package rollout

import (
	"context"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/report"
)

// RevisionClock ties the apiserver's order of writes to the local clock.
//
// Every period it lists the namespace's pods with a field selector that
// matches none: the answer is empty and cheap, and it carries the list's
// resourceVersion, the revision of the pods resource at some moment
// between sending and receiving it. A pod whose resourceVersion is
// greater than a mark's was written after that moment, so after the
// mark's send time: a precise lower bound on when a change was made (and
// so on when the kubelet can have acted on it), where the objects'
// own timestamps are floored to the second. resourceversion.CompareResourceVersion
// gives that comparison its meaning, between versions of one resource.
//
// The bound holds only for the write that set what the watch delivered:
// after a watch resumed (a relist), an update can carry a later write's
// version; Stamp stops there.
type RevisionClock struct {
	kube      kubernetes.Interface
	namespace string
	period    time.Duration
	now       func() time.Time

	mu    sync.Mutex
	marks []RevisionMark
	// ran: the span Run marked over (zero until it returns).
	ranFrom, ranTo time.Time
}

// RevisionMark is one list: its resourceVersion, and when it was sent on
// the local clock (the bound a higher version gives).
type RevisionMark struct {
	Sent    time.Time
	Version string
	// Received is when the answer came: a sign the view was live.
	Received time.Time
}

// markSelector matches no pod (names cannot contain '#').
const markSelector = "rollprobe#revision-mark"

// NewRevisionClock makes a clock marking every period (100 ms when 0).
func NewRevisionClock(kube kubernetes.Interface, namespace string, period time.Duration, now func() time.Time) *RevisionClock {
	if period <= 0 {
		period = 100 * time.Millisecond
	}
	if now == nil {
		now = time.Now
	}
	return &RevisionClock{kube: kube, namespace: namespace, period: period, now: now}
}

// Period is the time between marks.
func (c *RevisionClock) Period() time.Duration { return c.period }

// Run marks until ctx ends, one list at a time (a slow answer delays the
// next mark rather than piling up requests).
func (c *RevisionClock) Run(ctx context.Context) {
	t := time.NewTicker(c.period)
	defer t.Stop()
	from := c.now()
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.ranFrom, c.ranTo = from, c.now()
	}()
	for {
		c.Mark(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Mark takes one mark now. A failed list is skipped: a missing mark only
// widens the bounds around it.
func (c *RevisionClock) Mark(ctx context.Context) {
	sent := c.now()
	list, err := c.kube.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", markSelector).String(),
	})
	if err != nil || !validVersion(list.ResourceVersion) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.marks = append(c.marks, RevisionMark{Sent: sent, Version: list.ResourceVersion, Received: c.now()})
}

// LastAnswer is when the last list answered; ok false before the first.
func (c *RevisionClock) LastAnswer() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.marks) == 0 {
		return time.Time{}, false
	}
	return c.marks[len(c.marks)-1].Received, true
}

// Ran is the span Run marked over; ok false before it returned.
func (c *RevisionClock) Ran() (from, to time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ranFrom, c.ranTo, !c.ranFrom.IsZero()
}

// Stalls are the spans of [from, to] longer than bound without a sign
// that the view of the cluster was live: a list's answer (marks'
// Received) or a watch's event received (the events' At, rollprobe's own
// events aside). One whose end is to, with no sign after it, is Open.
func Stalls(from, to time.Time, marks []RevisionMark, events []report.Event, bound time.Duration) []report.ViewStall {
	if !to.After(from) {
		return nil
	}
	var signs []time.Time
	for _, m := range marks {
		signs = append(signs, m.Received)
	}
	for _, e := range events {
		if fromWatch(e.Kind) {
			signs = append(signs, e.At)
		}
	}
	slices.SortFunc(signs, time.Time.Compare)
	var out []report.ViewStall
	last := from
	add := func(end time.Time, open bool) {
		if end.Sub(last) > bound {
			out = append(out, report.ViewStall{Start: last, End: end, DurationS: end.Sub(last).Seconds(), Open: open})
		}
	}
	for _, t := range signs {
		if t.Before(from) || t.After(to) {
			continue
		}
		add(t, false)
		last = t
	}
	add(to, true)
	return out
}

// fromWatch: events of kind k come from the API server (a watch's delivery
// or a request's answer), not from rollprobe itself.
func fromWatch(k report.EventKind) bool {
	switch k {
	case report.RolloutTriggered, report.RolloutComplete, report.RolloutFailed, report.AllOldPodsGone, report.AbortedPodsGone, report.NoRollout,
		report.WatchError, report.ViewStalled, report.ViewResumed, report.RolloutPromoted:
		return false
	}
	return true
}

// Marks returns the marks taken so far.
func (c *RevisionClock) Marks() []RevisionMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]RevisionMark(nil), c.marks...)
}

func validVersion(rv string) bool {
	_, err := resourceversion.CompareResourceVersion(rv, rv)
	return err == nil
}

// CommittedAfter is the latest send time of a mark whose version is below
// rv: the write with version rv was made after it. False when no mark is
// below rv (or rv is not a resource version).
func CommittedAfter(marks []RevisionMark, rv string) (time.Time, bool) {
	var best time.Time
	found := false
	for _, m := range marks {
		if cmp, err := resourceversion.CompareResourceVersion(m.Version, rv); err == nil && cmp < 0 && m.Sent.After(best) {
			best, found = m.Sent, true
		}
	}
	return best, found
}

// Stamp sets CommittedAfter on the deletion requests, from the marks: the
// first update that shows a pod's deletion timestamp carries the version
// of the deletion's own write. A watch that resumed (watch_error) ends the
// stamping there: after a relist an update can carry a later write's
// version than the change it reports. It returns how many it stamped.
func Stamp(events []report.Event, marks []RevisionMark) int {
	n := 0
	for i := range events {
		e := &events[i]
		if e.Kind == report.WatchError {
			return n
		}
		if e.ResourceVersion == "" || e.Kind != report.PodDeletionRequested {
			continue
		}
		if t, ok := CommittedAfter(marks, e.ResourceVersion); ok {
			e.CommittedAfter = &t
			n++
		}
	}
	return n
}
