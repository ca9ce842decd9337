package prober

import "time"

// procTuner chooses GOMAXPROCS for the closed model (as fast as possible)
// while it runs, by measuring instead of assuming. More Ps are not always
// faster: against a server on the same machine, a second P takes the
// server's core (measured here, 2 cores and nginx on loopback: 1 P ~90,000
// req/s, 2 Ps ~69,000); against a remote server with many connections,
// one P can be the limit. So it starts at one P, measures the completion
// rate over a window, adds a P while that raises the rate by more than
// gainNeeded, and settles on the best it saw.
//
// It is driven by Run's sample tick (step), from one goroutine; setProcs
// is runtime.GOMAXPROCS in the prober and a recorder in tests.
type procTuner struct {
	maxProcs int
	setProcs func(int) int
	// completed is how many requests have completed so far.
	completed func() uint64

	cur, best int
	bestRate  float64
	// windowFrom is when the current measurement began (after settling)
	// and countFrom the completed count then; settleUntil is when the
	// current P count has settled.
	windowFrom, settleUntil time.Duration
	countFrom               uint64
	measuring, done         bool
}

const (
	// tuneSettle: after a change, the scheduler and the connections'
	// goroutines take a moment to spread over the new Ps.
	tuneSettle = 300 * time.Millisecond
	// tuneWindow: one measurement. At tens of thousands of requests a
	// second, 0.7 s is tens of thousands of samples.
	tuneWindow = 700 * time.Millisecond
	// gainNeeded: a P is kept only if it raised the rate by more than
	// this; less is noise on a shared machine, and a P costs CPU.
	gainNeeded = 1.05
)

func newProcTuner(maxProcs int, setProcs func(int) int, completed func() uint64) *procTuner {
	t := &procTuner{maxProcs: maxProcs, setProcs: setProcs, completed: completed, cur: 1, best: 1}
	setProcs(1)
	t.settleUntil = tuneSettle
	return t
}

// Procs is the P count in effect (the chosen one once done).
func (t *procTuner) Procs() int { return t.cur }

// Done reports whether the choice is made.
func (t *procTuner) Done() bool { return t.done }

// step advances the tuner at run offset now.
func (t *procTuner) step(now time.Duration) {
	if t.done || now < t.settleUntil {
		return
	}
	if !t.measuring {
		t.measuring, t.windowFrom, t.countFrom = true, now, t.completed()
		return
	}
	if now-t.windowFrom < tuneWindow {
		return
	}
	rate := float64(t.completed()-t.countFrom) / (now - t.windowFrom).Seconds()
	t.measuring = false
	switch {
	case t.cur == 1 || rate > t.bestRate*gainNeeded:
		t.best, t.bestRate = t.cur, rate
		if t.cur < t.maxProcs {
			t.change(t.cur+1, now)
			return
		}
	}
	if t.cur != t.best {
		t.setProcs(t.best)
		t.cur = t.best
	}
	t.done = true
}

func (t *procTuner) change(n int, now time.Duration) {
	t.setProcs(n)
	t.cur = n
	t.settleUntil = now + tuneSettle
}
