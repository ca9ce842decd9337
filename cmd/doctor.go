package cmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/internal/field"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/rollout"
)

type doctorOptions struct {
	*globalOptions
	kube          kubeFlags
	expectedDrain time.Duration
	timeout       time.Duration
	failOn        string
	output        string
	junitPath     string

	threshold report.FailOn
	client    kubernetes.Interface
	ref       rollout.Ref
}

func newDoctorCommand(g *globalOptions) *cobra.Command {
	o := &doctorOptions{globalOptions: g, expectedDrain: doctor.DefaultExpectedDrain, timeout: time.Minute,
		failOn: string(report.SeverityError), output: ci.FormatText}
	cmd := &cobra.Command{
		Use:   "doctor --deployment|--statefulset|--daemonset|--rollout [NS/]NAME [flags]",
		Short: "Check a workload's configuration for what drops requests in a rollout (no traffic, changes nothing)",
		Long: `doctor reads the workload (a Deployment, StatefulSet, DaemonSet or Argo Rollout; for a
Rollout with spec.workloadRef, the template it refers to), its Service and the namespace's
PodDisruptionBudgets and reports the settings that drop requests during a rollout, each with its
evidence and fix: no preStop hook, a grace period below preStop plus the app's drain, no
readiness probe, readiness identical to liveness, a strategy that can leave no ready pod, an Argo
Rollout that deletes its old pods before the move of its traffic can have propagated, an Argo
canary weight its pods cannot express, externalTrafficPolicy Local before Kubernetes 1.26, no
PodDisruptionBudget or one that allows no eviction or every pod, a shell as PID 1.

rollprobe run performs the same checks and adds them to its report; doctor is the static half
alone, quick enough for every pull request.

Exit codes: 0 no finding at or above --fail-on, 1 findings at or above it, 2 usage or access
error (an unreachable or unanswering API server included: --timeout bounds the command).

Docs: ` + report.DocsURL + `doctor.md`,
		Example: `  rollprobe doctor --deployment prod/web
  rollprobe doctor --deployment web -n prod --fail-on warning --junit doctor.xml
  rollprobe doctor --statefulset prod/db-proxy
  rollprobe doctor --rollout prod/web`,
		Args: positional(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.kube.warnDeprecated(o.stderr)
			if err := o.validate(); err != nil {
				return exitcode.UsageError(err)
			}
			if o.validateOnly { // validate checked all that needs no cluster
				return o.validated()
			}
			if err := o.complete(); err != nil {
				return exitcode.UsageError(err)
			}
			cmd.SilenceUsage = true
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	o.kube.bind(f)
	o.kube.deprecatedTimeout(f, "request-timeout")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "bound on the whole command, every API call included")
	f.DurationVar(&o.expectedDrain, "expected-drain", o.expectedDrain, "how long the app needs after SIGTERM to finish its requests (the grace period must cover preStop plus this)")
	f.StringVar(&o.failOn, "fail-on", o.failOn, "exit 1 on findings of this severity or above: error, warning, info or never")
	f.StringVarP(&o.output, "output", "o", o.output, "output: text or json")
	f.StringVar(&o.junitPath, "junit", "", "write JUnit XML (a test case per check) to this file")
	g.bindValidate(f)
	return cmd
}

func (o *doctorOptions) validate() error {
	var errs []error
	if _, _, ok := o.kube.workload(); !ok {
		errs = append(errs, errNoWorkload)
	}
	threshold, ok := report.ParseFailOn(o.failOn)
	if !ok {
		errs = append(errs, fmt.Errorf("--fail-on %q: want error, warning, info or never", o.failOn))
	}
	o.threshold = threshold
	if err := o.kube.validate(); err != nil {
		errs = append(errs, err)
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: must be positive", o.timeout))
	}
	if err := field.Rename(ci.Outputs{JUnitPath: o.junitPath, Format: o.output}.Check(), outputFlagNames); err != nil {
		errs = append(errs, err)
	}
	if o.output != ci.FormatText && o.output != ci.FormatJSON {
		errs = append(errs, fmt.Errorf("-o %q: want text or json", o.output))
	}
	if o.expectedDrain < 0 {
		errs = append(errs, fmt.Errorf("--expected-drain %s: must not be negative", o.expectedDrain))
	}
	return errors.Join(errs...)
}

// complete loads the kubeconfig.
func (o *doctorOptions) complete() error {
	var err error
	o.client, o.ref, err = o.kube.client()
	return err
}

// run reads the objects (within --timeout), runs the checks and publishes.
func (o *doctorOptions) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	target, err := rollout.Resolve(ctx, o.client, o.ref, o.kube.service)
	if err != nil {
		return exitcode.UsageError(err)
	}
	in, err := doctor.Gather(ctx, o.client, target)
	if err != nil {
		return exitcode.UsageError(err)
	}
	res := doctor.Evaluate(in, doctor.Options{ExpectedDrain: o.expectedDrain}, o.threshold)
	return ci.PublishDoctor(res, ci.Outputs{JUnitPath: o.junitPath, Format: o.output, Stdout: o.stdout, Stderr: o.stderr})
}
