package prober

import (
	"math"
	"time"
)

// Pacer decides when each request is meant to be sent. It is pure: the n-th
// request's intended send time is a function of n alone, so the schedule does
// not drift when the prober falls behind, and latency can be measured from
// the intended time (correcting for coordinated omission, as wrk2 does).
type Pacer interface {
	// Offset returns the intended send time of request n (0-based) as an
	// offset from the start of the run; ok is false when the schedule ends
	// before request n.
	Offset(n uint64) (offset time.Duration, ok bool)
	// Rate is the nominal rate in requests per second (0: unpaced).
	Rate() float64
}

// ConstantPacer sends Freq requests per second, evenly spaced, for Duration
// (0: no end of its own).
type ConstantPacer struct {
	Freq     float64
	Duration time.Duration
}

// Offset implements Pacer.
func (p ConstantPacer) Offset(n uint64) (time.Duration, bool) {
	if p.Freq <= 0 {
		return 0, false
	}
	off := float64(n) * float64(time.Second) / p.Freq
	if off >= math.MaxInt64 {
		return 0, false
	}
	d := time.Duration(off)
	if p.Duration > 0 && d >= p.Duration {
		return 0, false
	}
	return d, true
}

// Rate implements Pacer.
func (p ConstantPacer) Rate() float64 { return p.Freq }

// Expected returns how many requests the pacer schedules within d.
func Expected(p Pacer, d time.Duration) uint64 {
	if p.Rate() <= 0 || d <= 0 {
		return 0
	}
	// Offsets are increasing, so binary search the first n past d.
	lo, hi := uint64(0), uint64(p.Rate()*d.Seconds())+2
	for lo < hi {
		mid := lo + (hi-lo)/2
		if off, ok := p.Offset(mid); ok && off < d {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
