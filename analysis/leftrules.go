package analysis

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// leftTheRulesChance bounds the chance that a pod the run's own fresh
// connections all missed was still among those the proxy's rules chose
// from (see attributor.leftTheRules): one in a million.
const leftTheRulesChance = 1e-6

// choices are the proxy's choices the run's own traffic shows: with a
// connection of its own for every request (--conn new), each response's
// backend header names the endpoint kube-proxy's rules picked for that
// connection's SYN. nil when the run's responses do not show them: kept-
// alive connections (a response says where its connection went, once),
// or in-cluster probers (their responses, merged into the series, passed
// other nodes' rules).
type choices struct {
	// clock places the series' seconds on the failures' and timeline's
	// wall clock (report.WallClock).
	clock report.WallClock
	// series is each path's, by name ("" for a run of one path).
	series map[string][]report.SeriesRow
	// failed is each path's own prober's failures, in the order they
	// began.
	failed map[string][]*report.Failure
	// lastMaybe memoizes attributor.lastMaybeOf: what it reads (the pods,
	// the series, the entry) is the same for every view the attribution
	// takes; only the receive tolerance differs, which it does not read.
	lastMaybe map[maybeKey]int64
	// timeline is the run's, for the readiness of the pods left.
	timeline []report.Event
}

func choicesOf(r *report.Report) *choices {
	if r.Config.Conn != "new" || len(r.Probers) > 0 {
		return nil
	}
	c := &choices{clock: r.WallClock(), series: map[string][]report.SeriesRow{}, failed: map[string][]*report.Failure{},
		lastMaybe: map[maybeKey]int64{}, timeline: r.Timeline}
	if len(r.Paths) == 0 {
		c.series[""] = r.Series
	}
	for _, p := range r.Paths {
		c.series[p.Name] = p.Series
	}
	for i := range r.Failures {
		f := &r.Failures[i]
		c.failed[f.Path] = append(c.failed[f.Path], f)
	}
	for _, fails := range c.failed {
		slices.SortStableFunc(fails, func(f, g *report.Failure) int { return beganAt(f).Compare(beganAt(g)) })
	}
	return c
}

// second is the whole second of the run (a series row's) t falls in.
func (ch *choices) second(t time.Time) int64 { return ch.clock.SecondOf(t) }

// maybeKey is lastMaybeOf's question: pod, path, and how many of the
// path's failures (in the order they began).
type maybeKey struct {
	pod  *Pod
	path string
	n    int
}

// leftRules is a terminating pod a failure's SYN can no longer have
// reached: the misses fresh connections on its path went to other pods
// from the second after from (seconds from the run's start) until the
// second the failure began.
//
// Or, where signalAt is set, a terminating pod that was still listening
// when f's SYN reached it (stillListening): not yet told to stop until
// signalAt at the earliest, so a refusal is not its own.
type leftRules struct {
	pod      *Pod
	misses   uint64
	from     int64
	signalAt time.Time
}

// leftTheRules reports whether the run's own traffic shows that p, a
// terminating pod, had left the endpoints kube-proxy's rules chose from
// (on f's way: the probing host's, or the entry node's) before f's SYN
// was sent, so that f (a refusal or an unanswered connect, both decided
// where the rules sent the SYN) cannot be p's.
//
// The evidence: p answered on f's path in second L (so it was in the
// rules then), and in the whole seconds after L and before f's, with no
// failure on the path that might have been p's (lastMaybeOf), the path's fresh
// connections were answered by other pods, K of them. Were p still in the
// rules when f's SYN came, it would have been throughout (a deleted pod
// is never put back while a ready endpoint remains, and one must: another
// pod that can have received f, ready since before the seconds counted,
// never unready since and not deleted by f), and the rules pick each
// connection's endpoint at random (nftables' numgen, iptables'
// statistic) or in turn (IPVS) among at most N: the chance that all K
// missed it is at most (1-1/N)^K. Below one in a million, p is out. N
// counts every pod f can have reached in the run's timeline, and every
// other backend name the responses gave.
//
// A CI run met the case this settles: a DaemonSet under a Local policy,
// the entry node's old pod terminating for seconds beside its ready
// replacement, which answered every fresh connection for 5 s after the
// old pod's last; then one refusal that the node's capture showed was
// the node's own stack's reset (kube-proxy's rules mid-update), which the
// timeline alone had blamed on the old pod, "for certain".
func (a attributor) leftTheRules(p *Pod, f *report.Failure, c prober.Class) (leftRules, bool) {
	ch := a.choices
	if ch == nil || f.Prober != "" || f.ViaEdge || a.proxiedOn(f) || (c != prober.Refused && c != prober.ConnectTimeout) ||
		p.DeletedAt == nil || a.pods.Shared(p) {
		return leftRules{}, false
	}
	rows, ok := ch.series[f.Path]
	if !ok {
		return leftRules{}, false
	}
	began := beganAt(f)
	fs := ch.second(began)
	last := int64(math.MinInt64)
	for _, row := range rows {
		if row.Backends[p.PodName] > 0 {
			last = row.T
		}
	}
	if last == math.MinInt64 || last >= fs {
		return leftRules{}, false // never seen in the rules, or seen there after f
	}
	fails := ch.failed[f.Path]
	earlier := sort.Search(len(fails), func(i int) bool { return !beganAt(fails[i]).Before(began) })
	from := max(last, a.lastMaybeOf(p, f.Path, earlier))
	reach := a.reachable(a.pods.All(), f)
	counted := ch.clock.SecondAt(from + 1)
	if !slices.ContainsFunc(reach, func(q *Pod) bool {
		return q != p && q.ReadyAt != nil && q.ReadyAt.Before(counted) &&
			(q.DeletedAt == nil || q.DeletedAt.After(began)) && (q.GoneAt == nil || q.GoneAt.After(began)) &&
			!ch.unreadyBetween(q, counted, began)
	}) {
		return leftRules{}, false
	}
	known := map[string]bool{}
	for _, q := range a.pods.All() {
		known[q.PodName] = true
	}
	var misses uint64
	others := map[string]bool{}
	for _, row := range rows {
		if row.T <= from || row.T >= fs {
			continue
		}
		for b, n := range row.Backends {
			if b == p.PodName || b == prober.OtherBackends {
				continue
			}
			misses += n
			if !known[b] {
				others[b] = true
			}
		}
	}
	n := float64(max(2, len(reach)+len(others)))
	if misses == 0 || math.Pow(1-1/n, float64(misses)) > leftTheRulesChance {
		return leftRules{}, false
	}
	return leftRules{pod: p, misses: misses, from: from}, true
}

// lastMaybeOf is the second of the last of the first n failures on path
// (in the order they began) that may have been p's (math.MinInt64 when
// none may): leftTheRules counts the misses after it. A failure was not
// p's when its response named another backend, when conntrack recorded
// its connection going to another pod, or when p had by then left the
// rules itself (leftTheRules on it, which counts from the failure before
// it on the path that may have been p's, and so on back): so a second
// refusal that the host's rules made, a moment after the first, is not
// put on p either.
func (a attributor) lastMaybeOf(p *Pod, path string, n int) int64 {
	if n == 0 {
		return math.MinInt64
	}
	ch := a.choices
	key := maybeKey{p, path, n}
	if v, ok := ch.lastMaybe[key]; ok {
		return v
	}
	g := ch.failed[path][n-1]
	v := ch.second(beganAt(g))
	if !a.mayBeOf(p, g) {
		v = a.lastMaybeOf(p, path, n-1)
	}
	ch.lastMaybe[key] = v
	return v
}

// mayBeOf: nothing shows that g, an earlier failure, was not p's.
func (a attributor) mayBeOf(p *Pod, g *report.Failure) bool {
	at := beganAt(g)
	if g.Backend != "" {
		return g.Backend == p.PodName
	}
	if addr, err := netip.ParseAddrPort(g.PodAddr); err == nil {
		if q := a.pods.ByIP(addr.Addr().String(), at); q != nil {
			return q == p
		}
	}
	if a.rejectedByRules(g) {
		return false // a host's own rules stopped its SYN
	}
	c := class(g)
	if c != prober.Refused && c != prober.ConnectTimeout {
		return true
	}
	if _, listening := a.stillListening(p, g, c); listening {
		return false
	}
	_, left := a.leftTheRules(p, g, c)
	return !left
}

// unreadyBetween: the timeline has q (any pod of its name) not ready, or
// its endpoint not ready, at some time in [from, to]: kube-proxy may have
// fallen back to terminating endpoints then.
func (ch *choices) unreadyBetween(q *Pod, from, to time.Time) bool {
	return slices.ContainsFunc(ch.timeline, func(e report.Event) bool {
		return e.Pod == q.PodName && !e.At.Before(from) && !e.At.After(to) &&
			(e.Kind == report.PodUnready || e.Kind == report.PodGone || (e.Kind.IsEndpoint() && !e.Ready))
	})
}

// keepInTheRules splits the terminating candidates of f into those its SYN
// can have reached and those that had left the rules (leftTheRules) or,
// for a refusal, were still listening (stillListening).
func (a attributor) keepInTheRules(term []*Pod, f *report.Failure, c prober.Class) (kept []*Pod, left []leftRules) {
	for _, p := range term {
		if signal, ok := a.stillListening(p, f, c); ok {
			left = append(left, leftRules{pod: p, signalAt: signal})
			continue
		}
		if l, ok := a.leftTheRules(p, f, c); ok {
			left = append(left, l)
			continue
		}
		kept = append(kept, p)
	}
	return kept, left
}

// leftRulesText says which pods had left the rules, and which were still
// listening, with the evidence (times from start, the run's).
func leftRulesText(left []leftRules, start time.Time) string {
	var names, evidence, listening, signals []string
	for _, l := range left {
		if !l.signalAt.IsZero() {
			listening = append(listening, l.pod.Name)
			signals = append(signals, fmt.Sprintf("%s's preStop sleep of %s from its deletion request: not told to stop before %+.2fs",
				l.pod.Name, l.pod.PreStopSleep, l.signalAt.Sub(start).Seconds()))
			continue
		}
		names = append(names, l.pod.Name)
		evidence = append(evidence, fmt.Sprintf("the %d fresh connections on this path answered from +%ds on went to pods other than %s", l.misses, l.from+1, l.pod.Name))
	}
	verb := func(names []string) string {
		if len(names) > 1 {
			return "were"
		}
		return "was"
	}
	var parts []string
	if len(names) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s terminating but had left the proxy's rules before it (%s)", strings.Join(names, ", "), verb(names), strings.Join(evidence, "; ")))
	}
	if len(listening) > 0 {
		whose := "its"
		if len(listening) > 1 {
			whose = "their"
		}
		parts = append(parts, fmt.Sprintf("%s %s terminating but still listening then (%s), so a refusal was not %s own", strings.Join(listening, ", "), verb(listening), strings.Join(signals, "; "), whose))
	}
	return strings.Join(parts, "; ")
}

// anyLeftByMisses: some of left had left the rules by the misses the
// run's traffic counted (not by a preStop sleep).
func anyLeftByMisses(left []leftRules) bool {
	return slices.ContainsFunc(left, func(l leftRules) bool { return l.signalAt.IsZero() })
}

// stillListening reports whether p, a terminating pod, was certainly
// still listening when f, a refusal, was decided, and from when it can
// have been told to stop: its containers' preStop sleep (Pod.PreStopSleep)
// had not ended, counted from the earliest its deletion can have been
// requested (deletionNotBefore), so the kubelet had sent no signal yet;
// it had turned ready before its deletion with a readiness probe that
// connects where the Service sends traffic (it listened), no container
// can have exited by the time f was decided (exitedBy: the kubelet's time
// of the exit), and its turning unready was not received by then, give or
// take the tolerance (nothing else closed it).
// Without a lower bound on the request there is none on the signal.
func (a attributor) stillListening(p *Pod, f *report.Failure, c prober.Class) (time.Time, bool) {
	if c != prober.Refused || p.PreStopSleep <= 0 || p.DeletedAt == nil || p.ReadyAt == nil || !p.ReadinessConnects ||
		p.ReadyAt.After(*p.DeletedAt) || (p.UnreadyAt != nil && !p.UnreadyAt.Before(*p.ReadyAt)) {
		return time.Time{}, false
	}
	earliest, ok := a.deletionNotBefore(p)
	if !ok {
		return time.Time{}, false
	}
	signal := earliest.Add(p.PreStopSleep)
	by := causeBy(f, c)
	if !by.Add(a.clock).Before(signal) {
		return time.Time{}, false
	}
	if a.exitedBy(p, by) || (p.UnreadyAfterDeletion != nil && !p.UnreadyAfterDeletion.After(by.Add(a.tol+a.clock))) {
		return time.Time{}, false
	}
	return signal, true
}
