package ci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/internal/atomicfile"
	"github.com/rollprobe/rollprobe/internal/field"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/report/render"
	"github.com/rollprobe/rollprobe/report/render/htmlreport"
)

// Outputs are where a command's results go. Format is the summary on
// Stdout: "text" or "json".
type Outputs struct {
	ReportPath string // the JSON report artifact; "" for none (not for doctor)
	JUnitPath  string // "" for none
	HTMLPath   string // the self-contained HTML page; "" for none (not for doctor)
	Format     string
	Stdout     io.Writer
	Stderr     io.Writer
	// Getenv reads the CI environment (GITHUB_ACTIONS,
	// GITHUB_STEP_SUMMARY); nil means os.Getenv.
	Getenv func(string) string
}

// Check reports, before anything is sent or changed, why an output could
// not be written (a missing directory, a directory at the path): a usage
// error for the command, exit 2. Each problem is a *field.Error naming
// the field (ReportPath, JUnitPath, HTMLPath), for the command to rename.
func (o Outputs) Check() error {
	var errs []error
	for _, out := range []struct{ field, path string }{{"ReportPath", o.ReportPath}, {"JUnitPath", o.JUnitPath}, {"HTMLPath", o.HTMLPath}} {
		if out.path != "" {
			if err := atomicfile.CheckWritable(out.path); err != nil {
				errs = append(errs, field.Invalid(out.field, out.path, err.Error()))
			}
		}
	}
	return errors.Join(errs...)
}

// Output formats of the summary on stdout.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// document is one command's result as the publishing pipeline sees it.
type document struct {
	artifact func(path string) error // nil: the command writes no report file
	page     func(io.Writer) error   // the HTML page; nil: none
	suite    Suite
	checks   []Check
	markdown func(io.Writer) error
	text     func(io.Writer) error
	json     any
	code     exitcode.Code
	// outputs are the step outputs written to $GITHUB_OUTPUT under GitHub
	// Actions, besides exit-code and the paths of the files written.
	outputs [][2]string
}

// Publish writes every output requested for a probe or run report and
// returns the verdict's exit code as a Silent error (the summary has
// explained it), or nil on a pass.
func Publish(r *report.Report, o Outputs) error {
	return publish(document{
		artifact: func(path string) error { return report.WriteFile(path, r) },
		page:     func(w io.Writer) error { return htmlreport.Write(w, r) },
		suite:    suiteOf(r),
		checks:   Checks(r),
		markdown: func(w io.Writer) error { return render.Markdown(w, r) },
		text:     func(w io.Writer) error { return render.Text(w, r) },
		json:     r,
		code:     r.Verdict.ExitCode,
		outputs: [][2]string{{"verdict", r.VerdictWord()}, {"failed", fmt.Sprint(r.Totals.Failed)},
			{"sent", fmt.Sprint(r.Totals.Sent)}},
	}, o)
}

// PublishDoctor writes every output requested for a doctor result: exit 1
// when a finding is at or above its fail-on severity.
func PublishDoctor(r report.DoctorResult, o Outputs) error {
	code := exitcode.OK
	if !r.Pass {
		code = exitcode.Failures
	}
	return publish(document{
		suite:    Suite{Name: fmt.Sprintf("rollprobe doctor %s/%s", r.Namespace, r.Deployment), Classname: "rollprobe.doctor", Started: time.Now()},
		checks:   DoctorChecks(r),
		markdown: func(w io.Writer) error { return render.DoctorMarkdown(w, r) },
		text:     func(w io.Writer) error { return render.DoctorText(w, r) },
		json:     r,
		code:     code,
	}, o)
}

// publish is the one pipeline: the artifacts first, then the GitHub step
// summary, the summary on stdout and the annotations last (they follow the
// summary in the log). An artifact that cannot be written (the disk filled
// up since Check) is reported on stderr and the rest is still written: the
// summary is the evidence of last resort. The exit code is then
// OutputFailed unless the verdict's own code takes precedence.
func publish(d document, o Outputs) error {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	outputFailed := false
	failed := func(err error) {
		fmt.Fprintf(o.Stderr, "rollprobe: %v\n", err)
		outputFailed = true
	}
	if o.ReportPath != "" && d.artifact != nil {
		if err := d.artifact(o.ReportPath); err != nil {
			failed(err)
		}
	}
	if o.HTMLPath != "" && d.page != nil {
		if err := atomicfile.Write(o.HTMLPath, d.page); err != nil {
			failed(err)
		}
	}
	if o.JUnitPath != "" {
		if err := atomicfile.Write(o.JUnitPath, func(w io.Writer) error { return WriteJUnitChecks(w, d.suite, d.checks) }); err != nil {
			failed(err)
		}
	}
	github := getenv("GITHUB_ACTIONS") == "true"
	if path := getenv("GITHUB_STEP_SUMMARY"); github && path != "" {
		capped := func(w io.Writer) error {
			var md bytes.Buffer
			if err := d.markdown(&md); err != nil {
				return err
			}
			_, err := w.Write(capSummary(md.Bytes()))
			return err
		}
		if err := appendFile(path, capped); err != nil {
			fmt.Fprintf(o.Stderr, "rollprobe: step summary: %v\n", err)
		}
	}
	var err error
	if o.Format == FormatJSON {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(d.json)
	} else {
		err = d.text(o.Stdout)
		if err == nil && o.ReportPath != "" && d.artifact != nil && !outputFailed {
			_, err = fmt.Fprintf(o.Stdout, "report: %s\n", o.ReportPath)
		}
		if err == nil && o.HTMLPath != "" && d.page != nil && !outputFailed {
			_, err = fmt.Fprintf(o.Stdout, "html: %s\n", o.HTMLPath)
		}
	}
	if github {
		_ = WriteCheckAnnotations(o.Stdout, d.checks)
	}
	code := d.code
	if outputFailed || err != nil {
		code = exitcode.WithOutputFailure(code)
	}
	if path := getenv("GITHUB_OUTPUT"); github && path != "" {
		outs := append([][2]string{{"exit-code", fmt.Sprint(int(code))}}, d.outputs...)
		for _, f := range []struct{ name, path string }{{"report", o.ReportPath}, {"junit", o.JUnitPath}, {"html", o.HTMLPath}} {
			if f.path != "" && !outputFailed {
				outs = append(outs, [2]string{f.name, f.path})
			}
		}
		if werr := appendFile(path, func(w io.Writer) error { return writeStepOutputs(w, outs) }); werr != nil {
			fmt.Fprintf(o.Stderr, "rollprobe: step outputs: %v\n", werr)
		}
	}
	if err != nil {
		return exitcode.With(code, fmt.Errorf("write summary: %w", err))
	}
	if code != exitcode.OK {
		return exitcode.Silent{Code: code}
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

// writeStepOutputs writes name=value lines for $GITHUB_OUTPUT; a value
// with a newline (a path could have one) uses the heredoc form with a
// delimiter the value does not contain.
func writeStepOutputs(w io.Writer, outs [][2]string) error {
	for _, o := range outs {
		var err error
		if strings.ContainsAny(o[1], "\r\n") {
			delim := "ROLLPROBE_EOF"
			for strings.Contains(o[1], delim) {
				delim += "_"
			}
			_, err = fmt.Fprintf(w, "%s<<%s\n%s\n%s\n", o[0], delim, o[1], delim)
		} else {
			_, err = fmt.Fprintf(w, "%s=%s\n", o[0], o[1])
		}
		if err != nil {
			return err
		}
	}
	return nil
}
