package analysis

import (
	"fmt"
	"sort"
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
	failed     int      // the failures it explains, early ones included
	// early: of those, the ones that began before it, within the watch's
	// delay (svcGapJustAfter), and the longest lead among them.
	early     int
	earlyLead time.Duration
	// evicted: the drain's pod_evicted events of the Service's pods
	// before the gap began (and since any earlier gap began), in order.
	evicted []report.Event
	// unready: the pod in went, when its own Ready condition said it
	// had stopped before its endpoint did (see unreadyMarks).
	unready []unreadyMark
}

// unreadyMark: the kubelet's own time of a pod's Ready condition turning
// false, as a bound on our clock (to the second: Server plus 1 s, never
// later than the report came), and when the report came. endpoint is the
// pod's endpoint key (its name and address): a StatefulSet's replacement
// has the name, not the address, and its own readiness.
type unreadyMark struct {
	pod, endpoint string
	by, report    time.Time
}

// endpointKey is an endpoint's identity in serviceGaps' fold.
func endpointKey(pod, ip string) string { return pod + " " + ip }

// unreadyMarks lists the pods' unready transitions by the kubelet's time
// where that is earlier than the report of it, oldest first. An endpoint
// serves exactly while its pod is Ready (the EndpointSlice controller
// copies the condition, for a terminating pod too), so a pod whose Ready
// condition turned false stopped serving then, whatever the EndpointSlice
// still said: under load the kubelet can report it many seconds late (the
// lab, a drain in a warm CI run: containers that exited at once on SIGTERM,
// their pods' Ready false at +2 s and +3 s by the kubelet's time, reported
// at +11.6 s and +20.4 s, the endpoints serving until then). The bound
// takes the node's clock as ours to within the second it rounds to.
func unreadyMarks(r *report.Report) []unreadyMark {
	var marks []unreadyMark
	for _, e := range r.Timeline {
		if e.Kind != report.PodUnready || e.Server == nil || e.Pod == "" || e.IP == "" {
			continue // without an address, no endpoint to tie it to
		}
		if by := e.Server.Add(time.Second); by.Before(e.At) {
			marks = append(marks, unreadyMark{pod: e.Pod, endpoint: endpointKey(e.Pod, e.IP), by: by, report: e.At})
		}
	}
	sort.SliceStable(marks, func(i, j int) bool { return marks[i].by.Before(marks[j].by) })
	return marks
}

// serviceGaps folds the timeline's endpoint events (all nodes) into the
// times no endpoint of the Service served. An endpoint is its pod and
// address (a StatefulSet's replacement reuses the pod's name). The run's
// first endpoint events set the scene: before any, nothing is known, so a
// gap opens only after an endpoint was seen serving. A pod's endpoint stops
// serving from its unready mark (unreadyMarks) until that pod (name and
// address) is reported Ready again: the EndpointSlice's serving, which lags
// the condition it copies, does not undo it.
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
	ofService := map[string]bool{}       // pods with an endpoint
	var evicted []report.Event           // since the last gap began
	unready := map[string]*unreadyMark{} // by endpoint key
	marks := unreadyMarks(r)
	// change applies what moved pod's endpoint key at t and opens or
	// closes a gap on what it did to the count.
	change := func(t time.Time, pod, key string, apply func()) {
		before := count()
		apply()
		after := count()
		seen = seen || after > 0
		switch {
		case cur == nil && seen && before > 0 && after == 0:
			cur = &svcGap{start: t, went: []string{pod}, evicted: evicted}
			if m := unready[key]; m != nil {
				cur.unready = append(cur.unready, *m)
			}
			evicted = nil
		case cur != nil && after > 0:
			cur.end = t
			gaps = append(gaps, *cur)
			cur = nil
		}
	}
	for _, e := range r.Timeline {
		for len(marks) > 0 && !marks[0].by.After(e.At) {
			m := marks[0]
			marks = marks[1:]
			change(m.by, m.pod, m.endpoint, func() {
				unready[m.endpoint] = &m
				if _, ok := serving[m.endpoint]; ok {
					serving[m.endpoint] = false
				}
			})
		}
		if e.Kind == report.PodReady && e.Pod != "" {
			// Ready again, by a report after the one marked.
			key := endpointKey(e.Pod, e.IP)
			if m := unready[key]; m != nil && !e.At.Before(m.report) {
				delete(unready, key)
			}
		}
		if e.Kind == report.PodEvicted && ofService[e.Pod] {
			evicted = append(evicted, e)
		}
		if !e.Kind.IsEndpoint() || e.Pod == "" {
			continue
		}
		ofService[e.Pod] = true
		key := endpointKey(e.Pod, e.IP)
		change(e.At, e.Pod, key, func() {
			if e.Kind == report.EndpointRemoved {
				delete(serving, key)
			} else {
				serving[key] = e.Serving && unready[key] == nil
			}
		})
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

// failedText says how many requests failed in the gap, and of those how
// many began just before it: the nodes' rules or the edge had no endpoint
// left before rollprobe's watch heard of the last one's end.
func (g svcGap) failedText() string {
	s := fmt.Sprintf("%s failed in it or within %s after", nOf(g.failed, "request"), gapSlack)
	if g.early > 0 {
		s += fmt.Sprintf(" (%d of them began up to %.3fs before it: the nodes' rules or the edge had no endpoint left before rollprobe's watch heard)",
			g.early, g.earlyLead.Seconds())
	}
	return s
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
		ev = append(ev, fmt.Sprintf("%s had no serving endpoint from %+.2fs %s: the last to stop serving was %s; %s, while proxies learnt of the endpoint that ended it",
			svc, gap.start.Sub(r.StartedAt).Seconds(), end, strings.Join(gap.went, ", "), gap.failedText()))
		ev = append(ev, gap.unreadyEvidence(r.StartedAt)...)
	}
	ev = append(ev, fmt.Sprintf("%s failed (%s) %s: not a propagation race (a preStop sleep does not help a pod that has no successor yet) but capacity: no pod was there to serve", nOf(len(g.fails), "request"), g.classes(), g.span(r.StartedAt)))
	fix := "keep a pod serving through the change: more replicas, a PodDisruptionBudget (evictions and drains honour it), a strategy that starts the new pod before the old one goes, and a preStop sleep so an old pod serves until its replacement is ready"
	droppedWhole := false
	if len(g.edgeOwn) > 0 {
		own := &group{fails: g.edgeOwn}
		how := "its access log names no backend for them"
		if h := r.Config.BackendHeader; h != "" {
			how += ", or the response lacks " + h + ", which the pods put on every response of their own"
		}
		ev = append(ev, fmt.Sprintf("%d of them (%s) the edge answered itself (%s): with %s empty it had no pod of it to send them to",
			len(g.edgeOwn), own.classes(), how, svc))
		var share []string
		share, droppedWhole = routeShareEvidence(r, x.pods, g.edgeOwn, svc)
		ev = append(ev, share...)
	}
	if ro := r.Rollout; ro != nil {
		switch {
		case ro.WorkloadKind() == "StatefulSet":
			ev = append(ev, "a StatefulSet deletes each pod before it creates its replacement under the same name (it has no surge): with one replica, or maxUnavailable as large as the replicas, nothing serves while a pod is recreated")
			fix = "run at least 2 replicas of the StatefulSet (maxUnavailable 1), so one serves while another is recreated"
		case ro.Change == report.ChangeDrain:
			ev = append(ev, "the drain evicted the pods that served: no PodDisruptionBudget kept one of them serving until its replacement was ready")
			fix = "add a PodDisruptionBudget (maxUnavailable: 1, or minAvailable below the replicas) so a drain evicts one pod at a time and waits for its replacement, and run at least 2 replicas"
		}
	}
	if droppedWhole {
		fix += keepTheRouteFix
	}
	return report.Finding{
		Title:    fmt.Sprintf("%s had no serving endpoint for %.1fs: requests had nowhere to go", svc, total.Seconds()),
		Evidence: ev,
		Fix:      fix,
		Pods:     g.podList(),
	}, true
}

// unreadyEvidence says, for each pod the gap's start took from its own
// Ready condition, how much later the kubelet reported it: the time the
// EndpointSlice went on listing a pod that no longer served.
func (g *svcGap) unreadyEvidence(start time.Time) []string {
	var ev []string
	for _, m := range g.unready {
		ev = append(ev, fmt.Sprintf("%s was not Ready by %+.2fs by the kubelet's own time (its Ready condition's transition, to the second), reported only at %+.2fs: until then its endpoint was still listed as serving",
			m.pod, m.by.Sub(start).Seconds(), m.report.Sub(start).Seconds()))
	}
	return ev
}
