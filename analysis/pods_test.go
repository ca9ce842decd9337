package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// A StatefulSet replaces web-2 under its own name. The old pod and its
// successor (web-2#2) are two pods: a response naming web-2 is the old
// one's before the successor exists and the successor's after, each pod's
// traffic counts its own seconds, and nothing the successor served counts
// as served after the old one's deletion.
func TestAStatefulSetPodAndItsSuccessorAreTwoPods(t *testing.T) {
	tl := web2Recreated()
	var series []report.SeriesRow
	for s := int64(0); s < 12; s++ {
		row := report.SeriesRow{T: s, Backends: map[string]uint64{"web-1": 50}}
		if s < 5 || s >= 8 {
			row.Backends["web-2"] = 50
		}
		series = append(series, row)
	}
	late := report.Failure{Intended: at(9000), Start: at(9000), End: at(9010), Class: report.ClassHTTP5xx, Status: 503, Backend: "web-2", Fresh: true}
	early := fail(5200, report.ClassRefused, true, "")
	r := &report.Report{StartedAt: t0, EndedAt: at(12000), Timeline: tl, Series: series, Failures: []report.Failure{early, late},
		Totals: report.Totals{ByBackend: map[string]uint64{"web-1": 600, "web-2": 450}}}
	x := Explain(r)
	if got := x.Failures[1].LikelyPod; got != "web-2#2" {
		t.Errorf("a 503 naming web-2 at +9s was put on %q, want its successor web-2#2", got)
	}
	if got := x.Failures[0].LikelyPod; got != "web-2" {
		t.Errorf("a refusal at +5.2s was put on %q, want the deleted web-2", got)
	}
	byPod := map[string]report.PodTraffic{}
	for _, p := range x.Pods {
		byPod[p.Pod] = p
	}
	old, succ := byPod["web-2"], byPod["web-2#2"]
	if old.Served != 250 || old.ServedAfterDeletion != 0 || old.Revision != "web-a" || old.DeletedAt == nil {
		t.Errorf("web-2: %+v; want 250 served (seconds 0-4), none after its deletion", old)
	}
	if succ.Served != 200 || succ.Revision != "web-b" || succ.DeletedAt != nil || succ.FirstServedS == nil || *succ.FirstServedS != 8 {
		t.Errorf("web-2#2: %+v; want 200 served from +8s", succ)
	}
	if byPod["web-1"].Served != 600 {
		t.Errorf("web-1: %+v", byPod["web-1"])
	}
}

// The kernel's record of where a connection went names its pod for
// certain, even where the timeline leaves two candidates; an address no
// pod of the timeline had leaves the inference to the timeline, which
// says so. Every named pod says what named it.
func TestConntrackNamesThePod(t *testing.T) {
	tl := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.244.1.5"},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.244.2.6"},
		{At: at(0), Kind: report.PodPresent, Pod: "c", Revision: "old", Ready: true, IP: "10.244.1.7"},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		ev(5100, report.PodDeletionRequested, "b", "old"),
	}
	mapped := fail(5300, report.ClassRefused, true, "")
	mapped.PodAddr = "10.244.2.6:8080"
	elsewhere := fail(5400, report.ClassRefused, true, "")
	elsewhere.PodAddr = "10.100.0.1:443" // a proxy's address: no pod
	named := fail(5500, report.ClassHTTP5xx, true, "c")
	r := &report.Report{StartedAt: t0, EndedAt: at(10000), Timeline: tl, Failures: []report.Failure{mapped, elsewhere, named}}
	x := Explain(r)
	got := x.Failures
	if got[0].LikelyPod != "b" || got[0].Confidence != 1 || got[0].Evidence != report.EvidenceConntrack || len(got[0].Candidates) != 0 {
		t.Errorf("mapped to b's address: %+v", got[0])
	}
	if got[1].Confidence == 1 || got[1].Evidence != report.EvidenceTimeline || len(got[1].Candidates) < 2 {
		t.Errorf("an address no pod had: %+v (want the timeline's candidates)", got[1])
	}
	if got[2].LikelyPod != "c" || got[2].Evidence != report.EvidenceBackendHeader {
		t.Errorf("named by the backend header: %+v", got[2])
	}
	if x.Attribution.Certain != 2 || x.Attribution.Ambiguous != 1 {
		t.Errorf("attribution %+v", *x.Attribution)
	}
}

// The edge's access log names the pod it forwarded a request to, for
// certain, where the timeline leaves two candidates (a proxy_5xx through an
// ingress); an address no pod had (a stale line, another backend) leaves
// the inference to the timeline. The kernel's record, when both exist,
// comes first (it is of this host's own connection).
func TestAccessLogNamesThePod(t *testing.T) {
	tl := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.244.1.5"},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.244.2.6"},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		ev(5100, report.PodDeletionRequested, "b", "old"),
	}
	logged := fail(5300, report.ClassProxy5xx, true, "")
	logged.ViaEdge, logged.UpstreamAddr = true, "10.244.1.5:8080"
	unknown := fail(5400, report.ClassProxy5xx, true, "")
	unknown.ViaEdge, unknown.UpstreamAddr = true, "10.244.9.9:8080"
	both := fail(5500, report.ClassRefused, true, "")
	both.PodAddr, both.UpstreamAddr = "10.244.2.6:8080", "10.244.1.5:8080"
	r := &report.Report{StartedAt: t0, EndedAt: at(10000), Timeline: tl, Failures: []report.Failure{logged, unknown, both}}
	got := Explain(r).Failures
	if got[0].LikelyPod != "a" || got[0].Confidence != 1 || got[0].Evidence != report.EvidenceAccessLog || len(got[0].Candidates) != 0 ||
		!strings.Contains(got[0].Context, "the edge forwarded it there") {
		t.Errorf("forwarded to a's address: %+v", got[0])
	}
	if got[1].Confidence == 1 || got[1].Evidence != report.EvidenceTimeline || len(got[1].Candidates) < 2 {
		t.Errorf("an address no pod had: %+v (want the timeline's candidates)", got[1])
	}
	if got[2].LikelyPod != "b" || got[2].Evidence != report.EvidenceConntrack {
		t.Errorf("conntrack and a log line: %+v, want conntrack's b", got[2])
	}
}

// Responses conntrack mapped count for the pod that bore their address in
// the second their connections were dialled in: a StatefulSet's successor
// under the same name is its own pod, an address given to a new pod is
// the new pod's from then on, and an address no pod had (a proxy's) is
// nobody's. Where conntrack mapped nothing to a pod, no pod shows a count
// (not a 0 that would mean "measured: none").
func TestConntrackServedCountsPerPod(t *testing.T) {
	tl := append(web2Recreated(),
		report.Event{At: at(9200), Kind: report.PodReady, Pod: "other", Revision: "web-b", IP: "10.0.0.5"})
	responses := []report.ConntrackResponses{
		{Addr: "10.0.0.5:8080", T: 2, Connections: 10, Responses: 100},
		{Addr: "10.0.0.6:8080", T: 3, Connections: 1, Responses: 40},
		{Addr: "10.0.0.9:8080", T: 9, Connections: 3, Responses: 30},
		{Addr: "10.0.0.5:8080", T: 10, Connections: 7, Responses: 7},
		{Addr: "10.100.0.1:443", T: 4, Connections: 5, Responses: 5},
	}
	served := func(ct *report.Conntrack) map[string]*uint64 {
		r := &report.Report{StartedAt: t0, EndedAt: at(12000), Timeline: tl, Conntrack: ct}
		out := map[string]*uint64{}
		for _, p := range Explain(r).Pods {
			out[p.Pod] = p.ServedConntrack
		}
		return out
	}
	got := served(&report.Conntrack{Watching: true, Responses: responses})
	for pod, want := range map[string]uint64{"web-2": 100, "web-1": 40, "web-2#2": 30, "other": 7} {
		if got[pod] == nil || *got[pod] != want {
			t.Errorf("%s: served_conntrack %v, want %d", pod, got[pod], want)
		}
	}
	for name, ct := range map[string]*report.Conntrack{
		"no conntrack":    nil,
		"not read":        {Reason: "no CAP_NET_ADMIN"},
		"only to a proxy": {Watching: true, Responses: responses[4:]},
	} {
		for pod, n := range served(ct) {
			if n != nil {
				t.Errorf("%s: %s shows %d served by conntrack, want none shown", name, pod, *n)
			}
		}
	}
}

// web2Recreated is a StatefulSet's timeline: web-1 and web-2 serve; web-2
// (10.0.0.5) is deleted at +5s and gone at +5.5s, and its successor of
// the same name is created at +5.6s and ready at +8s on 10.0.0.9.
func web2Recreated() []report.Event {
	return []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "web-2", Revision: "web-a", Ready: true, IP: "10.0.0.5"},
		{At: at(0), Kind: report.PodPresent, Pod: "web-1", Revision: "web-a", Ready: true, IP: "10.0.0.6"},
		{At: at(5000), Kind: report.PodDeletionRequested, Pod: "web-2", Revision: "web-a"},
		{At: at(5500), Kind: report.PodGone, Pod: "web-2", Revision: "web-a"},
		{At: at(5600), Kind: report.PodCreated, Pod: "web-2", Revision: "web-b"},
		{At: at(5700), Kind: report.EndpointRemoved, Pod: "web-2", IP: "10.0.0.5"},
		{At: at(8000), Kind: report.PodReady, Pod: "web-2", Revision: "web-b", IP: "10.0.0.9"},
	}
}

// A drain evicts every pod of the node: its events about a pod the watch
// never saw (another workload's) add no pod to the run's table, while
// those about the run's own pods fold in as before.
func TestDrainEventsOfOtherWorkloadsAddNoPod(t *testing.T) {
	tl := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "web-1", Revision: "web-a", IP: "10.0.0.1", Ready: true},
		{At: at(1000), Kind: report.EvictionRefused, Pod: "web-1", Node: "n1"},
		{At: at(1000), Kind: report.PodEvicted, Pod: "other-1", Node: "n1", Revision: "other-a"},
		{At: at(1000), Kind: report.EvictionRefused, Pod: "other-2", Node: "n1"},
		{At: at(1000), Kind: report.EvictionFailed, Pod: "other-3", Node: "n1"},
		{At: at(9000), Kind: report.EvictionOvertaken, Pod: "other-2", Node: "n1"},
	}
	ps := FoldPods(tl)
	var names []string
	for _, p := range ps.All() {
		names = append(names, p.Name)
	}
	if len(names) != 1 || names[0] != "web-1" {
		t.Errorf("pods %v, want web-1 only", names)
	}
	if p := ps.Get("web-1"); p == nil || p.Node != "n1" || p.DeletedAt != nil {
		t.Errorf("web-1: %+v, want its node from the drain's event and no deletion", p)
	}
}

// Responses the edge's access log says it forwarded count for the pod
// that bore the address in their second, as conntrack's do; a log that
// named no response on a pod (or none read) shows no count, not a 0.
func TestAccessLogServedCountsPerPod(t *testing.T) {
	tl := append(web2Recreated(),
		report.Event{At: at(9200), Kind: report.PodReady, Pod: "other", Revision: "web-b", IP: "10.0.0.5"})
	responses := []report.EdgeResponses{
		{Addr: "10.0.0.5:8080", T: 2, Responses: 100},
		{Addr: "10.0.0.6:8080", T: 3, Responses: 40},
		{Addr: "10.0.0.9:8080", T: 9, Responses: 30},
		{Addr: "10.0.0.5:8080", T: 10, Responses: 7},
		{Addr: "10.0.9.9:8080", T: 4, Responses: 5},
	}
	served := func(e *report.EdgeLog) map[string]*uint64 {
		r := &report.Report{StartedAt: t0, EndedAt: at(12000), Timeline: tl, EdgeLog: e}
		out := map[string]*uint64{}
		for _, p := range Explain(r).Pods {
			out[p.Pod] = p.ServedAccessLog
		}
		return out
	}
	got := served(&report.EdgeLog{Format: "traefik", Responses: responses})
	for pod, want := range map[string]uint64{"web-2": 100, "web-1": 40, "web-2#2": 30, "other": 7} {
		if got[pod] == nil || *got[pod] != want {
			t.Errorf("%s: served_access_log %v, want %d", pod, got[pod], want)
		}
	}
	for name, e := range map[string]*report.EdgeLog{
		"no log":           nil,
		"not read":         {Format: "traefik", Error: "open: no such file"},
		"only another pod": {Format: "traefik", Responses: responses[4:]},
	} {
		for pod, n := range served(e) {
			if n != nil {
				t.Errorf("%s: %s shows %d served by the access log, want none shown", name, pod, *n)
			}
		}
	}
}
