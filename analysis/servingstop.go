package analysis

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/report"
)

// servingStops is what the container exits of a finding's pods say about
// which container to hold with a preStop hook: the containers with a port
// the Service targets, those of them that exited before another of their
// pod's containers (a proxy in spec.containers in front of an app whose
// own hook or drain kept it running), and the containers without the port
// that exited before one with it (an app gone behind its proxy).
type servingStops struct {
	// serving: the containers with a port the Service targets, as
	// report.ContainerNamed writes them, sorted; none when no exit of the
	// pods says (a report older than the field, a target port given as a
	// number no container declares, no exit received in the run).
	serving []string
	// early: the serving containers that exited first in their pod, at
	// least a second before another of its containers by the kubelet's
	// times, with the pods and how much later the others ended.
	early []earlyStop
	// behind: the containers without the Service's port that exited first
	// in their pod, a second or more before a serving one, where the
	// failures show the serving one answering for them
	// (answeredFromInside): an app gone behind a proxy that still took
	// connections.
	behind []earlyStop
	// answeredFor counts those failures, over every behind container.
	answeredFor int
	// unsure: in some pod a container without the Service's port exited a
	// second or more before one with it, and nothing showed which stop
	// the failures met: the fix then names no container.
	unsure bool
}

// earlyStop is one container that exited before others of its pod: a
// serving one (early), or one behind a serving one (behind).
type earlyStop struct {
	container string   // as report.ContainerNamed writes it
	later     []string // the containers that exited after it, the same way
	pods      int
	// leastLead, mostLead: by how long the last of the others exited
	// after it, in the kubelet's whole seconds.
	leastLead, mostLead time.Duration
}

// servingStopsOf reads the exits of the pods named.
func servingStopsOf(pods *Pods, names []string) servingStops {
	var out servingStops
	for _, name := range names {
		p := pods.Get(name)
		if p == nil {
			continue
		}
		for _, e := range p.exits {
			if named := report.ContainerNamed(e.Container, e.Sidecar); e.ServicePort && e.Container != "" && !slices.Contains(out.serving, named) {
				out.serving = append(out.serving, named)
			}
		}
		if lead, later, ok := p.servingExitLead(); ok {
			out.addStop(&out.early, report.ContainerNamed(p.ExitContainer, false), later, lead)
		}
		if _, _, _, ok := p.behindExitLead(); ok {
			out.unsure = true
		}
	}
	slices.Sort(out.serving)
	return out
}

// servingStopsOfGroup is servingStopsOf for a finding's failures: it adds
// the containers behind a serving one (behind) where the group's failures
// on their pods show the serving container answering for them.
func servingStopsOfGroup(g *group, x facts) servingStops {
	names := g.podList()
	s := servingStopsOf(x.pods, names)
	shown := answeredFromInside(g.fails, x.r)
	for _, name := range names {
		p := x.pods.Get(name)
		if p == nil || shown[name] == 0 {
			continue
		}
		if first, lead, later, ok := p.behindExitLead(); ok {
			s.addStop(&s.behind, first, later, lead)
			s.answeredFor += shown[name]
		}
	}
	return s
}

// answeredFromInside counts, by pod, the failures that something in the
// pod answered for the app: a 5xx without the app's backend header
// (proxy_5xx), put on the pod for certain, on a path that reaches the
// Service with no proxy before the pods (an entry by cluster IP, node port
// or load balancer, none of its requests in an edge's log, not sent to an
// edge's address).
func answeredFromInside(fails []report.Failure, r *report.Report) map[string]int {
	out := map[string]int{}
	for _, f := range fails {
		if f.Class == report.ClassProxy5xx && f.LikelyPod != "" && f.Confidence >= 1 && noProxyBefore(&f, r) {
			out[f.LikelyPod]++
		}
	}
	return out
}

// noProxyBefore: f's path reaches the Service with no proxy before the
// pods (an entry by cluster IP, node port or load balancer, none of its
// requests in an edge's log) and f was not sent to an edge's address.
func noProxyBefore(f *report.Failure, r *report.Report) bool {
	i := slices.Index(pathNames(r), f.Path)
	return !f.ViaEdge && i >= 0 && pathEntry(r, i) != nil && !edgeLogHolds(r, f.Path) && !edgeLogUnsplit(r)
}

// keptAliveToThePod: f, a 5xx answered at the pod (a proxy of its own in
// front of the app) on a connection kept alive from the prober to the
// pod: endpoint changes never touch an established connection, so when it
// came after the deletion measures that connection's life, not the
// endpoints' propagation.
func keptAliveToThePod(f *report.Failure, r *report.Report) bool {
	return f.Class == report.ClassProxy5xx && !f.Fresh && noProxyBefore(f, r)
}

// behindExitLead reports whether p's first exit at its deletion was that
// of a container without the Service's port that ended a second or more
// before one with it (firstExitLead); first names it.
func (p *Pod) behindExitLead() (first string, lead time.Duration, later []string, ok bool) {
	lead, later, ok = p.firstExitLead(false, func(e report.Event) bool { return e.ServicePort })
	return report.ContainerNamed(p.ExitContainer, false), lead, later, ok
}

// servingExitLead reports whether p's first exit at its deletion was a
// serving container's that ended a second or more before another
// container's (firstExitLead).
func (p *Pod) servingExitLead() (lead time.Duration, later []string, ok bool) {
	return p.firstExitLead(true, func(e report.Event) bool { return e.Container != p.ExitContainer })
}

// firstExitLead reports whether p's first exit was of a container with
// the Service's port (serving) or without, not a native sidecar's (the
// kubelet stops one after the others unless it crashed), at or after the
// pod's deletion was requested (an earlier one is a crash, not the pod
// going away), and ended a second or more before an exit others selects,
// by the kubelet's times: floored to their seconds, a difference of one
// already orders them. lead is how long before the last of those it
// ended; later names them.
func (p *Pod) firstExitLead(serving bool, others func(report.Event) bool) (lead time.Duration, later []string, ok bool) {
	if p.ExitServicePort != serving || p.ExitSidecar || p.ExitServer == nil || p.ExitContainer == "" ||
		p.DeletedServer == nil || p.ExitServer.Before(*p.DeletedServer) {
		return 0, nil, false
	}
	for _, e := range p.exits {
		if !others(e) || e.Server == nil {
			continue
		}
		if d := e.Server.Sub(*p.ExitServer); d >= time.Second {
			lead = max(lead, d)
			if named := report.ContainerNamed(e.Container, e.Sidecar); !slices.Contains(later, named) {
				later = append(later, named)
			}
		}
	}
	return lead, later, lead > 0
}

// addStop counts one pod's stop of container in stops (early or behind).
func (s *servingStops) addStop(stops *[]earlyStop, container string, later []string, lead time.Duration) {
	i := slices.IndexFunc(*stops, func(e earlyStop) bool { return e.container == container })
	if i < 0 {
		*stops = append(*stops, earlyStop{container: container, leastLead: lead, mostLead: lead})
		i = len(*stops) - 1
	}
	e := &(*stops)[i]
	e.pods++
	e.leastLead, e.mostLead = min(e.leastLead, lead), max(e.mostLead, lead)
	for _, l := range later {
		if !slices.Contains(e.later, l) {
			e.later = append(e.later, l)
		}
	}
}

// lead is e's lead in prose: "5s", or "4-5s" over several pods.
func (e earlyStop) lead() string {
	if e.leastLead != e.mostLead {
		return fmt.Sprintf("%.0f-%.0fs", e.leastLead.Seconds(), e.mostLead.Seconds())
	}
	return fmt.Sprintf("%.0fs", e.mostLead.Seconds())
}

// evidence says, for each early serving container, that it stopped first
// and why another container's hook did not hold it; for each container
// behind a serving one, that it went first and the serving one answered
// for it.
func (s servingStops) evidence() []string {
	var out []string
	for _, e := range s.early {
		out = append(out, fmt.Sprintf("%s, which has the port the Service sends traffic to, exited first in %s, %s before %s (the kubelet's times, to the second): "+
			"the kubelet runs each container's preStop hook and then stops that container on its own, so a container that stays up longer does not keep it serving",
			e.container, nOf(e.pods, "pod"), e.lead(), joinAnd(e.later)))
	}
	were := "were"
	if s.answeredFor == 1 {
		were = "was"
	}
	for _, e := range s.behind {
		out = append(out, fmt.Sprintf("%s exited first in %s, %s before %s, which has the port the Service sends traffic to (the kubelet's times, to the second); "+
			"%s on those pods %s 5xx without the backend header on a path with no proxy before the pods: %s answered them for the app behind it, gone",
			e.container, nOf(e.pods, "pod"), e.lead(), joinAnd(e.later), nOf(s.answeredFor, "failure"), were, joinAnd(e.later)))
	}
	return out
}

// named reports whether holder names containers (not "the container").
func (s servingStops) named() bool { return len(s.behind) > 0 || (len(s.serving) > 0 && !s.unsure) }

// holder is what the propagation finding's fix tells to wait: the
// containers behind a serving one that went first, where the failures
// showed it (they must outlive it); else the serving containers by name
// where the exits named them and none behind them went first unshown;
// else "the container".
func (s servingStops) holder() string {
	switch {
	case len(s.behind) > 0:
		var names []string
		for _, e := range s.behind {
			names = append(names, e.container)
		}
		return joinAnd(names)
	case len(s.serving) == 0 || s.unsure:
		return "the container"
	}
	return joinAnd(s.serving)
}

// earlyFix is what the fix adds where a serving container stopped before
// the rest of its pod: the preStop hook is needed on it, not only on the
// app; where it is a proxy in front of the app and the server has native
// sidecars (on by default from 1.29), it can be one, which the kubelet
// stops after the app's containers. Where a container behind a serving one
// went first: it must outlive the serving one.
func (s servingStops) earlyFix(v advice.Version) string {
	if len(s.behind) > 0 {
		var out []string
		for _, e := range s.behind {
			out = append(out, fmt.Sprintf("%s is behind %s, which answered for it once it had exited: it must stop after it, with a preStop hook at least as long as that of %s",
				e.container, joinAnd(e.later), joinAnd(e.later)))
		}
		return "; " + strings.Join(out, "; ")
	}
	if len(s.early) == 0 {
		return ""
	}
	var names []string
	for _, e := range s.early {
		names = append(names, e.container)
	}
	out := fmt.Sprintf("; the hook must be on %s itself: another container's hook delays only its own stop", joinAnd(names))
	if v.Before(1, 29) {
		return out
	}
	since := ""
	if !v.Known() {
		since = "; Kubernetes 1.29+"
	}
	return out + fmt.Sprintf(" (where it is a proxy in front of the app, running it as a native sidecar, an init container with restartPolicy: Always, does the same: the kubelet stops a native sidecar only after the app's containers have exited%s)", since)
}

// joinAnd joins names as prose: "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
