package analysis

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// Finding IDs (stable: CI annotations and JUnit cases use them).
const (
	StopsBeforePropagation = "stops-accepting-before-endpoints-propagate"
	AbruptKeepAliveClose   = "abrupt-keepalive-close"
	ReadyTooEarly          = "ready-before-serving"
	GraceTooShort          = "grace-period-too-short"
	NodeRoutesLate         = "node-routes-to-terminating-pods-longer"
	ServerErrors           = "5xx-during-rollout"
	Unexplained            = "failures-without-lifecycle-event"
	// LatencySpikeAtDeletion: successes came back slow right after pod
	// deletions (see spike.go), probably retried inside a proxy.
	LatencySpikeAtDeletion = "latency-spike-at-deletion"
	// LocalPolicyNoLocalEndpoint: traffic entered a node (its NodePort)
	// whose endpoints had all stopped serving, under externalTrafficPolicy
	// Local; only a Service with that policy can have it.
	LocalPolicyNoLocalEndpoint = "local-policy-node-without-serving-endpoint"
)

// seen is what a rule reads about one failure: the failure, its class, the
// pod it was attributed to (nil if none), whether that pod was being
// terminated then, and the other pods that could have caused it.
type seen struct {
	f           *report.Failure
	class       prober.Class
	pod         *Pod
	candidates  []*Pod // all the candidates, the likely pod among them; nil when certain
	terminating bool
	// proxied: the run met a proxy (see attributor.proxied).
	proxied bool
	// gap: the failure began while the entry node had no serving local
	// endpoint (externalTrafficPolicy: Local), or just after.
	gap *report.NodeGap
	// svcGap: the failure began while the Service had no serving endpoint
	// at all, or just after.
	svcGap *svcGap
	// shortfall: the failure began while a drain kept two or more of
	// the Service's pods out at once and others served, or just after.
	shortfall *shortfall
	// h2: the run spoke HTTP/2 (its streams share long-lived connections).
	h2 bool
	// switched: the blue/green switch that left the failure's pod behind
	// before its deletion (switchedAway), or nil.
	switched *activeSwitch
	// aborted: the abort whose way back deleted the failure's pod
	// (abortedAway), or nil.
	aborted *abortBack
	// named: the pod whose own DNS name the request's target is
	// (namedPod), or ""; namedDeleted: its first deletion could have acted
	// by the failure (as terminating judges a pod's).
	named        string
	namedDeleted bool
	// edgeAnswered: the response shows the edge made it (edgeAnswered).
	edgeAnswered bool
	// rulesRejected: a host's own rules refused its SYN before any pod
	// (attributor.rejectedByRules).
	rulesRejected bool
	// grpcCut: a call the grpc-go client sent whose connection was lost
	// before any answer (grpcCutCall). The prober read its connection's
	// frames (h2c, or TLS once decrypted), so its goaway says whether one
	// came.
	grpcCut bool
}

// window is how long after a deletion the failure came, for sizing the
// preStop sleep: from its pod's deletion when the attribution is certain;
// when it is not, from the earliest candidate's deletion (the conservative
// bound: a fix sized from it covers whichever pod it was). 0 when no
// candidate was terminating. certain says which.
func (s seen) window() (d time.Duration, certain bool) {
	if !s.terminating {
		return 0, true
	}
	began := beganAt(s.f)
	if len(s.candidates) == 0 {
		return max(0, began.Sub(*s.pod.DeletedAt)), true
	}
	earliest := *s.pod.DeletedAt
	for _, p := range s.candidates {
		if p.DeletedAt != nil && p.DeletedAt.Before(earliest) {
			earliest = *p.DeletedAt
		}
	}
	return max(0, began.Sub(earliest)), false
}

// group is the failures one rule claimed.
type group struct {
	fails []report.Failure
	pods  map[string]bool
	// window: the longest time from a pod's deletion to a failure it caused
	// for certain; conservative: the same for ambiguous failures, counted
	// from the earliest candidate's deletion; ambiguous counts those.
	window, conservative time.Duration
	ambiguous            int
	// left: the terminating pods the failures' SYNs can no longer have
	// reached (leftTheRules), each once, with the first failure's evidence.
	left []leftRules
	// byPath, when the run probed several paths: each path's longest
	// window (certain or conservative, whichever is longer), by name.
	byPath map[string]time.Duration
	// joined counts the failures whose SYN joined an earlier unanswered
	// connection's conntrack entry (Failure.JoinedConntrackEntry): left
	// out of the windows; followed, those that most likely did
	// (Failure.PriorPodAddr).
	joined, followed int
	// keptAlive counts the 5xx a pod's own proxy answered on connections
	// kept alive to the pod (keptAliveToThePod): left out of the windows.
	keptAlive int
	// edgeOwn: the failures the edge answered itself, by its access log
	// or its response (Failure.EdgeNoBackend, edgeAnswered, a 503 of its
	// own while a pod was unready).
	edgeOwn []report.Failure
}

// joinedEvidence says what the failures that joined a stale conntrack
// entry were, and what ends them.
func joinedEvidence(g *group, start time.Time) string {
	var last time.Time
	for _, f := range g.fails {
		if f.JoinedConntrackEntry && f.Start.After(last) {
			last = f.Start
		}
	}
	what := "1 of them was a new connection"
	if g.joined > 1 {
		what = fmt.Sprintf("%d of them were new connections", g.joined)
	}
	return what + " from a local port whose earlier connection to the same address had gone unanswered: conntrack still held that SYN's entry " +
		"(kept nf_conntrack_tcp_timeout_syn_sent, two minutes by default; kube-proxy clears no TCP entry: kubernetes#101607) " +
		"and sent the new SYN where the first went, past the rules (the failure's context names the pod; the last such failure " +
		fmt.Sprintf("began at %+.2fs). They are not counted in the windows above: ", last.Sub(start).Seconds()) +
		"they end with the unanswered connections that left the entries; lowering net.netfilter.nf_conntrack_tcp_timeout_syn_sent on the nodes (20 s, say) shortens how long one port stays blackholed"
}

// followedEvidence says what the failures that most likely followed an
// earlier connection's conntrack entry were.
func followedEvidence(g *group) string {
	what := "1 of them made"
	if g.followed > 1 {
		what = fmt.Sprintf("%d of them made", g.followed)
	}
	return what + " no conntrack entry of its own while an earlier connection from the same local port to the same address had made one: " +
		"its SYN most likely followed that entry past the rules (kubernetes#101607; see the failure's context), so it is not counted in the windows above"
}

// facts is what a rule renders from.
type facts struct {
	r *report.Report
	// failures: the run's, attributed (r's are as the prober kept them).
	failures []report.Failure
	pods     *Pods
	outages  []report.Outage
	gaps     []report.NodeGap
	version  advice.Version
	// spikes: the latency spikes at deletions (latencySpikes).
	spikes []pathSpike
	// svcGaps: the times the Service had no serving endpoint, each with
	// the failures placed in it.
	svcGaps []svcGap
	// shortfalls: the times a drain kept two or more of the Service's
	// pods out at once, each with the failures the budget's finding took.
	shortfalls []shortfall
	// preStop is the one preStop sleep the findings suggest: sized from
	// the longest measured window, failures', slow successes' or the
	// edge's retried attempts'.
	preStop int
	// propagationWindow: the window the propagation finding measured.
	propagationWindow time.Duration
	// edgeRetryWindow: how long after their deletion the edge's log lists
	// attempts that failed on pods (edgeRetryWindow), retried elsewhere.
	edgeRetryWindow time.Duration
	// switches: a blue/green's switches of its active Service.
	switches []activeSwitch
	// tol: the receive tolerance (see tolerance).
	tol time.Duration
}

// rule is one finding. match claims a failure for it; the matches are
// mutually exclusive (so the table can be in report order) except the
// last, Unexplained, which takes what no other claims: each failure is
// explained by exactly one finding. render turns the group into the
// finding, or reports there is none. A rule without match is about pods
// rather than failures (GraceTooShort) and renders from the facts alone.
type rule struct {
	id       string
	severity report.Severity
	match    func(s seen) bool
	render   func(g *group, x facts) (report.Finding, bool)
}

// rules in the order findings are reported.
var rules = []rule{
	// First: a request to one pod's own name has no other pod to go to:
	// no endpoint, capacity or propagation rule fits it.
	{PodDNSStale, report.SeverityError, podDNSStale, renderPodDNSStale},
	// Then: a request that never got past an edge has its cause there,
	// whatever the Service's endpoints were doing.
	{EdgeFailedConnections, report.SeverityError, func(s seen) bool { return s.f.ViaEdge && beforeTheEdge(s.class) }, renderEdgeFailed},
	// Then: a failure in a node gap has its cause there, whatever the
	// pods were doing (the race rule would otherwise claim it).
	{LocalPolicyNoLocalEndpoint, report.SeverityError, func(s seen) bool { return s.gap != nil && s.class != prober.HTTP5xx }, renderLocalPolicy},
	// Then: nothing served at all (capacity, not propagation); first
	// when a drain's evictions a budget allowed emptied the Service. The
	// budget's too when the pods a drain left serving failed (a 503
	// shed, a timeout) while it kept two or more of their peers out.
	{BudgetTooLoose, report.SeverityError, func(s seen) bool {
		return (s.svcGap != nil && s.svcGap.emptiedByBudgetedDrain() && s.class != prober.HTTP5xx) || overloadedByBudgetedDrain(s)
	}, renderBudgetTooLoose},
	{NoServingEndpoint, report.SeverityError, func(s seen) bool { return s.svcGap != nil && s.class != prober.HTTP5xx }, renderNoServingEndpoint},
	// Then: the kernel showed no pod was reached, a host's own rules
	// stopped the SYN (conntrack, or the ICMP error that refused it),
	// while the Service had endpoints: no pod's doing.
	{ProxyRulesWithoutEndpoint, report.SeverityError, func(s seen) bool { return s.rulesRejected }, renderProxyRulesWithoutEndpoint},
	// Then: the edge's log shows it sent the request to no pod, while the
	// Service had endpoints: the edge's doing, not a pod's.
	{EdgeHadNoBackend, report.SeverityError, func(s seen) bool { return s.f.EdgeNoBackend || s.edgeAnswered }, renderEdgeNoBackend},
	// Then: grpc-go never sent the call (its channel had no connection):
	// no pod's doing directly, whatever the pods did then.
	{GRPCFailedUnsent, report.SeverityError, func(s seen) bool { return grpcUnsent(s.f, s.class) }, renderGRPCFailedUnsent},
	// HTTP/2 streams end with their connection, not with a refused
	// connect: their own mechanism, before the race rule claims them.
	{H2CloseWithoutGoAway, report.SeverityError, h2NoGoAway, renderH2CloseWithoutGoAway},
	{H2GoAwayDroppedStreams, report.SeverityError, h2ShutdownStream, renderH2GoAwayDroppedStreams},
	// An aborted rollout's pods raced the move back: the propagation
	// race, with the abort's knob; before the blue/green's, as a
	// blue/green's abort after its switch is itself a switch (back), which
	// leaves these pods behind.
	{AbortEarlyScaleDown, report.SeverityError, func(s seen) bool { return s.aborted != nil && racedPropagation(s) }, renderAbortScaleDown},
	// A blue/green's old pods raced the switch: the same race as the
	// next, with its own knob.
	{BlueGreenEarlyScaleDown, report.SeverityError, func(s seen) bool { return s.switched != nil && racedPropagation(s) }, renderBlueGreenScaleDown},
	{StopsBeforePropagation, report.SeverityError, racedPropagation, renderPropagation},
	{AbruptKeepAliveClose, report.SeverityError, abruptClose, renderAbruptClose},
	{ReadyTooEarly, report.SeverityError,
		func(s seen) bool {
			// Just ready: a pod the timeline names only then (justReadyAt);
			// conntrack can name any pod, and an old one that refused
			// before its deletion was received is no late starter.
			return s.class != prober.HTTP5xx && s.pod != nil && s.pod.ReadyAt != nil && !s.terminating &&
				!s.pod.Present && beganAt(s.f).Sub(*s.pod.ReadyAt) < readyWindow
		}, renderReadyTooEarly},
	{ServerErrors, report.SeverityError, func(s seen) bool { return s.class == prober.HTTP5xx || grpcGo5xx(s.f, s.class) }, renderServerErrors},
	{GraceTooShort, report.SeverityWarning, nil, renderGraceTooShort},
	{NodeRoutesLate, report.SeverityWarning, nil, renderNodeRoutesLate},
	{LatencySpikeAtDeletion, report.SeverityWarning, nil, renderLatencySpike},
	{DrainBlocked, report.SeverityError, nil, renderDrainBlocked},
	{H2UnevenAfterRollout, report.SeverityWarning, nil, renderH2Uneven},
	{H2PinnedToTerminating, report.SeverityInfo, nil, renderH2Pinned},
	{ShutdownNotExercised, report.SeverityWarning, nil, renderShutdownNotExercised},
	{EdgeHeldPastTimeout, report.SeverityWarning, nil, renderEdgeHeld},
	{EdgeRetriesHidFailures, report.SeverityWarning, nil, renderEdgeRetried},
	{Unexplained, report.SeverityWarning, func(seen) bool { return true }, renderUnexplained},
}

// racedPropagation: a connection to a terminating pod failed (or, through
// a proxy, timed out) other than by a kept-alive connection's cut: traffic
// still went to it.
func racedPropagation(s seen) bool {
	return s.terminating && (connectionFailure(s.class) || (s.proxied && s.class == prober.Timeout)) && !abruptClose(s)
}

// abruptClose: a kept-alive connection to a terminating pod was cut.
func abruptClose(s seen) bool {
	return s.terminating && (s.class == prober.EOFReused || (s.class == prober.Reset && !s.f.Fresh))
}

// findings applies the rules; preStop is the sleep the propagation finding
// suggests (0 without one, or when the Service publishes not-ready
// addresses).
func findings(r *report.Report, failures []report.Failure, left [][]leftRules, outs []report.Outage, gaps []report.NodeGap, a attributor) (out []report.Finding, preStop int) {
	pods := a.pods
	groups := map[string]*group{}
	svcGaps := serviceGaps(r)
	shortfalls := drainShortfalls(r)
	switches := activeSwitches(r)
	abort := abortOf(r)
	for i := range failures {
		f := &failures[i]
		s := seen{f: f, class: class(f), pod: pods.Get(f.LikelyPod), proxied: a.proxiedOn(f), h2: prober.Protocol(r.Config.Protocol).Multiplexed(),
			edgeAnswered: edgeAnswered(f, r.Config.BackendHeader), rulesRejected: a.rejectedByRules(f)}
		s.grpcCut = grpcCutCall(f, s.class)
		if _, ok := a.noBackendWhileUnready(f, s.class); ok && f.LikelyPod == "" {
			s.edgeAnswered = true
		}
		if s.class == prober.Local {
			continue
		}
		for _, name := range f.Candidates {
			if p := pods.Get(name); p != nil {
				s.candidates = append(s.candidates, p)
			}
		}
		s.terminating = s.pod != nil && a.deletedBy(s.pod, causeBy(f, s.class))
		s.switched = switchedAway(switches, s.pod)
		s.aborted = abortedAway(abort, s.pod)
		if s.named = namedPod(r, f, pods); s.named != "" {
			p := firstDeleted(pods.Incarnations(s.named))
			s.namedDeleted = p != nil && a.deletedBy(p, causeBy(f, s.class))
		}
		if i := gapOf(gaps, f, a.localEntries); i >= 0 {
			s.gap = &gaps[i]
			gaps[i].Failed++
		} else if i := svcGapOf(svcGaps, f); i >= 0 {
			s.svcGap = &svcGaps[i]
			svcGaps[i].failed++
		} else if i := shortfallOf(shortfalls, f); i >= 0 {
			s.shortfall = &shortfalls[i]
		} else if i := svcGapJustAfter(svcGaps, f, a.tol); i >= 0 && (s.rulesRejected || f.EdgeNoBackend || s.edgeAnswered) {
			// The node's rules already held no endpoint, or the edge had
			// none: kube-proxy or the edge's controller heard of the last
			// one's end before rollprobe's watch did.
			s.svcGap = &svcGaps[i]
			svcGaps[i].failed++
			svcGaps[i].early++
			if lead := svcGaps[i].start.Sub(beganAt(f)); lead > svcGaps[i].earlyLead {
				svcGaps[i].earlyLead = lead
			}
		}
		var id string
		for _, rl := range rules {
			if rl.match != nil && rl.match(s) {
				id = rl.id
				break
			}
		}
		if id == BudgetTooLoose && s.shortfall != nil {
			s.shortfall.failed++
		}
		g := groups[id]
		if g == nil {
			g = &group{pods: map[string]bool{}}
			groups[id] = g
		}
		g.fails = append(g.fails, *f)
		if f.EdgeNoBackend || s.edgeAnswered {
			g.edgeOwn = append(g.edgeOwn, *f)
		}
		for _, l := range left[i] {
			if !slices.ContainsFunc(g.left, func(q leftRules) bool { return q.pod == l.pod }) {
				g.left = append(g.left, l)
			}
		}
		if f.LikelyPod != "" {
			g.pods[f.LikelyPod] = true
		}
		if f.JoinedConntrackEntry {
			// Its SYN followed an earlier unanswered one's entry, not the
			// rules: how long after the deletion it came measures the
			// entry's life, not the endpoints' propagation.
			g.joined++
			continue
		}
		if f.PriorPodAddr != "" {
			// Most likely the same (no entry of its own): it sizes no
			// window either.
			g.followed++
			continue
		}
		if keptAliveToThePod(f, r) {
			g.keptAlive++
			continue
		}
		w, certain := s.window()
		if certain {
			g.window = max(g.window, w)
		} else {
			g.conservative = max(g.conservative, w)
			g.ambiguous++
		}
		if f.Path != "" {
			if g.byPath == nil {
				g.byPath = map[string]time.Duration{}
			}
			g.byPath[f.Path] = max(g.byPath[f.Path], w)
		}
	}
	x := facts{r: r, failures: failures, pods: pods, outages: outs, gaps: gaps, version: serverVersion(r), spikes: latencySpikes(r, pods), svcGaps: svcGaps, shortfalls: shortfalls, switches: switches, tol: a.tol}
	if g := groups[StopsBeforePropagation]; g != nil {
		x.propagationWindow = max(g.window, g.conservative)
		preStop = PreStopSeconds(x.propagationWindow)
	}
	for _, id := range []string{BlueGreenEarlyScaleDown, AbortEarlyScaleDown} {
		if g := groups[id]; g != nil {
			preStop = max(preStop, PreStopSeconds(max(g.window, g.conservative)))
		}
	}
	if len(x.spikes) > 0 {
		preStop = max(preStop, PreStopSeconds(spikeWindow(x.spikes)))
	}
	if x.edgeRetryWindow = edgeRetryWindow(r, pods); x.edgeRetryWindow > 0 {
		preStop = max(preStop, PreStopSeconds(x.edgeRetryWindow))
	}
	x.preStop = preStop
	for _, rl := range rules {
		g := groups[rl.id]
		if g == nil && rl.match != nil {
			continue // no failure of its kind
		}
		f, ok := rl.render(g, x)
		if !ok {
			continue
		}
		if g != nil && g.joined > 0 {
			f.Evidence = append(f.Evidence, joinedEvidence(g, x.r.StartedAt))
		}
		if g != nil && g.followed > 0 {
			f.Evidence = append(f.Evidence, followedEvidence(g))
		}
		f.ID, f.Severity = rl.id, rl.severity
		out = append(out, f)
	}
	if publishesNotReady(r) {
		// The windows measured end when the pods were removed, not when
		// the endpoint change propagated: no preStop sleep is sized from
		// them (the doctor's advice must not name one).
		preStop = 0
	}
	return out, preStop
}

// span says when the group's failures were sent: "at +X" for one, "from
// +X to +Y" for more.
func (g *group) span(start time.Time) string {
	first, last := g.fails[0].Intended, g.fails[len(g.fails)-1].Intended
	if len(g.fails) == 1 {
		return fmt.Sprintf("at %+.2fs", first.Sub(start).Seconds())
	}
	return fmt.Sprintf("from %+.2fs to %+.2fs", first.Sub(start).Seconds(), last.Sub(start).Seconds())
}

// nOf is n noun, plural unless n is 1: "1 request", "3 requests".
func nOf[N ~int | ~int64 | ~uint64 | ~uint32](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// count: the group's failures of class c.
func (g *group) count(c string) int {
	n := 0
	for _, f := range g.fails {
		if f.Class == c {
			n++
		}
	}
	return n
}

func (g *group) classes() string {
	n := map[string]int{}
	for _, f := range g.fails {
		n[f.Class]++
	}
	var parts []string
	for c, k := range n {
		parts = append(parts, fmt.Sprintf("%s %d", c, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func (g *group) podList() []string {
	var out []string
	for p := range g.pods {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// PreStopSeconds sizes a preStop sleep from a measured window: the window
// with half again as margin, plus a second, rounded up.
func PreStopSeconds(window time.Duration) int { return int(math.Ceil(window.Seconds()*1.5 + 1)) }

func renderPropagation(g *group, x facts) (report.Finding, bool) {
	// Size the preStop sleep from what was measured: the longest time
	// traffic kept arriving after a deletion request, counted from the
	// earliest possible deletion where the pod is not certain, so the fix
	// covers what was seen whichever pod it was.
	sleep := x.preStop
	evidence := []string{fmt.Sprintf("%s failed (%s) %s", nOf(len(g.fails), "request"), g.classes(), g.span(x.r.StartedAt))}
	why := ": the endpoint change had not reached every proxy yet"
	if publishesNotReady(x.r) {
		why = "" // the Service's setting kept the endpoint: said below
	}
	switch timed := len(g.fails) - g.joined - g.followed - g.keptAlive; {
	case timed == 0:
		evidence = append(evidence, "each came after the deletion of the pod it hit had been requested")
	case g.ambiguous < timed:
		evidence = append(evidence, fmt.Sprintf("each came after the deletion of the pod it most likely hit had been requested; the last certain one %.2fs after it%s", g.window.Seconds(), why))
	default:
		evidence = append(evidence, "each came after the deletion of a pod it could have hit had been requested (none could be put on one pod for certain)"+why)
	}
	if g.ambiguous > 0 {
		evidence = append(evidence, fmt.Sprintf("%d of them could have come from more than one terminating pod; counted from the earliest of those deletions, the last came %.2fs after it, and the fix is sized from that",
			g.ambiguous, g.conservative.Seconds()))
	}
	if g.count(report.ClassConnectTimeout)+g.count(report.ClassRefused) > 0 {
		evidence = append(evidence, "connect_timeout means new connections went to the IP of a pod that no longer existed; refused, to a pod no longer listening")
	}
	stops := servingStopsOfGroup(g, x)
	if n := g.count(report.ClassProxy5xx); n > stops.answeredFor {
		// Those the pod's own proxy answered are said with its stop.
		evidence = append(evidence, "proxy_5xx means the proxy in front (an ingress, a gateway) still routed to the pod and answered for it when it could not reach it; a timeout through it, that it waited on a pod that no longer answered")
	}
	evidence = append(evidence, pathWindows(g, x.r)...)
	if line := servedAfterDeletionByPath(x); line != "" {
		evidence = append(evidence, line)
	}
	if w := spikeWindow(x.spikes); w > x.propagationWindow {
		evidence = append(evidence, fmt.Sprintf("successes came back slow up to %.1fs after a deletion (see %s): the preStop below is sized to cover that too", w.Seconds(), LatencySpikeAtDeletion))
	}
	if w := x.edgeRetryWindow; w > x.propagationWindow && w > spikeWindow(x.spikes) {
		evidence = append(evidence, fmt.Sprintf("the edge's log lists attempts that failed on pods up to %.2fs after their deletion, which it retried elsewhere (see %s): the preStop below is sized to cover that too", w.Seconds(), EdgeRetriesHidFailures))
	}
	var slow uint64
	for _, o := range x.outages {
		slow += o.SlowConnects
	}
	if slow > 0 {
		evidence = append(evidence, fmt.Sprintf("%d more requests in the same outages succeeded only after their SYN was retransmitted (about 1 s late): the same race, seen by users as latency spikes", slow))
	}
	evidence = append(evidence, stops.evidence()...)
	if g.keptAlive > 0 {
		were := fmt.Sprintf("%d of them were 5xx", g.keptAlive)
		if g.keptAlive == 1 {
			were = "1 of them was a 5xx"
		}
		evidence = append(evidence, were+" answered at the pod on connections the prober kept alive to it, which endpoint changes never touch: "+
			"such failures come until the pod closes those connections, so they size no preStop")
	}
	fix := fmt.Sprintf("give %s a preStop hook that waits at least %ds (%s) so it keeps serving until endpoints have propagated, and set terminationGracePeriodSeconds above %ds plus the time the app needs to drain%s",
		stops.holder(), sleep, advice.PreStopSleep(sleep, x.version), sleep, stops.earlyFix(x.version))
	if publishesNotReady(x.r) {
		// The window measured is not propagation's: the endpoint stays
		// listed ready until the pod is gone, so a longer preStop only
		// moves it later.
		evidence = append(evidence, publishesNotReadyEvidence(x.r, "a terminating pod's endpoint stays listed as ready until the pod object is gone, so traffic follows the pod past any preStop sleep: these failures came after the app stopped listening and before the pod was removed"))
		fix = advice.ClientsOffNotReadyService
	}
	return report.Finding{
		Title:    "pods stopped accepting connections while traffic was still routed to them",
		Evidence: evidence,
		Fix:      fix,
		Pods:     g.podList(),
	}, true
}

// publishesNotReady: the run's Service lists its pods' endpoints as ready
// from their start and while they terminate (publishNotReadyAddresses).
func publishesNotReady(r *report.Report) bool {
	return r.Rollout != nil && r.Rollout.PublishNotReadyAddresses
}

// publishesNotReadyEvidence is the evidence line naming the Service's
// setting, then what it did here.
func publishesNotReadyEvidence(r *report.Report, what string) string {
	return fmt.Sprintf("service %s has publishNotReadyAddresses: true: %s", r.Rollout.Service, what)
}

// publishesNotReadyStop is what keeps traffic off a going pod behind a
// Service that publishes not-ready addresses, where the findings would
// otherwise name a preStop sleep.
const publishesNotReadyStop = "a Service without publishNotReadyAddresses (the setting keeps a pod's endpoint listed until the pod is gone: no preStop sleep outlasts that)"

// pathWindows compares the paths of a run that probed several: how long
// after a pod's deletion each kept failing, and by how much the slowest
// lagged the fastest (an ingress routing to a pod kube-proxy had already
// dropped, say). The fix is sized from the slowest: it covers every path.
// None for a run of one path.
func pathWindows(g *group, r *report.Report) []string {
	if len(r.Paths) < 2 {
		return nil
	}
	type pw struct {
		name   string
		window time.Duration
		failed bool
	}
	// A grpc-go path's connects are not calls: when its channel's
	// reconnects met the race, its calls failed unsent (grpcUnsent), no
	// connect of its own counted here. Its window is then unknown, and no
	// other path is said to have routed longer than it.
	hidden := map[string]bool{}
	for i := range r.Failures {
		if f := &r.Failures[i]; grpcUnsent(f, class(f)) {
			hidden[f.Path] = true
		}
	}
	var ws []pw
	var unknown []string
	for _, p := range r.Paths {
		w, failed := g.byPath[p.Name]
		if !failed && hidden[p.Name] {
			unknown = append(unknown, p.Name+" unknown (its channel's failed connects are in its calls failed unsent)")
			continue
		}
		ws = append(ws, pw{p.Name, w, failed})
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].window > ws[j].window })
	var parts []string
	for _, w := range ws {
		if w.failed {
			parts = append(parts, fmt.Sprintf("%s %.2fs", w.name, w.window.Seconds()))
		} else {
			parts = append(parts, w.name+" none")
		}
	}
	parts = append(parts, unknown...)
	out := []string{"by path, the last such failure after its pod's deletion was requested (counted as the fix is: from the earliest candidate's deletion where the pod is not certain): " + strings.Join(parts, ", ")}
	if len(ws) < 2 {
		return out
	}
	slowest, fastest := ws[0], ws[len(ws)-1]
	if lag := slowest.window - fastest.window; slowest.failed && lag > 0 {
		out = append(out, fmt.Sprintf("%s kept routing to terminating pods %.2fs longer than %s: the preStop below is sized from %s's window, the longest",
			slowest.name, lag.Seconds(), fastest.name, slowest.name))
	}
	return out
}

// servedAfterDeletionByPath says, for a run of several paths, how long
// after a pod's deletion each path still got responses from it (the
// backend header, whole seconds of the series): the other side of the
// same lag, the requests a path kept sending to a terminating pod that
// still answered. "" for one path or no backend header.
func servedAfterDeletionByPath(x facts) string {
	if len(x.r.Paths) < 2 {
		return ""
	}
	var parts []string
	servedAfter := false
	clock := x.r.WallClock() // deletions on the wall clock, the series' seconds on the run's
	for _, p := range x.r.Paths {
		longest := int64(-1)
		for _, pod := range x.pods.All() {
			if pod.DeletedAt == nil {
				continue
			}
			deleted := clock.SecondOf(*pod.DeletedAt)
			for _, row := range p.Series {
				if row.T > deleted && row.Backends[pod.PodName] > 0 && x.pods.ServedIn(pod, clock, row.T) {
					longest = max(longest, row.T-deleted)
				}
			}
		}
		if longest > 0 {
			servedAfter = true
			parts = append(parts, fmt.Sprintf("%s %ds", p.Name, longest))
		} else {
			parts = append(parts, p.Name+" none")
		}
	}
	if !servedAfter {
		return "" // the pods stopped answering at once on every path
	}
	return "by path, responses from a pod after its deletion was requested came up to (whole seconds of the series): " + strings.Join(parts, ", ")
}

func renderAbruptClose(g *group, x facts) (report.Finding, bool) {
	evidence := []string{
		fmt.Sprintf("%s on reused connections failed (%s) %s, after their pods' deletion was requested", nOf(len(g.fails), "request"), g.classes(), g.span(x.r.StartedAt)),
		"endpoint changes never touch established connections: kept-alive clients keep sending to a terminating pod until it closes the connection",
	}
	closes := map[string]int{}
	for _, f := range g.fails {
		closes[f.ServerClose]++
	}
	if b, a := closes[report.CloseBeforeRequest], closes[report.CloseAfterRequest]; b+a > 0 {
		evidence = append(evidence, fmt.Sprintf("%d were closed after the server had the request (its kernel acknowledged it: cut in flight), "+
			"%d met a connection the server had already closed while idle (the request was never acknowledged: the keep-alive race, which closing idle connections at shutdown causes)", a, b))
	}
	fix := "drain on SIGTERM: keep serving for a few seconds answering with Connection: close (Go: srv.SetKeepAlivesEnabled(false)), then http.Server.Shutdown, never Close; keep the grace period above preStop plus this drain"
	if stops := servingStopsOf(x.pods, g.podList()); stops.named() {
		// The container whose connections were cut: a proxy in front
		// of the app closes them, not the app.
		fix = "in " + stops.holder() + " (the Service's port), " + fix
	}
	return report.Finding{
		Title:    "kept-alive connections were closed abruptly at pod termination",
		Evidence: evidence,
		Fix:      fix,
		Pods:     g.podList(),
	}, true
}

func renderReadyTooEarly(g *group, x facts) (report.Finding, bool) {
	// Those begun before their pod turned ready: traffic a ready-only
	// endpoint list would not have sent it.
	before := 0
	for _, f := range g.fails {
		if p := x.pods.Get(f.LikelyPod); p != nil && p.ReadyAt != nil && beganAt(&f).Before(*p.ReadyAt) {
			before++
		}
	}
	f := report.Finding{
		Title:    "new pods received traffic before they could serve it",
		Evidence: []string{fmt.Sprintf("%s failed (%s) %s, within %s after a new pod turned ready", nOf(len(g.fails), "request"), g.classes(), g.span(x.r.StartedAt), readyWindow)},
		Fix:      "add a readiness probe that succeeds only when the app serves requests (an HTTP check of a real endpoint, not a process or TCP check), and a startupProbe for slow starts",
		Pods:     g.podList(),
	}
	if before > 0 {
		// The rule takes them too (readyWindow bounds only the after).
		f.Evidence[0] = fmt.Sprintf("%s failed (%s) %s, before a new pod turned ready or within %s after", nOf(len(g.fails), "request"), g.classes(), g.span(x.r.StartedAt), readyWindow)
		f.Evidence = append(f.Evidence, fmt.Sprintf("%d of them began before the pod they hit had turned ready", before))
	}
	if publishesNotReady(x.r) {
		f.Title = "new pods received traffic before they were ready"
		f.Evidence = append(f.Evidence, publishesNotReadyEvidence(x.r, "a new pod's endpoint is listed as ready from the moment it has an address, whatever its readiness probe says"))
		f.Fix = advice.ClientsOffNotReadyService
	}
	return f, true
}

func renderServerErrors(g *group, x facts) (report.Finding, bool) {
	named, viaGRPCGo := 0, 0
	for _, f := range g.fails {
		if f.Backend != "" {
			named++
		}
		if grpcGo5xx(&f, class(&f)) {
			viaGRPCGo++
		}
	}
	source := "the responses named their pod (backend header): the app itself answered 5xx"
	fix := "find why the app answers 5xx while pods change (dependencies not ready at start, shutdown order); fail readiness instead of serving errors"
	switch {
	case named > 0:
	case x.r.Config.BackendHeader == "":
		source = "no backend header was configured, so the source (app or proxy) cannot be told apart: have the app name its pod in a response header (X-Pod-Name or your app's equivalent) and configure that header as the run's backend header"
		fix = "the proxy in front routed to pods that were going away: apply the preStop and draining fixes, and check its endpoint update lag and retry policy"
	case viaGRPCGo == len(g.fails):
		// grpc-go keeps no header of such a response: whether the
		// backend header came is unknown, not absent.
		source = "grpc-go keeps none of the headers of a response that is not gRPC, so whether these named a pod (the backend header), and so whether the app or a proxy answered, is unknown"
		fix = "apply the preStop and draining fixes if a proxy in front routed to pods that were going away; if the app answered, find why it answers 5xx while pods change"
	default:
		source = "the responses carried no backend header: a proxy or ingress in front most likely answered them (upstream refused or reset)"
		fix = "the proxy in front routed to pods that were going away: apply the preStop and draining fixes, and check its endpoint update lag and retry policy"
	}
	evidence := []string{fmt.Sprintf("%s %s", nOf(len(g.fails), "5xx response"), g.span(x.r.StartedAt)), source}
	if viaGRPCGo > 0 {
		evidence = append(evidence, fmt.Sprintf("%d of them grpc-go's calls, answered with an HTTP 5xx that is not gRPC, which grpc-go fails with a status of its own (UNAVAILABLE for 502, 503 and 504; the HTTP status is the failure's status)", viaGRPCGo))
	}
	return report.Finding{
		Title:    "5xx responses during the rollout",
		Evidence: evidence,
		Fix:      fix, Pods: g.podList(),
	}, true
}

// renderGraceTooShort is about pods, not failures: a SIGKILL after a
// deletion request cuts in-flight requests whether or not one was seen.
func renderGraceTooShort(_ *group, x facts) (report.Finding, bool) {
	var killed []string
	pods := map[string]int{}          // pods per container killed, named in prose
	graces := map[time.Duration]int{} // killed pods per grace period, where known
	sidecar := false
	for _, p := range x.pods.All() {
		if len(p.KilledAfterDeletion()) == 0 {
			continue
		}
		killed = append(killed, p.Name)
		if p.GracePeriod != nil {
			graces[*p.GracePeriod]++
		}
		for _, c := range p.KilledAfterDeletion() {
			pods[c]++
			sidecar = sidecar || strings.HasPrefix(c, "sidecar ")
		}
	}
	sort.Strings(killed)
	if len(killed) == 0 {
		return report.Finding{}, false
	}
	evidence := []string{fmt.Sprintf("%d pods ended with exit code %d after their deletion was requested: %s", len(killed), report.SIGKILLExitCode, strings.Join(killed, ", "))}
	// A report older than timeline[].container names no container: then
	// there is nothing to add to the pods' names.
	delete(pods, report.ContainerNamed("", false))
	if len(pods) > 0 {
		var each []string
		for _, c := range slices.Sorted(maps.Keys(pods)) {
			each = append(each, fmt.Sprintf("%s in %s", c, nOf(pods[c], "pod")))
		}
		evidence = append(evidence, "SIGKILLed: "+strings.Join(each, "; "))
	}
	raise := "raise terminationGracePeriodSeconds"
	if len(graces) > 0 {
		var each []string
		for _, g := range slices.Sorted(maps.Keys(graces)) {
			each = append(each, fmt.Sprintf("%.0fs in %s", g.Seconds(), nOf(graces[g], "pod")))
		}
		evidence = append(evidence, "their deletions' grace period: "+strings.Join(each, "; "))
		raise += fmt.Sprintf(" (%.0fs here)", slices.Max(slices.Collect(maps.Keys(graces))).Seconds())
	}
	fix := raise + " above the preStop hook plus the app's drain time, or make the app exit promptly after draining; a SIGKILL cuts in-flight requests even when none was seen to fail here"
	if sidecar {
		fix += "; a native sidecar is sent SIGTERM only once the app's containers have exited (or the grace period has run out waiting for them), with what is left of the grace period (at least 2 s): the grace period must cover the app's drain and then the sidecar's own shutdown"
	}
	return report.Finding{
		Title:    "containers were SIGKILLed at the end of their grace period",
		Evidence: evidence,
		Fix:      fix,
		Pods:     killed,
	}, true
}

// nodeLagAtLeast is how much longer one node's connection failures must
// go on than every other node's for a finding: less is the spread of any
// rollout (each kube-proxy syncs on its own).
const nodeLagAtLeast = time.Second

// renderNodeRoutesLate: probing from the cluster, new connections failed
// for clearly longer on one node than on the others: that node's
// kube-proxy (or whatever routes Service traffic there) learnt of the
// endpoint changes late. Only connection failures count (refused,
// connect_timeout): they are what stale routing makes. When the run
// probed several paths, nodes are compared within each path (each has its
// own probers: a node whose prober probed another path says nothing of
// this one's routing), and the path with the longest lag is named. A path
// that enters at a node port is left out: the node that owns the port
// routes it, not the probers' (the lab's Local-policy sample probed at one
// node's NodePort from both nodes: every failure was that node's gap, and
// the prober on the other node was named as lagging).
func renderNodeRoutesLate(_ *group, x facts) (report.Finding, bool) {
	names := pathNames(x.r)
	var paths []string
	for _, p := range x.r.Probers {
		if i := slices.Index(names, p.Path); i >= 0 {
			if e := pathEntry(x.r, i); e != nil && e.Via == report.ViaNodePort {
				continue
			}
		}
		if !slices.Contains(paths, p.Path) {
			paths = append(paths, p.Path)
		}
	}
	var best nodeLag
	for _, path := range paths {
		if lag, ok := nodeLagOn(x, path); ok && lag.longer > best.longer {
			best = lag
		}
	}
	if best.longer == 0 {
		return report.Finding{}, false
	}
	top, on := best.nodes[0], ""
	if len(paths) > 1 {
		on = " on path " + best.path
	}
	evidence := []string{fmt.Sprintf("new connections failed (refused, connect_timeout)%s %.1fs longer from the prober on node %s than from any other", on, best.longer.Seconds(), top.name)}
	for _, nd := range best.nodes {
		if nd.n == 0 {
			evidence = append(evidence, fmt.Sprintf("node %s: none failed", nd.name))
			continue
		}
		evidence = append(evidence, fmt.Sprintf("node %s: %d failed from %+.2fs to %+.2fs", nd.name, nd.n, nd.first.Sub(x.r.StartedAt).Seconds(), nd.last.Sub(x.r.StartedAt).Seconds()))
	}
	return report.Finding{
		Title:    fmt.Sprintf("kube-proxy on node %s routed to terminating pods %.1fs longer than elsewhere", top.name, best.longer.Seconds()),
		Evidence: evidence,
		Fix: fmt.Sprintf("look at how node %s routes Service traffic: kube-proxy's health, its CPU and its connection to the API server "+
			"(endpoint changes reach it late); until then a preStop sleep must cover the slowest node, as the propagation finding's does", top.name),
	}, true
}

// nodeLag is how much longer connection failures went on from one node's
// probers than from the others' of one path: nodes, the latest first.
type nodeLag struct {
	path   string
	nodes  []*probingNode
	longer time.Duration
}

type probingNode struct {
	name        string
	n           int
	first, last time.Time
}

// nodeLagOn compares the nodes of the probers of path ("" for a run of
// one target): ok when one node's failures went on at least
// nodeLagAtLeast longer than every other's.
func nodeLagOn(x facts, path string) (nodeLag, bool) {
	byName := map[string]*probingNode{}
	for _, p := range x.r.Probers {
		if p.Path == path && byName[p.Node] == nil {
			byName[p.Node] = &probingNode{name: p.Node}
		}
	}
	if len(byName) < 2 {
		return nodeLag{}, false
	}
	for _, f := range x.r.Failures {
		nd := byName[f.Node]
		if nd == nil || f.Path != path || (f.Class != report.ClassRefused && f.Class != report.ClassConnectTimeout) {
			continue
		}
		if nd.n == 0 || f.Intended.Before(nd.first) {
			nd.first = f.Intended
		}
		if f.Intended.After(nd.last) {
			nd.last = f.Intended
		}
		nd.n++
	}
	nodes := make([]*probingNode, 0, len(byName))
	for _, nd := range byName {
		nodes = append(nodes, nd)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].last.Equal(nodes[j].last) {
			return nodes[i].name < nodes[j].name
		}
		return nodes[i].last.After(nodes[j].last)
	})
	top, next := nodes[0], nodes[1]
	var longer time.Duration
	switch {
	case top.n == 0:
		return nodeLag{}, false
	case next.n == 0:
		longer = top.last.Sub(top.first) // the others had none at all
	default:
		longer = top.last.Sub(next.last)
	}
	if longer < nodeLagAtLeast {
		return nodeLag{}, false
	}
	return nodeLag{path: path, nodes: nodes, longer: longer}, true
}

func renderUnexplained(g *group, x facts) (report.Finding, bool) {
	which := "no pod"
	entries := localEntries(x.r)
	if node := entryNodeOf(entries, &g.fails[0]); node != "" && !slices.ContainsFunc(g.fails, func(f report.Failure) bool {
		return entryNodeOf(entries, &f) != node
	}) {
		// Pods on other nodes may have been terminating: out of reach.
		which = "no pod on " + node + " (the entry: externalTrafficPolicy Local keeps what enters it there)"
	}
	// Terminating pods the failures' SYNs can no longer have reached
	// (group.left) are named, so the first line does not read as "no pod
	// was terminating".
	left := g.left
	// The first line speaks of the failures that sent something: a dns
	// failure sent nothing, so "no pod was terminating" says nothing of
	// it (its own line, below, does).
	sent, unsent := &group{}, &group{}
	for _, f := range g.fails {
		if f.Class == report.ClassDNS {
			unsent.fails = append(unsent.fails, f)
		} else {
			sent.fails = append(sent.fails, f)
		}
	}
	if len(sent.fails) == 0 {
		sent = g
	}
	// noPodLine says fails came with no pod changing (that their SYNs can
	// have reached, where kube-proxy's rules left some: left).
	noPodLine := func(fails *group, noun string) string {
		if len(left) == 0 {
			return fmt.Sprintf("%s failed (%s) %s while %s was terminating or just ready", nOf(len(fails.fails), noun), fails.classes(), fails.span(x.r.StartedAt), which)
		}
		reach := "that their SYNs can have reached"
		if !anyLeftByMisses(left) {
			reach = "that can have refused them"
		}
		return fmt.Sprintf("%s failed (%s) %s while %s %s was terminating or just ready", nOf(len(fails.fails), noun), fails.classes(), fails.span(x.r.StartedAt), which, reach)
	}
	evidence := []string{noPodLine(sent, "request")}
	fix := "look beyond the rollout: the target's own errors, a proxy in front, or the network; the failures list has each error"
	if len(left) > 0 {
		text := leftRulesText(left, x.r.StartedAt)
		if anyLeftByMisses(left) {
			text += ": where a pod is picked at random or in turn, the chance it was still there is below one in a million"
		}
		evidence = append(evidence, text)
		fix = noPodsFailure(g.fails) + " comes from the host whose rules the SYN crossed (a node port's node, or the probing host): kube-proxy's rules met mid-update; probe from that host as root (rollprobe run on it reads its conntrack: the kernel's record, no guess); otherwise " + fix
	}
	title := "failures with no pod lifecycle event around them"
	// Failures the attribution put on a pod (terminating or just ready:
	// the only pods it names) came while pods changed, in a way no rule
	// here explains (a grpc-go status on a lost connection, say): said as
	// such, never as "no pod was terminating", which their own contexts
	// would contradict.
	var onPods, offPods group
	for _, f := range sent.fails {
		if f.LikelyPod != "" {
			onPods.fails = append(onPods.fails, f)
		} else {
			offPods.fails = append(offPods.fails, f)
		}
	}
	if len(onPods.fails) > 0 && len(unsent.fails) < len(g.fails) {
		title = "failures no finding explains"
		evidence[0] = fmt.Sprintf("%s failed (%s) %s on pods terminating or just ready then (each failure's context says which, and how), in a way no other finding here explains",
			nOf(len(onPods.fails), "request"), onPods.classes(), onPods.span(x.r.StartedAt))
		if len(offPods.fails) > 0 {
			evidence = slices.Insert(evidence, 1, noPodLine(&offPods, "more request"))
		}
		fix = "read each failure's error and context: the pod it names was changing then; " + fix
	}
	dns := len(unsent.fails)
	// A dns failure sent nothing, so no pod's lifecycle can explain it,
	// whether pods were changing then or not: said as such, not as
	// "no pod was terminating".
	dnsFix := "for dns: look at name resolution from the probing host (the resolver's load and reachability: CoreDNS in a cluster, " +
		"the name itself) and at the probing host's own load (a lookup that finishes late leaves no time to connect); no preStop sleep changes these"
	switch {
	case dns == len(g.fails):
		title = "names did not resolve in time: no pod received these requests"
		evidence = []string{fmt.Sprintf("%s failed (dns %d) %s before anything was sent: the name did not resolve, or resolved with no time left to connect; "+
			"no pod received them, whatever the pods were doing", nOf(dns, "request"), dns, g.span(x.r.StartedAt))}
		fix = dnsFix
	case dns > 0:
		evidence = append(evidence, fmt.Sprintf("%d more (dns %d) %s sent nothing: the name did not resolve, or resolved with no time left to connect; "+
			"no pod received them, whatever the pods were doing", dns, dns, unsent.span(x.r.StartedAt)))
		fix += "; " + dnsFix
	}
	return report.Finding{
		Title:    title,
		Evidence: evidence,
		Fix:      fix,
	}, true
}

// noPodsFailure names the kinds of connection failure among fails that a
// host's own rules can make, as the unexplained finding's fix speaks of
// them: a refusal (the host's reset) or a connect timeout (its drop).
func noPodsFailure(fails []report.Failure) string {
	refused := slices.ContainsFunc(fails, func(f report.Failure) bool { return f.Class == report.ClassRefused })
	timedOut := slices.ContainsFunc(fails, func(f report.Failure) bool { return f.Class == report.ClassConnectTimeout })
	switch {
	case timedOut && !refused:
		return "a connect timeout no pod made (a SYN dropped)"
	case timedOut:
		return "a refusal or connect timeout no pod made"
	default:
		return "a refusal no pod made"
	}
}
