package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// aborted: an Argo canary of two stable pods (revision old) and one
// canary pod c (new), aborted: rollprobe sees the Rollout Degraded at
// +10s, c is deleted at +11s (abortScaleDownDelaySeconds: 1) and exits
// at once, and new connections still reach it until +12.5s; the run
// follows the abort until c is gone (+12.8s) when followed is true.
func aborted(followed bool) *report.Report {
	exit := int32(0)
	r := &report.Report{StartedAt: t0,
		Rollout: &report.Rollout{Kind: "Rollout", Name: "web", Namespace: "prod", Service: "web", TriggerSeenAfterMS: 20, Status: report.StatusFailed},
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "s1", Revision: "old", Ready: true},
			{At: at(0), Kind: report.PodPresent, Pod: "s2", Revision: "old", Ready: true},
			ev(1000, report.PodCreated, "c", "new"),
			ev(2000, report.PodReady, "c", "new"),
			{At: at(2100), Kind: report.RolloutStep, Detail: "step 1 of 2: setWeight: 25"},
			{At: at(10000), Kind: report.RolloutFailed, Detail: `rollout "web" is degraded: RolloutAborted: Rollout aborted update to revision 2`},
			{At: at(10010), Kind: report.ScaleDownDeadline, Revision: "new", Detail: "revision 2 scales down at 2026-11-21T09:00:11Z (1s later)"},
			ev(11000, report.PodDeletionRequested, "c", "new"),
			{At: at(11010), Kind: report.ContainerTerminated, Pod: "c", Revision: "new", ExitCode: &exit},
			ev(11500, report.PodGone, "c", "new"),
		}, Failures: []report.Failure{
			fail(11100, report.ClassRefused, true, ""), fail(11300, report.ClassRefused, true, ""),
			fail(12500, report.ClassConnectTimeout, true, ""),
		}}
	if followed {
		r.Timeline = append(r.Timeline, report.Event{At: at(12800), Kind: report.AbortedPodsGone, Revision: "new", Detail: "every pod of the aborted revision new is gone"})
	}
	return r
}

// The failures on the aborted revision's pod after the abort are the
// abort's way back racing the move back: claimed by its finding, measured
// from the abort, with the abort's own delay as the fix (sized as a
// preStop is) and the canary's field; none is left to the propagation
// finding. A run that did not follow the abort to its end leaves them to
// the propagation finding.
func TestAbortScaleDownBeforePropagation(t *testing.T) {
	r := aborted(true)
	analyse(r)
	f := find(r, AbortEarlyScaleDown)
	if f == nil || f.Severity != report.SeverityError {
		t.Fatalf("findings %+v: want the abort's scale-down error", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"the rollout was aborted: seen at +10.00s (the Rollout Degraded); an abort moves the traffic back to the stable revision, then deletes the aborted revision new's pods: deleted from +11.00s (+1.00s from the abort as seen)",
		"3 requests failed (connect_timeout 1, refused 2)", "the last began 2.50s after the abort was seen",
		"revision 2 scales down at 2026-11-21T09:00:11Z",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	// 2.5 s × 1.5 + 1 = 4.75: 5 s.
	if !strings.Contains(f.Fix, `spec.strategy.canary.abortScaleDownDelaySeconds: 5 or more`) ||
		!strings.Contains(f.Fix, `kubectl -n prod patch rollout web --type merge -p '{"spec":{"strategy":{"canary":{"abortScaleDownDelaySeconds":5}}}}'`) ||
		strings.Join(f.Pods, ",") != "c" {
		t.Errorf("finding %+v", *f)
	}
	if p := find(r, StopsBeforePropagation); p != nil {
		t.Errorf("the propagation finding claims the abort's failures: %+v", p)
	}

	// No step and no switch seen: the strategy is the reader's to fill.
	stepless := aborted(true)
	stepless.Timeline = slices.DeleteFunc(stepless.Timeline, func(e report.Event) bool { return e.Kind == report.RolloutStep })
	analyse(stepless)
	if f := find(stepless, AbortEarlyScaleDown); f == nil || !strings.Contains(f.Fix, `spec.strategy.STRATEGY.abortScaleDownDelaySeconds`) {
		t.Errorf("without a step: %+v", f)
	}

	// A blue/green aborted after its switch switches back: the aborted
	// pods are left behind by that switch too, and the abort's knob is
	// still the one that deletes them.
	bg := aborted(true)
	bg.Timeline = slices.DeleteFunc(bg.Timeline, func(e report.Event) bool { return e.Kind == report.RolloutStep })
	bg.Timeline = append(bg.Timeline,
		report.Event{At: at(5000), Kind: report.ActiveSwitched, Revision: "new"},
		report.Event{At: at(9990), Kind: report.ActiveSwitched, Revision: "old"})
	slices.SortStableFunc(bg.Timeline, func(a, b report.Event) int { return a.At.Compare(b.At) })
	analyse(bg)
	if f := find(bg, AbortEarlyScaleDown); f == nil || !strings.Contains(f.Fix, `spec.strategy.blueGreen.abortScaleDownDelaySeconds: 5`) ||
		!slices.Contains(f.Evidence, "the active Service switched back to revision old at +9.99s (-0.01s from the abort as seen)") ||
		find(bg, BlueGreenEarlyScaleDown) != nil {
		t.Errorf("a blue/green's abort: %+v (findings %+v)", f, bg.Findings)
	}
	// The canary has no switch to quote.
	if strings.Contains(ev, "switched back") {
		t.Errorf("a canary's abort quotes a switch:\n%s", ev)
	}

	unfollowed := aborted(false)
	analyse(unfollowed)
	if find(unfollowed, AbortEarlyScaleDown) != nil || find(unfollowed, StopsBeforePropagation) == nil {
		t.Errorf("without aborted_pods_gone: %+v", unfollowed.Findings)
	}
}
