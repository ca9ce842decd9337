// Package analysis explains a run: it groups failed requests into outage
// windows, lines each failure up with what the pods and endpoints were doing
// at that moment (from the timeline), counts each pod's traffic, and turns
// the patterns into findings with evidence and a concrete fix. It is a pure
// function of the report's facts, so a saved report can be analysed again.
package analysis

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// readyWindow: failures this soon after a pod turned ready may be its fault.
const readyWindow = 10 * time.Second

// defaultTolerance is the receive tolerance when nothing in the run
// measured the watch's delay (no trigger write, no pod change with a
// server time).
const defaultTolerance = time.Second

// tolerance bounds how long before rollprobe received a pod's change the
// change may already have acted (the kubelet hears of a deletion through
// its own watch, and can act before rollprobe's watch delivers it). It is
// measured, not assumed, and it must bound the pod watch's delay for every
// change it is applied to, so it is the largest of:
//   - for every pod created, deleted or turned ready, its receipt minus the
//     time the object records (creationTimestamp; deletionTimestamp less
//     the grace period; the Ready condition's transition time). Those have
//     1 s precision and round down, so each bounds that change's own
//     delay, up to a second too large; the largest bounds them all;
//   - the trigger's write to its receipt (rollout.trigger_seen_after_ms),
//     a bound on the Deployment watch only: alone it is not enough (the
//     lab showed the pod watch lagging 170 ms behind a 6 ms trigger round
//     trip on a loaded machine).
//
// A negative receipt delay (the server's clock ahead of ours) is skipped;
// a server clock behind ours only makes the bound larger.
func tolerance(r *report.Report) (time.Duration, string) {
	best, source := time.Duration(-1), ""
	if r.Rollout != nil && r.Rollout.TriggerSeenAfterMS > 0 {
		best = time.Duration(r.Rollout.TriggerSeenAfterMS * float64(time.Millisecond))
		source = "the trigger's write to its receipt through the watch"
	}
	for _, e := range r.Timeline {
		if e.Server == nil || (e.Kind != report.PodCreated && e.Kind != report.PodDeletionRequested && e.Kind != report.PodReady) {
			continue
		}
		if d := e.At.Sub(*e.Server); d >= 0 && d > best {
			best, source = d, "the largest receipt delay of a pod's creation, deletion or readiness (the apiserver's timestamps, 1 s precision)"
		}
	}
	if best < 0 {
		return defaultTolerance, "not measured (no trigger write, no pod change with a server time): 1 s assumed"
	}
	return best, source
}

// serverLead is the largest lead of the apiserver's clock over ours the
// timeline shows: a change received before the time the apiserver gave it.
func serverLead(r *report.Report) time.Duration {
	var lead time.Duration
	for _, e := range r.Timeline {
		if e.Server != nil && e.Server.After(e.At) {
			lead = max(lead, e.Server.Sub(e.At))
		}
	}
	return lead
}

func hasDeletionServerTimes(r *report.Report) bool {
	for _, e := range r.Timeline {
		if e.Kind == report.PodDeletionRequested && e.Server != nil {
			return true
		}
	}
	return false
}

// Explanation is what the analysis adds to a report: the kept failures with
// their likely pod and context (in the same order), how sure those are, the
// outage windows, each pod's traffic and the findings.
type Explanation struct {
	Failures    []report.Failure
	Attribution *report.Attribution
	Outages     []report.Outage
	// NodeGaps: the entry nodes' gaps without a serving local endpoint
	// (NodeGaps), each with the failures placed in it.
	NodeGaps []report.NodeGap
	Pods     []report.PodTraffic
	Findings []report.Finding
	// PreStopSeconds is the preStop sleep this run's traffic measured (0
	// when nothing measured came after a deletion: failures, slow
	// successes, the edge's failed attempts): the one number every piece
	// of preStop advice in the report names.
	PreStopSeconds int
	// PathPods are the pods as each path saw them (report.PathReport.Pods),
	// in the order of the report's paths.
	PathPods [][]report.PodTraffic
	// PathOutages are each path's outages (report.PathReport.Outages) with
	// the pods its failures were put on, in the order of the report's
	// paths.
	PathOutages [][]report.Outage
	// ViewStalls are the report's, with the failures begun in each counted.
	ViewStalls []report.ViewStall
}

// Explain analyses r (its failures, series and timeline); r is not changed.
func Explain(r *report.Report) Explanation {
	pods := FoldPods(r.Timeline)
	tol, source := tolerance(r)
	lead := serverLead(r)
	if hasDeletionServerTimes(r) {
		source += "; a deletion counts from the apiserver's own time of the request instead (floored to the second, so never later than it"
		if lead > 0 {
			source += fmt.Sprintf(", moved back by the %dms the apiserver's clock was seen ahead of ours", lead.Milliseconds())
		}
		source += ")"
	}
	ordered := 0
	for _, e := range r.Timeline {
		if e.Kind == report.PodDeletionRequested && e.CommittedAfter != nil {
			ordered++
		}
	}
	if ordered > 0 {
		source += fmt.Sprintf("; %d deletions also count from the apiserver's order of writes (made after a pods list with a lower resourceVersion was sent)", ordered)
	}
	a := attributor{pods: pods, tol: tol, serverLead: lead, start: r.StartedAt, proxied: proxiedPaths(r),
		localEntries: localEntries(r), choices: choicesOf(r), backendHeader: r.Config.BackendHeader,
		unready: unreadySpans(r), listedBeforeReady: publishesNotReady(r)}
	x := Explanation{Failures: make([]report.Failure, len(r.Failures)),
		Attribution: &report.Attribution{ReceiveToleranceMS: ms(tol), ToleranceSource: source, DeletionsOrdered: ordered}}
	x.ViewStalls = slices.Clone(r.ViewStalls)
	for i := range x.ViewStalls { // counted afresh: r may have been analysed before
		x.ViewStalls[i].Failures, x.ViewStalls[i].Widened = 0, 0
	}
	clocks := proberClocks(r)
	if m := maxClock(clocks); m > 0 {
		x.Attribution.ToleranceSource += fmt.Sprintf("; an in-cluster prober's failures also count pod changes within half the round trip of its clock's ping either side of them (up to %s)", fmtClock(m))
	}
	left := make([][]leftRules, len(r.Failures))
	for i, f := range r.Failures {
		left[i] = attributeOnClock(a, &f, x.ViewStalls, clocks[f.Prober])
		x.Failures[i] = f
		switch {
		case class(&f) == prober.Local:
		case f.Confidence == 1:
			x.Attribution.Certain++
		case f.LikelyPod != "":
			x.Attribution.Ambiguous++
		default:
			x.Attribution.Unattributed++
		}
	}
	x.Outages = outages(r, x.Failures, a)
	countSlowConnects(x.Outages, r)
	x.Pods = traffic(r, pods)
	for _, p := range r.Paths {
		view := report.Report{StartedAt: r.StartedAt, Totals: p.Totals, Series: p.Series}
		x.PathPods = append(x.PathPods, traffic(&view, pods))
		var theirs []report.Failure
		for _, f := range x.Failures {
			if f.Path == p.Name {
				theirs = append(theirs, f)
			}
		}
		outs := slices.Clone(p.Outages)
		for i := range outs {
			outs[i].Pods = nil // this analysis's, afresh
		}
		putPodsOnOutages(outs, theirs, r.StartedAt)
		x.PathOutages = append(x.PathOutages, outs)
	}
	x.NodeGaps = NodeGaps(r)
	x.Findings, x.PreStopSeconds = findings(r, x.Failures, left, x.Outages, x.NodeGaps, a)
	return x
}

// beganAt is when the failed request began (its intended time in reports
// that do not have the start).
func beganAt(f *report.Failure) time.Time {
	if f.Start.IsZero() {
		return f.Intended
	}
	return f.Start
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// serverVersion is the version the advice is written for.
func serverVersion(r *report.Report) advice.Version {
	if r.Rollout == nil {
		return advice.Version{}
	}
	return advice.ParseVersion(r.Rollout.ServerVersion)
}

// class is a failure's class as the prober's enum (the report stores its
// name); an unknown name reads as OK, which no rule claims.
func class(f *report.Failure) prober.Class {
	c, _ := prober.ParseClass(f.Class)
	return c
}

// connectionFailure: no response at all, or a cut one; what a pod that
// stopped listening, or vanished, does to the clients still routed to it.
// A proxy's own 5xx is the same failure one hop further: the proxy's
// connection to the pod was refused, cut or unanswered.
func connectionFailure(c prober.Class) bool {
	switch c {
	case prober.Refused, prober.Reset, prober.EOF, prober.EOFReused, prober.ConnectTimeout, prober.Truncated, prober.Proxy5xx,
		prober.GoAwayUnprocessed, prober.GoAwayCut, prober.RefusedStream, prober.RSTStream, prober.ClosedNoGoAway:
		return true
	}
	return false
}

// answered: the class needs something at the pod's IP to answer (a RST, a
// FIN, a response). A pod that is gone (its sandbox and IP with it) cannot
// produce them; a connection to its IP just times out.
func answered(c prober.Class) bool {
	switch c {
	case prober.Refused, prober.Reset, prober.EOF, prober.EOFReused, prober.Truncated, prober.Timeout, prober.HTTP5xx, prober.HTTPStatus,
		prober.GoAwayUnprocessed, prober.GoAwayCut, prober.RefusedStream, prober.RSTStream, prober.ClosedNoGoAway, prober.GRPCStatus:
		return true
	}
	return false
}

// anyClass applies no class filter (outage context).
const anyClass = prober.Class(255)

// attributor matches failures to the pod changes that can have caused them.
type attributor struct {
	pods *Pods
	tol  time.Duration // the receive tolerance (see tolerance)
	// serverLead is how far the apiserver's clock was seen ahead of ours
	// (a change received before its server time): 0 when it never was.
	serverLead time.Duration
	start      time.Time
	// proxied: the run met a proxy between the prober and the pods (it
	// answered proxy_5xx for a backend it could not reach, or a failed
	// connection went to an edge's address: Failure.ViaEdge). Through a
	// proxy, a timeout needs nothing from the pod: the proxy can wait on a
	// pod IP that no longer answers until the prober gives up (the lab's
	// Traefik logged such requests as 499 after the prober's timeout, each
	// forwarded to a pod already gone). By path name ("" for a run of one
	// path): a proxy on one path says nothing of another.
	proxied map[string]bool
	// localEntries are, by path, the Local-policy NodePort entries
	// (localEntries): on such a path the node whose pods alone can
	// receive the run's own prober's traffic, since kube-proxy there sends
	// what enters only to its own endpoints (NodeGaps rests on the same
	// premise). A pod on another node is no candidate for such a failure:
	// the lab's CI once named one "certain" for a refusal 0.06 s after its
	// deletion, a pod that traffic entering that node cannot reach. Each
	// path has its own: probing every node's NodePort, one path each, is
	// what shutdown-not-exercised advises under a Local policy.
	localEntries map[string]*report.Entry
	// choices: the proxy's choices the run's own responses show (nil when
	// they show none); see leftTheRules.
	choices *choices
	// backendHeader is the header the run's pods put on every response
	// of their own (Config.BackendHeader), "" when the run named none.
	backendHeader string
	// unready: the spans the timeline shows pods unready without their
	// deletion requested (unreadySpans), for noBackendWhileUnready.
	unready []unreadySpan
	// listedBeforeReady: the Service publishes not-ready addresses, so a
	// new pod is routed to from when its endpoint is listed
	// (Pod.ListedReadyAt), before it is ready (justReadyAt). In the lab,
	// without it, the timeline put refusals from such pods on no pod, or
	// for certain on an old pod still in its preStop sleep (the wire
	// showed each SYN going to the new, unready pod).
	listedBeforeReady bool
	// clock is how far the failure being attributed may lie either side
	// of the time it carries: an in-cluster prober's clock is known only
	// to within half the round trip of the ping that measured it
	// (proberClocks); 0 for this process's own failures. Every comparison
	// of the failure's time with a pod's change allows it, so a pod whose
	// change the prober's clock can put before the failure stays a
	// candidate.
	clock time.Duration
}

// localEntries are the paths (by name, "" for a run of one) that enter
// the Service at a node's NodePort under externalTrafficPolicy: Local,
// each with its entry (pathEntry; the node known); nil when none does.
func localEntries(r *report.Report) map[string]*report.Entry {
	if ro := r.Rollout; ro == nil || ro.ExternalTrafficPolicy != "Local" {
		return nil
	}
	var out map[string]*report.Entry
	for i, name := range pathNames(r) {
		if e := pathEntry(r, i); e != nil && e.Via == report.ViaNodePort && e.Node != "" {
			if out == nil {
				out = map[string]*report.Entry{}
			}
			out[name] = e
		}
	}
	return out
}

// pathNames are the run's paths' names in order: "" alone for a run of
// one path.
func pathNames(r *report.Report) []string {
	if len(r.Paths) == 0 {
		return []string{""}
	}
	names := make([]string, 0, len(r.Paths))
	for _, p := range r.Paths {
		names = append(names, p.Name)
	}
	return names
}

// localNodes are the distinct entry nodes of entries, sorted.
func localNodes(entries map[string]*report.Entry) []string {
	var nodes []string
	for _, e := range entries {
		if !slices.Contains(nodes, e.Node) {
			nodes = append(nodes, e.Node)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// entryNodeOf is the Local-policy node f entered (see localEntries): its
// path's, when f is the run's own prober's; "" otherwise. An in-cluster
// prober in the pod network is short-circuited to the whole Service by
// kube-proxy.
func entryNodeOf(entries map[string]*report.Entry, f *report.Failure) string {
	if e := entries[f.Path]; e != nil && f.Prober == "" {
		return e.Node
	}
	return ""
}

// entryNode is the Local-policy node f entered, "" for none.
func (a attributor) entryNode(f *report.Failure) string { return entryNodeOf(a.localEntries, f) }

// reachable keeps the pods f's traffic can have reached: all of them,
// unless f entered a Local-policy node (entryNode), where only that
// node's pods (and pods whose node is not known) can have. In-cluster
// probers' failures keep them all: a prober in the pod network is
// short-circuited to the whole Service by kube-proxy.
func (a attributor) reachable(pods []*Pod, f *report.Failure) []*Pod {
	node := a.entryNode(f)
	if node == "" {
		return pods
	}
	out := pods[:0:0]
	for _, p := range pods {
		if p.Node == "" || p.Node == node {
			out = append(out, p)
		}
	}
	return out
}

// proxiedPaths are the paths that met a proxy (see attributor.proxied).
func proxiedPaths(r *report.Report) map[string]bool {
	out := map[string]bool{}
	if len(r.Paths) == 0 {
		out[""] = r.Totals.ByClass[report.ClassProxy5xx] > 0
	}
	for _, p := range r.Paths {
		out[p.Name] = p.Totals.ByClass[report.ClassProxy5xx] > 0
	}
	// A connection to an edge address is a proxy met, whether or not it
	// answered 5xx: under load it may only make the prober wait.
	for _, f := range r.Failures {
		if f.ViaEdge {
			out[f.Path] = true
		}
	}
	return out
}

// proxiedBeforePods are the paths that met a proxy before the pods:
// proxiedPaths, less a path whose only proxy shown is the pods' own (a
// proxy container in front of the app): every proxy_5xx of it, each in
// the report's failures, answered at a pod on a path with no proxy before
// the pods (noProxyBefore), and none of its failures sent to an edge's
// address. Such a proxy has no other pod to retry on.
func proxiedBeforePods(r *report.Report) map[string]bool {
	out := proxiedPaths(r)
	type seen struct {
		total, inPods int
		viaEdge       bool
	}
	byPath := map[string]*seen{}
	for i := range r.Failures {
		f := &r.Failures[i]
		s := byPath[f.Path]
		if s == nil {
			s = &seen{}
			byPath[f.Path] = s
		}
		s.viaEdge = s.viaEdge || f.ViaEdge
		if f.Class == report.ClassProxy5xx {
			s.total++
			if noProxyBefore(f, r) {
				s.inPods++
			}
		}
	}
	for name, s := range byPath {
		if out[name] && !s.viaEdge && s.total > 0 && s.inPods == s.total && uint64(s.total) == pathClassCount(r, name, report.ClassProxy5xx) {
			out[name] = false
		}
	}
	return out
}

// pathClassCount is how many of path's requests ended in class c ("" for
// a run of one path: the run's).
func pathClassCount(r *report.Report, path, c string) uint64 {
	for _, p := range r.Paths {
		if p.Name == path {
			return p.Totals.ByClass[c]
		}
	}
	return r.Totals.ByClass[c]
}

// directPaths are the paths known to reach the Service with no HTTP proxy
// between (PathReport.Entry; for a report without it, Rollout.Entry for
// the first path) that the run showed none on either: no proxy met
// (proxiedBeforePods: a proxy of the pods' own is none before them) and none
// of their requests in the edge's access log.
// What the run measured wins over what the target's address says.
func directPaths(r *report.Report) map[string]bool {
	out := map[string]bool{}
	proxied := proxiedBeforePods(r)
	unsplit := edgeLogUnsplit(r)
	for i, name := range pathNames(r) {
		if pathEntry(r, i) != nil && !proxied[name] && !edgeLogHolds(r, name) && !unsplit {
			out[name] = true
		}
	}
	return out
}

// edgeLogUnsplit: the edge's access log, read by the run, holds requests
// not split by path (an older report of several paths): it may hold any
// path's, so none is known to have bypassed the edge.
func edgeLogUnsplit(r *report.Report) bool {
	return r.EdgeLog != nil && r.EdgeLog.Error == "" && len(r.EdgeLog.RequestsByPath) == 0 && r.EdgeLog.Requests > 0
}

// edgeLogHolds: the edge's access log, read by the run, holds requests
// of path (for a run of one path, "", any of its requests).
func edgeLogHolds(r *report.Report, path string) bool {
	e := r.EdgeLog
	if e == nil || e.Error != "" {
		return false
	}
	if path == "" {
		return e.Requests > 0
	}
	return e.RequestsByPath[path] > 0
}

// pathEntry is how the run's i-th path (0 for a run of one) enters the
// Service: PathReport.Entry, or for a report without it, Rollout.Entry
// for the first path; nil when not known.
func pathEntry(r *report.Report, i int) *report.Entry {
	if i < len(r.Paths) && r.Paths[i].Entry != nil {
		return r.Paths[i].Entry
	}
	if i == 0 && r.Rollout != nil {
		return r.Rollout.Entry
	}
	return nil
}

// proxiedOn: f's path met a proxy.
func (a attributor) proxiedOn(f *report.Failure) bool { return a.proxied[f.Path] }

// needsAnswer: the class needs something at the pod's IP to answer (see
// answered), unless a proxy between them (proxied) makes a timeout
// possible without.
func needsAnswer(c prober.Class, proxied bool) bool {
	return answered(c) && !(proxied && c == prober.Timeout)
}

// deletedBy reports whether p's deletion can have acted by t: whether
// the earliest time the request can have been made is not after t. The
// bounds, each the change's own and the latest that applies:
//   - the apiserver's order of writes: committed after the send of the
//     last pods list with a lower resourceVersion (rollout.RevisionClock);
//   - the apiserver's own time of the request, floored to its second (so
//     never later than the request) and moved back by any lead its clock
//     showed over ours;
//   - without either: received no later than the tolerance after t (the
//     tolerance must cover the slowest change of the run).
func (a attributor) deletedBy(p *Pod, t time.Time) bool {
	if p.DeletedAt == nil {
		return false
	}
	if earliest, ok := a.deletionNotBefore(p); ok {
		return !earliest.After(t.Add(a.clock))
	}
	return p.DeletedBy(t, a.tol+a.clock)
}

// deletionNotBefore is the latest lower bound on p's deletion request that
// the timeline gives (see deletedBy), false when it gives none.
func (a attributor) deletionNotBefore(p *Pod) (time.Time, bool) {
	var earliest time.Time
	ok := false
	if p.DeletedServer != nil {
		earliest, ok = p.DeletedServer.Add(-a.serverLead), true
	}
	if c := p.DeletedCommittedAfter; c != nil && (!ok || c.After(earliest)) {
		earliest, ok = *c, true
	}
	return earliest, ok
}

// attribute names the pod a failure most likely hit. With the backend
// header on the response it is certain. Otherwise causality comes first:
// the candidates are the pods whose deletion can have acted while the
// request lasted (received no later than the tolerance after it; for a
// refusal, after it began) and that were not gone long before, narrowed by
// what the class needs (see terminatingAt and narrow); and, for a refusal
// or when no pod was terminating, the pods that had just turned ready (a
// new pod not listening yet refuses like an old one that stopped: the
// lab's packet capture showed both in one naive rollout). The likely pod is
// the terminating candidate whose deletion came closest before the
// request, failing that the pod that turned ready last; Confidence is
// 1/len(candidates), 1 only when one pod can have caused it. It returns
// the terminating pods f's SYN can no longer have reached (leftTheRules),
// for the finding that takes f.
func (a attributor) attribute(f *report.Failure) (left []leftRules) {
	at := beganAt(f)
	if f.Backend != "" {
		f.LikelyPod, f.Confidence, f.Evidence = f.Backend, 1, report.EvidenceBackendHeader
		if p := a.pods.Served(f.Backend, at); p != nil {
			f.LikelyPod, f.Context = p.Name, a.describe(p, at)
		}
		return
	}
	if addr, err := netip.ParseAddrPort(f.PodAddr); err == nil {
		// The kernel's record of where the connection went: a fact.
		if p := a.pods.ByIP(addr.Addr().String(), at); p != nil {
			f.LikelyPod, f.Confidence, f.Evidence, f.Candidates = p.Name, 1, report.EvidenceConntrack, nil
			f.Context = a.describe(p, at)
			if f.JoinedConntrackEntry {
				f.Context += "; " + joinedContext
			}
			return
		}
	}
	if addr, err := netip.ParseAddrPort(f.UpstreamAddr); err == nil {
		// The edge's record of where it forwarded the request: a fact.
		if p := a.pods.ByIP(addr.Addr().String(), at); p != nil {
			f.LikelyPod, f.Confidence, f.Evidence, f.Candidates = p.Name, 1, report.EvidenceAccessLog, nil
			f.Context = a.describe(p, at) + "; the edge forwarded it there (its access log)"
			return
		}
	}
	if f.EdgeNoBackend {
		// The edge's record again: it sent the request nowhere.
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence = "", 0, nil, ""
		f.Context = noBackendContext
		return
	}
	c := class(f)
	if edgeAnswered(f, a.backendHeader) {
		// The response itself says no pod made it: the pods name
		// themselves on every response, and this one names none.
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence = "", 0, nil, ""
		f.Context = edgeAnsweredContext(a.backendHeader, f.Status)
		return
	}
	if f.ViaEdge && beforeTheEdge(c) {
		// The connection ended at an ingress or proxy, and the request
		// never got past it: whatever the pods did, the edge refused,
		// ignored or did not finish the handshake. No pod to name.
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence = "", 0, nil, ""
		f.Context = edgeContext(f, c)
		return
	}
	if c == prober.DNS {
		// Nothing was sent: the name did not resolve, or not in time to
		// connect. No pod received it, whatever the pods did then (a
		// pod's own name whose pod went away is pod-dns-name-stale's,
		// by the name, not by a pod named here).
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence = "", 0, nil, ""
		f.Context = dnsContext
		return
	}
	if grpcUnsent(f, c) {
		// grpc-go's own record: it never sent the call (its channel had
		// no connection), so no pod received it, whatever the pods did
		// then (the timeline put such calls on pods just ready).
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence = "", 0, nil, ""
		f.Context = grpcUnsentContext
		return
	}
	if f.NoConntrackEntry {
		// The kernel's record again: no rule rewrote the connection to a
		// pod; the host's own stopped its SYN. No pod to name.
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence = "", 0, nil, ""
		f.Context = noEntryContext(c)
		return
	}
	if a.rejectedByRules(f) {
		// The kernel's record of who refused it: a reject rule's ICMP
		// error, from no pod. No pod to name.
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence = "", 0, nil, ""
		f.Context = icmpRejectContext(f)
		return
	}
	defer func() {
		if f.LikelyPod != "" {
			f.Evidence = report.EvidenceTimeline
		}
	}()
	var term []*Pod
	term, left = a.terminatingCandidates(f, c)
	if len(term) == 0 {
		if pod, ok := a.noBackendWhileUnready(f, c); ok {
			f.LikelyPod, f.Confidence, f.Candidates, f.Evidence = "", 0, nil, ""
			f.Context = fmt.Sprintf("the edge answered it itself (status %d without %s, which the pods put on every response of their own) while pod %s was unready and no pod was terminating: "+
				"an edge answers so when the request's route has no serving endpoint; no pod took part", f.Status, a.backendHeader, pod)
			return nil
		}
	}
	ready := a.reachable(a.justReadyAt(at, c), f)
	if len(term) > 0 && c != prober.Refused {
		// A cut or unanswered request on an open connection needs a server
		// that listened and stopped: a terminating pod, not one that just
		// started.
		ready = nil
	}
	sort.Slice(term, func(i, j int) bool { return closer(term[i], term[j], at) })
	sort.Slice(ready, func(i, j int) bool { return closer(ready[i], ready[j], at) })
	// The likely pod is the terminating one whose deletion is closest
	// before the request, failing that the pod that turned ready last.
	cands := term
	for _, p := range ready {
		if !slices.Contains(cands, p) {
			cands = append(cands, p)
		}
	}
	// The entry an earlier connection from its port left, which its SYN
	// most likely followed (Failure.PriorPodAddr): that pod first.
	followed := a.priorPod(f, at)
	if followed != nil {
		cands = slices.DeleteFunc(cands, func(p *Pod) bool { return p == followed })
		cands = append([]*Pod{followed}, cands...)
	}
	if len(cands) == 0 {
		f.Context = "no pod was terminating or just ready"
		if node := a.entryNode(f); node != "" {
			f.Context = fmt.Sprintf("no pod on %s (the entry: externalTrafficPolicy Local sends what enters it only to its own pods) was terminating or just ready", node)
		}
		if len(left) > 0 {
			which := "no pod its SYN can have reached"
			if !anyLeftByMisses(left) {
				which = "no pod that can have refused it"
			}
			f.Context = which + " was terminating or just ready: " + leftRulesText(left, a.start) +
				"; a SYN no rule rewrote meets the stack of the host whose rules it crossed (kube-proxy's rules there mid-update)"
		}
		return
	}
	f.LikelyPod = cands[0].Name
	n := len(cands)
	if followed != nil {
		n++ // the SYN may instead have been stopped on the host: never certain
	}
	f.Confidence = math.Round(100/float64(n)) / 100
	if len(cands) > 1 || followed != nil {
		for _, p := range cands {
			f.Candidates = append(f.Candidates, p.Name)
		}
		sort.Strings(f.Candidates)
	}
	f.Context = a.describe(cands[0], at)
	if followed != nil {
		f.Context += "; " + priorContext(followed)
	}
	return left
}

// priorPod is the pod that bore a failure's PriorPodAddr, if any.
func (a attributor) priorPod(f *report.Failure, at time.Time) *Pod {
	addr, err := netip.ParseAddrPort(f.PriorPodAddr)
	if err != nil {
		return nil
	}
	return a.pods.ByIP(addr.Addr().String(), at)
}

// priorContext says why a failure's candidates include the pod an earlier
// connection's entry names (Failure.PriorPodAddr).
func priorContext(p *Pod) string {
	return "its SYN made no conntrack entry of its own: it most likely followed the one an earlier connection from the same local port left, to " + p.Name +
		" (kube-proxy clears no TCP entry: kubernetes#101607); how that connection ended, which decides whether its entry still lived, is not known"
}

// terminatingCandidates are the terminating pods f can have hit (see
// attribute), and those of them its SYN can no longer have reached
// (leftTheRules).
func (a attributor) terminatingCandidates(f *report.Failure, c prober.Class) (term []*Pod, left []leftRules) {
	at := beganAt(f)
	term, left = a.keepInTheRules(a.reachable(a.terminatingAt(at, causeBy(f, c), c, a.proxiedOn(f)), f), f, c)
	return a.narrow(term, at, c), left
}

// beforeTheEdge: the class ends a request before it was sent on its
// connection (Failure.ViaEdge), so on a connection to an edge it is the
// edge's alone.
func beforeTheEdge(c prober.Class) bool {
	return c == prober.Refused || c == prober.ConnectTimeout || c == prober.TLS
}

// BeforeTheEdge is beforeTheEdge for a failure as the report holds it: on
// a connection to an edge (Failure.ViaEdge), the edge never had the
// request, so its access log has no line for it.
func BeforeTheEdge(f *report.Failure) bool { return beforeTheEdge(class(f)) }

// edgeAnswered: f is an answer the edge made itself, by the response: on
// a connection to an edge (ViaEdge), a status the run did not expect and
// below 500 (http_status), without the backend header the run's pods put
// on every response of their own (a 5xx without it is proxy_5xx, often
// the edge relaying a pod's failure: the timeline still places those),
// and no access-log line naming where the edge sent it (that line, a
// fact, outranks the header's absence). Traefik answers 404 so for a host
// whose route it dropped.
func edgeAnswered(f *report.Failure, backendHeader string) bool {
	return f.ViaEdge && backendHeader != "" && f.Backend == "" && f.UpstreamAddr == "" && class(f) == prober.HTTPStatus
}

// unreadySpan is a time a pod was unready without its deletion requested:
// from its PodUnready to its next PodReady (zero end: not ready again in
// the timeline).
type unreadySpan struct {
	pod      string
	from, to time.Time
}

// unreadySpans lists the timeline's unreadySpans: a pod that turned unready
// while still in service (a failed readiness probe, a restart), not one
// being deleted.
func unreadySpans(r *report.Report) []unreadySpan {
	deleted := map[string]bool{}
	var out []unreadySpan
	for i, e := range r.Timeline {
		if e.Kind == report.PodDeletionRequested {
			deleted[e.Pod] = true
		}
		if e.Kind != report.PodUnready || deleted[e.Pod] {
			continue
		}
		sp := unreadySpan{pod: e.Pod, from: e.At}
		for _, n := range r.Timeline[i+1:] {
			if n.Pod == e.Pod && (n.Kind == report.PodReady || n.Kind == report.PodDeletionRequested) {
				sp.to = n.At
				break
			}
		}
		out = append(out, sp)
	}
	return out
}

// noBackendWhileUnready: f is a 503 the edge made itself (on a connection
// to the edge, proxy_5xx without the backend header the run's pods put on
// every response of their own, no access-log line naming a pod) while a
// pod was unready, not deleted, from unreadyLead before it began to the
// receive tolerance after its end (the edge can hear of the pod's
// unreadiness before rollprobe's watch does, as the Service's gap counts
// its early failures: svcGapJustAfter), and no pod was terminating (the
// caller's check). An edge answers
// 503 for a route whose Service has no serving endpoint (Traefik's "no
// available server" for an empty Service behind a weighted route with
// allowEmptyServices; nginx's and Envoy's with no upstream), and a 5xx it
// relays for a pod it failed to reach needs a pod that stopped, which none
// did. It returns the unready pod (the latest to turn so). By the timeline
// alone such a failure was put on the unready pod as one that had just
// turned ready (ready-before-serving, whose fix the pod has) or on none
// (unexplained). Through a Traefik with allowEmptyServices, an Argo
// canary's share from Traefik's seeing its Service empty to its having
// the weight 0 Argo then sets (the lab's side-by-side runs met none: the
// same reload of Traefik's brought both), or a fixed weighted route's.
func (a attributor) noBackendWhileUnready(f *report.Failure, c prober.Class) (string, bool) {
	if !f.ViaEdge || a.backendHeader == "" || f.Backend != "" || f.UpstreamAddr != "" || c != prober.Proxy5xx || f.Status != 503 {
		return "", false
	}
	from, to := beganAt(f).Add(-unreadyLead), f.End.Add(a.tol)
	pod := ""
	var latest time.Time
	for _, sp := range a.unready {
		if sp.from.After(to) || (!sp.to.IsZero() && sp.to.Before(from)) {
			continue
		}
		if pod == "" || sp.from.After(latest) {
			pod, latest = sp.pod, sp.from
		}
	}
	return pod, pod != ""
}

// dnsContext is the context of a dns failure: on no pod.
const dnsContext = "the name did not resolve, or not in time to connect: nothing was sent, so no pod received it"

// edgeAnsweredContext is the context of a failure edgeAnswered holds.
func edgeAnsweredContext(backendHeader string, status int) string {
	return fmt.Sprintf("the edge answered it itself (status %d without %s, which the pods put on every response of their own): no pod took part", status, backendHeader)
}

// edgeContext is the context of a failure between the prober and an edge.
func edgeContext(f *report.Failure, c prober.Class) string {
	what := map[prober.Class]string{
		prober.Refused:        "refused the connection",
		prober.ConnectTimeout: "did not answer the connection",
		prober.TLS:            "did not complete the TLS handshake",
	}[c]
	if c == prober.TLS && f.TLSCause == "handshake_timeout" {
		what = "and the prober did not complete the TLS handshake in time"
	}
	return fmt.Sprintf("the edge at %s (none of the Service's, a node's or a pod's addresses: an ingress or proxy) %s; the request never reached a pod: the edge (its load, its own restart), the network to it or the probing host's own load, not the rollout's pods", f.RemoteAddr, what)
}

// joinedContext says why a connection went to a pod the rules no longer
// named (Failure.JoinedConntrackEntry).
const joinedContext = "its SYN joined the conntrack entry an earlier unanswered connection from the same local port left " +
	"(the kernel keeps it nf_conntrack_tcp_timeout_syn_sent, two minutes by default, and kube-proxy clears no TCP entry: kubernetes#101607), " +
	"so it went where that one went, whatever the rules said by then"

// rejectedByRules reports whether a host's own rules refused f's SYN
// before any pod: conntrack on the probing host shows it left no entry
// (Failure.NoConntrackEntry), or an ICMP port unreachable refused it
// (Failure.RefusedBy) from an address none of the run's pods held by
// then. A pod's TCP stack refuses a SYN with a reset; an ICMP error from a
// pod's own address (its own rules) is not taken for the hosts'.
func (a attributor) rejectedByRules(f *report.Failure) bool {
	if f.NoConntrackEntry {
		return true
	}
	return f.RefusedBy == report.RefusedByICMP && f.ICMP != nil && class(f) == prober.Refused &&
		a.pods.ByIP(f.ICMP.From, beganAt(f)) == nil
}

// icmpRejectContext is the context of a failure a reject rule refused
// (rejectedByRules, by its ICMP error).
func icmpRejectContext(f *report.Failure) string {
	return fmt.Sprintf("reached no pod: an ICMP %s from %s, no pod's address, refused the SYN: a host's reject rule, not a pod (a pod's TCP stack refuses with a reset); "+
		"kube-proxy rejects a Service address it holds no endpoint for, and a SYN can meet its rules mid-update", f.ICMP.Name, f.ICMP.From)
}

// noEntryContext is a no-entry failure's context (Failure.NoConntrackEntry).
func noEntryContext(c prober.Class) string {
	did := "refused"
	if c == prober.ConnectTimeout {
		did = "dropped"
	}
	return fmt.Sprintf("reached no pod: the probing host's own rules %s the SYN (conntrack has no entry for it: nothing rewrote it to a pod; kube-proxy's rules there held no endpoint for the Service, or the packet met them mid-update)", did)
}

// closer orders candidates for a request begun at t: a change at or before
// t before one after it (received within the tolerance), and among those
// before, the latest; among those after, the earliest.
func closer(p, q *Pod, t time.Time) bool {
	pt, qt := changeTime(p), changeTime(q)
	pBefore, qBefore := !pt.After(t), !qt.After(t)
	switch {
	case pBefore != qBefore:
		return pBefore
	case pBefore:
		return pt.After(qt)
	}
	return pt.Before(qt)
}

func changeTime(p *Pod) time.Time {
	if p.DeletedAt != nil {
		return *p.DeletedAt
	}
	if p.ReadyAt != nil {
		return *p.ReadyAt
	}
	return time.Time{}
}

// causeBy is the latest time a pod's change can have caused the failure.
// A connect timeout means nothing answered the SYN: the pod's state when
// the request began decides (a pod still there answers a SYN at once, with
// a RST if nothing listens). A refusal answers the SYN when it reaches the
// pod, which is no later than the refusal came back: at once as a rule,
// but a busy host can hold the SYN or its answer, and a pod whose
// deletion acted in between can have refused it (a starved CI run's
// refusal came 338 ms after its connect began, 25 ms after rollprobe
// received an old pod's deletion; bounded by its start, it was put on no
// pod at all). Any other failure can be caused while it lasts (a timeout
// waiting for the response, a connection cut), up to its end.
func causeBy(f *report.Failure, c prober.Class) time.Time {
	if c == prober.ConnectTimeout || f.End.IsZero() {
		return beganAt(f)
	}
	return f.End
}

// terminatingAt: deletion able to act by the time the failure can have been
// caused (by) on a path that met a proxy or not (proxied), and not more than 5 minutes before the request began at t;
// the pod not gone for more than 30 s (routes to a vanished pod IP linger
// as long as the proxies lag). For a class that needs an answer from the
// pod's IP, the pod must still have been there when the request began:
// after a graceful stop (its container's exit seen before the object went)
// the kubelet had torn the sandbox down before it deleted the object, so
// nothing answered from that IP once rollprobe received the pod gone;
// otherwise (a forced deletion removes the object while containers may
// still run) the tolerance is allowed on top.
func (a attributor) terminatingAt(t, by time.Time, c prober.Class, proxied bool) []*Pod {
	var out []*Pod
	for _, p := range a.pods.All() {
		if !a.deletedBy(p, by) || t.Sub(*p.DeletedAt) >= 5*time.Minute {
			continue
		}
		switch {
		case p.GoneAt == nil:
		case c != anyClass && needsAnswer(c, proxied) && t.After(p.GoneAt.Add(a.goneSlack(p)+a.clock)):
			continue
		case t.Sub(*p.GoneAt) >= 30*time.Second:
			continue
		}
		out = append(out, p)
	}
	return out
}

// terminatingDuring: the pods whose deletion was requested by to and that
// were not gone before from, both within the view's tolerance: terminating
// at some time in [from, to]. Unlike terminatingAt, which keeps a pod gone
// a while as a candidate for failures a lagging proxy still sends its IP,
// this is the pod's own state, as an outage's context says it.
func (a attributor) terminatingDuring(from, to time.Time) []*Pod {
	var out []*Pod
	for _, p := range a.pods.All() {
		if a.deletedBy(p, to) && (p.GoneAt == nil || !from.After(p.GoneAt.Add(a.tol+a.clock))) {
			out = append(out, p)
		}
	}
	return out
}

// goneSlack is how long after rollprobe received p gone its IP may still
// have answered (see terminatingAt).
func (a attributor) goneSlack(p *Pod) time.Duration {
	if p.ExitAt != nil && p.GoneAt != nil && !p.ExitAt.After(*p.GoneAt) {
		return 0
	}
	return a.tol
}

// justReadyAt: pods that turned ready within readyWindow before t (behind
// a Service that publishes not-ready addresses, whose endpoint was listed
// within it: see listedBeforeReady). A connect_timeout is never theirs: a
// new pod's IP exists and answers, with a refusal if nothing listens yet.
// Nor is a refusal one whose readiness probe had connected where the
// Service sends traffic (it listened when it turned ready), unless its
// container exited by then; a pod listed before it was ready stays a
// candidate for refusals until rollprobe received it ready.
func (a attributor) justReadyAt(t time.Time, c prober.Class) []*Pod {
	if c == prober.ConnectTimeout {
		return nil
	}
	var out []*Pod
	for _, p := range a.pods.All() {
		// since: when the Service began sending it traffic.
		since := p.ReadyAt
		listedFirst := a.listedBeforeReady && p.ListedReadyAt != nil && (since == nil || p.ListedReadyAt.Before(*since))
		if listedFirst {
			since = p.ListedReadyAt
		}
		if since == nil || p.Present || since.After(t.Add(a.tol+a.clock)) || t.Sub(*since) >= readyWindow+a.clock {
			continue
		}
		exited := a.exitedBy(p, t)
		// A probe that connected says it listened from when it turned
		// ready: before that (listed first), it may not have.
		listening := !listedFirst || (p.ReadyAt != nil && !p.ReadyAt.After(t))
		if c == prober.Refused && p.ReadinessConnects && !exited && listening {
			continue
		}
		out = append(out, p)
	}
	return out
}

// narrow keeps the candidates the evidence allows, unless it allows none
// (the evidence is what rollprobe saw, which can lag what the wire saw):
// a connect_timeout means the pod's IP no longer answered, so its container
// had exited or the pod was gone by then (canHaveEnded).
func (a attributor) narrow(cands []*Pod, t time.Time, c prober.Class) []*Pod {
	if c != prober.ConnectTimeout || len(cands) < 2 {
		return cands
	}
	var out []*Pod
	for _, p := range cands {
		if a.canHaveEnded(p, t) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return cands
	}
	return out
}

// canHaveEnded reports whether p's IP can have stopped answering by t: the
// pod received gone within the tolerance, or its container can have exited
// by then (exitedBy).
func (a attributor) canHaveEnded(p *Pod, t time.Time) bool {
	return (p.GoneAt != nil && !p.GoneAt.After(t.Add(a.tol+a.clock))) || a.exitedBy(p, t)
}

// exitedBy reports whether p's container can have exited by t. The exit
// counts from the kubelet's own time of it (floored to its second, moved
// back by the lead the servers' clocks showed), not from its receipt: the
// status update carrying it can lag the exit by more than the tolerance,
// which bounds only creations, deletions and readiness (a CI run put a
// connect timeout for certain on the wrong old pod, the one that timed it
// out having exited before it began but been received 0.7 s after).
// Without the kubelet's time, an exit received at all can have come by t.
func (a attributor) exitedBy(p *Pod, t time.Time) bool {
	if p.ExitAt == nil {
		return false
	}
	return p.ExitServer == nil || !p.ExitServer.Add(-a.serverLead).After(t.Add(a.clock))
}

// rel formats x as seconds since the run's start.
func (a attributor) rel(x *time.Time) string { return fmt.Sprintf("%+.2fs", x.Sub(a.start).Seconds()) }

func (a attributor) describe(p *Pod, t time.Time) string {
	var parts []string
	switch {
	case a.deletedBy(p, t) && !p.DeletedAt.After(t):
		parts = append(parts, fmt.Sprintf("%.2fs after %s's deletion was requested (%s)", t.Sub(*p.DeletedAt).Seconds(), p.Name, a.rel(p.DeletedAt)))
	case p.DeletedAt != nil:
		parts = append(parts, fmt.Sprintf("began %.2fs before rollprobe received %s's deletion (%s)",
			p.DeletedAt.Sub(t).Seconds(), p.Name, a.rel(p.DeletedAt)))
	case p.ReadyAt != nil && !p.ReadyAt.After(t):
		parts = append(parts, fmt.Sprintf("%.2fs after %s turned ready (%s)", t.Sub(*p.ReadyAt).Seconds(), p.Name, a.rel(p.ReadyAt)))
	case p.ReadyAt != nil:
		parts = append(parts, fmt.Sprintf("%.2fs before rollprobe received that %s turned ready (%s)", p.ReadyAt.Sub(t).Seconds(), p.Name, a.rel(p.ReadyAt)))
	}
	if p.DeletedAt != nil {
		if p.EndpointGoneAt != nil {
			if p.EndpointGoneAt.After(t) {
				parts = append(parts, "its endpoint was still listed (removed "+a.rel(p.EndpointGoneAt)+")")
			} else {
				parts = append(parts, "its endpoint was removed "+a.rel(p.EndpointGoneAt))
			}
		}
		if p.ExitAt != nil && !p.ExitAt.After(t) {
			parts = append(parts, fmt.Sprintf("its %s had exited (%s, code %d)", report.ContainerNamed(p.ExitContainer, p.ExitSidecar), a.rel(p.ExitAt), *p.ExitCode))
		}
	}
	if len(parts) == 0 {
		return "served by " + p.Name
	}
	return strings.Join(parts, "; ")
}

// outages groups the failures into windows by the one definition every
// output uses (report.Windows: from the first failure's intended send time
// to the last one's, a gap over report.OutageGap splits), and says which
// pods were changing then and which its failures were put on. When the
// report kept only the first failures in full (failures_info), its own
// outages, over every failure, are kept and described: windows of the
// kept alone would end where keeping did.
func outages(r *report.Report, failures []report.Failure, a attributor) []report.Outage {
	start := r.StartedAt
	var out []report.Outage
	if r.FailureInfo.Total > uint64(r.FailureInfo.Kept) && len(r.Outages) > 0 {
		for _, o := range r.Outages {
			o.ByClass = maps.Clone(o.ByClass)
			o.Context, o.Pods, o.SlowConnects = "", nil, 0 // this analysis's, afresh
			out = append(out, o)
		}
	} else {
		var ws report.Windows
		for _, f := range failures {
			if class(&f) != prober.Local {
				ws.Add(f.Intended.Sub(start), f.Class)
			}
		}
		for _, w := range ws.List() {
			out = append(out, w.Outage(report.WallClock{Start: start})) // offsets from wall times already
		}
	}
	putPodsOnOutages(out, failures, start)
	for i := range out {
		o := &out[i]
		// The pods terminating when it began and those whose deletion came
		// while it lasted (terminatingDuring): a long outage of a rollout
		// spans several (the demo's naive one, three, of which its start
		// named one). A pod already gone when it began is not terminating
		// then, though a proxy behind may still send it connections: it is
		// named apart, if failures were put on it.
		var names, gone []string
		for _, p := range a.terminatingDuring(o.Start, o.End) {
			names = append(names, p.Name)
		}
		for _, op := range o.Pods {
			if p := a.pods.Get(op.Pod); p != nil && p.GoneAt != nil && o.Start.After(p.GoneAt.Add(a.tol+a.clock)) {
				gone = append(gone, p.Name)
			}
		}
		sort.Strings(names)
		sort.Strings(gone)
		var said []string
		if len(names) > 0 {
			said = append(said, "while terminating: "+strings.Join(names, ", "))
		}
		if len(gone) > 0 {
			said = append(said, "already gone: "+strings.Join(gone, ", "))
		}
		switch {
		case len(said) > 0:
			o.Context = strings.Join(said, "; ")
		default:
			for _, p := range a.justReadyAt(o.Start, anyClass) {
				names = append(names, p.Name)
			}
			sort.Strings(names)
			if len(names) > 0 {
				o.Context = "right after turning ready: " + strings.Join(names, ", ")
			}
		}
	}
	return out
}

// putPodsOnOutages counts, per outage, its failures by the pod they were
// put on. A failure is in the outage its intended time falls in, compared
// as offsets from start, as Windows placed it (wall times read back from
// offsets may differ by the monotonic clock's drift).
func putPodsOnOutages(out []report.Outage, failures []report.Failure, start time.Time) {
	for i := range out {
		o := &out[i]
		from, to := o.Start.Sub(start), o.End.Sub(start)
		byPod := map[string]*report.OutagePod{}
		for _, f := range failures {
			at := f.Intended.Sub(start)
			if class(&f) == prober.Local || f.LikelyPod == "" || at < from || at > to {
				continue
			}
			p := byPod[f.LikelyPod]
			if p == nil {
				p = &report.OutagePod{Pod: f.LikelyPod}
				byPod[f.LikelyPod] = p
			}
			p.Failures++
			if f.Confidence == 1 {
				p.Certain++
			}
		}
		for _, p := range byPod {
			o.Pods = append(o.Pods, *p)
		}
		slices.SortFunc(o.Pods, func(a, b report.OutagePod) int {
			if a.Failures != b.Failures {
				return b.Failures - a.Failures
			}
			return strings.Compare(a.Pod, b.Pod)
		})
	}
}

// servedByConntrack puts the responses conntrack mapped
// (Conntrack.Responses) on the pods that bore their addresses in the
// second their connections were dialled in (its middle: an address passes
// to a new pod only after the old one is gone). nil when none went to a
// pod of the timeline (conntrack not read, or every connection went to
// something else: an ingress's proxy), so that no pod shows a 0 that
// means "not measured".
func servedByConntrack(r *report.Report, pods *Pods) map[*Pod]uint64 {
	if r.Conntrack == nil {
		return nil
	}
	var out map[*Pod]uint64
	for _, second := range conntrackBySecond(r, pods) {
		for p, n := range second.each {
			if out == nil {
				out = map[*Pod]uint64{}
			}
			out[p] += n
		}
	}
	return out
}

// servedByAccessLog is servedByConntrack from the edge's access log: the
// responses it forwarded to each pod's address while the pod bore it (in
// the middle of the second, by the edge's clock); nil when the log named
// no response on a pod of the timeline.
func servedByAccessLog(r *report.Report, pods *Pods) map[*Pod]uint64 {
	if r.EdgeLog == nil {
		return nil
	}
	var out map[*Pod]uint64
	clock := r.WallClock()
	for _, n := range r.EdgeLog.Responses {
		if p := podAtAddr(clock, pods, n.Addr, n.T); p != nil {
			if out == nil {
				out = map[*Pod]uint64{}
			}
			out[p] += n.Responses
		}
	}
	return out
}

// edgeFailedByPod counts, by pod, the attempts the edge's log lists as
// failed on its address while it bore it (edgeFailedOn); nil when the log
// does not list failed attempts, an empty map when it listed none.
func edgeFailedByPod(r *report.Report, pods *Pods) map[*Pod]uint64 {
	if r.EdgeLog == nil || r.EdgeLog.Retried == nil {
		return nil
	}
	out := map[*Pod]uint64{}
	for _, f := range edgeFailedOn(r, pods) {
		if f.pod != nil {
			out[f.pod] += f.attempts
		}
	}
	return out
}

// countSlowConnects adds to each outage the successes that needed a
// retransmitted SYN in the seconds it spans (the series has 1 s rows).
func countSlowConnects(outs []report.Outage, r *report.Report) {
	clock := r.WallClock() // the outages' times are the wall clock's; the series' seconds the run's
	for i := range outs {
		o := &outs[i]
		from, to := clock.SecondOf(o.Start), clock.SecondOf(o.End)
		for _, row := range r.Series {
			if row.T >= from && row.T <= to {
				o.SlowConnects += row.SlowConnects
			}
		}
	}
}

func traffic(r *report.Report, pods *Pods) []report.PodTraffic {
	var out []report.PodTraffic
	known := map[string]bool{}
	byConntrack, byAccessLog, edgeFailed := servedByConntrack(r, pods), servedByAccessLog(r, pods), edgeFailedByPod(r, pods)
	clock := r.WallClock() // the timeline's times are the wall clock's; the series' seconds the run's
	for _, p := range pods.All() {
		known[p.PodName] = true
		pt := report.PodTraffic{Pod: p.Name, Revision: p.Revision, Node: p.Node, ReadyAt: p.ReadyAt, DeletedAt: p.DeletedAt, GoneAt: p.GoneAt, ExitCode: p.ExitCode}
		if p.Killed() {
			killed := int32(report.SIGKILLExitCode)
			pt.ExitCode = &killed
		}
		if byConntrack != nil {
			n := byConntrack[p]
			pt.ServedConntrack = &n
		}
		if byAccessLog != nil {
			n := byAccessLog[p]
			pt.ServedAccessLog = &n
		}
		if edgeFailed != nil {
			n := edgeFailed[p]
			pt.EdgeFailedAttempts = &n
		}
		shared := pods.Shared(p)
		if !shared {
			pt.Served = r.Totals.ByBackend[p.PodName]
		}
		cut := int64(-1)
		if p.DeletedAt != nil {
			cut = clock.SecondOf(*p.DeletedAt) // -1 before the run: a pod already going is not judged
		}
		for _, row := range r.Series {
			n := row.Backends[p.PodName]
			if n == 0 || (shared && !pods.ServedIn(p, clock, row.T)) {
				continue
			}
			if shared {
				pt.Served += n
			}
			if pt.FirstServedS == nil {
				pt.FirstServedS = &row.T
			}
			pt.LastServedS = &row.T
			if cut >= 0 && row.T > cut {
				pt.ServedAfterDeletion += n
			}
		}
		out = append(out, pt)
	}
	for name, n := range r.Totals.ByBackend { // answered, but no pod of the timeline bore the name
		if known[name] {
			continue
		}
		pt := report.PodTraffic{Pod: name, Served: n}
		for _, row := range r.Series {
			if row.Backends[name] > 0 {
				if pt.FirstServedS == nil {
					pt.FirstServedS = &row.T
				}
				pt.LastServedS = &row.T
			}
		}
		out = append(out, pt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}
