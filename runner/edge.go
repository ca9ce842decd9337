package runner

import (
	"cmp"
	"context"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/edgelog"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// markEdgeConnections sets Failure.ViaEdge on each failure whose
// connection went to an address that is none of svc's (its cluster IPs,
// external IPs and load balancer IPs), no node's (nodeIPs, as
// rollout.Watcher.NodeIPs gives them) and no pod's of the run (an address
// in the timeline): something else, an ingress or a proxy, ended that
// connection, so what failed before the request reached it cannot have
// been a pod's doing. Any port of those addresses counts as theirs: a
// node's address with another port (a hostPort, an ingress on the host
// network) is left unmarked, and so is any address at one of svc's node
// ports (a node no pod of the run was on is known to no one here): an
// address in doubt keeps the pods as candidates, as before.
func markEdgeConnections(rep *report.Report, svc *corev1.Service, nodeIPs map[string]string) {
	if svc == nil {
		return
	}
	direct := map[netip.Addr]bool{}
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			direct[a.Unmap()] = true
		}
	}
	add(svc.Spec.ClusterIP)
	for _, ip := range svc.Spec.ClusterIPs {
		add(ip)
	}
	for _, ip := range svc.Spec.ExternalIPs {
		add(ip)
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		add(ing.IP)
	}
	for ip := range nodeIPs {
		add(ip)
	}
	for _, e := range rep.Timeline {
		add(e.IP)
	}
	nodePorts := map[uint16]bool{}
	for _, p := range svc.Spec.Ports {
		if p.NodePort > 0 && p.NodePort < 1<<16 {
			nodePorts[uint16(p.NodePort)] = true
		}
	}
	for i := range rep.Failures {
		f := &rep.Failures[i]
		remote, err := netip.ParseAddrPort(f.RemoteAddr)
		if err != nil || !remote.Addr().IsValid() || remote.Addr().IsUnspecified() {
			continue // no connection was attempted (dns, a local error)
		}
		f.ViaEdge = !direct[remote.Addr().Unmap()] && !nodePorts[remote.Port()]
	}
}

// setPathEntries sets each path's Entry (entryOf) from the target it
// dialled (its ConnectTo when set) and the addresses its prober sent its
// connections to.
func setPathEntries(rep *report.Report, svc *corev1.Service, nodeIPs map[string]string) {
	for i := range rep.Paths {
		p := &rep.Paths[i]
		u, err := url.Parse(p.Target)
		if err != nil {
			continue
		}
		if p.ConnectTo != "" {
			u.Host = p.ConnectTo
		}
		p.Entry = entryOf(svc, u, nodeIPs, p.Prober)
	}
}

// entryOf is how u reaches svc (rollout.EntryOf). For an address, the
// address says it. For a name, what its connections were sent to
// (stats.Dialled) does, when recorded in full: the entry every one of them
// gives, or none when they differ or one is of nothing the run knows (a
// name can resolve elsewhere than its spec: a hosts file, a split DNS;
// in-cluster probers send theirs). Unrecorded (a prober lost before it
// said), the name's reading stands: the cluster DNS name's spec, else
// unknown.
func entryOf(svc *corev1.Service, u *url.URL, nodeIPs map[string]string, stats report.ProberStats) *report.Entry {
	from := func(e *report.Entry, how string) *report.Entry {
		if e != nil {
			e.From = how
		}
		return e
	}
	if _, err := netip.ParseAddr(u.Hostname()); err == nil || len(stats.Dialled) == 0 || stats.DialledMore {
		return from(rollout.EntryOf(svc, u, nodeIPs), report.EntryFromTarget)
	}
	var e *report.Entry
	for i, a := range stats.Dialled {
		v := *u
		v.Host = a
		got := rollout.EntryOf(svc, &v, nodeIPs)
		if got == nil || (i > 0 && *got != *e) {
			return nil
		}
		e = got
	}
	return from(e, report.EntryFromDialled)
}

// DefaultEdgeLogWait bounds how long the run waits, after the rollout, for
// the edge's access log to hold a line for every failure that got past
// the edge's handshake: Traefik logs a request when it ends, which for
// one waiting on a vanished pod over HTTP/1.1 is when it notices the
// client gave up. Over h2c to the pods it can be much later: Traefik
// v3.6 dials h2c backends with net.Dial (no timeout), and x/net's
// connection pool waits for that dial whatever the request's context, so
// a call sent to a pod whose IP no longer answers is logged only when the
// kernel gives up the connect (up to 135 s in the lab): --edge-log-wait.
const DefaultEdgeLogWait = 10 * time.Second

// readEdgeLog reads the access log at path (in format: edgelog.Formats) for the run's
// requests and sets UpstreamAddr on each failure it has a line for; the
// analysis names the pod at that address, certain (access_log). It
// re-reads, once a second, until every failure that reached the edge as a
// request has its line or wait has passed. A log that
// cannot be read is said in the section, never fatal: the pods are then
// inferred.
func readEdgeLog(ctx context.Context, rep *report.Report, path, format string, wait time.Duration) *report.EdgeLog {
	out := &report.EdgeLog{File: path, Format: format}
	// The run's request IDs begin with its run ID, each path's own with
	// the path's, each in-cluster prober's with the prober's.
	pathOf := map[string]string{rep.Config.RunID: ""}
	for _, p := range rep.Paths {
		pathOf[p.RunID] = p.Name
	}
	for _, p := range rep.Probers {
		pathOf[p.RunID] = p.Path
	}
	prefixes := slices.Sorted(maps.Keys(pathOf))
	var log edgelog.Log
	for deadline := time.Now().Add(wait); ; {
		var err error
		log, err = edgelog.ReadFile(path, format, rep.Config.RequestIDHeader, prefixes)
		if err != nil {
			out.Error = err.Error()
			return out
		}
		if missingEdgeLines(rep, log) == 0 || !time.Now().Before(deadline) || !sleep(ctx, time.Second) {
			break
		}
	}
	out.Format = log.Format
	out.Requests, out.Unreadable, out.Duplicates = len(log.ByID), log.Unreadable, log.Duplicates
	if len(rep.Paths) > 0 {
		out.RequestsByPath = map[string]int{}
		for _, p := range rep.Paths {
			out.RequestsByPath[p.Name] = 0
		}
		for id := range log.ByID {
			out.RequestsByPath[pathOf[idPrefix(id)]]++
		}
	}
	// The log's times are the wall clock's; its counts are by the run's
	// seconds, the series' (placed by the run's clock samples).
	second := rep.WallClock().SecondOf
	out.Responses = edgeResponses(second, log)
	out.Waits = edgeWaits(second, log, pathOf)
	if retried, known := log.Retried(); known {
		out.Retried = &retried
		out.FailedAttempts = edgeFailedAttempts(second, log)
	}
	for i := range rep.Failures {
		f := &rep.Failures[i]
		e, ok := log.ByID[f.RequestID]
		if !ok {
			continue
		}
		if e.Duration > 0 {
			f.EdgeDurationMS = float64(e.Duration.Microseconds()) / 1000
		}
		if e.Upstream != "" {
			f.UpstreamAddr = e.Upstream
			out.FailuresFound++
		} else if !analysis.BeforeTheEdge(f) {
			f.EdgeNoBackend = true
			out.FailuresNoBackend++
		}
	}
	out.FailuresNotFound = missingEdgeLines(rep, log)
	return out
}

// missingEdgeLines counts the failures through the edge that got past its
// handshake (so it logged them as requests) and have no line. (A line that
// names no backend is the edge's own answer: found, and no pod's.)
func missingEdgeLines(rep *report.Report, log edgelog.Log) int {
	n := 0
	for _, f := range rep.Failures {
		if !f.ViaEdge || analysis.BeforeTheEdge(&f) {
			continue
		}
		if _, ok := log.ByID[f.RequestID]; !ok {
			n++
		}
	}
	return n
}

// edgeResponses counts the log's requests that a backend answered below
// 500 and the client got the answer of, by the backend's address and the
// second of the run the edge received them in (second: the series' second
// a wall time falls in), in that order.
func edgeResponses(second func(time.Time) int64, log edgelog.Log) []report.EdgeResponses {
	counts := map[addrSecond]uint64{}
	for _, e := range log.ByID {
		// A backend's answer the client got: not one it closed before
		// (499, "client closed request"), and not a 5xx, which may be the
		// edge's own (Traefik logs its own 502 with that origin status
		// too: in the lab every one of its proxy 5xx): a pod's own 5xx
		// answers are left out with them, a lower bound.
		if e.Upstream == "" || e.OriginStatus == 0 || e.Status == 499 || e.Status >= 500 || e.Start.IsZero() {
			continue
		}
		counts[addrSecond{e.Upstream, second(e.Start)}]++
	}
	return byAddrSecond(counts, func(k addrSecond, n uint64) report.EdgeResponses {
		return report.EdgeResponses{Addr: k.addr, T: k.t, Responses: n}
	})
}

// addrSecond is a backend address and a second of the run.
type addrSecond struct {
	addr string
	t    int64
}

// byAddrSecond is counts made into rows by row, ordered by second, then
// address; nil when counts is empty.
func byAddrSecond[T any](counts map[addrSecond]uint64, row func(addrSecond, uint64) T) []T {
	var out []T
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b addrSecond) int {
		return cmp.Or(cmp.Compare(a.t, b.t), strings.Compare(a.addr, b.addr))
	}) {
		out = append(out, row(k, counts[k]))
	}
	return out
}

// edgeFailedAttempts counts the attempts the log lists as failed before
// the edge tried another backend (edgelog.Entry.FailedOn), by address and
// the second of the run the edge received the request in (second: the
// series' second a wall time falls in); nil when none.
func edgeFailedAttempts(second func(time.Time) int64, log edgelog.Log) []report.EdgeFailedAttempts {
	counts := map[addrSecond]uint64{}
	for _, e := range log.ByID {
		if e.Start.IsZero() {
			continue
		}
		for _, a := range e.FailedOn {
			counts[addrSecond{a, second(e.Start)}]++
		}
	}
	return byAddrSecond(counts, func(k addrSecond, n uint64) report.EdgeFailedAttempts {
		return report.EdgeFailedAttempts{Addr: k.addr, T: k.t, Attempts: n}
	})
}

// edgeWaits counts the log's requests that waited inside the edge outside
// the attempt that answered them at least report.EdgeWaitFloor, by path
// (pathOf: a request ID's prefix to its path's name) and the second of the
// run the edge received them in (second, as above), in that order.
func edgeWaits(second func(time.Time) int64, log edgelog.Log, pathOf map[string]string) []report.EdgeWaits {
	type key struct {
		path string
		t    int64
	}
	counts := map[key]*report.EdgeWaits{}
	for id, e := range log.ByID {
		if e.Overhead < report.EdgeWaitFloor || e.Start.IsZero() {
			continue
		}
		k := key{pathOf[idPrefix(id)], second(e.Start)}
		c := counts[k]
		if c == nil {
			c = &report.EdgeWaits{Path: k.path, T: k.t}
			counts[k] = c
		}
		c.Requests++
	}
	var out []report.EdgeWaits
	for _, c := range counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b report.EdgeWaits) int {
		return cmp.Or(cmp.Compare(a.T, b.T), strings.Compare(a.Path, b.Path))
	})
	return out
}

// idPrefix is the run, path or prober ID a request ID begins with
// (<prefix>-<seq>).
func idPrefix(id string) string {
	if i := strings.LastIndex(id, "-"); i > 0 {
		return id[:i]
	}
	return id
}
