package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// A CI run's case: pod a was deleted at +3.17s and gone at +3.83s; a
// connect timeout at +3.50s went to its address (its SYN's own entry), and
// another from the same port at +9.40s went there too, joining the first's
// entry (the packet capture showed its SYN to a's address). Both are a's
// for certain; the second says why, and the propagation finding neither
// sizes its window (nor the preStop) from it nor leaves it unexplained.
func TestAJoinedEntryNamesItsPodAndSizesNothing(t *testing.T) {
	r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 20}, Timeline: aGoneAt3825(), Failures: []report.Failure{
		{Intended: at(3500), Start: at(3500), End: at(4500), Class: report.ClassConnectTimeout, Fresh: true, PodAddr: "10.0.0.1:8080", LocalAddr: "0.0.0.0:40000"},
		{Intended: at(9405), Start: at(9405), End: at(10405), Class: report.ClassConnectTimeout, Fresh: true, PodAddr: "10.0.0.1:8080", LocalAddr: "0.0.0.0:40000", JoinedConntrackEntry: true},
	}}
	x := Explain(r)
	for i, f := range x.Failures {
		if f.LikelyPod != "a" || f.Confidence != 1 || f.Evidence != report.EvidenceConntrack {
			t.Errorf("failure %d: pod %q confidence %v evidence %q, want a for certain by conntrack", i, f.LikelyPod, f.Confidence, f.Evidence)
		}
		if joined := strings.Contains(f.Context, "joined the conntrack entry"); joined != (i == 1) {
			t.Errorf("failure %d's context %q: says it joined an entry %v", i, f.Context, joined)
		}
	}
	var prop *report.Finding
	for i := range x.Findings {
		if x.Findings[i].ID == StopsBeforePropagation {
			prop = &x.Findings[i]
		}
		if x.Findings[i].ID == Unexplained {
			t.Errorf("unexplained: %v", x.Findings[i].Evidence)
		}
	}
	if prop == nil {
		t.Fatalf("no %s finding: %+v", StopsBeforePropagation, x.Findings)
	}
	ev := strings.Join(prop.Evidence, "\n")
	// The first failure came 0.33 s after the deletion: the window and the
	// preStop are sized from it (ceil(0.33*1.5+1) = 2), not from the
	// joined one's 6.23 s (which would make 11).
	if !strings.Contains(ev, "the last certain one 0.33s after it") || strings.Contains(ev, "6.23s") {
		t.Errorf("window: %s", ev)
	}
	if !strings.Contains(prop.Fix, "at least 2s") {
		t.Errorf("fix %q: want a preStop of 2s, sized without the joined failure", prop.Fix)
	}
	if !strings.Contains(ev, "1 of them was a new connection from a local port whose earlier connection") || !strings.Contains(ev, "began at +9.40s") ||
		!strings.Contains(ev, "nf_conntrack_tcp_timeout_syn_sent") {
		t.Errorf("the joined failure is not explained: %s", ev)
	}
}

// A connect timeout that made no conntrack entry of its own, from a port
// whose earlier connection to the same address had one, to pod a (gone
// 5.6 s before): a is its likely pod, never certain (its SYN may have been
// stopped on the host), listed as a candidate; and it sizes no window.
func TestAPriorEntryMakesACandidateNotACertainty(t *testing.T) {
	r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 20}, Timeline: aGoneAt3825(), Failures: []report.Failure{
		{Intended: at(3500), Start: at(3500), End: at(4500), Class: report.ClassConnectTimeout, Fresh: true, PodAddr: "10.0.0.1:8080", LocalAddr: "0.0.0.0:40000"},
		{Intended: at(9405), Start: at(9405), End: at(10405), Class: report.ClassConnectTimeout, Fresh: true, PriorPodAddr: "10.0.0.1:8080", LocalAddr: "0.0.0.0:40000"},
	}}
	x := Explain(r)
	f := x.Failures[1]
	if f.LikelyPod != "a" || f.Confidence >= 1 || !slices.Equal(f.Candidates, []string{"a"}) || f.Evidence != report.EvidenceTimeline {
		t.Errorf("pod %q confidence %v candidates %v evidence %q: want a, uncertain, listed", f.LikelyPod, f.Confidence, f.Candidates, f.Evidence)
	}
	if !strings.Contains(f.Context, "most likely followed the one an earlier connection from the same local port left, to a") {
		t.Errorf("context %q", f.Context)
	}
	for _, fd := range x.Findings {
		if fd.ID == StopsBeforePropagation {
			ev := strings.Join(fd.Evidence, "\n")
			if !strings.Contains(ev, "the last certain one 0.33s after it") || strings.Contains(ev, "6.23s") || !strings.Contains(ev, "1 of them made no conntrack entry of its own") {
				t.Errorf("evidence: %s", ev)
			}
			return
		}
	}
	t.Fatalf("no %s finding: %+v", StopsBeforePropagation, x.Findings)
}

// aGoneAt3825 is the CI run's timeline around pod a: deleted at +3.17s,
// out of the endpoints at +3.34s, gone at +3.83s; pod b stays.
func aGoneAt3825() []report.Event {
	return []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Ready: true, IP: "10.0.0.1"},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Ready: true, IP: "10.0.0.2"},
		ev(3174, report.PodDeletionRequested, "a", "old"),
		ev(3283, report.EndpointTerminating, "a", "old"),
		ev(3337, report.EndpointRemoved, "a", "old"),
		ev(3825, report.PodGone, "a", "old"),
	}
}
