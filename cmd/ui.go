package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	"k8s.io/klog/v2"

	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/report/render"
	"github.com/rollprobe/rollprobe/runner"
	"github.com/rollprobe/rollprobe/tui"
)

// uiMode is how a command shows a run while it goes on.
type uiMode string

const (
	uiAuto  uiMode = "auto"  // tui on a terminal, plain otherwise
	uiTUI   uiMode = "tui"   // the dashboard
	uiPlain uiMode = "plain" // progress lines on stderr
	uiNone  uiMode = "none"  // nothing while it runs
)

// uiFlags choose how a command shows a run while it goes on.
type uiFlags struct {
	mode         string // a uiMode
	exitWhenDone bool
	fs           *pflag.FlagSet // the command's, for which flags were given
}

func (u *uiFlags) bind(f *pflag.FlagSet) {
	u.fs = f
	f.StringVar(&u.mode, "ui", string(uiAuto), "live view: auto (tui on a terminal, plain otherwise), tui, plain (progress lines on stderr) or none")
	f.BoolVar(&u.exitWhenDone, "exit-when-done", false, "tui: leave as soon as the run ends instead of waiting for a key")
}

// resolve turns auto into tui or plain: the dashboard needs a terminal on
// stdin and stdout, and CI logs want lines. An explicit tui without a
// terminal is a usage error, found before anything runs (the dashboard
// would otherwise fail mid-run and cut the run short). An output written
// to standard output ("-") leaves no room for the dashboard there.
func (u *uiFlags) resolve(stdout io.Writer, artifactOnStdout bool) (uiMode, error) {
	switch uiMode(u.mode) {
	case uiTUI:
		if artifactOnStdout {
			return "", errors.New("--ui tui: an output goes to standard output (-); use --ui plain or none")
		}
		if out, ok := stdout.(*os.File); !ok || !term.IsTerminal(int(out.Fd())) {
			return "", errors.New("--ui tui: standard output is not a terminal; use --ui plain (progress lines) or none")
		}
		if !term.IsTerminal(int(os.Stdin.Fd())) {
			// Bubble Tea reads keys from /dev/tty when stdin is not a terminal.
			tty, err := os.Open("/dev/tty")
			if err != nil {
				return "", fmt.Errorf("--ui tui: no terminal to read keys from (stdin is not one): %w; use --ui plain or none", err)
			}
			_ = tty.Close()
		}
		return uiTUI, nil
	case uiPlain, uiNone:
		return uiMode(u.mode), nil
	case uiAuto:
		out, ok := stdout.(*os.File)
		if ok && !artifactOnStdout && term.IsTerminal(int(out.Fd())) && term.IsTerminal(int(os.Stdin.Fd())) &&
			os.Getenv("CI") == "" && os.Getenv("TERM") != "dumb" {
			return uiTUI, nil
		}
		return uiPlain, nil
	}
	return "", fmt.Errorf("--ui %q: want auto, tui, plain or none", u.mode)
}

// notes say which of the view's flags given will have no effect with the
// --ui given: a script that names both may expect what it will not get.
// Only an explicit --ui: under auto the view depends on the terminal, and
// one command line serves both a terminal and CI.
func (u *uiFlags) notes() []string {
	if u.fs == nil || !u.fs.Changed("ui") {
		return nil
	}
	var out []string
	mode := uiMode(u.mode)
	if u.fs.Changed("progress") && (mode == uiTUI || mode == uiNone) {
		out = append(out, fmt.Sprintf("--progress has no effect with --ui %s (it sets the interval of --ui plain's lines)", mode))
	}
	if u.exitWhenDone && (mode == uiPlain || mode == uiNone) {
		out = append(out, fmt.Sprintf("--exit-when-done has no effect with --ui %s (it makes the dashboard leave without waiting for a key)", mode))
	}
	return out
}

// view is what shows a run while it goes on: the dashboard, progress
// lines, or nothing.
type view interface {
	// finish ends the view with the run's report, once its files are
	// written (pub.WriteFiles): the end screen names only files that
	// exist and the exit code the process will have.
	finish(pub *ci.Publication)
	// abandon ends the view of a run that ended without a report, with
	// the error it ended on (its exit code is the one shown).
	abandon(err error)
}

// attachView starts the view mode asks for on a running flow. src names
// the run (command, target, rate); the rest is read from live. sink, for
// run, holds the run's log lines (the dashboard shows them); stop ends the
// run early (q in the dashboard); signals is the command's context, done
// on SIGINT, SIGTERM or SIGHUP: the dashboard then leaves in any phase,
// its end screen included.
func attachView(g *globalOptions, signals context.Context, mode uiMode, ui uiFlags, every time.Duration, sink *tui.LogSink, live runner.Live, src tui.Source, stop func()) view {
	switch {
	case mode == uiTUI:
		if sink == nil {
			sink = tui.NewLogSink()
		}
		src.Start, src.Recorder, src.Log = live.Start(), live.Recorder(), sink
		src.Phase = func() string { return string(live.Phase()) }
		src.Probers = live.Probers
		names, recorders := live.Paths()
		for i, name := range names {
			src.Paths = append(src.Paths, tui.PathRecorder{Name: name, Recorder: recorders[i]})
		}
		if tl := live.Timeline(); tl != nil {
			src.Timeline, src.Workload, src.Revisions = tl, live.Workload, live.Revisions
			src.ViewStalled = live.ViewStalled
		}
		return startDashboard(g, signals, sink, src, ui, stop)
	case mode == uiPlain && every > 0:
		return progressView{stop: ci.StartProgress(g.stderr, every, live)}
	}
	return progressView{stop: func() {}}
}

// progressView is the plain view: progress lines until the run ends.
type progressView struct{ stop func() }

func (p progressView) finish(*ci.Publication) { p.stop() }
func (p progressView) abandon(error)          { p.stop() }

// dashboard is the live view of one run: the Bubble Tea program, and the
// sink that takes the run's log lines while it owns the terminal.
type dashboard struct {
	g       *globalOptions
	signals context.Context
	program *tea.Program
	sink    *tui.LogSink
	exited  chan struct{}
	runErr  error
}

// startDashboard takes the terminal: logs go to the sink (shown in the
// event log, printed once the dashboard is gone). stop ends the run early
// (q); it is also called if the dashboard dies before the run ends.
func startDashboard(g *globalOptions, signals context.Context, sink *tui.LogSink, src tui.Source, ui uiFlags, stop func()) *dashboard {
	sink.PassThrough(nil)
	g.setLogOutput(sink)
	sampler := tui.NewSampler(src)
	model := tui.New(tui.Options{Sample: sampler.Sample, Stop: stop, ExitWhenDone: ui.exitWhenDone, Color: os.Getenv("NO_COLOR") == ""})
	d := &dashboard{g: g, signals: signals, sink: sink, exited: make(chan struct{})}
	d.program = tea.NewProgram(model, tea.WithOutput(g.stdout), tea.WithoutSignalHandler(), tea.WithFPS(30))
	go func() {
		defer close(d.exited)
		final, err := d.program.Run()
		d.runErr = err
		if m, ok := final.(tui.Model); !ok || !m.Done() {
			stop() // the view is gone: do not leave the run going unseen
		}
	}()
	return d
}

// finish shows the end of the run, waits until the user leaves (or at once
// with --exit-when-done, when the run was interrupted, or on a signal),
// gives the terminal back and prints what was logged meanwhile. The
// outputs are already written: leaving changes nothing but the screen.
func (d *dashboard) finish(pub *ci.Publication) {
	d.close(tui.DoneMsg(doneOf(pub)))
}

// abandon closes the dashboard when the run ended without a report.
func (d *dashboard) abandon(err error) {
	d.close(tui.DoneMsg{Verdict: "ERROR", ExitCode: int(exitcode.Of(err)), Interrupted: true})
}

// close ends the dashboard with done, waits for it to leave, gives the
// terminal and the logs back, and prints what was logged meanwhile.
func (d *dashboard) close(done tui.DoneMsg) {
	d.program.Send(done) // a no-op if the program has already ended
	select {
	case <-d.exited:
	case <-d.signals.Done():
		// SIGINT, SIGTERM, or SIGHUP from a closed terminal while the end
		// screen waits for a key: the process must end (it used to wait
		// forever on a terminal that no longer existed).
		d.program.Kill()
		<-d.exited
	}
	d.g.setLogOutput(d.g.stderr)
	if d.runErr != nil {
		fmt.Fprintf(d.g.stderr, "rollprobe: live view: %v\n", d.runErr)
	}
	_, _ = io.WriteString(d.g.stderr, d.sink.Text())
}

// doneOf is the end screen of a report whose outputs pub has written: the
// verdict and exit code as the process will end (an output that could not
// be written included), and the files that exist.
func doneOf(pub *ci.Publication) tui.Done {
	r := pub.Report()
	v := r.Verdict
	d := tui.Done{Verdict: render.VerdictWord(r), ExitCode: int(pub.Code()), Reasons: v.Reasons, Interrupted: v.Interrupted}
	for _, w := range pub.Written() {
		d.Files = append(d.Files, w.Label+": "+w.Path)
	}
	for _, f := range r.Findings {
		d.Findings = append(d.Findings, tui.Finding{Severity: string(f.Severity), Title: f.Title, Fix: f.Fix, Static: f.Source == report.SourceDoctor})
	}
	return d
}

// setLogOutput points rollprobe's logger (and client-go's klog through
// it) at w.
func (g *globalOptions) setLogOutput(w io.Writer) {
	g.log = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: g.logLevel()}))
	klog.SetSlogLogger(g.log)
}

func (g *globalOptions) logLevel() slog.Level {
	switch {
	case g.verbosity >= 2:
		return slog.LevelDebug
	case g.verbosity == 1:
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
