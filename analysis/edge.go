package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// EdgeFailedConnections: requests failed between the prober and an edge
// (an ingress, a proxy: Failure.ViaEdge) before they were sent: the edge
// refused the connection, left it unanswered or did not finish the TLS
// handshake. No pod took part, whatever the rollout did: a starved CI
// run's TLS handshakes to Traefik went unfinished for 2 s while pods rolled.
const EdgeFailedConnections = "edge-failed-connections"

func renderEdgeFailed(g *group, x facts) (report.Finding, bool) {
	var addrs []string
	causes := map[string]int{}
	for _, f := range g.fails {
		if !slices.Contains(addrs, f.RemoteAddr) {
			addrs = append(addrs, f.RemoteAddr)
		}
		if f.TLSCause != "" {
			causes[f.TLSCause]++
		}
	}
	slices.Sort(addrs)
	at := strings.Join(addrs, ", ")
	ev := []string{
		fmt.Sprintf("%d requests to %s failed (%s) from %s before they were sent: the connection or its TLS handshake with the edge failed", len(g.fails), at, g.classes(), g.span(x.r.StartedAt)),
		at + " is none of the Service's addresses, no node's and no pod's of the run: an ingress or proxy ends the connection there, so no pod took part in these; a proxy that cannot reach a pod answers 5xx or keeps the client waiting (proxy_5xx, timeout), counted apart",
	}
	if len(causes) > 0 {
		var parts []string
		for c, n := range causes {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
		slices.Sort(parts)
		ev = append(ev, "the TLS handshakes failed by: "+strings.Join(parts, ", "))
	}
	return report.Finding{
		Title:    fmt.Sprintf("the edge at %s failed %d requests itself: they never reached a pod", at, len(g.fails)),
		Evidence: ev,
		Fix: "look at the edge at those times: its CPU (each new TLS connection costs it a handshake), its connection and accept limits, " +
			"its own restarts or configuration reloads, its error log, the network between the clients and it, and the probing host's own load " +
			"(a prober starved of CPU finishes handshakes late: its late sends are in the report's prober figures); " +
			"no preStop sleep or grace period on the pods changes these. " +
			"Probing the Service beside it (a second --target) tells the pods' drops from the edge's",
	}, true
}
