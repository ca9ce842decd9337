package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// localPolicyRun: pods a (node n1) and b (node n2) behind a Local-policy
// Service probed at n1's NodePort. a is deleted at +5s; when it turns
// unready on SIGTERM (+5.1s) n1 has no serving endpoint until its
// replacement c is serving at +9s, while b stays ready on n2. servingOnTerm
// keeps a serving while it drains instead (local-policy-serving).
func localPolicyRun(servingOnTerm bool) *report.Report {
	epEv := func(ms int, kind report.EventKind, pod, node string, ready, serving, terminating bool) report.Event {
		return report.Event{At: at(ms), Kind: kind, Pod: pod, Node: node, Ready: ready, Serving: serving, Terminating: terminating}
	}
	tl := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, Node: "n1"},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, Node: "n2"},
		epEv(1, report.EndpointAdded, "a", "n1", true, true, false),
		epEv(1, report.EndpointAdded, "b", "n2", true, true, false),
		{At: at(5000), Kind: report.PodDeletionRequested, Pod: "a", Revision: "old", Node: "n1"},
		epEv(5050, report.EndpointTerminating, "a", "n1", false, true, true),
	}
	if !servingOnTerm {
		tl = append(tl, epEv(5100, report.EndpointNotServing, "a", "n1", false, false, true))
	}
	tl = append(tl,
		report.Event{At: at(6000), Kind: report.PodCreated, Pod: "c", Revision: "new", Node: "n1"},
		epEv(6100, report.EndpointAdded, "c", "n1", false, false, false),
		epEv(9000, report.EndpointServing, "c", "n1", true, true, false),
		epEv(9300, report.EndpointRemoved, "a", "n1", false, false, true),
	)
	r := &report.Report{StartedAt: t0, EndedAt: at(20000), Timeline: tl,
		Rollout: &report.Rollout{TriggerSeenAfterMS: 20, Service: "web", ServiceType: "LoadBalancer", ExternalTrafficPolicy: "Local",
			HealthCheckNodePort: 32080, Entry: &report.Entry{Via: report.ViaNodePort, Node: "n1", Port: 30080}}}
	if !servingOnTerm {
		for ms := 5600; ms <= 10500; ms += 700 { // blackholed SYNs, and one as kube-proxy catches up
			r.Failures = append(r.Failures, fail(ms, "connect_timeout", true, ""))
		}
	}
	return r
}

// Failures while the entry node had no serving endpoint are the Local
// policy's finding, with the node, the window, the capacity elsewhere and
// the fixes that apply; the ordinary race finding does not claim them.
func TestLocalPolicyFinding(t *testing.T) {
	r := localPolicyRun(false)
	x := Explain(r)
	r.Failures, r.Findings, r.NodeGaps = x.Failures, x.Findings, x.NodeGaps
	if len(x.NodeGaps) != 1 {
		t.Fatalf("gaps %+v", x.NodeGaps)
	}
	g := x.NodeGaps[0]
	if g.Node != "n1" || !g.Start.Equal(at(5100)) || !g.End.Equal(at(9000)) || g.StoppedServing != "a" || g.ServingAgain != "c" ||
		strings.Join(g.ReadyElsewhere, ",") != "b" || g.Failed != len(r.Failures) || g.Open {
		t.Fatalf("gap %+v (failures %d)", g, len(r.Failures))
	}
	f := find(r, LocalPolicyNoLocalEndpoint)
	if f == nil || f.Severity != report.SeverityError {
		t.Fatalf("no local-policy finding: %+v", r.Findings)
	}
	evidence := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"node n1's NodePort 30080", "externalTrafficPolicy: Local", "from +5.10s to +9.00s",
		"a stopped serving 0.1s after its deletion was requested", "c served again", "ready on other nodes: b",
		"healthCheckNodePort 32080"} {
		if !strings.Contains(evidence, want) {
			t.Errorf("evidence lacks %q:\n%s", want, evidence)
		}
	}
	for _, want := range []string{"keep the pod passing readiness while it drains", "health-checks healthCheckNodePort 32080", "externalTrafficPolicy: Cluster"} {
		if !strings.Contains(f.Fix, want) {
			t.Errorf("fix lacks %q: %s", want, f.Fix)
		}
	}
	if p := find(r, StopsBeforePropagation); p != nil {
		t.Errorf("the race finding claims the blackhole's failures: %+v", p)
	}
}

// The same rollout whose terminating pod keeps serving: no gap, nothing
// dropped, no finding; and a ClusterIP target, or the Cluster policy, has
// no node gaps at all.
func TestNoNodeGapWhenAnEndpointServes(t *testing.T) {
	if gaps := NodeGaps(localPolicyRun(true)); len(gaps) != 0 {
		t.Errorf("gaps %+v with the terminating pod serving", gaps)
	}
	r := localPolicyRun(false)
	r.Rollout.Entry = &report.Entry{Via: report.ViaClusterIP, Port: 80}
	if gaps := NodeGaps(r); gaps != nil {
		t.Errorf("gaps %+v at a ClusterIP", gaps)
	}
	r = localPolicyRun(false)
	r.Rollout.ExternalTrafficPolicy = "Cluster"
	if gaps := NodeGaps(r); gaps != nil {
		t.Errorf("gaps %+v under the Cluster policy", gaps)
	}
}

// With several paths the entry (the node gap's node) is the first path's:
// a failure on another path (through an ingress that may reach any node)
// is not placed in the gap nor explained by it.
func TestNodeGapsHoldOnlyTheEntryPathsFailures(t *testing.T) {
	r := localPolicyRun(false)
	r.Paths = []report.PathReport{{Name: "node"}, {Name: "edge"}}
	for i := range r.Failures {
		r.Failures[i].Path = "node"
	}
	other := fail(6000, "connect_timeout", true, "")
	other.Path = "edge"
	r.Failures = append(r.Failures, other)
	x := Explain(r)
	if len(x.NodeGaps) != 1 || x.NodeGaps[0].Failed != len(r.Failures)-1 {
		t.Fatalf("gaps %+v, want one with the %d failures of the entry's path", x.NodeGaps, len(r.Failures)-1)
	}
	r.Failures, r.Findings = x.Failures, x.Findings
	if find(r, LocalPolicyNoLocalEndpoint) == nil || find(r, StopsBeforePropagation) == nil {
		t.Errorf("findings %+v, want the gap's and, for the edge's failure, the race's", r.Findings)
	}
}

// Traffic entering a Local-policy node reaches only that node's pods: a
// refusal just after another node's pod was deleted is not that pod's (the
// lab's CI once named such a pod certain), and the race finding does not
// claim it. The same refusal with the Cluster policy, or measured by an
// in-cluster prober (which kube-proxy short-circuits to the whole
// Service), keeps the other node's pod.
func TestLocalEntryReachesOnlyItsNodesPods(t *testing.T) {
	run := func(policy, prober string) (*report.Report, report.Failure) {
		r := localPolicyRun(false)
		r.Rollout.ExternalTrafficPolicy = policy
		r.Timeline = append(r.Timeline,
			report.Event{At: at(2000), Kind: report.PodDeletionRequested, Pod: "b", Revision: "old", Node: "n2"},
			report.Event{At: at(2050), Kind: report.EndpointTerminating, Pod: "b", Node: "n2", Serving: true, Terminating: true})
		refused := fail(2060, "refused", true, "")
		refused.Prober = prober
		r.Failures = append(r.Failures, refused)
		analyse(r)
		for _, f := range r.Failures {
			if f.Class == "refused" {
				return r, f
			}
		}
		t.Fatal("the refusal is gone")
		return nil, report.Failure{}
	}
	r, f := run("Local", "")
	if f.LikelyPod != "" || f.Confidence != 0 || len(f.Candidates) != 0 {
		t.Errorf("a refusal entering n1 attributed to %q (confidence %v, candidates %v): only n1's pods can have refused it", f.LikelyPod, f.Confidence, f.Candidates)
	}
	if !strings.Contains(f.Context, "no pod on n1") {
		t.Errorf("context %q does not say why no pod is named", f.Context)
	}
	if race := find(r, StopsBeforePropagation); race != nil {
		t.Errorf("the race finding claims a refusal no deleted pod can have caused:\n%s", strings.Join(race.Evidence, "\n"))
	}
	if u := find(r, Unexplained); u == nil || !strings.Contains(strings.Join(u.Evidence, " "), "while no pod on n1 (the entry") {
		t.Errorf("the refusal is not left unexplained, saying which pods were out of reach: %+v", u)
	}
	for _, c := range []struct{ policy, prober string }{{"Cluster", ""}, {"Local", "prober-1"}} {
		if _, f := run(c.policy, c.prober); f.LikelyPod != "b" {
			t.Errorf("policy %s, prober %q: likely pod %q, want b (deleted 60 ms before, reachable)", c.policy, c.prober, f.LikelyPod)
		}
	}
}

// A Local-policy node's last pod turns unready (its container gone on
// SIGTERM) seconds before the kubelet reports it, its endpoint listed as
// terminating and serving until then: the node's gap runs from the
// kubelet's own time of the Ready condition (to the second), as the
// Service's does (TestServiceGapByTheKubeletsTime), and the finding says
// how late the report came. From the endpoints alone there is no gap.
func TestNodeGapByTheKubeletsTime(t *testing.T) {
	build := func(withServerTime bool) *report.Report {
		epEv := func(ms int, kind report.EventKind, pod, node, ip string, ready, serving bool) report.Event {
			return report.Event{At: at(ms), Kind: kind, Pod: pod, Node: node, IP: ip, Ready: ready, Serving: serving, Terminating: kind == report.EndpointTerminating}
		}
		unready := report.Event{At: at(12000), Kind: report.PodUnready, Pod: "a", Revision: "old", Node: "n1", IP: "10.0.0.5"}
		if withServerTime {
			s := at(5000)
			unready.Server = &s
		}
		r := &report.Report{StartedAt: t0, EndedAt: at(20000),
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, Node: "n1", IP: "10.0.0.5"},
				{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, Node: "n2", IP: "10.0.0.6"},
				epEv(1, report.EndpointAdded, "a", "n1", "10.0.0.5", true, true),
				epEv(1, report.EndpointAdded, "b", "n2", "10.0.0.6", true, true),
				{At: at(4900), Kind: report.PodDeletionRequested, Pod: "a", Revision: "old", Node: "n1"},
				epEv(4950, report.EndpointTerminating, "a", "n1", "10.0.0.5", true, true),
				{At: at(6000), Kind: report.PodCreated, Pod: "c", Revision: "new", Node: "n1"},
				epEv(6100, report.EndpointAdded, "c", "n1", "10.0.1.7", false, false),
				epEv(9000, report.EndpointServing, "c", "n1", "10.0.1.7", true, true),
				unready,
				epEv(12010, report.EndpointNotServing, "a", "n1", "10.0.0.5", false, false),
				epEv(12500, report.EndpointRemoved, "a", "n1", "10.0.0.5", false, false),
			},
			Rollout: &report.Rollout{Service: "web", ServiceType: "NodePort", ExternalTrafficPolicy: "Local",
				Entry: &report.Entry{Via: report.ViaNodePort, Node: "n1", Port: 30080}}}
		for ms := 6200; ms <= 10500; ms += 700 {
			r.Failures = append(r.Failures, fail(ms, "connect_timeout", true, ""))
		}
		return r
	}
	r := build(true)
	x := Explain(r)
	r.Failures, r.Findings, r.NodeGaps = x.Failures, x.Findings, x.NodeGaps
	if len(x.NodeGaps) != 1 {
		t.Fatalf("gaps %+v: want one from the kubelet's time", x.NodeGaps)
	}
	if g := x.NodeGaps[0]; !g.Start.Equal(at(6000)) || !g.End.Equal(at(9000)) || g.StoppedServing != "a" || g.ServingAgain != "c" ||
		strings.Join(g.ReadyElsewhere, ",") != "b" || g.Failed != len(r.Failures) {
		t.Fatalf("gap %+v (failures %d)", g, len(r.Failures))
	}
	f := find(r, LocalPolicyNoLocalEndpoint)
	if f == nil {
		t.Fatalf("no local-policy finding: %+v", r.Findings)
	}
	evidence := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"n1 had no serving endpoint from +6.00s to +9.00s (3.0s)",
		"a was not Ready by +6.00s by the kubelet's own time (its Ready condition's transition, to the second), reported only at +12.00s"} {
		if !strings.Contains(evidence, want) {
			t.Errorf("evidence lacks %q:\n%s", want, evidence)
		}
	}
	if gaps := NodeGaps(build(false)); len(gaps) != 0 {
		t.Errorf("gaps %+v from the endpoints alone, which served throughout on n1", gaps)
	}
}

// Probing every node's NodePort, one path each (what
// shutdown-not-exercised advises under a Local policy): each path enters
// its own node. A refusal on n2's path while only n1's pod was going is
// no pod's (the rollout's entry, the first path's, said nothing of the
// second path before), each node's gap holds its own path's failures,
// and the finding names each entry that dropped traffic.
func TestEachPathEntersItsOwnLocalNode(t *testing.T) {
	build := func(n2Gap bool) *report.Report {
		r := localPolicyRun(false)
		r.Paths = []report.PathReport{
			{Name: "p1", Entry: &report.Entry{Via: report.ViaNodePort, Node: "n1", Port: 30080}},
			{Name: "p2", Entry: &report.Entry{Via: report.ViaNodePort, Node: "n2", Port: 30080}}}
		for i := range r.Failures {
			r.Failures[i].Path = "p1"
		}
		if n2Gap { // b goes at +12s, its replacement d serves at +15s
			r.Timeline = append(r.Timeline,
				report.Event{At: at(12000), Kind: report.PodDeletionRequested, Pod: "b", Revision: "old", Node: "n2"},
				report.Event{At: at(12100), Kind: report.EndpointNotServing, Pod: "b", Node: "n2", Terminating: true},
				report.Event{At: at(13000), Kind: report.PodCreated, Pod: "d", Revision: "new", Node: "n2"},
				report.Event{At: at(15000), Kind: report.EndpointServing, Pod: "d", Node: "n2", Ready: true, Serving: true})
			for ms := 12500; ms <= 14500; ms += 1000 {
				f := fail(ms, "connect_timeout", true, "")
				f.Path = "p2"
				r.Failures = append(r.Failures, f)
			}
		} else {
			f := fail(5200, "refused", true, "")
			f.Path = "p2"
			r.Failures = append(r.Failures, f)
		}
		return r
	}
	r := build(false)
	x := Explain(r)
	r.Failures, r.Findings, r.NodeGaps = x.Failures, x.Findings, x.NodeGaps
	refused := r.Failures[len(r.Failures)-1]
	if refused.LikelyPod != "" || len(refused.Candidates) != 0 || !strings.Contains(refused.Context, "no pod on n2") {
		t.Errorf("p2's refusal: pod %q, candidates %v, context %q: only n2's pods can have refused it, and none was going", refused.LikelyPod, refused.Candidates, refused.Context)
	}
	if len(x.NodeGaps) != 1 || x.NodeGaps[0].Node != "n1" || x.NodeGaps[0].Failed != len(r.Failures)-1 {
		t.Fatalf("gaps %+v: want n1's alone, with p1's %d failures", x.NodeGaps, len(r.Failures)-1)
	}
	f := find(r, LocalPolicyNoLocalEndpoint)
	if f == nil || !strings.Contains(f.Evidence[0], "path p1's target is node n1's NodePort 30080") || strings.Contains(strings.Join(f.Evidence, "\n"), "node n2's NodePort") ||
		!strings.HasPrefix(f.Title, "traffic entered node n1 while it had") {
		t.Errorf("local-policy finding %+v: want p1's entry alone", f)
	}

	r = build(true)
	x = Explain(r)
	r.Failures, r.Findings = x.Failures, x.Findings
	if len(x.NodeGaps) != 2 || x.NodeGaps[0].Node != "n1" || x.NodeGaps[1].Node != "n2" || x.NodeGaps[1].Failed != 3 ||
		x.NodeGaps[0].Failed != len(r.Failures)-3 || x.NodeGaps[1].StoppedServing != "b" || x.NodeGaps[1].ServingAgain != "d" {
		t.Fatalf("gaps %+v: want n1's with p1's failures, then n2's with p2's 3", x.NodeGaps)
	}
	f = find(r, LocalPolicyNoLocalEndpoint)
	ev := ""
	if f != nil {
		ev = strings.Join(f.Evidence, "\n")
	}
	if f == nil || !strings.Contains(ev, "path p1's target is node n1's NodePort") || !strings.Contains(ev, "path p2's target is node n2's NodePort") ||
		!strings.Contains(ev, "n2 had no serving endpoint from +12.10s to +15.00s") || !strings.HasPrefix(f.Title, "traffic entered nodes n1 and n2 while each had") {
		t.Errorf("local-policy finding %+v: want both entries and gaps", f)
	}
}

// An in-cluster prober's failures count in the entry node's gap when the
// prober ran on another node (its traffic came to the node port from
// outside, as the lab measured), and not when it ran on the entry node
// itself: kube-proxy sends what a node and its pods send to their own
// node port to the whole Service.
func TestNodeGapsCountProbersOnOtherNodes(t *testing.T) {
	for _, tc := range []struct {
		node   string
		inGaps bool
	}{
		{"n2", true},
		{"n1", false},
	} {
		r := localPolicyRun(false)
		r.Probers = []report.ProberInfo{{Pod: "p-" + tc.node, Node: tc.node}}
		for i := range r.Failures {
			r.Failures[i].Prober, r.Failures[i].Node = "p-"+tc.node, tc.node
		}
		x := Explain(r)
		want := 0
		if tc.inGaps {
			want = len(r.Failures)
		}
		if len(x.NodeGaps) != 1 || x.NodeGaps[0].Failed != want {
			t.Errorf("prober on %s: gaps %+v, want n1's holding %d failures", tc.node, x.NodeGaps, want)
		}
		r.Failures, r.Findings = x.Failures, x.Findings
		if got := find(r, LocalPolicyNoLocalEndpoint) != nil; got != tc.inGaps {
			t.Errorf("prober on %s: local-policy finding %v, want %v (%v)", tc.node, got, tc.inGaps, r.Findings)
		}
	}
}
