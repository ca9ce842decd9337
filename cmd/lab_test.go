package cmd

import (
	"maps"
	"testing"
	"time"
)

func TestParseProxyLags(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   map[string]time.Duration
	}{
		{nil, map[string]time.Duration{}},
		{[]string{"2s"}, map[string]time.Duration{"lab-node-1": 2 * time.Second, "lab-node-2": 2 * time.Second, "lab-node-3": 2 * time.Second}},
		{[]string{"lab-node-2=3s"}, map[string]time.Duration{"lab-node-2": 3 * time.Second}},
		// A node's own value beats the one for all, in any order; 0 is none.
		{[]string{"lab-node-1=0s", "1s"}, map[string]time.Duration{"lab-node-2": time.Second, "lab-node-3": time.Second}},
	} {
		got, err := parseProxyLags(tc.values, 3)
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("%v: %v, %v; want %v", tc.values, got, err, tc.want)
		}
	}
	for _, bad := range []string{"-1s", "lab-node-4=1s", "x=1s", "lab-node-1=", "fast"} {
		if _, err := parseProxyLags([]string{bad}, 3); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
