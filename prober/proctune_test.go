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
		drift float64 // the machine's speed grows by this fraction per second
	}{
		{"server on this machine: a second P is slower", map[int]float64{1: 90000, 2: 69000}, 2, 1, []int{1, 2, 1}, 0},
		{"remote server: more Ps until the gain stops", map[int]float64{1: 50000, 2: 90000, 3: 92000, 4: 120000}, 4, 2, []int{1, 2, 1, 2, 3, 2}, 0},
		{"every P helps, up to the CPUs", map[int]float64{1: 10000, 2: 19000, 3: 27000}, 3, 3, []int{1, 2, 1, 2, 3, 2, 3}, 0},
		{"one CPU: nothing to try", map[int]float64{1: 10000}, 1, 1, []int{1}, 0},
		// A second P 3% slower, on a machine speeding up by 20% a second:
		// against the window before it alone it would look 5% faster.
		{"a machine speeding up: no gain for the P", map[int]float64{1: 90000, 2: 87300}, 2, 1, []int{1, 2, 1}, 0.2},
	} {
		for _, loops := range []bool{false, true} {
			name, settle, window := tc.name+"/goroutines", tuneSettle, tuneWindow
			if loops {
				name, settle, window = tc.name+"/loops", loopTuneSettle, loopTuneWindow
			}
			t.Run(name, func(t *testing.T) {
				var tried []int
				procs := 0
				set := func(n int) int { prev := procs; procs = n; tried = append(tried, n); return prev }
				var completed float64
				tuner := newProcTuner(tc.max, set, func() uint64 { return uint64(completed) })
				if loops {
					tuner.shorter()
				}
				step := 100 * time.Millisecond
				now := time.Duration(0)
				for ; now < 20*time.Second && !tuner.Done(); now += step {
					completed += tc.rates[procs] * (1 + tc.drift*now.Seconds()) * step.Seconds()
					tuner.step(now)
				}
				// Each P count set costs one settle and one window (and a
				// tick of slack each, the tuner being stepped by the tick).
				if windows := time.Duration(len(tc.tried)); now > windows*(settle+window+2*step) {
					t.Fatalf("decided at %v: longer than %d windows of %v + %v", now, windows, settle, window)
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
}
