package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// A run probing one StatefulSet pod by its own name: the connection
// failures to the deleted pod's address and the failures to resolve the
// name after its deletion are the pod-DNS finding's (not the propagation
// race's, whose preStop fix does not bring a pod back), with the times
// that size the retry; a failure to resolve before the deletion is not;
// the same failures against a Service's name are not a pod's.
func TestPodDNSNameStale(t *testing.T) {
	tl := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "web-0", Revision: "web-a", Ready: true, IP: "10.0.0.5"},
		{At: at(0), Kind: report.PodPresent, Pod: "web-1", Revision: "web-a", Ready: true, IP: "10.0.0.6"},
		{At: at(5000), Kind: report.PodDeletionRequested, Pod: "web-0", Revision: "web-a"},
		{At: at(5400), Kind: report.PodGone, Pod: "web-0", Revision: "web-a"},
		{At: at(5500), Kind: report.PodCreated, Pod: "web-0", Revision: "web-b"},
		{At: at(7000), Kind: report.PodReady, Pod: "web-0", Revision: "web-b", IP: "10.0.0.9"},
	}
	refused := fail(5300, report.ClassRefused, true, "")
	refused.PodAddr, refused.RemoteAddr, refused.LocalAddr = "10.0.0.5:8080", "10.0.0.5:8080", "0.0.0.0:40000"
	early := fail(2000, report.ClassDNS, true, "")
	failures := []report.Failure{early, refused, fail(6000, report.ClassDNS, true, ""), fail(9800, report.ClassDNS, true, "")}
	explain := func(target string) Explanation {
		r := &report.Report{StartedAt: t0, EndedAt: at(12000), Target: target, Timeline: tl,
			Failures: slices.Clone(failures), Rollout: &report.Rollout{Kind: "StatefulSet", Name: "web", Service: "web"}}
		return Explain(r)
	}
	x := explain("http://web-0.web-pods.default.svc:8080/")
	f := findingOf(x, PodDNSStale)
	if f == nil {
		t.Fatalf("findings %v: want %s", ids(x), PodDNSStale)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"web-0.web-pods.default.svc is one pod's own (web-0",
		"its successor web-0#2 was ready at +7.00s, 2.00s later",
		"1 request (refused 1) went to the deleted pod's address 10.0.0.5 from +5.30s to +5.30s, the last 0.30s after its deletion",
		"2 requests failed to resolve the name from +6.00s to +9.80s",
		"the last 2.80s after the successor was ready",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(f.Fix, "the Service web") || !strings.Contains(f.Fix, "here for 5s or more") || !slices.Equal(f.Pods, []string{"web-0", "web-0#2"}) {
		t.Errorf("fix %q, pods %v", f.Fix, f.Pods)
	}
	if findingOf(x, StopsBeforePropagation) != nil || findingOf(x, Unexplained) == nil {
		t.Errorf("findings %v: the refusal is the pod name's, the early dns failure no one's", ids(x))
	}
	// The Service's name: the refusal is the race's, nothing is the pod name's.
	x = explain("http://web.default.svc/")
	if findingOf(x, PodDNSStale) != nil || findingOf(x, StopsBeforePropagation) == nil {
		t.Errorf("a Service's name: findings %v", ids(x))
	}
}

func findingOf(x Explanation, id string) *report.Finding {
	for i := range x.Findings {
		if x.Findings[i].ID == id {
			return &x.Findings[i]
		}
	}
	return nil
}

func ids(x Explanation) []string {
	var out []string
	for _, f := range x.Findings {
		out = append(out, f.ID)
	}
	return out
}
