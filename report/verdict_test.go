package report

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report/exitcode"
)

func TestJudge(t *testing.T) {
	clean := Facts{Sent: 1000, TargetRate: 100, AchievedRate: 100}
	with := func(mut func(*Facts)) Facts { f := clean; mut(&f); return f }
	tests := []struct {
		name   string
		facts  Facts
		budget Budget
		want   exitcode.Code
		reason string
	}{
		{"clean", clean, Budget{}, exitcode.OK, ""},
		{"one failure", with(func(f *Facts) { f.Failed = 1 }), Budget{}, exitcode.Failures, "1 of 1000 requests failed"},
		{"within absolute budget", with(func(f *Facts) { f.Failed = 3 }), Budget{MaxFailures: 3}, exitcode.OK, ""},
		{"within rate budget", with(func(f *Facts) { f.Failed = 5 }), Budget{MaxFailureRate: 0.01}, exitcode.OK, ""},
		{"above rate budget", with(func(f *Facts) { f.Failed = 20 }), Budget{MaxFailureRate: 0.01}, exitcode.Failures, "above the budget"},
		{"rate too low", with(func(f *Facts) { f.AchievedRate = 90 }), Budget{}, exitcode.Inconclusive, "below 95%"},
		{"rate just enough", with(func(f *Facts) { f.AchievedRate = 95 }), Budget{}, exitcode.OK, ""},
		{"closed model has no rate", with(func(f *Facts) { f.TargetRate, f.AchievedRate = 0, 1 }), Budget{}, exitcode.OK, ""},
		{"local errors", with(func(f *Facts) { f.LocalErrors = 1 }), Budget{}, exitcode.Inconclusive, "local errors"},
		{"failures beat inconclusive", with(func(f *Facts) { f.Failed, f.LocalErrors = 2, 1 }), Budget{}, exitcode.Failures, "local errors"},
		{"rollout failure beats failures", with(func(f *Facts) { f.Failed, f.RolloutFailed = 2, "ProgressDeadlineExceeded" }), Budget{}, exitcode.RolloutFailed, "rollout failed"},
		{"interrupt beats all", with(func(f *Facts) { f.Failed, f.Interrupted = 2, true }), Budget{}, exitcode.Interrupted, "interrupted"},
		{"nothing sent", Facts{}, Budget{}, exitcode.Inconclusive, "no request was sent"},
		{"mostly redirects", with(func(f *Facts) { f.OK, f.Redirects = 1000, 900 }), Budget{}, exitcode.Inconclusive, "900 of 1000 ok responses were redirects"},
		{"redirects asked for", with(func(f *Facts) { f.OK, f.Redirects = 1000, 1000 }), Budget{RedirectsExpected: true}, exitcode.OK, ""},
		{"some redirects", with(func(f *Facts) { f.OK, f.Redirects = 1000, 500 }), Budget{}, exitcode.OK, ""},
		{"failures beat redirects", with(func(f *Facts) { f.OK, f.Redirects, f.Failed = 900, 900, 100 }), Budget{}, exitcode.Failures, "redirects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Judge(tt.facts, tt.budget)
			if v.ExitCode != tt.want || v.Pass != (tt.want == exitcode.OK) {
				t.Fatalf("exit %d pass %v, want %d; reasons %q", v.ExitCode, v.Pass, tt.want, v.Reasons)
			}
			all := strings.Join(v.Reasons, "; ")
			if tt.reason == "" && len(v.Reasons) > 0 {
				t.Fatalf("a passing run with reasons %q", all)
			}
			if !strings.Contains(all, tt.reason) {
				t.Fatalf("reasons %q lack %q", all, tt.reason)
			}
		})
	}
}

// A prober whose results were lost makes a clean run inconclusive, and the
// reason names it; failures above budget still come first.
func TestLostProberIsInconclusive(t *testing.T) {
	lost := []string{"prober p-1 on node n-2 lost results at +4.0s: stream gap"}
	v := Judge(Facts{Sent: 100, TargetRate: 10, AchievedRate: 10, LostProbers: lost}, Budget{})
	if v.Pass || !v.Inconclusive || v.ExitCode != exitcode.Inconclusive || !strings.Contains(strings.Join(v.Reasons, " "), "p-1 on node n-2") {
		t.Fatalf("%+v", v)
	}
	v = Judge(Facts{Sent: 100, Failed: 3, TargetRate: 10, AchievedRate: 10, LostProbers: lost}, Budget{})
	if v.ExitCode != exitcode.Failures {
		t.Fatalf("failures above budget with a lost prober: exit %d", v.ExitCode)
	}
}

// With several paths the budget applies to each: a path over it fails the
// run even when the run's total is within what one path may have, and a
// path that could not hold its rate makes the run inconclusive.
func TestJudgePaths(t *testing.T) {
	ok := PathFacts{Name: "svc", Sent: 1000, OK: 1000, TargetRate: 100, AchievedRate: 100}
	dropped := PathFacts{Name: "edge", Sent: 1000, OK: 997, Failed: 3, TargetRate: 100, AchievedRate: 100}
	slow := PathFacts{Name: "edge", Sent: 500, OK: 500, TargetRate: 100, AchievedRate: 50}
	for _, tc := range []struct {
		name   string
		paths  []PathFacts
		budget Budget
		code   exitcode.Code
		reason string
	}{
		{"one path drops", []PathFacts{ok, dropped}, Budget{}, exitcode.Failures, "edge: 3 of 1000 requests failed, above the budget of 0"},
		{"within each path's budget", []PathFacts{ok, dropped}, Budget{MaxFailures: 3}, exitcode.OK, ""},
		{"each path is judged apart", []PathFacts{dropped, {Name: "svc", Sent: 1000, OK: 997, Failed: 3, TargetRate: 100, AchievedRate: 100}},
			Budget{MaxFailures: 4}, exitcode.OK, ""},
		{"a path behind its rate", []PathFacts{ok, slow}, Budget{}, exitcode.Inconclusive, "edge: achieved 50.0 req/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Facts{Paths: tc.paths}
			for _, p := range tc.paths {
				f.Sent, f.OK, f.Failed = f.Sent+p.Sent, f.OK+p.OK, f.Failed+p.Failed
			}
			v := Judge(f, tc.budget)
			if v.ExitCode != tc.code {
				t.Fatalf("exit %d, want %d: %v", v.ExitCode, tc.code, v.Reasons)
			}
			if tc.reason != "" && (len(v.Reasons) == 0 || !strings.HasPrefix(v.Reasons[0], tc.reason)) {
				t.Errorf("reasons %q, want one starting %q", v.Reasons, tc.reason)
			}
		})
	}
}
