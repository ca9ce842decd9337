package ci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
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

// Stdio is the path that means standard output: the artifact is written
// there, and the summary then goes to standard error, so that standard
// output carries the artifact alone.
const Stdio = "-"

// Check reports, before anything is sent or changed, why an output could
// not be written (a missing directory, a directory at the path, a name too
// long), and refuses two outputs at one file (compared as files: through
// links, directories resolved; the null device may take several) or two
// on standard output: a usage error for the command, exit 2. Each problem
// is a *field.Error naming the field (ReportPath, JUnitPath, HTMLPath), for
// the command to rename.
func (o Outputs) Check() error {
	var errs []error
	type out struct{ field, path string }
	var outs []out
	for _, f := range o.files() {
		if f.path != "" {
			outs = append(outs, out{f.field, f.path})
		}
	}
	for i, a := range outs {
		if a.path == Stdio {
			if o.Format == FormatJSON {
				errs = append(errs, field.Invalid(a.field, a.path, "standard output already carries the summary as JSON"))
			}
		} else if err := atomicfile.CheckWritable(a.path); err != nil {
			errs = append(errs, field.Invalid(a.field, a.path, err.Error()))
			continue
		}
		for _, b := range outs[:i] {
			same := a.path == Stdio && b.path == Stdio
			if a.path != Stdio && b.path != Stdio && !atomicfile.SameFile(a.path, os.DevNull) {
				same = atomicfile.SameFile(a.path, b.path)
			}
			if same {
				errs = append(errs, field.Conflict(a.field, a.path, b.field, "the same file as "+field.OtherPlaceholder+": one would overwrite the other"))
			}
		}
	}
	return errors.Join(errs...)
}

// ToStdout says whether an artifact is written to standard output (the
// summary then goes to standard error, and no dashboard may take it).
func (o Outputs) ToStdout() bool {
	for _, f := range o.files() {
		if f.path == Stdio {
			return true
		}
	}
	return false
}

// file is one artifact output: its field, path, name in messages, and
// short name (the summary's last lines, $GITHUB_OUTPUT).
type file struct{ field, path, label, short string }

func (o Outputs) files() []file {
	return []file{{"ReportPath", o.ReportPath, "the JSON report", "report"}, {"HTMLPath", o.HTMLPath, "the HTML page", "html"},
		{"JUnitPath", o.JUnitPath, "the JUnit XML", "junit"}}
}

// Output formats of the summary on stdout.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// document is one command's result as the publishing pipeline sees it.
type document struct {
	artifact func(w io.Writer) error // the JSON report; nil: the command writes no report file
	page     func(io.Writer) error   // the HTML page; nil: none
	junit    func(io.Writer) error
	checks   []Check
	markdown func(io.Writer) error
	text     func(io.Writer) error
	json     any
	code     exitcode.Code
	// outputs are the step outputs written to $GITHUB_OUTPUT under GitHub
	// Actions, besides exit-code and the paths of the files written.
	outputs [][2]string
	// report is the probe or run report the document renders (nil for
	// doctor); amend, when set, is the document once outputs could not be
	// written (each named in failed): its report's verdict, JUnit and
	// summary then state the real exit code. nil: only the code changes.
	report *report.Report
	amend  func(failed []string) document
}

func reportDocument(r *report.Report) document {
	return document{
		artifact: func(w io.Writer) error { return report.Encode(w, r) },
		page:     func(w io.Writer) error { return htmlreport.Write(w, r) },
		junit:    func(w io.Writer) error { return WriteJUnit(w, r) },
		checks:   Checks(r),
		markdown: func(w io.Writer) error { return render.Markdown(w, r) },
		text:     func(w io.Writer) error { return render.Text(w, r) },
		json:     r,
		code:     r.Verdict.ExitCode,
		outputs: [][2]string{{"verdict", r.VerdictWord()}, {"failed", fmt.Sprint(r.Totals.Failed)},
			{"sent", fmt.Sprint(r.Totals.Sent)}},
		report: r,
		amend: func(failed []string) document {
			amended := *r
			amended.Verdict = r.Verdict.WithOutputsFailed(failed)
			return reportDocument(&amended)
		},
	}
}

// Publish writes every output requested for a probe or run report and
// returns the verdict's exit code as a Silent error (the summary has
// explained it), or nil on a pass.
func Publish(r *report.Report, o Outputs) error {
	p := NewPublication(r, o)
	p.WriteFiles()
	return p.Finish()
}

// PublishDoctor writes every output requested for a doctor result: exit 1
// when a finding is at or above its fail-on severity.
func PublishDoctor(r report.DoctorResult, o Outputs) error {
	code := exitcode.OK
	if !r.Pass {
		code = exitcode.Failures
	}
	suite := Suite{Name: "rollprobe doctor " + r.Workload(), Classname: "rollprobe.doctor", Started: time.Now()}
	checks := DoctorChecks(r)
	p := &Publication{o: o, d: document{
		junit:    func(w io.Writer) error { return WriteJUnitChecks(w, suite, checks) },
		checks:   checks,
		markdown: func(w io.Writer) error { return render.DoctorMarkdown(w, r) },
		text:     func(w io.Writer) error { return render.DoctorText(w, r) },
		json:     r,
		code:     code,
	}}
	p.WriteFiles()
	return p.Finish()
}

// Publication is one result on its way out, in two steps: WriteFiles (the
// artifacts and the GitHub step summary: what must exist once the run has
// ended, before anything says it does) and Finish (the summary on stdout,
// the annotations, the step outputs). A dashboard shows its end screen
// between the two, naming only the files written and the real exit code.
type Publication struct {
	o       Outputs
	d       document
	written []Written
	failed  []string
	wrote   bool
}

// Written is an output that was written: its flag's field, its label in
// the summary ("report", "html", "junit") and its path.
type Written struct{ Field, Label, Path string }

// NewPublication prepares the outputs of a probe or run report.
func NewPublication(r *report.Report, o Outputs) *Publication {
	return &Publication{o: o, d: reportDocument(r)}
}

// WriteFiles writes the report, the HTML page and the JUnit XML, then the
// GitHub step summary. An output that cannot be written (the disk filled
// up since Check) is reported on stderr and the rest is still written;
// the verdict then names it and the outputs already written are written
// again with that verdict, so none of them claims an exit code the
// process will not have.
func (p *Publication) WriteFiles() {
	if p.wrote {
		return
	}
	p.wrote = true
	type artifact struct {
		file
		write func(io.Writer) error
	}
	artifactsOf := func(d document) []artifact {
		var as []artifact
		for _, f := range p.o.files() {
			var w func(io.Writer) error
			switch f.field {
			case "ReportPath":
				w = d.artifact
			case "HTMLPath":
				w = d.page
			case "JUnitPath":
				w = d.junit
			}
			if f.path != "" && w != nil {
				as = append(as, artifact{f, w})
			}
		}
		return as
	}
	var ok []artifact
	for _, a := range artifactsOf(p.d) {
		if err := p.writeOne(a.path, a.write); err != nil {
			fmt.Fprintf(p.o.Stderr, "rollprobe: %s: %v\n", a.label, err)
			p.failed = append(p.failed, fmt.Sprintf("%s %s: %v", a.label, a.path, errors.Unwrap(err)))
		} else {
			ok = append(ok, a)
		}
	}
	if len(p.failed) > 0 {
		if p.d.amend != nil {
			p.d = p.d.amend(p.failed)
		}
		p.d.code = exitcode.WithOutputFailure(p.d.code)
		// Replaced files are written again with the amended verdict; what
		// was written in place (stdout, a FIFO, a device) already reached
		// its reader, and a second document there would corrupt it.
		again := ok
		ok = nil
		for _, a := range artifactsOf(p.d) {
			i := slices.IndexFunc(again, func(b artifact) bool { return b.field == a.field })
			if i < 0 {
				continue
			}
			if a.path == Stdio || atomicfile.InPlace(a.path) {
				ok = append(ok, again[i])
				continue
			}
			if err := p.writeOne(a.path, a.write); err != nil {
				fmt.Fprintf(p.o.Stderr, "rollprobe: %s: %v\n", a.label, err)
				continue
			}
			ok = append(ok, a)
		}
	}
	for _, a := range ok {
		p.written = append(p.written, Written{a.field, a.short, a.path})
	}
	getenv := p.getenv()
	if path := getenv("GITHUB_STEP_SUMMARY"); getenv("GITHUB_ACTIONS") == "true" && path != "" {
		capped := func(w io.Writer) error {
			var md bytes.Buffer
			if err := p.d.markdown(&md); err != nil {
				return err
			}
			_, err := w.Write(capSummary(md.Bytes()))
			return err
		}
		if err := appendFile(path, capped); err != nil {
			fmt.Fprintf(p.o.Stderr, "rollprobe: step summary: %v\n", err)
		}
	}
}

// writeOne writes one artifact: to standard output for "-", else through
// atomicfile (in place for devices and FIFOs).
func (p *Publication) writeOne(path string, write func(io.Writer) error) error {
	if path == Stdio {
		if err := write(p.o.Stdout); err != nil {
			return fmt.Errorf("write standard output: %w", err)
		}
		return nil
	}
	return atomicfile.Write(path, write)
}

// Code is the exit code the process will have once Finish has printed the
// summary: the verdict's, or OutputFailed when an output could not be
// written and nothing takes precedence.
func (p *Publication) Code() exitcode.Code { return p.d.code }

// Written is every artifact written, in the order report, HTML, JUnit.
func (p *Publication) Written() []Written { return p.written }

// Report is the probe or run report as the outputs state it: its verdict
// amended when an output could not be written (nil for doctor).
func (p *Publication) Report() *report.Report { return p.d.report }

// Finish writes what is left (WriteFiles first if it was not called): the
// summary (on stdout, or stderr when an artifact went to stdout), the
// GitHub annotations and step outputs. It returns the exit code as a
// Silent error (the summary has explained it), or nil on a pass.
func (p *Publication) Finish() error {
	p.WriteFiles()
	o, d := p.o, p.d
	summary := o.Stdout
	if o.ToStdout() {
		summary = o.Stderr
	}
	var err error
	if o.Format == FormatJSON {
		enc := json.NewEncoder(summary)
		enc.SetIndent("", "  ")
		err = enc.Encode(d.json)
	} else {
		err = d.text(summary)
		for _, w := range p.written {
			if err == nil && w.Path != Stdio {
				_, err = fmt.Fprintf(summary, "%s: %s\n", w.Label, w.Path)
			}
		}
	}
	getenv := p.getenv()
	github := getenv("GITHUB_ACTIONS") == "true"
	if github {
		_ = WriteCheckAnnotations(summary, d.checks)
	}
	code := d.code
	if err != nil {
		code = exitcode.WithOutputFailure(code)
	}
	if path := getenv("GITHUB_OUTPUT"); github && path != "" {
		outs := append([][2]string{{"exit-code", fmt.Sprint(int(code))}}, d.outputs...)
		for _, w := range p.written {
			outs = append(outs, [2]string{w.Label, w.Path})
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

func (p *Publication) getenv() func(string) string {
	if p.o.Getenv != nil {
		return p.o.Getenv
	}
	return os.Getenv
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
