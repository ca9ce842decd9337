package report

import (
	"testing"
	"time"
)

// The wall clock as this project's CI machine showed it (a watcher beside
// a rehearsal, 2026-12-03): in step with the monotonic clock, then set 2.7
// s forward at once, then slewed 5 ms a second. Offsets are placed on the
// wall clock as it read then: before the step at the start's time plus
// the offset; during the slew exactly (the samples' lead in proportion);
// beyond the last sample at its lead. A clock with no sample is the
// start plus the offset.
func TestWallClockFollowsStepsAndSlews(t *testing.T) {
	start := time.Date(2026, 12, 3, 23, 47, 0, 0, time.UTC)
	c := NewWallClock(start)
	wall := func(at, lead time.Duration) time.Time { return start.Add(at + lead) }
	c.NoteAt(100*time.Millisecond, wall(100*time.Millisecond, 0)) // in step
	c.NoteAt(200*time.Millisecond, wall(200*time.Millisecond, 0)) // in step: replaces 100 ms's
	// Stepped between 200 and 300 ms, then slewing 500 µs a tick.
	c.NoteAt(300*time.Millisecond, wall(300*time.Millisecond, 2700*time.Millisecond))
	c.NoteAt(400*time.Millisecond, wall(400*time.Millisecond, 2700500*time.Microsecond))
	c.NoteAt(500*time.Millisecond, wall(500*time.Millisecond, 2701*time.Millisecond))
	if c.Steps() != 3 || c.Lead() != 2701*time.Millisecond || len(c.samples) != 5 {
		t.Fatalf("steps %d, lead %v, samples %v: want 3 moves, lead 2.701s, 5 samples (0 and 200 ms in step)", c.Steps(), c.Lead(), c.samples)
	}
	for _, tt := range []struct {
		at   time.Duration
		want time.Duration // the wall clock's lead then
	}{
		{0, 0},
		{150 * time.Millisecond, 0},
		{250 * time.Millisecond, 1350 * time.Millisecond}, // within the step's tick: in proportion
		{300 * time.Millisecond, 2700 * time.Millisecond},
		{450 * time.Millisecond, 2700750 * time.Microsecond}, // the slew, exactly
		{10 * time.Second, 2701 * time.Millisecond},          // beyond the last sample
	} {
		if got := c.At(tt.at); !got.Equal(wall(tt.at, tt.want)) || got.Location() != time.UTC {
			t.Errorf("At(%v) = %v, want %v (lead %v), UTC", tt.at, got, wall(tt.at, tt.want), tt.want)
		}
	}
	// A copy is not changed by later samples.
	kept := c.Clone()
	c.NoteAt(600*time.Millisecond, wall(600*time.Millisecond, 3*time.Second))
	if kept.Lead() != 2701*time.Millisecond || c.Lead() != 3*time.Second {
		t.Errorf("clone's lead %v, clock's %v: want 2.701s and 3s", kept.Lead(), c.Lead())
	}
	// No sample: the start plus the offset.
	if got := (WallClock{Start: start}).At(time.Second); !got.Equal(start.Add(time.Second)) {
		t.Errorf("a clock with no sample: %v", got)
	}
	// Readings with their monotonic part, a moment apart: in step.
	now := time.Now()
	real := NewWallClock(now)
	real.Note(now, time.Now())
	if real.Steps() > 1 || real.Lead() > time.Millisecond || real.Lead() < -time.Millisecond {
		t.Errorf("two readings a moment apart: %d steps, lead %v", real.Steps(), real.Lead())
	}
}

// A report holds the clock's samples (clock), and places a series row's
// second on the wall clock by them: after a 2.7 s step the second 2 of
// the run began 2.7 s later than started_at plus 2 s, and a failure's
// wall time falls in the second that holds it. With no samples, seconds
// are started_at plus T, and a time falls in the floor of its offset.
func TestReportSecondsOnTheWallClock(t *testing.T) {
	start := time.Date(2026, 12, 3, 23, 47, 0, 0, time.UTC)
	c := NewWallClock(start)
	c.NoteAt(1000*time.Millisecond, start.Add(1000*time.Millisecond))
	c.NoteAt(1100*time.Millisecond, start.Add(1100*time.Millisecond+2700*time.Millisecond))
	r := &Report{StartedAt: start, Clock: c.Leads()}
	if len(r.Clock) != 3 || r.Clock[2] != (ClockLead{AtMS: 1100, LeadMS: 2700}) {
		t.Fatalf("clock %+v: want the start's, 1000 ms's and 1100 ms's samples", r.Clock)
	}
	rc := r.WallClock()
	step := 2700 * time.Millisecond
	if !rc.SecondAt(2).Equal(start.Add(2*time.Second+step)) || !rc.SecondAt(1).Equal(start.Add(time.Second)) {
		t.Errorf("seconds 1 and 2 began at %v and %v: want +1s and +2s plus the step", rc.SecondAt(1), rc.SecondAt(2))
	}
	for _, tt := range []struct {
		at   time.Time
		want int64
	}{
		{start.Add(-time.Millisecond), -1},
		{start.Add(500 * time.Millisecond), 0},
		{start.Add(1050 * time.Millisecond), 1},
		{start.Add(2*time.Second + step), 2},     // the second's first instant
		{start.Add(2*time.Second + step - 1), 1}, // just before it: still second 1 (stretched by the step)
		{start.Add(5500*time.Millisecond + step), 5},
	} {
		if got := rc.SecondOf(tt.at); got != tt.want {
			t.Errorf("SecondOf(+%v) = %d, want %d", tt.at.Sub(start), got, tt.want)
		}
	}
	// The first whole second from a time: the one it begins, or the next.
	if rc.SecondFrom(start.Add(2*time.Second+step)) != 2 || rc.SecondFrom(start.Add(2*time.Second+step+1)) != 3 || rc.SecondFrom(start.Add(1050*time.Millisecond)) != 2 {
		t.Errorf("SecondFrom: %d at second 2's first instant, %d just after, %d inside second 1: want 2, 3, 2",
			rc.SecondFrom(start.Add(2*time.Second+step)), rc.SecondFrom(start.Add(2*time.Second+step+1)), rc.SecondFrom(start.Add(1050*time.Millisecond)))
	}
	plain := (&Report{StartedAt: start}).WallClock()
	if plain.SecondOf(start.Add(2500*time.Millisecond)) != 2 || !plain.SecondAt(3).Equal(start.Add(3*time.Second)) || NewWallClock(start).Leads() != nil {
		t.Errorf("no samples: second of +2.5s %d, second 3 at %v: want 2 and +3s; a clock that kept pace writes none", plain.SecondOf(start.Add(2500*time.Millisecond)), plain.SecondAt(3))
	}
}

// Offset undoes At: a wall time is set back on the run's monotonic
// offsets, through a step (a reading inside the step's tick in
// proportion), a slew, beyond the last sample, before the start, and with
// no samples at all. A wall clock set back gives a reading twice: the
// first offset that read it.
func TestWallClockOffsetUndoesAt(t *testing.T) {
	start := time.Date(2026, 12, 3, 23, 47, 0, 0, time.UTC)
	c := NewWallClock(start)
	c.NoteAt(1000*time.Millisecond, start.Add(1000*time.Millisecond))
	c.NoteAt(1100*time.Millisecond, start.Add(1100*time.Millisecond+2700*time.Millisecond)) // the step
	c.NoteAt(1200*time.Millisecond, start.Add(1200*time.Millisecond+2701*time.Millisecond)) // a slew
	c.NoteAt(1300*time.Millisecond, start.Add(1300*time.Millisecond+2702*time.Millisecond))
	for _, at := range []time.Duration{-time.Second, 0, 500 * time.Millisecond, 1000 * time.Millisecond, 1050 * time.Millisecond,
		1100 * time.Millisecond, 1150 * time.Millisecond, 1250 * time.Millisecond, 30 * time.Second} {
		if got := c.Offset(c.At(at)); got < at-time.Microsecond || got > at+time.Microsecond {
			t.Errorf("Offset(At(%v)) = %v", at, got)
		}
	}
	// Inside the step: the wall read +2.4s (1000 ms + 1.4 s) only while
	// the tick from 1000 to 1100 ms carried it 2.7 s forward.
	if got := c.Offset(start.Add(2400 * time.Millisecond)); got <= 1000*time.Millisecond || got >= 1100*time.Millisecond {
		t.Errorf("a reading inside the step at %v: want within its tick (1000-1100 ms)", got)
	}
	if got := (WallClock{Start: start}).Offset(start.Add(3 * time.Second)); got != 3*time.Second {
		t.Errorf("no samples: %v, want 3s", got)
	}
	back := NewWallClock(start)
	back.NoteAt(1000*time.Millisecond, start.Add(1000*time.Millisecond))
	back.NoteAt(1100*time.Millisecond, start.Add(1100*time.Millisecond-500*time.Millisecond)) // set back 0.5 s
	if got := back.Offset(start.Add(800 * time.Millisecond)); got != 800*time.Millisecond {
		t.Errorf("set back: a reading given twice placed at %v, want its first, 800ms", got)
	}
}
