package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/ci/output"
	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/internal/atomicfile"
	"github.com/rollprobe/rollprobe/rollout"
)

type doctorOptions struct {
	*globalOptions
	kube          kubeFlags
	expectedDrain time.Duration
	failOn        string
	output        string
	junitPath     string
}

func newDoctorCommand(g *globalOptions) *cobra.Command {
	o := &doctorOptions{globalOptions: g, expectedDrain: doctor.DefaultExpectedDrain, failOn: "error", output: "text"}
	cmd := &cobra.Command{
		Use:   "doctor --deployment [NS/]NAME [flags]",
		Short: "Check a Deployment's configuration for what drops requests in a rollout (no traffic, changes nothing)",
		Long: `doctor reads the Deployment, its Service and the namespace's PodDisruptionBudgets and
reports the settings that drop requests during a rollout, each with its evidence and fix:
no preStop hook, a grace period below preStop plus the app's drain, no readiness probe,
readiness identical to liveness, a strategy that can leave no ready pod, externalTrafficPolicy
Local before Kubernetes 1.26, no PodDisruptionBudget, a shell as PID 1.

rollprobe run performs the same checks and adds them to its report; doctor is the static half
alone, quick enough for every pull request.

Exit codes: 0 no finding at or above --fail-on, 1 findings at or above it, 2 usage or access error.`,
		Example: `  rollprobe doctor --deployment prod/web
  rollprobe doctor --deployment web -n prod --fail-on warning --junit doctor.xml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return ci.Usage(err)
			}
			kube, ns, name, err := o.kube.client()
			if err != nil {
				return ci.Usage(err)
			}
			cmd.SilenceUsage = true
			target, err := rollout.Resolve(cmd.Context(), kube, ns, name, o.kube.service)
			if err != nil {
				return ci.Usage(err)
			}
			in, err := doctor.Gather(cmd.Context(), kube, target)
			if err != nil {
				return ci.Usage(err)
			}
			res := doctor.Evaluate(in, doctor.Options{ExpectedDrain: o.expectedDrain}, o.failOn)
			return o.finish(res)
		},
	}
	f := cmd.Flags()
	o.kube.bind(f)
	f.DurationVar(&o.expectedDrain, "expected-drain", o.expectedDrain, "how long the app needs after SIGTERM to finish its requests (the grace period must cover preStop plus this)")
	f.StringVar(&o.failOn, "fail-on", o.failOn, "exit 1 on findings of this severity or above: error, warning, info or never")
	f.StringVarP(&o.output, "output", "o", o.output, "output: text or json")
	f.StringVar(&o.junitPath, "junit", "", "write JUnit XML (a test case per check) to this file")
	return cmd
}

func (o *doctorOptions) validate() error {
	var errs []error
	if o.kube.deployment == "" {
		errs = append(errs, errors.New("--deployment is required"))
	}
	if !doctor.ValidFailOn(o.failOn) {
		errs = append(errs, fmt.Errorf("--fail-on %q: want error, warning, info or never", o.failOn))
	}
	if o.output != "text" && o.output != "json" {
		errs = append(errs, fmt.Errorf("-o %q: want text or json", o.output))
	}
	if o.expectedDrain < 0 {
		errs = append(errs, fmt.Errorf("--expected-drain %s: must not be negative", o.expectedDrain))
	}
	return errors.Join(errs...)
}

// finish writes JUnit, the GitHub summary and annotations, and the result,
// and returns the exit code's error.
func (o *doctorOptions) finish(res doctor.Result) error {
	checks := output.DoctorChecks(res)
	if o.junitPath != "" {
		suite := output.Suite{Name: fmt.Sprintf("rollprobe doctor %s/%s", res.Namespace, res.Deployment), Classname: "rollprobe.doctor", Started: time.Now()}
		if err := atomicfile.Write(o.junitPath, func(w io.Writer) error { return output.WriteJUnitChecks(w, suite, checks) }); err != nil {
			return ci.Usage(err)
		}
	}
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		if path := os.Getenv("GITHUB_STEP_SUMMARY"); path != "" {
			if err := appendFile(path, func(w io.Writer) error { return output.WriteDoctorMarkdown(w, res) }); err != nil {
				fmt.Fprintf(o.stderr, "rollprobe: step summary: %v\n", err)
			}
		}
		defer func() { _ = output.WriteCheckAnnotations(o.stdout, checks) }()
	}
	var err error
	if o.output == "json" {
		enc := json.NewEncoder(o.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = doctor.WriteText(o.stdout, res)
	}
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if !res.Pass {
		return ci.Silent{Code: ci.ExitFailures}
	}
	return nil
}

// appendFile appends what write produces to path (GitHub's step summary is
// shared by every step of a job).
func appendFile(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
