package analysis

import (
	"fmt"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// Findings only an HTTP/2 run can have (--protocol h2 or grpc): its streams share
// long-lived connections, so a pod's shutdown meets them through the
// connection's end (GOAWAY, a close, a reset stream), not through refused
// connects.
const (
	// H2CloseWithoutGoAway: connections to terminating pods closed with
	// streams in flight and no GOAWAY first.
	H2CloseWithoutGoAway = "h2-close-without-goaway"
	// H2GoAwayDroppedStreams: the server's GOAWAY (or its resets) at
	// shutdown left streams in flight unanswered.
	H2GoAwayDroppedStreams = "h2-goaway-dropped-streams"
)

// h2NoGoAway: a stream to a terminating pod whose connection ended with no
// GOAWAY: a FIN (closed_no_goaway), or a TCP reset after the connection was
// up.
func h2NoGoAway(s seen) bool {
	if !s.terminating || !s.h2 || s.f.GoAway != "" {
		return false
	}
	return s.class == prober.ClosedNoGoAway || (s.class == prober.Reset && s.f.Phase != prober.PhaseDial.String())
}

// h2ShutdownStream: a stream to a terminating pod that the server's GOAWAY
// or RST_STREAM ended.
func h2ShutdownStream(s seen) bool {
	if !s.terminating {
		return false
	}
	switch s.class {
	case prober.GoAwayUnprocessed, prober.GoAwayCut, prober.RefusedStream, prober.RSTStream:
		return true
	}
	return s.class == prober.Reset && s.h2 && s.f.GoAway != ""
}

func renderH2CloseWithoutGoAway(g *group, x facts) (report.Finding, bool) {
	return report.Finding{
		Title: "HTTP/2 connections to terminating pods closed without a GOAWAY",
		Evidence: []string{
			fmt.Sprintf("%d streams in flight failed (%s) from %s: their connections, to pods whose deletion was requested, closed with no GOAWAY first",
				len(g.fails), g.classes(), g.span(x.r.StartedAt)),
			"without a GOAWAY the client cannot tell which streams the server processed, and no client resends them safely",
		},
		Fix: "on SIGTERM, announce the end and finish the streams in flight before closing: Go's http.Server.Shutdown (never Close, never exiting with connections open), " +
			"grpc-go's GracefulStop; a preStop sleep first, and a grace period above preStop plus that drain",
		Pods: g.podList(),
	}, true
}

func renderH2GoAwayDroppedStreams(g *group, x facts) (report.Finding, bool) {
	n := map[string]int{}
	kinds := map[string]int{}
	for _, f := range g.fails {
		n[f.Class]++
		kinds[f.GoAway]++
	}
	evidence := []string{fmt.Sprintf("%d streams failed (%s) from %s on connections to pods whose deletion was requested, as their servers shut down",
		len(g.fails), g.classes(), g.span(x.r.StartedAt))}
	if kinds[report.GoAwaySingle]+kinds[report.GoAwayGraceful] > 0 {
		evidence = append(evidence, fmt.Sprintf("their connections' GOAWAY: single (one frame naming the last stream) for %d, graceful (2^31-1, then the last stream) for %d, none for %d",
			kinds[report.GoAwaySingle], kinds[report.GoAwayGraceful], kinds[""]))
	}
	var fixes []string
	if k := n[report.ClassGoAwayUnprocessed]; k > 0 {
		evidence = append(evidence, fmt.Sprintf("%d were above the last stream ID of the server's GOAWAY: "+
			"sent before the GOAWAY reached the client, never processed; Go's and grpc-go's clients resend such streams unseen, other clients fail them", k))
		fixes = append(fixes, "announce the shutdown in two phases: a GOAWAY with stream ID 2^31-1, a PING round trip, then the GOAWAY naming the last stream "+
			"(grpc-go's GracefulStop and Envoy's drain do; Go's http.Server.Shutdown sends one GOAWAY, so behind it only clients that resend unprocessed streams are safe)")
	}
	if k := n[report.ClassGoAwayCut]; k > 0 {
		evidence = append(evidence, fmt.Sprintf("%d were at or below the GOAWAY's last stream (the server had them) and got no answer before the connection closed: "+
			"processed or not, nobody knows", k))
		fixes = append(fixes, "finish the streams in flight before exiting: Shutdown and GracefulStop return when they are done; keep the grace period above preStop plus that drain")
	}
	if k := n[report.ClassRefusedStream] + n[report.ClassRSTStream] + n[report.ClassReset]; k > 0 {
		evidence = append(evidence, fmt.Sprintf("%d were reset by the server (RST_STREAM or a TCP reset) while it shut down", k))
		fixes = append(fixes, "stop taking new streams with a GOAWAY rather than resetting them, and answer the ones taken")
	}
	fix := ""
	for i, f := range fixes {
		if i > 0 {
			fix += "; "
		}
		fix += f
	}
	return report.Finding{
		Title:    "HTTP/2 streams in flight were dropped by the servers' shutdown",
		Evidence: evidence,
		Fix:      fix,
		Pods:     g.podList(),
	}, true
}
