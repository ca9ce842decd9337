// Package fleet runs rollprobe's probers inside the cluster: prober pods
// that run the same binary, stream their results to stdout (fleet/wire),
// and a CLI that follows their logs and merges them exactly into one
// prober.Recorder, so the report, the dashboard and the CI outputs read the
// merged run as they read a local one.
package fleet

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/prober"
)

// Merger merges the streams of several probers into one recorder. Feed it
// each prober's log lines as they come, in any interleaving across probers;
// it is safe for concurrent use (one goroutine per prober's log).
type Merger struct {
	rec *prober.Recorder
	// paths, when the probers probe several paths side by side, are each
	// path's recorder: a prober's results go to its path's too (ByPath).
	paths []*pathRec

	mu      sync.Mutex
	sources []*source
	final   int64 // seconds before this are final in rec
}

// pathRec is one path's recorder and what is final in it.
type pathRec struct {
	rec   *prober.Recorder
	final int64
}

// source is one prober's stream.
type source struct {
	name  string
	path  int // the index of the path it probes (ByPath)
	seq   wire.Sequence
	hello *wire.Hello
	// shift is how far the prober's start is from the run's, on the CLI's
	// clock: its offsets are moved by it (aggregates by whole seconds).
	shift       time.Duration
	finalBefore int64
	runID       string // the prober's own, for its request IDs
	end         *wire.End
	nat         *wire.Nat // conntrack's findings, merged from its lines
	err         error     // the stream's fatal error (a gap), once
	lines       uint64
	sent        uint64
	byClass     [prober.NumClasses]uint64
}

// SourceState is what the merger knows of one prober.
type SourceState struct {
	Name  string
	RunID string // the prober's own run ID ("" before its started line)
	Hello *wire.Hello
	End   *wire.End
	Err   error
	Lines uint64
	// Sent and ByClass count what the prober measured (canceled
	// attempts aside).
	Sent    uint64
	ByClass [prober.NumClasses]uint64
	// Nat is what its conntrack watch found (nil when it read none);
	// complete once Nat.Last.
	Nat *wire.Nat
}

// NewMerger merges into rec (a recorder of the run, which no local workers
// feed) the streams of the named probers; their results get Source i+1.
func NewMerger(rec *prober.Recorder, names []string) *Merger {
	m := &Merger{rec: rec}
	for _, n := range names {
		m.sources = append(m.sources, &source{name: n})
	}
	return m
}

// ByPath makes the merger also merge each prober's results into the
// recorder of the path it probes: pathOf[i] is prober i's path, recs[p]
// path p's recorder (which no local workers feed). Results are marked with
// their path in both. Call it before feeding anything.
func (m *Merger) ByPath(pathOf []int, recs []*prober.Recorder) error {
	if len(pathOf) != len(m.sources) {
		return fmt.Errorf("fleet: %d probers, a path for %d", len(m.sources), len(pathOf))
	}
	for i, p := range pathOf {
		if p < 0 || p >= len(recs) || p > math.MaxUint8 {
			return fmt.Errorf("fleet: prober %d probes path %d of %d", i, p, len(recs))
		}
		m.sources[i].path = p
	}
	m.paths = make([]*pathRec, len(recs))
	for p, rec := range recs {
		m.paths[p] = &pathRec{rec: rec}
	}
	return nil
}

// ErrStream is a stream that broke the protocol or lost lines: the merge
// can no longer be exact for that prober.
var ErrStream = errors.New("prober stream")

// Started sets where prober i's offsets go on the run's timeline: its run
// began at start on the CLI's clock; the run's own start is runStart.
// Call it before feeding the prober's results (on its started line, once
// its clock offset is known).
func (m *Merger) Started(i int, start, runStart time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources[i].shift = start.Sub(runStart)
}

// shiftSeconds is the shift in whole seconds, for the per-second lines.
func (s *source) shiftSeconds() int64 { return int64(math.Round(s.shift.Seconds())) }

// Feed takes one log line of prober i. Lines that are not the protocol's
// are returned as ErrNotProtocol (for the caller to log); lines seen
// before are skipped; a gap or a bad line is an ErrStream, after which
// the prober's stream is ignored.
func (m *Merger) Feed(i int, line []byte) (wire.Line, error) {
	l, err := wire.Parse(line)
	if errors.Is(err, wire.ErrNotProtocol) {
		return l, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sources[i]
	if s.err != nil {
		return l, s.err
	}
	if err != nil {
		return l, s.fail(err)
	}
	fresh, err := s.seq.Accept(l.Seq)
	if err != nil {
		return l, s.fail(err)
	}
	if !fresh {
		return l, nil
	}
	s.lines++
	switch l.Kind {
	case wire.KindHello:
		s.hello = l.Hello
	case wire.KindStarted:
		s.runID = l.Started.RunID
	case wire.KindResult:
		res, err := l.Result.ToResult()
		if err != nil {
			return l, s.fail(err)
		}
		res.Source = uint16(i + 1)
		res.Intended += s.shift
		res.Start += s.shift
		res.End += s.shift
		if res.Intended < 0 {
			return l, s.fail(fmt.Errorf("a result %v before the run's start", -res.Intended))
		}
		res.Path = uint8(s.path)
		m.rec.Ingest([]prober.Result{res})
		if m.paths != nil {
			m.paths[s.path].rec.Ingest([]prober.Result{res})
		}
		if !res.Canceled {
			s.sent++
			s.byClass[res.Class]++
		}
	case wire.KindAgg:
		a, err := l.Agg.ToAggregate()
		if err != nil {
			return l, s.fail(err)
		}
		a.Second += s.shiftSeconds()
		if a.Second < 0 {
			return l, s.fail(fmt.Errorf("an aggregate of second %d before the run's start", a.Second))
		}
		m.rec.IngestAggregate(a) // reads a's histograms, changes none
		if m.paths != nil {
			m.paths[s.path].rec.IngestAggregate(a)
		}
		s.sent += a.Sent
		s.byClass[prober.OK] += a.OK
	case wire.KindFinal:
		s.finalBefore = l.Final.Before + s.shiftSeconds()
		m.finaliseLocked()
	case wire.KindNat:
		if s.nat == nil {
			s.nat = &wire.Nat{}
		}
		pods := append(s.nat.Pods, l.Nat.Pods...)
		responses := s.nat.Responses
		for _, r := range l.Nat.Responses {
			r.Second += s.shiftSeconds()
			responses = append(responses, r)
		}
		if l.Nat.Last {
			*s.nat = *l.Nat
		}
		s.nat.Pods, s.nat.Responses = pods, responses
	case wire.KindEnd:
		s.end = l.End
		s.finalBefore = math.MaxInt64
		m.finaliseLocked()
	}
	return l, nil
}

func (s *source) fail(err error) error {
	s.err = fmt.Errorf("%w %s: %w", ErrStream, s.name, err)
	return s.err
}

// finaliseLocked makes final the seconds every live prober has finalised.
// A prober whose stream broke holds nothing back: the run is inconclusive
// anyway, and the others' rows still read right.
func (m *Merger) finaliseLocked() {
	before := int64(math.MaxInt64)
	for _, s := range m.sources {
		if s.err == nil {
			before = min(before, s.finalBefore)
		}
	}
	if before > m.final {
		m.final = before
		m.rec.FinaliseBefore(before)
	}
	// Each path's: the seconds its own live probers have finalised.
	for p, pr := range m.paths {
		before := int64(math.MaxInt64)
		for _, s := range m.sources {
			if s.err == nil && s.path == p {
				before = min(before, s.finalBefore)
			}
		}
		if before > pr.final {
			pr.final = before
			pr.rec.FinaliseBefore(before)
		}
	}
}

// Finish makes every second final, whatever the streams said: the end.
func (m *Merger) Finish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.final = math.MaxInt64
	m.rec.FinaliseBefore(math.MaxInt64)
	for _, pr := range m.paths {
		pr.final = math.MaxInt64
		pr.rec.FinaliseBefore(math.MaxInt64)
	}
}

// State copies what the merger knows of each prober.
func (m *Merger) State() []SourceState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]SourceState, len(m.sources))
	for i, s := range m.sources {
		out[i] = SourceState{Name: s.name, RunID: s.runID, Hello: s.hello, End: s.end, Err: s.err, Lines: s.lines,
			Sent: s.sent, ByClass: s.byClass, Nat: s.nat}
	}
	return out
}
