package analysis

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// exited is a container_terminated event received at ms whose kubelet time
// (floored to the second) is serverMS.
func exited(ms, serverMS int, pod string) report.Event {
	code, server := int32(0), at(serverMS)
	return report.Event{At: at(ms), Server: &server, Kind: report.ContainerTerminated, Pod: pod, Revision: "old", ExitCode: &code}
}

// deleted is a deletion request received at ms whose apiserver time
// (floored to the second) is serverMS.
func deleted(ms, serverMS int, pod string) report.Event {
	e := ev(ms, report.PodDeletionRequested, pod, "old")
	server := at(serverMS)
	e.Server = &server
	return e
}

// A connect timeout can be an old pod's whose container had exited by the
// time it began: the kubelet's time of the exit says so, whatever the
// receipt. The CI run that prompted this: a (deleted +3.03 s, its exit
// received +3.87 s) and b (deleted next, its exit received 0.74 s after
// the failure began, more than the 0.67 s tolerance, though the kubelet
// put it in the second before); the timeline put the timeout on a for
// certain, the wire on b. And the kubelet's time rules a pod out the
// receipt would keep: c's exit, received within the tolerance, came in a
// second that began after the failure did.
func TestConnectTimeoutCountsAnExitFromTheKubeletsTime(t *testing.T) {
	// old is an old pod's deletion and exit, each as received and as the
	// server dated it (ms from the run's start).
	type old struct {
		name                                         string
		deleted, deletedServer, exited, exitedServer int
	}
	// twoOld analyses a connect timeout at failMS while two old pods go.
	twoOld := func(failMS int, pods ...old) *report.Report {
		r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670}}
		for _, p := range pods {
			r.Timeline = append(r.Timeline, report.Event{At: at(0), Kind: report.PodPresent, Pod: p.name, Revision: "old", Ready: true},
				deleted(p.deleted, p.deletedServer, p.name), exited(p.exited, p.exitedServer, p.name))
		}
		sortTimeline(r)
		r.Failures = []report.Failure{fail(failMS, "connect_timeout", true, "")}
		analyse(r)
		return r
	}

	lagged := twoOld(4362, old{"a", 3030, 3000, 3870, 3000}, old{"b", 4200, 4000, 5100, 4000})
	if f := lagged.Failures[0]; f.Confidence == 1 || !slices.Contains(f.Candidates, "b") {
		t.Errorf("b's exit was received late, the kubelet put it before the timeout began: %q (confidence %v) among %v, want b a candidate (%s)",
			f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}

	later := twoOld(3700, old{"a", 2100, 2000, 2400, 2000}, old{"c", 3100, 3000, 4200, 4000})
	if f := later.Failures[0]; f.LikelyPod != "a" || f.Confidence != 1 {
		t.Errorf("c's container ran until at least +4s, after the timeout began (+3.7s): %q (confidence %v) among %v, want a for certain (%s)",
			f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}
	if tol := time.Duration(later.Attribution.ReceiveToleranceMS * float64(time.Millisecond)); tol != 670*time.Millisecond {
		t.Errorf("tolerance %s, want the trigger's 670ms (the test's premise)", tol)
	}
}

// A new pod whose readiness probe connected was listening: a refusal is
// not its own unless its container had exited by then, and that too is
// dated by the kubelet. If n crashed in the second after +2 s (received
// +3.5 s, past the tolerance), a refusal at +2.6 s can be n's. If its exit
// came in the second after +3 s (received +3.2 s, within it), at +2.6 s n
// still listened: the refusal is not its.
func TestRefusalCountsACrashFromTheKubeletsTime(t *testing.T) {
	run := func(exitMS, exitServerMS int) *report.Report {
		ready := ev(1000, report.PodReady, "n", "new")
		ready.ReadinessConnects = true
		r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670}, Timeline: []report.Event{
			ev(500, report.PodCreated, "n", "new"),
			ready,
			exited(exitMS, exitServerMS, "n"),
		}, Failures: []report.Failure{fail(2600, "refused", true, "")}}
		analyse(r)
		return r
	}
	if f := run(3500, 2000).Failures[0]; f.LikelyPod != "n" {
		t.Errorf("n's exit, dated before the refusal, received after the tolerance: %q among %v, want n (%s)", f.LikelyPod, f.Candidates, f.Context)
	}
	if f := run(3200, 3000).Failures[0]; f.LikelyPod != "" {
		t.Errorf("n's exit, dated after the refusal: %q among %v, want no pod (%s)", f.LikelyPod, f.Candidates, f.Context)
	}
}

// A pod with a sidecar: the first container to exit is the one whose exit
// the rules read, not the last received. n's app crashed in the second
// after +2 s (received +2.3 s); its sidecar exited after +4 s (received
// +4.1 s). A refusal at +2.6 s can be n's: keeping the sidecar's exit
// would have said n still listened and named no pod where n is the one
// candidate. Whichever exit came first, a SIGKILL of either container
// marks the pod killed (the grace-period finding and its exit code).
func TestTheFirstContainerToExitCounts(t *testing.T) {
	ready := ev(1000, report.PodReady, "n", "new")
	ready.ReadinessConnects = true
	sidecar := exited(4100, 4000, "n")
	killed := int32(report.SIGKILLExitCode)
	sidecar.ExitCode = &killed
	r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670}, Timeline: []report.Event{
		ev(500, report.PodCreated, "n", "new"),
		ready,
		exited(2300, 2000, "n"),
		sidecar,
	}, Failures: []report.Failure{fail(2600, "refused", true, "")}}
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "n" {
		t.Errorf("n's app exited before the refusal, its sidecar after: %q among %v, want n (%s)", f.LikelyPod, f.Candidates, f.Context)
	}
	i := slices.IndexFunc(r.Pods, func(p report.PodTraffic) bool { return p.Pod == "n" })
	if i < 0 || r.Pods[i].ExitCode == nil || *r.Pods[i].ExitCode != report.SIGKILLExitCode {
		t.Errorf("n's sidecar was SIGKILLed: pods %+v, want n's exit_code 137", r.Pods)
	}

	// Received in the other order (the sidecar's status first), the
	// kubelet's times still say which exited first.
	pods := NewPods()
	pods.Apply(exited(4100, 4000, "m"))
	pods.Apply(exited(4300, 2000, "m"))
	if p := pods.Get("m"); p == nil || p.ExitServer == nil || !p.ExitServer.Equal(at(2000)) {
		t.Errorf("m's exits, the later-dated received first: kept %+v, want the one dated +2s", p)
	}
}

// The context names the container whose exit it cites: with a sidecar,
// "its container had exited" would not say which one had stopped. A
// native sidecar that exited first (it crashed: at a deletion the kubelet
// stops sidecars after the app) is named as one.
func TestTheContextNamesTheContainerThatExited(t *testing.T) {
	for _, tc := range []struct {
		first, then string
		sidecar     bool // first is a native sidecar
		want        string
	}{
		{"app", "istio-proxy", false, "its container app had exited (+2.30s, code 0)"},
		{"proxy", "app", true, "its sidecar proxy had exited (+2.30s, code 0)"},
	} {
		ready := ev(1000, report.PodReady, "o", "old")
		ready.ReadinessConnects = true
		first, then := exited(2300, 2000, "o"), exited(4100, 4000, "o")
		first.Container, first.Sidecar, then.Container = tc.first, tc.sidecar, tc.then
		r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670}, Timeline: []report.Event{
			ev(500, report.PodCreated, "o", "old"),
			ready,
			deleted(1800, 1000, "o"),
			then,
			first,
		}, Failures: []report.Failure{fail(4500, "refused", true, "")}}
		analyse(r)
		if f := r.Failures[0]; f.LikelyPod != "o" || !strings.Contains(f.Context, tc.want) {
			t.Errorf("%s first: failure on %q with context %q, want o and %q", tc.first, f.LikelyPod, f.Context, tc.want)
		}
	}
}
