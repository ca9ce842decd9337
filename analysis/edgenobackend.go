package analysis

import (
	"fmt"

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
	ev := []string{
		fmt.Sprintf("%d requests failed (%s) from %s through the edge, and %s names no backend for any of them: the edge answered them itself, and no pod took part",
			len(g.fails), g.classes(), g.span(r.StartedAt), from),
	}
	ev = append(ev, each...)
	ev = append(ev, "an edge has no backend for a Service whose pods the API lists as serving when its own view of the endpoints is behind "+
		"(its controller's watch or its reload: a view that dropped the old pods before it had the new ones), "+
		"or when it took every pod out after failed attempts (nginx's passive health check: a server whose attempt failed max_fails times, 1 by default, "+
		"is not tried for fail_timeout, 10 s by default, and a rollout's refused connects can take each pod out in turn)")
	return report.Finding{
		Title:    fmt.Sprintf("the edge had no pod of %s to send %d requests to while the API listed %d serving endpoints", svc, len(g.fails), listed),
		Evidence: ev,
		Fix: "where the edge takes pods out after failed attempts (nginx's max_fails and fail_timeout), stop the failures that do it: a preStop sleep that outlasts " +
			"the edge's view of each deletion, so it never tries a pod that has stopped (the propagation finding sizes it when the run measured the race), " +
			"and max_fails=0 on the Service's servers, so that one failed attempt takes no pod out; where its view lags the API's, read its controller's log " +
			"and reload times around these moments",
	}, true
}
