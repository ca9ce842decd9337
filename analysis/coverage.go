package analysis

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// ShutdownNotExercised: pods went away while they served the Service, but
// none of the run's traffic on a path reached them around it, so the
// run's verdict says nothing of how they went away. A gate that passes
// because its probe never met a pod is the gate lying by omission; the
// run measures this (which pods its responses named, second by second),
// so it says it.
const ShutdownNotExercised = "shutdown-not-exercised"

const (
	// exercisedBefore is how long before a pod's deletion the path's
	// traffic must have reached it (a response naming it, or a failure
	// that can have been its): the pod then took the path's traffic as
	// the rollout came to it.
	exercisedBefore = 5 * time.Second
	// exercisedLeast is the least time the pod must have served, and the
	// run have probed, before the deletion for the question to be asked.
	exercisedLeast = 2 * time.Second
)

// pathCoverage is one path's pods deleted while serving, and those of them
// its traffic did not meet.
type pathCoverage struct {
	path    string // "" for a run of one path
	deleted int    // pods whose deletion was judged
	missed  []*Pod // those of them the path's traffic did not meet
	// judgedFrom holds, for a missed pod judged on the seconds since it
	// was ready and probed (no response named any pod in its window), the
	// first of them.
	judgedFrom map[*Pod]time.Time
	// source is what named the pods: "backend header" or "conntrack".
	source string
}

// shutdownCoverage judges, for every path whose responses say which pod
// answered (the backend header; conntrack for a run of one path), each
// pod whose deletion was requested while it had been ready for
// exercisedLeast and still in the Service's endpoints: exercised when, in
// the seconds from exercisedBefore before the deletion to the second of
// it, a response on the path named it, or when any failure on the path
// was put on it or had it among its candidates. A window in which no
// response named any pod is not judged (the evidence is missing, not the
// traffic), unless the path sent requests in it (every one failed: under a
// Local policy, the entry node's own pod gone first) and, in the seconds
// since the pod was ready and probed, responses named pods and never it:
// then its traffic met the pod at no time, so not as it went either. Had
// one named it, whether the path met it as it went stays unknown. Argo
// Rollouts are not judged: their steps move traffic off pods before they
// go (weights, the active Service's switch) by design. failures are the
// run's, attributed. A pod is missed only when no path met it and none
// left it unknown: the run's traffic as a whole did not reach it; each
// path that judged it says so.
func shutdownCoverage(r *report.Report, failures []report.Failure, pods *Pods) []pathCoverage {
	if r.Rollout != nil && r.Rollout.Kind == "Rollout" {
		return nil
	}
	switches := activeSwitches(r)
	type path struct {
		name   string
		series []report.SeriesRow
	}
	var paths []path
	if len(r.Paths) == 0 {
		paths = []path{{"", r.Series}}
	}
	for _, p := range r.Paths {
		paths = append(paths, path{p.Name, p.Series})
	}
	hit := map[string]map[*Pod]bool{} // by path: pods a failure can have been
	for i := range failures {
		f := &failures[i]
		if hit[f.Path] == nil {
			hit[f.Path] = map[*Pod]bool{}
		}
		for _, name := range append([]string{f.LikelyPod}, f.Candidates...) {
			if p := pods.Get(name); p != nil {
				hit[f.Path][p] = true
			}
		}
	}
	byConntrack := conntrackBySecond(r, pods)
	clock := r.WallClock()
	var out []pathCoverage
	// notMissed: pods some path met, or sent requests to in their window
	// without any response saying which pod answered (unknown there). The
	// finding is about the run's traffic: a pod one path missed and
	// another met was exercised (probing every node's NodePort, a path
	// each, is this finding's own fix under a Local policy).
	notMissed := map[*Pod]bool{}
	for _, pa := range paths {
		c := pathCoverage{path: pa.name, judgedFrom: map[*Pod]time.Time{}}
		// sent(from, to) is how many requests the path began in the same
		// seconds as named's.
		sent := func(from, to time.Time) uint64 {
			lo, hi := clock.SecondFrom(from), clock.SecondOf(to)
			var n uint64
			for _, row := range pa.series {
				if row.T >= lo && row.T <= hi {
					n += row.Sent
				}
			}
			return n
		}
		// named(from, to) is how many responses in the whole seconds from
		// from to the one holding to named any pod, and each pod's share
		// of them.
		var named func(from, to time.Time) (uint64, map[*Pod]uint64)
		switch {
		case r.Config.BackendHeader != "":
			c.source = "backend header"
			named = func(from, to time.Time) (uint64, map[*Pod]uint64) {
				lo, hi := clock.SecondFrom(from), clock.SecondOf(to) // the run's seconds, whole from from
				var all uint64
				each := map[*Pod]uint64{}
				for _, row := range pa.series {
					if row.T < lo || row.T > hi {
						continue
					}
					for name, n := range row.Backends {
						all += n
						if p := pods.Served(name, clock.SecondAt(row.T)); p != nil {
							each[p] += n
						}
					}
				}
				return all, each
			}
		case len(paths) == 1 && byConntrack != nil:
			c.source = "conntrack"
			named = func(from, to time.Time) (uint64, map[*Pod]uint64) {
				lo, hi := clock.SecondFrom(from), clock.SecondOf(to) // the run's seconds, whole from from
				var all uint64
				each := map[*Pod]uint64{}
				for t := lo; t <= hi; t++ {
					all += byConntrack[t].all
					for p, n := range byConntrack[t].each {
						each[p] += n
					}
				}
				return all, each
			}
		default:
			continue // nothing says which pod answered
		}
		for _, p := range pods.All() {
			if p.DeletedAt == nil || p.ReadyAt == nil {
				continue
			}
			del := *p.DeletedAt
			from := maxTime(del.Add(-exercisedBefore), r.StartedAt, *p.ReadyAt)
			if del.Sub(from) < exercisedLeast {
				continue // not long enough ready, or probed, before it went
			}
			if p.UnreadyAt != nil && p.UnreadyAt.After(*p.ReadyAt) {
				continue // not ready when it went: no traffic was its
			}
			if p.EndpointGoneAt != nil && p.EndpointGoneAt.Before(del) {
				continue // out of the Service before it went
			}
			if switchedAway(switches, p) != nil {
				continue // a blue/green's switch took its traffic away
			}
			all, each := named(from, del)
			widened := false
			if all == 0 && sent(from, del) > 0 {
				since := maxTime(r.StartedAt, *p.ReadyAt)
				if sinceAll, sinceEach := named(since, del); sinceAll > 0 && sinceEach[p] == 0 {
					all, each, widened = sinceAll, sinceEach, true
					from = since
				}
			}
			if all == 0 {
				// No response named any pod then: unknown, if the path
				// sent any request then (else it met no pod at all).
				notMissed[p] = notMissed[p] || sent(from, del) > 0
				continue
			}
			c.deleted++
			if each[p] == 0 && !hit[pa.name][p] {
				c.missed = append(c.missed, p)
				if widened {
					c.judgedFrom[p] = from
				}
			} else {
				notMissed[p] = true
			}
		}
		if c.deleted > 0 {
			out = append(out, c)
		}
	}
	for i := range out {
		out[i].missed = slices.DeleteFunc(out[i].missed, func(p *Pod) bool { return notMissed[p] })
	}
	return out
}

// conntrackSecond is one second's responses conntrack mapped: all of them,
// and each pod's.
type conntrackSecond struct {
	all  uint64
	each map[*Pod]uint64
}

// conntrackBySecond is Conntrack.Responses by second, each address put on
// the pod that bore it in the middle of that second; nil when conntrack
// mapped none.
func conntrackBySecond(r *report.Report, pods *Pods) map[int64]conntrackSecond {
	if r.Conntrack == nil || len(r.Conntrack.Responses) == 0 {
		return nil
	}
	clock := r.WallClock()
	out := map[int64]conntrackSecond{}
	for _, n := range r.Conntrack.Responses {
		s := out[n.T]
		if s.each == nil {
			s.each = map[*Pod]uint64{}
		}
		s.all += n.Responses
		if p := podAtAddr(clock, pods, n.Addr, n.T); p != nil {
			s.each[p] += n.Responses
		}
		out[n.T] = s
	}
	return out
}

// podAtAddr is the pod that bore the address addr (ip:port) in second t of
// the run (placed on the timeline's wall clock by clock), at its middle:
// an address passes to a new pod only after the old one is gone; nil for
// an address no pod of the timeline had.
func podAtAddr(clock report.WallClock, pods *Pods, addr string, t int64) *Pod {
	a, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil
	}
	return pods.ByIP(a.Addr().String(), clock.At(time.Duration(t)*time.Second+time.Second/2))
}

func maxTime(t time.Time, more ...time.Time) time.Time {
	for _, u := range more {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// renderShutdownNotExercised names, path by path, the pods whose going
// the run's traffic did not meet, and what keeps traffic off a pod.
func renderShutdownNotExercised(_ *group, x facts) (report.Finding, bool) {
	r := x.r
	covered := shutdownCoverage(r, x.failures, x.pods)
	var evidence []string
	var names []string
	entries := localEntries(r)
	// offEntry: the Local-policy nodes whose paths missed a pod on
	// another node, in the order met, each with those paths.
	var offEntry []string
	offEntryPaths := map[string][]string{}
	for _, c := range covered {
		if len(c.missed) == 0 {
			continue
		}
		var each []string
		for _, p := range c.missed {
			where := ""
			if p.Node != "" {
				where = "on " + p.Node + ", "
				if e := entries[c.path]; e != nil && p.Node != e.Node && !slices.Contains(offEntryPaths[e.Node], c.path) {
					if offEntryPaths[e.Node] == nil {
						offEntry = append(offEntry, e.Node)
					}
					offEntryPaths[e.Node] = append(offEntryPaths[e.Node], c.path)
				}
			}
			judged := ""
			if from, ok := c.judgedFrom[p]; ok {
				judged = fmt.Sprintf("; no response named any pod in the %.0f s before it, so it is judged from %+.2fs, when it was ready and probed: none named it from then on",
					exercisedBefore.Seconds(), from.Sub(r.StartedAt).Seconds())
			}
			each = append(each, fmt.Sprintf("%s (%sdeletion requested at %+.2fs%s)", p.Name, where, p.DeletedAt.Sub(r.StartedAt).Seconds(), judged))
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
		on := ""
		if c.path != "" {
			on = " on path " + c.path
		}
		evidence = append(evidence, fmt.Sprintf("%d of the %d pods deleted while serving got none of the run's traffic%s in the %.0f s before their deletion (no response named them, by the %s, and no failure can have been theirs): %s",
			len(c.missed), c.deleted, on, exercisedBefore.Seconds(), c.source, strings.Join(each, ", ")))
	}
	if len(evidence) == 0 {
		return report.Finding{}, false
	}
	evidence = append(evidence, "so the verdict says nothing of how those pods went away: clients that did reach them (from other addresses, through other nodes) may have had requests dropped there")
	switch {
	case len(offEntry) > 0:
		for _, node := range offEntry {
			who, enters := "the target", "enters"
			switch paths := offEntryPaths[node]; {
			case len(paths) > 1:
				who, enters = "paths "+strings.Join(paths, ", "), "enter"
			case paths[0] != "":
				who = "path " + paths[0]
			}
			evidence = append(evidence, fmt.Sprintf("%s %s %s at a NodePort under externalTrafficPolicy: Local, which sends what enters a node only to that node's own pods", who, enters, node))
		}
	case namesOnePod(r, x.pods):
		evidence = append(evidence, "the target is one pod's own DNS name: no other pod is reached through it")
	default:
		evidence = append(evidence, "what keeps a client's traffic off a pod: session affinity (sessionAffinity: ClientIP sends each client address to one pod), kept-alive connections opened to other pods, or too few requests for the number of pods")
	}
	return report.Finding{
		Title:    "the run's traffic did not reach every pod before it went: those pods' shutdowns were not exercised",
		Evidence: evidence,
		Fix: "probe where clients enter and as many of them do: each node's NodePort under a Local policy (a --target NAME=URL for each), " +
			"several client addresses (--probers N, spread over the nodes), new connections (--conn new or mixed) at a rate that gives every pod requests",
		Pods: names,
	}, true
}

// namesOnePod: a path's target is one pod's own DNS name (see namedPod).
func namesOnePod(r *report.Report, pods *Pods) bool {
	f := report.Failure{}
	if namedPod(r, &f, pods) != "" {
		return true
	}
	for _, p := range r.Paths {
		f.Path = p.Name
		if namedPod(r, &f, pods) != "" {
			return true
		}
	}
	return false
}
