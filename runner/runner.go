// Package runner holds rollprobe's two flows: probe (load at a target, a
// verdict) and rollout (preflight changing nothing, a baseline, the trigger,
// the watch to the end — complete and every old pod gone —, settling). Each
// is started with Start*, exposes one Live handle for whatever shows it
// while it runs, and ends in Wait with the run's report, assembled in one
// place (build, then the rollout sections and the analysis). The runner
// never prints progress and never calls back into its caller: commands
// attach a dashboard or a printer to Live.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/rollout"
)

// Phase is where a run is.
type Phase string

// Phases of a run, in order; probe goes from Probing to Done.
const (
	PhaseProbing  Phase = "probing"
	PhaseBaseline Phase = "baseline"
	PhaseRolling  Phase = "rolling"
	// PhaseDraining and PhaseScaling stand for PhaseRolling when the
	// change keeps the revision: a drain's evictions, a scale's pods
	// added or removed (followDrain, followScale).
	PhaseDraining Phase = "draining"
	PhaseScaling  Phase = "scaling"
	// PhaseRollingBack: an aborted Argo Rollout's way back, until the
	// aborted revision's pods are gone (followAbort).
	PhaseRollingBack Phase = "rolling back"
	PhaseSettling    Phase = "settling"
	PhaseDone        Phase = "done"
)

// Live is a running flow's state for live views (a dashboard, progress
// lines). Every method is safe to call from any goroutine while the run
// goes on; the rollout methods return zero values for a probe.
type Live struct {
	prober  load
	phase   *atomic.Value // Phase
	watcher *rollout.Watcher
	tl      *rollout.Timeline
	// oldRev (string): the revision the run started from. A watch's is
	// judged again when the follow begins, after the baseline: a rollout
	// in progress at the watch's start may have ended by then.
	oldRev *atomic.Value
	clock  *rollout.RevisionClock // nil for a probe
}

// ViewStalled is how long no list of the revision clock has answered, when
// that is longer than report.ViewStallBound: the live face of
// report.ViewStall (which also counts watch events as signs of life; the
// clock's lists every 100 ms make that difference rare). 0 while the view
// is live, for a probe, and before the rollout is followed.
func (l Live) ViewStalled(now time.Time) time.Duration {
	if l.clock == nil {
		return 0
	}
	last, ok := l.clock.LastAnswer()
	if !ok {
		return 0
	}
	if d := now.Sub(last); d > report.ViewStallBound {
		return d
	}
	return 0
}

// Probers is each in-cluster prober's live status; nil when probing from
// this process.
func (l Live) Probers() []fleet.Status {
	if fl, ok := l.prober.(*fleet.Fleet); ok {
		return fl.Statuses()
	}
	return nil
}

// Paths are the names and recorders of the paths a run probes side by
// side; nil for a run of one target.
func (l Live) Paths() (names []string, recorders []*prober.Recorder) {
	switch p := l.prober.(type) {
	case *prober.Group:
		for _, pr := range p.Probers() {
			recorders = append(recorders, pr.Recorder())
		}
		return p.Names(), recorders
	case *fleet.Fleet:
		if len(p.Paths()) < 2 {
			return nil, nil
		}
		for _, path := range p.Paths() {
			names = append(names, path.Name)
		}
		return names, p.PathRecorders()
	}
	return nil, nil
}

// Start is when probing began.
func (l Live) Start() time.Time { return l.prober.Start() }

// Elapsed is the time since probing began.
func (l Live) Elapsed() time.Duration { return l.prober.Elapsed() }

// Recorder is the run's recorder (merged counts, rows, latencies).
func (l Live) Recorder() *prober.Recorder { return l.prober.Recorder() }

// Phase is where the run is.
func (l Live) Phase() Phase { return l.phase.Load().(Phase) }

// Timeline is what the watcher saw so far; nil for a probe.
func (l Live) Timeline() *rollout.Timeline { return l.tl }

// Workload is the workload as last seen; ok false for a probe.
func (l Live) Workload() (w rollout.Workload, ok bool) {
	if l.watcher == nil {
		return rollout.Workload{}, false
	}
	return l.watcher.Workload(), true
}

// Revisions are the revisions (rollout.PodRevision) the run started
// from and of the workload's current one ("" while not known): the one
// rule for old and new pods, the ReplicaSet's pod-template-hash.
func (l Live) Revisions() (old, current string) {
	if l.watcher == nil {
		return "", ""
	}
	return l.oldRev.Load().(string), l.watcher.NewRevision()
}

// load is where a run's requests come from: the local prober, or the
// in-cluster probers (fleet.Fleet), whose results are merged into one
// recorder that reads as a local one.
type load interface {
	Go(ctx context.Context) <-chan prober.Outcome
	Stop()
	Start() time.Time
	Elapsed() time.Duration
	Recorder() *prober.Recorder
	RunID() string
	Config() prober.Config
}

// Run is a started flow.
type Run struct {
	live Live
	done chan struct{}
	rep  *report.Report
	err  error
}

// Live is the handle live views read.
func (r *Run) Live() Live { return r.live }

// Wait blocks until the run ends and returns its report. The error is
// non-nil only when no report could be made.
func (r *Run) Wait() (*report.Report, error) {
	<-r.done
	return r.rep, r.err
}

// ProbeConfig is one probe.
type ProbeConfig struct {
	Probe prober.Config
	// Paths, when two or more, are probed side by side instead of Probe
	// alone (Probe is then the first path's configuration).
	Paths  []prober.Path
	Budget report.Budget
	Tool   report.Tool
	// Probers, when set, probes from prober pods in the cluster (Kube's)
	// instead of from this process; Log gets the fleet's lines.
	Probers *ProbersConfig
	Kube    kubernetes.Interface
	Log     io.Writer
}

// StartProbe starts probing; cancelling ctx stops it (the report is then
// marked interrupted).
func StartProbe(ctx context.Context, cfg ProbeConfig) (*Run, error) {
	var p load
	var fl *fleet.Fleet
	var group *prober.Group
	if cfg.Probers != nil && cfg.Probers.Count > 0 {
		var err error
		if fl, err = startFleet(ctx, cfg); err != nil {
			return nil, err
		}
		p = fl
	} else {
		var err error
		if p, group, err = newLocalLoad(cfg.Probe, cfg.Paths, userAgent(cfg.Tool, "")); err != nil {
			return nil, err
		}
	}
	phase := &atomic.Value{}
	phase.Store(PhaseProbing)
	run := &Run{live: Live{prober: p, phase: phase}, done: make(chan struct{})}
	probeDone := p.Go(ctx)
	var window *time.Timer
	if fl != nil && cfg.Probe.Duration > 0 {
		// The probers run until told: the send window is kept here.
		window = time.AfterFunc(time.Until(fl.Start().Add(cfg.Probe.Duration)), fl.Stop)
	}
	go func() {
		defer close(run.done)
		if fl != nil {
			defer fl.Close()
		}
		res := <-probeDone
		if window != nil {
			window.Stop()
		}
		phase.Store(PhaseDone)
		if res.Err != nil {
			// Requests may have been sent: not a usage error (exit 2).
			run.err = exitcode.InternalError(fmt.Errorf("the prober failed: %w", res.Err))
			return
		}
		run.rep = build(probeRun{Tool: cfg.Tool, Command: "probe", RunID: p.RunID(), Config: p.Config(),
			Budget: cfg.Budget, Summary: res.Summary, Recorder: p.Recorder(), Fleet: fl, Group: group})
	}()
	return run, nil
}

// newLocalLoad is this process's prober for one target, or a group for
// several paths (the group is then also returned).
func newLocalLoad(probe prober.Config, paths []prober.Path, ua string) (load, *prober.Group, error) {
	if len(paths) < 2 {
		p, err := prober.New(probe, ua)
		return p, nil, err
	}
	g, err := prober.NewGroup(paths, ua)
	return g, g, err
}

// startFleet checks the permissions probing from the cluster needs and
// launches the probers of a probe: errors are usage errors, nothing sent.
func startFleet(ctx context.Context, cfg ProbeConfig) (*fleet.Fleet, error) {
	pc := cfg.Probers
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "rollprobe: "+format+"\n", args...)
		}
	}
	if err := rollout.CheckPermissions(ctx, cfg.Kube, pc.Namespace, rollout.ProberPermissions()); err != nil {
		return nil, exitcode.UsageError(fmt.Errorf("probing from the cluster: %w", err))
	}
	maxDuration := 24 * time.Hour // a probe until Ctrl-C: the pods' deadline still ends them
	if d := cfg.Probe.Duration; d > 0 {
		maxDuration = d + time.Minute
	}
	fl, err := pc.launch(ctx, cfg.Kube, cfg.Probe, cfg.Paths, maxDuration, logf)
	if err != nil {
		return nil, exitcode.UsageError(err)
	}
	return fl, nil
}

// launch starts the probers for a run of probe's load (or of paths, when
// two or more: pc.Count probers for each) that may last up to maxDuration
// (their pods' own bound should this process die).
func (pc *ProbersConfig) launch(ctx context.Context, kube kubernetes.Interface, probe prober.Config, paths []prober.Path, maxDuration time.Duration,
	logf func(string, ...any)) (*fleet.Fleet, error) {
	if len(paths) < 2 {
		paths = nil
	}
	return fleet.Launch(ctx, fleet.Config{Kube: kube, Streams: pc.Streams, RunID: newRunID(), Probe: probe, Paths: paths, Logf: logf,
		Pods: fleet.PodSpec{Namespace: pc.Namespace, Image: pc.Image, Count: pc.Count, MaxDuration: maxDuration, StartTimeout: pc.StartTimeout,
			Conntrack: pc.Conntrack}})
}

func userAgent(t report.Tool, note string) string {
	ua := "rollprobe/" + t.Version
	if note != "" {
		ua += " (" + note + ")"
	}
	return ua
}

// RolloutConfig is one rollout run.
type RolloutConfig struct {
	Kube      kubernetes.Interface
	Namespace string
	// Kind and Name are the workload's; the zero Kind is a Deployment.
	Kind    rollout.Kind
	Name    string
	Service string // "" to find the one selecting the workload's pods
	Trigger rollout.Trigger
	Probe   prober.Config // Duration is ignored: the run decides when to stop
	// Paths, when two or more, are probed side by side instead of Probe
	// alone (Probe is then the first path's configuration).
	Paths  []prober.Path
	Budget report.Budget

	Baseline time.Duration // probing before the trigger
	Settle   time.Duration // probing after the last old pod is gone
	Wait     time.Duration // with the Watch trigger: how long to wait for a rollout to start
	Timeout  time.Duration // bounds the whole run, preflight included
	// ExpectedDrain is the app's drain time after SIGTERM, for the
	// doctor's grace period check (0: its default).
	ExpectedDrain time.Duration
	// Promote: an Argo Rollout paused on its way (a pause step without a
	// duration, a blue/green before its switch) is promoted as
	// kubectl argo rollouts promote does, once per pause.
	Promote bool
	// PromoteAfter is how long such a pause is observed before the
	// promote: the traffic at the step's weight is measured meanwhile.
	PromoteAfter time.Duration

	Tool report.Tool
	// Log receives the run's own lines (preflight, trigger, rollout
	// progress); nil for none.
	Log io.Writer

	// Probers, when set, probes from prober pods in the cluster instead
	// of from this process.
	Probers *ProbersConfig

	// EdgeAccessLog, when set, is an ingress's access log (Traefik's JSON
	// or nginx's in edgelog.NginxLogFormat, the request ID header kept),
	// read after the rollout for where the edge forwarded each failed
	// request; EdgeLogFormat its format (edgelog.Formats; "": auto).
	EdgeAccessLog string
	EdgeLogFormat string
	// EdgeLogWait bounds how long the run waits, after the rollout, for
	// that log to hold a line for every failure that got past the edge
	// (rollprobe run: DefaultEdgeLogWait unless told; zero reads it once).
	EdgeLogWait time.Duration
}

// ProbersConfig is the in-cluster probers of a run (rollprobe run
// --probers N).
type ProbersConfig struct {
	Count        int
	Image        string
	Namespace    string // "" for the Deployment's
	StartTimeout time.Duration
	// Conntrack: the probers run on their node's network and read
	// conntrack there (fleet.PodSpec.Conntrack).
	Conntrack bool
	// Streams reaches the pods (attach, logs): fleet.KubeStreams.
	Streams fleet.Streams
}

// ref names the workload.
func (cfg *RolloutConfig) ref() rollout.Ref {
	k := cfg.Kind
	if k == "" {
		k = rollout.KindDeployment
	}
	return rollout.Ref{Kind: k, Namespace: cfg.Namespace, Name: cfg.Name}
}

// proberNamespace is where the prober pods go.
func (cfg *RolloutConfig) proberNamespace() string {
	if cfg.Probers != nil && cfg.Probers.Namespace != "" {
		return cfg.Probers.Namespace
	}
	return cfg.Namespace
}

// newRunID names a run of in-cluster probers (their pods' label).
func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errTimedOut is the cause of the run's deadline.
var errTimedOut = errors.New("run timed out")

// logf writes one of the run's lines.
func (cfg *RolloutConfig) logf(format string, args ...any) {
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "rollprobe: "+format+"\n", args...)
	}
}
