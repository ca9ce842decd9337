package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// A drain that timed out while a budget refused web-2's eviction to the
// end gets the finding, naming web-2 (web-1, refused then evicted, was
// held only for a while); a drain that completed, or one whose refusals
// all ended in evictions, does not.
func TestDrainBlockedByABudget(t *testing.T) {
	mk := func(status report.RolloutStatus, finalEviction bool) *report.Report {
		r := &report.Report{StartedAt: t0, EndedAt: at(45000),
			Rollout: &report.Rollout{Change: report.ChangeDrain, Trigger: "drain node lab-node-1 (kubectl drain --ignore-daemonsets --delete-emptydir-data)", Status: status, Namespace: "default", TriggerSeenAfterMS: 20},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "web-1", Ready: true},
				{At: at(0), Kind: report.PodPresent, Pod: "web-2", Ready: true},
				{At: at(3000), Kind: report.EvictionRefused, Pod: "web-1", Detail: "eviction of default/web-1 refused: Cannot evict pod as it would violate the pod's disruption budget."},
				{At: at(8000), Kind: report.PodEvicted, Pod: "web-1"},
				{At: at(9000), Kind: report.EvictionRefused, Pod: "web-2", Detail: "eviction of default/web-2 refused: Cannot evict pod as it would violate the pod's disruption budget."},
			}}
		if finalEviction {
			r.Timeline = append(r.Timeline, report.Event{At: at(20000), Kind: report.PodEvicted, Pod: "web-2"})
		}
		return r
	}
	r := mk(report.StatusTimedOut, false)
	analyse(r)
	f := find(r, DrainBlocked)
	if f == nil {
		t.Fatalf("no finding; findings %v", r.Findings)
	}
	if len(f.Pods) != 1 || f.Pods[0] != "web-2" || !strings.Contains(f.Evidence[0], "from +9.00s to the end of the run (36s)") ||
		!strings.Contains(f.Evidence[0], "disruption budget") || !strings.Contains(f.Fix, "maxUnavailable: 1") || f.Severity != report.SeverityError {
		t.Errorf("finding %+v", f)
	}
	for name, r := range map[string]*report.Report{"complete": mk(report.StatusComplete, false), "evicted in the end": mk(report.StatusTimedOut, true)} {
		analyse(r)
		if f := find(r, DrainBlocked); f != nil {
			t.Errorf("%s: %+v", name, f)
		}
	}
}

// A refused pod that went away another way (the watch saw its deletion,
// or the drain's last look found it overtaken) was not held until the
// end: the finding names only the pods still held, and says what became
// of the other and of an eviction that failed otherwise; with none held,
// there is no finding.
func TestDrainBlockedLeavesOutPodsThatWentAway(t *testing.T) {
	mk := func(alsoHeld bool) *report.Report {
		r := &report.Report{StartedAt: t0, EndedAt: at(45000),
			Rollout: &report.Rollout{Change: report.ChangeDrain, Trigger: "drain node lab-node-1 (kubectl drain --ignore-daemonsets --delete-emptydir-data)", Status: report.StatusTimedOut, Namespace: "default"},
			Timeline: []report.Event{
				// Deleted before any refusal: not a pod the budget held.
				{At: at(1000), Kind: report.PodDeletionRequested, Pod: "other-1"},
				{At: at(2000), Kind: report.EvictionRefused, Pod: "other-1", Detail: "eviction of default/other-1 refused: budget"},
				{At: at(3000), Kind: report.EvictionRefused, Pod: "graceful-1", Detail: "eviction of default/graceful-1 refused: budget"},
				{At: at(40000), Kind: report.PodDeletionRequested, Pod: "graceful-1", Detail: "grace 20s"},
				{At: at(44900), Kind: report.EvictionOvertaken, Pod: "graceful-1", Detail: "pod default/graceful-1 found deleting at the drain's end"},
				{At: at(45000), Kind: report.PodGone, Pod: "graceful-1"},
				{At: at(5000), Kind: report.EvictionFailed, Pod: "two-budgets", Detail: "eviction of default/two-budgets failed: This pod has more than one PodDisruptionBudget (not asked again)"},
			}}
		if alsoHeld {
			r.Timeline = append(r.Timeline, report.Event{At: at(4000), Kind: report.EvictionRefused, Pod: "web-2", Detail: "eviction of default/web-2 refused: budget"})
		}
		return r
	}
	r := mk(true)
	analyse(r)
	f := find(r, DrainBlocked)
	if f == nil {
		t.Fatalf("no finding; findings %v", r.Findings)
	}
	if strings.Join(f.Pods, ",") != "other-1,web-2" {
		t.Errorf("pods %v, want other-1 (deleted before its refusal) and web-2: not graceful-1, deleted while refused", f.Pods)
	}
	if !strings.Contains(strings.Join(f.Evidence, "\n"), "graceful-1's eviction was refused from +3.00s, and it went another way (eviction_overtaken at +44.90s)") {
		t.Errorf("evidence %q: want graceful-1's fate", f.Evidence)
	}
	if !strings.Contains(strings.Join(f.Evidence, "\n"), "two-budgets failed: This pod has more than one PodDisruptionBudget (not asked again) at +5.00s") {
		t.Errorf("evidence %q: want the failed eviction said", f.Evidence)
	}
	r = mk(false)
	r.Timeline = r.Timeline[1:] // other-1 not deleted either
	r.Timeline = append(r.Timeline, report.Event{At: at(30000), Kind: report.PodGone, Pod: "other-1"})
	analyse(r)
	if f := find(r, DrainBlocked); f != nil {
		t.Errorf("every refused pod went away, yet %+v", f)
	}
}
