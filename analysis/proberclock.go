package analysis

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// proberClocks is how far each in-cluster prober's times may be off the
// clock the timeline is on, by the prober's pod name: half the round trip
// of the ping its clock offset was estimated from. The prober read that
// ping at some moment between its send and the answer's receipt, so the
// true offset lies within the estimate give or take half the round trip
// (fleet's measureClock takes the midpoint); the prober's times moved onto
// the CLI's clock carry that error. nil when no prober measured any.
func proberClocks(r *report.Report) map[string]time.Duration {
	var out map[string]time.Duration
	for _, p := range r.Probers {
		if p.ClockRTTMS <= 0 {
			continue
		}
		if out == nil {
			out = map[string]time.Duration{}
		}
		// Rounded up to the microsecond: the report keeps the round trip
		// in milliseconds to the microsecond.
		out[p.Pod] = time.Duration(math.Ceil(p.ClockRTTMS*float64(time.Millisecond)/2/float64(time.Microsecond))) * time.Microsecond
	}
	return out
}

// maxClock is the largest of the probers' clock uncertainties (0 when none).
func maxClock(clocks map[string]time.Duration) time.Duration {
	var m time.Duration
	for _, d := range clocks {
		m = max(m, d)
	}
	return m
}

// attributeOnClock is attributeInView for a failure whose time is known
// only to within clock either side (an in-cluster prober's: proberClocks).
// The pod changes the prober's clock can put before the failure are
// counted; where that changed the pod named or the candidates, f's
// context says so. The deletions' lower bounds (the apiserver's order of
// writes) are precise to a mark's period; a prober's failure's time is
// only as precise as its clock: compared exactly, a prober's refusal that
// came back a few milliseconds before such a bound would be put on no pod.
func attributeOnClock(a attributor, f *report.Failure, stalls []report.ViewStall, clock time.Duration) []leftRules {
	if clock <= 0 {
		return attributeInView(a, f, stalls)
	}
	exact := *f
	attributeInView(a, &exact, slices.Clone(stalls))
	a.clock = clock
	left := attributeInView(a, f, stalls)
	if exact.LikelyPod == f.LikelyPod && slices.Equal(exact.Candidates, f.Candidates) {
		return left
	}
	note := fmt.Sprintf("its prober's clock is known to within %s of rollprobe's (half the round trip of the ping that measured it): pod changes that close to the failure counted", fmtClock(clock))
	if f.Context == "" {
		f.Context = note
	} else {
		f.Context += "; " + note
	}
	return left
}

// fmtClock says a clock uncertainty in milliseconds.
func fmtClock(d time.Duration) string {
	return fmt.Sprintf("±%.1fms", float64(d)/float64(time.Millisecond))
}
