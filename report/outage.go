package report

import (
	"maps"
	"math"
	"slices"
	"time"
)

// OutageGap splits outages: failures whose intended send times are further
// apart than this belong to different outages.
const OutageGap = time.Second

// Window is one outage as its failures define it: from the first one's
// intended send time to the last one's (offsets from the run's start),
// with the failures' count by class.
type Window struct {
	Start, End time.Duration
	Count      uint64
	ByClass    map[string]uint64
}

// Outage is w as the report holds it, its offsets placed on the wall
// clock by c (a run's offsets; or wall-clock offsets from a start with no
// sample: WallClock{Start: start}).
func (w Window) Outage(c WallClock) Outage {
	from, to := c.At(w.Start), c.At(w.End)
	// Its length by the offsets: a step of the wall clock within it is
	// not its length.
	return Outage{Start: from, End: to, DurationS: math.Round((w.End-w.Start).Seconds()*1000) / 1000, Count: int(w.Count), ByClass: w.ByClass}
}

// Windows is the one definition of an outage, shared by the report (the
// analysis, once every failure is known) and the live dashboard (the
// recorder, as failures complete). Failures may be added in any order —
// a connect timeout completes two seconds after the refusals that follow
// it — and the windows are the same as a pass over the failures sorted by
// intended time that starts a new window at every gap over OutageGap.
// The zero value is empty and ready; it is not safe for concurrent use.
type Windows struct{ w []Window }

// Add puts a failure intended at offset at, of class, into its window:
// extending one within OutageGap of it (and merging windows it now
// bridges), or opening a new one.
func (ws *Windows) Add(at time.Duration, class string) {
	i, _ := slices.BinarySearchFunc(ws.w, at, func(w Window, t time.Duration) int {
		if w.End+OutageGap < t {
			return -1
		}
		return 1
	}) // the first window that ends no more than the gap before at
	if i == len(ws.w) || ws.w[i].Start-OutageGap > at {
		ws.w = slices.Insert(ws.w, i, Window{Start: at, End: at, ByClass: map[string]uint64{}})
	}
	w := &ws.w[i]
	w.Start, w.End = min(w.Start, at), max(w.End, at)
	w.Count++
	w.ByClass[class]++
	for i+1 < len(ws.w) && ws.w[i+1].Start-ws.w[i].End <= OutageGap {
		next := ws.w[i+1]
		ws.w[i].End = max(ws.w[i].End, next.End)
		ws.w[i].Count += next.Count
		for c, n := range next.ByClass {
			ws.w[i].ByClass[c] += n
		}
		ws.w = slices.Delete(ws.w, i+1, i+2)
	}
}

// List returns a copy of the windows in time order.
func (ws *Windows) List() []Window { return ws.ListFrom(0) }

// ListFrom returns a copy of the windows from the i-th on.
func (ws *Windows) ListFrom(i int) []Window {
	i = min(max(i, 0), len(ws.w))
	out := make([]Window, 0, len(ws.w)-i)
	for _, w := range ws.w[i:] {
		w.ByClass = maps.Clone(w.ByClass)
		out = append(out, w)
	}
	return out
}

// Len is the number of windows.
func (ws *Windows) Len() int { return len(ws.w) }
