package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// surgeDaemonSetRun is the warm CI run of 5946177 that rollprobe got
// wrong: a DaemonSet with surge behind a Local-policy Service, probed at
// n1's NodePort with a new connection a request (200/s). On n1 the new pod
// c turns ready at +10.47s, the old pod a is deleted at +10.48s and goes
// at +17.5s; a answers until second 11, c from second 11 on. At +16.66s
// one connection is refused, and n1's capture showed n1's own stack reset
// it (its rules mid-update), not a. On n2, b is replaced by d earlier.
func surgeDaemonSetRun() *report.Report {
	tl := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, ReadinessConnects: true, Node: "n1", IP: "10.0.1.5"},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, ReadinessConnects: true, Node: "n2", IP: "10.0.2.5"},
		{At: at(5000), Kind: report.PodCreated, Pod: "d", Revision: "new", Node: "n2"},
		{At: at(6150), Kind: report.PodReady, Pod: "d", Revision: "new", ReadinessConnects: true, Node: "n2", IP: "10.0.2.6"},
		{At: at(6160), Kind: report.PodDeletionRequested, Pod: "b", Revision: "old", Node: "n2"},
		{At: at(9000), Kind: report.PodCreated, Pod: "c", Revision: "new", Node: "n1"},
		{At: at(10470), Kind: report.PodReady, Pod: "c", Revision: "new", ReadinessConnects: true, Node: "n1", IP: "10.0.1.6"},
		{At: at(10480), Kind: report.PodDeletionRequested, Pod: "a", Revision: "old", Node: "n1"},
		{At: at(17500), Kind: report.PodGone, Pod: "a", Revision: "old", Node: "n1"},
		{At: at(17600), Kind: report.PodGone, Pod: "b", Revision: "old", Node: "n2"},
	}
	r := &report.Report{StartedAt: t0, EndedAt: at(20500), Timeline: tl, Config: report.Config{Conn: "new"},
		Rollout: &report.Rollout{TriggerSeenAfterMS: 20, Service: "web", ServiceType: "LoadBalancer", ExternalTrafficPolicy: "Local",
			Entry: &report.Entry{Via: report.ViaNodePort, Node: "n1", Port: 30083}}}
	for s := int64(0); s <= 20; s++ {
		row := report.SeriesRow{T: s, Sent: 200, OK: 200, Backends: map[string]uint64{}}
		switch {
		case s < 11:
			row.Backends["a"] = 200
		case s == 11:
			row.Backends["a"], row.Backends["c"] = 47, 153
		default:
			row.Backends["c"] = 200
		}
		r.Series = append(r.Series, row)
	}
	r.Failures = []report.Failure{fail(16660, "refused", true, "")}
	r.Totals = report.Totals{Sent: 4200, OK: 4199, Failed: 1}
	return r
}

func TestATerminatingPodTheRulesLeftIsNoCandidate(t *testing.T) {
	r := surgeDaemonSetRun()
	analyse(r)
	f := r.Failures[0]
	if f.LikelyPod != "" || f.Confidence != 0 || len(f.Candidates) != 0 {
		t.Fatalf("refusal attributed to %q (confidence %v, candidates %v): a had left n1's rules ~5 s before (c answered 800 fresh connections in the whole seconds since a's last)",
			f.LikelyPod, f.Confidence, f.Candidates)
	}
	for _, want := range []string{"a was terminating but had left the proxy's rules", "the 800 fresh connections on this path answered from +12s on went to pods other than a", "kube-proxy's rules there mid-update"} {
		if !strings.Contains(f.Context, want) {
			t.Errorf("context %q lacks %q", f.Context, want)
		}
	}
	if r.Attribution.Certain != 0 || r.Attribution.Unattributed != 1 {
		t.Errorf("attribution %+v: want the refusal unattributed", r.Attribution)
	}
	if race := find(r, StopsBeforePropagation); race != nil {
		t.Errorf("the race finding (and its preStop advice) claims a refusal no pod can have made:\n%s\nfix: %s", strings.Join(race.Evidence, "\n"), race.Fix)
	}
	u := find(r, Unexplained)
	if u == nil {
		t.Fatalf("findings %+v: want the refusal unexplained", r.Findings)
	}
	evidence := strings.Join(u.Evidence, "\n")
	for _, want := range []string{"while no pod on n1 (the entry: externalTrafficPolicy Local keeps what enters it there) that their SYNs can have reached was terminating",
		"a was terminating but had left the proxy's rules before it"} {
		if !strings.Contains(evidence, want) {
			t.Errorf("unexplained evidence lacks %q:\n%s", want, evidence)
		}
	}
	if !strings.Contains(u.Fix, "kube-proxy's rules met mid-update") {
		t.Errorf("fix %q does not name the rules", u.Fix)
	}
}

// The unexplained finding's fix names what the host's rules made: a
// dropped SYN (a connect timeout) is not called a refusal.
func TestTheFixNamesTheFailuresTheRulesMade(t *testing.T) {
	for _, c := range []struct {
		classes []string
		want    string
	}{
		{[]string{"refused"}, "a refusal no pod made comes from"},
		{[]string{"connect_timeout"}, "a connect timeout no pod made (a SYN dropped) comes from"},
		{[]string{"connect_timeout", "refused"}, "a refusal or connect timeout no pod made comes from"},
	} {
		r := surgeDaemonSetRun()
		r.Failures = nil
		for i, class := range c.classes {
			r.Failures = append(r.Failures, fail(16660+i*5, class, true, ""))
		}
		r.Totals = report.Totals{Sent: 4200, OK: 4200 - uint64(len(c.classes)), Failed: uint64(len(c.classes))}
		analyse(r)
		u := find(r, Unexplained)
		if u == nil {
			t.Fatalf("%v: findings %+v: want the failures unexplained", c.classes, r.Findings)
		}
		if !strings.Contains(u.Fix, c.want) {
			t.Errorf("%v: fix %q lacks %q", c.classes, u.Fix, c.want)
		}
	}
}

// Each piece of the evidence is needed: without it the old pod stays the
// one the refusal is blamed on, as before.
func TestLeavingTheRulesNeedsEveryPieceOfEvidence(t *testing.T) {
	cases := []struct {
		name   string
		change func(r *report.Report)
	}{
		{"kept-alive connections (a response shows one choice per connection)", func(r *report.Report) { r.Config.Conn = "keepalive" }},
		{"the old pod answered in the second before", func(r *report.Report) { r.Series[15].Backends["a"] = 1 }},
		{"another failure a second before, which may have been the old pod's", func(r *report.Report) {
			r.Failures = append([]report.Failure{fail(15500, "reset", true, "")}, r.Failures...)
		}},
		{"a refusal a second before, from which too few fresh connections missed it", func(r *report.Report) {
			r.Failures = append([]report.Failure{fail(15500, "refused", true, "")}, r.Failures...)
			for s := 12; s <= 14; s++ {
				r.Series[s].Backends["c"] = 0
			}
			r.Series[13].Backends["c"] = 10 // 2^-10 > 1e-6: the first may be a's, so the second counts from it
		}},
		{"too few fresh connections missed it (19 for two pods: 2^-19 > 1e-6)", func(r *report.Report) {
			for s := 12; s <= 15; s++ {
				r.Series[s].Backends["c"] = 0
			}
			r.Series[12].Backends["c"] = 19
		}},
		{"no other pod ready there since before the seconds counted", func(r *report.Report) {
			r.Timeline[6].At = at(13000)
		}},
		{"the other pod unready for a moment (kube-proxy may fall back to terminating endpoints)", func(r *report.Report) {
			r.Timeline = append(r.Timeline, report.Event{At: at(14000), Kind: report.PodUnready, Pod: "c", Revision: "new", Node: "n1"})
		}},
		{"in-cluster probers, whose responses passed other nodes' rules", func(r *report.Report) {
			r.Probers = []report.ProberInfo{{Pod: "prober-1", Node: "n2"}}
		}},
		{"no backend header", func(r *report.Report) {
			for i := range r.Series {
				r.Series[i].Backends = nil
			}
		}},
	}
	for _, c := range cases {
		r := surgeDaemonSetRun()
		c.change(r)
		analyse(r)
		f := r.Failures[len(r.Failures)-1]
		if f.LikelyPod != "a" {
			t.Errorf("%s: likely pod %q (%s), want a", c.name, f.LikelyPod, f.Context)
		}
	}
	// What shows an earlier failure on the path was not the old pod's does
	// not reset the count: its response named another pod, or the pod had
	// left the rules by then too (two refusals the host's rules made within
	// a second, both none of a's).
	for name, earlier := range map[string]report.Failure{
		"a 503 that c answered":                         fail(15500, report.ClassHTTP5xx, true, "c"),
		"a refusal a had left the rules before":         fail(15500, "refused", true, ""),
		"a connect timeout a had left the rules before": fail(15500, "connect_timeout", true, ""),
	} {
		r := surgeDaemonSetRun()
		r.Failures = append([]report.Failure{earlier}, r.Failures...)
		analyse(r)
		if f := r.Failures[1]; f.LikelyPod != "" {
			t.Errorf("after %s: likely pod %q (%s), want none", name, f.LikelyPod, f.Context)
		}
		if f := r.Failures[0]; earlier.Backend == "" && f.LikelyPod != "" {
			t.Errorf("%s: likely pod %q (%s), want none", name, f.LikelyPod, f.Context)
		}
	}
	// 20 misses for two pods: 2^-20 < 1e-6, enough.
	r := surgeDaemonSetRun()
	for s := 12; s <= 15; s++ {
		r.Series[s].Backends["c"] = 0
	}
	r.Series[12].Backends["c"] = 20
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "" {
		t.Errorf("20 misses of two pods: likely pod %q, want none", f.LikelyPod)
	}
}
