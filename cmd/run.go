package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/edgelog"
	"github.com/rollprobe/rollprobe/internal/field"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/rollout"
	"github.com/rollprobe/rollprobe/runner"
	"github.com/rollprobe/rollprobe/tui"
)

type runOptions struct {
	*globalOptions
	flags   proberFlags
	kube    kubeFlags
	targets []string

	restart  bool
	image    string
	patch    string
	watch    bool
	exec     bool
	execArgv []string
	drain    string
	uncordon bool
	scale    int64
	promote  bool
	// promoteAfter: how long a pause is observed before --promote.
	promoteAfter time.Duration

	wait, baseline, settle, timeout time.Duration
	expectedDrain                   time.Duration
	edgeAccessLog                   string
	edgeLogFormat                   string
	edgeLogWait                     time.Duration
	probers                         proberPodFlags
	outputs                         outputFlags
	progress                        time.Duration
	ui                              uiFlags
	uiMode                          uiMode
	sink                            *tui.LogSink // tui: where the run's lines go

	cfg runner.RolloutConfig
}

func newRunCommand(g *globalOptions) *cobra.Command {
	o := &runOptions{globalOptions: g, flags: defaultProberFlags(),
		wait: 5 * time.Minute, baseline: 5 * time.Second, settle: 5 * time.Second, timeout: 15 * time.Minute, progress: 2 * time.Second,
		probers: defaultProberPodFlags()}
	// Half fresh, half kept-alive: a rollout drops both kinds of traffic, in
	// different ways (routing lag vs. abrupt close).
	o.flags.conn = "mixed=0.5"
	o.flags.targetName = "--target"
	cmd := &cobra.Command{
		Use:   "run --deployment|--statefulset|--daemonset|--rollout [NS/]NAME --target URL [flags] [--exec -- CMD ARGS...]",
		Short: "Trigger (or watch) a rollout under load and fail if any request dropped",
		Long: `run checks the target (changing nothing), probes a baseline, triggers the rollout,
watches pods and EndpointSlices until the rollout is complete and every old pod is gone,
settles, and reports every failed request with the lifecycle events around it.

Triggers (one): --restart (default, as kubectl rollout restart), --image CONTAINER=IMAGE,
--patch JSON|@FILE (strategic merge), --exec -- CMD ARGS... (your own deploy step), --watch
(a rollout started elsewhere), --drain NODE (cordon the node and evict its pods, honouring
PodDisruptionBudgets, as kubectl drain --ignore-daemonsets --delete-emptydir-data; the
workload named is the one probed and followed until its pods left the node and it is whole again),
--scale N (set its replicas, as kubectl scale and autoscalers do: a scale-in takes pods away as a
rollout does; followed until it runs N ready pods and every pod it removed is gone).

An Argo Rollout (--rollout) is followed through its canary steps or blue/green switch until the
controller reports it Healthy and every old pod is gone; --promote promotes it through each pause
as kubectl argo rollouts promote does (without it, someone else must). --patch is applied to a
Rollout as a JSON merge patch (custom resources take no strategic merge). A Rollout that takes its
template from another object (spec.workloadRef) rolls when that object's template changes: the
triggers write that object (--patch is then written for it), never the Rollout.

Exit codes: 0 no failure above the budget, 1 failures above the budget, 2 usage or preflight
error (nothing was changed), 3 the rollout failed or timed out, 4 inconclusive, 5 an output
could not be written at the end, 70 rollprobe itself failed (the report says how), 130 interrupted (the report is still written; the cluster is
left as it is).

Docs: ` + report.DocsURL + `run.md`,
		Example: `  rollprobe run --deployment web --target http://web.prod.svc/healthz -n prod --report report.json
  rollprobe run --deployment prod/web --target http://10.96.0.42/ --image app=web:v2
  rollprobe run --deployment web --target http://web/ --exec -- helm upgrade web ./chart
  rollprobe run --statefulset prod/db-proxy --target http://db-proxy.prod.svc/
  rollprobe run --daemonset kube-system/node-agent --target http://10.0.0.5:30080/ --image agent=agent:v2
  rollprobe run --deployment prod/web --target http://web.prod.svc/ --drain node-7 --uncordon
  rollprobe run --deployment prod/web --target http://web.prod.svc/ --scale 2
  rollprobe run --rollout prod/web --target http://web.prod.svc/ --image app=web:v2 --promote
  rollprobe run --deployment prod/web --target http://web.prod.svc/ --probers 2 --probers-conntrack --prober-namespace probes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				o.execArgv = args[dash:]
				args = args[:dash]
			}
			if len(args) > 0 || (o.execArgv != nil && !o.exec) {
				return exitcode.UsageError(fmt.Errorf("unexpected arguments %q (a deploy command goes after --exec --)", append(args, o.execArgv...)))
			}
			if err := o.validate(); err != nil {
				return exitcode.UsageError(err)
			}
			if err := o.complete(); err != nil {
				return exitcode.UsageError(err)
			}
			if o.validateOnly {
				return o.validated()
			}
			cmd.SilenceUsage = true
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	o.flags.bind(f)
	_ = f.MarkHidden("duration") // the rollout decides how long a run probes
	o.kube.bind(f)
	f.StringArrayVar(&o.targets, "target", nil, "URL to probe (the Service's address as clients reach it); repeated as NAME=URL, probes several paths to the app side by side, each at --rate (the Service and the ingress, say)")
	f.BoolVar(&o.restart, "restart", false, "trigger: restart the workload, as kubectl rollout restart (the default)")
	f.StringVar(&o.image, "image", "", "trigger: set CONTAINER=IMAGE (an init container too: a native sidecar, as kubectl set image)")
	f.StringVar(&o.patch, "patch", "", "trigger: strategic merge patch (a JSON merge patch on an Argo Rollout), JSON or @FILE")
	f.BoolVar(&o.exec, "exec", false, "trigger: run the deploy command given after -- (its output is passed through)")
	f.BoolVar(&o.watch, "watch", false, "trigger nothing: wait up to --wait for a rollout or a scale started elsewhere (an autoscaler, kubectl scale), then follow it; one already running is followed from where it is")
	f.StringVar(&o.drain, "drain", "", "trigger: drain NODE (cordon it, evict its pods through the Eviction API honouring PodDisruptionBudgets; DaemonSet pods stay)")
	f.Int64Var(&o.scale, "scale", 0, "trigger: scale the workload to `N` replicas (its scale subresource, as kubectl scale and autoscalers do); refused under a HorizontalPodAutoscaler, which would undo it")
	f.BoolVar(&o.uncordon, "uncordon", false, "with --drain: make the node schedulable again at the end (kubectl drain leaves it cordoned)")
	f.DurationVar(&o.promoteAfter, "promote-after", 5*time.Second, "with --promote: how long each pause is observed (the traffic at its weight measured) before it is promoted")
	f.BoolVar(&o.promote, "promote", false, "with --rollout: promote the Argo Rollout through each pause that waits for a person, as kubectl argo rollouts promote (a timed pause ends by itself; without --promote, someone else must)")
	f.DurationVar(&o.wait, "wait", o.wait, "with --watch: how long to wait for the rollout to start")
	f.DurationVar(&o.baseline, "baseline", o.baseline, "probe this long before triggering (with --probers, then up to the request timeout and 1s more for the baseline's outcomes)")
	f.DurationVar(&o.settle, "settle", o.settle, "probe this long after the last old pod is gone")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "bound on the whole run; a rollout not finished by then failed (exit 3)")
	f.DurationVar(&o.expectedDrain, "expected-drain", doctor.DefaultExpectedDrain, "the app's drain time after SIGTERM, for the doctor's grace period check")
	f.StringVar(&o.edgeAccessLog, "edge-access-log", "", "an ingress's access log FILE, read after the rollout for where it forwarded each failed request (Traefik's JSON access log, or nginx's in the log_format docs/run.md gives, with the --request-id-header kept): names their pods for certain")
	f.StringVar(&o.edgeLogFormat, "edge-log-format", edgelog.FormatAuto, "with --edge-access-log: its format, "+strings.Join(edgelog.Formats, ", ")+" (auto: by the first line of the run's requests)")
	f.DurationVar(&o.edgeLogWait, "edge-log-wait", runner.DefaultEdgeLogWait, "with --edge-access-log: how long to wait, once the rollout is over (not counted in --timeout), for the log to hold a line for every failed request that got past the edge (an edge logs a request when it ends: one it holds on a gone pod can take minutes)")
	o.probers.bind(f, "the workload's namespace")
	o.probers.bindConntrack(f)
	o.outputs.bind(f)
	g.bindValidate(f)
	f.DurationVar(&o.progress, "progress", o.progress, "--ui plain: interval of progress lines on stderr; 0 disables")
	o.ui.bind(f)
	return cmd
}

// validate checks the flags that need nothing else: required ones, one
// trigger, the durations, the outputs and the view.
func (o *runOptions) validate() error {
	var errs []error
	if len(o.targets) == 0 {
		errs = append(errs, errors.New("--target URL is required"))
	}
	if _, _, ok := o.kube.workload(); !ok {
		errs = append(errs, errNoWorkload)
	}
	triggers := 0
	scale := o.kube.fs.Changed("scale")
	for _, set := range []bool{o.restart, o.image != "", o.patch != "", o.watch, o.exec, o.drain != "", scale} {
		if set {
			triggers++
		}
	}
	if triggers > 1 {
		errs = append(errs, errors.New("choose one trigger: --restart, --image, --patch, --exec, --watch, --drain or --scale"))
	}
	if kind, _, _ := o.kube.workload(); scale && kind == rollout.KindDaemonSet {
		errs = append(errs, errors.New("--scale applies to a Deployment, StatefulSet or Argo Rollout: "+rollout.ErrNoReplicas.Error()))
	}
	if kind, _, _ := o.kube.workload(); o.drain != "" && kind == rollout.KindDaemonSet {
		// The follow would wait for its pods to leave the node until the
		// run timed out.
		errs = append(errs, errors.New("--drain applies to a Deployment, StatefulSet or Argo Rollout: a drain leaves a DaemonSet's pods on the node (as kubectl drain --ignore-daemonsets), so it never takes them; to see what a drain does to a Service, probe a workload it evicts"))
	}
	if o.uncordon && o.drain == "" {
		errs = append(errs, errors.New("--uncordon applies only with --drain (it makes the drained node schedulable again at the end)"))
	}
	if kind, _, _ := o.kube.workload(); o.promote && kind != rollout.KindRollout {
		errs = append(errs, errors.New("--promote applies only with --rollout (it promotes an Argo Rollout through its pauses)"))
	}
	if o.kube.fs.Changed("promote-after") && !o.promote {
		errs = append(errs, errors.New("--promote-after applies only with --promote"))
	}
	if o.promoteAfter < 0 {
		errs = append(errs, fmt.Errorf("--promote-after %s: must not be negative", o.promoteAfter))
	}
	if err := o.outputs.validate(); err != nil {
		errs = append(errs, err)
	}
	for name, d := range map[string]time.Duration{"--baseline": o.baseline, "--settle": o.settle, "--wait": o.wait, "--expected-drain": o.expectedDrain} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must not be negative", name, d))
		}
	}
	if err := o.probers.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.kube.validate(); err != nil {
		errs = append(errs, err)
	}
	if o.kube.fs.Changed("edge-log-wait") && o.edgeAccessLog == "" {
		errs = append(errs, errors.New("--edge-log-wait applies only with --edge-access-log"))
	}
	if o.kube.fs.Changed("edge-log-format") && o.edgeAccessLog == "" {
		errs = append(errs, errors.New("--edge-log-format applies only with --edge-access-log"))
	}
	if !slices.Contains(edgelog.Formats, o.edgeLogFormat) {
		errs = append(errs, fmt.Errorf("--edge-log-format %q: want one of %s", o.edgeLogFormat, strings.Join(edgelog.Formats, ", ")))
	}
	if o.edgeLogWait < 0 {
		errs = append(errs, fmt.Errorf("--edge-log-wait %s: must not be negative", o.edgeLogWait))
	}
	if o.kube.fs.Changed("wait") && !o.watch {
		errs = append(errs, errors.New("--wait applies only with --watch (how long to wait for a rollout started elsewhere)"))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: must be positive", o.timeout))
	}
	mode, err := o.ui.resolve(o.stdout, o.outputs.toStdout())
	if err != nil {
		errs = append(errs, err)
	}
	o.uiMode = mode
	if len(errs) == 0 {
		for _, n := range append(o.flags.notes(), o.ui.notes()...) {
			fmt.Fprintln(o.stderr, "rollprobe: note: "+n)
		}
	}
	return errors.Join(errs...)
}

// complete builds the run's configuration: the prober's, the trigger, the
// cluster client.
func (o *runOptions) complete() error {
	// Under the dashboard, the run's lines (and the deploy command's
	// output) go to its event log, and are printed when it is gone.
	logOut := o.stderr
	if o.uiMode == uiTUI {
		o.sink = tui.NewLogSink()
		o.sink.PassThrough(o.stderr) // preflight: until the dashboard starts
		logOut = o.sink
	}
	targets, err := parseTargets(o.targets)
	if err != nil {
		return err
	}
	probeCfg, paths, err := o.flags.paths(targets)
	if err != nil {
		return err
	}
	var trigger rollout.Trigger = rollout.Restart{}
	switch {
	case o.image != "":
		if trigger, err = rollout.ParseSetImage(o.image); err != nil {
			return field.Rename(err, triggerFlags)
		}
	case o.patch != "":
		data := []byte(o.patch)
		if strings.HasPrefix(o.patch, "@") {
			if data, err = os.ReadFile(o.patch[1:]); err != nil {
				return fmt.Errorf("--patch: %w", err)
			}
		}
		kind, _, _ := o.kube.workload()
		if trigger, err = patchFor(kind, data); err != nil {
			return field.Rename(err, triggerFlags)
		}
	case o.watch:
		trigger = rollout.Watch{}
	case o.drain != "":
		trigger = rollout.Drain{Node: o.drain, Uncordon: o.uncordon}
	case o.kube.fs.Changed("scale"):
		if trigger, err = rollout.ParseScale(o.scale); err != nil {
			return field.Rename(err, triggerFlags)
		}
	case o.exec:
		if len(o.execArgv) == 0 {
			return errors.New("--exec: give the deploy command after --")
		}
		trigger = rollout.Exec{Argv: o.execArgv, Stdout: logOut, Stderr: logOut}
	}

	if o.validateOnly { // the cluster is not read: the rest needs it (validate checked --deployment)
		return nil
	}
	kube, restCfg, ref, err := o.kube.clientAndConfig()
	if err != nil {
		return err
	}
	ns := ref.Namespace
	o.cfg = runner.RolloutConfig{
		Kube: kube, Namespace: ns, Kind: ref.Kind, Name: ref.Name, Service: o.kube.service, Trigger: trigger,
		Probe: probeCfg, Paths: paths, Budget: o.flags.budget(),
		Baseline: o.baseline, Settle: o.settle, Wait: o.wait, Timeout: o.timeout, ExpectedDrain: o.expectedDrain, Promote: o.promote, PromoteAfter: o.promoteAfter,
		Tool: tool(), Log: logOut, EdgeAccessLog: o.edgeAccessLog, EdgeLogFormat: o.edgeLogFormat, EdgeLogWait: o.edgeLogWait,
	}
	o.cfg.Probers = o.probers.config(kube, restCfg, ns)
	if o.uiMode == uiNone {
		o.cfg.Log = nil
	}
	return nil
}

// patchFor parses --patch for a workload of kind: an Argo Rollout, a
// custom resource, takes no strategic merge patch (the API server refuses
// one), so it gets a JSON merge patch; the built-in kinds a strategic one.
func patchFor(kind rollout.Kind, data []byte) (rollout.Patch, error) {
	patch, err := rollout.ParsePatch(data)
	if err != nil {
		return rollout.Patch{}, err
	}
	patch.Merge = kind == rollout.KindRollout
	return patch, nil
}

// triggerFlags name the flags of the trigger parsers' fields.
var triggerFlags = map[string]string{"Image": "--image", "Patch": "--patch", "Replicas": "--scale"}

// run starts the flow (preflight errors end it here, exit 2), attaches the
// view until the run ends (under the dashboard, until the user leaves its
// end screen), and publishes.
func (o *runOptions) run(ctx context.Context) error {
	o.log.Info("prober", "procs", o.flags.applyProcs(&o.cfg.Probe))
	signals := ctx
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	run, err := runner.StartRollout(ctx, o.cfg)
	if err != nil {
		o.flushSink()
		if errors.Is(err, rollout.ErrMidRollout) {
			err = fmt.Errorf("%w, or use --watch to probe the rollout that is running", err)
		}
		return err
	}
	view := attachView(o.globalOptions, signals, o.uiMode, o.ui, o.progress, o.sink, run.Live(),
		tui.Source{Command: "run", Target: targetsLine(o.cfg.Probe, o.cfg.Paths), TargetRate: o.cfg.Probe.Rate * float64(max(1, len(o.cfg.Paths))),
			RequestTimeout: o.cfg.Probe.Timeout, BackendHeader: o.cfg.Probe.BackendHeader}, stop)
	rep, err := run.Wait()
	if err != nil {
		view.abandon(err)
		return err
	}
	// Every output is written before the view says the run is done: a
	// closed terminal on the end screen loses nothing.
	pub := ci.NewPublication(rep, o.outputs.of(o.globalOptions))
	pub.WriteFiles()
	view.finish(pub)
	if o.uiMode != uiTUI {
		o.flushSink()
	}
	return pub.Finish()
}

// flushSink prints the lines the sink holds that were not passed through.
func (o *runOptions) flushSink() {
	if o.sink != nil {
		_, _ = io.WriteString(o.stderr, o.sink.Text())
	}
}
