package htmlreport

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
	textrender "github.com/rollprobe/rollprobe/report/render"
)

// maxBars bounds the bars of the requests chart (and the points of the
// latency lines): a longer run is drawn in buckets of several seconds. An
// hour of seconds fits, which keeps a one-hour report well under 2 MB.
const maxBars = 3600

// bucket is one bar of the charts: one second, or several for a long run.
type bucket struct {
	// T is where its first second began, in seconds from the start on
	// the wall clock (placed by the run's clock samples, as the timeline's
	// events and the failures are); Span is how many of the run's seconds
	// it holds: its width, and what its rates are per.
	T, Span float64
	Sent    uint64
	OK      uint64
	ByClass map[string]uint64 // failures
	Failed  uint64
	// Latency quantiles in ms (0: no response completed). For a bucket of
	// several seconds: the mean of the p50s and the largest p99, so a
	// spike is never averaged away.
	P50, P99, SvcP50, SvcP99 float64
}

// perSecond is the bucket's rate of n requests.
func (b bucket) perSecond(n uint64) float64 { return float64(n) / b.Span }

// buckets folds the series into at most maxBars buckets. Every failure of
// a second is in the bucket holding that second: folding sums, it never
// drops a count. placed is where the run's second t began, in seconds
// from the start on the wall clock.
func buckets(rows []report.SeriesRow, placed func(t int64) float64) []bucket {
	if len(rows) == 0 {
		return nil
	}
	per := (len(rows) + maxBars - 1) / maxBars
	out := make([]bucket, 0, (len(rows)+per-1)/per)
	for i := 0; i < len(rows); i += per {
		group := rows[i:min(i+per, len(rows))]
		b := bucket{T: placed(group[0].T), Span: float64(len(group)), ByClass: map[string]uint64{}}
		var p50s, svc50s float64
		var n50, nsvc int
		for _, r := range group {
			b.Sent += r.Sent
			b.OK += r.OK
			b.Failed += r.Failed
			for c, n := range r.ByClass {
				b.ByClass[c] += n
			}
			if r.P50MS > 0 {
				p50s += r.P50MS
				n50++
			}
			if r.ServiceP50MS > 0 {
				svc50s += r.ServiceP50MS
				nsvc++
			}
			b.P99 = max(b.P99, r.P99MS)
			b.SvcP99 = max(b.SvcP99, r.ServiceP99MS)
		}
		if n50 > 0 {
			b.P50 = p50s / float64(n50)
		}
		if nsvc > 0 {
			b.SvcP50 = svc50s / float64(nsvc)
		}
		out = append(out, b)
	}
	return out
}

// laneState is what a pod (or its endpoint) was doing over a span.
type laneState string

const (
	podStarting    laneState = "starting"    // created, not ready yet
	podReady       laneState = "ready"       // Ready condition true
	podUnready     laneState = "unready"     // was ready, Ready went false before any deletion
	podTerminating laneState = "terminating" // deletion requested, container still running
	podExited      laneState = "exited"      // container ended, pod object not gone yet

	epReady          laneState = "ep-ready"           // endpoint ready: new connections go to it
	epServingTerm    laneState = "ep-serving-term"    // terminating but still serving (the fallback)
	epNotReady       laneState = "ep-not-ready"       // listed, not ready, not serving
	epTerminatingOut laneState = "ep-terminating-out" // terminating and not serving
)

// laneStates lists the states in the legend's order.
var laneStates = []laneState{podStarting, podReady, podUnready, podTerminating, podExited,
	epReady, epServingTerm, epNotReady, epTerminatingOut}

// stateText explains each state on hover and in the legend.
var stateText = map[laneState]string{
	podStarting:      "created, not ready",
	podReady:         "ready",
	podUnready:       "not ready",
	podTerminating:   "deletion requested, container running",
	podExited:        "container exited, pod not gone yet",
	epReady:          "endpoint ready",
	epServingTerm:    "endpoint terminating, still serving",
	epNotReady:       "endpoint not ready",
	epTerminatingOut: "endpoint terminating, not serving",
}

// segment is one span of a lane.
type segment struct {
	From, To float64 // offsets, seconds
	State    laneState
}

// marker is one instant on a lane.
type marker struct {
	T     float64
	Kind  string // "deletion", "sigkill", "exit", "evicted", "eviction-refused"
	Label string
	Title string
}

// lane is one pod's life on the timeline.
type lane struct {
	Pod      string
	Revision string
	Node     string // the node the pod runs on ("" if unknown)
	// Gaps are the times the pod's node had no serving endpoint under
	// externalTrafficPolicy: Local (report.NodeGaps): drawn across the
	// lane, what entered the node then was dropped.
	Gaps      []gapSpan
	Group     string    // "old", "new" or "other"
	Life      []segment // the pod's own state
	Endpoint  []segment
	Markers   []marker
	Failures  int // kept failures attributed to this pod (likely pod)
	FirstSeen float64
}

// gapSpan is a node gap as a lane shows it.
type gapSpan struct {
	From, To float64
	Title    string
}

// laneGroup is a heading and the lanes under it.
type laneGroup struct {
	Title string
	Lanes []*lane
}

// band is an outage drawn across the timeline.
type band struct {
	N          int // 1-based, as the page names it
	From, To   float64
	Count      int
	Classes    string
	Context    string
	FindingIDs []string
}

// stallSpan is a stall of the view of the cluster as the timeline draws it.
type stallSpan struct {
	From, To float64
	Title    string
}

// model is everything the page draws, in seconds from the run's start.
type model struct {
	r        *report.Report
	From, To float64 // the time axis' domain
	Buckets  []bucket
	MaxRate  float64
	Groups   []laneGroup
	Bands    []band
	// Stalls: report.ViewStalls, drawn under the outage bands.
	Stalls  []stallSpan
	Rollout []marker // triggered, complete, old pods gone
	// FailSeconds are the buckets holding at least one failure, drawn as
	// marks that stay visible at every zoom.
	FailSeconds []bucket
	// PathStrips: each path's own FailSeconds when the run probed several.
	PathStrips []pathStrip
}

// pathStrip is one path's seconds with a failure.
type pathStrip struct {
	Name        string
	FailSeconds []bucket
}

func newModel(r *report.Report) *model {
	clock := r.WallClock()
	placed := func(t int64) float64 { return clock.SecondAt(t).Sub(r.StartedAt).Seconds() }
	m := &model{r: r, Buckets: buckets(r.Series, placed)}
	off := func(t time.Time) float64 { return t.Sub(r.StartedAt).Seconds() }
	m.To = max(r.DurationS, float64(len(r.Series)), off(r.EndedAt))
	if n := len(m.Buckets); n > 0 {
		m.To = max(m.To, m.Buckets[n-1].T+m.Buckets[n-1].Span)
	}
	for _, e := range r.Timeline {
		m.To = max(m.To, off(e.At))
	}
	if m.To <= m.From {
		m.To = m.From + 1
	}
	for _, b := range m.Buckets {
		m.MaxRate = max(m.MaxRate, b.perSecond(b.OK+b.Failed), b.perSecond(b.Sent))
		if b.Failed > 0 {
			m.FailSeconds = append(m.FailSeconds, b)
		}
	}
	if len(r.Paths) > 1 {
		for _, p := range r.Paths {
			strip := pathStrip{Name: p.Name}
			for _, b := range buckets(p.Series, placed) {
				if b.Failed > 0 {
					strip.FailSeconds = append(strip.FailSeconds, b)
				}
			}
			m.PathStrips = append(m.PathStrips, strip)
		}
	}
	m.Groups = lanes(r, off, m.From, m.To)
	m.Bands = bands(r, off)
	for _, st := range r.ViewStalls {
		m.Stalls = append(m.Stalls, stallSpan{From: off(st.Start), To: off(st.End), Title: textrender.ViewStallLine(r, st)})
	}
	if ro := r.Rollout; ro != nil {
		for _, x := range []struct {
			at    *time.Time
			label string
		}{{ro.TriggeredAt, "rollout triggered"}, {ro.CompleteAt, "rollout complete"}, {ro.OldPodsGoneAt, "old pods gone"}} {
			if x.at != nil {
				t := off(*x.at)
				title := fmt.Sprintf("%s at %+.2fs", x.label, t)
				if end := textrender.OneRevisionEnd(r); end != "" && x.label == "old pods gone" {
					x.label, title = "done", fmt.Sprintf("done at %+.2fs: %s", t, end) // a drain, a scale
				}
				m.Rollout = append(m.Rollout, marker{T: t, Kind: "rollout", Label: x.label, Title: title})
			}
		}
		// A failed rollout's end, and an abort's way back to its end
		// (the run follows it until the aborted revision's pods are gone).
		for _, e := range r.Timeline {
			var label string
			switch e.Kind {
			case report.RolloutFailed:
				label = "rollout failed"
			case report.AbortedPodsGone:
				label = "aborted pods gone"
			default:
				continue
			}
			t := off(e.At)
			m.Rollout = append(m.Rollout, marker{T: t, Kind: "rollout", Label: label, Title: fmt.Sprintf("%s at %+.2fs: %s", label, t, e.Detail)})
		}
	}
	return m
}

// lanes builds one lane per pod from the timeline's events, grouped by
// revision: the old one first, then the new one, then any other. A pod
// that existed before the run starts at the axis' left edge.
func lanes(r *report.Report, off func(time.Time) float64, from, to float64) []laneGroup {
	byPod := map[string]*lane{}
	var order []*lane
	get := func(pod, rev string, t float64) *lane {
		l := byPod[pod]
		if l == nil {
			l = &lane{Pod: pod, FirstSeen: t}
			byPod[pod] = l
			order = append(order, l)
		}
		if l.Revision == "" {
			l.Revision = rev
		}
		return l
	}
	for _, p := range r.Pods {
		get(p.Pod, p.Revision, to)
	}
	events := slices.Clone(r.Timeline)
	slices.SortStableFunc(events, func(a, b report.Event) int { return a.At.Compare(b.At) })

	type open struct {
		pod, ep       laneState
		podAt, epAt   float64
		deleted, gone bool
	}
	state := map[string]*open{}
	closeSeg := func(segs *[]segment, s laneState, at, t float64) {
		if s != "" && t > at {
			*segs = append(*segs, segment{From: at, To: t, State: s})
		}
	}
	keys := report.NewIncarnations() // a StatefulSet's pods share names: a lane each
	for _, e := range events {
		if e.Pod == "" || e.Kind == report.KubeEvent {
			continue
		}
		key := keys.Key(e)
		t := max(off(e.At), from)
		l := get(key, e.Revision, t)
		l.FirstSeen = min(l.FirstSeen, t)
		if l.Node == "" {
			l.Node = e.Node
		}
		st := state[key]
		if st == nil {
			st = &open{}
			state[key] = st
		}
		setPod := func(s laneState) {
			if s == st.pod {
				return
			}
			closeSeg(&l.Life, st.pod, st.podAt, t)
			st.pod, st.podAt = s, t
		}
		setEP := func(s laneState) {
			if s == st.ep {
				return
			}
			closeSeg(&l.Endpoint, st.ep, st.epAt, t)
			st.ep, st.epAt = s, t
		}
		switch {
		case e.Kind == report.PodPresent:
			if e.Ready {
				setPod(podReady)
			} else {
				setPod(podStarting)
			}
		case e.Kind == report.PodCreated || e.Kind == report.PodScheduled:
			if st.pod == "" {
				setPod(podStarting)
			}
		case e.Kind == report.ContainerStarted:
			if st.pod == "" || st.pod == podExited && !st.deleted {
				setPod(podStarting)
			}
		case e.Kind == report.PodReady:
			if !st.deleted {
				setPod(podReady)
			}
		case e.Kind == report.PodUnready:
			if !st.deleted && st.pod != podExited {
				setPod(podUnready)
			}
		case e.Kind == report.PodDeletionRequested:
			st.deleted = true
			if st.pod != podExited {
				setPod(podTerminating)
			}
			l.Markers = append(l.Markers, marker{T: t, Kind: "deletion", Label: "deletion requested",
				Title: fmt.Sprintf("%s: deletion requested at %+.2fs", key, t)})
		case e.Kind == report.PodEvicted:
			l.Markers = append(l.Markers, marker{T: t, Kind: "evicted", Label: "evicted",
				Title: fmt.Sprintf("%s: evicted by the drain of %s at %+.2fs", key, e.Node, t)})
		case e.Kind == report.EvictionRefused:
			l.Markers = append(l.Markers, marker{T: t, Kind: "eviction-refused", Label: "eviction refused",
				Title: fmt.Sprintf("%s: eviction refused at %+.2fs (a PodDisruptionBudget; asked again): %s", key, t, e.Detail)})
		case e.Kind == report.EvictionFailed:
			l.Markers = append(l.Markers, marker{T: t, Kind: "eviction-refused", Label: "eviction failed",
				Title: fmt.Sprintf("%s: eviction failed at %+.2fs (not asked again): %s", key, t, e.Detail)})
		case e.Kind == report.EvictionOvertaken:
			l.Markers = append(l.Markers, marker{T: t, Kind: "eviction-refused", Label: "deleted otherwise",
				Title: fmt.Sprintf("%s: deleted by another hand than the drain's while its eviction was refused, found so at %+.2fs: %s", key, t, e.Detail)})
		case e.Kind == report.ContainerTerminated:
			setPod(podExited)
			code := "?"
			if e.ExitCode != nil {
				code = fmt.Sprint(*e.ExitCode)
			}
			kind, label := "exit", "exit "+code
			if e.Killed() {
				kind, label = "sigkill", "SIGKILL"
			}
			title := fmt.Sprintf("%s: %s exited with code %s at %+.2fs", key, report.ContainerNamed(e.Container, e.Sidecar), code, t)
			if e.Reason != "" {
				title += " (" + e.Reason + ")"
			}
			l.Markers = append(l.Markers, marker{T: t, Kind: kind, Label: label, Title: title})
		case e.Kind == report.PodGone:
			setPod("")
			setEP("")
			st.gone = true
		case e.Kind == report.EndpointRemoved:
			setEP("")
		case e.Kind.IsEndpoint():
			switch {
			case e.Ready:
				setEP(epReady)
			case e.Serving && e.Terminating:
				setEP(epServingTerm)
			case e.Terminating:
				setEP(epTerminatingOut)
			default:
				setEP(epNotReady)
			}
		}
	}
	for pod, st := range state {
		l := byPod[pod]
		closeSeg(&l.Life, st.pod, st.podAt, to)
		closeSeg(&l.Endpoint, st.ep, st.epAt, to)
	}
	for _, f := range r.Failures {
		if l := byPod[f.LikelyPod]; l != nil {
			l.Failures++
		}
	}
	for _, g := range r.NodeGaps {
		title := fmt.Sprintf("node %s had no serving endpoint (externalTrafficPolicy: Local), %+.2fs to %+.2fs: what entered it was dropped; %d failed",
			g.Node, off(g.Start), off(g.End), g.Failed)
		for _, l := range order {
			if l.Node == g.Node {
				l.Gaps = append(l.Gaps, gapSpan{From: max(off(g.Start), from), To: min(off(g.End), to), Title: title})
			}
		}
	}

	var old, new, other []*lane
	// A drain or a scale changes no revision: its pods are of one, neither
	// old nor new.
	oneRevision := r.Rollout != nil && r.Rollout.OldRevision == r.Rollout.NewRevision
	newTitle := "new revision"
	if oneRevision {
		newTitle = "revision"
	}
	for _, l := range order {
		switch {
		case r.Rollout != nil && l.Revision != "" && l.Revision == r.Rollout.OldRevision && !oneRevision:
			l.Group, old = "old", append(old, l)
		case r.Rollout != nil && l.Revision != "" && l.Revision == r.Rollout.NewRevision:
			l.Group, new = "new", append(new, l)
		default:
			l.Group, other = "other", append(other, l)
		}
	}
	byStart := func(a, b *lane) int {
		return cmp.Or(cmp.Compare(a.FirstSeen, b.FirstSeen), strings.Compare(a.Pod, b.Pod))
	}
	var groups []laneGroup
	for _, g := range []struct {
		title string
		ls    []*lane
	}{{"old revision", old}, {newTitle, new}, {"pods", other}} {
		if len(g.ls) == 0 {
			continue
		}
		slices.SortStableFunc(g.ls, byStart)
		title := g.title
		if rev := g.ls[0].Revision; rev != "" && g.title != "pods" {
			title += " " + rev
		}
		groups = append(groups, laneGroup{Title: title, Lanes: g.ls})
	}
	return groups
}

// bands are the report's outages, each linked to the findings that
// explain the pods its failures were attributed to (or, when none names a
// pod, to every finding from the traffic).
func bands(r *report.Report, off func(time.Time) float64) []band {
	var out []band
	for i, o := range r.Outages {
		b := band{N: i + 1, From: off(o.Start), To: off(o.End), Count: o.Count, Classes: classList(o.ByClass), Context: o.Context}
		if on := textrender.OutagePods(r, o, 5); on != "" {
			b.Context = strings.TrimPrefix(b.Context+"; on "+on, "; ")
		}
		pods := map[string]bool{}
		for _, f := range r.Failures {
			if f.Intended.Before(o.Start) || f.Intended.After(o.End) {
				continue
			}
			if f.LikelyPod != "" {
				pods[f.LikelyPod] = true
			}
			for _, c := range f.Candidates {
				pods[c] = true
			}
		}
		for _, f := range r.Findings {
			if f.Source != report.SourceTraffic {
				continue
			}
			if len(f.Pods) == 0 || slices.ContainsFunc(f.Pods, func(p string) bool { return pods[p] }) {
				b.FindingIDs = append(b.FindingIDs, f.ID)
			}
		}
		out = append(out, b)
	}
	return out
}

// classList is "refused 12, connect_timeout 8" in report order.
func classList(by map[string]uint64) string {
	var parts []string
	for _, c := range report.FailureClassNames() {
		if n := by[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
	}
	return strings.Join(parts, ", ")
}

// latencyRange is the log-scale domain of the latency chart in ms: whole
// decades around every value drawn.
func latencyRange(bs []bucket) (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, b := range bs {
		for _, v := range []float64{b.P50, b.P99, b.SvcP50, b.SvcP99} {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi == 0 {
		return 0.1, 1000
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	return lo, hi
}
