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

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{"1.36": {1, 36}, "1.25+": {1, 25}, "": {}, "1": {}, "x.y": {}} {
		if got := ParseVersion(in); got != want {
			t.Errorf("ParseVersion(%q) = %v, want %v", in, got, want)
		}
		if want.Known() && ParseVersion(want.String()) != want {
			t.Errorf("%v does not read back", want)
		}
	}
}
