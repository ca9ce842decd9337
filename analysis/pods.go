package analysis

import (
	"slices"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// Pod is one pod's lifecycle as the timeline showed it: the times of its
// changes (local receive times) and its state after the events folded so
// far. It is the one reading of pod state over the timeline: the analysis
// folds the whole timeline, the dashboard folds it as it grows.
type Pod struct {
	// Name is the incarnation's key (report.Incarnations): the pod's name,
	// or NAME#N for a later pod of the same name (a StatefulSet's);
	// PodName is the object's name, as a backend header gives it.
	Name, PodName, Revision string
	// Node is the node the pod runs on (from its events; "" until known).
	Node string
	// IP is the pod's address (from its events; "" until known).
	IP string
	// FirstSeen is the first event about the pod; Present, that it
	// existed when watching began.
	FirstSeen time.Time
	Present   bool

	CreatedAt *time.Time
	// ReadyAt is when the pod last turned ready before its deletion was
	// requested (for a pod present at the start and ready then, the start).
	ReadyAt *time.Time
	// ReadinessConnects: when it turned ready, its readiness probe had
	// connected where the Service sends traffic (it was listening).
	ReadinessConnects bool
	// UnreadyAt is when it last turned unready before its deletion was
	// requested (nil if it never did).
	UnreadyAt *time.Time
	// UnreadyAfterDeletion is when it first turned unready after (nil if
	// it did not).
	UnreadyAfterDeletion *time.Time
	DeletedAt            *time.Time // deletion requested
	// DeletedServer is the apiserver's own time of the deletion request,
	// floored to its second: never later than the request (nil when the
	// timeline lacks it).
	DeletedServer *time.Time
	// DeletedCommittedAfter is a local time the deletion was committed
	// after, from the apiserver's order of writes (nil when unknown).
	DeletedCommittedAfter *time.Time
	// PreStopSleep is how long after its deletion request none of its
	// containers can yet have been told to stop (report.Event's
	// PreStopSleepS; 0 when not known to be any).
	PreStopSleep time.Duration
	// GracePeriod is the deletion's grace period (report.Event's
	// GracePeriodS); nil when the timeline lacks it.
	GracePeriod *time.Duration
	// ListedReadyAt is when its endpoint was first listed ready before its
	// deletion was requested: with the pod's own readiness, unless the
	// Service publishes not-ready addresses (then from the moment the pod
	// has an address). Nil for a pod present when watching began.
	ListedReadyAt  *time.Time
	EndpointGoneAt *time.Time // removed from the EndpointSlice
	// ExitAt is when rollprobe received the first of its containers'
	// exits (ExitCode its code). The first, not the last: with a sidecar
	// the app may have stopped listening before another container exits,
	// and every rule that reads an exit ("can have stopped answering",
	// "no longer listening") then keeps the pod a candidate rather than
	// ruling it out. The first is the earliest by the kubelet's times where
	// both have one, else by receipt.
	ExitAt   *time.Time
	ExitCode *int32
	// ExitContainer names the container of that exit ("" in a report
	// older than the timeline's container field); ExitSidecar, that it is
	// a native sidecar.
	ExitContainer string
	ExitSidecar   bool
	// ExitServicePort: that container has a port the Service targets
	// (report.Event's ServicePort).
	ExitServicePort bool
	// ExitServer is when the kubelet says that container finished, floored
	// to its second: never later than the exit (nil when the timeline
	// lacks it). The exit's receipt can lag it by more than the tolerance
	// (the kubelet's status update; the lab saw 2 s).
	ExitServer *time.Time
	// kills: its containers' ends by SIGKILL (not only the first to
	// exit), at any time: KilledAfterDeletion tells the grace period's
	// from, say, an OOM kill before the deletion.
	kills []report.Event
	// exits: its containers' ends, every one, in the order received.
	exits  []report.Event
	GoneAt *time.Time // the pod object deleted

	// State now: the pod's Ready condition, its endpoint's serving and
	// terminating conditions, and whether the object is gone.
	Ready, Serving, Terminating, Gone bool
}

// DeletedBy reports whether the pod's deletion had been requested (as
// rollprobe received it) by t, give or take slack.
func (p *Pod) DeletedBy(t time.Time, slack time.Duration) bool {
	return p.DeletedAt != nil && !p.DeletedAt.After(t.Add(slack))
}

// Killed reports whether one of the pod's containers ended by SIGKILL.
func (p *Pod) Killed() bool { return len(p.kills) > 0 }

// KilledAfterDeletion names the containers that ended by SIGKILL after
// the pod's deletion was requested, in prose ("container app", "sidecar
// proxy"), each once, in the order seen. "After" compares the kubelet's
// time of the end with the apiserver's of the request where both are
// known (a tie within their second counts), else the receipts: one update
// can carry a deletion and an exit, received at once, so receipt alone
// cannot order them.
func (p *Pod) KilledAfterDeletion() []string {
	if p.DeletedAt == nil {
		return nil
	}
	var out []string
	for _, e := range p.kills {
		after := !e.At.Before(*p.DeletedAt)
		if e.Server != nil && p.DeletedServer != nil {
			after = !e.Server.Before(*p.DeletedServer)
		}
		if named := report.ContainerNamed(e.Container, e.Sidecar); after && !slices.Contains(out, named) {
			out = append(out, named)
		}
	}
	return out
}

// exitedFirst reports whether e, a container's exit, came before the one
// p keeps (ExitAt): by the kubelet's times where both have one, else by
// receipt.
func (p *Pod) exitedFirst(e report.Event) bool {
	switch {
	case p.ExitAt == nil:
		return true
	case e.Server != nil && p.ExitServer != nil && !e.Server.Equal(*p.ExitServer):
		return e.Server.Before(*p.ExitServer)
	default:
		return e.At.Before(*p.ExitAt)
	}
}

// Pods folds timeline events into pod lifecycles. Apply must not be called
// concurrently; the zero value is not ready for use (NewPods).
type Pods struct {
	byName map[string]*Pod // by key
	order  []string
	keys   *report.Incarnations
	// byPodName: each name's incarnations, in order.
	byPodName map[string][]*Pod
}

// NewPods makes an empty fold.
func NewPods() *Pods {
	return &Pods{byName: map[string]*Pod{}, keys: report.NewIncarnations(), byPodName: map[string][]*Pod{}}
}

// FoldPods folds a whole timeline.
func FoldPods(events []report.Event) *Pods {
	ps := NewPods()
	for _, e := range events {
		ps.Apply(e)
	}
	return ps
}

// Get returns the pod of a key (Pod.Name), or nil.
func (ps *Pods) Get(name string) *Pod { return ps.byName[name] }

// Served returns the pod that answered as name at t: of the pods that bore
// the name, the last one created by t (the first when none was); nil for
// a name no pod of the timeline bore. One name is one pod but for a
// StatefulSet's, whose replacement takes its name after it is gone.
func (ps *Pods) Served(name string, t time.Time) *Pod {
	incs := ps.byPodName[name]
	if len(incs) == 0 {
		return nil
	}
	out := incs[0]
	for _, p := range incs[1:] {
		since := p.FirstSeen
		if p.CreatedAt != nil {
			since = *p.CreatedAt
		}
		if !since.After(t) {
			out = p
		}
	}
	return out
}

// ServedIn reports whether second t of the run (a series row's T, placed
// on the wall clock by clock) belongs to p among the pods of its name:
// whether a response naming it then was p's.
func (ps *Pods) ServedIn(p *Pod, clock report.WallClock, t int64) bool {
	return ps.Served(p.PodName, clock.SecondAt(t)) == p
}

// Incarnations are the pods that bore name, in order.
func (ps *Pods) Incarnations(name string) []*Pod { return ps.byPodName[name] }

// Shared reports whether p's name was borne by more than one pod.
func (ps *Pods) Shared(p *Pod) bool { return len(ps.byPodName[p.PodName]) > 1 }

// All returns the pods in the order they were first seen.
func (ps *Pods) All() []*Pod {
	out := make([]*Pod, 0, len(ps.order))
	for _, name := range ps.order {
		out = append(out, ps.byName[name])
	}
	return out
}

func (ps *Pods) pod(e report.Event) *Pod {
	key := ps.keys.Key(e)
	p := ps.byName[key]
	if p == nil {
		p = &Pod{Name: key, PodName: e.Pod, FirstSeen: e.At}
		ps.byName[key] = p
		ps.order = append(ps.order, key)
		ps.byPodName[e.Pod] = append(ps.byPodName[e.Pod], p)
	}
	if p.Revision == "" {
		p.Revision = e.Revision
	}
	if p.Node == "" {
		p.Node = e.Node
	}
	if p.IP == "" && e.IP != "" {
		p.IP = e.IP
	}
	return p
}

// ByIP returns the pod that had address ip at t: of the pods that had it,
// the last one seen by t (an address freed by a pod that went can be given
// to a new one), the first when none was; nil when no pod had it.
func (ps *Pods) ByIP(ip string, t time.Time) *Pod {
	var out *Pod
	for _, key := range ps.order {
		p := ps.byName[key]
		if p.IP != ip {
			continue
		}
		if out == nil || !p.FirstSeen.After(t) {
			out = p
		}
	}
	return out
}

// Apply folds one event in. Events without a pod are ignored.
func (ps *Pods) Apply(e report.Event) {
	if e.Pod == "" {
		return
	}
	if e.Kind.IsDrain() && len(ps.byPodName[e.Pod]) == 0 {
		// A drain evicts every pod of the node: one the watch never
		// saw is another workload's, not a pod of the run.
		return
	}
	at := e.At
	p := ps.pod(e)
	switch {
	case e.Kind == report.PodPresent:
		p.Present, p.Ready = true, e.Ready
		if e.Ready {
			p.ReadyAt, p.ReadinessConnects = &at, e.ReadinessConnects
		}
	case e.Kind == report.PodCreated:
		p.CreatedAt = &at
	case e.Kind == report.PodReady:
		p.Ready = true
		if p.ReadyAt == nil || p.DeletedAt == nil {
			p.ReadyAt, p.ReadinessConnects = &at, e.ReadinessConnects
		}
	case e.Kind == report.PodUnready:
		p.Ready = false
		switch {
		case p.DeletedAt == nil:
			p.UnreadyAt = &at
		case p.UnreadyAfterDeletion == nil:
			p.UnreadyAfterDeletion = &at
		}
	case e.Kind == report.PodDeletionRequested:
		p.DeletedAt, p.DeletedServer, p.DeletedCommittedAfter, p.Terminating = &at, e.Server, e.CommittedAfter, true
		p.PreStopSleep = time.Duration(e.PreStopSleepS) * time.Second
		if e.GracePeriodS != nil {
			grace := time.Duration(*e.GracePeriodS) * time.Second
			p.GracePeriod = &grace
		}
	case e.Kind == report.EndpointRemoved:
		p.Serving = false
		p.EndpointGoneAt = &at
	case e.Kind.IsEndpoint():
		if e.Ready && p.ListedReadyAt == nil && p.DeletedAt == nil && !p.Present {
			p.ListedReadyAt = &at
		}
		p.Serving = e.Serving
		p.Terminating = p.Terminating || e.Terminating
	case e.Kind == report.ContainerTerminated:
		if e.Killed() {
			p.kills = append(p.kills, e)
		}
		p.exits = append(p.exits, e)
		if p.exitedFirst(e) {
			p.ExitCode, p.ExitAt, p.ExitServer, p.ExitContainer, p.ExitSidecar = e.ExitCode, &at, e.Server, e.Container, e.Sidecar
			p.ExitServicePort = e.ServicePort
		}
	case e.Kind == report.PodGone:
		p.Gone, p.Ready, p.Serving = true, false, false
		p.GoneAt = &at
	}
}
