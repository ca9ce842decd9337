package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// h2Fail is an HTTP/2 stream failure on a kept-alive connection.
func h2Fail(ms int, class, goAway string) report.Failure {
	f := fail(ms, class, false, "")
	f.Phase, f.GoAway = "read_headers", goAway
	return f
}

// HTTP/2 failures at a terminating pod are explained by how the
// connection ended, not by the propagation race: a close without GOAWAY
// is one finding, a GOAWAY that left streams behind another, and the fix
// follows what the frames showed.
func TestH2Findings(t *testing.T) {
	exit := int32(0)
	timeline := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		ev(4000, report.PodCreated, "n", "new"),
		ev(4500, report.PodReady, "n", "new"),
		ev(5000, report.PodDeletionRequested, "a", "old"),
		{At: at(5010), Kind: report.ContainerTerminated, Pod: "a", Revision: "old", ExitCode: &exit},
		ev(7000, report.PodDeletionRequested, "b", "old"),
	}
	r := &report.Report{StartedAt: t0, Config: report.Config{Protocol: "h2"}, Timeline: timeline, Failures: []report.Failure{
		h2Fail(5020, report.ClassClosedNoGoAway, ""),
		h2Fail(5021, report.ClassReset, ""),
		h2Fail(7020, report.ClassGoAwayUnprocessed, report.GoAwaySingle),
		h2Fail(7021, report.ClassGoAwayUnprocessed, report.GoAwaySingle),
		h2Fail(7022, report.ClassGoAwayCut, report.GoAwaySingle),
	}}
	analyse(r)
	closed := find(r, H2CloseWithoutGoAway)
	if closed == nil || !strings.Contains(closed.Evidence[0], "2 streams in flight failed (closed_no_goaway 1, reset 1)") {
		t.Fatalf("close without GOAWAY: %+v (all %+v)", closed, r.Findings)
	}
	dropped := find(r, H2GoAwayDroppedStreams)
	if dropped == nil {
		t.Fatalf("no %s: %+v", H2GoAwayDroppedStreams, r.Findings)
	}
	evidence := strings.Join(dropped.Evidence, " | ")
	for _, want := range []string{"3 streams failed", "2 were above the last stream ID", "single (one frame naming the last stream) for 3, graceful (2^31-1, then the last stream) for 0, none for 0", "1 were at or below"} {
		if !strings.Contains(evidence, want) {
			t.Errorf("evidence %q lacks %q", evidence, want)
		}
	}
	if !strings.Contains(dropped.Fix, "two phases") || !strings.Contains(dropped.Fix, "finish the streams in flight") {
		t.Errorf("fix %q", dropped.Fix)
	}
	if find(r, StopsBeforePropagation) != nil || find(r, AbruptKeepAliveClose) != nil || find(r, Unexplained) != nil {
		t.Errorf("HTTP/2 failures claimed by another rule: %+v", r.Findings)
	}

	// gRPC runs on the same streams: the same findings.
	g := &report.Report{StartedAt: t0, Config: report.Config{Protocol: "grpc"}, Timeline: timeline, Failures: []report.Failure{h2Fail(5020, report.ClassClosedNoGoAway, "")}}
	analyse(g)
	if find(g, H2CloseWithoutGoAway) == nil {
		t.Errorf("gRPC close without GOAWAY: %+v", g.Findings)
	}

	// The same reset on HTTP/1.1 is the keep-alive finding's, as before.
	r1 := &report.Report{StartedAt: t0, Timeline: timeline, Failures: []report.Failure{h2Fail(5021, report.ClassReset, "")}}
	analyse(r1)
	if find(r1, AbruptKeepAliveClose) == nil || find(r1, H2CloseWithoutGoAway) != nil {
		t.Errorf("HTTP/1.1 reset: %+v", r1.Findings)
	}
}
