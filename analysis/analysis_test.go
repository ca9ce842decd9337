package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func ev(ms int, kind rollout.EventKind, pod, rev string) rollout.Event {
	return rollout.Event{At: at(ms), Kind: kind, Pod: pod, Revision: rev}
}

func fail(ms int, class string, fresh bool, backend string) report.Failure {
	return report.Failure{Intended: at(ms), End: at(ms + 2), Class: class, Fresh: fresh, Backend: backend}
}

func find(r *report.Report, id string) *report.Finding {
	for i := range r.Findings {
		if r.Findings[i].ID == id {
			return &r.Findings[i]
		}
	}
	return nil
}

// A naive rollout: old pod a is deleted at +5s and stops listening; requests
// refused until +5.8s, then a connect timeout to its vanished IP at +6.2s.
func TestPropagationFinding(t *testing.T) {
	exit := int32(0)
	r := &report.Report{StartedAt: t0, Timeline: []rollout.Event{
		{At: at(0), Kind: rollout.PodPresent, Pod: "a", Revision: "old", Detail: "ready=true"},
		ev(4000, rollout.PodCreated, "n", "new"),
		ev(4900, rollout.PodReady, "n", "new"),
		ev(5000, rollout.PodDeletionRequested, "a", "old"),
		{At: at(5010), Kind: rollout.ContainerTerminated, Pod: "a", Revision: "old", ExitCode: &exit},
		ev(5300, rollout.EndpointRemoved, "a", ""),
		ev(5400, rollout.PodGone, "a", "old"),
	}, Failures: []report.Failure{
		fail(5020, "refused", true, ""), fail(5500, "refused", true, ""), fail(5800, "reset", true, ""),
		fail(6200, "connect_timeout", true, ""),
	}}
	Analyse(r)
	if len(r.Outages) != 1 || r.Outages[0].Count != 4 || r.Outages[0].ByClass["refused"] != 2 {
		t.Fatalf("outages %+v", r.Outages)
	}
	if !strings.Contains(r.Outages[0].Context, "terminating: a") {
		t.Errorf("outage context %q", r.Outages[0].Context)
	}
	f := r.Failures[0]
	if f.LikelyPod != "a" || f.Confidence != 1 || !strings.Contains(f.Context, "0.02s after a's deletion was requested") ||
		!strings.Contains(f.Context, "still listed") {
		t.Errorf("failure 0: %+v", f)
	}
	fd := find(r, StopsBeforePropagation)
	if fd == nil || fd.Severity != "error" || len(fd.Pods) != 1 || fd.Pods[0] != "a" {
		t.Fatalf("findings %+v", r.Findings)
	}
	// The last failure came 1.2s after the deletion: the preStop sleep
	// suggested must cover that with a margin (1.2*1.5+1 = 2.8 -> 3).
	if !strings.Contains(fd.Fix, "at least 3s") || !strings.Contains(strings.Join(fd.Evidence, " "), "1.20s") {
		t.Errorf("finding %+v", fd)
	}
	if find(r, GraceTooShort) != nil || find(r, Unexplained) != nil {
		t.Errorf("unexpected findings %+v", r.Findings)
	}
}

func TestKeepAliveReadyAndKillFindings(t *testing.T) {
	kill := int32(137)
	r := &report.Report{StartedAt: t0, Config: report.Config{BackendHeader: "X-Pod-Name"},
		Totals: report.Totals{ByBackend: map[string]uint64{"a": 10, "n": 5}},
		Series: []report.SeriesRow{{T: 4, Backends: map[string]uint64{"a": 4}}, {T: 5, Backends: map[string]uint64{"a": 3}}, {T: 6, Backends: map[string]uint64{"a": 2}}},
		Timeline: []rollout.Event{
			ev(1000, rollout.PodCreated, "n", "new"),
			ev(2000, rollout.PodReady, "n", "new"),
			{At: at(0), Kind: rollout.PodPresent, Pod: "a", Revision: "old", Detail: "ready=true"},
			ev(5000, rollout.PodDeletionRequested, "a", "old"),
			{At: at(8000), Kind: rollout.ContainerTerminated, Pod: "a", ExitCode: &kill},
			ev(8100, rollout.PodGone, "a", "old"),
		},
		Failures: []report.Failure{
			fail(2100, "refused", true, ""),     // right after n turned ready
			fail(5200, "eof_reused", false, ""), // kept-alive connection cut at a's termination
			fail(5300, "http_5xx", true, "a"),   // the app named itself
			fail(60000, "timeout", true, ""),    // nothing happening
		}}
	Analyse(r)
	for _, id := range []string{ReadyTooEarly, AbruptKeepAliveClose, ServerErrors, GraceTooShort, Unexplained} {
		if find(r, id) == nil {
			t.Errorf("missing finding %s; have %+v", id, r.Findings)
		}
	}
	if find(r, StopsBeforePropagation) != nil {
		t.Errorf("no refused after a deletion, yet a propagation finding")
	}
	if fd := find(r, ServerErrors); fd != nil && !strings.Contains(strings.Join(fd.Evidence, " "), "the app itself") {
		t.Errorf("5xx source: %+v", fd)
	}
	if len(r.Outages) != 3 {
		t.Errorf("%d outages, want 3 separate windows: %+v", len(r.Outages), r.Outages)
	}
	var a *report.PodTraffic
	for i := range r.Pods {
		if r.Pods[i].Pod == "a" {
			a = &r.Pods[i]
		}
	}
	// Deleted at +5.0s: rows t=6 (and later) count as after the deletion.
	if a == nil || a.Served != 10 || a.ServedAfterDeletion != 2 || a.ExitCode == nil || *a.ExitCode != 137 {
		t.Fatalf("pod a traffic %+v", a)
	}
}

func TestNoFailuresNoFindings(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []rollout.Event{ev(5000, rollout.PodDeletionRequested, "a", "old")}}
	Analyse(r)
	if len(r.Findings) != 0 || len(r.Outages) != 0 {
		t.Fatalf("findings %+v outages %+v", r.Findings, r.Outages)
	}
}

// A rollout whose new pods turn ready before they listen (no readiness
// probe), while the old pods shut down at once: a refusal after the old pod
// is gone can only be the new pod's; a connect timeout, never.
func TestClassNarrowsTheCandidates(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []rollout.Event{
		{At: at(0), Kind: rollout.PodPresent, Pod: "a", Revision: "old", Detail: "ready=true"},
		ev(5000, rollout.PodCreated, "n", "new"),
		ev(5050, rollout.PodReady, "n", "new"),
		ev(5100, rollout.PodDeletionRequested, "a", "old"),
		ev(5600, rollout.PodGone, "a", "old"),
	}, Failures: []report.Failure{
		fail(5200, "refused", true, ""),         // a is still there: a's
		fail(6500, "refused", true, ""),         // a is gone: n's
		fail(6600, "connect_timeout", true, ""), // to a's vanished IP
	}}
	Analyse(r)
	for i, want := range []string{"a", "n", "a"} {
		if got := r.Failures[i].LikelyPod; got != want {
			t.Errorf("failure %d (%s at %s): likely pod %q, want %q (%s)", i, r.Failures[i].Class,
				r.Failures[i].Intended.Sub(t0), got, want, r.Failures[i].Context)
		}
	}
	if fd := find(r, ReadyTooEarly); fd == nil || len(fd.Pods) != 1 || fd.Pods[0] != "n" {
		t.Errorf("ready-before-serving finding: %+v", r.Findings)
	}
	if fd := find(r, StopsBeforePropagation); fd == nil || len(fd.Pods) != 1 || fd.Pods[0] != "a" {
		t.Errorf("propagation finding: %+v", r.Findings)
	}
}
