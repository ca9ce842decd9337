package cmd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/internal/field"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/runner"
	"github.com/rollprobe/rollprobe/tui"
)

type probeOptions struct {
	*globalOptions
	flags    proberFlags
	outputs  outputFlags
	progress time.Duration
	ui       uiFlags
	uiMode   uiMode

	config prober.Config
	paths  []prober.Path // several targets: probed side by side

	// Probing from the cluster (--probers): its pods and the cluster.
	probers    proberPodFlags
	kube       kubeFlags
	probersCfg *runner.ProbersConfig
	kubeClient kubernetes.Interface
}

func newProbeCommand(g *globalOptions) *cobra.Command {
	o := &probeOptions{globalOptions: g, flags: defaultProberFlags(), progress: 2 * time.Second, probers: defaultProberPodFlags()}
	cmd := &cobra.Command{
		Use:   "probe URL|NAME=URL...",
		Short: "Probe a URL at a fixed rate and classify every failed request",
		Long: `probe sends requests at URL at a fixed rate (open model, latency measured from each
request's intended send time) or back to back (closed model), never retries, and
classifies every failure: refused, connect_timeout, reset, eof, eof_reused,
truncated, timeout, http_5xx, proxy_5xx, http_status, dns, tls, local.

Exit codes: 0 no failure above the budget, 1 failures above the budget, 2 usage
error (output paths included, checked before anything is sent), 4 inconclusive
(the prober could not hold its rate or hit local errors), 5 an output could not
be written at the end, 70 rollprobe itself failed (the report says how), 130 interrupted (the report is still written).

Docs: ` + report.DocsURL + `probe.md`,
		Example: `  rollprobe probe http://127.0.0.1:8080/ --rate 1000 --duration 30s
  rollprobe probe http://svc.ns:80/healthz --conn new --backend-header X-Pod-Name --report report.json
  rollprobe probe http://127.0.0.1:8080/ --rate 0 --concurrency 32 --duration 10s
  rollprobe probe svc=http://web.prod.svc/ edge=https://shop.example.com/ --rate 200 --duration 1m`,
		Args: positional(1, -1, "a URL to probe"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("timeout") {
				fmt.Fprintln(o.stderr, "rollprobe: --timeout is deprecated in probe: use --request-timeout (in run and doctor --timeout bounds the whole command)")
				if !cmd.Flags().Changed("request-timeout") {
					o.flags.timeoutFlag = "timeout" // errors name the flag typed
				}
			}
			if err := o.validate(); err != nil {
				return exitcode.UsageError(err)
			}
			if err := o.complete(args); err != nil {
				return exitcode.UsageError(err)
			}
			if o.validateOnly {
				return o.validated()
			}
			cmd.SilenceUsage = true
			return o.run(cmd.Context())
		},
	}
	o.flags.bind(cmd.Flags())
	// --timeout was probe's request timeout; in run and doctor it bounds
	// the whole command. One meaning per name: the old spelling still works.
	// (Not pflag's MarkDeprecated: cobra prints its message on stdout,
	// into -o json's document.)
	cmd.Flags().DurationVar(&o.flags.timeout, "timeout", o.flags.timeout, "request timeout")
	_ = cmd.Flags().MarkHidden("timeout")
	o.probers.bind(cmd.Flags(), "the kubeconfig context's namespace")
	o.kube.bindConnection(cmd.Flags(), "with --probers: ")
	o.outputs.bind(cmd.Flags())
	g.bindValidate(cmd.Flags())
	cmd.Flags().DurationVar(&o.progress, "progress", o.progress, "--ui plain: interval of progress lines on stderr; 0 disables")
	o.ui.bind(cmd.Flags())
	return cmd
}

// complete turns the flags into the prober's configuration (its field
// errors renamed to the flags).
func (o *probeOptions) complete(args []string) error {
	targets, err := parseTargets(args)
	if err != nil {
		return err
	}
	o.config, o.paths, err = o.flags.paths(targets)
	if err != nil || o.probers.count == 0 || o.validateOnly {
		return err
	}
	kube, restCfg, ns, err := o.kube.connection()
	if err != nil {
		return err
	}
	o.kubeClient, o.probersCfg = kube, o.probers.config(kube, restCfg, ns)
	return nil
}

// validate checks the flags that stand alone: the output and view choices.
func (o *probeOptions) validate() error {
	if err := o.outputs.validate(); err != nil {
		return err
	}
	if err := o.probers.validate(); err != nil {
		return err
	}
	if set := o.kube.setOutsideProbers(); len(set) > 0 && o.probers.count == 0 {
		hint := ""
		if slices.Contains(set, "--insecure-skip-tls-verify") {
			hint = " (the target's certificate check is --insecure)"
		}
		return fmt.Errorf("%s: for the Kubernetes API, used only with --probers; this probe talks to no cluster%s", strings.Join(set, ", "), hint)
	}
	if o.progress < 0 {
		return fmt.Errorf("--progress %s: must not be negative", o.progress)
	}
	mode, err := o.ui.resolve(o.stdout, o.outputs.toStdout())
	o.uiMode = mode
	if err == nil {
		for _, n := range append(o.flags.notes(), o.ui.notes()...) {
			fmt.Fprintln(o.stderr, "rollprobe: note: "+n)
		}
	}
	return err
}

// run probes with the chosen view attached, then publishes.
func (o *probeOptions) run(ctx context.Context) error {
	procs := o.flags.applyProcs(&o.config) // before the run: the runtime starts with it
	// q in the dashboard stops the run as Ctrl-C does.
	signals := ctx
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	run, err := runner.StartProbe(ctx, runner.ProbeConfig{Probe: o.config, Paths: o.paths, Budget: o.flags.budget(), Tool: tool(),
		Probers: o.probersCfg, Kube: o.kubeClient, Log: o.stderr})
	if err != nil {
		return exitcode.UsageError(err)
	}
	o.log.Info("probing", "target", targetsLine(o.config, o.paths), "rate", o.config.Rate, "conn", o.config.Conn.String(), "procs", procs)
	view := attachView(o.globalOptions, signals, o.uiMode, o.ui, o.progress, nil, run.Live(), tui.Source{Command: "probe",
		Target: targetsLine(o.config, o.paths), TargetRate: o.config.Rate * float64(max(1, len(o.paths))), RequestTimeout: o.config.Timeout}, stop)
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
	return pub.Finish()
}

func tool() report.Tool { return report.Tool{Name: "rollprobe", Version: version()} }

// outputFlags are where a command writes its results.
type outputFlags struct {
	reportPath string
	junitPath  string
	htmlPath   string
	output     string
}

func (f *outputFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.reportPath, "report", "", "write the JSON report to this file (atomically; a device or FIFO in place; - for stdout, the summary then on stderr)")
	fs.StringVar(&f.junitPath, "junit", "", "write JUnit XML to this file: one test case per check (- for stdout)")
	fs.StringVar(&f.htmlPath, "html", "", "write a self-contained HTML page of the run to this file, opens offline (- for stdout)")
	fs.StringVarP(&f.output, "output", "o", ci.FormatText, "summary on stdout: text or json (the full report)")
}

// validate checks the format and that every output path can be written,
// before anything is sent or changed.
func (f *outputFlags) validate() error {
	if f.output != ci.FormatText && f.output != ci.FormatJSON {
		return fmt.Errorf("-o %q: want text or json", f.output)
	}
	return field.Rename(ci.Outputs{ReportPath: f.reportPath, JUnitPath: f.junitPath, HTMLPath: f.htmlPath, Format: f.output}.Check(), outputFlagNames)
}

// toStdout says whether an output is written to standard output ("-").
func (f *outputFlags) toStdout() bool {
	return ci.Outputs{ReportPath: f.reportPath, JUnitPath: f.junitPath, HTMLPath: f.htmlPath}.ToStdout()
}

// outputFlagNames name the flags of ci.Outputs' fields.
var outputFlagNames = map[string]string{"ReportPath": "--report", "JUnitPath": "--junit", "HTMLPath": "--html"}

func (f *outputFlags) of(g *globalOptions) ci.Outputs {
	return ci.Outputs{ReportPath: f.reportPath, JUnitPath: f.junitPath, HTMLPath: f.htmlPath, Format: f.output, Stdout: g.stdout, Stderr: g.stderr}
}
