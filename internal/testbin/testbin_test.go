package testbin

import (
	"slices"
	"testing"
)

func TestCompileEnvTurnsTheCollectorOffUnlessTheCallerSetIt(t *testing.T) {
	got := compileEnv([]string{"PATH=/usr/bin", "HOME=/root"})
	if !slices.Contains(got, "GOGC=off") || !slices.Contains(got, "GOMEMLIMIT=3GiB") {
		t.Errorf("no GOGC or GOMEMLIMIT of the caller's: %q, want the collector off under a limit", got)
	}
	for _, own := range [][]string{{"GOGC=200"}, {"GOMEMLIMIT=1GiB"}} {
		env := append([]string{"PATH=/usr/bin"}, own...)
		if got := compileEnv(env); !slices.Equal(got, env) {
			t.Errorf("the caller's %q: %q, want it kept as it is", own, got)
		}
	}
}
