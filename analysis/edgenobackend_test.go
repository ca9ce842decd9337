package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// nginx through a rollout: two pods serving, one deleted at +5 s; nginx
// answered 502s at +5.3 s and +5.4 s with no live upstream (its log names
// the group, no address), while the API listed a serving pod. From the
// timeline alone they would be put on the deleted pod; the log says no pod
// took part. They get their own finding, name no pod and size no preStop.
// With the Service empty in the API too, its gap explains them.
func TestEdgeNoBackendReachedNoPod(t *testing.T) {
	timeline := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.244.1.5"},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.244.2.6"},
		endpointAt(1, report.EndpointAdded, "a", "10.244.1.5", true, true),
		endpointAt(1, report.EndpointAdded, "b", "10.244.2.6", true, true),
		ev(5000, report.PodDeletionRequested, "a", "old"),
		endpointAt(5050, report.EndpointTerminating, "a", "10.244.1.5", false, false),
	}
	build := func(noBackend bool, tl []report.Event) *report.Report {
		var fs []report.Failure
		for _, ms := range []int{5300, 5400} {
			f := fail(ms, report.ClassProxy5xx, true, "")
			f.Status, f.ViaEdge, f.EdgeNoBackend = 502, true, noBackend
			fs = append(fs, f)
		}
		return &report.Report{StartedAt: t0, EndedAt: at(10000), Timeline: tl, Failures: fs,
			EdgeLog: &report.EdgeLog{File: "nginx.log", Format: "nginx", Requests: 100, FailuresNoBackend: 2},
			Rollout: &report.Rollout{Kind: "Deployment", Name: "web", Service: "web"}}
	}
	inferred := build(false, timeline)
	analyse(inferred)
	if f := inferred.Failures[0]; f.LikelyPod != "a" {
		t.Fatalf("without the log's word: %+v; want the deleted pod inferred (the scene this test is about)", f)
	}

	r := build(true, timeline)
	analyse(r)
	for _, f := range r.Failures {
		if f.LikelyPod != "" || f.Confidence != 0 || f.Candidates != nil || f.Evidence != "" || f.Context != noBackendContext {
			t.Errorf("failure %+v: want no pod named, the context saying the edge sent it nowhere", f)
		}
	}
	if find(r, StopsBeforePropagation) != nil || find(r, Unexplained) != nil {
		t.Errorf("findings %+v: the edge's own answers are no pod's race and not unexplained", r.Findings)
	}
	if x := Explain(r); x.PreStopSeconds != 0 {
		t.Errorf("preStop advice %ds sized from failures that reached no pod", x.PreStopSeconds)
	}
	fd := find(r, EdgeHadNoBackend)
	if fd == nil || fd.Severity != report.SeverityError {
		t.Fatalf("findings %+v: want %s", r.Findings, EdgeHadNoBackend)
	}
	ev := strings.Join(fd.Evidence, "\n")
	for _, want := range []string{"2 requests failed (proxy_5xx 2)", "its access log (nginx.log, nginx) names no backend",
		"+5.30s (proxy_5xx 502): the API listed 1 serving endpoints, unchanged since +5.05s (0.25s before)", "max_fails"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(fd.Title, "the edge had no pod of service web to send 2 requests to while the API listed 1 serving endpoints") {
		t.Errorf("title %q", fd.Title)
	}

	// b gone from the API too: the Service had nothing to serve, and its
	// own finding takes them.
	empty := append(append([]report.Event{}, timeline...), endpointAt(5100, report.EndpointTerminating, "b", "10.244.2.6", false, false))
	r = build(true, empty)
	analyse(r)
	if find(r, EdgeHadNoBackend) != nil || find(r, NoServingEndpoint) == nil {
		t.Errorf("findings %+v: want %s, not %s", r.Findings, NoServingEndpoint, EdgeHadNoBackend)
	}
}
