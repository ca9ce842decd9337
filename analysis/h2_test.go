package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// h2Fail is an HTTP/2 stream failure on a kept-alive connection.
func h2Fail(ms int, class, goAway string) report.Failure {
	f := fail(ms, class, false, "")
	f.Phase, f.GoAway = "read_headers", goAway
	return f
}

// HTTP/2 failures at a terminating pod are explained by how the
// connection ended, not by the propagation race: a close without GOAWAY
// is one finding, a GOAWAY that left streams behind another, and the fix
// follows what the frames showed.
func TestH2Findings(t *testing.T) {
	exit := int32(0)
	timeline := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		ev(4000, report.PodCreated, "n", "new"),
		ev(4500, report.PodReady, "n", "new"),
		ev(5000, report.PodDeletionRequested, "a", "old"),
		{At: at(5010), Kind: report.ContainerTerminated, Pod: "a", Revision: "old", ExitCode: &exit},
		ev(7000, report.PodDeletionRequested, "b", "old"),
	}
	r := &report.Report{StartedAt: t0, Config: report.Config{Protocol: "h2"}, Timeline: timeline, Failures: []report.Failure{
		h2Fail(5020, report.ClassClosedNoGoAway, ""),
		h2Fail(5021, report.ClassReset, ""),
		h2Fail(7020, report.ClassGoAwayUnprocessed, report.GoAwaySingle),
		h2Fail(7021, report.ClassGoAwayUnprocessed, report.GoAwaySingle),
		h2Fail(7022, report.ClassGoAwayCut, report.GoAwaySingle),
	}}
	analyse(r)
	closed := find(r, H2CloseWithoutGoAway)
	if closed == nil || !strings.Contains(closed.Evidence[0], "2 streams in flight failed (closed_no_goaway 1, reset 1)") {
		t.Fatalf("close without GOAWAY: %+v (all %+v)", closed, r.Findings)
	}
	dropped := find(r, H2GoAwayDroppedStreams)
	if dropped == nil {
		t.Fatalf("no %s: %+v", H2GoAwayDroppedStreams, r.Findings)
	}
	evidence := strings.Join(dropped.Evidence, " | ")
	for _, want := range []string{"3 streams failed", "2 were above the last stream ID", "single (one frame naming the last stream) for 3, graceful (2^31-1, then the last stream) for 0, none for 0", "1 were at or below"} {
		if !strings.Contains(evidence, want) {
			t.Errorf("evidence %q lacks %q", evidence, want)
		}
	}
	if !strings.Contains(dropped.Fix, "two phases") || !strings.Contains(dropped.Fix, "finish the streams in flight") {
		t.Errorf("fix %q", dropped.Fix)
	}
	if find(r, StopsBeforePropagation) != nil || find(r, AbruptKeepAliveClose) != nil || find(r, Unexplained) != nil {
		t.Errorf("HTTP/2 failures claimed by another rule: %+v", r.Findings)
	}

	// gRPC runs on the same streams: the same findings.
	g := &report.Report{StartedAt: t0, Config: report.Config{Protocol: "grpc"}, Timeline: timeline, Failures: []report.Failure{h2Fail(5020, report.ClassClosedNoGoAway, "")}}
	analyse(g)
	if find(g, H2CloseWithoutGoAway) == nil {
		t.Errorf("gRPC close without GOAWAY: %+v", g.Findings)
	}

	// The same reset on HTTP/1.1 is the keep-alive finding's, as before.
	r1 := &report.Report{StartedAt: t0, Timeline: timeline, Failures: []report.Failure{h2Fail(5021, report.ClassReset, "")}}
	analyse(r1)
	if find(r1, AbruptKeepAliveClose) == nil || find(r1, H2CloseWithoutGoAway) != nil {
		t.Errorf("HTTP/1.1 reset: %+v", r1.Findings)
	}
}

// Long-lived connections outlive endpoint changes: a deleted pod keeps
// answering its connections' streams (info), and after the rollout the
// new pods' shares follow where the connections happened to land.
func TestH2ConnectionFindings(t *testing.T) {
	gone := at(8000)
	r := func(rows ...report.SeriesRow) *report.Report {
		return &report.Report{StartedAt: t0,
			Config:  report.Config{Protocol: "grpc", Connections: 10, BackendHeader: "x-pod-name"},
			Rollout: &report.Rollout{TriggerSeenAfterMS: 20, NewRevision: "new", OldPodsGoneAt: &gone},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
				ev(3000, report.PodCreated, "n1", "new"), ev(3000, report.PodCreated, "n2", "new"), ev(3000, report.PodCreated, "n3", "new"),
				ev(4000, report.PodReady, "n1", "new"), ev(4000, report.PodReady, "n2", "new"), ev(4000, report.PodReady, "n3", "new"),
				ev(5000, report.PodDeletionRequested, "a", "old"),
				ev(7500, report.PodGone, "a", "old"),
			},
			Series: append([]report.SeriesRow{
				{T: 5, Backends: map[string]uint64{"a": 10}},
				{T: 6, Backends: map[string]uint64{"a": 8}},
			}, rows...)}
	}
	uneven := r(report.SeriesRow{T: 8, Backends: map[string]uint64{"n1": 100, "n2": 30, "n3": 20}})
	analyse(uneven)
	pinned := find(uneven, H2PinnedToTerminating)
	if pinned == nil || pinned.Severity != report.SeverityInfo ||
		!strings.Contains(pinned.Evidence[0], "a answered 8 requests after its deletion was requested, the last in the second ending 2s after it") {
		t.Fatalf("pinned: %+v (all %+v)", pinned, uneven.Findings)
	}
	u := find(uneven, H2UnevenAfterRollout)
	if u == nil || !strings.Contains(u.Evidence[0], "n1 100 (67%), n2 30 (20%), n3 20 (13%)") || strings.Join(u.Pods, ",") != "n1,n2,n3" {
		t.Fatalf("uneven: %+v", u)
	}
	even := r(report.SeriesRow{T: 8, Backends: map[string]uint64{"n1": 50, "n2": 50, "n3": 40}})
	analyse(even)
	if find(even, H2UnevenAfterRollout) != nil {
		t.Errorf("50/50/40 called uneven: %+v", even.Findings)
	}
	// A new pod that answered nothing at all is the most uneven.
	idle := r(report.SeriesRow{T: 8, Backends: map[string]uint64{"n1": 70, "n2": 70}})
	analyse(idle)
	if u := find(idle, H2UnevenAfterRollout); u == nil || !strings.Contains(u.Evidence[0], "n3 0 (0%)") {
		t.Errorf("a pod with no connection: %+v", idle.Findings)
	}
	// A scale-out keeps the revision: its pods are said as the scale's,
	// not a rollout's new ones.
	scaled := r(report.SeriesRow{T: 8, Backends: map[string]uint64{"n1": 140}})
	scaled.Rollout.Change, scaled.Rollout.OldRevision = report.ChangeScale, "new"
	analyse(scaled)
	if u := find(scaled, H2UnevenAfterRollout); u == nil || u.Title != "after the scale, long-lived connections left the pods unevenly loaded" ||
		!strings.HasPrefix(u.Evidence[0], "from +8s (it was over) to the end, the 3 pods answered: n1 140 (100%), n2 0 (0%), n3 0 (0%)") {
		t.Errorf("after a scale-out: %+v", scaled.Findings)
	}
	// A drain is said as one; a change the run could not name (a report
	// without rollout.change) as "the change", never guessed from the
	// trigger's words.
	for change, want := range map[report.ChangeKind]string{report.ChangeDrain: "the drain", "": "the change"} {
		other := r(report.SeriesRow{T: 8, Backends: map[string]uint64{"n1": 140}})
		other.Rollout.Change, other.Rollout.OldRevision = change, "new"
		other.Rollout.Trigger = "scale from 1 replica to 3 (kubectl scale --replicas=3)"
		analyse(other)
		if u := find(other, H2UnevenAfterRollout); u == nil || u.Title != "after "+want+", long-lived connections left the pods unevenly loaded" {
			t.Errorf("change %q: %+v", change, other.Findings)
		}
	}
	// Whether the connections end at the pods or at an edge, by what the
	// run measured: the target the Service's own address (direct), the
	// edge's access log holding the run's requests, a failed connection
	// to an address that is no Service's, node's or pod's, or nothing.
	for _, tc := range []struct {
		name        string
		edit        func(*report.Report)
		title, says string
		uneven      bool
		unsaid      string // the evidence must not say it
	}{
		{"at the Service's address", func(r *report.Report) {
			r.Rollout.Entry = &report.Entry{Via: report.ViaNodePort, Node: "node-1", Port: 30093}
		},
			"HTTP/2 connections kept sending", "an endpoint change never moves an established HTTP/2 connection", true, ""},
		{"two paths, each at the Service's address or name", func(r *report.Report) {
			at := &report.Entry{Via: report.ViaClusterIP, Port: 80}
			r.Paths = []report.PathReport{{Name: "ip", Entry: at, Series: r.Series}, {Name: "name", Entry: at, Series: r.Series}}
		},
			"HTTP/2 connections kept sending", "an endpoint change never moves an established HTTP/2 connection", true, "nothing in this run says"},
		{"by a name, nothing measured", nil,
			"HTTP/2 connections kept sending", "if the target is an edge (an ingress or a proxy: nothing in this run says)", true, ""},
		{"through the edge, by its access log", func(r *report.Report) { r.EdgeLog = &report.EdgeLog{Format: "traefik", Requests: 2000} },
			"the edge kept sending HTTP/2 calls", "the run's connections end at an edge (the edge's access log holds the run's requests), which picks a pod for each call", false, ""},
		{"through the edge, by a failed connection", func(r *report.Report) {
			r.Failures = []report.Failure{{Class: report.ClassProxy5xx, RemoteAddr: "10.100.0.1:443", ViaEdge: true}}
		}, "the edge kept sending HTTP/2 calls", "failed connections went to an address that is none of the Service's", false, ""},
		{"an access log that holds none of the run's requests", func(r *report.Report) { r.EdgeLog = &report.EdgeLog{Format: "traefik"} },
			"HTTP/2 connections kept sending", "nothing in this run says", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := r(report.SeriesRow{T: 8, Backends: map[string]uint64{"n1": 100, "n2": 30, "n3": 20}})
			if tc.edit != nil {
				tc.edit(run)
			}
			analyse(run)
			p := find(run, H2PinnedToTerminating)
			if p == nil || !strings.HasPrefix(p.Title, tc.title) || !strings.Contains(strings.Join(p.Evidence, "\n"), tc.says) {
				t.Fatalf("pinned: %+v, want a title from %q saying %q", p, tc.title, tc.says)
			}
			if tc.unsaid != "" && strings.Contains(strings.Join(p.Evidence, "\n"), tc.unsaid) {
				t.Errorf("pinned evidence says %q:\n%s", tc.unsaid, strings.Join(p.Evidence, "\n"))
			}
			if edge := strings.HasPrefix(tc.title, "the edge"); edge != strings.Contains(p.Fix, "does not move the edge's calls") ||
				edge == strings.Contains(p.Fix, "cap connection age") {
				t.Errorf("fix %q for a run through the edge: %v", p.Fix, edge)
			}
			if got := find(run, H2UnevenAfterRollout) != nil; got != tc.uneven {
				t.Errorf("uneven finding %v, want %v (an edge places no connection on a pod)", got, tc.uneven)
			}
		})
	}
	// HTTP/1.1 spreads per connection it opens: neither finding.
	h1 := r(report.SeriesRow{T: 8, Backends: map[string]uint64{"n1": 100, "n2": 30, "n3": 20}})
	h1.Config.Protocol, h1.Config.Connections = "", 0
	analyse(h1)
	if find(h1, H2UnevenAfterRollout) != nil || find(h1, H2PinnedToTerminating) != nil {
		t.Errorf("HTTP/1.1: %+v", h1.Findings)
	}
}
