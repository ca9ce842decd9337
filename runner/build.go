package runner

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// probeRun is everything build needs from a finished (or interrupted) probe.
type probeRun struct {
	Tool     report.Tool
	Command  string
	RunID    string
	Config   prober.Config
	Budget   report.Budget
	Summary  prober.Summary
	Recorder *prober.Recorder
	// RolloutFailed, for rollprobe run, says why the rollout failed.
	RolloutFailed string
	// Fleet, when the run probed from the cluster, is its probers.
	Fleet *fleet.Fleet
	// Group, when the run probed several paths from this process, is
	// their probers: the Recorder and Summary above are all of them
	// together. (A fleet that probed several paths says so itself.)
	Group *prober.Group
}

// pathRun is one path of a run that probed several side by side: what
// build needs to report it as a probe of that path alone.
type pathRun struct {
	Name     string
	RunID    string // its request IDs' prefix (from a fleet, the run's ID: each prober prefixes its own)
	Config   prober.Config
	Summary  prober.Summary
	Recorder *prober.Recorder
}

// paths are the run's paths, from its local group or its fleet; nil for
// a run of one target.
func (run probeRun) paths() []pathRun {
	var out []pathRun
	switch {
	case run.Group != nil:
		sums := run.Group.Summaries()
		for i, p := range run.Group.Probers() {
			out = append(out, pathRun{Name: run.Group.Names()[i], RunID: p.RunID(), Config: p.Config(), Summary: sums[i], Recorder: p.Recorder()})
		}
	case run.Fleet != nil && len(run.Fleet.Paths()) > 1:
		// The probers number their own requests (each prober's run ID
		// prefixes them): the path has the run's ID, which their
		// User-Agent carries.
		sums, recs := run.Fleet.PathSummaries(), run.Fleet.PathRecorders()
		for i, p := range run.Fleet.Paths() {
			out = append(out, pathRun{Name: p.Name, RunID: run.Fleet.RunID(), Config: p.Config, Summary: sums[i], Recorder: recs[i]})
		}
	}
	return out
}

// build assembles the probe half of a report (everything a probe without a
// rollout has) and judges the verdict. It is the one place a report is
// made: the rollout flow adds its sections to what this returns.
func build(run probeRun) *report.Report {
	cfg := run.Config
	sum := run.Summary
	clock := wallClockOf(sum)
	snap := run.Recorder.Snapshot()
	latency, service := run.Recorder.Latencies()
	tot := snap.Totals

	r := &report.Report{
		Schema:      report.Schema,
		Tool:        run.Tool,
		Command:     run.Command,
		Target:      cfg.RedactedTarget(),
		StartedAt:   sum.Start.UTC(),
		EndedAt:     clock.At(sum.Elapsed),
		DurationS:   seconds(sum.Elapsed),
		Interrupted: sum.Canceled,
		Clock:       clock.Leads(),
		Config: report.Config{
			RunID:            run.RunID,
			Method:           cfg.Method,
			Conn:             cfg.Conn.String(),
			Protocol:         string(cfg.Protocol),
			Connections:      h2Connections(cfg),
			Streams:          cfg.Streams,
			GRPCMethod:       grpcMethod(cfg),
			GRPCClient:       grpcClient(cfg),
			Model:            report.ModelOpen,
			Rate:             cfg.Rate,
			DurationS:        seconds(cfg.Duration),
			TimeoutMS:        ms(cfg.Timeout),
			ConnectTimeoutMS: ms(cfg.ConnectTimeout),
			ExpectStatus:     cfg.ExpectStatus.String(),
			BackendHeader:    cfg.BackendHeader,
			ConnectTo:        cfg.ConnectTo,
			TLSRoots:         tlsRoots(cfg),
			RequestIDHeader:  cfg.RequestIDHeader,
			MaxFailures:      run.Budget.MaxFailures,
			MaxFailureRate:   run.Budget.MaxFailureRate,
		},
		Totals: report.Totals{
			Sent:              tot.Sent(),
			OK:                tot.Classes[prober.OK],
			Failed:            tot.Failed(),
			ByClass:           map[string]uint64{},
			ByStatus:          map[string]uint64{},
			ByBackend:         map[string]uint64{},
			FreshConnections:  tot.Fresh,
			ReusedConnections: tot.Reused,
			SlowConnects:      tot.SlowConnects,
			HiddenRetries:     hiddenRetries(cfg, tot.Retries),
			EOFBeforeRequest:  tot.ClosedBeforeRequest,
			EOFAfterRequest:   tot.ClosedAfterRequest,
		},
		LatencyMS: quantiles(latency),
		ServiceMS: quantiles(service),
		Series:    []report.SeriesRow{},
		Failures:  []report.Failure{},
	}
	if cfg.Rate == 0 {
		r.Config.Model = report.ModelClosed
		r.Config.Concurrency = cfg.Concurrency
	}
	for c := prober.Class(0); int(c) < prober.NumClasses; c++ {
		r.Totals.ByClass[c.String()] = tot.Classes[c]
	}
	for code, n := range tot.Status {
		r.Totals.ByStatus[strconv.Itoa(code)] = n
	}
	for b, n := range tot.Backends {
		r.Totals.ByBackend[b] = n
	}

	// Attempts cut by an interruption were sent all the same: they count
	// toward the rate the prober held.
	achieved := 0.0
	if sum.Sending > 0 {
		achieved = float64(r.Totals.Sent+tot.Canceled) / sum.Sending.Seconds()
	}
	r.Prober = report.ProberStats{
		TargetRate:       cfg.Rate,
		AchievedRate:     round(achieved, 2),
		MaxScheduleLagMS: ms(tot.MaxLag),
		Workers:          sum.Workers,
		Procs:            sum.Procs,
		Engine:           string(sum.Engine),
		LocalErrors:      tot.Classes[prober.Local],
		Canceled:         tot.Canceled,
		SendingS:         seconds(sum.Sending),
		DialledMore:      sum.DialledMore,
	}
	for _, a := range sum.Dialled {
		r.Prober.Dialled = append(r.Prober.Dialled, a.String())
	}

	for _, row := range snap.Rows {
		sr := report.SeriesRow{
			T: row.Second, Sent: row.Sent, OK: row.OK(), Failed: row.Failed(),
			P50MS: ms(row.P50), P99MS: ms(row.P99), ServiceP50MS: ms(row.ServiceP50), ServiceP99MS: ms(row.ServiceP99), OKServiceP99MS: ms(row.OKServiceP99), OKAfterWriteP99MS: ms(row.OKAfterWriteP99), MaxLagMS: ms(row.MaxLag), SlowConnects: row.SlowConnects,
		}
		for c := prober.Class(1); int(c) < prober.NumClasses; c++ {
			if n := row.Classes[c]; n > 0 {
				if sr.ByClass == nil {
					sr.ByClass = map[string]uint64{}
				}
				sr.ByClass[c.String()] = n
			}
		}
		if len(row.Backends) > 0 {
			sr.Backends = row.Backends
		}
		r.Series = append(r.Series, sr)
	}

	paths := run.paths()
	// Each prober has its own run ID (its requests' IDs), pod and node.
	var lost []string
	runIDs, pods, nodes := []string{run.RunID}, []string{""}, []string{""}
	if fl := run.Fleet; fl != nil {
		sources := fl.Sources()
		for i, m := range fl.Members() {
			src := sources[i]
			runIDs, pods, nodes = append(runIDs, src.RunID), append(pods, m.Pod), append(nodes, m.Node)
			info := proberInfo(m, src, sum.Start)
			if len(paths) > 0 {
				info.Path = paths[m.Path].Name
			}
			r.Probers = append(r.Probers, info)
			if m.Lost != "" {
				lost = append(lost, fmt.Sprintf("prober %s on node %s lost results at %+.1fs: %s", m.Pod, m.Node, m.LostAt.Sub(sum.Start).Seconds(), m.Lost))
			}
		}
		r.Prober.StartSpreadMS = ms(fl.StartSpread())
	}
	kept := run.Recorder.Failures()
	for i := range kept {
		src := int(kept[i].Source)
		if src >= len(runIDs) {
			src = 0
		}
		f := failure(&kept[i], clock, runIDs[src])
		f.Prober, f.Node = pods[src], nodes[src]
		if path := int(kept[i].Path); len(paths) > 0 && path < len(paths) {
			f.Path = paths[path].Name
			if run.Fleet == nil {
				// Each path's prober numbers its own requests (a
				// fleet's probers each their own: runIDs above).
				f.RequestID = paths[path].RunID + "-" + strconv.FormatUint(kept[i].Seq, 10)
			}
		}
		r.Failures = append(r.Failures, f)
	}
	r.FailureInfo = report.FailureInfo{Total: tot.FailuresIn, Kept: len(kept), Limit: cfg.KeepFailures}
	// Outages by the one definition (report.Windows), over every target
	// failure the recorder saw, kept in full or not: a probe has them too
	// (a run's analysis adds what the pods were doing and which its
	// failures were put on; with every failure kept it makes the same
	// windows from them).
	windows, _ := run.Recorder.OutagesFrom(0)
	for _, w := range windows {
		r.Outages = append(r.Outages, w.Outage(clock))
	}

	var pathFacts []report.PathFacts
	if len(paths) > 0 {
		r.Paths, pathFacts = buildPaths(run, paths)
		r.Prober.TargetRate = 0
		for _, p := range r.Paths {
			r.Prober.TargetRate += p.Prober.TargetRate
		}
		r.Config.GRPCClient, r.Totals.HiddenRetries = pathsClient(r.Paths, r.Config.GRPCClient, r.Totals.HiddenRetries)
	}
	r.Verdict = report.Judge(report.Facts{
		Paths:         pathFacts,
		Sent:          r.Totals.Sent,
		Failed:        r.Totals.Failed,
		OK:            r.Totals.OK,
		Redirects:     redirects(r.Totals.ByStatus),
		LocalErrors:   r.Prober.LocalErrors,
		TargetRate:    cfg.Rate,
		AchievedRate:  achieved,
		Interrupted:   sum.Canceled,
		RolloutFailed: run.RolloutFailed,
		LostProbers:   lost,
		Internal:      sum.Fault,
	}, run.Budget)
	return r
}

// buildPaths is each path's own part of a run that probed several, and
// the facts its verdict is judged on: each path's report is built as a
// probe of that path alone would be (its verdict judges its traffic only).
func buildPaths(run probeRun, paths []pathRun) ([]report.PathReport, []report.PathFacts) {
	var reports []report.PathReport
	var facts []report.PathFacts
	for _, p := range paths {
		one := build(probeRun{Tool: run.Tool, Command: run.Command, RunID: p.RunID, Config: p.Config, Budget: run.Budget,
			Summary: p.Summary, Recorder: p.Recorder})
		name := p.Name
		pr := report.PathReport{Name: name, Target: one.Target, RunID: p.RunID, ConnectTo: one.Config.ConnectTo, TLSRoots: one.Config.TLSRoots, GRPCClient: one.Config.GRPCClient,
			Totals: one.Totals, LatencyMS: one.LatencyMS, ServiceMS: one.ServiceMS, Prober: one.Prober, Series: one.Series, Outages: one.Outages, Verdict: one.Verdict}
		if pr.Outages == nil {
			pr.Outages = []report.Outage{}
		}
		reports = append(reports, pr)
		facts = append(facts, report.PathFacts{Name: name, Sent: one.Totals.Sent, Failed: one.Totals.Failed, OK: one.Totals.OK,
			Redirects: redirects(one.Totals.ByStatus), TargetRate: one.Prober.TargetRate, AchievedRate: one.Prober.AchievedRate})
	}
	return reports, facts
}

// wallClockOf is sum's clock: the samples its prober (or, for in-cluster
// probers, the CLI driving them) noted, the start alone without them (an
// older or hand-made summary).
func wallClockOf(sum prober.Summary) report.WallClock {
	if sum.Clock.Start.IsZero() {
		return report.WallClock{Start: sum.Start.Round(0)}
	}
	return sum.Clock
}

// failure is res as the report holds it, its times placed on the wall
// clock as it read then (clock: see report.WallClock), its at_ms from the
// run's start by that clock too, as the timeline's times are.
func failure(res *prober.Result, clock report.WallClock, runID string) report.Failure {
	intended := clock.At(res.Intended)
	f := report.Failure{
		Seq:           res.Seq,
		RequestID:     runID + "-" + strconv.FormatUint(res.Seq, 10),
		Class:         res.Class.String(),
		Phase:         res.Phase.String(),
		Intended:      intended,
		Start:         clock.At(res.Start),
		End:           clock.At(res.End),
		AtMS:          ms(intended.Sub(clock.At(0))),
		LatencyMS:     ms(res.Latency()),
		Status:        res.Status,
		Fresh:         res.Fresh,
		ConnRequests:  res.ConnReqs,
		ConnAgeMS:     ms(res.ConnAge),
		Backend:       res.Backend,
		ServerClose:   res.ServerClose.String(),
		TLSCause:      res.TLSCause.String(),
		H2Code:        res.H2Code,
		GoAway:        res.GoAway.String(),
		StreamEnd:     res.StreamEnd,
		GRPCStatus:    res.GRPCStatus,
		HiddenRetries: int(res.HiddenRetries),
	}
	if res.Err != nil {
		f.Error = res.Err.Error()
	}
	if a := res.Addr; a != nil {
		if a.Local.IsValid() {
			f.LocalAddr = a.Local.String()
		}
		if a.Remote.IsValid() {
			f.RemoteAddr = a.Remote.String()
		}
	}
	if d := res.DialICMP; d != nil {
		if d.From.IsValid() {
			f.ICMP = &report.ICMPError{From: d.From.String(), Type: int(d.Type), Code: int(d.Code), Name: d.Name(), V6: d.V6}
		}
		if res.Class == prober.Refused {
			f.RefusedBy = report.RefusedByRST // the queue held nothing
			if d.From.IsValid() {
				f.RefusedBy = report.RefusedByICMP
			}
		}
	}
	return f
}

// proberInfo is one in-cluster prober's line of the report.
func proberInfo(m fleet.Member, src fleet.SourceState, start time.Time) report.ProberInfo {
	p := report.ProberInfo{Pod: m.Pod, Node: m.Node, RunID: src.RunID, ShareRPS: m.Share, Sent: src.Sent, OK: src.ByClass[prober.OK],
		ByClass: map[string]uint64{}, ClockOffsetMS: ms(m.ClockOffset), ClockRTTMS: ms(m.RTT), Status: report.ProberOK}
	for c := prober.Class(1); int(c) < prober.NumClasses; c++ {
		if n := src.ByClass[c]; n > 0 {
			p.ByClass[c.String()] = n
			if c.Failed() {
				p.Failed += n
			}
		}
	}
	if !m.Started.IsZero() {
		t := m.Started.UTC()
		p.StartedAt = &t
	}
	if m.Lost != "" {
		t := m.LostAt.UTC()
		p.Status, p.Lost, p.LostAt = report.ProberLost, m.Lost, &t
	}
	return p
}

func quantiles(h *hdr.Histogram) report.Quantiles {
	if h.TotalCount() == 0 {
		return report.Quantiles{}
	}
	us := func(v int64) float64 { return round(float64(v)/1000, 3) }
	return report.Quantiles{
		Count: uint64(h.TotalCount()),
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		Max:   us(h.Max()),
		Mean:  round(h.Mean()/1000, 3),
	}
}

func ms(d time.Duration) float64      { return round(float64(d)/float64(time.Millisecond), 3) }
func seconds(d time.Duration) float64 { return round(d.Seconds(), 3) }

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// tlsRoots says what an https target's certificate was verified against
// (report.Config.TLSRoots); "" for an http:// target.
func tlsRoots(cfg prober.Config) string {
	switch {
	case cfg.Target == nil || cfg.Target.Scheme != "https":
		return ""
	case cfg.Insecure:
		return "insecure"
	case len(cfg.CACert) > 0:
		return "cacert"
	}
	return "system"
}

// redirects counts the 3xx responses in byStatus.
func redirects(byStatus map[string]uint64) uint64 {
	var n uint64
	for status, count := range byStatus {
		if len(status) == 3 && status[0] == '3' {
			n += count
		}
	}
	return n
}

// h2Connections is the pool an h2 run kept (0, absent, otherwise: HTTP/1.1
// holds a connection per request in flight, and --conn new none at all).
func h2Connections(cfg prober.Config) int {
	if !cfg.Protocol.Multiplexed() || cfg.Conn.FreshFraction >= 1 {
		return 0
	}
	return cfg.Connections
}

// grpcMethod is the method a gRPC run called ("" otherwise).
func grpcMethod(cfg prober.Config) string {
	if cfg.Protocol != prober.GRPC {
		return ""
	}
	return cfg.GRPCMethod
}

// grpcClient is who made a gRPC run's calls ("" otherwise).
func grpcClient(cfg prober.Config) string {
	if cfg.Protocol != prober.GRPC {
		return ""
	}
	return string(cmp.Or(cfg.GRPCClient, prober.GRPCClientRaw))
}

// pathsClient is who made the calls of a run of several paths, and what
// grpc-go resent unseen over all of them: the run's own config is its
// first path's, which says "raw" of a run whose other path grpc-go made
// (--grpc-client both), and "not measured" of retries a path measured.
// A run whose paths agree keeps its own.
func pathsClient(paths []report.PathReport, client string, hidden *report.HiddenRetries) (string, *report.HiddenRetries) {
	mixed := false
	var measured []report.HiddenRetries
	for _, p := range paths {
		mixed = mixed || p.GRPCClient != paths[0].GRPCClient
		if h := p.Totals.HiddenRetries; h != nil {
			measured = append(measured, *h)
		}
	}
	switch {
	case !mixed:
		return client, hidden
	case len(measured) == 0:
		return report.GRPCClientBoth, nil
	case len(measured) == 1:
		return report.GRPCClientBoth, &measured[0]
	}
	sum := &report.HiddenRetries{}
	var addedMS float64 // the retried calls' added milliseconds, summed
	for _, h := range measured {
		sum.Calls += h.Calls
		sum.Attempts += h.Attempts
		sum.AddedMSMax = max(sum.AddedMSMax, h.AddedMSMax)
		addedMS += h.AddedMSMean * float64(h.Calls)
	}
	if sum.Calls > 0 {
		sum.AddedMSMean = addedMS / float64(sum.Calls)
	}
	return report.GRPCClientBoth, sum
}

// hiddenRetries is what grpc-go resent unseen, when it made the calls;
// nil (not measured) when rollprobe's own streams did.
func hiddenRetries(cfg prober.Config, h prober.HiddenRetries) *report.HiddenRetries {
	if cfg.Protocol != prober.GRPC || cfg.GRPCClient != prober.GRPCClientGo {
		return nil
	}
	out := &report.HiddenRetries{Calls: h.Calls, Attempts: h.Attempts, AddedMSMax: ms(h.DelayMax)}
	if h.Calls > 0 {
		out.AddedMSMean = ms(h.DelaySum / time.Duration(h.Calls))
	}
	return out
}
