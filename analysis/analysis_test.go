package analysis

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func ev(ms int, kind report.EventKind, pod, rev string) report.Event {
	return report.Event{At: at(ms), Kind: kind, Pod: pod, Revision: rev}
}

// endpointAt is an endpoint event of pod at ip, terminating when kind says so.
func endpointAt(ms int, kind report.EventKind, pod, ip string, ready, serving bool) report.Event {
	return report.Event{At: at(ms), Kind: kind, Pod: pod, IP: ip, Ready: ready, Serving: serving, Terminating: kind == report.EndpointTerminating}
}

// evictedAt is a drain's eviction of pod (old revision) from node n2.
func evictedAt(ms int, pod string, budgets []string) report.Event {
	return report.Event{At: at(ms), Kind: report.PodEvicted, Pod: pod, Node: "n2", Revision: "old", Budgets: budgets}
}

func fail(ms int, class string, fresh bool, backend string) report.Failure {
	return report.Failure{Intended: at(ms), Start: at(ms), End: at(ms + 2), Class: class, Fresh: fresh, Backend: backend}
}

// cutInFlight marks an eof as closed after the server had the request.
func cutInFlight(f report.Failure) report.Failure {
	f.ServerClose = report.CloseAfterRequest
	return f
}

// analyse puts Explain's results into r, as the rollout flow does. A
// report without a rollout section gets one whose trigger was received
// 20 ms after it was sent: the watch's delay bound, hence the tolerance.
func analyse(r *report.Report) {
	if r.Rollout == nil {
		r.Rollout = &report.Rollout{TriggerSeenAfterMS: 20}
	}
	x := Explain(r)
	r.Failures, r.Attribution, r.Outages, r.Pods, r.Findings = x.Failures, x.Attribution, x.Outages, x.Pods, x.Findings
}

func find(r *report.Report, id string) *report.Finding {
	for i := range r.Findings {
		if r.Findings[i].ID == id {
			return &r.Findings[i]
		}
	}
	return nil
}

// One outage over two pods' deletions (a rollout whose pods go one after
// another while the endpoint changes lag): its context names both, not only
// the one terminating when it began, and not the pod deleted after it ended.
func TestOutageContextNamesEveryPodTerminatingInIt(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "c", Revision: "old", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		ev(5600, report.PodGone, "a", "old"),
		ev(6000, report.PodDeletionRequested, "b", "old"),
		ev(6600, report.PodGone, "b", "old"),
		ev(9000, report.PodDeletionRequested, "c", "old"),
		ev(9600, report.PodGone, "c", "old"),
	}, Failures: []report.Failure{
		fail(5020, "refused", true, ""), fail(5500, "refused", true, ""), fail(6100, "refused", true, ""),
		fail(6400, "refused", true, ""),
	}}
	analyse(r)
	if len(r.Outages) != 1 {
		t.Fatalf("outages %+v, want one", r.Outages)
	}
	if got := r.Outages[0].Context; got != "while terminating: a, b" {
		t.Errorf("outage context %q, want both pods deleted in it and not c", got)
	}
	// a alone was terminating (b live and ready) for the first two; b
	// alone, a gone, for the last two.
	if got, want := r.Outages[0].Pods, []report.OutagePod{{Pod: "a", Failures: 2, Certain: 2}, {Pod: "b", Failures: 2, Certain: 2}}; !slices.Equal(got, want) {
		t.Errorf("outage pods %+v, want %+v", got, want)
	}
}

// An outage that begins after a pod is gone does not call it terminating
// (a StatefulSet run named its replaced pod, gone 2.6 s before, among the
// terminating ones): the pods its failures were put on that were gone
// before it began are said apart, as already gone; the pod deleted in it
// is terminating. Pod a is gone at +3.825s; a connect timeout at +9.405s
// went to its address (conntrack: a proxy still routed there), and b was
// deleted at +9.3s and refused one at +9.5s.
func TestOutageContextTellsGonePodsFromTerminatingOnes(t *testing.T) {
	r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 20},
		Timeline: append(aGoneAt3825(), ev(9300, report.PodDeletionRequested, "b", "old")), Failures: []report.Failure{
			{Intended: at(3500), Start: at(3500), End: at(4500), Class: report.ClassConnectTimeout, Fresh: true, PodAddr: "10.0.0.1:8080", LocalAddr: "0.0.0.0:40000"},
			{Intended: at(9405), Start: at(9405), End: at(10405), Class: report.ClassConnectTimeout, Fresh: true, PodAddr: "10.0.0.1:8080", LocalAddr: "0.0.0.0:40001"},
			{Intended: at(9500), Start: at(9500), End: at(9502), Class: report.ClassRefused, Fresh: true, PodAddr: "10.0.0.2:8080", LocalAddr: "0.0.0.0:40002"},
		}}
	analyse(r)
	var got []string
	for _, o := range r.Outages {
		got = append(got, o.Context)
	}
	if want := []string{"while terminating: a", "while terminating: b; already gone: a"}; !slices.Equal(got, want) {
		t.Errorf("outage contexts %q, want %q", got, want)
	}
}

// A naive rollout: old pod a is deleted at +5s and stops listening; requests
// refused until +5.8s, then a connect timeout to its vanished IP at +6.2s.
func TestPropagationFinding(t *testing.T) {
	exit := int32(0)
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		ev(4000, report.PodCreated, "n", "new"),
		ev(4900, report.PodReady, "n", "new"),
		ev(5000, report.PodDeletionRequested, "a", "old"),
		{At: at(5010), Kind: report.ContainerTerminated, Pod: "a", Revision: "old", ExitCode: &exit},
		ev(5300, report.EndpointRemoved, "a", ""),
		ev(5400, report.PodGone, "a", "old"),
	}, Failures: []report.Failure{
		fail(5020, "refused", true, ""), fail(5500, "refused", true, ""), fail(5800, "reset", true, ""),
		fail(6200, "connect_timeout", true, ""),
	}}
	analyse(r)
	if len(r.Outages) != 1 || r.Outages[0].Count != 4 || r.Outages[0].ByClass["refused"] != 2 {
		t.Fatalf("outages %+v", r.Outages)
	}
	if !strings.Contains(r.Outages[0].Context, "terminating: a") {
		t.Errorf("outage context %q", r.Outages[0].Context)
	}
	// n had turned ready 0.12 s before: a new pod not listening yet
	// refuses as well, so the refusal is a's or n's.
	f := r.Failures[0]
	if f.LikelyPod != "a" || f.Confidence != 0.5 || strings.Join(f.Candidates, ",") != "a,n" ||
		!strings.Contains(f.Context, "0.02s after a's deletion was requested") ||
		!strings.Contains(f.Context, "still listed") {
		t.Errorf("failure 0: %+v", f)
	}
	fd := find(r, StopsBeforePropagation)
	if fd == nil || fd.Severity != "error" || len(fd.Pods) != 1 || fd.Pods[0] != "a" {
		t.Fatalf("findings %+v", r.Findings)
	}
	// The last failure came 1.2s after the deletion: the preStop sleep
	// suggested must cover that with a margin (1.2*1.5+1 = 2.8 -> 3).
	if !strings.Contains(fd.Fix, "at least 3s") || !strings.Contains(strings.Join(fd.Evidence, " "), "1.20s") {
		t.Errorf("finding %+v", fd)
	}
	if n := Explain(r).PreStopSeconds; n != 3 {
		t.Errorf("PreStopSeconds %d, want the finding's 3", n)
	}
	if find(r, GraceTooShort) != nil || find(r, Unexplained) != nil {
		t.Errorf("unexpected findings %+v", r.Findings)
	}
}

func TestKeepAliveReadyAndKillFindings(t *testing.T) {
	kill := int32(137)
	r := &report.Report{StartedAt: t0, Config: report.Config{BackendHeader: "X-Pod-Name"},
		Totals: report.Totals{ByBackend: map[string]uint64{"a": 10, "n": 5}},
		Series: []report.SeriesRow{{T: 4, Backends: map[string]uint64{"a": 4}}, {T: 5, Backends: map[string]uint64{"a": 3}}, {T: 6, Backends: map[string]uint64{"a": 2}}},
		Timeline: []report.Event{
			ev(1000, report.PodCreated, "n", "new"),
			ev(2000, report.PodReady, "n", "new"),
			{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
			ev(5000, report.PodDeletionRequested, "a", "old"),
			{At: at(8000), Kind: report.ContainerTerminated, Pod: "a", ExitCode: &kill},
			ev(8100, report.PodGone, "a", "old"),
		},
		Failures: []report.Failure{
			fail(2100, "refused", true, ""),                  // right after n turned ready
			cutInFlight(fail(5200, "eof_reused", false, "")), // kept-alive connection cut at a's termination
			fail(5300, "http_5xx", true, "a"),                // the app named itself
			fail(60000, "timeout", true, ""),                 // nothing happening
		}}
	analyse(r)
	for _, id := range []string{ReadyTooEarly, AbruptKeepAliveClose, ServerErrors, GraceTooShort, Unexplained} {
		if find(r, id) == nil {
			t.Errorf("missing finding %s; have %+v", id, r.Findings)
		}
	}
	if find(r, StopsBeforePropagation) != nil {
		t.Errorf("no refused after a deletion, yet a propagation finding")
	}
	if fd := find(r, AbruptKeepAliveClose); fd != nil && !strings.Contains(strings.Join(fd.Evidence, " "), "1 were closed after the server had the request") {
		t.Errorf("the keep-alive finding does not say how the connection was closed: %+v", fd.Evidence)
	}
	if fd := find(r, ServerErrors); fd != nil && !strings.Contains(strings.Join(fd.Evidence, " "), "the app itself") {
		t.Errorf("5xx source: %+v", fd)
	}
	if len(r.Outages) != 3 {
		t.Errorf("%d outages, want 3 separate windows: %+v", len(r.Outages), r.Outages)
	}
	var a *report.PodTraffic
	for i := range r.Pods {
		if r.Pods[i].Pod == "a" {
			a = &r.Pods[i]
		}
	}
	// Deleted at +5.0s: rows t=6 (and later) count as after the deletion.
	if a == nil || a.Served != 10 || a.ServedAfterDeletion != 2 || a.ExitCode == nil || *a.ExitCode != 137 {
		t.Fatalf("pod a traffic %+v", a)
	}
}

func TestNoFailuresNoFindings(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{ev(5000, report.PodDeletionRequested, "a", "old")}}
	analyse(r)
	if len(r.Findings) != 0 || len(r.Outages) != 0 {
		t.Fatalf("findings %+v outages %+v", r.Findings, r.Outages)
	}
}

// A rollout whose new pods turn ready before they listen (no readiness
// probe), while the old pods shut down at once: a refusal after the old pod
// is gone can only be the new pod's; a connect timeout, never.
func TestClassNarrowsTheCandidates(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		ev(5000, report.PodCreated, "n", "new"),
		ev(5050, report.PodReady, "n", "new"),
		ev(5100, report.PodDeletionRequested, "a", "old"),
		ev(5600, report.PodGone, "a", "old"),
	}, Failures: []report.Failure{
		fail(5200, "refused", true, ""),         // a is still there: a's
		fail(6500, "refused", true, ""),         // a is gone: n's
		fail(6600, "connect_timeout", true, ""), // to a's vanished IP
	}}
	analyse(r)
	for i, want := range []string{"a", "n", "a"} {
		if got := r.Failures[i].LikelyPod; got != want {
			t.Errorf("failure %d (%s at %s): likely pod %q, want %q (%s)", i, r.Failures[i].Class,
				r.Failures[i].Intended.Sub(t0), got, want, r.Failures[i].Context)
		}
	}
	if fd := find(r, ReadyTooEarly); fd == nil || len(fd.Pods) != 1 || fd.Pods[0] != "n" {
		t.Errorf("ready-before-serving finding: %+v", r.Findings)
	}
	if fd := find(r, StopsBeforePropagation); fd == nil || len(fd.Pods) != 1 || fd.Pods[0] != "a" {
		t.Errorf("propagation finding: %+v", r.Findings)
	}
}

// The preStop advice names the hook the cluster's version has, the same
// text the doctor gives.
func TestPropagationAdviceFollowsServerVersion(t *testing.T) {
	for _, tt := range []struct{ version, want string }{
		{"1.36", "lifecycle.preStop.sleep.seconds: 2)"},
		{"1.29", `exec.command: ["sleep", "2"] (the sleep action needs Kubernetes 1.30)`},
		{"", "Kubernetes 1.30+"},
	} {
		r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{ServerVersion: tt.version, TriggerSeenAfterMS: 20}, Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Ready: true},
			ev(5000, report.PodDeletionRequested, "a", "old"),
		}, Failures: []report.Failure{fail(5100, "refused", true, "")}}
		analyse(r)
		if fd := find(r, StopsBeforePropagation); fd == nil || !strings.Contains(fd.Fix, tt.want) {
			t.Errorf("server %q: fix %+v, want %q", tt.version, fd, tt.want)
		}
	}
}

// Explain leaves the report it reads as it was.
func TestExplainDoesNotChangeTheReport(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{ev(5000, report.PodDeletionRequested, "a", "old")},
		Failures: []report.Failure{fail(5100, "refused", true, "")}}
	x := Explain(r)
	if r.Failures[0].LikelyPod != "" || r.Findings != nil || x.Failures[0].LikelyPod != "a" {
		t.Fatalf("report failure %+v, explained %+v", r.Failures[0], x.Failures[0])
	}
}

// The fold reads the typed conditions: the pod's Ready on pod_present, the
// endpoint's Serving and Terminating on endpoint events.
func TestPodsFold(t *testing.T) {
	pods := FoldPods([]report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old"},
		{At: at(10), Kind: report.EndpointAdded, Pod: "a", Ready: true, Serving: true},
		{At: at(5000), Kind: report.PodDeletionRequested, Pod: "a"},
		{At: at(5100), Kind: report.EndpointTerminating, Pod: "a", Serving: true, Terminating: true},
		{At: at(5200), Kind: report.EndpointNotServing, Pod: "a", Terminating: true},
	})
	a, b := pods.Get("a"), pods.Get("b")
	if !a.Present || !a.Ready || a.Serving || !a.Terminating || a.ReadyAt == nil || a.DeletedAt == nil || a.Revision != "old" {
		t.Errorf("a: %+v", a)
	}
	if b.Ready || b.ReadyAt != nil {
		t.Errorf("b was present but not ready: %+v", b)
	}
	if all := pods.All(); len(all) != 2 || all[0].Name != "a" {
		t.Errorf("order %+v", all)
	}
}

// The demo's defect: three old pods deleted at +3.78, +4.04 and +4.28 s
// (receive times), failures from +3.79 s. A failure is put only on pods
// whose deletion can have acted when it began; the closest preceding
// deletion wins; the confidence says how many were possible; the preStop
// fix covers the window counted from the earliest possible deletion.
func TestCausalityAcrossOverlappingTerminations(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "p1", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "p2", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "p3", Ready: true},
		ev(3780, report.PodDeletionRequested, "p1", "old"),
		ev(4040, report.PodDeletionRequested, "p2", "old"),
		ev(4280, report.PodDeletionRequested, "p3", "old"),
	}, Failures: []report.Failure{
		fail(3790, "refused", true, ""),         // only p1 was deleted: certain
		fail(4000, "refused", true, ""),         // still only p1 (p2 received 40 ms later, beyond the 20 ms tolerance)
		fail(4030, "refused", true, ""),         // p2 received 10 ms later: within tolerance, p1 precedes
		fail(4500, "connect_timeout", true, ""), // all three possible
	}}
	analyse(r)
	want := []struct {
		pod        string
		confidence float64
		candidates int
	}{{"p1", 1, 0}, {"p1", 1, 0}, {"p1", 0.5, 2}, {"p3", 0.33, 3}}
	for i, w := range want {
		f := r.Failures[i]
		if f.LikelyPod != w.pod || f.Confidence != w.confidence || len(f.Candidates) != w.candidates {
			t.Errorf("failure %d at %s: %s (confidence %v, candidates %v), want %s (%v, %d)", i, f.Start.Sub(t0),
				f.LikelyPod, f.Confidence, f.Candidates, w.pod, w.confidence, w.candidates)
		}
	}
	if !strings.Contains(r.Failures[2].Context, "0.25s after p1's deletion") {
		t.Errorf("context %q", r.Failures[2].Context)
	}
	if a := r.Attribution; a == nil || a.Certain != 2 || a.Ambiguous != 2 || a.ReceiveToleranceMS != 20 {
		t.Errorf("attribution %+v", a)
	}
	// Certain: 0.22 s after p1's deletion. Conservative: 4.5 - 3.78 =
	// 0.72 s, from the earliest candidate: ceil(0.72*1.5+1) = 3.
	fd := find(r, StopsBeforePropagation)
	if fd == nil || !strings.Contains(fd.Fix, "at least 3s") || !strings.Contains(strings.Join(fd.Evidence, " "), "2 of them could have come from more than one") {
		t.Fatalf("finding %+v", fd)
	}
}

// A failure that began a moment before rollprobe received the deletion
// that caused it (within the tolerance) says so, never "0.00s after".
func TestFailureBeforeTheReceivedDeletion(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
	}, Failures: []report.Failure{fail(4990, "refused", true, "")}}
	analyse(r)
	f := r.Failures[0]
	if f.LikelyPod != "a" || !strings.Contains(f.Context, "began 0.01s before rollprobe received a's deletion") || strings.Contains(f.Context, "0.00s after") {
		t.Fatalf("failure %+v", f)
	}
}

// The tolerance is measured and bounds every pod change's own delay: the
// largest receipt delay of a pod change with a server time, or the
// trigger's round trip if that is larger; 1 s assumed (and said) when
// nothing measured it.
func TestToleranceIsMeasured(t *testing.T) {
	server := func(ms int) *time.Time { x := at(ms); return &x }
	r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 15}, Timeline: []report.Event{
		{At: at(2400), Server: server(2000), Kind: report.PodCreated, Pod: "n1"},
		{At: at(3080), Server: server(3000), Kind: report.PodDeletionRequested, Pod: "a"},
		{At: at(3500), Server: server(4000), Kind: report.PodDeletionRequested, Pod: "b"}, // clock skew: skipped
		{At: at(3900), Server: server(3000), Kind: report.PodReady, Pod: "n1"},
		{At: at(3950), Server: server(1000), Kind: report.EndpointAdded, Pod: "n1"}, // not the object's own time
	}}
	tol, source := tolerance(r)
	if tol != 900*time.Millisecond || !strings.Contains(source, "largest receipt delay") {
		t.Errorf("tolerance %s from %q, want 900ms from the pod changes", tol, source)
	}
	r.Rollout.TriggerSeenAfterMS = 1500
	if tol, source = tolerance(r); tol != 1500*time.Millisecond || !strings.Contains(source, "trigger") {
		t.Errorf("tolerance %s from %q, want 1.5s from the trigger", tol, source)
	}
	if tol, source = tolerance(&report.Report{}); tol != time.Second || !strings.Contains(source, "assumed") {
		t.Errorf("unmeasured: %s %q", tol, source)
	}
}

// Each class against a terminating pod and a pod that just turned ready:
// connect_timeout only to a pod whose IP can have vanished, refusals after
// a pod is gone only to the new one, cuts on reused connections to the
// terminating one.
func TestClassesPickTheirPods(t *testing.T) {
	exit := int32(0)
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Ready: true},
		ev(1000, report.PodCreated, "n", "new"),
		ev(2000, report.PodReady, "n", "new"),
		ev(3000, report.PodDeletionRequested, "a", "old"),
		ev(3100, report.PodDeletionRequested, "b", "old"),
		{At: at(3150), Kind: report.ContainerTerminated, Pod: "a", ExitCode: &exit},
		ev(9000, report.PodGone, "a", "old"),
	}, Failures: []report.Failure{
		fail(3200, "connect_timeout", true, ""), // a's container had exited, b's had not: a
		fail(3300, "eof_reused", false, ""),     // both terminating: the closest preceding, b
		fail(9500, "refused", true, ""),         // a gone: b, still there
		fail(2500, "refused", true, ""),         // nothing terminating: n, just ready
	}}
	analyse(r)
	for i, want := range []string{"a", "b", "b", "n"} {
		if got := r.Failures[i].LikelyPod; got != want {
			t.Errorf("failure %d (%s): %q, want %q (%s)", i, r.Failures[i].Class, got, want, r.Failures[i].Context)
		}
	}
	// eof_reused: a and b terminating (a cut connection is not a pod that
	// just started); the closest preceding deletion is b's.
	if r.Failures[0].Confidence != 1 || r.Failures[1].Confidence != 0.5 {
		t.Errorf("confidence %v %v", r.Failures[0].Confidence, r.Failures[1].Confidence)
	}
}

// An outage runs from its first failure's intended time to its last one's,
// whatever the failures' own durations (a connect timeout lasts 2 s).
func TestOutageIsIntendedToIntended(t *testing.T) {
	r := &report.Report{StartedAt: t0, Failures: []report.Failure{
		{Intended: at(3205), Start: at(3205), End: at(5205), Class: "connect_timeout", Fresh: true},
		{Intended: at(4175), Start: at(4175), End: at(4176), Class: "refused", Fresh: true},
	}}
	analyse(r)
	if len(r.Outages) != 1 || !r.Outages[0].Start.Equal(at(3205)) || !r.Outages[0].End.Equal(at(4175)) || r.Outages[0].DurationS != 0.97 {
		t.Fatalf("outages %+v", r.Outages)
	}
}

// Successes that needed a retransmitted SYN in an outage's seconds are
// counted in it and named by the propagation finding.
func TestSlowConnectsBelongToTheirOutage(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
	}, Failures: []report.Failure{fail(5100, "connect_timeout", true, ""), fail(5900, "refused", true, "")},
		Series: []report.SeriesRow{{T: 4, SlowConnects: 7}, {T: 5, SlowConnects: 2}, {T: 6}},
	}
	analyse(r)
	if len(r.Outages) != 1 || r.Outages[0].SlowConnects != 2 {
		t.Fatalf("outages %+v", r.Outages)
	}
	if fd := find(r, StopsBeforePropagation); fd == nil || !strings.Contains(strings.Join(fd.Evidence, " "), "2 more requests in the same outages succeeded only after their SYN was retransmitted") {
		t.Fatalf("finding %+v", fd)
	}
}

// A naive rollout surges: new pod n2 turns ready after old pod a's
// deletion. A refusal then may be a's (stopped) or n2's (not listening
// yet): both are candidates, a is the likely one. A reset needs a server
// that was listening and stopped: a's alone.
func TestTerminatingPodsAreTheLikelyCause(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Ready: true},
		ev(1000, report.PodCreated, "n1", "new"),
		ev(1500, report.PodReady, "n1", "new"),
		ev(2000, report.PodDeletionRequested, "a", "old"),
		ev(2500, report.PodCreated, "n2", "new"),
		ev(2800, report.PodReady, "n2", "new"),
	}, Failures: []report.Failure{fail(2900, "refused", true, ""), fail(2950, "reset", true, "")}}
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "a" || strings.Join(f.Candidates, ",") != "a,n1,n2" {
		t.Errorf("refusal: %s among %v", f.LikelyPod, f.Candidates)
	}
	if f := r.Failures[1]; f.LikelyPod != "a" || f.Confidence != 1 {
		t.Errorf("reset: %s (confidence %v, candidates %v)", f.LikelyPod, f.Confidence, f.Candidates)
	}
}

// A connect timeout means no one answered the first SYN, sent when the
// request began: a pod deleted while the attempt waited out its 2 s cannot
// have caused it, however long the wait.
func TestConnectTimeoutIsCausedByWhenItBegan(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		ev(6500, report.PodDeletionRequested, "b", "old"),
	}, Failures: []report.Failure{{Intended: at(6000), Start: at(6000), End: at(8000), Class: "connect_timeout", Fresh: true}}}
	analyse(r)
	f := r.Failures[0]
	if f.LikelyPod != "a" || f.Confidence != 1 || len(f.Candidates) != 0 {
		t.Fatalf("likely %q (confidence %v, candidates %v): b's deletion came 0.5s after the SYN went unanswered (%s)",
			f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}
}

// A deletion whose request time the apiserver recorded can have acted only
// from that time on (floored to its second, it is never later than the
// request): a pod whose deletion the apiserver dates after the failure is
// no candidate, though the run's tolerance (set by a slower change) would
// have let it in.
func TestDeletionCountsFromItsServerTime(t *testing.T) {
	server := func(ms int) *time.Time { x := at(ms); return &x }
	del := func(ms int, pod string, srv int) report.Event {
		e := ev(ms, report.PodDeletionRequested, pod, "old")
		e.Server = server(srv)
		return e
	}
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		del(5900, "a", 5000), // received 0.9 s late: the tolerance is 0.9 s
		del(6050, "b", 6000),
	}, Failures: []report.Failure{fail(5950, "refused", true, "")}}
	analyse(r)
	f := r.Failures[0]
	if f.LikelyPod != "a" || f.Confidence != 1 {
		t.Fatalf("likely %q (confidence %v, candidates %v): the apiserver dates b's deletion after the failure (%s)",
			f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}
	if r.Attribution.ReceiveToleranceMS != 900 || !strings.Contains(r.Attribution.ToleranceSource, "apiserver's own time of the request") {
		t.Fatalf("attribution %+v", *r.Attribution)
	}

	// An apiserver clock ahead of ours moves every such bound back by its lead.
	r.Timeline = append(r.Timeline, report.Event{At: at(7000), Server: server(7300), Kind: report.PodCreated, Pod: "n", Revision: "new"})
	r.Failures = []report.Failure{fail(5950, "refused", true, "")}
	analyse(r)
	if f := r.Failures[0]; f.Confidence == 1 || !strings.Contains(r.Attribution.ToleranceSource, "300ms the apiserver's clock was seen ahead") {
		t.Fatalf("with the apiserver 300 ms ahead, b's deletion (6.0 s by its clock) can have acted by 5.95 s: %+v; %s", f, r.Attribution.ToleranceSource)
	}
}

// Probing from the cluster, connection failures that go on clearly longer
// on one node than on the others name that node; a spread under a second
// names none.
func TestNodeRoutesLate(t *testing.T) {
	nodeFail := func(ms int, node string) report.Failure {
		f := fail(ms, "refused", true, "")
		f.Node = node
		return f
	}
	for _, tc := range []struct {
		name  string
		fails []report.Failure
		want  string // the finding's title; "" for none
	}{
		{"one node 2.5 s later", []report.Failure{nodeFail(3000, "a"), nodeFail(4000, "a"), nodeFail(3000, "b"), nodeFail(6500, "b")},
			"kube-proxy on node b routed to terminating pods 2.5s longer than elsewhere"},
		{"only one node failed, for 1.5 s", []report.Failure{nodeFail(3000, "b"), nodeFail(4500, "b")},
			"kube-proxy on node b routed to terminating pods 1.5s longer than elsewhere"},
		{"both alike", []report.Failure{nodeFail(3000, "a"), nodeFail(4000, "a"), nodeFail(3100, "b"), nodeFail(4400, "b")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &report.Report{StartedAt: t0, Failures: tc.fails,
				Probers: []report.ProberInfo{{Pod: "p1", Node: "a"}, {Pod: "p2", Node: "b"}}}
			checkNodeFinding(t, r, tc.want)
		})
	}
	// Probed at node a's NodePort, node a routes every prober's traffic:
	// the probers' nodes say nothing of their kube-proxies.
	r := &report.Report{StartedAt: t0, Failures: []report.Failure{nodeFail(3000, "a"), nodeFail(4000, "a"), nodeFail(3000, "b"), nodeFail(6500, "b")},
		Probers: []report.ProberInfo{{Pod: "p1", Node: "a"}, {Pod: "p2", Node: "b"}},
		Rollout: &report.Rollout{Entry: &report.Entry{Via: report.ViaNodePort, Node: "a", Port: 30080}}}
	checkNodeFinding(t, r, "")
}

// checkNodeFinding analyses r and checks its node finding's title (want
// "": none).
func checkNodeFinding(t *testing.T, r *report.Report, want string) {
	t.Helper()
	analyse(r)
	fd := find(r, NodeRoutesLate)
	switch {
	case want == "" && fd != nil:
		t.Fatalf("unexpected finding %+v", fd)
	case want != "" && (fd == nil || fd.Title != want):
		t.Fatalf("finding %+v, want %q", fd, want)
	}
}

// With several paths, each path's probers are compared among themselves:
// a node whose only prober probed the ingress says nothing of how the
// Service's traffic was routed (no finding from the Service's failures on
// one node alone); two nodes of one path still are.
func TestNodeRoutesLateByPath(t *testing.T) {
	nodeFail := func(ms int, node, path string) report.Failure {
		f := fail(ms, "refused", true, "")
		f.Node, f.Path = node, path
		return f
	}
	for _, tc := range []struct {
		name    string
		probers []report.ProberInfo
		fails   []report.Failure
		want    string // the finding's title; "" for none
	}{
		{"one prober a path, on two nodes", []report.ProberInfo{{Pod: "p1", Node: "a", Path: "svc"}, {Pod: "p2", Node: "b", Path: "edge"}},
			[]report.Failure{nodeFail(3000, "a", "svc"), nodeFail(4500, "a", "svc")}, ""},
		{"two probers a path, one node later on svc", []report.ProberInfo{{Pod: "p1", Node: "a", Path: "svc"}, {Pod: "p2", Node: "b", Path: "svc"},
			{Pod: "p3", Node: "a", Path: "edge"}, {Pod: "p4", Node: "b", Path: "edge"}},
			[]report.Failure{nodeFail(3000, "a", "svc"), nodeFail(3000, "b", "svc"), nodeFail(5500, "b", "svc"), nodeFail(6000, "a", "edge")},
			"kube-proxy on node b routed to terminating pods 2.5s longer than elsewhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &report.Report{StartedAt: t0, Failures: tc.fails, Probers: tc.probers}
			checkNodeFinding(t, r, tc.want)
		})
	}
}

// Every finding ID the rules can give is one the report's JSON Schema
// allows: a report with a new finding must still validate.
func TestFindingIDsAreInTheSchema(t *testing.T) {
	for _, rl := range rules {
		checkIDInSchema(t, rl.id)
	}
}

func checkIDInSchema(t *testing.T, id string) {
	t.Helper()
	schema, err := os.ReadFile("../report/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(schema), `"`+id+`"`) {
		t.Errorf("finding %s is not in report.schema.json's findings[].id enum", id)
	}
}

// checkDocumentedID: a finding given outside the rules (CanaryShare) is in
// the schema and has its page, as the rules' are.
func checkDocumentedID(t *testing.T, id string) {
	t.Helper()
	checkIDInSchema(t, id)
	checkFindingPage(t, id)
}

// The demo's case: three old pods deleted 0.25 s apart within one second
// of the apiserver's clock, so its floored times cannot tell them apart.
// The revision clock's bounds can: a failure before b's deletion was
// committed is a's for certain; later ones stay ambiguous, and the closest
// preceding deletion is the likely pod.
func TestCommitBoundsSeparateDeletionsWithinOneSecond(t *testing.T) {
	tm := func(ms int) *time.Time { x := at(ms); return &x }
	del := func(ms int, pod string, committedAfter int) report.Event {
		e := ev(ms, report.PodDeletionRequested, pod, "old")
		e.Server = tm(3000) // all three within second 3 of the apiserver's clock
		if committedAfter >= 0 {
			e.CommittedAfter = tm(committedAfter)
		}
		return e
	}
	timeline := func(bounds ...int) []report.Event {
		tl := []report.Event{}
		for _, p := range []string{"a", "b", "c"} {
			tl = append(tl, report.Event{At: at(0), Kind: report.PodPresent, Pod: p, Revision: "old", Ready: true})
		}
		return append(tl, del(3780, "a", bounds[0]), del(4040, "b", bounds[1]), del(4280, "c", bounds[2]))
	}
	failures := func() []report.Failure {
		return []report.Failure{fail(3790, "refused", true, ""), fail(3900, "refused", true, ""),
			fail(4100, "refused", true, ""), fail(4300, "refused", true, "")}
	}

	r := &report.Report{StartedAt: t0, Timeline: timeline(3700, 3980, 4200), Failures: failures()}
	analyse(r)
	want := []struct {
		pod   string
		cands string
	}{{"a", ""}, {"a", ""}, {"b", "a,b"}, {"c", "a,b,c"}}
	for i, w := range want {
		f := r.Failures[i]
		if f.LikelyPod != w.pod || strings.Join(f.Candidates, ",") != w.cands {
			t.Errorf("failure at %v: likely %q candidates %v, want %q among %q (%s)", f.Start.Sub(t0), f.LikelyPod, f.Candidates, w.pod, w.cands, f.Context)
		}
	}
	if r.Attribution.Certain != 2 || r.Attribution.Ambiguous != 2 {
		t.Errorf("attribution %+v", *r.Attribution)
	}

	// Without the bounds, the floored server times make all three
	// candidates for every failure.
	r = &report.Report{StartedAt: t0, Timeline: timeline(-1, -1, -1), Failures: failures()}
	analyse(r)
	if r.Attribution.Certain != 0 || len(r.Failures[0].Candidates) != 3 {
		t.Errorf("without commit bounds: attribution %+v, first candidates %v", *r.Attribution, r.Failures[0].Candidates)
	}

	// A bound earlier than the floored server time is not used over it.
	r = &report.Report{StartedAt: t0, Timeline: timeline(3700, 2500, 2500), Failures: failures()}
	analyse(r)
	if len(r.Failures[0].Candidates) != 3 {
		t.Errorf("bounds before the server's second: first candidates %v", r.Failures[0].Candidates)
	}
}

// A refusal needs nothing listening. A new pod whose readiness probe
// connects where the Service sends traffic was listening when it turned
// ready, so it is no candidate for a refusal (the naive sample); one
// without such a probe is (late-ready), and so is one whose container has
// since exited.
func TestRefusalsSkipPodsWhoseReadinessConnects(t *testing.T) {
	ready := func(ms int, pod string, connects bool) report.Event {
		e := ev(ms, report.PodReady, pod, "new")
		e.ReadinessConnects = connects
		return e
	}
	exit := int32(1)
	for _, tc := range []struct {
		name  string
		extra []report.Event
		cands string
	}{
		{"the probe connects", []report.Event{ready(4900, "n", true)}, ""},
		{"no such probe", []report.Event{ready(4900, "n", false)}, "a,n"},
		{"the probe connects, but the container exited", []report.Event{ready(4900, "n", true),
			{At: at(5005), Kind: report.ContainerTerminated, Pod: "n", Revision: "new", ExitCode: &exit}}, "a,n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := append([]report.Event{{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
				ev(4000, report.PodCreated, "n", "new")}, tc.extra...)
			tl = append(tl, ev(5000, report.PodDeletionRequested, "a", "old"))
			r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{fail(5020, "refused", true, "")}}
			analyse(r)
			f := r.Failures[0]
			if f.LikelyPod != "a" || strings.Join(f.Candidates, ",") != tc.cands {
				t.Errorf("likely %q candidates %v, want a among %q", f.LikelyPod, f.Candidates, tc.cands)
			}
		})
	}
}

// A pod that stopped gracefully (its exit seen before the object went) had
// no sandbox left when rollprobe received it gone: a refusal after that is
// not its, however large the tolerance. After a forced deletion (no exit
// seen) its containers may still have answered for a while.
func TestRefusalAfterAGracefulPodWentIsNotItsOwn(t *testing.T) {
	exit := int32(0)
	for _, tc := range []struct {
		name     string
		graceful bool
		cands    string
	}{{"graceful", true, ""}, {"forced", false, "a,b"}} {
		t.Run(tc.name, func(t *testing.T) {
			created := ev(1000, report.PodCreated, "n", "new")
			srv := at(100) // received 0.9 s after its server time: the tolerance is 0.9 s
			created.Server = &srv
			tl := []report.Event{{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
				{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true}, created,
				ev(5000, report.PodDeletionRequested, "a", "old")}
			if tc.graceful {
				tl = append(tl, report.Event{At: at(5100), Kind: report.ContainerTerminated, Pod: "a", Revision: "old", ExitCode: &exit})
			}
			tl = append(tl, ev(5500, report.PodGone, "a", "old"), ev(5600, report.PodDeletionRequested, "b", "old"))
			r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{fail(5700, "refused", true, "")}}
			analyse(r)
			if f := r.Failures[0]; f.LikelyPod != "b" || strings.Join(f.Candidates, ",") != tc.cands {
				t.Errorf("likely %q candidates %v, want b among %q (tolerance %vms)", f.LikelyPod, f.Candidates, tc.cands, r.Attribution.ReceiveToleranceMS)
			}
		})
	}
}

// Through a proxy, a timeout can hit a pod that is already gone: the proxy
// waits on its vanished IP until the prober gives up (the lab's Traefik
// logged such requests as 499, forwarded to pods gone seconds before). A run
// that met a proxy (proxy_5xx) attributes such a timeout to the gone pod
// and counts it with the propagation race; without a proxy, a timeout
// needs a pod that was there to accept the request, as before.
func TestTimeoutThroughAProxyCanHitAGonePod(t *testing.T) {
	tl := aGoneGracefully()
	// Begun 1.2 s after a was gone, given up 2 s later.
	timeout := report.Failure{Intended: at(6500), Start: at(6500), End: at(8500), Class: report.ClassTimeout, Fresh: true}
	for _, tc := range []struct {
		name    string
		proxied bool
		likely  string
		finding string
	}{{"through a proxy", true, "a", StopsBeforePropagation}, {"direct", false, "", Unexplained}} {
		t.Run(tc.name, func(t *testing.T) {
			r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{timeout},
				Totals: report.Totals{ByClass: map[string]uint64{report.ClassTimeout: 1}}}
			if tc.proxied {
				p := fail(5200, report.ClassProxy5xx, true, "")
				p.Status = 502
				r.Failures = append([]report.Failure{p}, r.Failures...)
				r.Totals.ByClass[report.ClassProxy5xx] = 1
			}
			analyse(r)
			f := r.Failures[len(r.Failures)-1]
			if f.LikelyPod != tc.likely {
				t.Errorf("timeout attributed to %q (%s), want %q", f.LikelyPod, f.Context, tc.likely)
			}
			if find(r, tc.finding) == nil {
				t.Errorf("findings %+v, want %s", r.Findings, tc.finding)
			}
		})
	}
}

// A proxy met on one path says nothing of another: the direct path's
// timeout, begun after the pod was gone, is not put on that pod because
// the edge path answered proxy_5xx.
func TestAProxyOnOnePathDoesNotExcuseAnother(t *testing.T) {
	tl := aGoneGracefully()
	timeout := report.Failure{Intended: at(6500), Start: at(6500), End: at(8500), Class: report.ClassTimeout, Fresh: true, Path: "svc"}
	p := fail(5200, report.ClassProxy5xx, true, "")
	p.Status, p.Path = 502, "edge"
	r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{p, timeout},
		Totals: report.Totals{ByClass: map[string]uint64{report.ClassTimeout: 1, report.ClassProxy5xx: 1}},
		Paths: []report.PathReport{
			{Name: "svc", Totals: report.Totals{ByClass: map[string]uint64{report.ClassTimeout: 1}}},
			{Name: "edge", Totals: report.Totals{ByClass: map[string]uint64{report.ClassProxy5xx: 1}}}}}
	analyse(r)
	if f := r.Failures[1]; f.LikelyPod != "" {
		t.Errorf("the direct path's timeout was put on %q (%s): only the edge met a proxy", f.LikelyPod, f.Context)
	}
	if f := r.Failures[0]; f.LikelyPod != "a" {
		t.Errorf("the edge's 502 attributed to %q, want a", f.LikelyPod)
	}
}

// Every finding the analysis can give has its page in docs/findings, and
// the index lists it: the outputs link there (report.FindingDoc).
func TestEveryFindingHasItsPage(t *testing.T) {
	for _, rl := range rules {
		checkFindingPage(t, rl.id)
	}
}

func checkFindingPage(t *testing.T, id string) {
	t.Helper()
	index, err := os.ReadFile("../docs/findings/README.md")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../docs/findings/" + id + ".md")
	if err != nil || !strings.HasPrefix(string(page), "# `"+id+"`") || !strings.Contains(string(page), "## The fix") {
		t.Errorf("docs/findings/%s.md: %v (want a page titled with the ID, with a fix)", id, err)
	}
	if !strings.Contains(string(index), "("+id+".md)") {
		t.Errorf("docs/findings/README.md does not list %s", id)
	}
}

// With several paths, the propagation finding gives each path's window
// after a deletion and says by how much the slowest lagged the fastest;
// the preStop is sized from the slowest.
func TestPropagationWindowByPath(t *testing.T) {
	tl := []report.Event{{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "new", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old")}
	svc := fail(5800, report.ClassRefused, true, "")
	svc.Path = "svc"
	edge := fail(8200, report.ClassProxy5xx, true, "")
	edge.Path, edge.Status = "edge", 502
	r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{svc, edge},
		Totals: report.Totals{ByClass: map[string]uint64{report.ClassRefused: 1, report.ClassProxy5xx: 1}},
		Paths: []report.PathReport{{Name: "svc", Series: []report.SeriesRow{{T: 5, Backends: map[string]uint64{"a": 40}}}},
			{Name: "edge", Series: []report.SeriesRow{{T: 5, Backends: map[string]uint64{"a": 40}}, {T: 7, Backends: map[string]uint64{"a": 3, "b": 50}}}},
			{Name: "other"}}}
	analyse(r)
	f := find(r, StopsBeforePropagation)
	if f == nil {
		t.Fatalf("no propagation finding: %+v", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"by path, the last such failure after its pod's deletion was requested (counted as the fix is: from the earliest candidate's deletion where the pod is not certain): edge 3.20s, svc 0.80s, other none",
		"edge kept routing to terminating pods 3.20s longer than other",
		"responses from a pod after its deletion was requested came up to (whole seconds of the series): svc none, edge 2s, other none"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if want := fmt.Sprintf("at least %ds", PreStopSeconds(3200*time.Millisecond)); !strings.Contains(f.Fix, want) {
		t.Errorf("fix %q, want it sized from the edge's 3.2 s (%s)", f.Fix, want)
	}
	// No path got a response from a deleted pod: nothing to say of it.
	for i := range r.Paths {
		r.Paths[i].Series = nil
	}
	r.Failures = []report.Failure{svc, edge}
	analyse(r)
	if ev := strings.Join(find(r, StopsBeforePropagation).Evidence, "\n"); strings.Contains(ev, "responses from a pod after its deletion") {
		t.Errorf("a line on responses after deletion when there were none:\n%s", ev)
	}
}

// A refusal can be caused until it came back: a busy host can hold the SYN
// or its answer. The case of a starved CI run: the connect began at +4.102
// s and was refused at +4.440 s; pod a was gone by then, and pod b's
// deletion, committed after the connect began, was received at +4.415 s.
// Bounded by the connect's start, the refusal was put on no pod.
func TestARefusalCanBeCausedUntilItCameBack(t *testing.T) {
	exit := int32(0)
	tm := func(ms int) *time.Time { x := at(ms); return &x }
	del := ev(4415, report.PodDeletionRequested, "b", "old")
	del.CommittedAfter = tm(4200)
	tl := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		ev(3133, report.PodDeletionRequested, "a", "old"),
		{At: at(3503), Kind: report.ContainerTerminated, Pod: "a", Revision: "old", ExitCode: &exit},
		ev(3967, report.PodGone, "a", "old"),
		del,
	}
	slow := report.Failure{Intended: at(4035), Start: at(4102), End: at(4440), Class: report.ClassRefused, Fresh: true}
	r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{slow}}
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "b" || f.Confidence != 1 {
		t.Errorf("the slow refusal: likely %q (confidence %v, candidates %v, %s), want b", f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}
	// Refused at once, at +4.105 s, it is nobody's: b's deletion was
	// committed after +4.2 s.
	quick := slow
	quick.End = at(4105)
	r = &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{quick}}
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "" {
		t.Errorf("a refusal that came back before b's deletion was committed was put on %q (%s)", f.LikelyPod, f.Context)
	}
}

// A connection to an edge (an ingress, a proxy: Failure.ViaEdge) that
// failed before the request reached it is the edge's: a starved CI run's
// TLS handshakes to Traefik went unfinished for 2 s while pods rolled, and
// rollprobe put every one on an old pod. Directly at a pod's TLS (no
// edge), a handshake timeout can be a terminating pod's, as before. And a
// path whose connections go to an edge is proxied though it answered no
// 5xx: its timeouts can be on a pod already gone.
func TestFailuresBeforeTheEdgeAreNotAPods(t *testing.T) {
	tl := aGoneGracefully()
	handshake := report.Failure{Intended: at(5050), Start: at(5050), End: at(7050), Class: report.ClassTLS, TLSCause: "handshake_timeout",
		Fresh: true, RemoteAddr: "10.100.0.1:443"}
	refused := fail(5060, report.ClassRefused, true, "")
	refused.RemoteAddr = "10.100.0.1:443"
	timeout := report.Failure{Intended: at(6500), Start: at(6500), End: at(8500), Class: report.ClassTimeout, Fresh: true, RemoteAddr: "10.100.0.1:443"}
	for _, tc := range []struct {
		name                     string
		edge                     bool
		handshake, ref, timedOut string
	}{{"via an edge", true, "", "", "a"}, {"direct", false, "a", "a", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := []report.Failure{handshake, refused, timeout}
			for i := range fs {
				fs[i].ViaEdge = tc.edge
			}
			// The prober's own lag in the failures' second (+5), not a
			// later one's, is the finding's.
			series := []report.SeriesRow{{T: 4, MaxLagMS: 2}, {T: 5, MaxLagMS: 640}, {T: 6, MaxLagMS: 9000}}
			r := &report.Report{StartedAt: t0, Timeline: tl, Failures: fs, Series: series}
			analyse(r)
			for i, want := range []string{tc.handshake, tc.ref, tc.timedOut} {
				if f := r.Failures[i]; f.LikelyPod != want {
					t.Errorf("%s: likely %q (%s), want %q", f.Class, f.LikelyPod, f.Context, want)
				}
			}
			if f := r.Failures[0]; tc.edge && (f.Evidence != "" || !strings.Contains(f.Context, "the edge at 10.100.0.1:443") || !strings.Contains(f.Context, "TLS handshake in time")) {
				t.Errorf("the edge's handshake timeout: evidence %q, context %q", f.Evidence, f.Context)
			}
			edge := find(r, EdgeFailedConnections)
			if tc.edge != (edge != nil) || (tc.edge && find(r, Unexplained) != nil) {
				t.Fatalf("findings %+v: want %s only via an edge, and there no %s", r.Findings, EdgeFailedConnections, Unexplained)
			}
			if tc.edge && (!strings.Contains(edge.Title, "2 requests failed on their connections to the edge at 10.100.0.1:443") ||
				!strings.Contains(strings.Join(edge.Evidence, "\n"), "handshake_timeout 1") ||
				!strings.Contains(strings.Join(edge.Evidence, "\n"), "up to 640 ms behind their schedule")) {
				t.Errorf("the edge's finding: %+v", *edge)
			}
		})
	}
}

// aGoneGracefully is a timeline of two old pods, a and b, a deleted at
// +5 s, its container exited at +5.1 s and the pod gone at +5.3 s.
func aGoneGracefully() []report.Event {
	exit := int32(0)
	return []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		{At: at(5100), Kind: report.ContainerTerminated, Pod: "a", Revision: "old", ExitCode: &exit},
		ev(5300, report.PodGone, "a", "old"),
	}
}

// A dns failure sent nothing: the timeline, which put one certain on the
// pod deleted just before it (a loaded lab run's lookups that left no
// time to connect, named on old pods), names no pod, and the finding says
// nothing was sent rather than that no pod was terminating.
func TestDNSFailuresAreNoPods(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails []report.Failure
		title string
	}{
		{"alone", []report.Failure{fail(5060, report.ClassDNS, true, "")}, "names did not resolve in time"},
		{"beside a refusal no pod made", []report.Failure{fail(5060, report.ClassDNS, true, ""), fail(9000, report.ClassRefused, true, "")}, "failures with no pod lifecycle event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &report.Report{StartedAt: t0, Timeline: aGoneGracefully(), Failures: tc.fails}
			analyse(r)
			if f := r.Failures[0]; f.LikelyPod != "" || f.Confidence != 0 || f.Evidence != "" || !strings.Contains(f.Context, "nothing was sent") {
				t.Errorf("dns failure: likely %q (%v, %q), context %q: want no pod", f.LikelyPod, f.Confidence, f.Evidence, f.Context)
			}
			u := find(r, Unexplained)
			if u == nil || !strings.HasPrefix(u.Title, tc.title) || !strings.Contains(strings.Join(u.Evidence, "\n"), "no pod received them") ||
				!strings.Contains(u.Fix, "name resolution") {
				t.Errorf("findings %+v: want %s titled %q saying no pod received the dns failures", r.Findings, Unexplained, tc.title)
			}
			// Beside failures that sent something, the first line
			// ("while no pod was terminating") speaks of those only.
			if len(tc.fails) > 1 && u != nil && (strings.Contains(u.Evidence[0], "dns") || !strings.HasPrefix(u.Evidence[0], "1 request failed (refused 1) at +9.00s while no pod")) {
				t.Errorf("first line %q: want the refusal alone", u.Evidence[0])
			}
		})
	}
}

// An outage's pods are its failures by the pod they were put on, most
// first, with how many of them were certain; a failure just outside the
// outage's span and a local one are left out, and one on no pod is counted
// only in the outage's total.
func TestOutagePodsCountItsFailuresByPod(t *testing.T) {
	start := t0
	failAt := func(ms int, class, pod string, confidence float64) report.Failure {
		at := start.Add(time.Duration(ms) * time.Millisecond)
		return report.Failure{Class: class, Intended: at, LikelyPod: pod, Confidence: confidence}
	}
	out := []report.Outage{{Start: start.Add(5 * time.Second), End: start.Add(7 * time.Second), Count: 6}}
	putPodsOnOutages(out, []report.Failure{
		failAt(5000, "refused", "a", 1), failAt(5500, "refused", "a", 0.5),
		failAt(6000, "refused", "b", 1), failAt(6500, "reset", "b", 1), failAt(7000, "refused", "b", 1),
		failAt(6200, "connect_timeout", "", 0),      // on no pod
		failAt(4999, "refused", "c", 1),             // before it
		failAt(7001, "refused", "c", 1),             // after it
		failAt(6300, prober.Local.String(), "d", 1), // the prober's own
	}, start)
	want := []report.OutagePod{{Pod: "b", Failures: 3, Certain: 3}, {Pod: "a", Failures: 2, Certain: 1}}
	if !slices.Equal(out[0].Pods, want) {
		t.Errorf("pods %+v, want %+v", out[0].Pods, want)
	}
}

// With only the first failures kept in full, the report's outages (the
// runner's, over every failure) stay whole: the analysis describes them
// and does not shrink them to the kept failures' span.
func TestOutagesStayWholeWhenFailuresWereNotAllKept(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		ev(9000, report.PodGone, "a", "old"),
	}, Failures: []report.Failure{
		fail(5020, "refused", true, ""), fail(5100, "refused", true, ""), fail(5200, "refused", true, ""),
	}, FailureInfo: report.FailureInfo{Total: 30, Kept: 3, Limit: 3},
		Outages: []report.Outage{{Start: at(5020), End: at(8000), DurationS: 2.98, Count: 30, ByClass: map[string]uint64{"refused": 30}}}}
	analyse(r)
	if len(r.Outages) != 1 || r.Outages[0].Count != 30 || !r.Outages[0].End.Equal(at(8000)) || r.Outages[0].ByClass["refused"] != 30 {
		t.Fatalf("outages %+v, want the one of 30 failures to +8s", r.Outages)
	}
	o := r.Outages[0]
	if o.Context != "while terminating: a" || !slices.Equal(o.Pods, []report.OutagePod{{Pod: "a", Failures: 3, Certain: 3}}) {
		t.Errorf("outage described as %q, pods %+v; want a terminating, its 3 kept failures on a", o.Context, o.Pods)
	}
}

// Each path's outages get the pods of that path's failures only.
func TestPathOutagesGetTheirOwnFailuresPods(t *testing.T) {
	tl := aGoneGracefully()
	svc := fail(5200, report.ClassRefused, true, "")
	svc.Path = "svc"
	edge := fail(5200, report.ClassProxy5xx, true, "")
	edge.Status, edge.Path = 502, "edge"
	window := func() []report.Outage {
		return []report.Outage{{Start: at(5200), End: at(5200), Count: 1, ByClass: map[string]uint64{}}}
	}
	r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{svc, edge}, Rollout: &report.Rollout{TriggerSeenAfterMS: 20},
		Paths: []report.PathReport{{Name: "svc", Outages: window()}, {Name: "edge", Outages: window()}, {Name: "quiet", Outages: []report.Outage{}}}}
	x := Explain(r)
	if len(x.PathOutages) != 3 {
		t.Fatalf("path outages %+v, want one list per path", x.PathOutages)
	}
	for i, name := range []string{"svc", "edge"} {
		if got := x.PathOutages[i]; len(got) != 1 || !slices.Equal(got[0].Pods, []report.OutagePod{{Pod: "a", Failures: 1, Certain: 1}}) {
			t.Errorf("%s: outages %+v, want its one failure on a", name, got)
		}
	}
	if got := x.PathOutages[2]; got == nil || len(got) != 0 {
		t.Errorf("quiet: %#v, want an empty list (the schema requires one)", got)
	}
}
