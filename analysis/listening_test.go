package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// listeningRun is surgeDaemonSetRun met as a rehearsal met it: the old pod
// a has a preStop sleep of 3 s, and the refusal comes 1.1 s after its
// deletion, in the second a last answered (so the run's traffic cannot
// show it had left the rules). The apiserver dated the request at +10.0s
// (floored to its second). The node's capture showed its own stack's
// reset: a, its preStop sleep not over, had not been told to stop.
func listeningRun() *report.Report {
	r := surgeDaemonSetRun()
	for i := range r.Timeline {
		if e := &r.Timeline[i]; e.Kind == report.PodDeletionRequested && e.Pod == "a" {
			server := at(10000)
			e.Server, e.PreStopSleepS = &server, 3
		}
	}
	r.Failures = []report.Failure{fail(11580, "refused", true, "")}
	return r
}

func TestARefusalIsNotAPodsInItsPreStopSleep(t *testing.T) {
	r := listeningRun()
	analyse(r)
	f := r.Failures[0]
	if f.LikelyPod != "" || f.Confidence != 0 || len(f.Candidates) != 0 {
		t.Fatalf("refusal attributed to %q (confidence %v, candidates %v): a was in its preStop sleep until +13.0s at the earliest", f.LikelyPod, f.Confidence, f.Candidates)
	}
	for _, want := range []string{"no pod that can have refused it was terminating",
		"a was terminating but still listening then (a's preStop sleep of 3s from its deletion request: not told to stop before +13.00s), so a refusal was not its own",
		"kube-proxy's rules there mid-update"} {
		if !strings.Contains(f.Context, want) {
			t.Errorf("context %q lacks %q", f.Context, want)
		}
	}
	if r.Attribution.Certain != 0 || r.Attribution.Unattributed != 1 {
		t.Errorf("attribution %+v: want the refusal unattributed", r.Attribution)
	}
	if race := find(r, StopsBeforePropagation); race != nil {
		t.Errorf("the race finding claims a refusal no pod can have made:\n%s", strings.Join(race.Evidence, "\n"))
	}
	u := find(r, Unexplained)
	if u == nil {
		t.Fatalf("findings %+v: want the refusal unexplained", r.Findings)
	}
	evidence := strings.Join(u.Evidence, "\n")
	for _, want := range []string{"that can have refused them was terminating", "a was terminating but still listening then"} {
		if !strings.Contains(evidence, want) {
			t.Errorf("unexplained evidence lacks %q:\n%s", want, evidence)
		}
	}
	if strings.Contains(evidence, "one in a million") {
		t.Errorf("unexplained evidence gives the odds of a choice no traffic counted:\n%s", evidence)
	}
	if !strings.Contains(u.Fix, "kube-proxy's rules met mid-update") {
		t.Errorf("fix %q does not name the rules", u.Fix)
	}
}

// Each piece of the evidence is needed: without it a stays the pod the
// refusal is put on, for certain, as before.
func TestStillListeningNeedsEveryPieceOfEvidence(t *testing.T) {
	deletion := func(r *report.Report) *report.Event {
		for i := range r.Timeline {
			if e := &r.Timeline[i]; e.Kind == report.PodDeletionRequested && e.Pod == "a" {
				return e
			}
		}
		t.Fatal("no deletion of a")
		return nil
	}
	cases := []struct {
		name   string
		change func(r *report.Report)
	}{
		{"no preStop sleep", func(r *report.Report) { deletion(r).PreStopSleepS = 0 }},
		{"no server time of the request (no lower bound on it)", func(r *report.Report) { deletion(r).Server = nil }},
		{"the sleep can have ended before the refusal (the request dated +8.0s)", func(r *report.Report) {
			server := at(8000)
			deletion(r).Server = &server
		}},
		{"a connect timeout (a listening pod can drop a SYN: its backlog)", func(r *report.Report) {
			r.Failures = []report.Failure{fail(11580, "connect_timeout", true, "")}
		}},
		{"a's container exited before the refusal", func(r *report.Report) {
			code := int32(2)
			r.Timeline = append(r.Timeline, report.Event{At: at(11500), Kind: report.ContainerTerminated, Pod: "a", Revision: "old", Node: "n1", ExitCode: &code})
		}},
		{"a's container exited before the refusal by the kubelet's time, received 2.4s after it", func(r *report.Report) {
			code, server := int32(2), at(11000)
			r.Timeline = append(r.Timeline, report.Event{At: at(14000), Server: &server, Kind: report.ContainerTerminated, Pod: "a", Revision: "old", Node: "n1", ExitCode: &code})
		}},
		{"a turned unready after its deletion, before the refusal", func(r *report.Report) {
			r.Timeline = append(r.Timeline, report.Event{At: at(11000), Kind: report.PodUnready, Pod: "a", Revision: "old", Node: "n1"})
		}},
		{"a's readiness probe says nothing of its listening", func(r *report.Report) {
			r.Timeline[0].ReadinessConnects = false
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := listeningRun()
			c.change(r)
			sortTimeline(r)
			analyse(r)
			f := r.Failures[0]
			if f.LikelyPod != "a" {
				t.Errorf("refusal on %q (context %q): want a, as the timeline alone says", f.LikelyPod, f.Context)
			}
			if strings.Contains(f.Context, "still listening") {
				t.Errorf("context %q says a was still listening", f.Context)
			}
		})
	}
}

// A refusal a pod cannot have made is not counted as one it may have made
// (lastMaybeOf): the evidence that it later left the rules counts from its
// last answer, not from that refusal.
func TestAListeningPodsRefusalIsNotItsLastMaybe(t *testing.T) {
	r := listeningRun()
	for i := range r.Timeline {
		if e := &r.Timeline[i]; e.Kind == report.PodDeletionRequested && e.Pod == "a" {
			e.PreStopSleepS = 5 // not told to stop before +15.0s
		}
	}
	// The first in second 12: no whole second after a's last answer to
	// count, so only the sleep can put it off a.
	r.Failures = []report.Failure{fail(12200, "refused", true, ""), fail(16660, "refused", true, "")}
	r.Totals = report.Totals{Sent: 4200, OK: 4198, Failed: 2}
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "" || !strings.Contains(f.Context, "a was terminating but still listening then") {
		t.Errorf("the first refusal: pod %q, context %q: want a still listening", f.LikelyPod, f.Context)
	}
	f := r.Failures[1]
	if f.LikelyPod != "" || !strings.Contains(f.Context, "the 800 fresh connections on this path answered from +12s on went to pods other than a") {
		t.Errorf("the second refusal: pod %q, context %q: want a out of the rules from its last answer (second 11) on", f.LikelyPod, f.Context)
	}
}

// sortTimeline keeps the timeline in time order after a test adds events.
func sortTimeline(r *report.Report) {
	slices.SortStableFunc(r.Timeline, func(a, b report.Event) int { return a.At.Compare(b.At) })
}
