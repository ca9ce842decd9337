package rollout

import (
	"sync"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// Timeline is an append-only, concurrency-safe list of events in receive
// order.
type Timeline struct {
	mu     sync.Mutex
	events []report.Event
	now    func() time.Time
}

// NewTimeline makes a timeline stamping events with now (time.Now if nil).
func NewTimeline(now func() time.Time) *Timeline {
	if now == nil {
		now = time.Now
	}
	return &Timeline{now: now}
}

// Add stamps e with the receive time (unless set) and appends it.
func (t *Timeline) Add(e report.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.At.IsZero() {
		e.At = t.now()
	}
	t.events = append(t.events, e)
}

// Events returns a copy of every event so far.
func (t *Timeline) Events() []report.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]report.Event(nil), t.events...)
}

// Since returns the events after the first n, for incremental readers.
func (t *Timeline) Since(n int) []report.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n >= len(t.events) {
		return nil
	}
	return append([]report.Event(nil), t.events[n:]...)
}

// Kinds filters events by kind, in order.
func Kinds(events []report.Event, kinds ...report.EventKind) []report.Event {
	want := map[report.EventKind]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	var out []report.Event
	for _, e := range events {
		if want[e.Kind] {
			out = append(out, e)
		}
	}
	return out
}
