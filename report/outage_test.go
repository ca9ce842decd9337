package report_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// Windows built from failures in any arrival order equal the ones a pass
// over the sorted failures makes (a new window at every gap over
// OutageGap).
func TestWindowsAreOrderIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + rng.IntN(60)
		times := make([]time.Duration, n)
		for i := range times {
			times[i] = time.Duration(rng.IntN(20_000)) * time.Millisecond
		}
		// The reference: sorted, one pass.
		sorted := slices.Clone(times)
		slices.Sort(sorted)
		var want []report.Window
		for _, at := range sorted {
			if len(want) == 0 || at-want[len(want)-1].End > report.OutageGap {
				want = append(want, report.Window{Start: at, End: at})
			}
			want[len(want)-1].End = at
			want[len(want)-1].Count++
		}
		var ws report.Windows
		for _, i := range rng.Perm(n) {
			ws.Add(times[i], "refused")
		}
		got := ws.List()
		if len(got) != len(want) {
			t.Fatalf("round %d: %d windows, want %d\n%v\n%v", round, len(got), len(want), got, want)
		}
		for i := range got {
			if got[i].Start != want[i].Start || got[i].End != want[i].End || got[i].Count != want[i].Count || got[i].ByClass["refused"] != want[i].Count {
				t.Fatalf("round %d window %d: %+v, want %+v", round, i, got[i], want[i])
			}
		}
	}
}
