package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// gapSlack is how long after a node gap ends a failure is still counted
// as the gap's: kube-proxy installs the endpoint that ended it only once
// the EndpointSlice change reaches it (1-3 s typically).
const gapSlack = 3 * time.Second

// NodeGaps finds the times an entry node had no serving endpoint of the
// Service, when traffic enters through a node (a NodePort target: each
// path's, localEntries) and the Service's externalTrafficPolicy is Local,
// node by node (sorted), each node's gaps in time order: kube-proxy on
// that node then uses only the node's own endpoints, ready ones first
// and, when none is ready, terminating ones that still serve
// (ProxyTerminatingEndpoints);
// with no serving endpoint on the node it drops what enters, although
// other nodes may have ready pods. nil when the run is not of that kind.
//
// The endpoints (each a pod and its address) are folded from the
// timeline's endpoint events (their serving condition and node); a gap
// opens when the node's last serving endpoint stops serving or goes, and
// closes when one serves again (or at the run's end: Open). As in
// serviceGaps, a pod's endpoint stops serving (and being ready) at its
// unready mark, the kubelet's own time of its Ready condition turning
// false, when the report of it came later (unreadyMarks), until the pod is
// reported Ready again. Failed is left for the analysis to count.
func NodeGaps(r *report.Report) []report.NodeGap {
	var gaps []report.NodeGap
	for _, node := range localNodes(localEntries(r)) {
		gaps = append(gaps, nodeGaps(r, node)...)
	}
	return gaps
}

// nodeGaps are node's gaps (see NodeGaps).
func nodeGaps(r *report.Report, node string) []report.NodeGap {
	type endpoint struct {
		pod, node      string
		serving, ready bool
	}
	eps := map[string]endpoint{} // by endpoint key
	servingOn := func() int {
		n := 0
		for _, ep := range eps {
			if ep.node == node && ep.serving {
				n++
			}
		}
		return n
	}
	readyElsewhere := func(into map[string]bool) {
		for _, ep := range eps {
			if ep.node != node && ep.ready {
				into[ep.pod] = true
			}
		}
	}
	var gaps []report.NodeGap
	var open *report.NodeGap
	var elsewhere map[string]bool
	closeGap := func(end time.Time, pod string, isOpen bool) {
		open.End, open.ServingAgain, open.Open = end, pod, isOpen
		for pod := range elsewhere {
			open.ReadyElsewhere = append(open.ReadyElsewhere, pod)
		}
		sort.Strings(open.ReadyElsewhere)
		gaps = append(gaps, *open)
		open = nil
	}
	// change applies what moved pod's endpoint at t and opens or closes a
	// gap on what it did to the node's serving count.
	change := func(t time.Time, pod string, apply func()) {
		before := servingOn()
		apply()
		after := servingOn()
		switch {
		case open == nil && before > 0 && after == 0:
			open = &report.NodeGap{Node: node, Start: t, StoppedServing: pod}
			elsewhere = map[string]bool{}
			readyElsewhere(elsewhere)
		case open != nil && after > 0:
			closeGap(t, pod, false)
		case open != nil:
			readyElsewhere(elsewhere)
		}
	}
	unready := map[string]*unreadyMark{} // by endpoint key
	marks := unreadyMarks(r)
	for _, e := range r.Timeline {
		for len(marks) > 0 && !marks[0].by.After(e.At) {
			m := marks[0]
			marks = marks[1:]
			change(m.by, m.pod, func() {
				unready[m.endpoint] = &m
				if ep, ok := eps[m.endpoint]; ok {
					ep.serving, ep.ready = false, false
					eps[m.endpoint] = ep
				}
			})
		}
		if e.Kind == report.PodReady && e.Pod != "" {
			// Ready again, by a report after the one marked.
			key := endpointKey(e.Pod, e.IP)
			if m := unready[key]; m != nil && !e.At.Before(m.report) {
				delete(unready, key)
			}
		}
		if !e.Kind.IsEndpoint() || e.Pod == "" {
			continue
		}
		key := endpointKey(e.Pod, e.IP)
		change(e.At, e.Pod, func() {
			if e.Kind == report.EndpointRemoved {
				delete(eps, key)
				return
			}
			marked := unready[key] != nil
			eps[key] = endpoint{pod: e.Pod, node: e.Node, serving: e.Serving && !marked, ready: e.Ready && !marked}
		})
	}
	if open != nil {
		closeGap(r.EndedAt, "", true)
	}
	return gaps
}

// gapOf is the index of the gap of the node f's path entered (entries)
// that f began in (or within gapSlack after), -1 if none. An in-cluster
// prober's failure counts when the prober ran on another node: on the
// nodes' network its SYN comes to the entry node from outside and the
// Local policy holds it there (the lab: every failure of the other node's
// prober in the gap, 265 and 246 in two runs). From the pod network that
// holds only where the network masquerades pod traffic to node addresses
// (the lab's does not, and its baseline refuses such a run); it counts
// as before. One on the entry node itself does not count: kube-proxy
// sends what a node or its pods send to their own node port to the whole
// Service (the lab: 0 failures from it in the same runs).
func gapOf(gaps []report.NodeGap, f *report.Failure, entries map[string]*report.Entry) int {
	e := entries[f.Path]
	if e == nil || (f.Prober != "" && f.Node == e.Node) {
		return -1 // its path enters no Local-policy node, or it did not come in from outside
	}
	for i, g := range gaps {
		if g.Node == e.Node && beganInGap(f, g.Start, g.End) {
			return i
		}
	}
	return -1
}

// beganInGap: f began in the gap from start to end, or within gapSlack
// after it (while proxies learn of the endpoint that ended it).
func beganInGap(f *report.Failure, start, end time.Time) bool {
	began := beganAt(f)
	return !began.Before(start) && began.Before(end.Add(gapSlack))
}

// renderLocalPolicy explains failures in node gaps: not the ordinary race
// (the pod that stopped serving may well have been answering still), but
// the Local policy keeping traffic on a node with nothing to serve it.
func renderLocalPolicy(g *group, x facts) (report.Finding, bool) {
	ro := x.r.Rollout
	// The entries whose gaps the failures fell in, path by path.
	failedOn := map[string]bool{}
	for _, gap := range x.gaps {
		failedOn[gap.Node] = failedOn[gap.Node] || gap.Failed > 0
	}
	entries := localEntries(x.r)
	var ev, nodes []string
	for _, name := range pathNames(x.r) {
		e := entries[name]
		if e == nil || !failedOn[e.Node] {
			continue
		}
		who := "the target is"
		if name != "" {
			who = "path " + name + "'s target is"
		}
		ev = append(ev, fmt.Sprintf("%s node %s's NodePort %d of service %s (type %s, externalTrafficPolicy: Local): kube-proxy there sends what enters only to endpoints on %s, and drops it when none of them serves",
			who, e.Node, e.Port, ro.Service, orUnknown(ro.ServiceType), e.Node))
		if !slices.Contains(nodes, e.Node) {
			nodes = append(nodes, e.Node)
		}
	}
	node := strings.Join(nodes, " and ")
	elsewhere := map[string]bool{}
	marks := unreadyMarks(x.r)
	for _, gap := range x.gaps {
		if gap.Failed == 0 {
			continue
		}
		line := fmt.Sprintf("%s had no serving endpoint from %+.2fs", gap.Node, gap.Start.Sub(x.r.StartedAt).Seconds())
		if gap.Open {
			line += " to the end of the run"
		} else {
			line += fmt.Sprintf(" to %+.2fs (%.1fs)", gap.End.Sub(x.r.StartedAt).Seconds(), gap.End.Sub(gap.Start).Seconds())
		}
		if p := x.pods.Get(gap.StoppedServing); p != nil {
			line += ": " + p.Name + " stopped serving"
			if p.DeletedAt != nil && !p.DeletedAt.After(gap.Start) {
				line += fmt.Sprintf(" %.1fs after its deletion was requested (it turned unready while it may still have been draining)", gap.Start.Sub(*p.DeletedAt).Seconds())
			}
		}
		if gap.ServingAgain != "" {
			line += ", and " + gap.ServingAgain + " served again"
		}
		ev = append(ev, line+fmt.Sprintf("; %s failed in it", nOf(gap.Failed, "request")))
		for _, m := range marks {
			if m.pod == gap.StoppedServing && m.by.Equal(gap.Start) {
				ev = append(ev, (&svcGap{unready: []unreadyMark{m}}).unreadyEvidence(x.r.StartedAt)...)
				break
			}
		}
		for _, p := range gap.ReadyElsewhere {
			elsewhere[p] = true
		}
	}
	if len(elsewhere) > 0 {
		var names []string
		for p := range elsewhere {
			names = append(names, p)
		}
		sort.Strings(names)
		ev = append(ev, "meanwhile ready on other nodes: "+strings.Join(names, ", ")+" (capacity the Local policy kept out of reach)")
	}
	ev = append(ev, fmt.Sprintf("%s failed %s (%s)", nOf(len(g.fails), "request"), g.span(x.r.StartedAt), g.classes()))
	fix := "keep the pod passing readiness while it drains (its endpoint stays serving, and kube-proxy falls back to a terminating endpoint that still serves: ProxyTerminatingEndpoints, on by default since 1.26); " +
		"or have a replacement ready on the same node before the old pod stops serving"
	if hc := ro.HealthCheckNodePort; hc > 0 {
		ev = append(ev, fmt.Sprintf("kube-proxy's healthCheckNodePort %d on %s answers 503 while the node has no ready endpoint: a load balancer that checks it stops sending there", hc, node))
		fix += fmt.Sprintf("; or put a load balancer in front that health-checks healthCheckNodePort %d", hc)
	}
	fix += "; or, if the app does not need the client's IP, externalTrafficPolicy: Cluster"
	title := fmt.Sprintf("traffic entered node %s while it had no serving endpoint (externalTrafficPolicy: Local), and was dropped there", node)
	if len(nodes) > 1 {
		title = fmt.Sprintf("traffic entered nodes %s while each had no serving endpoint (externalTrafficPolicy: Local), and was dropped there", node)
	}
	return report.Finding{
		Title:    title,
		Evidence: ev, Fix: fix, Pods: g.podList(),
	}, true
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
