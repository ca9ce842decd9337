package advice

import (
	"strings"
	"testing"
)

func TestPreStopSleep(t *testing.T) {
	tests := []struct {
		v         Version
		want, not string
	}{
		{Version{1, 36}, "sleep.seconds: 4", "exec"},
		{Version{1, 30}, "sleep.seconds: 4", "exec"},
		{Version{1, 29}, `exec.command: ["sleep", "4"]`, "sleep.seconds"},
		{Version{}, "sleep.seconds: 4 (Kubernetes 1.30+", "1.34"},
	}
	for _, tt := range tests {
		got := PreStopSleep(4, tt.v)
		if !strings.Contains(got, tt.want) || strings.Contains(got, tt.not) {
			t.Errorf("%v: %q, want %q without %q", tt.v, got, tt.want, tt.not)
		}
	}
}
