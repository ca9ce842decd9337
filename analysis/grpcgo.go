package analysis

import (
	"fmt"
	"strings"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// The grpc-go client's failures (--grpc-client grpc-go or both): calls it
// never sent, and calls it sent and lost with their connection.

// GRPCFailedUnsent: grpc-go (--grpc-client grpc-go) failed calls without
// sending them, its channel having no ready connection: between a lost
// connection and the next, and while it waited to dial again after a
// failed attempt. No pod received them.
const GRPCFailedUnsent = "grpc-calls-failed-without-a-connection"

// grpcUnsent: a call grpc-go failed itself, never sent (the prober's phase
// dial for a grpc_status, or for a timeout: the call waited for a
// connection until its time ran out; see prober.grpcCall). Only the
// grpc-go client makes one; the raw client's connects fail as refused or
// connect_timeout, a timeout in its dial as connect_timeout.
func grpcUnsent(f *report.Failure, c prober.Class) bool {
	return (c == prober.GRPCStatus || c == prober.Timeout) && f.Phase == prober.PhaseDial.String()
}

// grpcUnsentContext is such a failure's context: it reached no pod,
// whatever the pods were doing then.
const grpcUnsentContext = "grpc-go failed the call without sending it: its channel had no ready connection " +
	"(the error is its last connection attempt's); no pod received it"

// dialCause reads the cause of the channel's last failed connection
// attempt from the status message grpc-go gave the call (its
// "connection error: desc = ... dial tcp ...: <cause>").
func dialCause(msg string) string {
	switch {
	case strings.Contains(msg, "i/o timeout"):
		return "timed out"
	case strings.Contains(msg, "connection refused"):
		return "refused"
	}
	return "other"
}

func renderGRPCFailedUnsent(g *group, x facts) (report.Finding, bool) {
	causes := map[string]int{}
	for _, f := range g.fails {
		causes[dialCause(f.Error)]++
	}
	var parts []string
	for _, c := range []string{"timed out", "refused", "other"} {
		if n := causes[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
	}
	evidence := []string{
		fmt.Sprintf("%s failed (%s) %s without being sent: grpc-go fails a call at once, unless it waits for ready, "+
			"while its channel has no ready connection (after it lost one, and while it backs off before dialing again); no pod received them",
			nOf(len(g.fails), "call"), g.classes(), g.span(x.r.StartedAt)),
		"the channel's last connection attempt before each, by the calls' messages: " + strings.Join(parts, ", ") +
			" (through a Service's address, a connect that timed out went to a pod address that no longer answered, a gone pod's; refused, to a pod no longer listening)",
	}
	// After the old pods were all gone, nothing the rollout did was left
	// for a connect to meet: the calls then failed on a channel still
	// waiting out its backoff after an earlier failed attempt.
	last := g.fails[len(g.fails)-1].Intended
	for _, e := range x.r.Timeline {
		if e.Kind == report.AllOldPodsGone && last.After(e.At) {
			evidence = append(evidence, fmt.Sprintf("the last came %.2fs after the rollout's old pods were all gone (%+.2fs): grpc-go waits before each new attempt "+
				"(about 1 s after a failed one, then 1.6 times longer after each failure, up to 2 minutes: its default backoff), and fails the calls meanwhile, so its clients "+
				"kept failing after the pods that caused it had gone", last.Sub(e.At).Seconds(), e.At.Sub(x.r.StartedAt).Seconds()))
			break
		}
	}
	return report.Finding{
		Title:    "grpc-go failed calls without sending them: its channel had no connection",
		Evidence: evidence,
		Fix: "keep the old pods serving until clients have moved: a preStop sleep longer than endpoint propagation, then grpc-go's GracefulStop " +
			"(its GOAWAY moves a client's channel to a new connection while the old pod still serves, so no call finds the channel without one); " +
			"a client that must ride out a reconnect can mark its calls wait-for-ready (grpc.WaitForReady(true)) or retry UNAVAILABLE with a retry policy in its service config",
	}, true
}

// grpcCutCall: a call the grpc-go client sent and lost with its connection
// before any answer (a grpc_status in read_headers, its connection ended:
// the raw client's grpc_status is always an answer, with no phase). Its
// goaway is set when the prober read a GOAWAY on that connection: the
// call was then at or below its last stream (grpc-go resends the ones
// above unseen), as the raw client's goaway_cut.
func grpcCutCall(f *report.Failure, c prober.Class) bool {
	return grpcSentEnded(f, c, report.StreamEndConnLost)
}

// grpcResetCall: a call the grpc-go client sent whose stream the server
// reset (RST_STREAM: its code in h2_code), its connection still up, as
// the raw client's rst_stream.
func grpcResetCall(f *report.Failure, c prober.Class) bool {
	return grpcSentEnded(f, c, report.StreamEndReset)
}

// grpcUnprocessedCall: a call the grpc-go client sent above the last
// stream of the server's GOAWAY and did not resend (it resends such a call
// once), as the raw client's goaway_unprocessed.
func grpcUnprocessedCall(f *report.Failure, c prober.Class) bool {
	return grpcSentEnded(f, c, report.StreamEndUnprocessed)
}

// grpcSentEnded: a grpc_status of a call grpc-go sent and got no answer
// to (read_headers) that ended as end (its stream_end).
func grpcSentEnded(f *report.Failure, c prober.Class, end string) bool {
	return c == prober.GRPCStatus && f.Phase == prober.PhaseReadHeaders.String() && f.StreamEnd == end
}

// grpcGo5xx: a call the grpc-go client failed on a response that was not
// gRPC, with an HTTP 5xx (a proxy's 502, say): its status is that HTTP
// status (the raw client's grpc_status always carries 200).
func grpcGo5xx(f *report.Failure, c prober.Class) bool {
	return c == prober.GRPCStatus && f.Status >= 500 && f.Status <= 599
}
