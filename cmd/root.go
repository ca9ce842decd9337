// Package cmd holds rollprobe's cobra commands, the only place that knows
// flags. Each command binds its flags to an options struct and its RunE
// goes validate -> complete -> SilenceUsage -> run:
//   - validate checks the flags that stand alone (required ones, choices,
//     signs, output formats, the view), so a bad command line fails before
//     anything is read or built;
//   - complete turns them into the typed configurations the domain packages
//     take (prober.Config, runner.RolloutConfig, a Kubernetes client); the
//     domain reports field errors (internal/field), renamed here to flags;
//   - run starts a flow (package runner), attaches the dashboard or the
//     plain progress lines to its live handle, and publishes the report
//     through ci.Publish.
//
// Errors from validate and complete are usage errors (exit 2, nothing sent
// or changed); exit codes are resolved once, in Execute (report/exitcode).
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/rollout"
)

// Version is set at build time with -ldflags "-X github.com/rollprobe/rollprobe/cmd.Version=...".
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

// globalOptions are the flags every command shares.
type globalOptions struct {
	verbosity int
	stdout    io.Writer
	stderr    io.Writer
	log       *slog.Logger
	// cpuProfile, when set, receives a CPU profile of the command (for
	// rollprobe's own performance work; hidden).
	cpuProfile  string
	stopProfile func()
	// validateOnly: check the command line (flags, target, outputs,
	// trigger) and stop before anything is read from a cluster, sent or
	// changed (--validate): how recipes and CI templates are checked.
	validateOnly bool
}

// bindValidate binds --validate on the commands it means something for
// (run, probe, doctor): on the root it would be accepted, and ignored, by
// every other command.
func (g *globalOptions) bindValidate(f *pflag.FlagSet) {
	f.BoolVar(&g.validateOnly, "validate", false, "check the command line (flags, target, output paths, trigger) and exit 0 if it is valid, 2 if not: nothing is read from the cluster, sent or changed")
}

// validated ends a command run with --validate: its command line passed
// every check that needs nothing outside this process.
func (g *globalOptions) validated() error {
	_, err := fmt.Fprintln(g.stdout, "the command line is valid (--validate: nothing was read, sent or changed)")
	return err
}

// NewRootCommand builds the command tree writing to the given streams.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	g := &globalOptions{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "rollprobe",
		Short: "Prove that a Kubernetes rollout drops no requests",
		Long: `rollprobe sends a steady, high rate of HTTP requests at a service, records every
failed request with its exact cause, and gives a verdict a CI gate can use.

Documentation: ` + report.DocsURL + ` (each finding in a report links its own page).`,
		Version:       version(),
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			// client-go logs through klog; setLogOutput routes it through the
			// same logger and level instead of klog's own stderr writer.
			g.setLogOutput(g.stderr)
			if g.cpuProfile != "" {
				f, err := os.Create(g.cpuProfile)
				if err != nil {
					return exitcode.UsageError(fmt.Errorf("--cpuprofile: %w", err))
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					f.Close()
					return exitcode.UsageError(fmt.Errorf("--cpuprofile: %w", err))
				}
				g.stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
			}
			return nil
		},
		PersistentPostRun: func(cmd *cobra.Command, args []string) {
			if g.stopProfile != nil {
				g.stopProfile()
			}
		},
	}
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		// Run as a kubectl plugin (kubectl-rollprobe, by link or krew):
		// help and usage say how it is called.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl rollprobe"}
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().CountVarP(&g.verbosity, "verbose", "v", "more log output on stderr (-v info, -vv debug)")
	root.PersistentFlags().StringVar(&g.cpuProfile, "cpuprofile", "", "write a CPU profile of the command to this file")
	_ = root.PersistentFlags().MarkHidden("cpuprofile")
	root.AddCommand(newProbeCommand(g), newRunCommand(g), newDoctorCommand(g), newReportCommand(g), newLabCommand(g), newFleetAgentCommand(g), newInstallCommand(g),
		&cobra.Command{Use: "version", Short: "Print rollprobe's version", Args: cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) { fmt.Fprintf(g.stdout, "rollprobe version %s\n", version()) }})
	rejectUnknownSubcommands(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return flagValueError(err) })
	return root
}

var pflagValueError = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?(--[\w-]+)" flag: (.*)$`)

// flagValueError says a flag's unreadable value in a user's words: pflag's
// own are Go's ("strconv.ParseFloat: parsing \"abc\": invalid syntax",
// "time: missing unit in duration \"5\""). Other errors pass as they are.
func flagValueError(err error) error {
	m := pflagValueError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	value, flag, cause := m[1], m[2], m[3]
	var want string
	switch {
	case strings.HasSuffix(cause, "value out of range"):
		want = "a number in range"
	case strings.Contains(cause, "strconv.ParseFloat"):
		want = "a number"
	case strings.Contains(cause, "strconv.ParseUint"):
		want = "a whole number, 0 or more"
	case strings.Contains(cause, "strconv.ParseInt"):
		want = "a whole number"
	case strings.Contains(cause, "strconv.ParseBool"):
		want = "true or false"
	case strings.HasPrefix(cause, "time: "):
		want = "a duration with its unit, like 500ms, 30s or 2m"
	default:
		return err
	}
	return fmt.Errorf("%s %q: want %s", flag, value, want)
}

// rejectUnknownSubcommands makes every command group under c (report, lab)
// fail, exit 2, on an argument that names none of its subcommands. Cobra
// prints a group's help and returns no error for it, so a script's
// `rollprobe report shwo r.json` exited 0 having done nothing, which a CI
// step takes for success. With no argument a group still prints its help.
// (The root command already rejects an unknown command.)
//
// Such a group is runnable, only to say this: the usage of c and every
// command under it shows a command's own line only where it has no
// subcommands, so a group's still names its subcommands alone.
func rejectUnknownSubcommands(c *cobra.Command) {
	if !c.HasParent() {
		c.SetUsageTemplate(strings.Replace(c.UsageTemplate(), "Usage:{{if .Runnable}}", "Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	}
	for _, sub := range c.Commands() {
		if sub.HasSubCommands() && !sub.Runnable() {
			sub.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					return cmd.Help()
				}
				msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
				if cmd.SuggestionsMinimumDistance <= 0 {
					cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set only on its own path
				}
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					msg += " (did you mean " + strings.Join(s, " or ") + "?)"
				}
				return exitcode.UsageError(errors.New(msg))
			}
		}
		rejectUnknownSubcommands(sub)
	}
}

// positional checks a command's arguments: fewer than min or more than max
// (max < 0: no bound) is a usage error that names what is missing or extra
// and shows the command's usage line (cobra's own says "requires at least
// 1 arg(s), only received 0").
func positional(min, max int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().CommandPath()+" ") // after "rollprobe: "
		switch {
		case len(args) < min:
			return fmt.Errorf("%s needs %s (usage: %s)", name, what, cmd.UseLine())
		case max >= 0 && len(args) > max:
			return fmt.Errorf("%s takes %s; extra: %s (usage: %s)", name, what, strings.Join(args[max:], " "), cmd.UseLine())
		}
		return nil
	}
}

// Execute runs the command line and returns the process exit code. SIGINT,
// SIGTERM and SIGHUP (a closed terminal) cancel the command's context: commands stop cleanly, write
// their reports and return an interruption (exit 130).
//
// A panic on the command's own goroutine (the run's goroutines recover
// their own and mark the report) exits 70, not Go's 2: after the trigger,
// 2 would tell CI that nothing was changed.
func Execute() (code int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(os.Stderr, "rollprobe: internal error (exit %d), please report it: panic: %v\n%s", exitcode.Internal, v, debug.Stack())
			code = int(exitcode.Internal)
		}
	}()
	root := NewRootCommand(os.Stdout, os.Stderr)
	err := root.ExecuteContext(ctx)
	return exitCode(err, os.Stderr)
}

// exitCode prints err (unless it was already reported) and resolves the exit code.
func exitCode(err error, stderr io.Writer) int {
	code := exitcode.Of(err)
	var silent exitcode.Silent
	if err != nil && !errors.As(err, &silent) {
		if errors.Is(err, rollout.ErrNameTheService) {
			err = fmt.Errorf("%w (--service)", err)
		}
		if errors.Is(err, rollout.ErrNoAnswer) {
			err = fmt.Errorf("%w; check that the kubeconfig (or --server) points at an API server that answers; --kube-request-timeout sets this bound", err)
		}
		fmt.Fprintf(stderr, "rollprobe: %v\n", err)
	}
	return int(code)
}
