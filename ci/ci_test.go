package ci

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/internal/fixture"
	"github.com/rollprobe/rollprobe/internal/golden"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
)

func TestJUnit(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJUnit(&buf, fixture.NaiveRun()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "naive.junit.xml", buf.Bytes())
	var doc junitSuites
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	// dropped requests, SIGKILL, the propagation finding and the doctor's
	// error fail; the rollout itself completed.
	if doc.Tests != 5 || doc.Failures != 4 {
		t.Fatalf("tests %d failures %d", doc.Tests, doc.Failures)
	}
	for _, c := range doc.Suites[0].Cases {
		if c.Name == "rollout completed" && c.Failure != nil {
			t.Error("a complete rollout reported as failed")
		}
		if c.Name == "no dropped requests" && (c.Failure == nil || !strings.Contains(c.Failure.Body, "preStop")) {
			t.Errorf("the drop check must carry the counts and the fix: %+v", c.Failure)
		}
	}
}

// A run that could not be judged is an <error>, dropped requests a
// <failure>; the suite's properties name the version, target and revisions.
func TestJUnitErrorsAndProperties(t *testing.T) {
	decode := func(r *report.Report) junitSuite {
		t.Helper()
		var buf bytes.Buffer
		if err := WriteJUnit(&buf, r); err != nil {
			t.Fatal(err)
		}
		var doc junitSuites
		if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatalf("not XML: %v", err)
		}
		if doc.Errors != doc.Suites[0].Errors || doc.Failures != doc.Suites[0].Failures {
			t.Errorf("totals %d/%d disagree with the suite's %d/%d", doc.Errors, doc.Failures, doc.Suites[0].Errors, doc.Suites[0].Failures)
		}
		return doc.Suites[0]
	}
	caseNamed := func(s junitSuite, name string) junitCase {
		for _, c := range s.Cases {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no case %q in %+v", name, s.Cases)
		return junitCase{}
	}

	naive := decode(fixture.NaiveRun())
	props := map[string]string{}
	for _, p := range naive.Properties {
		props[p.Name] = p.Value
	}
	ro := fixture.NaiveRun().Rollout
	if props["rollprobe.target"] != fixture.NaiveRun().Target || props["rollprobe.old_revision"] != ro.OldRevision ||
		props["rollprobe.new_revision"] != ro.NewRevision || props["rollprobe.verdict"] != "fail" || props["rollprobe.version"] == "" {
		t.Errorf("properties %v", props)
	}
	if naive.Errors != 0 || caseNamed(naive, "no dropped requests").Failure == nil {
		t.Errorf("naive: errors %d, the drop check %+v", naive.Errors, caseNamed(naive, "no dropped requests"))
	}

	failed := fixture.NaiveRun()
	failed.Rollout.Status, failed.Rollout.Message = report.StatusFailed, "ProgressDeadlineExceeded"
	s := decode(failed)
	if c := caseNamed(s, "rollout completed"); c.Error == nil || c.Failure != nil || !strings.Contains(c.Error.Body, "ProgressDeadlineExceeded") {
		t.Errorf("a failed rollout: %+v", c)
	}
	if s.Errors != 1 || caseNamed(s, "no dropped requests").Failure == nil {
		t.Errorf("a failed rollout that dropped requests: errors %d", s.Errors)
	}

	inconclusive := fixture.NaiveRun()
	inconclusive.Totals.Failed, inconclusive.Findings = 0, nil
	inconclusive.Verdict = report.Verdict{Inconclusive: true, Reasons: []string{"achieved 80% of the target rate"}}
	s = decode(inconclusive)
	if c := caseNamed(s, "the run is conclusive"); c.Error == nil || !strings.Contains(c.Error.Body, "80%") || s.Failures != 0 || s.Errors != 1 {
		t.Errorf("inconclusive: %+v (failures %d errors %d)", c, s.Failures, s.Errors)
	}

	// An interrupted run that dropped nothing is not green.
	interrupted := fixture.NaiveRun()
	interrupted.Totals.Failed, interrupted.Findings = 0, nil
	interrupted.Verdict = report.Judge(report.Facts{Sent: 100, Interrupted: true}, report.Budget{})
	s = decode(interrupted)
	if c := caseNamed(s, "the run ran to its end"); c.Error == nil || !strings.Contains(c.Error.Message, "130") || s.Errors != 1 {
		t.Errorf("interrupted: %+v (failures %d errors %d)", c, s.Failures, s.Errors)
	}
}

// One output that cannot be written at the end makes the exit code 5, and
// every output that was written says so: the summary line, the report
// file and the JUnit state exit 5 and name the output.
func TestOutputFailureIsStatedEverywhere(t *testing.T) {
	dir := t.TempDir()
	o := Outputs{ReportPath: filepath.Join(dir, "r.json"), JUnitPath: filepath.Join(dir, "j.xml"),
		HTMLPath: filepath.Join(dir, "gone", "page.html"), Format: FormatText, Getenv: func(string) string { return "" }}
	var stdout, stderr bytes.Buffer
	o.Stdout, o.Stderr = &stdout, &stderr
	pass := fixture.NaiveRun()
	pass.Totals.Failed, pass.Findings = 0, nil
	pass.Verdict = report.Judge(report.Facts{Sent: 100}, report.Budget{})
	err := Publish(pass, o)
	if code := exitcode.Of(err); code != exitcode.OutputFailed {
		t.Fatalf("exit %d, want 5 (%v)", code, err)
	}
	if !strings.Contains(stdout.String(), "verdict: ERROR (exit 5)") || !strings.Contains(stdout.String(), "could not write the HTML page") {
		t.Errorf("the summary does not state exit 5 and why:\n%s", stdout.String())
	}
	if strings.Contains(stdout.String(), "\nhtml:") || !strings.Contains(stdout.String(), "report: "+o.ReportPath) {
		t.Errorf("the summary lists the wrong files:\n%s", stdout.String())
	}
	rep, err := report.ReadFile(o.ReportPath)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict.ExitCode != exitcode.OutputFailed || rep.Verdict.Pass || len(rep.Verdict.OutputsFailed) != 1 {
		t.Errorf("the report file's verdict %+v", rep.Verdict)
	}
	junit, _ := os.ReadFile(o.JUnitPath)
	if !strings.Contains(string(junit), `name="every output was written"`) || !strings.Contains(string(junit), "exit 5") {
		t.Errorf("the JUnit does not say so:\n%s", junit)
	}
}

// An artifact written to stdout reaches its reader once: when another
// output fails, the replaced files are written again with the amended
// verdict, but stdout (and a FIFO, a device) is not given a second document.
func TestOutputFailureDoesNotRepeatStdout(t *testing.T) {
	var stdout, stderr bytes.Buffer
	o := Outputs{ReportPath: Stdio, JUnitPath: filepath.Join(t.TempDir(), "gone", "j.xml"), Format: FormatText,
		Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	r := fixture.NaiveRun()
	if code := exitcode.Of(Publish(r, o)); code != exitcode.Failures {
		t.Fatalf("exit %d, want the verdict's 1", code)
	}
	dec := json.NewDecoder(&stdout)
	var first report.Report
	if err := dec.Decode(&first); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Error("stdout holds a second document after an output failed")
	}
	if !strings.Contains(stderr.String(), "could not write the JUnit XML") {
		t.Errorf("the summary on stderr does not say which output failed:\n%s", stderr.String())
	}
}

// "-" writes an artifact to standard output, and the summary then goes to
// standard error, so that standard output is the artifact alone.
func TestArtifactOnStdout(t *testing.T) {
	var stdout, stderr bytes.Buffer
	o := Outputs{ReportPath: Stdio, Format: FormatText, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	r := fixture.NaiveRun()
	_ = Publish(r, o)
	var back report.Report
	if err := json.Unmarshal(stdout.Bytes(), &back); err != nil || back.Totals.Sent != r.Totals.Sent {
		t.Fatalf("standard output is not the report alone: %v\n%.300s", err, stdout.String())
	}
	if !strings.Contains(stderr.String(), "verdict: FAIL (exit 1)") {
		t.Errorf("the summary did not go to stderr:\n%s", stderr.String())
	}
}

// Two outputs at one file are refused before anything runs, compared as
// files; the null device may take several, standard output only one.
func TestOutputsAtOneFile(t *testing.T) {
	dir := t.TempDir()
	same := filepath.Join(dir, "same.json")
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(same, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Outputs
		ok   bool
	}{
		{"one string", Outputs{ReportPath: same, JUnitPath: same}, false},
		{"through a link", Outputs{ReportPath: same, HTMLPath: link}, false},
		{"dot", Outputs{ReportPath: same, HTMLPath: filepath.Join(dir, ".", "same.json")}, false},
		{"two stdouts", Outputs{ReportPath: Stdio, JUnitPath: Stdio}, false},
		{"stdout and -o json", Outputs{ReportPath: Stdio, Format: FormatJSON}, false},
		{"the null device", Outputs{ReportPath: os.DevNull, JUnitPath: os.DevNull, HTMLPath: os.DevNull}, true},
		{"different files", Outputs{ReportPath: same, JUnitPath: filepath.Join(dir, "j.xml"), HTMLPath: Stdio}, true},
	} {
		err := tc.o.Check()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Check() = %v", tc.name, err)
		}
		if !tc.ok && tc.o.Format != FormatJSON && !strings.Contains(fmt.Sprint(err), "the same file as") {
			t.Errorf("%s: %v does not say why", tc.name, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the check left %d entries", len(entries))
	}
}

func TestAnnotations(t *testing.T) {
	var ann bytes.Buffer
	if err := WriteAnnotations(&ann, fixture.NaiveRun()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(ann.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "::error title=rollprobe: no dropped requests::20 of 3000") ||
		!strings.HasPrefix(lines[3], "::error title=rollprobe: doctor%3A no-prestop-hook::") {
		t.Fatalf("annotations:\n%s", ann.String())
	}
	for _, l := range lines {
		if strings.Count(l, "\n") > 0 || !strings.Contains(l, "%0A") {
			t.Errorf("multi-line messages must be escaped: %q", l)
		}
	}
	pass := fixture.NaiveRun()
	pass.Totals.Failed, pass.Findings, pass.Verdict = 0, nil, report.Verdict{Pass: true}
	ann.Reset()
	if err := WriteAnnotations(&ann, pass); err != nil || ann.Len() != 0 {
		t.Fatalf("a clean run annotates nothing: %q %v", ann.String(), err)
	}
}

// A doctor result is a JUnit case per check: a finding at or above fail-on
// fails its case, one below it passes with a warning.
func TestDoctorChecks(t *testing.T) {
	res := report.DoctorResult{FailOn: "error", Checks: []report.CheckStatus{
		{ID: doctor.NoPreStop, Title: "preStop", Status: "error"},
		{ID: doctor.NoPDB, Title: "pdb", Status: "warning"},
		{ID: doctor.NoReadiness, Title: "readiness", Status: "pass"},
	}, Findings: []report.Finding{
		{ID: doctor.NoPreStop, Severity: "error", Title: "no preStop", Fix: "sleep"},
		{ID: doctor.NoPDB, Severity: "warning", Title: "no PDB", Fix: "add one"},
	}}
	var buf bytes.Buffer
	if err := WriteJUnitChecks(&buf, Suite{Name: "doctor", Classname: "rollprobe.doctor"}, DoctorChecks(res)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, `tests="3" failures="1"`) || !strings.Contains(out, "warning: no PDB") {
		t.Fatalf("junit:\n%s", out)
	}
	res.FailOn = "warning"
	failed := 0
	for _, c := range DoctorChecks(res) {
		if c.Failed {
			failed++
		}
	}
	if failed != 2 {
		t.Fatalf("--fail-on warning: %d failed checks, want 2", failed)
	}
}

// A prober's progress line names it, its node, its rate and failures, and
// says when its results were lost.
func TestProberLine(t *testing.T) {
	got := ProberLine(fleet.Status{Pod: "p-0", Node: "n-1", Rate: 50, Sent: 500, Failed: 2, Lost: "stream gap"})
	if want := "prober p-0 on n-1: 50 req/s, completed 500, failed 2, LOST: stream gap"; !strings.Contains(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
}

// GitHub shows 10 annotations per level: 9 are written, and a tenth says
// how many more there are.
func TestAnnotationsCappedPerLevel(t *testing.T) {
	var checks []Check
	for i := range 14 {
		checks = append(checks, Check{Name: fmt.Sprintf("e%d", i), Failed: true, Message: "bad"})
	}
	for i := range 3 {
		checks = append(checks, Check{Name: fmt.Sprintf("w%d", i), Warning: true, Message: "meh"})
	}
	var out strings.Builder
	if err := WriteCheckAnnotations(&out, checks); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if n := strings.Count(s, "::error "); n != 10 || strings.Count(s, "::warning ") != 3 {
		t.Fatalf("%d errors, %d warnings:\n%s", n, strings.Count(s, "::warning "), s)
	}
	if !strings.Contains(s, "::error title=rollprobe: 5 more::5 more checks") || strings.Contains(s, "e9") {
		t.Fatalf("the tenth error annotation does not count the rest:\n%s", s)
	}
}

// A step summary over 1 MiB is cut at a line, with a note, to fit.
func TestStepSummaryCapped(t *testing.T) {
	line := strings.Repeat("x", 99) + "\n"
	md := []byte(strings.Repeat(line, 20000)) // 2 MB
	got := capSummary(md)
	if len(got) > maxStepSummary || !strings.HasSuffix(string(got), "The JSON report has everything.*\n") {
		t.Fatalf("%d bytes, ends %q", len(got), got[max(0, len(got)-80):])
	}
	if small := []byte("# ok\n"); string(capSummary(small)) != string(small) {
		t.Fatal("a small summary was changed")
	}
}

// A value with a newline takes GitHub's heredoc form, with a delimiter the
// value does not contain.
func TestStepOutputs(t *testing.T) {
	var b bytes.Buffer
	if err := writeStepOutputs(&b, [][2]string{{"verdict", "pass"}, {"report", "odd\nROLLPROBE_EOF\nname.json"}}); err != nil {
		t.Fatal(err)
	}
	want := "verdict=pass\nreport<<ROLLPROBE_EOF_\nodd\nROLLPROBE_EOF\nname.json\nROLLPROBE_EOF_\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

// The drop check judges by the run's budget, the rate included, as the
// verdict does: a run within --max-failure-rate passes the check too, and
// each path is judged apart.
func TestDropCheckFollowsTheBudget(t *testing.T) {
	totals := report.Totals{Sent: 1000, Failed: 3, ByClass: map[string]uint64{"refused": 3}}
	for _, tc := range []struct {
		name   string
		config report.Config
		failed bool
	}{
		{"no budget", report.Config{}, true},
		{"within the count", report.Config{MaxFailures: 3}, false},
		{"within the rate", report.Config{MaxFailureRate: 0.01}, false},
		{"over the rate", report.Config{MaxFailureRate: 0.001}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &report.Report{Command: "probe", Totals: totals, Config: tc.config}
			checks := Checks(r)
			if checks[0].Name != "no dropped requests" || checks[0].Failed != tc.failed {
				t.Fatalf("check %+v, want failed %v", checks[0], tc.failed)
			}
			r.Paths = []report.PathReport{{Name: "svc", Totals: report.Totals{Sent: 1000}}, {Name: "edge", Totals: totals}}
			checks = Checks(r)
			if checks[0].Name != "no dropped requests: svc" || checks[0].Failed || checks[1].Name != "no dropped requests: edge" || checks[1].Failed != tc.failed {
				t.Fatalf("per-path checks %+v, want svc passing and edge failed %v", checks[:2], tc.failed)
			}
		})
	}
}

// A failed drop check says where its failures fell: each path's own
// outages, at most maxOutageLines of them, the rest counted.
func TestDropCheckListsItsOutages(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	outage := func(sec int, pod string) report.Outage {
		return report.Outage{Start: t0.Add(time.Duration(sec) * time.Second), End: t0.Add(time.Duration(sec) * time.Second), Count: 1,
			Pods: []report.OutagePod{{Pod: pod, Failures: 1, Certain: 1}}}
	}
	var many []report.Outage
	for i := range maxOutageLines + 2 {
		many = append(many, outage(10+2*i, fmt.Sprintf("web-%d", i)))
	}
	totals := report.Totals{Sent: 1000, Failed: 7, ByClass: map[string]uint64{"refused": 7}}
	r := &report.Report{Command: "run", StartedAt: t0, Totals: totals,
		Paths: []report.PathReport{{Name: "svc", Totals: totals, Outages: many}, {Name: "edge", Totals: totals, Outages: many[:1]}}}
	checks := Checks(r)
	svc, edge := checks[0].Detail, checks[1].Detail
	if strings.Count(svc, "\noutage ") != maxOutageLines || !strings.Contains(svc, "outage +10.00s for 0.00s (1 failed; on web-0 1 (certain))") ||
		!strings.Contains(svc, "... and 2 more outages") {
		t.Errorf("svc's detail:\n%s", svc)
	}
	if strings.Count(edge, "\noutage ") != 1 || strings.Contains(edge, "more outages") {
		t.Errorf("edge's detail:\n%s", edge)
	}
}
