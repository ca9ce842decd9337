package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// grpcGoFailure is a call the grpc-go client failed at ms: phase dial
// (never sent) or read_headers (its connection lost), with grpc-go's
// message.
func grpcGoFailure(ms int, phase, msg string) report.Failure {
	f := fail(ms, report.ClassGRPCStatus, false, "")
	f.Phase, f.GRPCStatus, f.Error, f.Path = phase, "UNAVAILABLE", msg, "grpc-go"
	return f
}

// The lab's grpc-naive probed through grpc-go: old pod a goes at +5s, new
// pod b turns ready at +6s, and grpc-go fails calls unsent while its
// channel backs off after a connect that timed out or was refused. The
// timeline put those calls on b, just ready, and the run said b received
// traffic before it could serve; no pod received them: they are named on
// no pod, and their own finding says why, with the dials' causes.
func TestGRPCGoCallsFailedUnsentAreOnNoPod(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		ev(5300, report.PodCreated, "b", "new"),
		ev(5600, report.PodGone, "a", "old"),
		ev(6000, report.PodReady, "b", "new"),
		ev(6300, report.AllOldPodsGone, "", ""),
	}, Failures: []report.Failure{
		grpcGoFailure(6200, "dial", `connection error: desc = "transport: Error while dialing: dial tcp 10.96.0.10:80: i/o timeout"`),
		grpcGoFailure(6300, "dial", `connection error: desc = "transport: Error while dialing: dial tcp 10.96.0.10:80: connect: connection refused"`),
		grpcGoFailure(6400, "dial", `connection error: desc = "transport: Error while dialing: dial tcp 10.96.0.10:80: i/o timeout"`),
		grpcGoFailure(6500, "dial", "context deadline exceeded"),
	}}
	r.Failures[3].Class, r.Failures[3].GRPCStatus = report.ClassTimeout, "" // it waited for a connection until its time ran out
	analyse(r)
	for _, f := range r.Failures {
		if f.LikelyPod != "" || f.Context != grpcUnsentContext {
			t.Errorf("failure at %+.2fs: pod %q, context %q; want no pod, %q", f.Intended.Sub(t0).Seconds(), f.LikelyPod, f.Context, grpcUnsentContext)
		}
	}
	if find(r, ReadyTooEarly) != nil || find(r, Unexplained) != nil {
		t.Errorf("findings %v: no pod received these calls", findingIDsOf(r))
	}
	g := find(r, GRPCFailedUnsent)
	if g == nil {
		t.Fatalf("findings %v, want %s", findingIDsOf(r), GRPCFailedUnsent)
	}
	ev := strings.Join(g.Evidence, "\n")
	for _, want := range []string{"4 calls failed (grpc_status 3, timeout 1) from +6.20s to +6.50s without being sent", "timed out 2, refused 1, other 1",
		"the last came 0.20s after the rollout's old pods were all gone (+6.30s)"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
}

// A grpc-go call answered with the server's own UNAVAILABLE by a pod
// whose deletion was requested (its backend header names it) is no rule's:
// the catch-all takes it, and must not say that no pod was terminating,
// which the failure's own context contradicts. A server's status later,
// with no pod changing, is said as before.
func TestUnexplainedFailuresOnChangingPodsSaySo(t *testing.T) {
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		ev(5600, report.PodGone, "a", "old"),
	}, Failures: []report.Failure{
		grpcGoFailure(5100, "", "the server's own, shutting down"),
		grpcGoFailure(9000, "", "the server's own"),
	}, Config: report.Config{Protocol: "grpc", BackendHeader: "x-backend"}}
	r.Failures[0].Backend = "a"
	analyse(r)
	if r.Failures[0].LikelyPod != "a" {
		t.Fatalf("the answered call put on %q, want a (terminating, named by its backend header)", r.Failures[0].LikelyPod)
	}
	u := find(r, Unexplained)
	if u == nil {
		t.Fatalf("findings %v, want %s", findingIDsOf(r), Unexplained)
	}
	ev := strings.Join(u.Evidence, "\n")
	if u.Title != "failures no finding explains" || !strings.Contains(ev, "1 request failed (grpc_status 1) at +5.10s on pods terminating or just ready then") ||
		!strings.Contains(ev, "1 more request failed (grpc_status 1) at +9.00s while no pod was terminating or just ready") {
		t.Errorf("%q:\n%s\nwant it said that the failure was on a pod changing then", u.Title, ev)
	}
}

func findingIDsOf(r *report.Report) []string {
	var ids []string
	for _, f := range r.Findings {
		ids = append(ids, f.ID)
	}
	return ids
}

// Beside a raw path whose connects met the race, a grpc-go path whose
// channel met it too shows it only as calls failed unsent: its window is
// unknown, and the raw path is not said to have routed longer than it.
func TestPathWindowOfGRPCGoWithCallsUnsentIsUnknown(t *testing.T) {
	raw := fail(5400, report.ClassRefused, true, "")
	raw.Path = "raw"
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
	}, Failures: []report.Failure{raw,
		grpcGoFailure(5500, "dial", `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.9:30095: connect: connection refused"`)},
		Paths: []report.PathReport{{Name: "raw"}, {Name: "grpc-go"}}}
	analyse(r)
	prop := find(r, StopsBeforePropagation)
	if prop == nil {
		t.Fatalf("findings %v, want %s", findingIDsOf(r), StopsBeforePropagation)
	}
	ev := strings.Join(prop.Evidence, "\n")
	if !strings.Contains(ev, "raw 0.40s, grpc-go unknown (its channel's failed connects are in its calls failed unsent)") || strings.Contains(ev, "longer than") {
		t.Errorf("evidence:\n%s\nwant grpc-go's window unknown, and no path said to have routed longer than it", ev)
	}
}

// A grpc-go call cut with its connection to a terminating pod is named by
// what the prober read on that connection, as the raw client's streams
// are: no GOAWAY is the abrupt close's; after a GOAWAY, the shutdown's
// dropped streams (the prober reads the frames over h2c and TLS alike: the
// target's scheme changes nothing here). A call whose stream the server reset, its connection up, is the
// shutdown's reset stream, whatever GOAWAY came; one failed with its
// connection up and no cause is no rule's.
func TestGRPCGoCutCallsAreNamedByTheirGoAway(t *testing.T) {
	for _, tc := range []struct {
		goAway, h2Code, end string
		want, line          string
	}{
		{"", "", report.StreamEndConnLost, H2CloseWithoutGoAway, "1 of them grpc-go's calls"},
		{report.GoAwaySingle, "", report.StreamEndConnLost, H2GoAwayDroppedStreams, "1 of them grpc-go's calls, failed with its own status"},
		{report.GoAwayGraceful, "", report.StreamEndConnLost, H2GoAwayDroppedStreams, "1 of them grpc-go's calls, failed with its own status"},
		{"", "INTERNAL_ERROR", report.StreamEndReset, H2GoAwayDroppedStreams, "1 of them grpc-go's calls, failed with the status it gives the RST_STREAM's code"},
		{report.GoAwaySingle, "NO_ERROR", report.StreamEndReset, H2GoAwayDroppedStreams, "1 were reset by the server"},
		{report.GoAwaySingle, "", report.StreamEndUnprocessed, H2GoAwayDroppedStreams, "1 of them grpc-go's calls, failed UNAVAILABLE (\"the connection is draining\")"},
		{"", "", "", Unexplained, "on pods terminating or just ready"},
	} {
		cut := grpcGoFailure(5100, "read_headers", "error reading from server: EOF")
		cut.Path, cut.GoAway, cut.H2Code, cut.StreamEnd = "", tc.goAway, tc.h2Code, tc.end
		r := &report.Report{StartedAt: t0, Config: report.Config{Protocol: "grpc"}, Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
			ev(5000, report.PodDeletionRequested, "a", "old"),
		}, Failures: []report.Failure{cut}}
		analyse(r)
		if ids := findingIDsOf(r); len(ids) != 1 || ids[0] != tc.want {
			t.Errorf("stream_end %q, goaway %q: findings %v, want %s alone", tc.end, tc.goAway, ids, tc.want)
			continue
		}
		if ev := strings.Join(r.Findings[0].Evidence, "\n"); !strings.Contains(ev, tc.line) || (tc.end != report.StreamEndConnLost && strings.Contains(ev, "at or below the GOAWAY's last stream")) {
			t.Errorf("%s, h2 code %q: evidence lacks %q, or calls a reset stream cut:\n%s", tc.want, tc.h2Code, tc.line, ev)
		}
	}
}

// A grpc-go call answered with a proxy's 502 (not gRPC: grpc-go fails it
// UNAVAILABLE, the prober keeps the HTTP status) is a 5xx response, as the
// raw client's http_5xx is, never a connection cut. Whether it named a pod
// is unknown (grpc-go keeps no header of it): with a backend header
// configured the finding says so, not that a proxy answered.
func TestGRPCGoProxy5xxIsAServerError(t *testing.T) {
	for _, backendHeader := range []string{"", "x-pod-name"} {
		answered := grpcGoFailure(5100, "", "unexpected HTTP status code received from server: 502 (Bad Gateway); malformed header: missing HTTP content-type")
		answered.Status = 502
		r := &report.Report{StartedAt: t0, Config: report.Config{Protocol: "grpc", BackendHeader: backendHeader}, Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
			ev(5000, report.PodDeletionRequested, "a", "old"),
		}, Failures: []report.Failure{answered}}
		analyse(r)
		if ids := findingIDsOf(r); len(ids) != 1 || ids[0] != ServerErrors {
			t.Fatalf("backend header %q: findings %v, want %s alone", backendHeader, ids, ServerErrors)
		}
		ev := strings.Join(r.Findings[0].Evidence, "\n")
		if !strings.Contains(ev, "1 of them grpc-go's calls, answered with an HTTP 5xx that is not gRPC") {
			t.Errorf("evidence does not say the call was grpc-go's:\n%s", ev)
		}
		if unknown := strings.Contains(ev, "is unknown"); unknown != (backendHeader != "") || strings.Contains(ev, "most likely answered them") {
			t.Errorf("backend header %q: evidence\n%s\nwant the source unknown exactly when a header was configured, never a proxy claimed", backendHeader, ev)
		}
	}
}
