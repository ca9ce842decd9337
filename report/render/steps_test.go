package render

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// An Argo canary's steps appear in the text and the Markdown, each with
// its verdict and the new revision's share, unknown when nothing named a
// pod.
func TestStepsRendered(t *testing.T) {
	share := 26.5
	r := &report.Report{Command: "run", Rollout: &report.Rollout{Kind: "Rollout", Name: "web", Steps: []report.CanaryStep{
		{Index: 1, Step: "pause", Weight: 25, StartS: 2, EndS: 5, Sent: 30, Failed: 2, Named: 30, NewSharePct: &share},
		{Index: 2, Step: "setWeight: 50", Weight: 50, StartS: 5, EndS: 6, Sent: 10, Pass: true},
	}}}
	var tb, mb strings.Builder
	if err := Text(&tb, r); err != nil {
		t.Fatal(err)
	}
	if err := Markdown(&mb, r); err != nil {
		t.Fatal(err)
	}
	text, md := tb.String(), mb.String()
	for _, want := range []string{"steps     2 pause", "weight  25%", "failed 2  FAIL  new revision 26.5% of 30 named",
		"3 setWeight: 50", "pass  new revision's share unknown"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	for _, want := range []string{"| 2 `pause` | 25% | +2.0s | +5.0s | 30 | 2 | ❌ | 26.5% of 30 |", "| 3 `setWeight: 50` | 50% | +5.0s | +6.0s | 10 | 0 | ✅ | unknown |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// A Rollout whose template is another object's (workloadRef) says, by the
// trigger, which object the trigger wrote; the others say nothing more.
func TestTemplateFromIsSaid(t *testing.T) {
	for _, from := range []string{"deployment web-template", ""} {
		r := &report.Report{Command: "run", Rollout: &report.Rollout{Kind: "Rollout", Name: "web", Namespace: "prod", Service: "web",
			Trigger: "restart (kubectl rollout restart)", Status: report.StatusComplete, TemplateFrom: from}}
		var tb, mb strings.Builder
		if err := Text(&tb, r); err != nil {
			t.Fatal(err)
		}
		if err := Markdown(&mb, r); err != nil {
			t.Fatal(err)
		}
		wantText := "(restart (kubectl rollout restart) on its template, deployment web-template (workloadRef)): complete"
		wantMD := "trigger *restart (kubectl rollout restart)* on its template, `deployment web-template` (workloadRef): **complete**"
		if from == "" {
			wantText, wantMD = "(restart (kubectl rollout restart)): complete", "trigger *restart (kubectl rollout restart)*: **complete**"
		}
		if !strings.Contains(tb.String(), wantText) {
			t.Errorf("text lacks %q:\n%s", wantText, tb.String())
		}
		if !strings.Contains(mb.String(), wantMD) {
			t.Errorf("markdown lacks %q:\n%s", wantMD, mb.String())
		}
	}
}

// The edge's access log is said in the text and the Markdown: what it
// named, what it did not, and when it could not be read, that the pods
// are inferred.
func TestEdgeLogIsSaid(t *testing.T) {
	seven := 7
	for _, tc := range []struct {
		log  report.EdgeLog
		want string
	}{
		{report.EdgeLog{File: "traefik.log", Format: "traefik", Requests: 2990, FailuresFound: 41, FailuresNotFound: 2, Duplicates: 1,
			Waits: []report.EdgeWaits{{T: 6, Requests: 3}, {T: 7, Requests: 1}}},
			"traefik.log (traefik): a line for 2990 of the run's requests; 41 failed requests found there (the pod the edge forwarded each to), 2 through the edge not found (their pods inferred) (an edge logs a request when it ends, and can hold one on a gone pod for minutes: --edge-log-wait waits longer); 4 requests waited 100ms or more inside the edge outside the attempt that answered them (failed attempts, a retry's backoff): drops the client saw only as waits; 1 request IDs on more than one line, left out"},
		{report.EdgeLog{File: "nginx.log", Format: "nginx", Requests: 400, FailuresFound: 5, FailuresNoBackend: 2, Retried: &seven},
			"nginx.log (nginx): a line for 400 of the run's requests; 5 failed requests found there (the pod the edge forwarded each to), 0 through the edge not found (their pods inferred); 7 requests the edge sent to another pod after an attempt failed (its retries: drops the client never saw); 2 failed requests the edge sent to no pod (its line names no backend: it answered them itself)"},
		{report.EdgeLog{File: "other.log", Format: "traefik", FailuresNotFound: 3},
			"other.log (traefik): no line of the run's requests (is the request ID header kept? Traefik: --accesslog.fields.headers.names.X-Request-Id=keep; nginx: the log_format in docs/run.md, with $http_x_request_id; the header --request-id-header names); the pods of failures through the edge are inferred from the timeline"},
		{report.EdgeLog{File: "gone.log", Format: "traefik", Error: "open gone.log: no such file or directory"},
			"gone.log not read (open gone.log: no such file or directory): the pods of failures through the edge are inferred from the timeline"},
	} {
		r := &report.Report{Command: "run", EdgeLog: &tc.log}
		var tb, mb strings.Builder
		if err := Text(&tb, r); err != nil {
			t.Fatal(err)
		}
		if err := Markdown(&mb, r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(tb.String(), "edge log  "+tc.want) {
			t.Errorf("text lacks %q:\n%s", tc.want, tb.String())
		}
		if !strings.Contains(mb.String(), "Edge access log: "+tc.want) {
			t.Errorf("markdown lacks %q:\n%s", tc.want, mb.String())
		}
	}
}
