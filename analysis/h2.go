package analysis

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

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
	return s.class == prober.ClosedNoGoAway || (s.class == prober.Reset && s.f.Phase != prober.PhaseDial.String()) ||
		s.grpcCut
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
	return (s.class == prober.Reset && s.h2 && s.f.GoAway != "") || (s.grpcCut && s.f.GoAway != "") || grpcResetCall(s.f, s.class) ||
		grpcUnprocessedCall(s.f, s.class)
}

func renderH2CloseWithoutGoAway(g *group, x facts) (report.Finding, bool) {
	evidence := []string{
		fmt.Sprintf("%s in flight failed (%s) %s: their connections, to pods whose deletion was requested, closed with no GOAWAY first",
			nOf(len(g.fails), "stream"), g.classes(), g.span(x.r.StartedAt)),
		"without a GOAWAY the client cannot tell which streams the server processed, and no client resends them safely",
	}
	if k := g.count(report.ClassGRPCStatus); k > 0 {
		evidence = append(evidence, fmt.Sprintf("%d of them grpc-go's calls, failed with its own status when the connection ended (the frames rollprobe read on it held no GOAWAY)", k))
	}
	return report.Finding{
		Title:    "HTTP/2 connections to terminating pods closed without a GOAWAY",
		Evidence: evidence,
		Fix: "on SIGTERM, announce the end and finish the streams in flight before closing: Go's http.Server.Shutdown (never Close, never exiting with connections open), " +
			"grpc-go's GracefulStop; a preStop sleep first, and a grace period above preStop plus that drain",
		Pods: g.podList(),
	}, true
}

func renderH2GoAwayDroppedStreams(g *group, x facts) (report.Finding, bool) {
	n := map[string]int{}
	kinds := map[string]int{}
	// grpc-go's calls whose stream the server reset, and those above the
	// GOAWAY's last stream; its cut ones are n[grpc_status] less these.
	grpcReset, grpcUnprocessed := 0, 0
	for i, f := range g.fails {
		n[f.Class]++
		kinds[f.GoAway]++
		switch c := class(&g.fails[i]); {
		case grpcResetCall(&g.fails[i], c):
			grpcReset++
		case grpcUnprocessedCall(&g.fails[i], c):
			grpcUnprocessed++
		}
	}
	evidence := []string{fmt.Sprintf("%s failed (%s) %s on connections to pods whose deletion was requested, as their servers shut down",
		nOf(len(g.fails), "stream"), g.classes(), g.span(x.r.StartedAt))}
	if kinds[report.GoAwaySingle]+kinds[report.GoAwayGraceful] > 0 {
		evidence = append(evidence, fmt.Sprintf("their connections' GOAWAY: single (one frame naming the last stream) for %d, graceful (2^31-1, then the last stream) for %d, none for %d",
			kinds[report.GoAwaySingle], kinds[report.GoAwayGraceful], kinds[""]))
	}
	var fixes []string
	if k := n[report.ClassGoAwayUnprocessed] + grpcUnprocessed; k > 0 {
		evidence = append(evidence, fmt.Sprintf("%d were above the last stream ID of the server's GOAWAY: "+
			"sent before the GOAWAY reached the client, never processed; Go's and grpc-go's clients resend such streams unseen, other clients fail them", k))
		if grpcUnprocessed > 0 {
			evidence = append(evidence, fmt.Sprintf("%d of them grpc-go's calls, failed UNAVAILABLE (\"the connection is draining\"): grpc-go resends such a call once, and these met a GOAWAY again", grpcUnprocessed))
		}
		fixes = append(fixes, "announce the shutdown in two phases: a GOAWAY with stream ID 2^31-1, a PING round trip, then the GOAWAY naming the last stream "+
			"(grpc-go's GracefulStop and Envoy's drain do; Go's http.Server.Shutdown sends one GOAWAY, so behind it only clients that resend unprocessed streams are safe)")
	}
	if k := n[report.ClassGoAwayCut] + n[report.ClassGRPCStatus] - grpcReset - grpcUnprocessed; k > 0 {
		evidence = append(evidence, fmt.Sprintf("%d were at or below the GOAWAY's last stream (the server had them) and got no answer before the connection closed: "+
			"processed or not, nobody knows", k))
		if calls := n[report.ClassGRPCStatus] - grpcReset - grpcUnprocessed; calls > 0 {
			evidence = append(evidence, fmt.Sprintf("%d of them grpc-go's calls, failed with its own status (it resends unseen the ones above the last stream)", calls))
		}
		fixes = append(fixes, "finish the streams in flight before exiting: Shutdown and GracefulStop return when they are done; keep the grace period above preStop plus that drain")
	}
	if k := n[report.ClassRefusedStream] + n[report.ClassRSTStream] + n[report.ClassReset] + grpcReset; k > 0 {
		evidence = append(evidence, fmt.Sprintf("%d were reset by the server (RST_STREAM or a TCP reset) while it shut down", k))
		if grpcReset > 0 {
			evidence = append(evidence, fmt.Sprintf("%d of them grpc-go's calls, failed with the status it gives the RST_STREAM's code (h2_code)", grpcReset))
		}
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

// Findings about HTTP/2's long-lived connections themselves: they outlive
// endpoint changes, so traffic follows connections, not the Service.
const (
	// H2PinnedToTerminating: pods kept receiving streams on established
	// connections after their deletion was requested.
	H2PinnedToTerminating = "h2-connections-stay-on-terminating-pods"
	// H2UnevenAfterRollout: after the rollout, the new pods' share of the
	// requests was uneven (connections placed once, never rebalanced).
	H2UnevenAfterRollout = "h2-connections-uneven-after-rollout"
)

// multiplexedKeptAlive: an HTTP/2 or gRPC run on long-lived connections
// whose responses name their pod: what the two findings above need.
func multiplexedKeptAlive(r *report.Report) bool {
	return prober.Protocol(r.Config.Protocol).Multiplexed() && r.Config.Connections > 0 && r.Config.BackendHeader != ""
}

func renderH2Pinned(_ *group, x facts) (report.Finding, bool) {
	r := x.r
	if !multiplexedKeptAlive(r) {
		return report.Finding{}, false
	}
	var evidence, pods []string
	clock := r.WallClock() // a series second's end on the deletion's clock
	for _, pt := range traffic(r, x.pods) {
		if pt.DeletedAt == nil || pt.ServedAfterDeletion == 0 || pt.LastServedS == nil {
			continue
		}
		after := max(0, clock.SecondAt(*pt.LastServedS+1).Sub(*pt.DeletedAt).Seconds())
		evidence = append(evidence, fmt.Sprintf("%s answered %s after its deletion was requested, the last in the second ending %.0fs after it", pt.Pod, nOf(pt.ServedAfterDeletion, "request"), math.Ceil(after)))
		pods = append(pods, pt.Pod)
	}
	if len(pods) == 0 {
		return report.Finding{}, false
	}
	edge, why := throughEdge(r)
	if edge == edgeAll {
		// The client's connections end at the edge, which picks a pod for
		// each call: what kept the calls coming is the edge's view of
		// the endpoints, not a connection to the pod.
		evidence = append(evidence, "the run's connections end at an edge ("+why+"), which picks a pod for each call: it kept sending calls to these pods until its view of the endpoints dropped them (nothing drops while the pod serves them); how long after the deletion is what a preStop sleep must cover through it")
		return report.Finding{
			Title:    "the edge kept sending HTTP/2 calls to pods after their deletion was requested",
			Evidence: evidence,
			Fix: "keep serving through a preStop sleep longer than the edge takes to drop the pod (as these pods did), then send GOAWAY: Go's http.Server.Shutdown or grpc-go's GracefulStop; " +
				"capping the pods' connection age does not move the edge's calls sooner",
			Pods: pods,
		}, true
	}
	evidence = append(evidence, "an endpoint change never moves an established HTTP/2 connection: its streams go to the same pod until the server sends GOAWAY or closes it (nothing drops while the pod serves them)")
	switch edge {
	case edgeSome:
		evidence = append(evidence, "some of the run's paths end at an edge ("+why+"), which picks a pod for each call: on those, it is the edge's view of the endpoints that kept the calls coming")
	case edgeUnknown:
		evidence = append(evidence, "if the target is an edge (an ingress or a proxy: nothing in this run says), it picks a pod for each call, and it is its view of the endpoints that kept the calls coming")
	}
	return report.Finding{
		Title:    "HTTP/2 connections kept sending to pods after their deletion was requested",
		Evidence: evidence,
		Fix: "keep serving until the GOAWAY, then send it: at the end of the preStop sleep, Go's http.Server.Shutdown or grpc-go's GracefulStop; " +
			"to move clients sooner, and so no connection outlives a rollout, cap connection age (grpc-go: keepalive.ServerParameters.MaxConnectionAge)",
		Pods: pods,
	}, true
}

// edgeReach is whether a run's connections end at an edge (an ingress, a
// proxy) rather than at the pods, by what the run measured.
type edgeReach int

const (
	edgeUnknown edgeReach = iota // nothing says (a name, no failure, no access log)
	edgeNone                     // every path enters the Service at an address of its own
	edgeSome                     // some paths end at an edge, not all (or not known)
	edgeAll                      // every path's connections end at an edge
)

// throughEdge says whether the run's paths ended at an edge, and what
// says so: the edge's access log holding a path's requests, or a path's
// failed connections to an address that is none of the Service's, a
// node's or a pod's (Failure.ViaEdge). A path whose target is the
// Service's own address or name (pathEntry) is direct.
func throughEdge(r *report.Report) (edgeReach, string) {
	names := pathNames(r)
	failedAtEdge := map[string]bool{}
	for i := range r.Failures {
		if r.Failures[i].ViaEdge {
			failedAtEdge[r.Failures[i].Path] = true
		}
	}
	edge, direct := 0, 0
	var why string
	for i, name := range names {
		switch {
		case edgeLogHolds(r, name):
			edge++
			why = "the edge's access log holds the run's requests"
		case failedAtEdge[name]:
			edge++
			if why == "" {
				why = "failed connections went to an address that is none of the Service's, a node's or a pod's"
			}
		case pathEntry(r, i) != nil:
			direct++
		}
	}
	switch {
	case edge == len(names):
		return edgeAll, why
	case edge > 0:
		return edgeSome, why
	case direct == len(names):
		return edgeNone, ""
	}
	return edgeUnknown, ""
}

// unevenRatio is the share of the busiest new pod against the least busy
// from which the load after a rollout is called uneven.
const unevenRatio = 2

// unevenMinRequests: fewer responses after the rollout say nothing of how
// the load spreads.
const unevenMinRequests = 100

func renderH2Uneven(_ *group, x facts) (report.Finding, bool) {
	r := x.r
	ro := r.Rollout
	if !multiplexedKeptAlive(r) || ro == nil || ro.OldPodsGoneAt == nil || ro.NewRevision == "" {
		return report.Finding{}, false
	}
	if edge, _ := throughEdge(r); edge == edgeAll || edge == edgeSome {
		return report.Finding{}, false // an edge picks a pod for each call: no connection is placed on one
	}
	// The first whole second of the run after the old pods were gone (the
	// series' seconds are the run's; the timeline's times the wall's).
	from := r.WallClock().SecondFrom(*ro.OldPodsGoneAt)
	served := map[string]uint64{}
	for _, p := range x.pods.All() {
		if p.Revision == ro.NewRevision && p.DeletedAt == nil {
			served[p.PodName] = 0
		}
	}
	var total uint64
	for _, row := range r.Series {
		if row.T < from {
			continue
		}
		for pod, n := range row.Backends {
			if _, ok := served[pod]; ok {
				served[pod] += n
				total += n
			}
		}
	}
	if len(served) < 2 || total < unevenMinRequests {
		return report.Finding{}, false
	}
	names := make([]string, 0, len(served))
	for pod := range served {
		names = append(names, pod)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(served[b], served[a]), cmp.Compare(a, b)) })
	most, least := served[names[0]], served[names[len(names)-1]]
	if most < unevenRatio*max(least, 1) && least > 0 {
		return report.Finding{}, false
	}
	parts := make([]string, 0, len(names))
	for _, pod := range names {
		parts = append(parts, fmt.Sprintf("%s %d (%.0f%%)", pod, served[pod], 100*float64(served[pod])/float64(total)))
	}
	change, which, over := "the rollout", "new pods", "the old pods gone"
	if ro.OldRevision == ro.NewRevision {
		// A drain or a scale keeps the revision: the pods it brought are
		// among the others, and a scale-out's get no connection at all.
		change, which, over = oneRevisionChange(ro.Change), "pods", "it was over"
	}
	return report.Finding{
		Title: fmt.Sprintf("after %s, long-lived connections left the %s unevenly loaded", change, which),
		Evidence: []string{
			fmt.Sprintf("from %+.0fs (%s) to the end, the %d %s answered: %s", float64(from), over, len(names), which, strings.Join(parts, ", ")),
			fmt.Sprintf("the run's %d connections were each placed once, on the pod the Service chose when it opened, and never rebalanced", r.Config.Connections),
		},
		Fix: "cap connection age on the server so clients reconnect and spread (grpc-go: keepalive.ServerParameters.MaxConnectionAge), " +
			"or balance on the client (gRPC's round_robin over a headless Service's addresses)",
		Pods: names,
	}, true
}

// oneRevisionChange names a change that keeps the revision: "the drain",
// "the scale" (fired, watched, or a deploy command's), or "the change"
// (one the run could not name).
func oneRevisionChange(c report.ChangeKind) string {
	switch c {
	case report.ChangeDrain:
		return "the drain"
	case report.ChangeScale:
		return "the scale"
	}
	return "the change"
}
