// Package runner is rollprobe run's flow: preflight (changing nothing),
// probe a baseline, trigger the rollout, watch it to the end (complete and
// every old pod gone), settle, then build the report. It ties the prober,
// the rollout watcher and the report together; commands only fill Config.
package runner

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// Config is one run.
type Config struct {
	Kube       kubernetes.Interface
	Namespace  string
	Deployment string
	Service    string // "" to find the one selecting the Deployment's pods
	Trigger    rollout.Trigger
	Probe      prober.Config // Duration is ignored: the run decides when to stop
	Budget     ci.Budget

	Baseline time.Duration // probing before the trigger
	Settle   time.Duration // probing after the last old pod is gone
	Wait     time.Duration // with the Watch trigger: how long to wait for a rollout to start
	Timeout  time.Duration // bounds the whole run
	// ExpectedDrain is the app's drain time after SIGTERM, for the
	// doctor's grace period check (0: its default).
	ExpectedDrain time.Duration

	Tool     report.Tool
	Progress io.Writer // plain progress lines; nil for none
	Every    time.Duration
	// OnStart, if set, is called once probing starts, with what a live
	// view reads (from its own goroutine, never the prober's workers).
	OnStart func(Live)
}

// Phases of a run, in order.
const (
	PhaseBaseline = "baseline"
	PhaseRolling  = "rolling"
	PhaseSettling = "settling"
	PhaseDone     = "done"
)

// Live is a running run's state for live views. Every method is safe to
// call from any goroutine while the run goes on.
type Live struct {
	Prober   *prober.Prober
	Timeline *rollout.Timeline
	// Deployment is the Deployment as last seen by the watcher.
	Deployment func() *appsv1.Deployment
	// Phase is one of the Phase constants.
	Phase func() string
}

// Run executes the flow and returns the report. The error is non-nil only
// when no report could be made (preflight failures, exit 2); a failed
// rollout or an interruption is in the report's verdict.
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	logf := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "rollprobe: "+format+"\n", args...)
		}
	}
	// 1. Preflight: nothing is changed before all of it passes.
	target, err := rollout.Resolve(ctx, cfg.Kube, cfg.Namespace, cfg.Deployment, cfg.Service)
	if err != nil {
		return nil, ci.Usage(fmt.Errorf("preflight: %w", err))
	}
	if err := rollout.CheckPermissions(ctx, cfg.Kube, cfg.Namespace, rollout.RequiredPermissions(cfg.Trigger)); err != nil {
		return nil, ci.Usage(fmt.Errorf("preflight: %w", err))
	}
	d := target.Deployment
	if d.Spec.Paused {
		return nil, ci.Usage(fmt.Errorf("preflight: deployment %s: %w", d.Name, rollout.ErrPaused))
	}
	if _, isWatch := cfg.Trigger.(rollout.Watch); !isWatch {
		if p := rollout.DeploymentProgress(d); !p.Done {
			return nil, ci.Usage(fmt.Errorf("preflight: deployment %s is already mid-rollout (%s%s): wait for it, or use --watch",
				d.Name, p.Message, p.Failed))
		}
	}
	logf("target %s/%s behind service %s, trigger: %s", cfg.Namespace, d.Name, target.Service.Name, cfg.Trigger.Describe())
	// The doctor's static checks, from the objects as they were before the
	// rollout; they go into the report next to what the traffic shows.
	var static []report.Finding
	if in, err := doctor.Gather(ctx, cfg.Kube, target); err != nil {
		logf("doctor checks skipped: %v", err)
	} else {
		static = doctor.Run(in, doctor.Options{ExpectedDrain: cfg.ExpectedDrain})
	}
	if err := checkBaseline(ctx, cfg); err != nil {
		return nil, ci.Usage(fmt.Errorf("preflight: %w", err))
	}

	// 2. Watch, then probe.
	tl := rollout.NewTimeline(nil)
	w, err := rollout.NewWatcher(cfg.Kube, target, tl)
	if err != nil {
		return nil, ci.Usage(err)
	}
	if err := w.Start(ctx); err != nil {
		return nil, ci.Usage(fmt.Errorf("watch: %w", err))
	}
	defer w.Stop()
	oldRevision := w.NewRevision()

	probeCfg := cfg.Probe
	probeCfg.Duration = 0
	p, err := prober.New(probeCfg, "rollprobe/"+cfg.Tool.Version)
	if err != nil {
		return nil, ci.Usage(err)
	}
	probeDone := p.Go(ctx)
	var phase atomic.Value
	phase.Store(PhaseBaseline)
	if cfg.OnStart != nil {
		cfg.OnStart(Live{Prober: p, Timeline: tl, Deployment: w.Deployment, Phase: func() string { return phase.Load().(string) }})
	}
	stopProgress := func() {}
	if cfg.Progress != nil && cfg.Every > 0 {
		stopProgress = ci.StartProgress(cfg.Progress, cfg.Every, p)
	}

	ro := &report.Rollout{Namespace: cfg.Namespace, Deployment: d.Name, Service: target.Service.Name,
		Trigger: cfg.Trigger.Describe(), Status: "not_started", OldRevision: oldRevision}
	rolloutErr := follow(ctx, cfg, w, tl, ro, logf, func(ph string) { phase.Store(ph) })
	phase.Store(PhaseDone)
	stopProgress()
	p.Stop()
	res := <-probeDone
	if res.Err != nil {
		return nil, res.Err
	}
	if res.Summary.Canceled && ro.Status != "failed" && ro.Status != "timed_out" {
		ro.Status = "interrupted"
		logf("interrupted: the cluster is left as it is (the rollout may still be in progress)")
	}

	rep := report.Build(report.ProbeRun{
		Tool: cfg.Tool, Command: "run", RunID: p.RunID(), Config: p.Config(), Budget: cfg.Budget,
		Summary: res.Summary, Recorder: p.Recorder(), RolloutFailed: rolloutErr,
	})
	rep.Rollout = ro
	rep.Timeline = tl.Events()
	analysis.Analyse(rep)
	rep.Findings = append(rep.Findings, static...)
	return rep, nil
}

// follow triggers the rollout and waits for it to finish: complete as
// kubectl judges it, then every old pod object gone, then the settle window.
// It returns why the rollout failed ("" when it did not).
func follow(ctx context.Context, cfg Config, w *rollout.Watcher, tl *rollout.Timeline, ro *report.Rollout, logf func(string, ...any), setPhase func(string)) string {
	deadline := time.Now().Add(cfg.Timeout)
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	logf("baseline: probing for %s before the rollout", cfg.Baseline)
	if !sleep(cfg.Baseline) {
		return ""
	}
	startGen := w.Deployment().Generation
	now := time.Now().UTC()
	ro.TriggeredAt = &now
	tl.Add(rollout.Event{Kind: rollout.RolloutTriggered, Detail: cfg.Trigger.Describe()})
	if err := cfg.Trigger.Fire(ctx, cfg.Kube, cfg.Namespace, cfg.Deployment); err != nil {
		if ctx.Err() != nil {
			return ""
		}
		ro.Status, ro.Message = "failed", err.Error()
		tl.Add(rollout.Event{Kind: rollout.RolloutFailed, Detail: err.Error()})
		logf("trigger failed: %v", err)
		return "trigger failed: " + err.Error()
	}
	ro.Status = "in_progress"
	setPhase(PhaseRolling)
	logf("triggered: %s", cfg.Trigger.Describe())

	if _, isWatch := cfg.Trigger.(rollout.Watch); isWatch {
		waitUntil := time.Now().Add(cfg.Wait)
		for w.Deployment().Generation == startGen && rollout.DeploymentProgress(w.Deployment()).Done {
			if time.Now().After(waitUntil) {
				ro.Status, ro.Message = "not_started", fmt.Sprintf("no rollout started within --wait %s", cfg.Wait)
				return ro.Message
			}
			if !sleep(200 * time.Millisecond) {
				return ""
			}
		}
		logf("a rollout started")
	}

	var lastMsg string
	complete := false
	for {
		if time.Now().After(deadline) {
			ro.Status, ro.Message = "timed_out", fmt.Sprintf("not finished within --timeout %s: %s", cfg.Timeout, lastMsg)
			tl.Add(rollout.Event{Kind: rollout.RolloutFailed, Detail: ro.Message})
			return ro.Message
		}
		d := w.Deployment()
		pr := rollout.DeploymentProgress(d)
		if pr.Failed != "" {
			ro.Status, ro.Message = "failed", pr.Failed
			tl.Add(rollout.Event{Kind: rollout.RolloutFailed, Detail: pr.Failed})
			logf("rollout failed: %s", pr.Failed)
			return pr.Failed
		}
		if !complete && pr.Done && d.Generation > startGen {
			complete = true
			t := time.Now().UTC()
			ro.CompleteAt = &t
			tl.Add(rollout.Event{Kind: rollout.RolloutComplete, Detail: pr.Message})
			logf("rollout complete (kubectl rollout status would return now); waiting for old pods to go")
		}
		if complete {
			newRev := w.NewRevision()
			if newRev != "" && len(rollout.OldPods(w.Pods(), newRev)) == 0 {
				ro.NewRevision = newRev
				t := time.Now().UTC()
				ro.OldPodsGoneAt = &t
				tl.Add(rollout.Event{Kind: rollout.AllOldPodsGone, Revision: newRev})
				ro.Status = "complete"
				break
			}
		}
		if pr.Message != lastMsg && pr.Message != "" {
			lastMsg = pr.Message
			logf("rollout: %s", pr.Message)
		}
		if !sleep(100 * time.Millisecond) {
			return ""
		}
	}
	setPhase(PhaseSettling)
	logf("all old pods gone; settling for %s", cfg.Settle)
	sleep(cfg.Settle)
	return ""
}

// checkBaseline sends a short burst at the target before anything changes:
// a target that already fails would make every later finding meaningless.
func checkBaseline(ctx context.Context, cfg Config) error {
	c := cfg.Probe
	c.Rate = min(max(c.Rate, 1), 50)
	c.Duration = time.Second
	c.Workers, c.MaxWorkers = 1, 50
	p, err := prober.New(c, "rollprobe/"+cfg.Tool.Version+" (preflight)")
	if err != nil {
		return err
	}
	sum, err := p.Run(ctx)
	if err != nil {
		return err
	}
	if sum.Canceled {
		return context.Canceled
	}
	snap := p.Recorder().Snapshot()
	sent, ok := snap.Totals.Sent(), snap.Totals.Classes[prober.OK]
	if sent == 0 || ok != sent {
		fails := p.Recorder().Failures()
		detail := ""
		if len(fails) > 0 && fails[0].Err != nil {
			detail = ": first failure " + fails[0].Class.String() + " " + fails[0].Err.Error()
		} else if len(fails) > 0 {
			detail = fmt.Sprintf(": first failure %s (status %d)", fails[0].Class, fails[0].Status)
		}
		return fmt.Errorf("the target %s is not healthy before the rollout: %d of %d baseline requests succeeded%s",
			c.Target, ok, sent, detail)
	}
	return nil
}
