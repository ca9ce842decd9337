package analysis

import (
	"fmt"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// EdgeHadNoBackend: requests the edge's access log shows it sent to no
// pod (Failure.EdgeNoBackend): it answered them itself, with no backend to
// try (Traefik: no server for the Service in its view; nginx: none left to
// try, "no live upstreams"), while the API listed serving endpoints. With
// none listed the Service's own gap explains them
// (service-without-serving-endpoint, earlier in the rules).
const EdgeHadNoBackend = "edge-had-no-backend"

// noBackendContext is the context of a failure the edge sent to no pod.
const noBackendContext = "the edge sent it to no pod: its access log names no backend for it (it answered it itself, with none to try)"

func renderEdgeNoBackend(g *group, x facts) (report.Finding, bool) {
	r := x.r
	svc := "the Service"
	if r.Rollout != nil && r.Rollout.Service != "" {
		svc = "service " + r.Rollout.Service
	}
	from := "its access log"
	if r.EdgeLog != nil {
		from = fmt.Sprintf("its access log (%s, %s)", r.EdgeLog.File, r.EdgeLog.Format)
	}
	listed := -1 // the fewest serving endpoints the API listed at one of them
	var each []string
	for i := range g.fails {
		f := &g.fails[i]
		at := beganAt(f)
		n, changed := endpointsAt(r, at)
		if listed < 0 || n < listed {
			listed = n
		}
		if i >= noEntryShown {
			continue
		}
		line := fmt.Sprintf("%+.2fs (%s", at.Sub(r.StartedAt).Seconds(), f.Class)
		if f.Status != 0 {
			line += fmt.Sprintf(" %d", f.Status)
		}
		line += fmt.Sprintf("): the API listed %d serving endpoints", n)
		if !changed.IsZero() {
			line += fmt.Sprintf(", unchanged since %+.2fs (%.2fs before)", changed.Sub(r.StartedAt).Seconds(), at.Sub(changed).Seconds())
		}
		each = append(each, line)
	}
	if len(g.fails) > noEntryShown {
		each = append(each, fmt.Sprintf("and %d more", len(g.fails)-noEntryShown))
	}
	// Each source of the evidence says its own failures: the log's lines,
	// or the responses without the header.
	byLog, byHeader, byUnready := &group{}, &group{}, &group{}
	for _, f := range g.fails {
		switch {
		case f.EdgeNoBackend:
			byLog.fails = append(byLog.fails, f)
		case f.Status >= 500:
			byUnready.fails = append(byUnready.fails, f) // noBackendWhileUnready
		default:
			byHeader.fails = append(byHeader.fails, f)
		}
	}
	var ev []string
	if len(byLog.fails) > 0 {
		ev = append(ev, fmt.Sprintf("%s failed (%s) %s through the edge, and %s names no backend for any of them: the edge answered them itself, and no pod took part",
			nOf(len(byLog.fails), "request"), byLog.classes(), byLog.span(r.StartedAt), from))
	}
	if len(byHeader.fails) > 0 {
		ev = append(ev, fmt.Sprintf("%s failed (%s) %s through the edge with a status below 500 and without %s, which the pods put on every response of their own: the edge answered them itself, and no pod took part",
			nOf(len(byHeader.fails), "request"), byHeader.classes(), byHeader.span(r.StartedAt), r.Config.BackendHeader))
	}
	if len(byUnready.fails) > 0 {
		ev = append(ev, fmt.Sprintf("%s failed (%s) %s through the edge with status 503 and without %s, while a pod was unready and none was terminating: "+
			"the edge answered them itself, most likely for a route with no serving endpoint (a 5xx it relays for a pod it could not reach needs a pod that stopped, and none did)",
			nOf(len(byUnready.fails), "request"), byUnready.classes(), byUnready.span(r.StartedAt), r.Config.BackendHeader))
	}
	ev = append(ev, each...)
	ev = append(ev, unreadyAround(r, g)...)
	share, _ := routeShareEvidence(r, x.pods, g.fails, svc)
	ev = append(ev, share...)
	ev = append(ev, "an edge has no backend for a Service whose pods the API lists as serving when its own view of the endpoints is behind "+
		"(its controller's watch or its reload: a view that dropped the old pods before it had the new ones), "+
		"when it took every pod out after failed attempts (nginx's passive health check: a server whose attempt failed max_fails times, 1 by default, "+
		"is not tried for fail_timeout, 10 s by default, and a rollout's refused connects can take each pod out in turn), "+
		"or when a route over several Services lost one: Traefik drops a weighted TraefikService, and the routes that use it, while any of its Services "+
		"has no serving endpoint (providers.kubernetesCRD.allowEmptyServices is false by default), and answers 404 for the host until it has one again "+
		"(its providers' throttle: 2 s at least); with allowEmptyServices=true it keeps the route and the empty Service in it: of weight 0 (Argo Rollouts so weighs a canary "+
		"with no available pod) it gets no request, above 0 Traefik answers its share 503 itself; "+
		"an Argo canary of one pod empties its canary Service whenever that pod turns unready")
	return report.Finding{
		Title:    fmt.Sprintf("the edge had no pod of %s to send %s to while the API listed %d serving endpoints", svc, nOf(len(g.fails), "request"), listed),
		Evidence: ev,
		Fix: "where the edge takes pods out after failed attempts (nginx's max_fails and fail_timeout), stop the failures that do it: a preStop sleep that outlasts " +
			"the edge's view of each deletion, so it never tries a pod that has stopped (the propagation finding sizes it when the run measured the race), " +
			"and max_fails=0 on the Service's servers, so that one failed attempt takes no pod out; where a weighted route lost a Service (Traefik: its log says " +
			"\"no servers found\" for it), keep every Service behind the route serving: a readiness probe that outlasts one slow answer (timeoutSeconds above the " +
			"app's slowest, failureThreshold above 1) and a canary of two pods or more, and in Traefik allowEmptyServices=true (it keeps the route, and " +
			"Argo Rollouts weighs a canary with no available pod 0: the stable side takes its share; a weighted route nobody reweighs answers the empty " +
			"Service's share 503); where its view lags the API's, read its controller's log and reload times around these moments",
	}, true
}

// unreadyAround lists the pods that lost readiness without being deleted
// from unreadyLead before g's first failure to its last one's end, each
// with the probe failure Kubernetes reported for it then: an edge that
// drops a route over a Service left without a serving endpoint (a
// canary's only pod) fails every request of the route, not the pod's
// share.
func unreadyAround(r *report.Report, g *group) []string {
	if len(g.fails) == 0 {
		return nil
	}
	from, to := beganAt(&g.fails[0]), g.fails[0].End
	for i := range g.fails {
		if at := beganAt(&g.fails[i]); at.Before(from) {
			from = at
		}
		if g.fails[i].End.After(to) {
			to = g.fails[i].End
		}
	}
	from = from.Add(-unreadyLead)
	deleted := map[string]bool{}
	var out []string
	for i, e := range r.Timeline {
		if e.Kind == report.PodDeletionRequested {
			deleted[e.Pod] = true
		}
		if e.Kind != report.PodUnready || deleted[e.Pod] || e.At.Before(from) || e.At.After(to) {
			continue
		}
		line := fmt.Sprintf("pod %s turned unready at %+.2fs, not deleted", e.Pod, e.At.Sub(r.StartedAt).Seconds())
		if why := probeFailure(r.Timeline[:i+1], e.Pod, e.At.Add(-unreadyLead)); why != "" {
			line += "; Kubernetes: " + why
		}
		for _, n := range r.Timeline[i+1:] {
			if n.Pod == e.Pod && n.Kind == report.PodReady {
				line += fmt.Sprintf("; ready again at %+.2fs", n.At.Sub(r.StartedAt).Seconds())
				break
			}
		}
		out = append(out, line)
	}
	return out
}

// unreadyLead is how long before the first failure a pod's loss of
// readiness still counts as its cause: Traefik applies a change at its
// providers' throttle (2 s) at the latest, plus its watch's delay.
const unreadyLead = 3 * time.Second

// probeFailure is the last Kubernetes Event at or after since in events
// that says a probe of pod failed ("Readiness probe failed: ..."), "" if
// none.
func probeFailure(events []report.Event, pod string, since time.Time) string {
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.Kind == report.KubeEvent && e.Pod == pod && !e.At.Before(since) && strings.Contains(e.Detail, "probe failed") {
			_, msg, _ := strings.Cut(e.Detail, ": ")
			return msg
		}
	}
	return ""
}
