package prober

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/rollprobe/rollprobe/report"
)

// Histogram bounds, in microseconds: 1 µs to 1 hour, 3 significant digits.
// Values beyond the top are clamped (and flagged by max being the top).
const (
	histLowest  = 1
	histHighest = int64(time.Hour / time.Microsecond)
	histSigFigs = 3
)

func newHistogram() *hdr.Histogram { return hdr.New(histLowest, histHighest, histSigFigs) }

// HistogramShape is the recorder's histograms' range (microseconds) and
// significant digits: histograms of one shape merge exactly.
func HistogramShape() (lowest, highest, digits int64) { return histLowest, histHighest, histSigFigs }

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

// Recorder owns the results of a run.
//
// Workers never lock it and never wait for it: each records into its own
// Stream (a per-goroutine buffer of the current interval's results, guarded
// by a writer-reader phaser: two uncontended atomic adds per result). Tick,
// called on the engine's sample interval, takes every stream's interval and
// merges it into the run's histograms, counters and per-second series; it
// is the only writer of that state besides Record, and the only reader of
// the streams. Snapshot, Latencies and Failures read the merged state, so a
// live view lags the workers by at most one tick.
//
// Why buffers and not per-goroutine histograms: an HDR histogram of this
// range and precision is ~190 KB, two per worker, and the pool grows to
// thousands of workers exactly when the target is failing (connect
// timeouts). A stream holds only the interval's results, so its memory
// follows the request rate, not the worker count, and the merge builds the
// same histograms the workers would have.
type Recorder struct {
	keepFailures int

	tickMu    sync.Mutex // one Tick at a time: the streams have one reader
	streamsMu sync.Mutex
	streams   []*Stream
	taken     []*[]Result // Tick's scratch, under tickMu
	newFails  []Result    // Tick's scratch, under tickMu

	mu sync.Mutex // guards state: written by Tick and Record, read by views
	st runState
}

// runState is the merged state of a run.
type runState struct {
	classes  [NumClasses]uint64
	status   [1000]uint64 // by code; 0 for none
	backends map[string]uint64
	latency  *hdr.Histogram
	service  *hdr.Histogram
	fresh    uint64
	reused   uint64
	canceled uint64
	slow     uint64 // successes after a retransmitted SYN
	retries  HiddenRetries
	// serverClose counts eof and eof_reused by ServerClose (the rest
	// are CloseUnknown).
	serverClose [3]uint64
	outages     report.Windows // target failures by intended time: the report's outage definition, live
	maxLag      time.Duration
	kept        int      // failures kept in full
	failures    []Result // the first keepFailures, by intended time within a tick

	open       map[int64]*openSecond // seconds not yet final
	spareHists []*hdr.Histogram      // emptied histograms of final seconds
	export     *export               // nil unless EnableExport
	rows       []SecondRow           // final seconds; dense: rows[i].Second == i
	closedUpTo int64                 // seconds below this are final
}

// openSecond is a second still receiving results.
type openSecond struct {
	row     SecondRow
	latency *hdr.Histogram // responses completed in this second, from the intended send
	service *hdr.Histogram // the same responses, from the actual send
	// okService: the successes among them, from the actual send: a slow
	// success is a cost no failure shows (a proxy's hidden retry).
	okService *hdr.Histogram
	// okAfterWrite: the same successes from their request's write
	// (Result.AfterWrite): what a proxy's retry adds, without what a slow
	// handshake with the proxy does.
	okAfterWrite *hdr.Histogram
}

// NewRecorder makes a recorder that keeps the first keepFailures failures
// in full.
func NewRecorder(keepFailures int) *Recorder {
	return &Recorder{keepFailures: keepFailures, st: runState{
		backends: map[string]uint64{},
		latency:  newHistogram(),
		service:  newHistogram(),
		open:     map[int64]*openSecond{},
	}}
}

// Stream is one worker's recording. Add is called by that worker only;
// Close when it stops recording. The recorder's Tick is its only reader.
type Stream struct {
	phaser  phaser
	active  atomic.Pointer[[]Result] // where Add appends
	spare   *[]Result                // Tick's: swapped in at the next take
	retired atomic.Bool
	_       [64]byte // keep neighbouring streams' counters off one cache line
}

// NewStream registers a stream for a new worker.
func (r *Recorder) NewStream() *Stream {
	s := &Stream{spare: new([]Result)}
	s.phaser.init()
	s.active.Store(new([]Result))
	r.streamsMu.Lock()
	r.streams = append(r.streams, s)
	r.streamsMu.Unlock()
	return s
}

// Add records res: a copy into the worker's own buffer between two atomic
// adds. It takes no lock and never waits, whatever the readers do.
func (s *Stream) Add(res *Result) {
	v := s.phaser.enter()
	buf := s.active.Load()
	*buf = append(*buf, *res)
	s.phaser.exit(v)
}

// Close marks the stream finished after its last Add: the next Tick merges
// what is left and forgets it.
func (s *Stream) Close() { s.retired.Store(true) }

// take hands the writer an empty buffer and returns the one it was
// writing, once no Add into it is still running. Under Recorder.tickMu.
func (s *Stream) take() *[]Result {
	old := s.active.Load()
	s.active.Store(s.spare)
	s.phaser.flip()
	s.spare = old // emptied by Tick before the next take swaps it back in
	return old
}

// maxKeptCap: a stream buffer grown past this by a burst is released once
// the rate falls, so capacity follows the rate rather than its peak.
const maxKeptCap = 4096

func countBackend(m map[string]uint64, b string) { countBackendN(m, b, 1) }

// countBackendN counts n responses from backend b, under OtherBackends once
// maxBackends distinct values are known.
func countBackendN(m map[string]uint64, b string, n uint64) {
	if _, ok := m[b]; !ok && len(m) >= maxBackends {
		b = OtherBackends
	}
	m[b] += n
}

// Record adds one result directly to the merged state, under the lock
// views read with. For tests and tools; workers use a Stream.
func (r *Recorder) Record(res *Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.add(res) {
		r.keep(res)
	}
}

// keep stores a failure in full while the budget lasts. Under r.mu.
func (r *Recorder) keep(res *Result) {
	if r.st.kept < r.keepFailures {
		r.st.kept++
		r.st.failures = append(r.st.failures, *res)
	}
}

// add counts res into the merged state and reports whether it is a failure
// to keep in full (the caller decides, to keep them in time order). Under r.mu.
func (r *Recorder) add(res *Result) (keepable bool) {
	st := &r.st
	if st.export != nil {
		r.exportResult(res)
	}
	if res.Canceled {
		st.canceled++
		return false
	}
	st.classes[res.Class]++
	if res.Status > 0 && res.Status < len(st.status) {
		st.status[res.Status]++
	}
	if res.Fresh {
		st.fresh++
	} else {
		st.reused++
	}
	st.serverClose[res.ServerClose]++
	st.retries.add(res)
	lag := res.Lag()
	st.maxLag = max(st.maxLag, lag)
	if res.Class.Failed() {
		st.outages.Add(res.Intended, res.Class.String())
	}
	startRow, _ := r.second(int64(res.Start / time.Second))
	startRow.Sent++
	if res.SlowConnect && res.Class == OK {
		st.slow++
		startRow.SlowConnects++
	}
	startRow.MaxLag = max(startRow.MaxLag, lag)
	endRow, endOpen := r.second(int64(res.End / time.Second))
	endRow.Classes[res.Class]++
	if res.HasResponse() {
		recordMicros(st.latency, res.Latency())
		recordMicros(st.service, res.ServiceTime())
		if endOpen != nil {
			recordMicros(endOpen.latency, res.Latency())
			recordMicros(endOpen.service, res.ServiceTime())
			if res.Class == OK {
				recordMicros(endOpen.okService, res.ServiceTime())
				recordMicros(endOpen.okAfterWrite, res.AfterWrite())
			}
		}
		if res.Backend != "" {
			countBackend(st.backends, res.Backend)
			switch {
			case endRow.Backends == nil:
				endRow.Backends = map[string]uint64{}
			case endOpen == nil:
				// A final row: snapshots share its map, so copy on write.
				endRow.Backends = maps.Clone(endRow.Backends)
			}
			countBackend(endRow.Backends, res.Backend)
		}
	}
	return res.Class != OK && r.keepFailures > 0
}

// second returns the row for second k and, while k is open, the open
// second (nil once final). A result for a second already final (its worker
// was descheduled between measuring and recording for longer than
// closeGrace) still adds to the counts but not to the quantiles. Under r.mu.
func (r *Recorder) second(k int64) (*SecondRow, *openSecond) {
	if k < r.st.closedUpTo {
		return r.row(k), nil
	}
	o := r.st.open[k]
	if o == nil {
		o = &openSecond{row: SecondRow{Second: k}, latency: r.histogram(), service: r.histogram(), okService: r.histogram(), okAfterWrite: r.histogram()}
		r.st.open[k] = o
	}
	return &o.row, o
}

// histogram returns an empty histogram, reusing one a final second gave
// back (each is about 180 KB). Under r.mu.
func (r *Recorder) histogram() *hdr.Histogram {
	if n := len(r.st.spareHists); n > 0 {
		h := r.st.spareHists[n-1]
		r.st.spareHists = r.st.spareHists[:n-1]
		return h
	}
	return newHistogram()
}

// row returns the final row for second k, growing the dense series. Under r.mu.
func (r *Recorder) row(k int64) *SecondRow {
	for int64(len(r.st.rows)) <= k {
		r.st.rows = append(r.st.rows, SecondRow{Second: int64(len(r.st.rows))})
	}
	return &r.st.rows[k]
}

// SecondRow is one second of the run. Sent counts requests begun in the
// second; outcomes and latencies count requests completed in it.
type SecondRow struct {
	Second   int64
	Sent     uint64
	Classes  [NumClasses]uint64
	P50, P99 time.Duration // latency (from intended time) of responses completed
	// ServiceP50 and ServiceP99: the same responses' service time (from
	// the actual send).
	ServiceP50, ServiceP99 time.Duration
	// OKServiceP99: the service time of the successes alone (0 when none
	// completed in the second).
	OKServiceP99 time.Duration
	// OKAfterWriteP99: the same successes' time from their request's
	// write (Result.AfterWrite; 0 when none completed in the second).
	OKAfterWriteP99 time.Duration
	MaxLag          time.Duration
	Backends        map[string]uint64
	// SlowConnects counts requests begun in the second that succeeded
	// only after a retransmitted SYN (Result.SlowConnect).
	SlowConnects uint64
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
// were measured in it but merged a moment later (on the next tick,
// sampleEvery).
const closeGrace = 500 * time.Millisecond

// EndOfRun is Tick's now after the workers have stopped: it merges and
// finalises everything, and the recorder is then Complete. (Not
// math.MaxInt64: now-closeGrace must not overflow.)
const EndOfRun = time.Duration(1 << 62)

// Tick merges every stream's results since the last tick, then makes every
// second that ended before now-closeGrace final (its quantiles computed).
// Tick(EndOfRun) after the workers have stopped merges and finalises
// everything. Safe to call from any goroutine; calls are serialised.
func (r *Recorder) Tick(now time.Duration) {
	r.tickMu.Lock()
	defer r.tickMu.Unlock()
	r.streamsMu.Lock()
	streams := slices.Clone(r.streams)
	r.streamsMu.Unlock()

	// Take every interval first (no lock held: the flips wait only for an
	// Add in progress), then merge them in one locked step.
	r.taken = r.taken[:0]
	var retired map[*Stream]bool
	for _, s := range streams {
		// Read before take: a stream seen retired has made its last Add,
		// so this take holds everything it will ever record.
		if s.retired.Load() {
			if retired == nil {
				retired = map[*Stream]bool{}
			}
			retired[s] = true
		}
		r.taken = append(r.taken, s.take())
	}

	r.mu.Lock()
	r.newFails = r.newFails[:0]
	for _, buf := range r.taken {
		for i := range *buf {
			if r.add(&(*buf)[i]) && r.st.kept < r.keepFailures {
				r.newFails = append(r.newFails, (*buf)[i])
			}
		}
	}
	// Keep the earliest failures of the tick while the budget lasts.
	slices.SortFunc(r.newFails, byIntended)
	for i := range r.newFails {
		r.keep(&r.newFails[i])
	}
	clear(r.newFails)
	r.finalise(int64((now - closeGrace) / time.Second))
	r.mu.Unlock()

	for _, buf := range r.taken {
		if cap(*buf) > maxKeptCap && len(*buf) < cap(*buf)/4 {
			*buf = nil
		} else {
			clear(*buf) // drop the references (errors, strings) the copies held
			*buf = (*buf)[:0]
		}
	}
	clear(r.taken)
	if len(retired) > 0 {
		r.streamsMu.Lock()
		r.streams = slices.DeleteFunc(r.streams, func(s *Stream) bool { return retired[s] })
		r.streamsMu.Unlock()
	}
}

// finalise moves the open seconds below limit into the series. Under r.mu.
func (r *Recorder) finalise(limit int64) {
	for k, o := range r.st.open {
		if k >= limit {
			continue
		}
		row := r.row(k)
		*row = o.row
		row.P50 = time.Duration(o.latency.ValueAtQuantile(50)) * time.Microsecond
		row.P99 = time.Duration(o.latency.ValueAtQuantile(99)) * time.Microsecond
		row.ServiceP50 = time.Duration(o.service.ValueAtQuantile(50)) * time.Microsecond
		row.ServiceP99 = time.Duration(o.service.ValueAtQuantile(99)) * time.Microsecond
		row.OKServiceP99 = time.Duration(o.okService.ValueAtQuantile(99)) * time.Microsecond
		row.OKAfterWriteP99 = time.Duration(o.okAfterWrite.ValueAtQuantile(99)) * time.Microsecond
		for _, h := range []*hdr.Histogram{o.latency, o.service, o.okService, o.okAfterWrite} {
			h.Reset()
			r.st.spareHists = append(r.st.spareHists, h)
		}
		delete(r.st.open, k)
	}
	r.st.closedUpTo = max(r.st.closedUpTo, limit)
}

func byIntended(a, b Result) int {
	return cmp.Or(cmp.Compare(a.Intended, b.Intended), cmp.Compare(a.Seq, b.Seq))
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
	// SlowConnects: successes after a retransmitted SYN.
	SlowConnects uint64
	// ClosedBeforeRequest and ClosedAfterRequest split eof and eof_reused
	// by whether the server's kernel had acknowledged the request
	// (ServerClose); those it could not tell are in neither.
	ClosedBeforeRequest, ClosedAfterRequest uint64
	// Retries counts what grpc-go resent unseen (GRPCClientGo only).
	Retries HiddenRetries
}

// HiddenRetries sums the transparent retries of calls made through
// grpc-go: Calls had at least one, Attempts is how many there were, and
// DelaySum and DelayMax are what they added (from the first attempt's
// start to the last one's).
type HiddenRetries struct {
	Calls, Attempts    uint64
	DelaySum, DelayMax time.Duration
}

// add counts res's retries, if any.
func (h *HiddenRetries) add(res *Result) {
	if res.HiddenRetries == 0 {
		return
	}
	h.Calls++
	h.Attempts += uint64(res.HiddenRetries)
	h.DelaySum += res.RetryDelay
	h.DelayMax = max(h.DelayMax, res.RetryDelay)
}

// merge adds o.
func (h *HiddenRetries) merge(o HiddenRetries) {
	h.Calls += o.Calls
	h.Attempts += o.Attempts
	h.DelaySum += o.DelaySum
	h.DelayMax = max(h.DelayMax, o.DelayMax)
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
	// Rows are final seconds from FirstRow on (Rows[i].Second ==
	// FirstRow+i); Snapshot gives them all.
	Rows     []SecondRow
	FirstRow int
	// Current sums the seconds still open (counts only): the live edge.
	Current SecondRow
}

// Snapshot copies the counters and every final series row, as of the last
// tick. It does not merge histograms.
func (r *Recorder) Snapshot() Snapshot { return r.SnapshotFrom(0) }

// SnapshotFrom is Snapshot with only the final rows from second first on:
// a live view that keeps the rows it has seen copies only the new ones, so
// a frame costs the same in the eighth hour as in the first.
func (r *Recorder) SnapshotFrom(first int) Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.st
	first = min(max(first, 0), len(st.rows))
	snap := Snapshot{Totals: r.totals(), FirstRow: first, Rows: slices.Clone(st.rows[first:])}
	snap.Current.Second = -1
	for k, o := range st.open {
		snap.Current.Second = max(snap.Current.Second, k)
		snap.Current.Sent += o.row.Sent
		for c := range o.row.Classes {
			snap.Current.Classes[c] += o.row.Classes[c]
		}
	}
	return snap
}

// Complete reports whether every result of the run is in: the final
// Tick(EndOfRun), or FinaliseBefore(math.MaxInt64) for a recorder others
// feed, has been made. Until then a request in flight may still fail, and
// join an outage that looks over.
func (r *Recorder) Complete() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st.closedUpTo >= int64((EndOfRun-closeGrace)/time.Second)
}

// OutagesFrom returns the target failures' outage windows so far, by the
// report's definition (report.Windows), from the i-th on, and how many
// there are in all: a live view asks only for the ones it has not closed.
// A window may still grow while requests begun near its end complete.
func (r *Recorder) OutagesFrom(i int) (windows []report.Window, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st.outages.ListFrom(i), r.st.outages.Len()
}

// Totals copies the run's counters, as of the last tick.
func (r *Recorder) Totals() Totals {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.totals()
}

// totals copies the counters. Under r.mu.
func (r *Recorder) totals() Totals {
	st := &r.st
	t := Totals{
		Classes:  st.classes,
		Status:   map[int]uint64{},
		Backends: make(map[string]uint64, len(st.backends)),
		Fresh:    st.fresh,
		Reused:   st.reused,
		Canceled: st.canceled,
		MaxLag:   st.maxLag,

		SlowConnects:        st.slow,
		ClosedBeforeRequest: st.serverClose[CloseBeforeRequest],
		ClosedAfterRequest:  st.serverClose[CloseAfterRequest],
		Retries:             st.retries,
	}
	for code, n := range st.status {
		if n > 0 {
			t.Status[code] = n
		}
	}
	for b, n := range st.backends {
		t.Backends[b] = n
	}
	t.FailuresIn = t.Sent() - t.Classes[OK]
	return t
}

// Latencies copies the run-long histograms: latency from the intended send
// time and service time from the actual send. It costs two histogram
// copies; call it for reports, not on every frame.
func (r *Recorder) Latencies() (latency, service *hdr.Histogram) {
	latency, service = newHistogram(), newHistogram()
	r.mu.Lock()
	defer r.mu.Unlock()
	latency.Merge(r.st.latency)
	service.Merge(r.st.service)
	return latency, service
}

// Failures returns the failures kept in full, in order of intended send time.
func (r *Recorder) Failures() []Result {
	r.mu.Lock()
	out := slices.Clone(r.st.failures)
	r.mu.Unlock()
	slices.SortFunc(out, byIntended)
	return out
}
