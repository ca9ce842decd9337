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
// the Service targets, and those of them that exited before another of
// their pod's containers (a proxy in spec.containers in front of an app
// whose own hook or drain kept it running).
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
}

// earlyStop is one serving container that exited before the rest of its
// pod.
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
			out.addEarly(report.ContainerNamed(p.ExitContainer, false), later, lead)
		}
	}
	slices.Sort(out.serving)
	return out
}

// servingExitLead reports whether p's first exit was a serving container's
// (not a native sidecar's, which the kubelet stops after the others unless
// it crashed), at or after the pod's deletion was requested (an earlier
// one is a crash, not the pod going away), that ended a second or more
// before another container's, by the kubelet's times: floored to their
// seconds, a difference of one already orders them. lead is how long
// before the last of those others it ended; later names them.
func (p *Pod) servingExitLead() (lead time.Duration, later []string, ok bool) {
	if !p.ExitServicePort || p.ExitSidecar || p.ExitServer == nil || p.ExitContainer == "" ||
		p.DeletedServer == nil || p.ExitServer.Before(*p.DeletedServer) {
		return 0, nil, false
	}
	for _, e := range p.exits {
		if e.Container == p.ExitContainer || e.Server == nil {
			continue
		}
		d := e.Server.Sub(*p.ExitServer)
		if d < time.Second {
			continue
		}
		lead = max(lead, d)
		if named := report.ContainerNamed(e.Container, e.Sidecar); !slices.Contains(later, named) {
			later = append(later, named)
		}
	}
	return lead, later, lead > 0
}

func (s *servingStops) addEarly(container string, later []string, lead time.Duration) {
	i := slices.IndexFunc(s.early, func(e earlyStop) bool { return e.container == container })
	if i < 0 {
		s.early = append(s.early, earlyStop{container: container, leastLead: lead, mostLead: lead})
		i = len(s.early) - 1
	}
	e := &s.early[i]
	e.pods++
	e.leastLead, e.mostLead = min(e.leastLead, lead), max(e.mostLead, lead)
	for _, l := range later {
		if !slices.Contains(e.later, l) {
			e.later = append(e.later, l)
		}
	}
}

// evidence says, for each early serving container, that it stopped first
// and why another container's hook did not hold it.
func (s servingStops) evidence() []string {
	var out []string
	for _, e := range s.early {
		lead := fmt.Sprintf("%.0fs", e.mostLead.Seconds())
		if e.leastLead != e.mostLead {
			lead = fmt.Sprintf("%.0f-%.0fs", e.leastLead.Seconds(), e.mostLead.Seconds())
		}
		out = append(out, fmt.Sprintf("%s, which has the port the Service sends traffic to, exited first in %s, %s before %s (the kubelet's times, to the second): "+
			"the kubelet runs each container's preStop hook and then stops that container on its own, so a container that stays up longer does not keep it serving",
			e.container, nOf(e.pods, "pod"), lead, joinAnd(e.later)))
	}
	return out
}

// holder is what the propagation finding's fix tells to wait: the serving
// containers by name where the exits named them, else "the container".
func (s servingStops) holder() string {
	if len(s.serving) == 0 {
		return "the container"
	}
	return joinAnd(s.serving)
}

// earlyFix is what the fix adds where a serving container stopped before
// the rest of its pod: the preStop hook is needed on it, not only on the
// app; or, where the server has native sidecars (on by default from 1.29),
// it can be one, which the kubelet stops after the app's containers.
func (s servingStops) earlyFix(v advice.Version) string {
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
	return out + fmt.Sprintf(" (or run it as a native sidecar, an init container with restartPolicy: Always, which the kubelet stops only after the app's containers have exited%s)", since)
}

// joinAnd joins names as prose: "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
