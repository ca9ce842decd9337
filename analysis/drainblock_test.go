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
			Rollout: &report.Rollout{Trigger: "drain node lab-node-1 (kubectl drain --ignore-daemonsets --delete-emptydir-data)", Status: status, Namespace: "default", TriggerSeenAfterMS: 20},
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
