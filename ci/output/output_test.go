package output

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/internal/golden"
	"github.com/rollprobe/rollprobe/report"
)

var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

// naiveRun is a hand-made run report: a rollout that dropped requests and
// SIGKILLed a pod.
func naiveRun() *report.Report {
	trig, done, ready := t0.Add(5*time.Second), t0.Add(9*time.Second), t0.Add(4500*time.Millisecond)
	killed := int32(137)
	return &report.Report{
		Schema: report.Schema, Command: "run", Target: "http://10.96.0.42/", StartedAt: t0, DurationS: 15,
		Totals:    report.Totals{Sent: 3000, OK: 2980, Failed: 20, ByClass: map[string]uint64{"ok": 2980, "refused": 12, "connect_timeout": 8, "dns": 0}},
		LatencyMS: report.Quantiles{P50: 1.02, P99: 4.5, Max: 2001},
		Prober:    report.ProberStats{TargetRate: 200, AchievedRate: 199.9},
		Rollout: &report.Rollout{Namespace: "prod", Deployment: "web", Service: "web", Trigger: "restart", Status: "complete",
			OldRevision: "aaa", NewRevision: "bbb", TriggeredAt: &trig, OldPodsGoneAt: &done},
		Outages: []report.Outage{{Start: t0.Add(5200 * time.Millisecond), DurationS: 0.9, Count: 20, Context: "while terminating: web-aaa-1"}},
		Findings: []report.Finding{
			{ID: "stops-accepting-before-endpoints-propagate", Severity: "error", Title: "pods stopped accepting connections while traffic was still routed to them",
				Evidence: []string{"20 requests failed (connect_timeout 8, refused 12)"}, Fix: "give the container a preStop hook that waits at least 3s"},
			{ID: "grace-period-too-short", Severity: "warning", Title: "containers were SIGKILLed at the end of their grace period",
				Evidence: []string{"1 pods ended with exit code 137"}, Fix: "raise terminationGracePeriodSeconds"},
			{ID: "no-prestop-hook", Severity: "error", Title: "no preStop hook: the app is told to stop while traffic is still routed to it",
				Evidence: []string{"container(s) app: no lifecycle.preStop"}, Fix: "lifecycle.preStop.sleep.seconds: 5", Source: "doctor"},
		},
		Pods: []report.PodTraffic{
			{Pod: "web-aaa-1", Revision: "aaa", Served: 1490, ServedAfterDeletion: 40, DeletedAt: &trig, ExitCode: &killed},
			{Pod: "web-bbb-1", Revision: "bbb", Served: 1490, ReadyAt: &ready},
		},
		Verdict: ci.Verdict{ExitCode: ci.ExitFailures, Reasons: []string{"20 of 3000 requests failed, above the budget of 0"}},
	}
}

// The text summary of a run: rollout, outages, per-pod table, findings
// (the doctor's marked as static).
func TestRunText(t *testing.T) {
	var buf bytes.Buffer
	if err := report.WriteText(&buf, naiveRun()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "naive.txt", buf.Bytes())
}

func TestJUnit(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJUnit(&buf, naiveRun()); err != nil {
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

func TestMarkdownAndAnnotations(t *testing.T) {
	var md, ann bytes.Buffer
	if err := WriteMarkdown(&md, naiveRun()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "naive.summary.md", md.Bytes())
	if err := WriteAnnotations(&ann, naiveRun()); err != nil {
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
	pass := naiveRun()
	pass.Totals.Failed, pass.Findings, pass.Verdict = 0, nil, ci.Verdict{Pass: true}
	ann.Reset()
	if err := WriteAnnotations(&ann, pass); err != nil || ann.Len() != 0 {
		t.Fatalf("a clean run annotates nothing: %q %v", ann.String(), err)
	}
}

// A doctor result is a JUnit case per check: a finding at or above fail-on
// fails its case, one below it passes with a warning.
func TestDoctorChecks(t *testing.T) {
	res := doctor.Result{FailOn: "error", Checks: []doctor.CheckStatus{
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
