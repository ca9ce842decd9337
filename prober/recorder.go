package prober

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds, in microseconds: 1 µs to 1 hour, 3 significant digits.
// Values beyond the top are clamped (and flagged by max being the top).
const (
	histLowest  = 1
	histHighest = int64(time.Hour / time.Microsecond)
	histSigFigs = 3
)

func newHistogram() *hdr.Histogram { return hdr.New(histLowest, histHighest, histSigFigs) }

func recordMicros(h *hdr.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < histLowest {
		us = histLowest
	}
	if us > histHighest {
		us = histHighest
	}
	_ = h.RecordValue(us) // cannot fail: clamped into range
}

// maxBackends bounds how many distinct backend header values are counted;
// later values are counted under OtherBackends, so a misbehaving header
// (a request ID, say) cannot grow memory without bound.
const (
	maxBackends   = 1024
	OtherBackends = "(other)"
)

// Recorder owns the results of a run. Each worker buffers its results in
// its own Batch, with no lock; a batch reaches the recorder's shards (one
// lock per batch) when it is full, when the sampler's tick has moved on, or
// before the worker sleeps. Tick folds finished seconds into the series,
// and Snapshot gives a consistent view to live displays and reporters.
// Nothing reads workers directly.
type Recorder struct {
	shards       []shard
	keepFailures int64
	kept         atomic.Int64  // failures reserved for keeping in full
	epoch        atomic.Uint64 // advanced by Tick: batches older than it flush

	mu         sync.Mutex
	rows       []SecondRow // dense: rows[i].Second == i
	rowHist    map[int64]*hdr.Histogram
	closedUpTo int64 // seconds below this are final
}

// secondStats is one shard's share of one second.
type secondStats struct {
	sent     uint64
	classes  [NumClasses]uint64
	latency  *hdr.Histogram // responses completed in this second
	backends map[string]uint64
	maxLag   time.Duration
}

type shard struct {
	mu       sync.Mutex
	classes  [NumClasses]uint64
	status   [1000]uint64 // by code; 0 for none
	backends map[string]uint64
	latency  *hdr.Histogram
	service  *hdr.Histogram
	fresh    uint64
	reused   uint64
	canceled uint64
	maxLag   time.Duration
	seconds  map[int64]*secondStats
	failures []Result
	_        [64]byte // keep neighbouring shards' locks off one cache line
}

// NewRecorder makes a recorder with the given number of shards; workers pick
// a shard by index. keepFailures bounds the failures kept in full.
func NewRecorder(shards, keepFailures int) *Recorder {
	if shards < 1 {
		shards = 1
	}
	r := &Recorder{shards: make([]shard, shards), keepFailures: int64(keepFailures), rowHist: map[int64]*hdr.Histogram{}}
	for i := range r.shards {
		s := &r.shards[i]
		s.latency, s.service = newHistogram(), newHistogram()
		s.backends = map[string]uint64{}
		s.seconds = map[int64]*secondStats{}
	}
	return r
}

func (s *shard) second(k int64) *secondStats {
	st := s.seconds[k]
	if st == nil {
		st = &secondStats{}
		s.seconds[k] = st
	}
	return st
}

func countBackend(m map[string]uint64, b string) {
	if _, ok := m[b]; !ok && len(m) >= maxBackends {
		b = OtherBackends
	}
	m[b]++
}

// Record adds one result at once (one lock). shardHint is the worker's
// index. Workers use a Batch instead.
func (r *Recorder) Record(shardHint int, res *Result) {
	s := &r.shards[shardHint%len(r.shards)]
	s.mu.Lock()
	defer s.mu.Unlock()
	r.recordLocked(s, res)
}

// batchSize bounds the results a worker holds before they reach the
// recorder.
const batchSize = 64

// Batch is one worker's buffer of results. It is owned by that worker:
// Add takes no lock (a copy into the buffer, an atomic load); the results
// reach the recorder in one locked step when the buffer is full or stale.
type Batch struct {
	rec   *Recorder
	shard *shard
	buf   []Result
	epoch uint64
}

// NewBatch makes a batch for the worker with index shardHint.
func (r *Recorder) NewBatch(shardHint int) *Batch {
	return &Batch{rec: r, shard: &r.shards[shardHint%len(r.shards)], buf: make([]Result, 0, batchSize), epoch: r.epoch.Load()}
}

// Add buffers res, and flushes when the buffer is full or the recorder's
// tick has moved on since the last flush (so live views lag by at most
// about a tick while the worker keeps sending).
func (b *Batch) Add(res *Result) {
	b.buf = append(b.buf, *res)
	if len(b.buf) == cap(b.buf) || b.rec.epoch.Load() != b.epoch {
		b.Flush()
	}
}

// Idle is called before the worker waits (for its next intended time):
// results are not held across a wait longer than hold, nor across a tick.
func (b *Batch) Idle(wait time.Duration) {
	const hold = 20 * time.Millisecond
	if len(b.buf) > 0 && (wait > hold || b.rec.epoch.Load() != b.epoch) {
		b.Flush()
	}
}

// Flush hands every buffered result to the recorder.
func (b *Batch) Flush() {
	b.epoch = b.rec.epoch.Load()
	if len(b.buf) == 0 {
		return
	}
	s := b.shard
	s.mu.Lock()
	for i := range b.buf {
		b.rec.recordLocked(s, &b.buf[i])
	}
	s.mu.Unlock()
	clear(b.buf) // drop references (error values) held by the copies
	b.buf = b.buf[:0]
}

// recordLocked adds res to shard s, whose lock the caller holds.
func (r *Recorder) recordLocked(s *shard, res *Result) {
	keep := false
	if res.Class != OK && !res.canceled && r.keepFailures > 0 {
		keep = r.kept.Add(1) <= r.keepFailures
	}
	if res.canceled {
		s.canceled++
		return
	}
	s.classes[res.Class]++
	if res.Status > 0 && res.Status < len(s.status) {
		s.status[res.Status]++
	}
	if res.Fresh {
		s.fresh++
	} else {
		s.reused++
	}
	lag := res.Lag()
	if lag > s.maxLag {
		s.maxLag = lag
	}
	startSec := int64(res.Start / time.Second)
	endSec := int64(res.End / time.Second)
	st := s.second(startSec)
	st.sent++
	if lag > st.maxLag {
		st.maxLag = lag
	}
	if endSec != startSec {
		st = s.second(endSec)
	}
	st.classes[res.Class]++
	if res.HasResponse() {
		recordMicros(s.latency, res.Latency())
		recordMicros(s.service, res.ServiceTime())
		if st.latency == nil {
			st.latency = newHistogram()
		}
		recordMicros(st.latency, res.Latency())
		if res.Backend != "" {
			countBackend(s.backends, res.Backend)
			if st.backends == nil {
				st.backends = map[string]uint64{}
			}
			countBackend(st.backends, res.Backend)
		}
	}
	if keep {
		s.failures = append(s.failures, *res)
	}
}

// SecondRow is one second of the run. Sent counts requests begun in the
// second; outcomes and latencies count requests completed in it.
type SecondRow struct {
	Second   int64
	Sent     uint64
	Classes  [NumClasses]uint64
	P50, P99 time.Duration // latency (from intended time) of responses completed
	MaxLag   time.Duration
	Backends map[string]uint64
}

// OK is the number of successful requests completed in the second.
func (r *SecondRow) OK() uint64 { return r.Classes[OK] }

// Failed is the number of target failures (local errors excluded).
func (r *SecondRow) Failed() uint64 {
	var n uint64
	for c := Class(1); c < numClasses; c++ {
		if c.Failed() {
			n += r.Classes[c]
		}
	}
	return n
}

// closeGrace is how long after a second ends it stays open for results that
// were measured in it but recorded a moment later (a worker's batch is
// flushed within about a tick, sampleEvery).
const closeGrace = 500 * time.Millisecond

// Tick folds every second that ended before now-closeGrace into the series.
// Call it from one goroutine (the sampler); Close(math.MaxInt64) folds all.
func (r *Recorder) Tick(now time.Duration) {
	r.epoch.Add(1)
	limit := int64((now - closeGrace) / time.Second) // seconds < limit are final
	var moved []map[int64]*secondStats
	for i := range r.shards {
		s := &r.shards[i]
		var out map[int64]*secondStats
		s.mu.Lock()
		for k, st := range s.seconds {
			if k < limit {
				if out == nil {
					out = map[int64]*secondStats{}
				}
				out[k] = st
				delete(s.seconds, k)
			}
		}
		s.mu.Unlock()
		if out != nil {
			moved = append(moved, out)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range moved {
		for k, st := range m {
			row := r.row(k)
			row.Sent += st.sent
			for c := range st.classes {
				row.Classes[c] += st.classes[c]
			}
			row.MaxLag = max(row.MaxLag, st.maxLag)
			for b, n := range st.backends {
				if row.Backends == nil {
					row.Backends = map[string]uint64{}
				}
				row.Backends[b] += n
			}
			if st.latency != nil && k >= r.closedUpTo {
				h := r.rowHist[k]
				if h == nil {
					h = newHistogram()
					r.rowHist[k] = h
				}
				h.Merge(st.latency)
			}
		}
	}
	// Finalise quantiles of seconds that just closed. A result recorded
	// after its second closed (a worker preempted between measuring and
	// recording for longer than closeGrace) still adds to the counts above
	// but not to the quantiles.
	for k, h := range r.rowHist {
		if k < limit {
			row := r.row(k)
			row.P50 = time.Duration(h.ValueAtQuantile(50)) * time.Microsecond
			row.P99 = time.Duration(h.ValueAtQuantile(99)) * time.Microsecond
			delete(r.rowHist, k)
		}
	}
	r.closedUpTo = max(r.closedUpTo, limit)
}

// row returns the row for second k, growing the dense series. Callers hold r.mu.
func (r *Recorder) row(k int64) *SecondRow {
	for int64(len(r.rows)) <= k {
		r.rows = append(r.rows, SecondRow{Second: int64(len(r.rows))})
	}
	return &r.rows[k]
}

// Totals are the cumulative counters of a run.
type Totals struct {
	Classes    [NumClasses]uint64
	Status     map[int]uint64
	Backends   map[string]uint64
	Fresh      uint64
	Reused     uint64
	Canceled   uint64
	MaxLag     time.Duration
	FailuresIn uint64 // failures recorded (target failures and local errors)
}

// Sent is the number of attempts with an outcome.
func (t Totals) Sent() uint64 {
	var n uint64
	for _, c := range t.Classes {
		n += c
	}
	return n
}

// Failed is the number of target failures; local errors are not counted.
func (t Totals) Failed() uint64 { return t.Sent() - t.Classes[OK] - t.Classes[Local] }

// Snapshot is a consistent copy of the recorder's state for display.
type Snapshot struct {
	Totals Totals
	Rows   []SecondRow // final seconds only
	// Current sums the seconds still open (counts only): the live edge.
	Current SecondRow
}

// Snapshot copies the counters and final series rows. It does not merge
// histograms, so it is cheap enough for a live view at 10 Hz.
func (r *Recorder) Snapshot() Snapshot {
	var snap Snapshot
	snap.Totals.Status = map[int]uint64{}
	snap.Totals.Backends = map[string]uint64{}
	snap.Current.Second = -1
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for c := range s.classes {
			snap.Totals.Classes[c] += s.classes[c]
		}
		for code, n := range s.status {
			if n > 0 {
				snap.Totals.Status[code] += n
			}
		}
		for b, n := range s.backends {
			snap.Totals.Backends[b] += n
		}
		snap.Totals.Fresh += s.fresh
		snap.Totals.Reused += s.reused
		snap.Totals.Canceled += s.canceled
		snap.Totals.MaxLag = max(snap.Totals.MaxLag, s.maxLag)
		for k, st := range s.seconds {
			snap.Current.Second = max(snap.Current.Second, k)
			snap.Current.Sent += st.sent
			for c := range st.classes {
				snap.Current.Classes[c] += st.classes[c]
			}
		}
		s.mu.Unlock()
	}
	snap.Totals.FailuresIn = snap.Totals.Sent() - snap.Totals.Classes[OK]
	r.mu.Lock()
	snap.Rows = make([]SecondRow, len(r.rows))
	copy(snap.Rows, r.rows)
	r.mu.Unlock()
	return snap
}

// Latencies merges the shards' run-long histograms: latency from the
// intended send time and service time from the actual send. It costs a
// merge per shard; call it for reports, not on every frame.
func (r *Recorder) Latencies() (latency, service *hdr.Histogram) {
	latency, service = newHistogram(), newHistogram()
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		latency.Merge(s.latency)
		service.Merge(s.service)
		s.mu.Unlock()
	}
	return latency, service
}

// Failures returns the failures kept in full, in order of intended send time.
func (r *Recorder) Failures() []Result {
	var out []Result
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		out = append(out, s.failures...)
		s.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Result) int {
		return cmp.Or(cmp.Compare(a.Intended, b.Intended), cmp.Compare(a.Seq, b.Seq))
	})
	return out
}
