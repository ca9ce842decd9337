package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// coverageRun: old pods a and b (on nodes n1 and n2) present and ready
// from the start, deleted at +6 s and +8 s; new pods ready before. rows
// are the series: responses by backend, one row a second.
func coverageRun(rows ...report.SeriesRow) *report.Report {
	return &report.Report{StartedAt: t0,
		Config: report.Config{BackendHeader: "X-Pod-Name"},
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, Node: "n1"},
			{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, Node: "n2"},
			ev(3000, report.PodCreated, "c", "new"), ev(4000, report.PodReady, "c", "new"),
			ev(6000, report.PodDeletionRequested, "a", "old"),
			ev(8000, report.PodDeletionRequested, "b", "old"),
		},
		Series: rows}
}

// inOrder sorts a timeline by time, as the watch delivers it.
func inOrder(tl []report.Event) []report.Event {
	slices.SortStableFunc(tl, func(a, b report.Event) int { return a.At.Compare(b.At) })
	return tl
}

// each is a second's responses: every second from 0 to 9 named by pods.
func each(names map[string]uint64) []report.SeriesRow {
	var rows []report.SeriesRow
	for s := int64(0); s < 10; s++ {
		rows = append(rows, report.SeriesRow{T: s, Backends: names})
	}
	return rows
}

func TestShutdownNotExercised(t *testing.T) {
	// Both old pods answered up to their deletion: nothing to say.
	both := coverageRun(each(map[string]uint64{"a": 50, "b": 50, "c": 50})...)
	analyse(both)
	if f := find(both, ShutdownNotExercised); f != nil {
		t.Fatalf("every pod answered, yet: %+v", f)
	}

	// b answered nothing, ever: named, with its node and deletion time.
	onlyA := coverageRun(each(map[string]uint64{"a": 50, "c": 50})...)
	analyse(onlyA)
	f := find(onlyA, ShutdownNotExercised)
	if f == nil || f.Severity != report.SeverityWarning || strings.Join(f.Pods, ",") != "b" ||
		!strings.Contains(f.Evidence[0], "1 of the 2 pods deleted while serving") ||
		!strings.Contains(f.Evidence[0], "b (on n2, deletion requested at +8.00s)") ||
		!strings.Contains(f.Evidence[0], "by the backend header") {
		t.Fatalf("b never answered: %+v", f)
	}

	// A failure that can have been b's is b met: no finding.
	hit := coverageRun(each(map[string]uint64{"a": 50, "c": 50})...)
	hit.Failures = []report.Failure{fail(8100, "refused", true, "")}
	analyse(hit)
	if f := find(hit, ShutdownNotExercised); f != nil {
		t.Fatalf("a refusal after b's deletion can have been b's, yet: %+v (failure on %q %v)", f, hit.Failures[0].LikelyPod, hit.Failures[0].Candidates)
	}

	// b answered, but not in the 5 s before its deletion (from +3 s):
	// named all the same.
	early := coverageRun(append(
		[]report.SeriesRow{{T: 0, Backends: map[string]uint64{"a": 50, "b": 50}}, {T: 1, Backends: map[string]uint64{"a": 50, "b": 50}}},
		each(map[string]uint64{"a": 50, "c": 50})[2:]...)...)
	analyse(early)
	if f := find(early, ShutdownNotExercised); f == nil || strings.Join(f.Pods, ",") != "b" {
		t.Fatalf("b answered only 7 s before its deletion: %+v", early.Findings)
	}

	// No response named any pod in b's window: unknown, nothing said.
	unnamed := coverageRun(each(map[string]uint64{"a": 50})[:3]...) // to +3 s
	analyse(unnamed)
	if f := find(unnamed, ShutdownNotExercised); f != nil {
		t.Fatalf("nothing named a pod around b's deletion, yet: %+v", f)
	}

	// Requests sent in b's window, every one failed (no response named
	// any pod: a Local policy's entry node without its pod, the
	// DaemonSet having rolled it first), and before it only a named: the
	// path met b at no time, judged on the seconds since it was ready.
	gap := func(named map[string]uint64) *report.Report {
		rows := each(named)[:3]
		for s := int64(3); s < 10; s++ {
			rows = append(rows, report.SeriesRow{T: s, Sent: 100, Failed: 100})
		}
		return coverageRun(rows...)
	}
	blank := gap(map[string]uint64{"a": 50})
	analyse(blank)
	if f := find(blank, ShutdownNotExercised); f == nil || strings.Join(f.Pods, ",") != "b" ||
		!strings.Contains(strings.Join(f.Evidence, " "), "b (on n2, deletion requested at +8.00s; no response named any pod in the 5 s before it, so it is judged from +0.00s, when it was ready and probed: none named it from then on)") {
		t.Fatalf("b's window all failures, b never named before: want b named, judged from the start: %+v", blank.Findings)
	}
	// The same, b named before its window: whether the path met it as it
	// went is unknown.
	namedBefore := gap(map[string]uint64{"a": 50, "b": 50})
	analyse(namedBefore)
	if f := find(namedBefore, ShutdownNotExercised); f != nil {
		t.Fatalf("b answered before a window of failures: unknown, yet: %+v", f)
	}

	// Without a backend header (nor conntrack) nothing says which pod
	// answered: nothing said.
	noHeader := coverageRun(each(map[string]uint64{"a": 50, "c": 50})...)
	noHeader.Config.BackendHeader = ""
	analyse(noHeader)
	if f := find(noHeader, ShutdownNotExercised); f != nil {
		t.Fatalf("no evidence of which pod answered, yet: %+v", f)
	}

	// b unready before its deletion, or out of the Service's endpoints:
	// no traffic was its to take.
	unready := coverageRun(each(map[string]uint64{"a": 50, "c": 50})...)
	unready.Timeline = inOrder(append(unready.Timeline, ev(5000, report.PodUnready, "b", "old")))
	analyse(unready)
	if f := find(unready, ShutdownNotExercised); f != nil {
		t.Fatalf("b was unready when it went, yet: %+v", f)
	}
	removed := coverageRun(each(map[string]uint64{"a": 50, "c": 50})...)
	removed.Timeline = inOrder(append(removed.Timeline, report.Event{At: at(5000), Kind: report.EndpointRemoved, Pod: "b"}))
	analyse(removed)
	if f := find(removed, ShutdownNotExercised); f != nil {
		t.Fatalf("b had left the Service when it went, yet: %+v", f)
	}

	// A blue/green switch of the active Service to the new revision before
	// b's deletion took b's traffic away (the guard holds whatever the
	// kind the report names).
	switched := coverageRun(each(map[string]uint64{"a": 50, "c": 50})...)
	switched.Timeline = inOrder(append(switched.Timeline, report.Event{At: at(7000), Kind: report.ActiveSwitched, Revision: "new"}))
	analyse(switched)
	if f := find(switched, ShutdownNotExercised); f != nil {
		t.Fatalf("the active Service had switched off b's revision, yet: %+v", f)
	}

	// An Argo Rollout's steps move traffic off pods by design.
	argo := coverageRun(each(map[string]uint64{"a": 50, "c": 50})...)
	argo.Rollout = &report.Rollout{TriggerSeenAfterMS: 20, Kind: "Rollout"}
	analyse(argo)
	if f := find(argo, ShutdownNotExercised); f != nil {
		t.Fatalf("an Argo Rollout, yet: %+v", f)
	}
}

// Through a Local-policy NodePort only the entry node's pods are reached:
// the finding says so; conntrack names the pods when the header does not.
func TestShutdownNotExercisedCauses(t *testing.T) {
	local := coverageRun(each(map[string]uint64{"a": 50, "c": 50})...)
	local.Rollout = &report.Rollout{TriggerSeenAfterMS: 20, ExternalTrafficPolicy: "Local", Entry: &report.Entry{Node: "n1", Via: report.ViaNodePort}}
	analyse(local)
	f := find(local, ShutdownNotExercised)
	if f == nil || !strings.Contains(strings.Join(f.Evidence, " | "), "enters n1 at a NodePort under externalTrafficPolicy: Local") {
		t.Fatalf("local policy: %+v", f)
	}

	// One path per node's NodePort (the finding's own fix): each path
	// misses the other node's pod, but the run's traffic met every pod.
	perNode := func(p2 []report.SeriesRow) *report.Report {
		r := coverageRun()
		r.Rollout = &report.Rollout{TriggerSeenAfterMS: 20, ExternalTrafficPolicy: "Local"}
		r.Paths = []report.PathReport{
			{Name: "p1", Entry: &report.Entry{Node: "n1", Via: report.ViaNodePort}, Series: each(map[string]uint64{"a": 50, "c": 50})},
			{Name: "p2", Entry: &report.Entry{Node: "n2", Via: report.ViaNodePort}, Series: p2}}
		analyse(r)
		return r
	}
	if r := perNode(each(map[string]uint64{"b": 50})); find(r, ShutdownNotExercised) != nil {
		t.Fatalf("a path per node, every pod met by one: %+v", find(r, ShutdownNotExercised))
	}
	// n2's path sent requests but no response named a pod: whether it met
	// b is unknown, so the run's traffic is not said to have missed it.
	var unnamed []report.SeriesRow
	for s := int64(0); s < 10; s++ {
		unnamed = append(unnamed, report.SeriesRow{T: s, Sent: 50, OK: 50})
	}
	if r := perNode(unnamed); find(r, ShutdownNotExercised) != nil {
		t.Fatalf("b unknown on p2, yet: %+v", find(r, ShutdownNotExercised))
	}
	// n2's path never met b (only c, as n2's pod): b is named, and the
	// evidence says which path enters which node.
	r := perNode(each(map[string]uint64{"c": 50}))
	f = find(r, ShutdownNotExercised)
	if f == nil || strings.Join(f.Pods, ",") != "b" {
		t.Fatalf("b met by no path: %+v", f)
	}
	if ev := strings.Join(f.Evidence, " | "); !strings.Contains(ev, "path p1 enters n1 at a NodePort") || strings.Contains(ev, "path p2 enters") ||
		!strings.Contains(ev, "on path p1") || !strings.Contains(ev, "on path p2") {
		t.Fatalf("b met by no path: %s", ev)
	}

	// Conntrack's per-second counts, mapped by the pods' addresses.
	ct := coverageRun()
	ct.Config.BackendHeader = ""
	ct.Timeline = append(ct.Timeline,
		endpointAt(0, report.EndpointAdded, "a", "10.0.0.1", true, true),
		endpointAt(0, report.EndpointAdded, "b", "10.0.0.2", true, true),
		endpointAt(4000, report.EndpointAdded, "c", "10.0.0.3", true, true))
	ct.Conntrack = &report.Conntrack{Watching: true}
	for s := int64(0); s < 10; s++ {
		ct.Conntrack.Responses = append(ct.Conntrack.Responses,
			report.ConntrackResponses{Addr: "10.0.0.1:8080", T: s, Connections: 5, Responses: 5},
			report.ConntrackResponses{Addr: "10.0.0.3:8080", T: s, Connections: 5, Responses: 5})
	}
	analyse(ct)
	if f := find(ct, ShutdownNotExercised); f == nil || strings.Join(f.Pods, ",") != "b" || !strings.Contains(f.Evidence[0], "by the conntrack") {
		t.Fatalf("conntrack: %+v", ct.Findings)
	}
}
