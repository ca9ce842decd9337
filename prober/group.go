package prober

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Path is one of the ways to the same app a run probes side by side: the
// Service by its name, the ingress over TLS, ... Name labels it in every
// output.
type Path struct {
	Name   string
	Config Config
}

// MaxPaths bounds the paths of one run (Result.Path is a byte, and more
// lanes than this say nothing a person can read).
const MaxPaths = 8

// Group probes several paths side by side: one Prober per path, each at
// its own configuration's rate, all on one clock (the same start, so their
// offsets are comparable), merged exactly into one recorder as fleet merges
// in-cluster probers (each path's recorder exports; the group ingests).
// Every path keeps its own recorder: the report has the run as a whole
// and each path apart.
type Group struct {
	names  []string
	probes []*Prober
	rec    *Recorder
	start  time.Time

	mu        sync.Mutex
	summaries []Summary
}

// NewGroup validates every path and prepares their probers.
func NewGroup(paths []Path, userAgent string) (*Group, error) {
	if len(paths) < 2 || len(paths) > MaxPaths {
		return nil, fmt.Errorf("a group probes 2 to %d paths, not %d", MaxPaths, len(paths))
	}
	g := &Group{rec: NewRecorder(paths[0].Config.KeepFailures)}
	for _, p := range paths {
		if slices.Contains(g.names, p.Name) {
			return nil, fmt.Errorf("two paths are named %q", p.Name)
		}
		pr, err := New(p.Config, userAgent)
		if err != nil {
			return nil, fmt.Errorf("path %s: %w", p.Name, err)
		}
		pr.rec.EnableExport()
		g.names = append(g.names, p.Name)
		g.probes = append(g.probes, pr)
	}
	return g, nil
}

// Names are the paths' names, in order: Result.Path indexes them.
func (g *Group) Names() []string { return g.names }

// Probers are the paths' probers, in order.
func (g *Group) Probers() []*Prober { return g.probes }

// Recorder is the whole run's: every path's results, merged.
func (g *Group) Recorder() *Recorder { return g.rec }

// RunID is the first path's run ID (each path's requests carry its own).
func (g *Group) RunID() string { return g.probes[0].RunID() }

// Config is the first path's configuration.
func (g *Group) Config() Config { return g.probes[0].Config() }

// Start is when every path began.
func (g *Group) Start() time.Time { return g.start }

// Elapsed is the time since the paths began.
func (g *Group) Elapsed() time.Duration { return time.Since(g.start) }

// Stop ends every path's send window.
func (g *Group) Stop() {
	for _, p := range g.probes {
		p.Stop()
	}
}

// Summaries are each path's summary, in order, once Go's outcome is in.
func (g *Group) Summaries() []Summary {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.summaries)
}

// Go starts every path on one clock and returns once they have begun; the
// channel yields the group's outcome: the paths' summaries combined (their
// common start, the longest elapsed and sending time, the workers added),
// and every path's error, if any. Until the last path ends, what the paths
// recorded is merged every sampleEvery, as a prober's own tick does.
func (g *Group) Go(ctx context.Context) <-chan Outcome {
	g.start = time.Now()
	type ended struct {
		path int
		out  Outcome
	}
	endings := make(chan ended, len(g.probes))
	for i, p := range g.probes {
		p.startAt = g.start
		out := p.Go(ctx)
		go func() { endings <- ended{i, <-out} }()
	}
	done := make(chan Outcome, 1)
	go func() {
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		results := make([]Outcome, len(g.probes))
		for left := len(g.probes); left > 0; {
			select {
			case <-tick.C:
				g.merge(false)
			case e := <-endings:
				results[e.path] = e.out
				left--
			}
		}
		g.merge(true)
		done <- g.combine(results)
	}()
	return done
}

// merge moves what every path's recorder gathered into the group's, the
// failures of the round in intended order (so the kept ones are the
// earliest, as a prober's own tick keeps them), and finalises the seconds
// every path has finalised; at the end, all of them.
func (g *Group) merge(final bool) {
	var results []Result
	var exports []Export
	before := int64(math.MaxInt64)
	for i, p := range g.probes {
		x := p.rec.TakeExport()
		for j := range x.Results {
			x.Results[j].Path = uint8(i)
		}
		results = append(results, x.Results...)
		exports = append(exports, x)
		before = min(before, x.FinalBefore)
	}
	slices.SortStableFunc(results, byIntended)
	g.rec.Ingest(results)
	for i, x := range exports {
		for _, a := range x.Aggregates {
			g.rec.IngestAggregate(a)
		}
		g.probes[i].rec.ReleaseExport(x)
	}
	if final {
		before = math.MaxInt64
	}
	g.rec.FinaliseBefore(before)
}

// combine is the group's outcome from its paths'.
func (g *Group) combine(outs []Outcome) Outcome {
	var sum Summary
	var errs []error
	sums := make([]Summary, len(outs))
	for i, o := range outs {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("path %s: %w", g.names[i], o.Err))
			continue
		}
		s := o.Summary
		sums[i] = s
		if i == 0 || sum.Start.IsZero() {
			sum.Start, sum.Target, sum.Procs, sum.Engine = s.Start, s.Target, s.Procs, s.Engine
			sum.Clock = s.Clock // one host's clock: any path's samples serve them all
		}
		if s.Engine != sum.Engine {
			sum.Engine = "" // the paths differ: each path's summary says which
		}
		sum.Elapsed = max(sum.Elapsed, s.Elapsed)
		sum.Sending = max(sum.Sending, s.Sending)
		sum.Workers += s.Workers
		sum.Canceled = sum.Canceled || s.Canceled
		sum.Dialled, sum.DialledMore = UnionDialled(sum.Dialled, sum.DialledMore, s.Dialled, s.DialledMore)
		if sum.Fault == "" {
			sum.Fault = s.Fault
		}
	}
	g.mu.Lock()
	g.summaries = sums
	g.mu.Unlock()
	return Outcome{Summary: sum, Err: errors.Join(errs...)}
}
