package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// The edge's access log says how long it had each failed request: those
// it still had a second or more after the client's timeout ran out were
// held on a backend that did not answer; one it ended as the client's
// timeout ran out was not. Held on a deleted pod, the fix starts with the
// preStop; held on a pod that was serving, it does not.
func TestEdgeHeldPastTimeout(t *testing.T) {
	held := func(ms int, class, upstream string, edgeMS float64) report.Failure {
		f := fail(ms, class, false, "")
		f.End = at(ms + 5000)
		f.RemoteAddr, f.ViaEdge, f.UpstreamAddr, f.EdgeDurationMS = "10.100.0.1:443", true, upstream, edgeMS
		return f
	}
	run := func(failures ...report.Failure) *report.Report {
		return &report.Report{StartedAt: t0,
			Config: report.Config{Protocol: "grpc", TimeoutMS: 5000},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", IP: "10.244.1.5", Ready: true},
				{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", IP: "10.244.2.6", Ready: true},
				ev(5000, report.PodDeletionRequested, "a", "old"),
			},
			EdgeLog:  &report.EdgeLog{Format: "traefik", Requests: 2000, FailuresFound: len(failures)},
			Failures: failures}
	}

	gone := run(held(5200, report.ClassTimeout, "10.244.1.5:8080", 133478.4),
		held(5600, report.ClassTimeout, "10.244.1.5:8080", 72001),
		held(5900, report.ClassTimeout, "10.244.1.5:8080", 5999), // within the slack: ended with the client
		held(6100, report.ClassProxy5xx, "10.244.1.5:8080", 2000))
	analyse(gone)
	f := find(gone, EdgeHeldPastTimeout)
	if f == nil {
		t.Fatalf("no %s: %+v", EdgeHeldPastTimeout, gone.Findings)
	}
	all := strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"2 requests that failed were still held by the edge at least 1s after the client's 5s timeout ran out: its access log ends them up to 2m13.478s",
		"(its Duration, the edge's own measure); the client saw timeout 2",
		"2 forwarded to pod a (10.244.1.5:8080), sent from +5.20s to +5.60s, after its deletion (received at +5.00s); held up to 2m13.478s",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("evidence lacks %q:\n%s", want, all)
		}
	}
	if f.Severity != report.SeverityWarning || !strings.HasPrefix(f.Title, "the edge held 2 requests up to 2m13s, long after the client's 5s timeout, waiting on pods that were gone") ||
		!strings.HasPrefix(f.Fix, "keep the edge from sending requests to pods that are gone") || strings.Join(f.Pods, ",") != "a" {
		t.Errorf("finding %+v", *f)
	}
	// The propagation finding claims the same failures, and its preStop
	// is the one this fix names.
	if p := find(gone, StopsBeforePropagation); p == nil || !strings.Contains(p.Fix, "waits at least 3s") || !strings.Contains(f.Fix, "(the 3s the "+StopsBeforePropagation+" finding sizes)") {
		t.Errorf("fix %q does not name the propagation finding's preStop (%+v)", f.Fix, p)
	}

	// Held on a pod that was serving (no deletion): something else kept it
	// from answering, and the fix says so.
	serving := run(held(5200, report.ClassTimeout, "10.244.2.6:8080", 9000))
	analyse(serving)
	if f := find(serving, EdgeHeldPastTimeout); f == nil || !strings.Contains(f.Title, "waiting on backends that did not answer") ||
		!strings.HasPrefix(f.Fix, "find why those backends did not answer") || !strings.Contains(strings.Join(f.Evidence, "\n"), "1 forwarded to pod b (10.244.2.6:8080), sent from +5.20s to +5.20s, held up to 9s") {
		t.Errorf("held on a serving pod: %+v", f)
	}

	// None past the slack, or no log line (no duration): no finding.
	for name, r := range map[string]*report.Report{
		"ended with the client": run(held(5200, report.ClassTimeout, "10.244.1.5:8080", 5999)),
		"no line in the log":    run(held(5200, report.ClassTimeout, "", 0)),
	} {
		analyse(r)
		if f := find(r, EdgeHeldPastTimeout); f != nil {
			t.Errorf("%s: %+v", name, *f)
		}
	}
}
