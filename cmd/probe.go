package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/ci/output"
	"github.com/rollprobe/rollprobe/internal/atomicfile"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/tui"
)

type probeOptions struct {
	*globalOptions
	flags    proberFlags
	outputs  outputFlags
	progress time.Duration
	ui       uiFlags
	uiMode   string

	target string
	config prober.Config
}

func newProbeCommand(g *globalOptions) *cobra.Command {
	o := &probeOptions{globalOptions: g, flags: defaultProberFlags(), progress: 2 * time.Second}
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Probe a URL at a fixed rate and classify every failed request",
		Long: `probe sends requests at URL at a fixed rate (open model, latency measured from each
request's intended send time) or back to back (closed model), never retries, and
classifies every failure: refused, connect_timeout, reset, eof, eof_reused,
truncated, timeout, http_5xx, http_status, dns, tls, local.

Exit codes: 0 no failure above the budget, 1 failures above the budget, 2 usage
error, 4 inconclusive (the prober could not hold its rate or hit local errors),
130 interrupted (the report is still written).`,
		Example: `  rollprobe probe http://127.0.0.1:8080/ --rate 1000 --duration 30s
  rollprobe probe http://svc.ns:80/healthz --conn new --backend-header X-Pod-Name --report report.json
  rollprobe probe http://127.0.0.1:8080/ --rate 0 --concurrency 32 --duration 10s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete(args); err != nil {
				return ci.Usage(err)
			}
			if err := o.validate(); err != nil {
				return ci.Usage(err)
			}
			cmd.SilenceUsage = true
			return o.run(cmd.Context())
		},
	}
	o.flags.bind(cmd.Flags())
	o.outputs.bind(cmd.Flags())
	cmd.Flags().DurationVar(&o.progress, "progress", o.progress, "--ui plain: interval of progress lines on stderr; 0 disables")
	o.ui.bind(cmd.Flags())
	return cmd
}

func (o *probeOptions) complete(args []string) error {
	o.target = args[0]
	cfg, err := o.flags.config(o.target)
	o.config = cfg
	return err
}

func (o *probeOptions) validate() error {
	if o.outputs.output != "text" && o.outputs.output != "json" {
		return fmt.Errorf("-o %q: want text or json", o.outputs.output)
	}
	if o.progress < 0 {
		return fmt.Errorf("--progress %s: must not be negative", o.progress)
	}
	mode, err := o.ui.resolve(o.stdout)
	o.uiMode = mode
	return err
}

func (o *probeOptions) run(ctx context.Context) error {
	procs := o.flags.applyProcs(o.config) // before the run: the runtime starts with it
	p, err := prober.New(o.config, "rollprobe/"+version())
	if err != nil {
		return ci.Usage(err)
	}
	o.log.Info("probing", "target", o.config.Target.String(), "rate", o.config.Rate, "conn", o.config.Conn.String(),
		"run_id", p.RunID(), "procs", procs)

	// q in the dashboard stops the run as Ctrl-C does.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	done := p.Go(ctx)
	var dash *dashboard
	var finished atomic.Bool
	stopProgress := func() {}
	switch {
	case o.uiMode == "tui":
		phase := func() string {
			if finished.Load() {
				return "done"
			}
			return "probing"
		}
		dash = startDashboard(o.globalOptions, tui.NewLogSink(), tui.Source{Command: "probe", Target: o.config.Target.String(),
			TargetRate: o.config.Rate, Start: p.Start(), Recorder: p.Recorder(), Phase: phase}, o.ui, stop)
	case o.uiMode == "plain" && o.progress > 0:
		stopProgress = ci.StartProgress(o.stderr, o.progress, p)
	}
	res := <-done
	finished.Store(true)
	stopProgress()
	if res.Err != nil {
		return res.Err
	}
	rep := report.Build(report.ProbeRun{
		Tool:     report.Tool{Name: "rollprobe", Version: version()},
		Command:  "probe",
		RunID:    p.RunID(),
		Config:   o.config,
		Budget:   o.flags.budget(),
		Summary:  res.Summary,
		Recorder: p.Recorder(),
	})
	if dash != nil {
		dash.finish(rep, o.outputs.reportPath)
	}
	return o.finish(rep)
}

// finish writes the report and the summary and returns the verdict's exit
// code (already explained on stdout, so it is silent).
func (o *probeOptions) finish(rep *report.Report) error {
	return finishReport(o.globalOptions, rep, o.outputs)
}

// outputFlags are where a command writes its results.
type outputFlags struct {
	reportPath string
	junitPath  string
	output     string
}

func (f *outputFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.reportPath, "report", "", "write the JSON report to this file (atomically)")
	fs.StringVar(&f.junitPath, "junit", "", "write JUnit XML to this file: one test case per check")
	fs.StringVarP(&f.output, "output", "o", "text", "summary on stdout: text or json (the full report)")
}

func finishReport(g *globalOptions, rep *report.Report, out outputFlags) error {
	// Artifacts first: the verdict stands either way, but CI must not pass
	// without them.
	if out.reportPath != "" {
		if err := report.WriteFile(out.reportPath, rep); err != nil {
			fmt.Fprintf(g.stderr, "rollprobe: %v\n", err)
			return ci.WithCode(ci.ExitUsage, err)
		}
	}
	if out.junitPath != "" {
		if err := atomicfile.Write(out.junitPath, func(w io.Writer) error { return output.WriteJUnit(w, rep) }); err != nil {
			fmt.Fprintf(g.stderr, "rollprobe: %v\n", err)
			return ci.WithCode(ci.ExitUsage, err)
		}
	}
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		if path := os.Getenv("GITHUB_STEP_SUMMARY"); path != "" {
			if err := appendFile(path, func(w io.Writer) error { return output.WriteMarkdown(w, rep) }); err != nil {
				fmt.Fprintf(g.stderr, "rollprobe: step summary: %v\n", err)
			}
		}
		defer func() { _ = output.WriteAnnotations(g.stdout, rep) }()
	}
	reportPath, format := out.reportPath, out.output
	var err error
	if format == "json" {
		err = report.Encode(g.stdout, rep)
	} else {
		err = report.WriteText(g.stdout, rep)
		if err == nil && reportPath != "" {
			fmt.Fprintf(g.stdout, "report: %s\n", reportPath)
		}
	}
	if err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	if rep.Verdict.ExitCode != ci.ExitOK {
		return ci.Silent{Code: rep.Verdict.ExitCode}
	}
	return nil
}
