package analysis

import (
	"slices"
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
	present := func(pod string) report.Event {
		return report.Event{At: at(0), Kind: report.PodPresent, Pod: pod, Revision: "old", Ready: true}
	}
	tolerance := &report.Rollout{TriggerSeenAfterMS: 670}

	lagged := &report.Report{StartedAt: t0, Rollout: tolerance, Timeline: []report.Event{
		present("a"), present("b"),
		deleted(3030, 3000, "a"),
		exited(3870, 3000, "a"),
		deleted(4200, 4000, "b"),
		exited(5100, 4000, "b"),
	}, Failures: []report.Failure{fail(4362, "connect_timeout", true, "")}}
	analyse(lagged)
	if f := lagged.Failures[0]; f.Confidence == 1 || !slices.Contains(f.Candidates, "b") {
		t.Errorf("b's exit was received late, the kubelet put it before the timeout began: %q (confidence %v) among %v, want b a candidate (%s)",
			f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}

	later := &report.Report{StartedAt: t0, Rollout: tolerance, Timeline: []report.Event{
		present("a"), present("c"),
		deleted(2100, 2000, "a"),
		exited(2400, 2000, "a"),
		deleted(3100, 3000, "c"),
		exited(4200, 4000, "c"),
	}, Failures: []report.Failure{fail(3700, "connect_timeout", true, "")}}
	analyse(later)
	if f := later.Failures[0]; f.LikelyPod != "a" || f.Confidence != 1 {
		t.Errorf("c's container ran until at least +4s, after the timeout began (+3.7s): %q (confidence %v) among %v, want a for certain (%s)",
			f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}
	if tol := time.Duration(later.Attribution.ReceiveToleranceMS * float64(time.Millisecond)); tol != 670*time.Millisecond {
		t.Errorf("tolerance %s, want the trigger's 670ms (the test's premise)", tol)
	}
}
