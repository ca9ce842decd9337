package prober

import "time"

// procTuner chooses GOMAXPROCS for the closed model (as fast as possible)
// while it runs, by measuring instead of assuming. More Ps are not always
// faster: against a server on the same machine, a second P takes the
// server's core (measured here, 2 cores and nginx on loopback: 1 P ~90,000
// req/s, 2 Ps ~69,000); against a remote server with many connections,
// one P can be the limit. So it starts at one P and tries one more at a
// time, A/B/A: the current count, the candidate, the current count again.
// The candidate is kept only if its completion rate beats both windows
// around it by more than gainNeeded, so a machine that drifts (this shared
// one varies ±15% from second to second) does not pass for a gain; it
// settles on the last count kept.
//
// It is driven by Run's sample tick (step), from one goroutine; setProcs
// is runtime.GOMAXPROCS in the prober and a recorder in tests.
type procTuner struct {
	maxProcs int
	setProcs func(int) int
	// completed is how many requests have completed so far.
	completed func() uint64

	cur, best int
	phase     tunePhase
	// baseRate and candRate are the current trial's first window (at
	// best) and its candidate's (at best+1).
	baseRate, candRate float64
	// settle and window are the phases of one trial (tuneSettle and
	// tuneWindow unless set).
	settle, window time.Duration
	// windowFrom is when the current measurement began (after settling)
	// and countFrom the completed count then; settleUntil is when the
	// current P count has settled.
	windowFrom, settleUntil time.Duration
	countFrom               uint64
	measuring, done         bool
}

// tunePhase is which window of an A/B/A trial is being measured.
type tunePhase uint8

const (
	tuneBase      tunePhase = iota // A: the count kept so far
	tuneCandidate                  // B: one P more
	tuneBaseAgain                  // A again
)

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
	// The event loops settle at once (a quota moves within a request's
	// time): their trials are shorter, and the P count that loses costs
	// less of the run (measured here: a 1 s trial at 2 Ps cost 2-3% of an
	// 8 s run).
	loopTuneSettle = 100 * time.Millisecond
	loopTuneWindow = 400 * time.Millisecond
)

func newProcTuner(maxProcs int, setProcs func(int) int, completed func() uint64) *procTuner {
	t := &procTuner{maxProcs: maxProcs, setProcs: setProcs, completed: completed, cur: 1, best: 1,
		settle: tuneSettle, window: tuneWindow}
	setProcs(1)
	t.settleUntil = tuneSettle
	return t
}

// shorter gives the tuner the event loops' shorter trials.
func (t *procTuner) shorter() {
	t.settle, t.window = loopTuneSettle, loopTuneWindow
	t.settleUntil = min(t.settleUntil, t.settle)
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
	if now-t.windowFrom < t.window {
		return
	}
	rate := float64(t.completed()-t.countFrom) / (now - t.windowFrom).Seconds()
	t.measuring = false
	switch t.phase {
	case tuneBase:
		if t.best >= t.maxProcs {
			t.done = true
			return
		}
		t.baseRate, t.phase = rate, tuneCandidate
		t.change(t.best+1, now)
	case tuneCandidate:
		t.candRate, t.phase = rate, tuneBaseAgain
		t.change(t.best, now)
	case tuneBaseAgain:
		if t.candRate <= gainNeeded*max(t.baseRate, rate) {
			t.done = true // already back at best
			return
		}
		t.best++
		t.change(t.best, now)
		t.phase = tuneBase
		if t.best >= t.maxProcs {
			t.done = true
		}
	}
}

func (t *procTuner) change(n int, now time.Duration) {
	t.setProcs(n)
	t.cur = n
	t.settleUntil = now + t.settle
}
