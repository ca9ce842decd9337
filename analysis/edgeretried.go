package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/report"
)

// EdgeRetriesHidFailures: the edge's access log lists attempts that
// failed on a backend before the edge sent the request to another
// (report.EdgeLog.FailedAttempts, nginx's list of the servers it tried):
// failures the clients never saw, only waited for. Measured by the edge
// itself, never inferred. A refused connect retried costs the client
// microseconds, so neither the failures nor the latency-spike finding
// (which reads the edge's waits) show them; only the log does.
const EdgeRetriesHidFailures = "edge-retries-hid-failures"

// failedOn is the attempts that failed on one backend address: the pod
// that bore it (nil when the timeline names none) and the seconds of the
// run the edge received their requests in.
type failedOn struct {
	addr        string
	pod         *Pod
	attempts    uint64
	first, last int64
}

// afterDeletion is how long after rollprobe received the pod's deletion
// the last failed attempt on it came, at most: counted to the end of the
// second the edge received its request in (the log's resolution), as a
// latency spike is. 0 when the pod's deletion was not requested or came
// after that second. clock places the run's seconds on the deletion's
// wall clock.
func (f *failedOn) afterDeletion(clock report.WallClock) time.Duration {
	if f.pod == nil || f.pod.DeletedAt == nil {
		return 0
	}
	return max(0, clock.SecondAt(f.last+1).Sub(*f.pod.DeletedAt))
}

// edgeFailedOn groups the edge log's failed attempts by backend address
// and the pod that bore it, in the order of their first second; nil when
// the log does not list them (Traefik's, or no retry counted).
func edgeFailedOn(r *report.Report, pods *Pods) []*failedOn {
	e := r.EdgeLog
	if e == nil || len(e.FailedAttempts) == 0 || e.Retried == nil {
		return nil
	}
	var on []*failedOn
	clock := r.WallClock()
	for _, a := range e.FailedAttempts {
		pod := podAtAddr(clock, pods, a.Addr, a.T)
		k := slices.IndexFunc(on, func(f *failedOn) bool { return f.addr == a.Addr && f.pod == pod })
		if k < 0 {
			on = append(on, &failedOn{addr: a.Addr, pod: pod, first: a.T, last: a.T})
			k = len(on) - 1
		}
		f := on[k]
		f.attempts += a.Attempts
		f.first, f.last = min(f.first, a.T), max(f.last, a.T)
	}
	slices.SortFunc(on, func(a, b *failedOn) int { return cmp.Compare(a.first, b.first) })
	return on
}

// edgeRetryWindow is the longest a pod kept receiving attempts from the
// edge after its deletion (afterDeletion), by the edge's log: a window the
// clients never saw, as the edge retried those requests elsewhere, which a
// preStop sleep must cover all the same (a request the edge cannot retry
// fails in it). 0 without such attempts.
func edgeRetryWindow(r *report.Report, pods *Pods) time.Duration {
	var w time.Duration
	clock := r.WallClock()
	for _, f := range edgeFailedOn(r, pods) {
		w = max(w, f.afterDeletion(clock))
	}
	return w
}

func renderEdgeRetried(_ *group, x facts) (report.Finding, bool) {
	e := x.r.EdgeLog
	on := edgeFailedOn(x.r, x.pods)
	if len(on) == 0 {
		return report.Finding{}, false
	}
	var attempts uint64
	for _, f := range on {
		attempts += f.attempts
	}
	rel := func(t time.Time) float64 { return t.Sub(x.r.StartedAt).Seconds() }
	clock := x.r.WallClock()
	evidence := []string{fmt.Sprintf("the edge's access log (%s, %s) lists %d attempts that failed on a backend before it sent the request to another: "+
		"%d of the run's requests failed there first, and the client saw only the last attempt's answer", e.File, e.Format, attempts, *e.Retried)}
	var pods []string
	allGoing, sized := true, false
	for _, f := range on {
		seconds := fmt.Sprintf("in requests it received in second +%ds", f.first)
		if f.last != f.first {
			seconds = fmt.Sprintf("in requests it received from +%ds to +%ds", f.first, f.last)
		}
		switch {
		case f.pod == nil:
			allGoing = false
			evidence = append(evidence, fmt.Sprintf("%d on %s (no pod of the run's there then), %s", f.attempts, f.addr, seconds))
		case f.pod.DeletedAt != nil:
			pods = append(pods, f.pod.Name)
			line := fmt.Sprintf("%d on pod %s (%s), %s; rollprobe received its deletion at %+.2fs", f.attempts, f.pod.Name, f.addr, seconds, rel(*f.pod.DeletedAt))
			if after := f.afterDeletion(clock); after > 0 {
				sized = true
				line += fmt.Sprintf(", the last failed attempt at most %.2fs after it (by the second)", after.Seconds())
			}
			evidence = append(evidence, line)
		default:
			allGoing = false
			pods = append(pods, f.pod.Name)
			evidence = append(evidence, fmt.Sprintf("%d on pod %s (%s), %s; its deletion was not requested in the run", f.attempts, f.pod.Name, f.addr, seconds))
		}
	}
	evidence = append(evidence, "nginx tries the next server only as proxy_next_upstream allows (by default after a connect error or timeout, or an error before the response header), "+
		"within proxy_next_upstream_tries and proxy_next_upstream_timeout, and never passes on a POST, PATCH or LOCK it had already sent to a server "+
		"(unless non_idempotent is set): the same moments can fail such requests, or any request once the tries run out")
	title := fmt.Sprintf("the edge retried %s on another backend after attempts failed on %s: failures your clients did not see", nOf(*e.Retried, "request"), backendsNamed(on))
	// The one preStop the findings size: it covers the attempts' window
	// (edgeRetryWindow counts in x.preStop) where one was measured, and
	// the clients' where they met the race.
	stopGap := "a preStop sleep that outlasts its view of the endpoints"
	switch {
	case publishesNotReady(x.r):
		stopGap = publishesNotReadyStop
	case x.preStop > 0:
		stopGap = fmt.Sprintf("a preStop hook that waits at least %ds (%s), which outlasts its view of the endpoints as this run measured it", x.preStop, advice.PreStopSleep(x.preStop, x.version))
	}
	first := "find why those backends failed the attempts; "
	switch {
	case allGoing && len(pods) > 0:
		title = fmt.Sprintf("the edge retried %s on another pod after attempts failed on pods being deleted: failures your clients did not see", nOf(*e.Retried, "request"))
		first = "keep the edge from sending requests to pods that have stopped: " + stopGap + "; "
	case sized:
		first += "for the pods being deleted, " + stopGap + "; "
	}
	return report.Finding{
		Title:    title,
		Evidence: evidence,
		Fix: first + "the edge's retries cover only the requests and failures its retry rule allows: do not count on them for requests that are not idempotent, " +
			"and keep them (nginx: proxy_next_upstream error timeout, the default) as a second line, not the fix",
		Pods: slices.Compact(slices.Sorted(slices.Values(pods))),
	}, true
}

// backendsNamed says how many backends the attempts failed on.
func backendsNamed(on []*failedOn) string {
	addrs := map[string]bool{}
	for _, f := range on {
		addrs[f.addr] = true
	}
	if len(addrs) == 1 {
		return "1 backend"
	}
	return fmt.Sprintf("%d backends", len(addrs))
}
