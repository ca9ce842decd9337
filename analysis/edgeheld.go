package analysis

import (
	"fmt"
	"slices"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// EdgeHeldPastTimeout: the edge's access log shows failed requests it
// still had well after the client's timeout ran out: it went on waiting on
// a backend that did not answer after the client had given up. Measured
// by the edge itself (Traefik's Duration), never inferred: Traefik v3.6
// holds a call sent over h2c to a deleted pod's address until the
// kernel's connect gives up (2m13s in the lab), as its h2c transport
// dials without a timeout and x/net's HTTP/2 connection pool waits for
// that dial whatever the request's context.
const EdgeHeldPastTimeout = "edge-held-requests-past-client-timeout"

// edgeHeldSlack is how long past the client's timeout the edge must still
// have had a request for it to count as held: an edge that sees its
// client leave (a closed connection, an HTTP/2 RST_STREAM) ends the
// request within milliseconds, and one that answers as the client's
// timeout runs out (Traefik's 502 after 4,994 ms for a 5 s timeout, in
// the lab) has not held it.
const edgeHeldSlack = time.Second

// heldOn is what the edge held on one backend: the pod at its address (nil
// when the timeline names none), the requests, the longest, and when the
// first and last were sent.
type heldOn struct {
	addr        string
	pod         *Pod
	n           int
	longest     time.Duration
	first, last time.Time
}

func renderEdgeHeld(_ *group, x facts) (report.Finding, bool) {
	timeout := time.Duration(x.r.Config.TimeoutMS * float64(time.Millisecond))
	if timeout <= 0 {
		return report.Finding{}, false
	}
	var on []*heldOn
	var n int
	var longest time.Duration
	var heldFails group // the held failures, for their classes
	for i := range x.failures {
		f := &x.failures[i]
		held := time.Duration(f.EdgeDurationMS * float64(time.Millisecond))
		if held < timeout+edgeHeldSlack {
			continue
		}
		var pod *Pod
		if f.Evidence == report.EvidenceAccessLog {
			pod = x.pods.Get(f.LikelyPod)
		}
		k := slices.IndexFunc(on, func(h *heldOn) bool { return h.addr == f.UpstreamAddr && h.pod == pod })
		if k < 0 {
			on = append(on, &heldOn{addr: f.UpstreamAddr, pod: pod, first: beganAt(f)})
			k = len(on) - 1
		}
		h, at := on[k], beganAt(f)
		h.n++
		h.longest = max(h.longest, held)
		if at.Before(h.first) {
			h.first = at
		}
		if at.After(h.last) {
			h.last = at
		}
		n++
		longest = max(longest, held)
		heldFails.fails = append(heldFails.fails, *f)
	}
	if n == 0 {
		return report.Finding{}, false
	}
	slices.SortFunc(on, func(a, b *heldOn) int { return a.first.Compare(b.first) })
	rel := func(t time.Time) float64 { return t.Sub(x.r.StartedAt).Seconds() }
	evidence := []string{fmt.Sprintf("%s that failed %s still held by the edge at least %s after the client's %s timeout ran out: its access log ends %s up to %s after it received %s (its Duration, the edge's own measure); the client saw %s",
		requests(n), isAre(n), edgeHeldSlack, timeout, themIt(n), longest.Round(time.Millisecond), themIt(n), heldFails.classes())}
	allGone := true
	var pods []string
	for _, h := range on {
		where := h.addr
		if where == "" {
			where = "no backend address in the log"
		}
		sent := fmt.Sprintf("sent from %+.2fs to %+.2fs", rel(h.first), rel(h.last))
		switch {
		case h.pod == nil:
			allGone = false
			evidence = append(evidence, fmt.Sprintf("%d forwarded to %s (no pod of the run's there then), %s, held up to %s", h.n, where, sent, h.longest.Round(time.Millisecond)))
		case h.pod.DeletedBy(h.first, x.tol):
			// Every one of them sent once its deletion could have acted.
			pods = append(pods, h.pod.Name)
			evidence = append(evidence, fmt.Sprintf("%d forwarded to pod %s (%s), %s, after its deletion (received at %+.2fs); held up to %s", h.n, h.pod.Name, where, sent, rel(*h.pod.DeletedAt), h.longest.Round(time.Millisecond)))
		default:
			allGone = false
			pods = append(pods, h.pod.Name)
			evidence = append(evidence, fmt.Sprintf("%d forwarded to pod %s (%s), %s, held up to %s", h.n, h.pod.Name, where, sent, h.longest.Round(time.Millisecond)))
		}
	}
	evidence = append(evidence, "an edge ends a request within milliseconds of its client leaving unless it is itself waiting on something the client's leaving does not end: "+
		"a connect to an address that no longer answers (a deleted pod's address sends no reset) ends only when the edge's own connect timeout, or the kernel's SYN retries (minutes), give up")
	if e := x.r.EdgeLog; e != nil && e.FailuresNotFound > 0 {
		evidence = append(evidence, fmt.Sprintf("%d more failures had no line in the log yet when the run read it (--edge-log-wait): the edge may still have been holding them", e.FailuresNotFound))
	}
	title := fmt.Sprintf("the edge held %s up to %s, long after the client's %s timeout, waiting on backends that did not answer", requests(n), longest.Round(time.Second), timeout)
	first := "find why those backends did not answer; "
	if allGone {
		title = fmt.Sprintf("the edge held %s up to %s, long after the client's %s timeout, waiting on pods that were gone", requests(n), longest.Round(time.Second), timeout)
		first = "keep the edge from sending requests to pods that are gone: a preStop sleep that outlasts its view of the endpoints"
		switch {
		case publishesNotReady(x.r):
			first = "keep the edge from sending requests to pods that are gone: " + publishesNotReadyStop
		case x.preStop > 0:
			first += fmt.Sprintf(" (the %ds the %s finding sizes)", x.preStop, StopsBeforePropagation)
		}
		first += "; "
	}
	return report.Finding{
		Title:    title,
		Evidence: evidence,
		Fix: first + "and bound the edge's own wait on a backend below your clients' timeouts, so that such a request fails fast instead of holding the client and the edge's resources: " +
			"in Traefik, serversTransport's forwardingTimeouts.dialTimeout (30 s by default) bounds its connects to HTTP/1.1 and TLS backends, " +
			"but not to h2c ones (serversscheme h2c: Traefik v3.6 dials them with no timeout, and x/net's HTTP/2 connection pool waits for that dial whatever the client does), " +
			"where only the preStop helps",
		Pods: slices.Compact(slices.Sorted(slices.Values(pods))),
	}, true
}

func requests(n int) string {
	if n == 1 {
		return "1 request"
	}
	return nOf(n, "request")
}

func isAre(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

func themIt(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}
