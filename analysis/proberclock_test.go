package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// Shaped on a CI run that put a prober's refusal on no pod: old pod b's
// deletion was received at +5.819 s and (here) committed after +5.70 s by
// the apiserver's order of writes; the refusal came back at +5.686 s as
// the prober's clock offset put it, an offset measured from a ping whose
// round trip leaves it uncertain. Within half that round trip, b is a candidate, and
// the failure says why; a prober whose clock is known more tightly than
// the gap, or this process's own failure, keeps the exact answer: nobody's.
func TestAProbersFailureCountsItsClocksUncertainty(t *testing.T) {
	tm := func(ms int) *time.Time { x := at(ms); return &x }
	del := ev(5819, report.PodDeletionRequested, "b", "old")
	del.CommittedAfter = tm(5700)
	tl := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		del,
	}
	refusal := func(prober string) report.Failure {
		return report.Failure{Intended: at(5681), Start: at(5685), End: at(5686), Class: report.ClassRefused, Fresh: true, Prober: prober}
	}
	run := func(rttMS float64, prober string) (report.Failure, *report.Attribution) {
		r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{refusal(prober)},
			Probers: []report.ProberInfo{{Pod: "prober-1", ClockRTTMS: rttMS}}}
		analyse(r)
		return r.Failures[0], r.Attribution
	}

	f, att := run(20, "prober-1") // within ±10 ms: b's deletion came after it
	if f.LikelyPod != "" {
		t.Errorf("±10ms: put on %q (%s), want no pod", f.LikelyPod, f.Context)
	}
	if !strings.Contains(att.ToleranceSource, "(up to ±10.0ms)") {
		t.Errorf("the tolerance's source does not name the probers' clocks: %s", att.ToleranceSource)
	}
	f, _ = run(40, "") // this process's own: exact
	if f.LikelyPod != "" {
		t.Errorf("this process's own refusal: put on %q (%s), want no pod", f.LikelyPod, f.Context)
	}
	f, _ = run(300, "") // another prober's clock does not widen this process's failure
	if f.LikelyPod != "" {
		t.Errorf("this process's own refusal, a prober's clock ±150ms: put on %q (%s), want no pod", f.LikelyPod, f.Context)
	}

	f, att = run(300, "prober-1") // within ±150 ms: b may have been deleted before it
	if f.LikelyPod != "b" || f.Confidence != 1 || !strings.Contains(f.Context, "its prober's clock is known to within ±150.0ms") {
		t.Errorf("±150ms: likely %q (confidence %v, candidates %v): %s; want b, saying why", f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}
	if att.Certain != 1 {
		t.Errorf("attribution %+v", *att)
	}

	// A failure the clock did not change says nothing of it.
	r := &report.Report{StartedAt: t0, Timeline: tl, Failures: []report.Failure{refusal("prober-1")},
		Probers: []report.ProberInfo{{Pod: "prober-1", ClockRTTMS: 300}}}
	r.Failures[0].Intended, r.Failures[0].Start, r.Failures[0].End = at(6000), at(6000), at(6001)
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "b" || strings.Contains(f.Context, "clock") {
		t.Errorf("a refusal after b's deletion: likely %q: %s", f.LikelyPod, f.Context)
	}
}
