package analysis

import (
	"sort"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// bluegreen: an Argo blue/green of one old pod a (revision blue) and one
// new pod n (green): the active Service switches to green at +5s, the old
// ReplicaSet is scaled down at once (a deleted at +5.1s, its app exits at
// SIGTERM, its IP gone at +5.5s), and new connections still reach a until
// +5.9s.
func bluegreen(switched bool) *report.Report {
	exit := int32(0)
	r := &report.Report{StartedAt: t0,
		Rollout: &report.Rollout{Kind: "Rollout", Name: "web", Namespace: "prod", Service: "web", TriggerSeenAfterMS: 20},
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "blue", Ready: true},
			ev(1000, report.PodCreated, "n", "green"),
			ev(2000, report.PodReady, "n", "green"),
			ev(5100, report.PodDeletionRequested, "a", "blue"),
			{At: at(5110), Kind: report.ContainerTerminated, Pod: "a", Revision: "blue", ExitCode: &exit},
			ev(5500, report.PodGone, "a", "blue"),
		}, Failures: []report.Failure{
			// A kept-alive connection to a, cut by its exit: the switch
			// moves no connection, so a delay would not have saved it.
			cutInFlight(fail(5112, report.ClassEOFReused, false, "")),
			fail(5200, report.ClassRefused, true, ""), fail(5400, report.ClassRefused, true, ""),
			// a's IP is gone: a SYN to it goes unanswered.
			fail(5900, report.ClassConnectTimeout, true, ""),
		}}
	if switched {
		r.Timeline = append(r.Timeline,
			report.Event{At: at(5000), Kind: report.ActiveSwitched, Revision: "green", Detail: "the active Service now selects revision green (was blue)"},
			report.Event{At: at(5020), Kind: report.ScaleDownDeadline, Revision: "blue", Detail: "revision 1 scales down at 2026-11-21T09:00:05Z (0s later)"})
	}
	sort.SliceStable(r.Timeline, func(i, j int) bool { return r.Timeline[i].At.Before(r.Timeline[j].At) })
	return r
}

func TestBlueGreenScaleDownBeforePropagation(t *testing.T) {
	r := bluegreen(true)
	analyse(r)
	f := find(r, BlueGreenEarlyScaleDown)
	if f == nil || f.Severity != report.SeverityError {
		t.Fatalf("findings %+v: want the blue/green scale-down error", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"switched from revision blue to green at +5.00s (as the Rollout's status showed it); the old revision's pods were deleted from +5.10s (+0.10s from the switch)",
		"3 requests failed (connect_timeout 1, refused 2)", "the last began 0.90s after the switch",
		"revision 1 scales down at 2026-11-21T09:00:05Z",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	// 0.9 s after the switch: 0.9*1.5+1 = 2.35 -> 3 s of delay; from the
	// deletion, 0.8 s: 0.8*1.5+1 = 2.2 -> 3 s of preStop.
	for _, want := range []string{"scaleDownDelaySeconds: 3 or more", "kubectl -n prod patch rollout web --type merge", `"scaleDownDelaySeconds":3`, "argoproj/argo-rollouts#1992", "waits 3s"} {
		if !strings.Contains(f.Fix, want) {
			t.Errorf("fix lacks %q: %s", want, f.Fix)
		}
	}
	if len(f.Pods) != 1 || f.Pods[0] != "a" {
		t.Errorf("pods %v", f.Pods)
	}
	if strings.Contains(f.Fix, "scaleDownDelayRevisionLimit") {
		t.Errorf("the controller kept a deadline, yet the fix lifts the revision limit: %s", f.Fix)
	}
	if find(r, StopsBeforePropagation) != nil {
		t.Errorf("the race finding claims the blue/green's failures too: %+v", r.Findings)
	}
	if find(r, AbruptKeepAliveClose) == nil {
		t.Errorf("findings %+v: the kept-alive cut is the app's shutdown, not the delay's", r.Findings)
	}
	if n := Explain(r).PreStopSeconds; n != 3 {
		t.Errorf("PreStopSeconds %d, want 3", n)
	}
}

// A switch with no scale-down deadline on the old ReplicaSet: the
// controller did not wait (scaleDownDelayRevisionLimit: 0, as the lab's
// argo-bluegreen-fast), so a delay alone would change nothing: the fix
// lifts the limit too.
func TestBlueGreenScaleDownWithoutADeadline(t *testing.T) {
	r := bluegreen(true)
	for i, e := range r.Timeline {
		if e.Kind == report.ScaleDownDeadline {
			r.Timeline = append(r.Timeline[:i], r.Timeline[i+1:]...)
			break
		}
	}
	analyse(r)
	f := find(r, BlueGreenEarlyScaleDown)
	if f == nil {
		t.Fatalf("findings %+v: want the blue/green scale-down", r.Findings)
	}
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "no scale-down deadline on the old ReplicaSet") {
		t.Errorf("evidence does not say the controller did not wait:\n%s", ev)
	}
	if !strings.Contains(f.Fix, `{"blueGreen":{"scaleDownDelaySeconds":3,"scaleDownDelayRevisionLimit":null}}`) {
		t.Errorf("fix does not lift the revision limit: %s", f.Fix)
	}
}

// Without a switch (a Deployment, a canary) the same failures are the
// propagation race's.
func TestNoSwitchNoBlueGreenFinding(t *testing.T) {
	r := bluegreen(false)
	analyse(r)
	if find(r, BlueGreenEarlyScaleDown) != nil || find(r, StopsBeforePropagation) == nil {
		t.Errorf("findings %+v: want the propagation race's, not the blue/green's", r.Findings)
	}
}

// A pod of the revision switched to is no old pod: its deletion (a new
// pod replaced after the switch) is not the scale-down's.
func TestSwitchedAwayNamesOnlyTheOldRevision(t *testing.T) {
	del := at(6000)
	sw := []activeSwitch{{at: at(5000), to: "green"}}
	if s := switchedAway(sw, &Pod{Revision: "green", DeletedAt: &del}); s != nil {
		t.Errorf("a green pod was switched away from: %+v", s)
	}
	if s := switchedAway(sw, &Pod{Revision: "blue", DeletedAt: &del}); s == nil {
		t.Error("a blue pod deleted after the switch: want the switch")
	}
	early := at(3000)
	if s := switchedAway(sw, &Pod{Revision: "blue", DeletedAt: &early}); s != nil {
		t.Errorf("a blue pod deleted 2 s before the switch was switched away from: %+v", s)
	}
}
