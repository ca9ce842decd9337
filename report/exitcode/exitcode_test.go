package exitcode

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, OK},
		{"plain error is usage", base, Usage},
		{"typed", With(RolloutFailed, base), RolloutFailed},
		{"wrapped typed", fmt.Errorf("run: %w", With(Inconclusive, base)), Inconclusive},
		{"innermost wins", With(Usage, fmt.Errorf("preflight: %w", With(RolloutFailed, base))), RolloutFailed},
		{"joined: first coded", errors.Join(base, With(Failures, base)), Failures},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), Interrupted},
		{"typed beats canceled", With(Usage, context.Canceled), Usage},
		{"silent", Silent{Code: Failures}, Failures},
		{"wrapped silent", fmt.Errorf("x: %w", Silent{Code: Interrupted}), Interrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Of(tt.err); got != tt.want {
				t.Fatalf("Of(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

func TestWithOutputFailure(t *testing.T) {
	for code, want := range map[Code]Code{OK: OutputFailed, Inconclusive: OutputFailed, Failures: Failures,
		RolloutFailed: RolloutFailed, Interrupted: Interrupted} {
		if got := WithOutputFailure(code); got != want {
			t.Errorf("verdict %d: exit %d, want %d", code, got, want)
		}
	}
}
