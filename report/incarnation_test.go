package report_test

import (
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// A StatefulSet's pod is replaced under its own name: the replacement is
// another incarnation (web-2#2) from its creation on, while a late
// endpoint removal of the old pod (its address) stays the old one's. A
// pod of a name never reused keeps the bare name.
func TestIncarnations(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	in := report.NewIncarnations()
	for i, tc := range []struct {
		e    report.Event
		want string
	}{
		{report.Event{At: at, Kind: report.PodPresent, Pod: "web-2", IP: "10.0.0.5"}, "web-2"},
		{report.Event{At: at, Kind: report.PodPresent, Pod: "web-1", IP: "10.0.0.6"}, "web-1"},
		{report.Event{Kind: report.PodDeletionRequested, Pod: "web-2"}, "web-2"},
		{report.Event{Kind: report.PodGone, Pod: "web-2"}, "web-2"},
		{report.Event{Kind: report.PodCreated, Pod: "web-2"}, "web-2#2"},
		{report.Event{Kind: report.EndpointRemoved, Pod: "web-2", IP: "10.0.0.5"}, "web-2"},
		{report.Event{Kind: report.PodScheduled, Pod: "web-2", IP: "10.0.0.9"}, "web-2#2"},
		{report.Event{Kind: report.EndpointAdded, Pod: "web-2", IP: "10.0.0.9"}, "web-2#2"},
		{report.Event{Kind: report.KubeEvent, Pod: "web-2"}, "web-2#2"},
		{report.Event{Kind: report.PodGone, Pod: "web-2"}, "web-2#2"},
		{report.Event{Kind: report.PodCreated, Pod: "web-2"}, "web-2#3"},
		{report.Event{Kind: report.PodReady, Pod: "web-1"}, "web-1"},
		{report.Event{Kind: report.RolloutComplete}, ""},
	} {
		if got := in.Key(tc.e); got != tc.want {
			t.Errorf("event %d (%s %s): key %q, want %q", i, tc.e.Kind, tc.e.Pod, got, tc.want)
		}
	}
}
