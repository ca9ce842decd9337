package report

import (
	"math"
	"sort"
	"time"
)

// WallClock places a run's offsets, measured on the monotonic clock from
// its start, on the wall clock as it read at each of them.
//
// The prober measures every request on the monotonic clock (a latency
// must not jump with the system clock), while everything else a report
// holds is stamped with the wall clock when it happened: the timeline's
// pod changes, the apiserver's own timestamps, and the referees outside
// rollprobe (a packet capture, a proxy's access log). Placing an offset
// at the start's wall time plus the offset is right only while the wall
// clock keeps pace with the monotonic one; a step or slew of the system
// clock during the run (NTP; a virtual machine's clock set forward after
// a pause: this project's CI machines stepped theirs by 2.7 s and then
// slewed it 5 ms a second) set those apart, and a failure that met a pod's
// deletion by both clocks then met it seconds apart in the report.
//
// The zero value (no sample) places offsets at Start plus the offset.
// Not safe for concurrent use: the prober notes samples from one goroutine
// and hands a copy over once the run has ended.
type WallClock struct {
	// Start is the wall clock at offset 0.
	Start time.Time
	// samples, in offset order: the wall clock's lead over Start plus the
	// offset (0 while the two keep pace).
	samples []wallSample
}

type wallSample struct{ at, lead time.Duration }

// NewWallClock starts a clock at start (a time.Now reading, with its
// monotonic part).
func NewWallClock(start time.Time) WallClock {
	return WallClock{Start: start.Round(0), samples: []wallSample{{}}}
}

// Note records the wall clock's reading now (a time.Now reading, with its
// monotonic part) at the offset the monotonic clock gives it from start,
// the time NewWallClock was given. A lead unchanged for three samples or
// more is kept as its first and last.
func (c *WallClock) Note(start, now time.Time) {
	c.NoteAt(now.Sub(start), now.Round(0)) // Sub: monotonic, both having a reading of it
}

// NoteAt records that the wall clock read wall at offset at (a monotonic
// offset from the start NewWallClock was given).
func (c *WallClock) NoteAt(at time.Duration, wall time.Time) {
	lead := wall.Sub(c.Start) - at
	if n := len(c.samples); n > 0 {
		if at <= c.samples[n-1].at {
			return
		}
		// Unchanged since the last two: move the last forward, so the
		// samples keep where each lead began and ended, and a change is
		// placed within the tick it came in.
		if n >= 2 && c.samples[n-1].lead == lead && c.samples[n-2].lead == lead {
			c.samples[n-1].at = at
			return
		}
	}
	c.samples = append(c.samples, wallSample{at, lead})
}

// Clone is a copy that later Notes to c do not change.
func (c WallClock) Clone() WallClock {
	c.samples = append([]wallSample(nil), c.samples...)
	return c
}

// Steps is how many times the wall clock was seen to move against the
// monotonic one (a slew: once a sample).
func (c WallClock) Steps() int {
	n := 0
	for i := 1; i < len(c.samples); i++ {
		if c.samples[i].lead != c.samples[i-1].lead {
			n++
		}
	}
	return n
}

// Lead is how far the wall clock had moved ahead of the monotonic one at
// the last sample (negative: behind).
func (c WallClock) Lead() time.Duration {
	if len(c.samples) == 0 {
		return 0
	}
	return c.samples[len(c.samples)-1].lead
}

// At is the wall clock at offset d: its lead over the monotonic clock
// taken between the samples on either side of d, in proportion (a slew
// is placed exactly, a step within the samples' interval, 100 ms in the
// prober), the last sample's beyond them. UTC, with no monotonic reading.
func (c WallClock) At(d time.Duration) time.Time {
	return c.Start.Add(d + c.lead(d)).UTC()
}

func (c WallClock) lead(d time.Duration) time.Duration {
	n := len(c.samples)
	if n == 0 {
		return 0
	}
	i := sort.Search(n, func(i int) bool { return c.samples[i].at > d })
	switch {
	case i == 0:
		return c.samples[0].lead
	case i == n:
		return c.samples[n-1].lead
	}
	a, b := c.samples[i-1], c.samples[i]
	return a.lead + time.Duration(float64(b.lead-a.lead)*float64(d-a.at)/float64(b.at-a.at))
}

// SecondFrom is the first of the run's seconds to begin at wall time w or
// after it: the first whole second from w.
func (c WallClock) SecondFrom(w time.Time) int64 {
	t := c.SecondOf(w)
	if c.SecondAt(t).Before(w) {
		t++
	}
	return t
}

// Offset is the offset from the start, on the monotonic clock, at which
// the wall clock read w: the inverse of At, so a time stamped by the wall
// clock (a pod's deletion, a capture's packet) is set on the run's own
// seconds, the series' T. Within a step's tick it is placed in
// proportion, as At places the tick's offsets. Should the wall clock have
// been set back, a reading it gave twice is placed at its first offset.
func (c WallClock) Offset(w time.Time) time.Duration {
	x := w.Sub(c.Start) // the offset plus the lead then
	n := len(c.samples)
	if n == 0 {
		return x
	}
	reads := func(s wallSample) time.Duration { return s.at + s.lead }
	i := sort.Search(n, func(i int) bool { return reads(c.samples[i]) > x })
	switch {
	case i == 0:
		return x - c.samples[0].lead
	case i == n:
		return x - c.samples[n-1].lead
	}
	a, b := c.samples[i-1], c.samples[i]
	ra, rb := reads(a), reads(b)
	if rb <= ra {
		return a.at
	}
	return a.at + time.Duration(float64(b.at-a.at)*float64(x-ra)/float64(rb-ra))
}

// ClockLead is one sample of a WallClock as a report holds it: at AtMS
// (the monotonic clock's, from the run's start) the wall clock read
// LeadMS ahead of started_at plus AtMS.
type ClockLead struct {
	AtMS   float64 `json:"at_ms"`
	LeadMS float64 `json:"lead_ms"`
}

// Leads is c's samples for a report: nil when the wall clock kept pace
// with the monotonic one throughout.
func (c WallClock) Leads() []ClockLead {
	if c.Steps() == 0 {
		return nil
	}
	out := make([]ClockLead, len(c.samples))
	for i, s := range c.samples {
		out[i] = ClockLead{AtMS: float64(s.at) / 1e6, LeadMS: float64(s.lead) / 1e6}
	}
	return out
}

// WallClock is the run's clock as the report holds it: started_at and
// its clock's samples.
func (r *Report) WallClock() WallClock {
	c := WallClock{Start: r.StartedAt}
	for _, l := range r.Clock {
		c.samples = append(c.samples, wallSample{at: time.Duration(l.AtMS * 1e6), lead: time.Duration(l.LeadMS * 1e6)})
	}
	return c
}

// SecondAt is when the run's second t (a series row's T: the monotonic
// clock's [t, t+1) s from the start) began, on the wall clock as it read
// then, as failures' and the timeline's times are.
func (c WallClock) SecondAt(t int64) time.Time {
	return c.At(time.Duration(t) * time.Second)
}

// SecondOf is the run's second at wall time w: the last whose start
// (SecondAt) is not after it; -1 before the run.
func (c WallClock) SecondOf(w time.Time) int64 {
	// Guess by the offset alone, then step to the second.
	t := max(-1, int64(math.Floor(w.Sub(c.Start).Seconds())))
	for t > -1 && c.SecondAt(t).After(w) {
		t--
	}
	for !c.SecondAt(t + 1).After(w) {
		t++
	}
	return t
}
