package ci

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	clean := Facts{Sent: 1000, TargetRate: 100, AchievedRate: 100}
	with := func(mut func(*Facts)) Facts { f := clean; mut(&f); return f }
	tests := []struct {
		name   string
		facts  Facts
		budget Budget
		want   ExitCode
		reason string
	}{
		{"clean", clean, Budget{}, ExitOK, ""},
		{"one failure", with(func(f *Facts) { f.Failed = 1 }), Budget{}, ExitFailures, "1 of 1000 requests failed"},
		{"within absolute budget", with(func(f *Facts) { f.Failed = 3 }), Budget{MaxFailures: 3}, ExitOK, ""},
		{"within rate budget", with(func(f *Facts) { f.Failed = 5 }), Budget{MaxFailureRate: 0.01}, ExitOK, ""},
		{"above rate budget", with(func(f *Facts) { f.Failed = 20 }), Budget{MaxFailureRate: 0.01}, ExitFailures, "above the budget"},
		{"rate too low", with(func(f *Facts) { f.AchievedRate = 90 }), Budget{}, ExitInconclusive, "below 95%"},
		{"rate just enough", with(func(f *Facts) { f.AchievedRate = 95 }), Budget{}, ExitOK, ""},
		{"closed model has no rate", with(func(f *Facts) { f.TargetRate, f.AchievedRate = 0, 1 }), Budget{}, ExitOK, ""},
		{"local errors", with(func(f *Facts) { f.LocalErrors = 1 }), Budget{}, ExitInconclusive, "local errors"},
		{"failures beat inconclusive", with(func(f *Facts) { f.Failed, f.LocalErrors = 2, 1 }), Budget{}, ExitFailures, "local errors"},
		{"rollout failure beats failures", with(func(f *Facts) { f.Failed, f.RolloutFailed = 2, "ProgressDeadlineExceeded" }), Budget{}, ExitRolloutFailed, "rollout failed"},
		{"interrupt beats all", with(func(f *Facts) { f.Failed, f.Interrupted = 2, true }), Budget{}, ExitInterrupted, "interrupted"},
		{"nothing sent", Facts{}, Budget{}, ExitInconclusive, "no request was sent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Judge(tt.facts, tt.budget)
			if v.ExitCode != tt.want || v.Pass != (tt.want == ExitOK) {
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

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want ExitCode
	}{
		{nil, ExitOK},
		{errors.New("unknown flag"), ExitUsage},
		{Usage(errors.New("bad")), ExitUsage},
		{fmt.Errorf("wrapped: %w", WithCode(ExitRolloutFailed, errors.New("deadline"))), ExitRolloutFailed},
		{Silent{Code: ExitFailures}, ExitFailures},
		{fmt.Errorf("run: %w", context.Canceled), ExitInterrupted},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
