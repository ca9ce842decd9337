package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// spikeRun: pods a and b; a deleted at +5.3s. Each path's series has a
// success p99 of base ms a second, and the given seconds slower.
func spikeRun(paths map[string]map[int64]float64, base float64, seconds int) *report.Report {
	r := &report.Report{StartedAt: t0, EndedAt: at(seconds * 1000), Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		ev(5300, report.PodDeletionRequested, "a", "old"),
		ev(7000, report.PodGone, "a", "old")}}
	series := func(slow map[int64]float64) []report.SeriesRow {
		var rows []report.SeriesRow
		for t := int64(0); t < int64(seconds); t++ {
			v := base
			if s, ok := slow[t]; ok {
				v = s
			}
			rows = append(rows, report.SeriesRow{T: t, Sent: 100, OK: 100, OKServiceP99MS: v})
		}
		return rows
	}
	if len(paths) == 1 {
		for _, slow := range paths {
			r.Series = series(slow)
		}
		return r
	}
	for _, name := range []string{"svc", "edge", "gw"} {
		if slow, ok := paths[name]; ok {
			r.Paths = append(r.Paths, report.PathReport{Name: name, Series: series(slow)})
		}
	}
	return r
}

// Successes slow on one path right after a deletion, while the other path
// stayed fast: the finding names that path, the window from the deletion,
// the baseline and the other path's figure, and says nothing failed; the
// one preStop number covers the window.
func TestLatencySpikeOnOnePath(t *testing.T) {
	r := spikeRun(map[string]map[int64]float64{
		"svc":  {6: 30},
		"edge": {6: 1100, 7: 900},
	}, 20, 12)
	analyse(r)
	f := find(r, LatencySpikeAtDeletion)
	if f == nil || f.Severity != report.SeverityWarning {
		t.Fatalf("findings %+v: want a latency-spike warning", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"edge: the successes' p99 service time reached 1100ms from +6s to +8s", "against 20.0ms in the median second before the first deletion",
		"ended 2.7s after a's deletion", "the other paths in the same seconds: svc 30ms", "no request of this path failed"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(f.Title, "on edge") || strings.Contains(f.Title, "svc") {
		t.Errorf("title %q: want edge alone", f.Title)
	}
	// 2.7 s after the deletion: PreStopSeconds(2.7s) = ceil(5.05) = 6.
	if x := Explain(r); x.PreStopSeconds != 6 || !strings.Contains(f.Fix, "at least 6s") {
		t.Errorf("preStop %d, fix %q: want 6", x.PreStopSeconds, f.Fix)
	}
	if strings.Contains(ev, "one path only") {
		t.Errorf("the single-path caveat on a run of two paths:\n%s", ev)
	}
}

// The edge's access log, read by the run, measures what the slowness only
// suggests: requests that waited inside the edge outside their answering
// attempt in the spike's seconds (and the few before) make the title say
// so; a log that shows none makes it claim no retry;
// a log without the path's requests (the path did not go through that
// edge), or none read, leaves the likely reading as it was.
func TestLatencySpikeAgainstTheEdgeLog(t *testing.T) {
	spiked := func(log *report.EdgeLog) *report.Finding {
		r := spikeRun(map[string]map[int64]float64{"svc": {6: 30}, "edge": {6: 1100, 7: 900}}, 20, 12)
		r.EdgeLog = log
		analyse(r)
		return find(r, LatencySpikeAtDeletion)
	}
	for _, tc := range []struct {
		name       string
		log        *report.EdgeLog
		title, ev  string
		likelyText bool
		// retryFix: the fix rests on the edge's retries (a preStop that
		// outlasts its routing); without one measured it must not.
		retryFix bool
	}{
		{"retries in the spike", &report.EdgeLog{Requests: 800, RequestsByPath: map[string]int{"svc": 0, "edge": 800},
			Waits: []report.EdgeWaits{{Path: "edge", T: 5, Requests: 3}, {Path: "edge", T: 7, Requests: 2}, {Path: "edge", T: 11, Requests: 9}}},
			"slowed at pod deletions, the other paths' did not: retried inside the proxy (its access log shows the waits)",
			"the edge's access log: 5 of edge's requests it received from +1s to +8s waited 100ms or more inside it outside the attempt that answered them (its Overhead: failed attempts and a retry's backoff): measured", false, true},
		{"no retry logged", &report.EdgeLog{Requests: 800, RequestsByPath: map[string]int{"svc": 0, "edge": 800},
			Waits: []report.EdgeWaits{{Path: "edge", T: 11, Requests: 9}}},
			"slowed at pod deletions, the other paths' did not",
			"none of edge's requests it received from +1s to +8s waited 100ms inside it outside the attempt that answered them: the wait is not the edge's retries", false, false},
		{"the path not through this edge", &report.EdgeLog{Requests: 800, RequestsByPath: map[string]int{"svc": 800, "edge": 0}},
			"the other paths' did not: probably retried inside a proxy", "the likely reading, not a measurement", true, true},
		{"the log not read", &report.EdgeLog{Error: "open: no such file"},
			"the other paths' did not: probably retried inside a proxy", "the likely reading, not a measurement", true, true},
		{"no log", nil, "the other paths' did not: probably retried inside a proxy", "the likely reading, not a measurement", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := spiked(tc.log)
			if f == nil {
				t.Fatal("no latency-spike finding")
			}
			ev := strings.Join(f.Evidence, "\n")
			if !strings.HasSuffix(f.Title, tc.title) || !strings.Contains(ev, tc.ev) {
				t.Errorf("title %q, want it to end %q; evidence:\n%s\nwant %q", f.Title, tc.title, ev, tc.ev)
			}
			if got := strings.Contains(f.Fix, "a drop the proxy paid for") && strings.Contains(f.Fix, "preStop"); got != tc.retryFix {
				t.Errorf("the fix rests on the edge's retries: %v, want %v: %s", got, tc.retryFix, f.Fix)
			}
			if !tc.retryFix && !strings.Contains(f.Fix, "the edge did not retry") {
				t.Errorf("fix %q: want it to say where else the wait can be", f.Fix)
			}
			if strings.Contains(ev, "likely reading") != tc.likelyText {
				t.Errorf("the likely reading said %v, want %v:\n%s", !tc.likelyText, tc.likelyText, ev)
			}
		})
	}
}

// What is not a spike at a deletion: every path slowed at once (a common
// cause), a rise below the floor or the factor, slowness before the first
// deletion or long after it, or seconds whose slow successes waited on a
// retransmitted SYN.
func TestNoLatencySpike(t *testing.T) {
	for _, tc := range []struct {
		name  string
		paths map[string]map[int64]float64
		edit  func(*report.Report)
	}{
		{"every path slowed at once", map[string]map[int64]float64{"svc": {6: 400}, "edge": {6: 1100}}, nil},
		{"below the floor", map[string]map[int64]float64{"svc": {}, "edge": {6: 110}}, nil},
		{"below the factor", map[string]map[int64]float64{"svc": {}, "edge": {6: 70}}, nil},
		{"before the deletion", map[string]map[int64]float64{"svc": {}, "edge": {3: 900}}, nil},
		{"long after it", map[string]map[int64]float64{"svc": {}, "edge": {25: 900}}, nil},
		{"retransmitted SYNs", map[string]map[int64]float64{"svc": {}, "edge": {6: 1100}}, func(r *report.Report) { r.Paths[1].Series[6].SlowConnects = 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := spikeRun(tc.paths, 20, 30)
			if tc.edit != nil {
				tc.edit(r)
			}
			analyse(r)
			if f := find(r, LatencySpikeAtDeletion); f != nil {
				t.Errorf("finding %+v", f)
			}
		})
	}
}

// fromWrite gives every row of r the after-write p99 its service-time p99
// has, as a report from a prober that records both does when no success
// opened a connection.
func fromWrite(r *report.Report) {
	for i := range r.Paths {
		for j := range r.Paths[i].Series {
			row := &r.Paths[i].Series[j]
			row.OKAfterWriteP99MS = row.OKServiceP99MS
		}
	}
}

// The rule reads the time from the request's write when the report has it.
// Successes slow only in their connection's opening (a handshake with the
// proxy, slow on a busy machine, before the proxy had the request to
// retry) are no spike; a spike from the write is one even in a second with
// a retransmitted SYN, which that time leaves out; and the evidence says
// which time it read.
func TestLatencySpikeFromTheWrite(t *testing.T) {
	slowOpening := spikeRun(map[string]map[int64]float64{"svc": {}, "edge": {6: 1100}}, 20, 12)
	fromWrite(slowOpening)
	slowOpening.Paths[1].Series[6].OKAfterWriteP99MS = 25
	analyse(slowOpening)
	if f := find(slowOpening, LatencySpikeAtDeletion); f != nil {
		t.Errorf("slow handshakes flagged as a proxy's retries: %+v", f)
	}

	r := spikeRun(map[string]map[int64]float64{"svc": {}, "edge": {6: 1100}}, 20, 12)
	fromWrite(r)
	r.Paths[1].Series[6].SlowConnects = 3
	analyse(r)
	f := find(r, LatencySpikeAtDeletion)
	if f == nil {
		t.Fatalf("findings %+v: want the spike from the write, a retransmitted SYN in its second or not", r.Findings)
	}
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "edge: the successes' p99 time from the request's write reached 1100ms from +6s to +7s") {
		t.Errorf("evidence does not say the time read:\n%s", ev)
	}
}

// With one path there is nothing to compare with: the finding needs the
// path to have shown a proxy, stands on the baseline alone and says what
// else slows responses and how to tell. Without a proxy a slow second is
// not flagged at all.
func TestLatencySpikeOnTheOnlyPath(t *testing.T) {
	direct := spikeRun(map[string]map[int64]float64{"svc": {5: 1500}}, 20, 12)
	analyse(direct)
	if f := find(direct, LatencySpikeAtDeletion); f != nil {
		t.Errorf("a direct path's slow second flagged as a proxy's retry: %+v", f)
	}
	r, f := spikeOnTheOnlyPath(t, fail(5600, report.ClassProxy5xx, true, ""))
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"the successes' p99 service time reached 1500ms from +5s to +6s", "1 of this path's requests failed", "one path only, through a proxy", "--target svc="} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(ev, "it answered proxy_5xx in this run") {
		t.Errorf("evidence does not say how the proxy showed:\n%s", ev)
	}
	// The propagation finding's window (0.3 s) is shorter than the slow
	// successes' (0.7 s): it says the preStop covers both, and both fixes
	// name the same number.
	p := find(r, StopsBeforePropagation)
	if p == nil || !strings.Contains(strings.Join(p.Evidence, "\n"), "see "+LatencySpikeAtDeletion) {
		t.Fatalf("propagation finding %+v", p)
	}
	if x := Explain(r); !strings.Contains(p.Fix, "at least 3s") || !strings.Contains(f.Fix, "at least 3s") || x.PreStopSeconds != 3 {
		t.Errorf("preStop %d; fixes %q and %q: want 3 in both", x.PreStopSeconds, p.Fix, f.Fix)
	}
}

// A proxy shown by connections to an edge address alone (a starved edge's
// handshakes failed, no 5xx at all): the caveat says that, never a
// proxy_5xx the run did not count (a CI run's report did).
func TestLatencySpikeBehindAnEdgeWithout5xx(t *testing.T) {
	f := fail(5600, report.ClassTLS, true, "")
	f.ViaEdge = true
	_, spike := spikeOnTheOnlyPath(t, f)
	ev := strings.Join(spike.Evidence, "\n")
	if strings.Contains(ev, "proxy_5xx") || !strings.Contains(ev, "one path only, through a proxy (its failed connections in this run went to an address that is no Service's, node's or pod's") {
		t.Errorf("evidence:\n%s", ev)
	}
}

// spikeOnTheOnlyPath analyses a run of one path whose successes were slow
// at +5 s, with f its one failure in that second, and returns it and its
// latency-spike finding (the test fails without one).
func spikeOnTheOnlyPath(t *testing.T, f report.Failure) (*report.Report, *report.Finding) {
	t.Helper()
	r := spikeRun(map[string]map[int64]float64{"svc": {5: 1500}}, 20, 12)
	r.Failures = []report.Failure{f}
	r.Totals.ByClass = map[string]uint64{f.Class: 1}
	r.Series[5].Failed = 1
	analyse(r)
	spike := find(r, LatencySpikeAtDeletion)
	if spike == nil {
		t.Fatalf("findings %+v", r.Findings)
	}
	return r, spike
}

// A path whose target is the Service's own address or name (its Entry)
// has nothing between the prober and the pods to retry: its slow seconds
// are no proxy's retries (a lab run's Service path had a p99 of 282 ms
// after a deletion against the retrying edge's 52 ms), though it stays a
// path the others are compared with. What the run measured wins over the
// address: the same path is read as any other once it met a proxy (a
// connection to an edge address) or its requests are in the edge's log.
// A report without per-path entries falls back on the rollout's, which is
// the first path's.
func TestLatencySpikeNotOnADirectPath(t *testing.T) {
	clusterIP := &report.Entry{Via: report.ViaClusterIP, Port: 80}
	slowService := func(edit func(*report.Report)) *report.Finding {
		r := spikeRun(map[string]map[int64]float64{"svc": {6: 1100}, "edge": {6: 30}}, 20, 12)
		r.Paths[0].Entry = clusterIP
		if edit != nil {
			edit(r)
		}
		analyse(r)
		return find(r, LatencySpikeAtDeletion)
	}
	if f := slowService(nil); f != nil {
		t.Errorf("the Service's own path read as retried: %+v", f)
	}
	if f := slowService(func(r *report.Report) { r.Paths[0].Entry, r.Rollout = nil, &report.Rollout{Entry: clusterIP} }); f != nil {
		t.Errorf("an older report's entry path read as retried: %+v", f)
	}
	for name, edit := range map[string]func(*report.Report){
		"no entry": func(r *report.Report) { r.Paths[0].Entry = nil },
		"a connection to an edge address": func(r *report.Report) {
			f := fail(6200, report.ClassTLS, true, "")
			f.Path, f.ViaEdge = "svc", true
			r.Failures = []report.Failure{f}
		},
		"its requests in the edge's log": func(r *report.Report) {
			r.EdgeLog = &report.EdgeLog{Requests: 800, RequestsByPath: map[string]int{"svc": 800}}
		},
	} {
		f := slowService(edit)
		if f == nil || !strings.Contains(strings.Join(f.Evidence, "\n"), "svc: the successes' p99 service time reached 1100ms") {
			t.Errorf("%s: finding %+v: want the svc path's spike", name, f)
		}
	}
	// Compared with: the edge path's spike stands against the Service
	// path's fast seconds, and not when those were as slow.
	edgeSpike := func(svc float64) *report.Finding {
		r := spikeRun(map[string]map[int64]float64{"svc": {6: svc}, "edge": {6: 1100}}, 20, 12)
		r.Paths[0].Entry = clusterIP
		analyse(r)
		return find(r, LatencySpikeAtDeletion)
	}
	if f := edgeSpike(30); f == nil || !strings.Contains(f.Title, "on edge") {
		t.Errorf("the edge path's spike against a fast Service path: %+v", f)
	}
	if f := edgeSpike(400); f != nil {
		t.Errorf("the edge path flagged while the Service path was as slow: %+v", f)
	}
}

// The spike's fix names the container to hold, as the propagation
// finding's does, where the deleted pod's exits say which has the
// Service's port.
func TestLatencySpikeFixNamesTheServingContainer(t *testing.T) {
	r := spikeRun(map[string]map[int64]float64{"svc": {6: 30}, "edge": {6: 1100, 7: 900}}, 20, 12)
	exit := exited(6000, 6000, "a")
	exit.Container, exit.ServicePort = "app", true
	r.Timeline = append(r.Timeline, exit)
	analyse(r)
	if f := find(r, LatencySpikeAtDeletion); f == nil || !strings.Contains(f.Fix, "give container app a preStop hook") {
		t.Fatalf("finding %+v: want the fix to name container app", f)
	}
}

// A path straight to the Service whose every proxy_5xx a pod's own proxy
// answered (a proxy container in front of the app) met no proxy before
// the pods, none to retry on another pod: its slow seconds are no
// retry's, as a direct path's are not (the lab's app-first run had one,
// with advice to probe the Service it was probing). A proxy_5xx sent to
// an edge's address is the edge's, and the path is read as through it.
func TestLatencySpikeNotThroughThePodsOwnProxy(t *testing.T) {
	spike := func(viaEdge bool) *report.Finding {
		r := spikeRun(map[string]map[int64]float64{"svc": {5: 1500}}, 20, 12)
		f := fail(5600, report.ClassProxy5xx, true, "")
		f.ViaEdge = viaEdge
		r.Failures = []report.Failure{f}
		r.Totals.ByClass = map[string]uint64{report.ClassProxy5xx: 1}
		r.Series[5].Failed = 1
		r.Rollout = &report.Rollout{TriggerSeenAfterMS: 20, Entry: &report.Entry{Via: report.ViaClusterIP, Port: 80}}
		analyse(r)
		return find(r, LatencySpikeAtDeletion)
	}
	if f := spike(false); f != nil {
		t.Errorf("a spike read as retried through the pods' own proxy: %+v", f)
	}
	if f := spike(true); f == nil {
		t.Errorf("no spike through an edge's address")
	}
}
