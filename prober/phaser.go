package prober

import (
	"math"
	"runtime"
	"sync/atomic"
)

// phaser is HdrHistogram's WriterReaderPhaser for one writer and one
// reader: the writer brackets each update with enter and exit (an atomic
// add each, never a wait); the reader, after publishing a new place for the
// writer to write, calls flip, which returns once no update begun before it
// is still running. The reader may then read the old place freely.
//
// Contract: one goroutine calls flip at a time (the recorder's tick lock);
// enter/exit pairs may come from any goroutine.
type phaser struct {
	start   atomic.Int64 // non-negative in the even phase, negative in the odd
	evenEnd atomic.Int64
	oddEnd  atomic.Int64
}

// init readies a zero phaser; call it before any other method.
func (p *phaser) init() { p.oddEnd.Store(math.MinInt64) }

// enter begins an update; pass its value to exit.
func (p *phaser) enter() int64 { return p.start.Add(1) - 1 }

func (p *phaser) exit(v int64) {
	if v < 0 {
		p.oddEnd.Add(1)
	} else {
		p.evenEnd.Add(1)
	}
}

// flip starts the next phase and waits for the updates of the current one
// to exit. An update is a few nanoseconds; the wait is longer only when
// its goroutine was descheduled inside it, so the reader yields.
func (p *phaser) flip() {
	nextEven := p.start.Load() < 0
	var initial int64
	if nextEven {
		initial = 0
		p.evenEnd.Store(initial)
	} else {
		initial = math.MinInt64
		p.oddEnd.Store(initial)
	}
	atFlip := p.start.Swap(initial)
	for {
		var ended int64
		if nextEven {
			ended = p.oddEnd.Load()
		} else {
			ended = p.evenEnd.Load()
		}
		if ended == atFlip {
			return
		}
		runtime.Gosched()
	}
}
