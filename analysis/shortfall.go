package analysis

import (
	"time"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// shortfall is a time a drain kept two or more of the Service's pods out
// of service at once while others still served: the pods left carried
// the whole load. It opens at the endpoint event that leaves two or more
// fewer ready endpoints than there were when the drain first evicted one
// of the Service's pods, with two or more of the missing ones evicted by
// it, and closes at the one that brings the count back within one of
// that. Ready, not serving: kube-proxy sends new connections only to
// ready endpoints while any exists (a terminating pod in its preStop
// sleep still serves, but gets nothing new), so the ready ones are those
// that carry the load. A time with no ready endpoint at all is in it too;
// its failures are a svcGap's (when none served either).
type shortfall struct {
	start, end time.Time
	open       bool // to the end of the run
	// before: the ready endpoints when the drain first evicted a pod of
	// the Service; least: the fewest ready in the shortfall (1 or more
	// when any served).
	before, least int
	// out: the evicted pods whose endpoints were not ready when it
	// opened, in eviction order, with their pod_evicted events. An
	// evicted pod whose replacement is ready counts too (a replacement
	// has another name): two pods out, one of them by another cause
	// than the drain, can open a shortfall the drain alone would not.
	out    []report.Event
	failed int
}

// budgeted: a budget selected one of the pods it kept out.
func (s *shortfall) budgeted() bool {
	for _, e := range s.out {
		if len(e.Budgets) > 0 {
			return true
		}
	}
	return false
}

// drainShortfalls folds the timeline's pod_evicted and endpoint events
// into the shortfalls (see shortfall). Without an eviction there is none.
//
// The timeline is in the order rollprobe received its events, and an
// eviction is recorded when the API's answer comes back, while the
// endpoint change it causes comes by a watch: on a loaded machine the
// change can be received first. So an evicted pod whose ready endpoint a
// deletion took out after the trigger and before the first eviction was
// recorded counts among the ready ones before the drain (once its own
// eviction is recorded); and a shortfall can open at an eviction's record
// as well as at an endpoint's change (from when the ready endpoints fell
// short, or the record if that was before the count was known).
func drainShortfalls(r *report.Report) []shortfall {
	ready := map[string]string{} // endpoint (pod and address) -> pod, for the ready ones
	ofService := map[string]bool{}
	evicted := map[string]report.Event{} // the Service's pods the drain evicted, by name
	var order []string                   // their names, in eviction order
	before := -1                         // unknown until the first eviction
	triggered := false
	deletedEarly := map[string]bool{} // pods whose ready endpoint a deletion took out after the trigger, before the first eviction's record
	var short time.Time               // since when the ready ones are 2 or more short (zero when they are not)
	var out []shortfall
	var cur *shortfall
	open := func(at time.Time) {
		readyPods := map[string]bool{}
		for _, p := range ready {
			readyPods[p] = true
		}
		var gone []report.Event
		for _, p := range order {
			if !readyPods[p] {
				gone = append(gone, evicted[p])
			}
		}
		if len(gone) >= 2 {
			cur = &shortfall{start: at, before: before, least: len(ready), out: gone}
		}
	}
	for _, e := range r.Timeline {
		if e.Kind == report.RolloutTriggered {
			triggered = true
		}
		if e.Kind == report.PodEvicted && ofService[e.Pod] {
			if before < 0 {
				before = len(ready)
			}
			if deletedEarly[e.Pod] {
				before++
				delete(deletedEarly, e.Pod)
			}
			if _, again := evicted[e.Pod]; !again {
				order = append(order, e.Pod)
			}
			evicted[e.Pod] = e
			if cur == nil && len(ready) <= before-2 {
				if short.IsZero() {
					short = e.At
				}
				open(short)
			}
			continue
		}
		if !e.Kind.IsEndpoint() || e.Pod == "" {
			continue
		}
		ofService[e.Pod] = true
		key := e.Pod + " " + e.IP
		_, wasReady := ready[key]
		if e.Kind == report.EndpointRemoved || !e.Ready || e.Terminating {
			delete(ready, key)
			if before < 0 && triggered && wasReady && (e.Kind == report.EndpointRemoved || e.Terminating) {
				deletedEarly[e.Pod] = true
			}
		} else {
			ready[key] = e.Pod
			delete(deletedEarly, e.Pod)
		}
		if before < 0 {
			continue
		}
		n := len(ready)
		if n > before-2 {
			short = time.Time{}
		} else if short.IsZero() {
			short = e.At
		}
		if cur != nil {
			cur.least = min(cur.least, n)
			if n >= before-1 {
				cur.end = e.At
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		if n <= before-2 {
			open(e.At)
		}
	}
	if cur != nil {
		cur.end, cur.open = r.EndedAt, true
		out = append(out, *cur)
	}
	return out
}

// shortfallOf is the index of the shortfall f began in (or within
// gapSlack after, while proxies learn of the endpoint that ended it), -1
// if none.
func shortfallOf(s []shortfall, f *report.Failure) int {
	for i, w := range s {
		if beganInGap(f, w.start, w.end) {
			return i
		}
	}
	return -1
}

// overloadedByBudgetedDrain: a pod the drain left serving (named, not
// being terminated) answered 5xx or too late while a shortfall a budget
// let happen was open: what an overloaded server does (sheds load, or
// queues it). A refused or reset connection is not claimed: a pod just
// ready or going away has its own findings for those.
func overloadedByBudgetedDrain(s seen) bool {
	return s.shortfall != nil && s.shortfall.budgeted() && s.pod != nil && !s.terminating &&
		(s.class == prober.HTTP5xx || s.class == prober.Timeout)
}
