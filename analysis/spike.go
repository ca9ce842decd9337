package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/report"
)

// A latency spike at a deletion: successes that came back slow right after
// a pod's deletion was requested. A proxy that retries a request it could
// not send to a pod (refused, or no connection in time) on another one
// hides the drop from the client but not the wait: Traefik's retry
// middleware, Envoy's retry_policy, NGINX's proxy_next_upstream. The run
// measures only the slowness (each success's service time, per second);
// that a retry caused it is the likely reading, not a measurement, and the
// finding says so.
//
// What counts, per path, from the per-second p99 of the successes alone,
// timed from their request's write (SeriesRow.OKAfterWriteP99MS): a proxy
// retries only a request it has, so a new connection's handshake with it,
// slow on a busy machine, is no retry's (older reports without the field:
// the service time, SeriesRow.OKServiceP99MS):
//   - the second begins no earlier than the second of a pod's deletion
//     request and no later than spikeAfter after it;
//   - its p99 is at least spikeFactor times the path's baseline (the median
//     second before the first deletion, else of the whole path) and at least
//     spikeFloor above it: a retry costs a dial timeout or a backoff, far
//     more than jitter;
//   - with several paths, it is also at least spikeFactor times another
//     path's p99 in the same second: what slowed every path at once (a busy
//     node, a busy prober) is not in one path's way. With one path there
//     is nothing to compare with, so the path must have shown a proxy in
//     its way (a proxy_5xx): a lab node busy starting pods lifted a direct
//     path's p99 from 3 ms to 130 ms at a rollout;
//   - the path is not known to be direct (directPaths: its target is the
//     Service's own address or name, and the run showed no proxy on it):
//     with nothing between the prober and the pods, nothing retried. It
//     still counts as another path to compare with. In a lab run the
//     Service's path alone had a p99 of 282 ms one second after a
//     deletion, against 52 ms through the retrying edge: a slow pod or
//     node, which this finding's reading would have blamed on a proxy;
//   - with the service time (older reports), no success in the second came
//     after a retransmitted SYN: those are slow for a measured reason of
//     their own, which the time from the write leaves out.
const (
	spikeFactor = 4
	spikeFloor  = 100 * time.Millisecond
	spikeAfter  = 15 * time.Second
	// spikeBaselineSeconds is how many seconds before the first deletion
	// the baseline needs; with fewer, the whole path's median second.
	spikeBaselineSeconds = 2
)

// pathSpike is one path's run of spike seconds after a deletion.
type pathSpike struct {
	path         string // "" for a run of one path
	from, to     int64  // the first and last spike second (series T)
	p99          float64
	baseline     float64
	fromWrite    bool // p99 and baseline are from the request's write (okP99)
	beforeDelete bool // the baseline is of the seconds before the first deletion
	pod          string
	// after is how long after pod's deletion request the last spike
	// second ended: the slow responses' window, by the second.
	after  time.Duration
	failed uint64 // the path's failures in the spike seconds
	// others: the other paths' largest p99 in the spike seconds, by name.
	others map[string]float64
}

type seriesPath struct {
	name   string
	series []report.SeriesRow
}

func seriesPaths(r *report.Report) []seriesPath {
	if len(r.Paths) == 0 {
		return []seriesPath{{"", r.Series}}
	}
	var out []seriesPath
	for _, p := range r.Paths {
		out = append(out, seriesPath{p.Name, p.Series})
	}
	return out
}

// latencySpikes finds the spike seconds of every path (see the constants).
func latencySpikes(r *report.Report, pods *Pods) []pathSpike {
	type deletion struct {
		pod string
		at  time.Duration // since the run's start
	}
	var dels []deletion
	clock := r.WallClock() // deletions on the run's offsets, as the series' seconds are
	for _, p := range pods.All() {
		if p.DeletedAt != nil {
			dels = append(dels, deletion{p.Name, clock.Offset(*p.DeletedAt)})
		}
	}
	if len(dels) == 0 {
		return nil
	}
	sort.Slice(dels, func(i, j int) bool { return dels[i].at < dels[j].at })
	// lastDeletion is the latest deletion requested before second t ended,
	// within spikeAfter of its start.
	lastDeletion := func(t int64) (deletion, bool) {
		start, end := time.Duration(t)*time.Second, time.Duration(t+1)*time.Second
		for i := len(dels) - 1; i >= 0; i-- {
			d := dels[i]
			if d.at < end && d.at.Truncate(time.Second) <= start && start-d.at <= spikeAfter {
				return d, true
			}
		}
		return deletion{}, false
	}
	paths := seriesPaths(r)
	if len(paths) == 1 && !proxiedBeforePods(r)[paths[0].name] {
		return nil
	}
	p99s := make([]map[int64]float64, len(paths))
	for i, p := range paths {
		p99s[i] = map[int64]float64{}
		for _, row := range p.series {
			if v, _ := okP99(row); v > 0 {
				p99s[i][row.T] = v
			}
		}
	}
	direct := directPaths(r)
	var out []pathSpike
	for i, p := range paths {
		if direct[p.name] {
			continue // nothing between it and the pods to retry: only compared with
		}
		base, beforeDelete := spikeBaseline(p.series, dels[0].at)
		if base == 0 {
			continue
		}
		var cur *pathSpike
		for _, row := range p.series {
			v, fromWrite := okP99(row)
			d, near := lastDeletion(row.T)
			spike := near && (fromWrite || row.SlowConnects == 0) && v >= spikeFactor*base && v-base >= ms(spikeFloor)
			others := map[string]float64{}
			if spike && len(paths) > 1 {
				lowest := -1.0
				for j, q := range paths {
					if w, ok := p99s[j][row.T]; j != i && ok {
						others[q.name] = w
						if lowest < 0 || w < lowest {
							lowest = w
						}
					}
				}
				spike = lowest < 0 || v >= spikeFactor*lowest
			}
			if !spike {
				cur = nil
				continue
			}
			if cur == nil || cur.to != row.T-1 {
				out = append(out, pathSpike{path: p.name, from: row.T, baseline: base, beforeDelete: beforeDelete, fromWrite: fromWrite, others: map[string]float64{}})
				cur = &out[len(out)-1]
			}
			cur.to, cur.p99 = row.T, max(cur.p99, v)
			cur.pod, cur.after = d.pod, time.Duration(row.T+1)*time.Second-d.at
			cur.failed += row.Failed
			for name, w := range others {
				cur.others[name] = max(cur.others[name], w)
			}
		}
	}
	return out
}

// spikeBaseline is the median success p99 of the seconds that ended by the
// first deletion (beforeDelete), or with too few of those of every second
// of the path; 0 when the path has no success at all.
func spikeBaseline(series []report.SeriesRow, firstDeletion time.Duration) (base float64, beforeDelete bool) {
	var before, all []float64
	for _, row := range series {
		v, _ := okP99(row)
		if v <= 0 {
			continue
		}
		all = append(all, v)
		if time.Duration(row.T+1)*time.Second <= firstDeletion {
			before = append(before, v)
		}
	}
	if len(before) >= spikeBaselineSeconds {
		return median(before), true
	}
	if len(all) == 0 {
		return 0, false
	}
	return median(all), false
}

// okP99 is the second's success p99 the rule reads, and whether it is from
// the request's write: so when the report has it, else (an older report)
// the service time.
func okP99(row report.SeriesRow) (p99 float64, fromWrite bool) {
	if row.OKAfterWriteP99MS > 0 {
		return row.OKAfterWriteP99MS, true
	}
	return row.OKServiceP99MS, false
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// spikeWindow is the longest time after a deletion that a spike lasted.
func spikeWindow(spikes []pathSpike) time.Duration {
	var w time.Duration
	for _, s := range spikes {
		w = max(w, s.after)
	}
	return w
}

func renderLatencySpike(_ *group, x facts) (report.Finding, bool) {
	if len(x.spikes) == 0 {
		return report.Finding{}, false
	}
	several := len(x.r.Paths) > 1
	var evidence []string
	pods := map[string]bool{}
	slowPaths := map[string]bool{}
	for _, s := range x.spikes {
		pods[s.pod] = true
		slowPaths[s.path] = true
		who := "the successes'"
		if s.path != "" {
			who = s.path + ": the successes'"
		}
		against := "the median second before the first deletion"
		if !s.beforeDelete {
			against = "the path's median second"
		}
		measure := "service time"
		if s.fromWrite {
			measure = "time from the request's write"
		}
		line := fmt.Sprintf("%s p99 %s reached %.0fms from %+ds to %+ds, against %.1fms in %s; it ended %.1fs after %s's deletion was requested (by the second)",
			who, measure, s.p99, s.from, s.to+1, s.baseline, against, s.after.Seconds(), s.pod)
		if len(s.others) > 0 {
			var parts []string
			for name, w := range s.others {
				parts = append(parts, fmt.Sprintf("%s %.0fms", name, w))
			}
			sort.Strings(parts)
			line += "; the other paths in the same seconds: " + strings.Join(parts, ", ")
		}
		if s.failed == 0 {
			line += "; no request of this path failed in those seconds: only the wait shows it"
		} else {
			line += fmt.Sprintf("; %d of this path's requests failed in those seconds", s.failed)
		}
		evidence = append(evidence, line)
	}
	// The edge's access log, when the run read it, measures what the
	// slowness alone only suggests: whether the requests waited inside the
	// edge outside the attempt that answered them (failed attempts, a
	// retry's backoff).
	logged, retried := 0, 0
	for _, s := range x.spikes {
		n, ok := edgeWaitsIn(x.r, s.path, s.from-spikeRetryLead, s.to)
		if !ok {
			continue
		}
		logged++
		who := "this run's requests"
		if s.path != "" {
			who = s.path + "'s requests"
		}
		if n > 0 {
			retried++
			evidence = append(evidence, fmt.Sprintf("the edge's access log: %d of %s it received from %+ds to %+ds waited %s or more inside it outside the attempt that answered them (its Overhead: failed attempts and a retry's backoff): measured, not inferred",
				n, who, s.from-spikeRetryLead, s.to+1, report.EdgeWaitFloor))
		} else {
			evidence = append(evidence, fmt.Sprintf("the edge's access log: none of %s it received from %+ds to %+ds waited %s inside it outside the attempt that answered them: the wait is not the edge's retries (a slow pod, or slowness outside the edge)",
				who, s.from-spikeRetryLead, s.to+1, report.EdgeWaitFloor))
		}
	}
	if logged == 0 {
		evidence = append(evidence, "a proxy that retries a request it could not send to a pod (refused, or no connection within its dial timeout) on another pod hides the drop from the client but not the wait: Traefik's retry middleware, Envoy's retry_policy, NGINX's proxy_next_upstream; that this is what happened here is the likely reading, not a measurement (a proxy's access log shows its retries: --edge-access-log)")
	}
	if !several {
		evidence = append(evidence, fmt.Sprintf("one path only, through a proxy (%s): a node or prober busy with the rollout slows responses too; probe the Service side by side (--target svc=http://NAME.NAMESPACE.svc/) to tell them apart",
			proxyShown(x.r, x.spikes[0].path)))
	}
	names := make([]string, 0, len(slowPaths))
	for p := range slowPaths {
		names = append(names, p)
	}
	sort.Strings(names)
	cause := ": probably retried inside a proxy"
	switch {
	case retried > 0:
		cause = ": retried inside the proxy (its access log shows the waits)"
	case logged > 0: // measured: no retry; a static reading must not say one
		cause = ""
	}
	title := "responses slowed at pod deletions" + cause
	if several {
		title = fmt.Sprintf("responses on %s slowed at pod deletions, the other paths' did not%s", strings.Join(names, ", "), cause)
	}
	var podList []string
	for p := range pods {
		podList = append(podList, p)
	}
	sort.Strings(podList)
	fix := fmt.Sprintf("treat it as a drop the proxy paid for: give %s a preStop hook that waits at least %ds (%s), so a pod keeps accepting until the proxy stops routing to it; keep the retries as a safety net, not as what every rollout relies on",
		servingStopsOf(x.pods, podList).holder(), x.preStop, advice.PreStopSleep(x.preStop, x.version))
	if publishesNotReady(x.r) {
		fix = "treat it as a drop the proxy paid for: send clients through " + publishesNotReadyStop + "; keep the retries as a safety net, not as what every rollout relies on"
	}
	if logged > 0 && retried == 0 {
		// The log measured no retry: the preStop advice rests on one, so
		// it is not given; what is left is to find where the wait is.
		fix = "the edge did not retry, so the wait is elsewhere: probe the Service beside the edge (--target svc=http://NAME.NAMESPACE.svc/) to see whether the pods themselves answer slowly while one goes away " +
			"(shutdown work, the new pods' start taking the node's CPU: give the pods CPU requests that cover both), or only through the edge (its dial and response timeouts toward a pod that stopped answering)"
	}
	return report.Finding{
		Title:    title,
		Evidence: evidence,
		Fix:      fix,
		Pods:     podList,
	}, true
}

// spikeRetryLead is how many seconds before a spike's first second the
// requests that waited inside the edge are counted for it: a success slowed by the
// edge's retries is counted in the series when it began, and a request
// the edge received a little earlier may still be in its retries (the
// lab's route: 3 attempts of a 1 s dial and a backoff, about 3.4 s).
const spikeRetryLead = 5

// edgeWaitsIn counts the requests of path the edge's access log says
// waited inside it (report.EdgeLog.Waits), received from second from to
// second to (inclusive); ok is false when no log was read, or none of the
// path's requests went through it (nothing measured).
func edgeWaitsIn(r *report.Report, path string, from, to int64) (requests int, ok bool) {
	e := r.EdgeLog
	if e == nil || e.Error != "" {
		return 0, false
	}
	// The path's lines in the log: by path when the run probed several
	// (a path not listed there had none), else all of them.
	lines, several := e.RequestsByPath[path], len(e.RequestsByPath) > 0
	if !several {
		lines = e.Requests
	}
	if lines == 0 {
		return 0, false
	}
	for _, w := range e.Waits {
		if w.Path == path && w.T >= from && w.T <= to {
			requests += w.Requests
		}
	}
	return requests, true
}

// proxyShown says how the run showed a proxy on path (proxiedPaths): its
// own 5xx, or connections to an address that is no Service's, node's or
// pod's (via_edge), which may have failed without any 5xx (a starved
// edge's handshakes).
func proxyShown(r *report.Report, path string) string {
	byClass := r.Totals.ByClass
	for _, p := range r.Paths {
		if p.Name == path {
			byClass = p.Totals.ByClass
		}
	}
	if byClass[report.ClassProxy5xx] > 0 {
		return "it answered proxy_5xx in this run"
	}
	return "its failed connections in this run went to an address that is no Service's, node's or pod's: an ingress's or a proxy's"
}
