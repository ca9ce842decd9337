package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/edgelog"
	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/natwatch"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/rollout"
)

// StartRollout runs the preflight (nothing is changed before all of it
// passes; an error is a usage error, exit 2), starts the watch and the
// prober, and goes on in the background: baseline, trigger, follow, settle.
// cfg.Timeout bounds all of it from this call on; cancelling ctx interrupts
// the run (the cluster is left as it is).
func StartRollout(ctx context.Context, cfg RolloutConfig) (*Run, error) {
	deadline := time.Now().Add(cfg.Timeout)
	bounded, cancelBounded := context.WithDeadlineCause(ctx, deadline, errTimedOut)
	stopNAT := func() {}
	fail := func(err error) (*Run, error) {
		stopNAT()
		cancelBounded()
		return nil, exitcode.UsageError(fmt.Errorf("preflight: %w", err))
	}

	// 1. Preflight.
	target, err := rollout.Resolve(bounded, cfg.Kube, cfg.ref(), cfg.Service)
	if err != nil {
		return fail(err)
	}
	perms := rollout.RequiredPermissions(cfg.ref().Kind, cfg.Trigger)
	perms = append(perms, rollout.TemplateHolderPermissions(target.Workload, cfg.Trigger)...)
	if cfg.Promote {
		perms = append(perms, rollout.PromotePermissions()...)
	}
	if err := rollout.CheckPermissions(bounded, cfg.Kube, cfg.Namespace, perms); err != nil {
		return fail(err)
	}
	if cfg.EdgeAccessLog != "" {
		if err := edgelog.CheckReadable(cfg.EdgeAccessLog); err != nil {
			return fail(fmt.Errorf("edge access log: %w", err))
		}
	}
	wl := target.Workload
	drain, isDrain := cfg.Trigger.(rollout.Drain)
	scale, isScale := cfg.Trigger.(rollout.Scale)
	if isScale {
		if scale, err = scale.Check(wl); err != nil {
			return fail(err)
		}
		cfg.Trigger = scale // it says where it scales from
		switch hpas, err := rollout.Autoscalers(bounded, cfg.Kube, cfg.ref()); {
		case err != nil:
			cfg.logf("could not check for an autoscaler that would undo the scale (%v): the run stops if one does", err)
		case len(hpas) > 0:
			return fail(fmt.Errorf("%s scales %s: %w", strings.Join(hpas, " and "), cfg.ref(), rollout.ErrAutoscaled))
		}
	} else if isDrain {
		// A drain writes no workload: its evictions are replaced whatever
		// the update strategy, a paused Deployment's too.
		if err := rollout.CheckPermissions(bounded, cfg.Kube, "", drain.ClusterPermissions()); err != nil {
			return fail(err)
		}
		if err := drain.Prepare(bounded, cfg.Kube); err != nil {
			return fail(err)
		}
	} else if err := wl.CanRoll(); err != nil {
		return fail(err)
	}
	if _, isWatch := cfg.Trigger.(rollout.Watch); !isWatch {
		if p := wl.Progress(); !p.Done {
			return fail(fmt.Errorf("%s %s (%s%s): %w", cfg.ref().Kind.Lower(), cfg.Name, p.Message, p.Failed, whyNotAtRest(bounded, cfg.Kube, target)))
		}
	}
	cfg.logf("target %s behind service %s, trigger: %s", cfg.ref(), target.Service.Name, cfg.Trigger.Describe())
	if from := wl.TemplateFrom(); from != "" {
		cfg.logf("its pod template is %s's (workloadRef): the trigger writes that, Argo rolls the rollout", from)
	}
	// The doctor's static checks read the objects as they were before the
	// rollout; they go into the report next to what the traffic shows.
	in, err := doctor.Gather(bounded, cfg.Kube, target)
	doctorOK := err == nil
	if err != nil {
		cfg.logf("doctor checks skipped: %v", err)
	}
	probers := cfg.Probers != nil && cfg.Probers.Count > 0
	// Where this process probes from the host that rewrites the Service
	// address (a node), conntrack says which pod each connection went to,
	// and, with the prober's log of its connections, which pod served each
	// response. The watch begins before the baseline check, whose
	// connections would otherwise draw the ports of a previous run's
	// unanswered connections: they are held from here on (a check that
	// joined one such entry timed out and refused a healthy target).
	var nat *natwatch.Table
	staleHeld := 0
	if !probers {
		var stopWatch, release func()
		nat, stopWatch = natwatch.Watch(dialedPorts(cfg))
		staleHeld, release = prober.HoldPorts(lingeringPorts(nat), time.Now())
		stopNAT = func() { stopWatch(); release() }
	}
	if probers {
		// The probers check the baseline from where they probe (this
		// process may have no route to the Service); their permissions
		// are checked before any pod is made.
		if err := rollout.CheckPermissions(bounded, cfg.Kube, cfg.proberNamespace(), rollout.ProberPermissions()); err != nil {
			return fail(fmt.Errorf("probing from the cluster: %w", err))
		}
	} else if err := checkBaseline(bounded, cfg); err != nil {
		return fail(err)
	}

	// 2. Watch, then probe.
	target.ServicePort = rollout.ServicePortOf(target.Service, dialedURL(cfg.Probe))
	tl := rollout.NewTimeline(nil)
	w, err := rollout.NewWatcher(cfg.Kube, target, tl)
	if err != nil {
		return fail(err)
	}
	if err := w.Start(ctx, bounded); err != nil {
		w.Stop()
		return fail(fmt.Errorf("watch: %w", err))
	}
	probeCfg := cfg.Probe
	probeCfg.Duration = 0
	var p load
	var fl *fleet.Fleet
	var group *prober.Group
	if probers {
		pc := *cfg.Probers
		pc.Namespace = cfg.proberNamespace()
		paths := make([]prober.Path, len(cfg.Paths))
		for i, path := range cfg.Paths {
			path.Config.Duration = 0
			paths[i] = path
		}
		fl, err = pc.launch(bounded, cfg.Kube, probeCfg, paths, cfg.Timeout+time.Minute, cfg.logf)
		if err != nil {
			w.Stop()
			return fail(err)
		}
		p = fl
	}
	var conns *prober.ConnLog
	if !probers {
		if nat.Status().Watching {
			conns = &prober.ConnLog{}
		}
		probeCfg.ConnLog = conns
		paths := make([]prober.Path, len(cfg.Paths))
		for i, path := range cfg.Paths {
			path.Config.Duration = 0
			path.Config.ConnLog = conns
			paths[i] = path
		}
		if p, group, err = newLocalLoad(probeCfg, paths, userAgent(cfg.Tool, "")); err != nil {
			stopNAT()
			w.Stop()
			return fail(err)
		}
	}
	phase := &atomic.Value{}
	phase.Store(PhaseBaseline)
	// oldRev is a first estimate, for the live views during the baseline:
	// a watch's is judged where the follow decides what it follows
	// (setOldRevision), and the report says that one.
	oldRev := &atomic.Value{}
	startRev, startPods := w.NewRevision(), w.Pods()
	oldRev.Store(startRev)
	if _, isWatch := cfg.Trigger.(rollout.Watch); isWatch && rolling(w.Workload(), startRev, startPods) {
		oldRev.Store(goingRevision(startPods, startRev)) // mid-rollout: the revision going
	}
	run := &Run{live: Live{prober: p, phase: phase, watcher: w, tl: tl, oldRev: oldRev,
		clock: rollout.NewRevisionClock(cfg.Kube, cfg.Namespace, 0, nil)}, done: make(chan struct{})}
	probeDone := p.Go(ctx)
	if fl != nil {
		cfg.logf("%d probers sending from the cluster (their starts %v apart)", len(fl.Members()), fl.StartSpread().Round(time.Millisecond))
	}
	// proberEnded closes when the load ends on its own or by Stop; the
	// outcome is then read from outcome.
	outcomeCh, proberEnded := make(chan prober.Outcome, 1), make(chan struct{})
	go func() { o := <-probeDone; outcomeCh <- o; close(proberEnded) }()
	go func() {
		defer close(run.done)
		defer cancelBounded()
		defer w.Stop()
		defer stopNAT() // the watch and the held ports, on every way out
		if fl != nil {
			defer func() {
				if err := fl.Close(); err != nil {
					cfg.logf("prober pods: %v (delete them with: kubectl delete pod -n %s -l %s=%s)", err, cfg.proberNamespace(), fleet.LabelRun, fl.RunID())
				}
			}()
		}
		// The revision clock dates the deletions more finely than the
		// apiserver's 1 s timestamps (see rollout.RevisionClock); it runs
		// while the rollout is followed, when the deletions happen.
		clock := run.live.clock
		clockCtx, stopClock := context.WithCancel(ctx)
		clockDone := make(chan struct{})
		go func() { defer close(clockDone); clock.Run(clockCtx) }()
		f := follower{cfg: &cfg, w: w, tl: tl, setPhase: func(ph Phase) { phase.Store(ph) }, setOldRevision: func(rev string) { oldRev.Store(rev) },
			sending: func() error { return loadSending(bounded, p, proberEnded) }}
		if fl != nil {
			f.baselineCheck = func() error { return fleetBaselineHealthy(fl, probeCfg) }
			f.baselineSettle = fleetBaselineSettle(fl, probeCfg)
		}
		out := f.follow(ctx, bounded)
		stopClock()
		<-clockDone
		phase.Store(PhaseDone)
		p.Stop()
		res := <-outcomeCh
		if res.Err != nil {
			// Past the preflight a code-less error would read as exit 2,
			// "nothing was changed": the load itself failed, and the
			// rollout may have been triggered.
			err := fmt.Errorf("the prober failed: %w", res.Err)
			if out.triggeredAt == nil {
				err = fmt.Errorf("%w (nothing was triggered)", err)
			}
			run.err = exitcode.InternalError(err)
			return
		}
		if res.Summary.Canceled && !out.status.Failed() {
			out.status = report.StatusInterrupted
			cfg.logf("interrupted: the cluster is left as it is (the rollout may still be in progress)")
		}
		if out.baselineErr != nil { // checked before the trigger: nothing changed
			run.err = exitcode.UsageError(out.baselineErr)
			return
		}
		if res.Summary.Fault == "" {
			res.Summary.Fault = f.fault // the prober's own panic comes first
		}
		stopNAT()
		rep := build(probeRun{Tool: cfg.Tool, Command: "run", RunID: p.RunID(), Config: p.Config(), Budget: cfg.Budget,
			Summary: res.Summary, Recorder: p.Recorder(), RolloutFailed: out.failure(), Fleet: fl, Group: group})
		if nat != nil {
			var logged []prober.ConnRecord
			if conns != nil {
				logged = conns.Conns()
			}
			clock := wallClockOf(res.Summary) // the failures' clock: see build
			dials := newDials(rep.Failures, logged, clock)
			rep.Conntrack = mapConnections(rep, nat, dials)
			rep.Conntrack.StalePortsHeld = staleHeld
			if conns != nil {
				mapResponses(rep.Conntrack, nat, logged, dials, clock)
			}
		}
		if fl != nil && cfg.Probers.Conntrack {
			rep.Conntrack = mapProberConnections(rep, fl.Sources())
		}
		rep.Rollout = out.section(cfg, target, oldRev.Load().(string))
		svc := target.Service
		rep.Rollout.ServiceType, rep.Rollout.ExternalTrafficPolicy = string(svc.Spec.Type), string(svc.Spec.ExternalTrafficPolicy)
		rep.Rollout.HealthCheckNodePort = svc.Spec.HealthCheckNodePort
		rep.Rollout.PublishNotReadyAddresses = svc.Spec.PublishNotReadyAddresses
		setPathEntries(rep, svc, w.NodeIPs())
		if len(rep.Paths) > 0 {
			rep.Rollout.Entry = rep.Paths[0].Entry // the first path's, by what it dialled
		} else {
			rep.Rollout.Entry = entryOf(svc, dialedURL(cfg.Probe), w.NodeIPs(), rep.Prober)
		}
		rep.Timeline = tl.Events()
		markEdgeConnections(rep, svc, w.NodeIPs())
		if cfg.EdgeAccessLog != "" {
			rep.EdgeLog = readEdgeLog(ctx, rep, cfg.EdgeAccessLog, cmp.Or(cfg.EdgeLogFormat, edgelog.FormatAuto), cfg.EdgeLogWait)
			switch e := rep.EdgeLog; {
			case e.Error != "":
				cfg.logf("edge access log not read: %s; the pods of failures through the edge are inferred", e.Error)
			case e.Requests == 0:
				cfg.logf("edge access log %s: no line of this run's requests (is the %s header kept in it?); the pods of failures through the edge are inferred", e.File, rep.Config.RequestIDHeader)
			}
		}
		if in.Version.Known() {
			rep.Rollout.ServerVersion = in.Version.String()
		}
		if from, to, ok := clock.Ran(); ok {
			rep.ViewStalls = rollout.Stalls(from, to, clock.Marks(), rep.Timeline, report.ViewStallBound)
			rep.Timeline = withStallEvents(rep.Timeline, rep.ViewStalls)
		}
		run.rep = rep
		// The report stands from here on: a panic in the analysis leaves it
		// without its explanations, marked as rollprobe's failure (exit 70).
		fault := guard("the analysis", func() {
			addAnalysis(rep, clock, in, doctorOK, cfg)
			ro := w.Workload().Rollout
			rep.Rollout.Steps = argoSteps(rep, ro, cfg.Budget) // after the analysis: the pods' revisions
			routed := ro != nil && ro.Spec.Strategy.Canary != nil && len(ro.Spec.Strategy.Canary.TrafficRouting) > 0
			if f, ok := analysis.CanaryShare(rep, routed); ok {
				rep.Findings = withRunFinding(rep.Findings, f)
			}
		})
		if fault != "" {
			rep.Verdict = rep.Verdict.WithInternal(fault)
		}
		if out.declined && rep.Verdict.Pass {
			// Nothing else explains why the load stopped: never a pass
			// for a rollout that was not triggered.
			rep.Verdict = rep.Verdict.WithInternal(out.message)
		}
	}()
	return run, nil
}

// addAnalysis adds the analysis (failures placed on the timeline, outages,
// per-pod traffic, findings) and the doctor's static checks to rep.
func addAnalysis(rep *report.Report, clock *rollout.RevisionClock, in doctor.Input, doctorOK bool, cfg RolloutConfig) {
	if os.Getenv(prober.TestPanicEnv) == "run" {
		panic("injected by " + prober.TestPanicEnv)
	}
	marks := clock.Marks()
	rollout.Stamp(rep.Timeline, marks)
	x := analysis.Explain(rep)
	x.Attribution.RevisionMarks, x.Attribution.RevisionMarkPeriodMS = len(marks), float64(clock.Period().Milliseconds())
	rep.Failures, rep.Attribution, rep.Outages, rep.Pods, rep.NodeGaps = x.Failures, x.Attribution, x.Outages, x.Pods, x.NodeGaps
	rep.ViewStalls = x.ViewStalls
	rep.Findings = x.Findings
	for i := range rep.Paths {
		rep.Paths[i].Pods, rep.Paths[i].Outages = x.PathPods[i], x.PathOutages[i]
	}
	if doctorOK { // run after the analysis: its advice names what the traffic measured
		measured := shutdownMeasured(rep.Timeline)
		measured.Sent, measured.Failed = rep.Totals.Sent, rep.Totals.Failed
		for _, p := range rep.Pods {
			measured.ServedAfterDeletion += p.ServedAfterDeletion
		}
		rep.Findings = append(rep.Findings, doctor.Run(in, doctor.Options{ExpectedDrain: cfg.ExpectedDrain,
			MeasuredPreStop: x.PreStopSeconds, Measured: measured})...)
	}
}

// shutdownMeasured is what the timeline says of the deleted pods'
// shutdown, for the doctor: how many pods' deletion it saw, and how long
// after its deletion request each had its last container exit (the
// container_terminated events after it; receipt times both).
func shutdownMeasured(timeline []report.Event) *doctor.Measured {
	deleted := map[string]time.Time{}
	for _, e := range timeline {
		if at, seen := deleted[e.Pod]; e.Kind == report.PodDeletionRequested && (!seen || e.At.Before(at)) {
			deleted[e.Pod] = e.At
		}
	}
	exited := map[string]time.Time{}
	for _, e := range timeline {
		if at, seen := deleted[e.Pod]; e.Kind == report.ContainerTerminated && seen && !e.At.Before(at) && e.At.After(exited[e.Pod]) {
			exited[e.Pod] = e.At
		}
	}
	m := &doctor.Measured{PodsDeleted: len(deleted), ExitsSeen: len(exited)}
	for pod, at := range exited {
		m.ExitedWithin = max(m.ExitedWithin, at.Sub(deleted[pod]))
	}
	return m
}

// withRunFinding adds f, a finding of the traffic, after the others of
// the traffic and before the doctor's.
func withRunFinding(fs []report.Finding, f report.Finding) []report.Finding {
	i := slices.IndexFunc(fs, func(f report.Finding) bool { return f.Source == report.SourceDoctor })
	if i < 0 {
		return append(fs, f)
	}
	return slices.Insert(fs, i, f)
}

// guard runs f and returns the panic it recovered, with its stack ("" if
// none): a panic in a run's goroutine must end in a report marked as
// rollprobe's failure, not in Go's exit 2.
func guard(where string, f func()) (fault string) {
	defer func() {
		if v := recover(); v != nil {
			fault = fmt.Sprintf("panic in %s: %v\n%s", where, v, debug.Stack())
		}
	}()
	f()
	return ""
}

// loadSending waits until the load is sending (a request has completed:
// the recorder counts completions) and says why not if it stopped or ended
// first, or ctx did: the trigger fires only while every request that will
// judge it is being sent. For probers in the cluster, a lost prober counts
// as not sending.
func loadSending(ctx context.Context, p load, ended <-chan struct{}) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ended:
			return errors.New("the prober stopped before the trigger")
		default:
		}
		switch l := p.(type) {
		case *prober.Prober:
			if l.Stopping() {
				return errors.New("the prober stopped before the trigger")
			}
		case *fleet.Fleet:
			for _, st := range l.Statuses() {
				if st.Lost != "" {
					return fmt.Errorf("prober %s stopped before the trigger: %s", st.Pod, st.Lost)
				}
			}
		}
		if p.Recorder().Totals().Sent() > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ended:
		case <-tick.C:
		}
	}
}

// outcome is how following the rollout ended; the report's rollout section
// is built from it once.
type outcome struct {
	status                                 report.RolloutStatus
	message                                string
	triggeredAt, completeAt, oldPodsGoneAt *time.Time
	newRevision                            string
	// triggerSeenAfter: from sending the trigger's own write to receiving
	// it through the watch (0 when the trigger wrote nothing itself).
	triggerSeenAfter time.Duration
	// baselineErr: the target failed during the baseline (probing from
	// the cluster); nothing was triggered.
	baselineErr error
	// declined: rollprobe did not fire the trigger because the load was
	// not sending (a prober lost, the local prober stopped). Not a failed
	// rollout (exit 3): the load's own trouble decides the verdict.
	declined bool
	// metScale is the scale a watch, a patch or a deploy command turned
	// out to be instead of a rollout (From set; zero for a rollout): the
	// phase, the log, the end's wording and a watch's trigger say it.
	metScale rollout.Scale
	// change is what the fired trigger changed: known from its kind, or
	// learnt from the workload for a patch, a deploy command or a watch;
	// "" until then, and for a trigger never fired.
	change report.ChangeKind
}

// rolling says whether the workload is mid-rollout as run's refusal to
// trigger judges it: its status not done, with pods of another revision
// than its current one still there or its current one not shown yet
// (its controller has not seen its spec). Not done alone may be a pod
// gone unavailable (a crash, an eviction), which rolls nothing; old pods
// still terminating after a rollout done are its tail, and a watch begun
// then waits for the next change, as a trigger would be let start it.
func rolling(wl rollout.Workload, newRev string, pods []*corev1.Pod) bool {
	return !wl.Progress().Done && (newRev == "" || len(rollout.OldPods(pods, newRev)) > 0)
}

// whyNotAtRest tells, for a workload whose status is not done, a rollout
// in progress (rollout.ErrMidRollout, which a watch could follow) from pods
// merely unavailable (rollout.ErrUnavailable: nothing to follow). It reads
// the pods and the current revision through a watcher of its own, as the
// follow does, and judges them by the follow's rule (rolling). Pods that
// cannot be read within a few seconds leave it unknown: ErrMidRollout,
// saying so, as the one a caller may offer more for.
func whyNotAtRest(ctx context.Context, kube kubernetes.Interface, target *rollout.Target) error {
	w, err := rollout.NewWatcher(kube, target, rollout.NewTimeline(nil))
	if err == nil {
		sync, cancel := context.WithTimeout(ctx, notAtRestSync)
		err = w.Start(ctx, sync)
		cancel()
		defer w.Stop()
	}
	if err != nil {
		return fmt.Errorf("not every pod is available, and whether it is rolling is unknown (its pods could not be read: %v): %w", err, rollout.ErrMidRollout)
	}
	// Judged on the object the refusal read (its status not done), by
	// the pods now: a status done meanwhile would not say "unavailable".
	newRev, pods := w.NewRevision(), w.Pods()
	if !rolling(target.Workload, newRev, pods) {
		return rollout.ErrUnavailable
	}
	if newRev == "" {
		return fmt.Errorf("its current revision is not shown yet: %w", rollout.ErrMidRollout)
	}
	old := rollout.OldPods(pods, newRev)
	verb := "are"
	if len(old) == 1 {
		verb = "is"
	}
	return fmt.Errorf("%d of its %d pods %s not of its current revision %s: %w", len(old), len(pods), verb, newRev, rollout.ErrMidRollout)
}

// notAtRestSync bounds whyNotAtRest's read of the pods: a refusal that
// waits longer for its wording would be worse than one that says less.
const notAtRestSync = 10 * time.Second

// goingRevision is the revision most pods not of newRev carry (the
// lexically first of a tie): a rollout's old one, seen mid-rollout.
func goingRevision(pods []*corev1.Pod, newRev string) string {
	count := map[string]int{}
	for _, p := range rollout.OldPods(pods, newRev) {
		count[rollout.PodRevision(p)]++
	}
	var going string
	for rev, n := range count {
		if n > count[going] || (n == count[going] && rev < going) {
			going = rev
		}
	}
	return going
}

// watchMet says whether a watch that began with the workload at rest
// (before) meets a change in now: a new pod template, or a new spec
// (of a Rollout whose template is another object's, one that wants other
// replicas: a scale). A pod gone unavailable alone (a crash, an eviction)
// changes neither: the workload's status is then not done, but nothing
// rolls, and following it as a rollout waited out --timeout (exit 3).
func watchMet(before, now rollout.Workload) bool {
	if now.Generation() != before.Generation() {
		return true
	}
	if now.SpecGeneration() == before.SpecGeneration() {
		return false
	}
	from, _, _, _ := before.Counts()
	to, _, _, _ := now.Counts()
	return from != to
}

// changeOf is what a trigger changes when its kind alone says so; ""
// for a patch, a deploy command and a watch, whose change is read off
// the workload once it is seen.
func changeOf(t rollout.Trigger) report.ChangeKind {
	switch t.(type) {
	case rollout.Drain:
		return report.ChangeDrain
	case rollout.Scale:
		return report.ChangeScale
	case rollout.Exec, rollout.Patch, rollout.Watch:
		return "" // they may write anything
	}
	return report.ChangeRevision
}

// met records what a patch, a deploy command or a watch changed, read
// off the workload before and after: the replicas alone are a scale
// (rollout.ScaledOnly), anything else is said as a rollout.
func (o *outcome) met(before, after rollout.Workload) {
	if sc, ok := rollout.ScaledOnly(before, after); ok {
		o.metScale, o.change = sc, report.ChangeScale
		return
	}
	o.change = report.ChangeRevision
}

// failure says why the rollout failed, for the verdict ("" if it did not).
func (o outcome) failure() string {
	switch o.status {
	case report.StatusFailed, report.StatusTimedOut:
		return o.message
	case report.StatusNotStarted:
		if o.declined {
			return ""
		}
		return o.message // watching: nothing started in time ("" when interrupted first)
	}
	return ""
}

// trigger is the report's trigger: the configured one's description, and
// for a watch, what it met when that was not a rollout.
func (o outcome) trigger(cfg RolloutConfig) string {
	if _, isWatch := cfg.Trigger.(rollout.Watch); isWatch && o.metScale.Replicas > 0 {
		return "watch (" + scaleMet(o.metScale) + ")"
	}
	return cfg.Trigger.Describe()
}

// scaleMet says the scale a watch met: "a scale started elsewhere: from 3
// replicas to 1".
func scaleMet(s rollout.Scale) string { return "a scale started elsewhere: " + s.Change() }

func (o outcome) section(cfg RolloutConfig, t *rollout.Target, oldRev string) *report.Rollout {
	ref := t.Workload.Ref()
	change := o.change
	if change == report.ChangeRevision && changeOf(cfg.Trigger) == "" && o.newRevision != "" && o.newRevision == oldRev {
		// Learnt off the workload as a rollout (not a scale), it ended on
		// the revision it began at: the write changed no pod template (a
		// Deployment's minReadySeconds, say), and no pod was replaced.
		change = ""
	}
	ro := &report.Rollout{Namespace: cfg.Namespace, Kind: string(ref.Kind), Name: ref.Name, Service: t.Service.Name,
		Trigger: o.trigger(cfg), Change: change, Status: o.status, Message: o.message, OldRevision: oldRev, NewRevision: o.newRevision,
		TriggeredAt: o.triggeredAt, CompleteAt: o.completeAt, OldPodsGoneAt: o.oldPodsGoneAt,
		TriggerSeenAfterMS: math.Round(float64(o.triggerSeenAfter)/float64(time.Microsecond)) / 1000,
		TemplateFrom:       t.Workload.TemplateFrom()}
	if ref.Kind == rollout.KindDeployment {
		ro.Deployment = ref.Name
	}
	return ro
}

// follower drives the rollout's phases.
type follower struct {
	cfg      *RolloutConfig
	w        *rollout.Watcher
	tl       *rollout.Timeline
	setPhase func(Phase)
	// setOldRevision sets the revision the run started from, where the
	// follow judges it (a watch's, once the baseline is over).
	setOldRevision func(string)
	// baselineCheck, when set, must pass after the baseline for the
	// trigger to fire; it is made until baselineSettle after the
	// baseline (awaitBaseline).
	baselineCheck  func() error
	baselineSettle time.Duration
	// sending must return nil, the load sending, for the trigger to fire.
	sending func() error
	// fault is a panic recovered while following (follow then returns the
	// outcome as far as it got).
	fault string
}

func now() *time.Time {
	t := time.Now().UTC()
	return &t
}

// follow probes the baseline, fires the trigger and waits for the rollout
// to finish: complete as kubectl judges it, then every old pod object
// gone, then the settle window. bounded carries the run's deadline (cause
// errTimedOut); ctx, the user's interruption.
func (f *follower) follow(ctx, bounded context.Context) (out outcome) {
	cfg := f.cfg
	out = outcome{status: report.StatusNotStarted}
	defer func() {
		if v := recover(); v != nil { // out is what was known when it panicked
			f.fault = fmt.Sprintf("panic in following the rollout: %v\n%s", v, debug.Stack())
			cfg.logf("internal error while following the rollout: %v", v)
		}
	}()
	cfg.logf("baseline: probing for %s before the rollout", cfg.Baseline)
	if !sleep(bounded, cfg.Baseline) {
		return f.ended(ctx, bounded, out, "")
	}
	if f.baselineCheck != nil {
		ended, err := f.awaitBaseline(bounded)
		if ended {
			return f.ended(ctx, bounded, out, "")
		}
		if err != nil {
			out.baselineErr = err
			cfg.logf("%v: nothing triggered", err)
			return out
		}
	}
	if f.sending != nil {
		if err := f.sending(); err != nil {
			if bounded.Err() != nil {
				return f.ended(ctx, bounded, out, "")
			}
			// The load's own error or panic, if any, is reported with the
			// outcome and takes precedence; this says why nothing changed.
			out.message, out.declined = err.Error()+": nothing was triggered", true
			cfg.logf("%s", out.message)
			return out
		}
	}
	startWL := f.w.Workload()
	// startGen is the pod template's generation, which a rollout moves;
	// startSpec the object's own, which a scale moves too. Only a Rollout
	// whose template is another object's tells them apart.
	startGen, startSpec := startWL.Generation(), startWL.SpecGeneration()
	out.triggeredAt = now()
	out.change = changeOf(cfg.Trigger)
	sent := time.Now()
	f.tl.Add(report.Event{Kind: report.RolloutTriggered, Detail: cfg.Trigger.Describe()})
	trigger := cfg.Trigger
	drain, isDrain := trigger.(rollout.Drain)
	if isDrain {
		if drain.Uncordon {
			// Asked for: the node back at the end, whatever happened.
			defer func() {
				if err := rollout.Cordon(context.WithoutCancel(ctx), cfg.Kube, drain.Node, false); err != nil {
					cfg.logf("uncordon: %v", err)
				} else {
					cfg.logf("node %s uncordoned", drain.Node)
				}
			}()
		}
		drain.Record = func(e report.Event) {
			f.tl.Add(e)
			cfg.logf("drain: %s", e.Detail)
		}
		trigger = drain
		cfg.logf("cordoning node %s and evicting its pods", drain.Node)
	}
	if err := trigger.Fire(bounded, cfg.Kube, cfg.ref()); err != nil {
		if bounded.Err() != nil {
			return f.ended(ctx, bounded, out, "")
		}
		out.status, out.message = report.StatusFailed, "trigger failed: "+err.Error()
		f.tl.Add(report.Event{Kind: report.RolloutFailed, Detail: err.Error()})
		cfg.logf("trigger failed: %v", err)
		return out
	}
	if isDrain {
		return f.followDrain(ctx, bounded, out, drain)
	}
	if scale, isScale := trigger.(rollout.Scale); isScale {
		return f.followScale(ctx, bounded, out, scale, startSpec, sent)
	}
	_, isExec := cfg.Trigger.(rollout.Exec)
	_, isPatch := cfg.Trigger.(rollout.Patch)
	if isExec || isPatch {
		// The command has exited (the patch is answered), so its writes
		// are committed: a fresh read, not the watch's cache, says what
		// changed. A deploy step is often idempotent (helm upgrade with
		// nothing new): without this the run waited out --timeout and
		// failed (exit 3) although nothing was ever going to roll.
		cur, err := rollout.GetWorkload(bounded, cfg.Kube, cfg.ref())
		if isExec && err == nil && cur.Generation() == startGen && cur.SpecGeneration() == startSpec {
			holder := string(cfg.ref().Kind)
			if from := cur.TemplateFrom(); from != "" {
				holder = from + ", the rollout's template"
			}
			out.status, out.message = report.StatusNoChange, fmt.Sprintf("the deploy command changed nothing: no rollout (the %s's generation is unchanged)", holder)
			f.tl.Add(report.Event{Kind: report.NoRollout, Detail: out.message})
			cfg.logf("%s; settling for %s", out.message, cfg.Settle)
			f.setPhase(PhaseSettling)
			sleep(ctx, cfg.Settle)
			return out
		}
		if err == nil && (cur.Generation() != startGen || cur.TemplateFrom() != "") {
			out.met(startWL, cur)
		}
	}
	out.status = report.StatusInProgress
	f.setPhase(PhaseRolling)
	if out.metScale.Replicas > 0 {
		f.setPhase(PhaseScaling)
	}
	if len(cfg.Trigger.Verbs()) > 0 { // the trigger wrote the workload itself
		defer func() {
			seen, ok := f.w.GenerationSeenAfter(startGen)
			if sc := out.metScale; sc.Replicas > 0 {
				seen, ok = f.w.ReplicasSeenAfter(startSpec, sc.Replicas)
			}
			if ok {
				out.triggerSeenAfter = max(seen.Sub(sent), time.Microsecond)
			}
		}()
	}
	cfg.logf("triggered: %s", cfg.Trigger.Describe())
	if sc := out.metScale; sc.Replicas > 0 {
		cfg.logf("it changed the replicas alone: a scale %s", sc.Change())
	}

	_, isWatch := cfg.Trigger.(rollout.Watch)
	// midRollout: a watch that began while the workload was rolling (what
	// run suggests when it refuses to trigger then) follows that rollout,
	// whose generation is the one it began at.
	// One read of the revision and the pods decides both whether the
	// watch follows a rollout in progress and the old revision the report
	// names: the revision going if it does, else the one at rest (a
	// rollout in progress at StartRollout may have ended in the baseline).
	rev, pods := f.w.NewRevision(), f.w.Pods()
	midRollout := isWatch && rolling(startWL, rev, pods)
	if isWatch {
		if midRollout {
			f.setOldRevision(goingRevision(pods, rev))
		} else if rev != "" {
			f.setOldRevision(rev)
		}
		waitCtx, cancel := context.WithTimeout(bounded, cfg.Wait)
		err := f.until(waitCtx, func() bool { return midRollout || watchMet(startWL, f.w.Workload()) })
		cancel()
		if err != nil {
			if bounded.Err() != nil {
				out.status = report.StatusNotStarted
				return f.ended(ctx, bounded, out, "")
			}
			out.status, out.message = report.StatusNotStarted, fmt.Sprintf("no rollout started within the %s wait", cfg.Wait)
			return out
		}
		if midRollout {
			// What it changed is unknown: the watch did not see it begin.
			cfg.logf("following the change already in progress when the watch began (%s): its start was not probed", startWL.Progress().Message)
		} else {
			// A watch meets scales too (an autoscaler's, kubectl scale):
			// said as what they are, the pods they remove being the run's
			// old pods.
			seen := f.w.Workload()
			if seen.TemplateFrom() != "" {
				// The watch's copy of such a Rollout shows its template's
				// generation only as Argo has recorded it so far: a fresh
				// read of the object that holds the template does not take
				// a template changed there with the replicas for a scale.
				if cur, err := rollout.GetWorkload(bounded, cfg.Kube, cfg.ref()); err == nil {
					seen = cur
				}
			}
			out.met(startWL, seen)
			if sc := out.metScale; sc.Replicas > 0 {
				f.setPhase(PhaseScaling)
				cfg.logf("%s", scaleMet(sc))
			} else {
				cfg.logf("a rollout started")
			}
		}
	}

	// moved: the watch shows the change met. A scale moves the object's
	// own spec, not its template (of a Rollout whose template is another
	// object's, not that object's generation).
	moved := func(wl rollout.Workload) bool {
		if midRollout {
			return true // it began before the watch
		}
		if out.metScale.Replicas > 0 {
			return wl.SpecGeneration() > startSpec
		}
		return wl.Generation() > startGen
	}
	var lastMsg, failed string
	var pause pauseState
	err := f.until(bounded, func() bool {
		wl := f.w.Workload()
		pr := wl.Progress()
		if pr.Failed != "" {
			failed = pr.Failed
			return true
		}
		if pr.Paused != "" && wl.Rollout != nil && (moved(wl) || isWatch) {
			f.promote(bounded, wl.Rollout, pr.Paused, &pause)
		}
		if out.completeAt == nil && pr.Done && moved(wl) {
			out.completeAt = now()
			f.tl.Add(report.Event{Kind: report.RolloutComplete, Detail: pr.Message})
			switch sc := out.metScale; {
			case sc.Replicas > sc.From:
				cfg.logf("the scale is done (kubectl rollout status would return now)")
			case sc.Replicas > 0:
				cfg.logf("the scale is done (kubectl rollout status would return now); waiting for the pods it removed to go")
			default:
				cfg.logf("rollout complete (kubectl rollout status would return now); waiting for old pods to go")
			}
		}
		// Until the watch shows the triggered generation, the status is
		// the object's before the trigger ("successfully rolled out").
		if pr.Message != lastMsg && pr.Message != "" && (moved(wl) || isWatch) {
			lastMsg = pr.Message
			cfg.logf("rollout: %s", pr.Message)
		}
		if out.completeAt == nil {
			return false
		}
		// A pod of the new revision may be going too (a --patch or
		// deploy command that also scaled in): the run lasts until it is,
		// and until the watch shows its deletion at all (the status may
		// count it out first: another watch).
		newRev, pods := f.w.NewRevision(), f.w.Pods()
		desired, _, _, _ := wl.Counts()
		return newRev != "" && len(rollout.OldPods(pods, newRev)) == 0 && len(rollout.Terminating(pods)) == 0 && len(rollout.Active(pods)) <= int(desired)
	})
	switch {
	case err != nil:
		return f.ended(ctx, bounded, out, lastMsg)
	case failed != "":
		if r := f.w.Workload().Rollout; r != nil && r.Status.Abort {
			return f.followAbort(ctx, bounded, out, r, failed)
		}
		return f.rolloutFailed(out, failed)
	}
	out.newRevision = f.w.NewRevision()
	out.oldPodsGoneAt = now()
	if sc := out.metScale; sc.Replicas > 0 {
		f.tl.Add(report.Event{Kind: report.AllOldPodsGone, Revision: out.newRevision, Detail: sc.Gone()})
		cfg.logf("%s; settling for %s", sc.Gone(), cfg.Settle)
	} else {
		f.tl.Add(report.Event{Kind: report.AllOldPodsGone, Revision: out.newRevision})
		cfg.logf("all old pods gone; settling for %s", cfg.Settle)
	}
	out.status = report.StatusComplete
	f.setPhase(PhaseSettling)
	sleep(ctx, cfg.Settle)
	return out
}

// followAbort follows an aborted Argo Rollout back. The abort moved the
// traffic to the stable revision at once; the aborted revision's pods go
// later (rollout.ArgoAbortDelay: abortScaleDownDelaySeconds, 30 s unset),
// and their deletion can drop requests as a rollout's does, while the
// proxies still route to them. So the run keeps probing until every pod
// of that revision is gone (within --timeout), then settles: what the
// way back dropped is measured and explained. The outcome stays a failed
// rollout (exit 3). A revision whose pods Argo keeps
// (abortScaleDownDelaySeconds: 0) is not waited for: that is said.
func (f *follower) followAbort(ctx, bounded context.Context, out outcome, r *rollout.ArgoRollout, why string) outcome {
	cfg := f.cfg
	out = f.rolloutFailed(out, why)
	aborted := r.Status.CurrentPodHash
	if aborted == "" || aborted == r.Status.StableRS {
		return out
	}
	out.newRevision = aborted // where it went before it came back
	delay, keep, setting := rollout.ArgoAbortDelay(r)
	if keep {
		cfg.logf("the aborted revision %s keeps its pods (%s): their end is not part of this run", aborted, setting)
		return out
	}
	f.setPhase(PhaseRollingBack)
	cfg.logf("following the abort back: the traffic moves to the stable revision, the aborted revision %s's pods go about %s later (%s)", aborted, delay, setting)
	left := func() int {
		n := 0
		for _, p := range f.w.Pods() {
			if rollout.PodRevision(p) == aborted {
				n++
			}
		}
		return n
	}
	if err := f.until(bounded, func() bool { return left() == 0 }); err != nil {
		if ctx.Err() == nil {
			out.message += fmt.Sprintf("; %d pod(s) of the aborted revision %s still up at the %s timeout", left(), aborted, cfg.Timeout)
			cfg.logf("%s", out.message)
		}
		return out
	}
	detail := fmt.Sprintf("every pod of the aborted revision %s is gone (%s)", aborted, setting)
	f.tl.Add(report.Event{Kind: report.AbortedPodsGone, Revision: aborted, Detail: detail})
	f.setPhase(PhaseSettling)
	cfg.logf("%s; settling for %s", detail, cfg.Settle)
	sleep(ctx, cfg.Settle)
	return out
}

// pauseState is the pause an Argo Rollout is in, as the follower saw it.
type pauseState struct {
	key   string    // its generation, step and reason
	since time.Time // when the follower first saw it
	done  bool      // said, or promoted
}

// promote handles an Argo Rollout's pause. One that waits for a person is
// observed for --promote-after (the traffic of the step before it is
// measured) and then, with --promote, promoted as kubectl argo rollouts
// promote does; without --promote the run says once who must. A canary's
// timed pause is left to end by itself: promoting it would cut the
// declared observation short. A failed promote is tried again at the next
// look.
func (f *follower) promote(ctx context.Context, r *rollout.ArgoRollout, reason string, st *pauseState) {
	step := int32(-1)
	if r.Status.CurrentStepIndex != nil {
		step = *r.Status.CurrentStepIndex
	}
	if key := fmt.Sprintf("%d/%d/%s", r.Generation, step, reason); key != st.key {
		*st = pauseState{key: key, since: time.Now()}
	}
	if st.done {
		return
	}
	cfg := f.cfg
	at := ""
	if s := rollout.ArgoStep(r, step); s != "" {
		at = fmt.Sprintf(" at step %d (%s)", step+1, s)
	}
	switch {
	case rollout.ArgoTimedPause(r, step):
		cfg.logf("rollout paused%s: %s; it ends by itself", at, reason)
		st.done = true
		return
	case !cfg.Promote:
		cfg.logf("rollout paused%s: %s; waiting for a promote (kubectl argo rollouts promote %s -n %s), or run with --promote", at, reason, r.Name, r.Namespace)
		st.done = true
		return
	case time.Since(st.since) < cfg.PromoteAfter:
		return
	}
	if err := rollout.PromoteRollout(ctx, cfg.Kube, r); err != nil {
		cfg.logf("rollout paused%s: %s; promote failed (trying again): %v", at, reason, err)
		return
	}
	st.done = true
	f.tl.Add(report.Event{Kind: report.RolloutPromoted, Revision: r.Status.CurrentPodHash,
		Detail: fmt.Sprintf("promoted through the pause%s after observing it %.1fs: %s", at, time.Since(st.since).Seconds(), reason)})
	cfg.logf("rollout paused%s: %s; promoted after %s", at, reason, cfg.PromoteAfter)
}

// followDrain waits, after a drain's evictions were accepted, until no pod
// of the workload is left on the node and the workload is back to done
// (rollout.Drain.Done), then settles. A drain changes no revision: the
// pods it evicted are the run's old pods.
func (f *follower) followDrain(ctx, bounded context.Context, out outcome, d rollout.Drain) outcome {
	cfg := f.cfg
	out.status = report.StatusInProgress
	f.setPhase(PhaseDraining)
	cfg.logf("triggered: %s", d.Describe())
	var lastMsg, failed string
	err := f.until(bounded, func() bool {
		wl := f.w.Workload()
		if pr := wl.Progress(); pr.Failed != "" {
			failed = pr.Failed
			return true
		}
		done, msg := d.Done(wl, f.w.Pods())
		if msg != lastMsg {
			lastMsg = msg
			cfg.logf("drain: %s", msg)
		}
		return done
	})
	switch {
	case err != nil:
		return f.ended(ctx, bounded, out, lastMsg)
	case failed != "":
		return f.rolloutFailed(out, failed)
	}
	return f.completeOnOneRevision(ctx, out, lastMsg, "every pod of the workload evicted from node "+d.Node+" is gone")
}

// completeOnOneRevision ends a change that kept the revision (a drain, a
// scale): complete and its old pods gone at once (the follow waited for
// them), said with why, then the settle.
func (f *follower) completeOnOneRevision(ctx context.Context, out outcome, complete, gone string) outcome {
	out.completeAt = now()
	out.oldPodsGoneAt = out.completeAt
	out.newRevision = f.w.NewRevision()
	f.tl.Add(report.Event{Kind: report.RolloutComplete, Detail: complete})
	f.tl.Add(report.Event{Kind: report.AllOldPodsGone, Revision: out.newRevision, Detail: gone})
	out.status = report.StatusComplete
	f.setPhase(PhaseSettling)
	f.cfg.logf("settling for %s", f.cfg.Settle)
	sleep(ctx, f.cfg.Settle)
	return out
}

// followScale waits, after a scale was written, until the workload runs
// exactly the replicas asked for, each ready, and every pod the scale
// removed is gone (rollout.Scale.Progress), then settles. A scale changes
// no revision: the pods it removed are the run's old pods. If something
// else scales the workload back (an autoscaler the preflight could not
// see, a GitOps sync), the scale's end cannot be measured: the rollout
// failed (exit 3), saying so.
func (f *follower) followScale(ctx, bounded context.Context, out outcome, s rollout.Scale, startSpec int64, sent time.Time) outcome {
	cfg := f.cfg
	out.status = report.StatusInProgress
	f.setPhase(PhaseScaling)
	cfg.logf("triggered: %s", s.Describe())
	var lastMsg, failed string
	seen := false
	err := f.until(bounded, func() bool {
		wl := f.w.Workload()
		if pr := wl.Progress(); pr.Failed != "" {
			failed = pr.Failed
			return true
		}
		// Seen by the watch's own record, not by the workload as read
		// now: another hand's write may already have replaced it.
		if at, ok := f.w.ReplicasSeenAfter(startSpec, s.Replicas); !seen && ok {
			seen = true
			out.triggerSeenAfter = max(at.Sub(sent), time.Microsecond)
		}
		pr := s.Progress(wl, f.w.Pods(), seen)
		if pr.Undone != "" {
			failed = pr.Undone
			return true
		}
		if pr.Message != lastMsg {
			lastMsg = pr.Message
			cfg.logf("scale: %s", pr.Message)
		}
		return pr.Done
	})
	switch {
	case err != nil:
		return f.ended(ctx, bounded, out, lastMsg)
	case failed != "":
		return f.rolloutFailed(out, failed)
	}
	return f.completeOnOneRevision(ctx, out, lastMsg, s.Gone())
}

// rolloutFailed is the outcome of a rollout that failed as kubectl judges
// it (exit 3), recorded and said.
func (f *follower) rolloutFailed(out outcome, why string) outcome {
	out.status, out.message = report.StatusFailed, why
	f.tl.Add(report.Event{Kind: report.RolloutFailed, Detail: why})
	f.cfg.logf("rollout failed: %s", why)
	return out
}

// ended is the outcome when a wait was cut: by the run's deadline (the
// rollout timed out, exit 3) or by the user (interrupted; the status is
// set once the prober confirms it).
func (f *follower) ended(ctx, bounded context.Context, out outcome, lastMsg string) outcome {
	if ctx.Err() == nil && errors.Is(context.Cause(bounded), errTimedOut) {
		out.status = report.StatusTimedOut
		out.message = fmt.Sprintf("not finished within the %s timeout", f.cfg.Timeout)
		if lastMsg != "" {
			out.message += ": " + lastMsg
		}
		f.tl.Add(report.Event{Kind: report.RolloutFailed, Detail: out.message})
		f.cfg.logf("%s", out.message)
	}
	return out
}

// until re-checks done each time the watcher sees a change, until it
// holds (nil) or ctx ends (its error). kubectl's UntilWithSync is the
// model: no polling, the informer's notifications wake the check. A
// one-second tick re-checks too, as a backstop for conditions that
// depend on time alone.
func (f *follower) until(ctx context.Context, done func() bool) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if done() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.w.Changed():
		case <-tick.C:
		}
	}
}

// sleep waits d, or less if ctx ends first (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// baselinePoll is how often awaitBaseline asks while it waits.
const baselinePoll = 250 * time.Millisecond

// awaitBaseline judges the probers' baseline once its requests have their
// outcomes. A request sent near the baseline's end can take its whole
// timeout to fail (a connect timeout against a node that drops its SYN),
// and until that outcome is merged the baseline looks healthy: a run in
// the lab passed the check while half of one prober's connections timed
// out from the first second, then put them on the rollout. It checks
// every baselinePoll and returns the first failure at once, else the
// verdict after baselineSettle; ended when bounded ended first.
func (f *follower) awaitBaseline(bounded context.Context) (ended bool, err error) {
	if f.baselineSettle > 0 {
		f.cfg.logf("baseline: judged once its requests have their outcomes (up to %s)", f.baselineSettle)
	}
	deadline := time.Now().Add(f.baselineSettle)
	for {
		left := time.Until(deadline)
		if err := f.baselineCheck(); err != nil || left <= 0 {
			return false, err
		}
		if !sleep(bounded, min(baselinePoll, left)) {
			return true, nil
		}
	}
}

// fleetBaselineSettle is how long after the baseline its last requests
// can still be without a merged outcome: the longest request timeout of
// the probers' paths, and a second for a prober's export (every 250 ms)
// to reach this process.
func fleetBaselineSettle(fl *fleet.Fleet, c prober.Config) time.Duration {
	longest := c.Timeout
	for _, p := range fl.Paths() {
		longest = max(longest, p.Config.Timeout)
	}
	return longest + time.Second
}

// baselineHealthy says whether the baseline the probers measured holds
// only successes (the check checkBaseline makes when probing from here).
// over is how long they have probed: what rec holds by then, the
// baseline's requests and those sent while the last ones ended.
func baselineHealthy(rec *prober.Recorder, c prober.Config, members []fleet.Member, over time.Duration) error {
	tot := rec.Totals()
	sent, ok := tot.Sent(), tot.Classes[prober.OK]
	if sent > 0 && ok == sent {
		return nil
	}
	detail := ""
	if fails := rec.Failures(); len(fails) > 0 {
		detail = fmt.Sprintf(": first failure %s", fails[0].Class)
		if fails[0].Err != nil {
			detail += " " + fails[0].Err.Error()
		}
		if i := int(fails[0].Source) - 1; i >= 0 && i < len(members) {
			detail += fmt.Sprintf(" (prober %s on node %s)", members[i].Pod, members[i].Node)
		}
	}
	return fmt.Errorf("the target %s is not healthy before the rollout: %d of %d requests the probers sent in their first %s succeeded (the baseline, and while its last requests ended)%s",
		c.RedactedTarget(), ok, sent, over.Round(100*time.Millisecond), detail)
}

// fleetBaselineHealthy is baselineHealthy for the probers' traffic: each
// path's, when they probe several.
func fleetBaselineHealthy(fl *fleet.Fleet, c prober.Config) error {
	paths, members, over := fl.Paths(), fl.Members(), fl.Elapsed()
	if len(paths) < 2 {
		return baselineHealthy(fl.Recorder(), c, members, over)
	}
	for i, rec := range fl.PathRecorders() {
		if err := baselineHealthy(rec, paths[i].Config, members, over); err != nil {
			return fmt.Errorf("path %s: %w", paths[i].Name, err)
		}
	}
	return nil
}

// checkBaseline sends a short burst at the target before anything changes:
// a target that already fails would make every later finding meaningless.
func checkBaseline(ctx context.Context, cfg RolloutConfig) error {
	if len(cfg.Paths) < 2 {
		return checkPathBaseline(ctx, cfg, cfg.Probe, "")
	}
	for _, p := range cfg.Paths {
		if err := checkPathBaseline(ctx, cfg, p.Config, p.Name); err != nil {
			return err
		}
	}
	return nil
}

// checkPathBaseline is checkBaseline for one path (named, when the run
// probes several).
func checkPathBaseline(ctx context.Context, cfg RolloutConfig, c prober.Config, name string) error {
	c.Rate = min(max(c.Rate, 1), 50)
	c.Duration = time.Second
	c.Workers, c.MaxWorkers = 1, 50
	p, err := prober.New(c, userAgent(cfg.Tool, "preflight"))
	if err != nil {
		return err
	}
	sum, err := p.Run(ctx)
	if err != nil {
		return err
	}
	if sum.Canceled {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
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
		what := "the target " + c.RedactedTarget()
		if name != "" {
			what = "path " + name + " (" + c.RedactedTarget() + ")"
		}
		return fmt.Errorf("%s is not healthy before the rollout: %d of %d baseline requests succeeded%s", what, ok, sent, detail)
	}
	return nil
}

// withStallEvents puts each stall's bounds on the timeline, in time order:
// view_stalled at its start, view_resumed at its end unless it was open.
func withStallEvents(tl []report.Event, stalls []report.ViewStall) []report.Event {
	if len(stalls) == 0 {
		return tl
	}
	for _, s := range stalls {
		tl = append(tl, report.Event{At: s.Start, Kind: report.ViewStalled,
			Detail: fmt.Sprintf("no pods list answered and no watch delivered anything for %.1fs", s.DurationS)})
		if !s.Open {
			tl = append(tl, report.Event{At: s.End, Kind: report.ViewResumed, Detail: fmt.Sprintf("the view of the cluster is live again after %.1fs", s.DurationS)})
		}
	}
	slices.SortStableFunc(tl, func(a, b report.Event) int { return a.At.Compare(b.At) })
	return tl
}

// dialedPorts are the ports this process's connections go to (each
// path's, or --connect-to's): the conntrack watch's filter.
func dialedPorts(cfg RolloutConfig) []uint16 {
	ports := []uint16{cfg.Probe.DialedPort()}
	for _, p := range cfg.Paths {
		ports = append(ports, p.Config.DialedPort())
	}
	return ports
}

// mapConnections puts on each failure with a connection the pod address
// conntrack recorded for it, and says how many it found.
func mapConnections(rep *report.Report, nat *natwatch.Table, dials natwatch.Dials) *report.Conntrack {
	st := nat.Status()
	ct := &report.Conntrack{Watching: st.Watching, Reason: st.Reason, Connections: st.Conns, Lost: st.Lost, LostReason: st.LostReason}
	if !st.Watching && st.Conns == 0 {
		return ct // nothing read: nothing is unmapped either
	}
	if st.Watching {
		lag := ms(st.MaxLag)
		ct.EventLagMaxMS = &lag
	}
	if st.LingeringReason == "" {
		n := len(nat.Lingering())
		ct.StaleEntries = &n
	} else {
		ct.StaleEntriesReason = st.LingeringReason
	}
	attempts := make([]natwatch.Attempt, len(rep.Failures))
	unanswered := natwatch.UnansweredByPort{}
	for i, f := range rep.Failures {
		local, err1 := netip.ParseAddrPort(f.LocalAddr)
		remote, err2 := netip.ParseAddrPort(f.RemoteAddr)
		if err1 != nil || err2 != nil || local.Port() == 0 {
			continue // no connection was attempted (dns, a local error)
		}
		attempts[i] = natwatch.Attempt{Src: local, Remote: remote, Start: f.Start, End: f.End, Fresh: f.Fresh, Next: dials.Next(local.Port(), f.Start),
			Unanswered: f.Fresh && f.Class == prober.ConnectTimeout.String()}
		unanswered.AddUnanswered(attempts[i])
	}
	for i := range rep.Failures {
		f, a := &rep.Failures[i], attempts[i]
		if !a.Src.IsValid() {
			continue
		}
		switch c, ok := nat.Find(a); {
		case ok:
			f.PodAddr = c.Dest.String()
			ct.FailuresMapped++
		case f.Fresh && f.Class == prober.Refused.String() && nat.NoEntry(a):
			f.NoConntrackEntry = true
			ct.FailuresNoEntry++
		default:
			if c, ok := nat.Joined(a, unanswered[a.Src.Port()]); ok {
				f.PodAddr, f.JoinedConntrackEntry = c.Dest.String(), true
				ct.FailuresMapped++
				ct.FailuresJoined++
				continue
			}
			switch c, ok := nat.Prior(a); {
			case f.Fresh && nat.Ambiguous(a):
				ct.FailuresAmbiguous++
			case ok && connectFailure(f.Class):
				f.PriorPodAddr = c.Dest.String()
				ct.FailuresFollowed++
			}
			ct.FailuresUnmapped++
		}
	}
	return ct
}

// mapResponses counts the responses of the logged connections by where
// conntrack saw each go (Conntrack.Responses): the analysis puts them on
// the pods that bore those addresses. clock places the prober's offsets
// on the wall clock, as the failures' times are; the counts' seconds are
// the run's, the series' (the run's start is the prober's).
func mapResponses(ct *report.Conntrack, nat *natwatch.Table, conns []prober.ConnRecord, dials natwatch.Dials, clock report.WallClock) {
	served, unmapped := nat.Serve(carried(conns, clock), dials, clock.SecondOf)
	ct.ResponsesUnmapped += unmapped
	for _, s := range served {
		ct.Responses = append(ct.Responses, report.ConntrackResponses{Addr: s.Dest.String(), T: s.Second, Connections: s.Conns, Responses: s.Responses})
	}
}

// carried is the logged connections as natwatch counts them, their
// offsets placed on the wall clock by clock: the conntrack events' and
// the failures' clock.
func carried(conns []prober.ConnRecord, clock report.WallClock) []natwatch.Carried {
	out := make([]natwatch.Carried, len(conns))
	for i, c := range conns {
		out[i] = natwatch.Carried{Local: c.Addr.Local, Remote: c.Addr.Remote, Dialed: clock.At(c.Dialed), Connected: clock.At(c.Connected), Responses: uint64(c.Responses)}
	}
	return out
}

// newDials notes the dial times of the run's connections by local port:
// the fresh failures' and the logged connections' (their offsets placed
// by clock, as the failures' times are).
func newDials(failures []report.Failure, conns []prober.ConnRecord, clock report.WallClock) natwatch.Dials {
	d := natwatch.Dials{}
	for _, f := range failures {
		if local, err := netip.ParseAddrPort(f.LocalAddr); err == nil && f.Fresh {
			d.Add(local.Port(), f.Start)
		}
	}
	for _, c := range conns {
		d.Add(c.Addr.Local.Port(), clock.At(c.Dialed))
	}
	d.Sort()
	return d
}

// sumResponses adds up the counts of one address and second, in order of
// second, then address.
func sumResponses(each []report.ConntrackResponses) []report.ConntrackResponses {
	type key struct {
		addr string
		t    int64
	}
	sums := map[key]*report.ConntrackResponses{}
	var out []report.ConntrackResponses
	for _, r := range each {
		k := key{r.Addr, r.T}
		if n := sums[k]; n != nil {
			n.Connections += r.Connections
			n.Responses += r.Responses
			continue
		}
		sums[k] = &r
	}
	for _, n := range sums {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].T != out[j].T {
			return out[i].T < out[j].T
		}
		return out[i].Addr < out[j].Addr
	})
	return out
}

// mapProberConnections puts on each failure the pod address its prober's
// conntrack recorded for its connection (the prober's nat lines), and
// says what the probers read and missed: one that read nothing, or sent
// no findings (its stream ended early), leaves its failures unmapped.
func mapProberConnections(rep *report.Report, sources []fleet.SourceState) *report.Conntrack {
	ct := &report.Conntrack{}
	var notRead, lost, staleUnknown []string
	stale := 0 // the stale entries of the probers that listed them
	// The event lag is the longest of the watching probers': unknown if
	// one did not say.
	lag, lagUnknown := 0.0, false
	var responses []report.ConntrackResponses
	byProber := map[string]map[uint64]wire.NatPod{}
	for _, s := range sources {
		n := s.Nat
		switch {
		case n == nil || !n.Last:
			notRead = append(notRead, s.Name+": sent no conntrack findings (its stream ended before them)")
			continue
		case !n.Watching:
			notRead = append(notRead, s.Name+": "+n.Reason)
			continue
		}
		ct.Watching = true
		ct.Connections += n.Conns
		if n.MaxLagMS == nil {
			lagUnknown = true
		} else {
			lag = max(lag, *n.MaxLagMS)
		}
		if n.StaleEntries != nil {
			stale += *n.StaleEntries
			ct.StalePortsHeld += n.StaleHeld
		} else {
			staleUnknown = append(staleUnknown, s.Name+": "+cmp.Or(n.StaleReason, "did not say"))
		}
		if n.Lost {
			ct.Lost = true
			lost = append(lost, s.Name+": "+n.LostReason)
		}
		pods := map[uint64]wire.NatPod{}
		for _, p := range n.Pods {
			pods[p.Seq] = p
		}
		byProber[s.Name] = pods
		for _, r := range n.Responses {
			responses = append(responses, report.ConntrackResponses{Addr: r.Addr, T: r.Second, Connections: r.Conns, Responses: r.Responses})
		}
		ct.ResponsesUnmapped += n.ResponsesUnmapped
	}
	ct.Responses = sumResponses(responses)
	if ct.Watching && !lagUnknown {
		ct.EventLagMaxMS = &lag
	}
	ct.Reason, ct.LostReason = strings.Join(notRead, "; "), strings.Join(lost, "; ")
	switch {
	case len(staleUnknown) > 0:
		// A sum over some probers is no count for the run.
		ct.StaleEntriesReason = strings.Join(staleUnknown, "; ")
	case ct.Watching:
		ct.StaleEntries = &stale
	}
	for i := range rep.Failures {
		f := &rep.Failures[i]
		if local, err := netip.ParseAddrPort(f.LocalAddr); err != nil || local.Port() == 0 {
			continue // no connection was attempted
		}
		switch m, ok := byProber[f.Prober][f.Seq]; {
		case ok && m.NoEntry:
			f.NoConntrackEntry = true
			ct.FailuresNoEntry++
		case ok && m.Addr == "":
			f.PriorPodAddr = m.Prior
			ct.FailuresUnmapped++
			switch {
			case m.Ambiguous:
				ct.FailuresAmbiguous++
			case m.Prior != "":
				ct.FailuresFollowed++
			}
		case ok:
			f.PodAddr, f.JoinedConntrackEntry = m.Addr, m.Joined
			ct.FailuresMapped++
			if m.Joined {
				ct.FailuresJoined++
			}
		default:
			ct.FailuresUnmapped++
		}
	}
	return ct
}

// lingeringPorts are the source ports of the unanswered entries the watch
// found when it began (a previous run's), each until its entry ends.
func lingeringPorts(nat *natwatch.Table) []prober.PortUntil {
	var out []prober.PortUntil
	for _, l := range nat.Lingering() {
		out = append(out, prober.PortUntil{Addr: l.Src, Until: l.Until})
	}
	return out
}

// connectFailure: the class ends a connection before it was made, the
// failures a SYN that followed an old entry gives.
func connectFailure(class string) bool {
	return class == prober.ConnectTimeout.String() || class == prober.Refused.String()
}

// dialedURL is the target as connections reach it: with --connect-to, its
// host and port are the address connected to (what says whether traffic
// entered at a ClusterIP, a node port or a load balancer).
func dialedURL(cfg prober.Config) *url.URL {
	if cfg.ConnectTo == "" || cfg.Target == nil {
		return cfg.Target
	}
	u := *cfg.Target
	u.Host = cfg.ConnectTo
	return &u
}
