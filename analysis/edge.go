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
// handshake, or the prober did not get through them in time (a starved
// probing host: a loaded lab run's hub capture showed SYNs leaving the
// prober late and Traefik's prompt SYN-ACKs and first flights left
// unfinished, not one SYN Traefik's kernel left unanswered). No pod took
// part, whatever the rollout did.
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
		fmt.Sprintf("%s to %s failed (%s) %s before they were sent: the connection or its TLS handshake with the edge failed", nOf(len(g.fails), "request"), at, g.classes(), g.span(x.r.StartedAt)),
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
	if lag, ok := scheduleLagDuring(x.r, g.fails); ok {
		ev = append(ev, fmt.Sprintf("in the seconds of these failures the prober's own sends were up to %.0f ms behind their schedule (the report's series): "+
			"a probing host that far behind also connects and finishes handshakes late, so some of these may be its own", lag))
	}
	return report.Finding{
		Title:    fmt.Sprintf("%s failed on their connections to the edge at %s: they never reached a pod", nOf(len(g.fails), "request"), at),
		Evidence: ev,
		Fix: "look at the edge at those times: its CPU (each new TLS connection costs it a handshake), its connection and accept limits, " +
			"its own restarts or configuration reloads, its error log, the network between the clients and it, and the probing host's own load " +
			"(a prober starved of CPU finishes handshakes late: its late sends are in the report's prober figures); " +
			"no preStop sleep or grace period on the pods changes these. " +
			"Probing the Service beside it (a second --target) tells the pods' drops from the edge's",
	}, true
}

// scheduleLagDuring is the largest schedule lag (SeriesRow.MaxLagMS) of
// the seconds fails began in, from the series of their paths (the run's
// for a run of one path); false without such a second.
func scheduleLagDuring(r *report.Report, fails []report.Failure) (float64, bool) {
	series := map[string][]report.SeriesRow{"": r.Series}
	for _, p := range r.Paths {
		series[p.Name] = p.Series
	}
	seconds := map[string]map[int64]bool{}
	clock := r.WallClock() // failures' times are the wall clock's, the series' seconds the run's
	for _, f := range fails {
		if seconds[f.Path] == nil {
			seconds[f.Path] = map[int64]bool{}
		}
		seconds[f.Path][clock.SecondOf(beganAt(&f))] = true
	}
	lag, found := 0.0, false
	for path, secs := range seconds {
		for _, row := range series[path] {
			if secs[row.T] {
				lag, found = max(lag, row.MaxLagMS), true
			}
		}
	}
	return lag, found
}
