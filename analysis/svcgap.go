package analysis

import (
	"fmt"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// NoServingEndpoint: for a while the Service had no endpoint that served
// (none ready, none terminating and still serving): there was nowhere to
// send a request, on any node and through any proxy. Not a propagation
// race: capacity.
const NoServingEndpoint = "service-without-serving-endpoint"

// svcGap is a time the Service had no serving endpoint.
type svcGap struct {
	start, end time.Time
	open       bool     // to the end of the run
	went       []string // the pods whose endpoints stopped serving into it, in order
	failed     int
	// evicted: the drain's pod_evicted events of the Service's pods
	// before the gap began (and since any earlier gap began), in order.
	evicted []report.Event
}

// serviceGaps folds the timeline's endpoint events (all nodes) into the
// times no endpoint of the Service served. An endpoint is its pod and
// address (a StatefulSet's replacement reuses the pod's name). The run's
// first endpoint events set the scene: before any, nothing is known, so a
// gap opens only after an endpoint was seen serving.
func serviceGaps(r *report.Report) []svcGap {
	serving := map[string]bool{}
	count := func() int {
		n := 0
		for _, s := range serving {
			if s {
				n++
			}
		}
		return n
	}
	var gaps []svcGap
	var cur *svcGap
	seen := false
	ofService := map[string]bool{} // pods with an endpoint
	var evicted []report.Event     // since the last gap began
	for _, e := range r.Timeline {
		if e.Kind == report.PodEvicted && ofService[e.Pod] {
			evicted = append(evicted, e)
		}
		if !e.Kind.IsEndpoint() || e.Pod == "" {
			continue
		}
		ofService[e.Pod] = true
		key := e.Pod + " " + e.IP
		before := count()
		if e.Kind == report.EndpointRemoved {
			delete(serving, key)
		} else {
			serving[key] = e.Serving
		}
		after := count()
		seen = seen || after > 0
		switch {
		case cur == nil && seen && before > 0 && after == 0:
			cur = &svcGap{start: e.At, went: []string{e.Pod}, evicted: evicted}
			evicted = nil
		case cur != nil && after > 0:
			cur.end = e.At
			gaps = append(gaps, *cur)
			cur = nil
		}
	}
	if cur != nil {
		cur.end, cur.open = r.EndedAt, true
		gaps = append(gaps, *cur)
	}
	return gaps
}

// svcGapJustAfter is the index of a gap that began after f did, within
// tol (how late rollprobe's watch may receive a change), -1 if none.
func svcGapJustAfter(gaps []svcGap, f *report.Failure, tol time.Duration) int {
	began := beganAt(f)
	for i, g := range gaps {
		if g.start.After(began) && !g.start.After(began.Add(tol)) {
			return i
		}
	}
	return -1
}

// svcGapOf is the index of the gap f began in (or within gapSlack after,
// while proxies learn of the endpoint that ended it), -1 if none.
func svcGapOf(gaps []svcGap, f *report.Failure) int {
	for i, g := range gaps {
		if beganInGap(f, g.start, g.end) {
			return i
		}
	}
	return -1
}

func renderNoServingEndpoint(g *group, x facts) (report.Finding, bool) {
	r := x.r
	svc := "the Service"
	if r.Rollout != nil && r.Rollout.Service != "" {
		svc = "service " + r.Rollout.Service
	}
	var ev []string
	total := time.Duration(0)
	for _, gap := range x.svcGaps {
		if gap.failed == 0 || gap.emptiedByBudgetedDrain() {
			continue // none failed, or BudgetTooLoose's
		}
		end := fmt.Sprintf("to %+.2fs (%.1fs)", gap.end.Sub(r.StartedAt).Seconds(), gap.end.Sub(gap.start).Seconds())
		if gap.open {
			end = "to the end of the run"
		}
		total += gap.end.Sub(gap.start)
		ev = append(ev, fmt.Sprintf("%s had no serving endpoint from %+.2fs %s: the last to stop serving was %s; %d requests failed in it or within %s after, while proxies learnt of the endpoint that ended it",
			svc, gap.start.Sub(r.StartedAt).Seconds(), end, strings.Join(gap.went, ", "), gap.failed, gapSlack))
	}
	ev = append(ev, fmt.Sprintf("%d requests failed (%s) from %s: not a propagation race (a preStop sleep does not help a pod that has no successor yet) but capacity: no pod was there to serve", len(g.fails), g.classes(), g.span(r.StartedAt)))
	fix := "keep a pod serving through the change: more replicas, a PodDisruptionBudget (evictions and drains honour it), a strategy that starts the new pod before the old one goes, and a preStop sleep so an old pod serves until its replacement is ready"
	if ro := r.Rollout; ro != nil {
		switch {
		case ro.WorkloadKind() == "StatefulSet":
			ev = append(ev, "a StatefulSet deletes each pod before it creates its replacement under the same name (it has no surge): with one replica, or maxUnavailable as large as the replicas, nothing serves while a pod is recreated")
			fix = "run at least 2 replicas of the StatefulSet (maxUnavailable 1), so one serves while another is recreated"
		case strings.HasPrefix(ro.Trigger, "drain node"):
			ev = append(ev, "the drain evicted the pods that served: no PodDisruptionBudget kept one of them serving until its replacement was ready")
			fix = "add a PodDisruptionBudget (maxUnavailable: 1, or minAvailable below the replicas) so a drain evicts one pod at a time and waits for its replacement, and run at least 2 replicas"
		}
	}
	return report.Finding{
		Title:    fmt.Sprintf("%s had no serving endpoint for %.1fs: requests had nowhere to go", svc, total.Seconds()),
		Evidence: ev,
		Fix:      fix,
		Pods:     g.podList(),
	}, true
}
