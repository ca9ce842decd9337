// Package ci is rollprobe's face for CI systems: the gate. It writes the
// outputs a pipeline reads (JUnit XML, the report artifact, under GitHub
// Actions a step summary and ::error/::warning annotations), prints the
// plain progress lines CI logs show, and turns the verdict into the exit
// code, all through one Publish for probe, run and doctor. It reads the
// contract (package report) and renders through report/render.
package ci

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/render"
)

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     float64      `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Time       float64         `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Error     *junitFailure `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

// Check is one pass/fail statement about a run, shared by JUnit and the
// GitHub annotations.
type Check struct {
	Name   string
	Failed bool
	// Error: the check failed because the run could not be judged (the
	// rollout failed, the prober could not hold its rate), not because
	// requests dropped; JUnit says <error> instead of <failure>.
	Error   bool
	Warning bool // not a failure, but worth a look
	Message string
	Detail  string
}

// maxOutageLines is how many outages a drop check's detail lists.
const maxOutageLines = 5

// Checks derives the checks of a report: no dropped requests, the rollout
// completed (run), no SIGKILL during termination (run), and one per finding
// (the doctor's static findings named "doctor: ID"; an error fails).
func Checks(r *report.Report) []Check {
	var checks []Check
	// One drop check per path when the run probed several: a path that
	// dropped fails its own case, whatever the others did.
	type traffic struct {
		suffix  string
		totals  report.Totals
		outages []report.Outage
	}
	runs := []traffic{{"", r.Totals, r.Outages}}
	if len(r.Paths) > 1 {
		runs = runs[:0]
		for _, p := range r.Paths {
			runs = append(runs, traffic{": " + p.Name, p.Totals, p.Outages})
		}
	}
	budget := report.Budget{MaxFailures: r.Config.MaxFailures, MaxFailureRate: r.Config.MaxFailureRate}
	for _, t := range runs {
		drop := Check{Name: "no dropped requests" + t.suffix, Message: fmt.Sprintf("%d of %d requests failed", t.totals.Failed, t.totals.Sent)}
		if budget.Exceeded(t.totals.Sent, t.totals.Failed) {
			drop.Failed = true
			drop.Detail = render.ClassCounts(t.totals.ByClass)
			// Where they fell: the outages, and the pods their failures
			// were put on (a run's).
			for i, o := range t.outages {
				if i == maxOutageLines {
					drop.Detail += fmt.Sprintf("\n... and %d more outages", len(t.outages)-i)
					break
				}
				drop.Detail += "\noutage " + render.OutageLine(r, o)
			}
			if len(r.Findings) > 0 {
				drop.Detail += "\nfix: " + r.Findings[0].Fix
			}
		}
		checks = append(checks, drop)
	}
	if ro := r.Rollout; ro != nil {
		c := Check{Name: "rollout completed", Message: fmt.Sprintf("rollout %s of %s", ro.Status, ro.Workload())}
		switch ro.Status {
		case report.StatusComplete:
		case report.StatusNoChange: // an idempotent deploy: nothing to prove, nothing failed
			c.Warning, c.Message = true, ro.Message
		default:
			c.Failed, c.Error, c.Detail = true, true, ro.Message
		}
		checks = append(checks, c)
		kill := Check{Name: "no SIGKILL during termination", Message: "no container was killed at the end of its grace period"}
		for _, f := range r.Findings {
			if f.ID == analysis.GraceTooShort {
				kill.Failed, kill.Message, kill.Detail = true, f.Title, strings.Join(f.Evidence, "\n")+"\nfix: "+f.Fix+"\ndocs: "+report.FindingDoc(f.ID)
			}
		}
		checks = append(checks, kill)
	}
	for _, f := range r.Findings {
		if f.ID == analysis.GraceTooShort {
			continue
		}
		name := "finding: " + f.ID
		if f.Source == report.SourceDoctor {
			name = "doctor: " + f.ID
		}
		checks = append(checks, Check{
			Name: name, Failed: f.Severity == report.SeverityError, Warning: f.Severity == report.SeverityWarning,
			Message: f.Title, Detail: strings.Join(f.Evidence, "\n") + "\nfix: " + f.Fix + "\ndocs: " + report.FindingDoc(f.ID),
		})
	}
	if r.Verdict.Inconclusive {
		checks = append(checks, Check{Name: "the run is conclusive", Failed: true, Error: true, Message: "inconclusive",
			Detail: strings.Join(r.Verdict.Reasons, "\n")})
	}
	// An interrupted run proved nothing about the part it did not see: an
	// error, never a green suite.
	if r.Verdict.Interrupted {
		checks = append(checks, Check{Name: "the run ran to its end", Failed: true, Error: true,
			Message: fmt.Sprintf("interrupted (exit %d)", r.Verdict.ExitCode), Detail: strings.Join(r.Verdict.Reasons, "\n")})
	}
	if len(r.Verdict.OutputsFailed) > 0 {
		checks = append(checks, Check{Name: "every output was written", Failed: true, Error: true,
			Message: fmt.Sprintf("%d output(s) could not be written (exit %d)", len(r.Verdict.OutputsFailed), r.Verdict.ExitCode),
			Detail:  strings.Join(r.Verdict.OutputsFailed, "\n")})
	}
	return checks
}

// WriteJUnit writes the report's checks as JUnit XML.
func WriteJUnit(w io.Writer, r *report.Report) error {
	return WriteJUnitChecks(w, suiteOf(r), Checks(r))
}

// suiteOf is the JUnit suite of a probe or run report.
func suiteOf(r *report.Report) Suite {
	return Suite{Name: "rollprobe " + r.Command + " " + r.Target, Classname: "rollprobe." + r.Command,
		Time: r.DurationS, Started: r.StartedAt, Properties: properties(r)}
}

// Suite names a JUnit test suite.
type Suite struct {
	Name, Classname string
	Time            float64 // seconds
	Started         time.Time
	// Properties go into the suite's <properties>, in order.
	Properties [][2]string
}

// properties are what a CI dashboard shows beside the results: the tool's
// version, the target, and for run the Deployment and its revisions.
func properties(r *report.Report) [][2]string {
	props := [][2]string{{"rollprobe.version", r.Tool.Version}, {"rollprobe.command", r.Command}, {"rollprobe.target", r.Target},
		{"rollprobe.verdict", r.VerdictWord()}}
	for _, p := range r.Paths {
		props = append(props, [2]string{"rollprobe.path." + p.Name, p.Target})
	}
	if ro := r.Rollout; ro != nil {
		props = append(props, [2]string{"rollprobe." + strings.ToLower(ro.WorkloadKind()), ro.Namespace + "/" + ro.WorkloadName()},
			[2]string{"rollprobe.old_revision", ro.OldRevision}, [2]string{"rollprobe.new_revision", ro.NewRevision},
			[2]string{"rollprobe.rollout_status", string(ro.Status)})
	}
	return props
}

// WriteJUnitChecks writes checks as one JUnit test suite: a failed check is
// a failure, a warning passes with the warning in its output.
func WriteJUnitChecks(w io.Writer, s Suite, checks []Check) error {
	suite := junitSuite{Name: s.Name, Time: s.Time, Timestamp: s.Started.UTC().Format(time.RFC3339)}
	for _, p := range s.Properties {
		suite.Properties = append(suite.Properties, junitProperty{Name: p[0], Value: p[1]})
	}
	for _, c := range checks {
		tc := junitCase{Name: c.Name, Classname: s.Classname}
		switch {
		case c.Failed && c.Error:
			tc.Error = &junitFailure{Message: c.Message, Type: "rollprobe", Body: c.Detail}
			suite.Errors++
		case c.Failed:
			tc.Failure = &junitFailure{Message: c.Message, Type: "rollprobe", Body: c.Detail}
			suite.Failures++
		case c.Warning:
			tc.SystemOut = "warning: " + c.Message + "\n" + c.Detail
		default:
			tc.SystemOut = c.Message
		}
		suite.Cases = append(suite.Cases, tc)
	}
	suite.Tests = len(suite.Cases)
	doc := junitSuites{Name: "rollprobe", Tests: suite.Tests, Failures: suite.Failures, Errors: suite.Errors, Time: suite.Time, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}
