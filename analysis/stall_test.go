package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// The API server froze from +11s to +19s. Pod a's deletion, made just
// before the freeze, reached rollprobe only at +19.01s. A timeout at +12s
// cannot be put on a with the run's 20 ms tolerance; inside the stall,
// changes received up to its end count, and the failure says so. A
// failure whose connection conntrack mapped is named as always, and one
// begun after the stall is judged with the usual tolerance.
func TestStallWidensTimelineAttribution(t *testing.T) {
	stalled := func() *report.Report {
		return &report.Report{StartedAt: t0, Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Ready: true, IP: "10.0.0.1"},
			{At: at(0), Kind: report.PodPresent, Pod: "b", Ready: true, IP: "10.0.0.2"},
			ev(19010, report.PodDeletionRequested, "a", "old"),
		}, Failures: []report.Failure{
			fail(12000, "timeout", false, ""),
			{Intended: at(13000), Start: at(13000), End: at(13002), Class: "refused", Fresh: true, PodAddr: "10.0.0.2:8080"},
		}}
	}
	r := stalled()
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "" {
		t.Fatalf("without a stall the timeout is put on %q (%s): the test's premise is wrong", f.LikelyPod, f.Context)
	}

	r = stalled()
	r.ViewStalls = []report.ViewStall{{Start: at(11000), End: at(19000), DurationS: 8}}
	r.Rollout = &report.Rollout{TriggerSeenAfterMS: 20}
	x := Explain(r)
	f := x.Failures[0]
	if f.LikelyPod != "a" || f.Evidence != report.EvidenceTimeline || !strings.Contains(f.Context, "8.0s stall") {
		t.Errorf("in the stall: pod %q evidence %q context %q; want a from the widened timeline", f.LikelyPod, f.Evidence, f.Context)
	}
	if f := x.Failures[1]; f.LikelyPod != "b" || f.Evidence != report.EvidenceConntrack || strings.Contains(f.Context, "stall") {
		t.Errorf("conntrack in the stall: pod %q evidence %q context %q; want b, unaffected", f.LikelyPod, f.Evidence, f.Context)
	}
	if got := x.ViewStalls[0]; got.Failures != 2 || got.Widened != 1 {
		t.Errorf("stall counts %+v, want 2 failures, 1 widened", got)
	}
	if r.ViewStalls[0].Failures != 0 {
		t.Error("Explain changed the report's stalls")
	}
	r.ViewStalls = x.ViewStalls // analysed again, the stall is counted afresh
	if again := Explain(r).ViewStalls[0]; again.Failures != 2 || again.Widened != 1 {
		t.Errorf("analysed twice, the stall counts %+v", again)
	}

	// After the stall the usual tolerance applies again.
	r = stalled()
	r.ViewStalls = []report.ViewStall{{Start: at(5000), End: at(11900), DurationS: 6.9}}
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "" {
		t.Errorf("a failure after the stall was widened: %+v", f)
	}
}
