package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// The lab's CI case: a graceful canary's old pod deleted at +12.95s and
// gone at +19.30s, its four successors serving since +13.10s, and a
// refusal at +19.41s. From the timeline alone a pod is named (the CI run
// named the old one, certain). Conntrack read throughout with no
// entry for the refusal says otherwise: the node's own rules refused it,
// no pod was reached. It is then named on no pod, sizes no preStop
// advice, and has its own finding with what the API listed.
func TestNoConntrackEntryReachedNoPod(t *testing.T) {
	timeline := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "old-a", Revision: "a", Ready: true, IP: "10.244.1.10"},
		endpointAt(1, report.EndpointAdded, "old-a", "10.244.1.10", true, true),
	}
	for i, p := range []string{"new-1", "new-2", "new-3", "new-4"} {
		ip := "10.244.2." + string(rune('1'+i))
		timeline = append(timeline,
			report.Event{At: at(9000 + i), Kind: report.PodCreated, Pod: p, Revision: "b"},
			report.Event{At: at(13100 + i), Kind: report.PodReady, Pod: p, Revision: "b", IP: ip},
			endpointAt(13100+i, report.EndpointReady, p, ip, true, true))
	}
	timeline = append(timeline,
		ev(12950, report.PodDeletionRequested, "old-a", "a"),
		endpointAt(13000, report.EndpointTerminating, "old-a", "10.244.1.10", false, true),
		endpointAt(16000, report.EndpointRemoved, "old-a", "10.244.1.10", false, false),
		ev(19300, report.PodGone, "old-a", "a"))
	build := func(noEntry bool) *report.Report {
		f := fail(19410, report.ClassRefused, true, "")
		f.LocalAddr, f.RemoteAddr, f.NoConntrackEntry = "0.0.0.0:40000", "10.96.76.245:80", noEntry
		return &report.Report{StartedAt: t0, EndedAt: at(25000), Timeline: timeline, Failures: []report.Failure{f},
			Rollout: &report.Rollout{Kind: "Rollout", Name: "argo-canary", Service: "argo-canary", TriggerSeenAfterMS: 20}}
	}

	inferred := build(false)
	analyse(inferred)
	if f := inferred.Failures[0]; f.LikelyPod == "" || f.Evidence != report.EvidenceTimeline {
		t.Fatalf("from the timeline alone: %+v; want a pod inferred (the scene this test is about)", f)
	}

	r := build(true)
	analyse(r)
	f := r.Failures[0]
	if f.LikelyPod != "" || f.Confidence != 0 || f.Candidates != nil || f.Evidence != "" || !strings.Contains(f.Context, "reached no pod") ||
		!strings.Contains(f.Context, "refused the SYN") {
		t.Errorf("failure %+v: want no pod named, the context saying the host's rules refused it", f)
	}
	if r.Attribution.Certain != 0 || r.Attribution.Unattributed != 1 {
		t.Errorf("attribution %+v", r.Attribution)
	}
	if find(r, StopsBeforePropagation) != nil || find(r, Unexplained) != nil {
		t.Errorf("findings %+v: the refusal is no pod's race and not unexplained", r.Findings)
	}
	fd := find(r, ProxyRulesWithoutEndpoint)
	if fd == nil || fd.Severity != report.SeverityError {
		t.Fatalf("findings %+v: want %s", r.Findings, ProxyRulesWithoutEndpoint)
	}
	ev := strings.Join(fd.Evidence, "\n")
	for _, want := range []string{"1 request failed (refused 1) at +19.41s", "conntrack on the probing host has no entry",
		"+19.41s (refused, from the probing host): the API listed 4 serving endpoints, unchanged since +16.00s (3.41s before)", "no preStop sleep"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(fd.Title, "the rules on the probing host sent no request to a pod of service argo-canary while the API listed 4 serving endpoints") ||
		!strings.Contains(ev, "a SYN met its rules while it rewrote them") || !strings.Contains(fd.Fix, "nftables mode") {
		t.Errorf("title %q", fd.Title)
	}
	if x := Explain(r); x.PreStopSeconds != 0 {
		t.Errorf("preStop advice %ds sized from a failure that reached no pod", x.PreStopSeconds)
	}
}

// The same scene seen from a prober on the pod network, where conntrack
// cannot be read: the refusal's socket held an ICMP port unreachable from
// the node's pod gateway, no pod's address. A reject rule answered it, no
// pod (a pod's TCP stack answers with a reset): named on no pod, no
// preStop sizing, the rules' finding naming the ICMP's sender. A reset,
// or the ICMP error from a pod's own address, leaves the inference as it
// was.
func TestICMPRejectReachedNoPod(t *testing.T) {
	timeline := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "old-a", Revision: "a", Ready: true, IP: "10.244.1.10"},
		endpointAt(1, report.EndpointAdded, "old-a", "10.244.1.10", true, true),
		{At: at(9000), Kind: report.PodCreated, Pod: "new-1", Revision: "b"},
		{At: at(13100), Kind: report.PodReady, Pod: "new-1", Revision: "b", IP: "10.244.2.7"},
		endpointAt(13100, report.EndpointReady, "new-1", "10.244.2.7", true, true),
		ev(12950, report.PodDeletionRequested, "old-a", "a"),
		endpointAt(13000, report.EndpointTerminating, "old-a", "10.244.1.10", false, true),
		endpointAt(16000, report.EndpointRemoved, "old-a", "10.244.1.10", false, false),
		ev(19300, report.PodGone, "old-a", "a"),
	}
	build := func(refusedBy string, from string) *report.Report {
		f := fail(19410, report.ClassRefused, true, "")
		f.LocalAddr, f.RemoteAddr, f.Node, f.Prober, f.RefusedBy = "0.0.0.0:40000", "10.96.76.245:80", "lab-node-2", "p-0", refusedBy
		if from != "" {
			f.ICMP = &report.ICMPError{From: from, Type: 3, Code: 3, Name: "port unreachable"}
		}
		return &report.Report{StartedAt: t0, EndedAt: at(25000), Timeline: timeline, Failures: []report.Failure{f},
			Rollout: &report.Rollout{Kind: "Deployment", Name: "web", Service: "web", TriggerSeenAfterMS: 20}}
	}
	for _, tc := range []struct{ name, by, from string }{
		{"a reset", report.RefusedByRST, ""},
		{"the pod's own ICMP error", report.RefusedByICMP, "10.244.1.10"},
	} {
		r := build(tc.by, tc.from)
		analyse(r)
		if f := r.Failures[0]; f.LikelyPod == "" || f.Evidence != report.EvidenceTimeline || find(r, ProxyRulesWithoutEndpoint) != nil {
			t.Errorf("%s: %+v, findings %+v; want a pod inferred from the timeline, not the rules' finding", tc.name, f, r.Findings)
		}
	}

	r := build(report.RefusedByICMP, "10.244.2.1")
	analyse(r)
	f := r.Failures[0]
	if f.LikelyPod != "" || f.Confidence != 0 || f.Candidates != nil || f.Evidence != "" ||
		!strings.Contains(f.Context, "reached no pod: an ICMP port unreachable from 10.244.2.1, no pod's address, refused the SYN") {
		t.Errorf("failure %+v: want no pod named, the context saying a reject rule refused it", f)
	}
	if r.Attribution.Certain != 0 || r.Attribution.Unattributed != 1 {
		t.Errorf("attribution %+v", r.Attribution)
	}
	if find(r, StopsBeforePropagation) != nil || find(r, Unexplained) != nil {
		t.Errorf("findings %+v: the refusal is no pod's race and not unexplained", r.Findings)
	}
	fd := find(r, ProxyRulesWithoutEndpoint)
	if fd == nil {
		t.Fatalf("findings %+v: want %s", r.Findings, ProxyRulesWithoutEndpoint)
	}
	ev := strings.Join(fd.Evidence, "\n")
	for _, want := range []string{"1 of them: an ICMP port unreachable refused the SYN, from an address no pod of the run held",
		"+19.41s (refused, from node lab-node-2, an ICMP port unreachable from 10.244.2.1): the API listed 1 serving endpoints"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if strings.Contains(ev, "conntrack") {
		t.Errorf("evidence speaks of conntrack, which was not read:\n%s", ev)
	}
	if !strings.Contains(fd.Title, "the rules on the host at 10.244.2.1 sent no request to a pod of service web while the API listed 1 serving endpoints") {
		t.Errorf("title %q", fd.Title)
	}
	if x := Explain(r); x.PreStopSeconds != 0 {
		t.Errorf("preStop advice %ds sized from a failure that reached no pod", x.PreStopSeconds)
	}
}

// A connect timeout an in-cluster prober's node dropped is said as a
// drop, on that node.
func TestNoConntrackEntryFromAProber(t *testing.T) {
	f := fail(5000, report.ClassConnectTimeout, true, "")
	f.Node, f.Prober, f.NoConntrackEntry = "lab-node-2", "p-0", true
	r := &report.Report{StartedAt: t0, EndedAt: at(9000), Failures: []report.Failure{f}}
	analyse(r)
	if c := r.Failures[0].Context; !strings.Contains(c, "dropped the SYN") {
		t.Errorf("context %q", c)
	}
	fd := find(r, ProxyRulesWithoutEndpoint)
	if fd == nil || !strings.Contains(fd.Title, "kube-proxy on node lab-node-2 held no endpoint for the Service: 1 request reached no pod") {
		t.Errorf("findings %+v", r.Findings)
	}
}

// kube-proxy may hear that the last endpoint stopped serving before
// rollprobe's watch does: a refusal its rules sent just before the gap
// rollprobe saw begin (within the receive tolerance) is the gap's, not a
// proxy that held no endpoint while the API listed one. Without the
// conntrack fact, a failure that early is not the gap's.
func TestNoConntrackEntryJustBeforeAServiceGap(t *testing.T) {
	ep := func(ms int, kind report.EventKind, ip string, serving bool) report.Event {
		return report.Event{At: at(ms), Kind: kind, Pod: "web-0", IP: ip, Ready: serving, Serving: serving, Terminating: kind == report.EndpointTerminating}
	}
	r := &report.Report{StartedAt: t0, EndedAt: at(15000),
		Rollout: &report.Rollout{Kind: "StatefulSet", Name: "web", Service: "web", TriggerSeenAfterMS: 20},
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "web-0", Revision: "web-a", Ready: true, IP: "10.0.0.5"},
			ep(1, report.EndpointAdded, "10.0.0.5", true),
			ev(5000, report.PodDeletionRequested, "web-0", "web-a"),
			ep(5300, report.EndpointTerminating, "10.0.0.5", false),
			ev(5400, report.PodGone, "web-0", "web-a"),
			ep(5500, report.EndpointRemoved, "10.0.0.5", false),
			{At: at(5600), Kind: report.PodCreated, Pod: "web-0", Revision: "web-b"},
			{At: at(9000), Kind: report.PodReady, Pod: "web-0", Revision: "web-b", IP: "10.0.0.9"},
			ep(9000, report.EndpointReady, "10.0.0.9", true),
		}}
	early := fail(5290, report.ClassRefused, true, "")
	early.NoConntrackEntry = true
	r.Failures = []report.Failure{early, fail(6000, report.ClassRefused, true, "")}
	r.Failures[1].NoConntrackEntry = true
	analyse(r)
	if f := find(r, NoServingEndpoint); f == nil || !strings.Contains(strings.Join(f.Evidence, "\n"), "2 requests failed") {
		t.Errorf("findings %+v: want both refusals the gap's", r.Findings)
	}
	if f := find(r, ProxyRulesWithoutEndpoint); f != nil {
		t.Errorf("finding %+v: the early refusal is the gap's", f)
	}
}
