package prober

import (
	"testing"
	"time"
)

// The tuner on a simulated clock: each P count completes requests at a
// fixed rate; the tuner must settle on the best count that was worth its
// gain, trying no more than the maximum and setting each count it tried.
func TestProcTunerChoosesByMeasuring(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rates map[int]float64 // requests per second at each P count
		max   int
		want  int
		tried []int
	}{
		{"server on this machine: a second P is slower", map[int]float64{1: 90000, 2: 69000}, 2, 1, []int{1, 2, 1}},
		{"remote server: more Ps until the gain stops", map[int]float64{1: 50000, 2: 90000, 3: 92000, 4: 120000}, 4, 2, []int{1, 2, 3, 2}},
		{"every P helps, up to the CPUs", map[int]float64{1: 10000, 2: 19000, 3: 27000}, 3, 3, []int{1, 2, 3}},
		{"one CPU: nothing to try", map[int]float64{1: 10000}, 1, 1, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tried []int
			procs := 0
			set := func(n int) int { prev := procs; procs = n; tried = append(tried, n); return prev }
			var completed float64
			tuner := newProcTuner(tc.max, set, func() uint64 { return uint64(completed) })
			step := 100 * time.Millisecond
			for now := time.Duration(0); now < 20*time.Second && !tuner.Done(); now += step {
				completed += tc.rates[procs] * step.Seconds()
				tuner.step(now)
			}
			if !tuner.Done() || tuner.Procs() != tc.want || procs != tc.want {
				t.Fatalf("done %v, chose %d (GOMAXPROCS %d), want %d; tried %v", tuner.Done(), tuner.Procs(), procs, tc.want, tried)
			}
			if len(tried) != len(tc.tried) {
				t.Fatalf("tried %v, want %v", tried, tc.tried)
			}
			for i := range tried {
				if tried[i] != tc.tried[i] {
					t.Fatalf("tried %v, want %v", tried, tc.tried)
				}
			}
		})
	}
}
