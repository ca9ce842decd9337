package analysis

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// nginx through a rollout: two pods serving, one deleted at +5 s; nginx
// answered 502s at +5.3 s and +5.4 s with no live upstream (its log names
// the group, no address), while the API listed a serving pod. From the
// timeline alone they would be put on the deleted pod; the log says no pod
// took part. They get their own finding, name no pod and size no preStop.
// With the Service empty in the API too, its gap explains them.
func TestEdgeNoBackendReachedNoPod(t *testing.T) {
	timeline := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.244.1.5"},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.244.2.6"},
		endpointAt(1, report.EndpointAdded, "a", "10.244.1.5", true, true),
		endpointAt(1, report.EndpointAdded, "b", "10.244.2.6", true, true),
		ev(5000, report.PodDeletionRequested, "a", "old"),
		endpointAt(5050, report.EndpointTerminating, "a", "10.244.1.5", false, false),
	}
	build := func(noBackend bool, tl []report.Event) *report.Report {
		var fs []report.Failure
		for _, ms := range []int{5300, 5400} {
			f := fail(ms, report.ClassProxy5xx, true, "")
			f.Status, f.ViaEdge, f.EdgeNoBackend = 502, true, noBackend
			fs = append(fs, f)
		}
		return &report.Report{StartedAt: t0, EndedAt: at(10000), Timeline: tl, Failures: fs,
			EdgeLog: &report.EdgeLog{File: "nginx.log", Format: "nginx", Requests: 100, FailuresNoBackend: 2},
			Rollout: &report.Rollout{Kind: "Deployment", Name: "web", Service: "web"}}
	}
	inferred := build(false, timeline)
	analyse(inferred)
	if f := inferred.Failures[0]; f.LikelyPod != "a" {
		t.Fatalf("without the log's word: %+v; want the deleted pod inferred (the scene this test is about)", f)
	}

	r := build(true, timeline)
	analyse(r)
	for _, f := range r.Failures {
		if f.LikelyPod != "" || f.Confidence != 0 || f.Candidates != nil || f.Evidence != "" || f.Context != noBackendContext {
			t.Errorf("failure %+v: want no pod named, the context saying the edge sent it nowhere", f)
		}
	}
	if find(r, StopsBeforePropagation) != nil || find(r, Unexplained) != nil {
		t.Errorf("findings %+v: the edge's own answers are no pod's race and not unexplained", r.Findings)
	}
	if x := Explain(r); x.PreStopSeconds != 0 {
		t.Errorf("preStop advice %ds sized from failures that reached no pod", x.PreStopSeconds)
	}
	fd := find(r, EdgeHadNoBackend)
	if fd == nil || fd.Severity != report.SeverityError {
		t.Fatalf("findings %+v: want %s", r.Findings, EdgeHadNoBackend)
	}
	ev := strings.Join(fd.Evidence, "\n")
	for _, want := range []string{"2 requests failed (proxy_5xx 2)", "its access log (nginx.log, nginx) names no backend",
		"+5.30s (proxy_5xx 502): the API listed 1 serving endpoints, unchanged since +5.05s (0.25s before)", "max_fails"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(fd.Title, "the edge had no pod of service web to send 2 requests to while the API listed 1 serving endpoints") {
		t.Errorf("title %q", fd.Title)
	}

	// b gone from the API too: the Service had nothing to serve, and its
	// own finding takes them.
	empty := append(append([]report.Event{}, timeline...), endpointAt(5100, report.EndpointTerminating, "b", "10.244.2.6", false, false))
	r = build(true, empty)
	analyse(r)
	if find(r, EdgeHadNoBackend) != nil || find(r, NoServingEndpoint) == nil {
		t.Errorf("findings %+v: want %s, not %s", r.Findings, NoServingEndpoint, EdgeHadNoBackend)
	}
}

// An Argo canary through a weighted TraefikService, as the lab met it:
// the canary's one pod c failed a readiness probe at +8.6 s and was ready
// again at +9.9 s; Traefik, left with a TraefikService one of whose
// Services had no server, dropped the route and answered 404 for the
// host for 2 s. Every 404 lacks X-Pod-Name, which the pods put on every
// response: the edge answered them, no pod did. By the timeline alone
// they were put on c as a new pod not ready yet, with a readiness probe
// for a fix it already had.
func TestEdgeAnsweredWithoutTheBackendHeader(t *testing.T) {
	timeline := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.244.1.5"},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.244.2.6"},
		endpointAt(1, report.EndpointAdded, "a", "10.244.1.5", true, true),
		endpointAt(1, report.EndpointAdded, "b", "10.244.2.6", true, true),
		ev(2200, report.PodCreated, "c", "new"),
		ev(3500, report.PodReady, "c", "new"),
		{At: at(8600), Kind: report.KubeEvent, Pod: "c", Detail: `Pod c: Readiness probe failed: Get "http://10.244.1.3:8080/readyz": context deadline exceeded`},
		ev(8620, report.PodUnready, "c", "new"),
		ev(9860, report.PodReady, "c", "new"),
	}
	build := func(header string, status int, viaEdge bool) *report.Report {
		var fs []report.Failure
		for ms := 8630; ms < 10630; ms += 250 {
			f := fail(ms, report.ClassHTTPStatus, false, "")
			if status >= 500 {
				f.Class = report.ClassProxy5xx
			}
			f.Status, f.ViaEdge = status, viaEdge
			fs = append(fs, f)
		}
		r := &report.Report{StartedAt: t0, EndedAt: at(20000), Timeline: timeline, Failures: fs,
			Rollout: &report.Rollout{Kind: "Rollout", Name: "web", Service: "web", TriggerSeenAfterMS: 20}}
		r.Config.BackendHeader = header
		return r
	}

	// Without the header's word the timeline is all there is: the scene
	// this test is about.
	// (A 502 is the edge's word for a pod it could not reach.)
	for _, r := range []*report.Report{build("", 404, true), build("X-Pod-Name", 404, false), build("X-Pod-Name", 502, true), build("", 503, true)} {
		analyse(r)
		if f := r.Failures[len(r.Failures)-1]; f.LikelyPod != "c" || find(r, EdgeHadNoBackend) != nil {
			t.Fatalf("header %q, status %d, via the edge %v: last failure %+v, findings %v; want the timeline's pod c and no edge finding",
				r.Config.BackendHeader, f.Status, f.ViaEdge, f, r.Findings)
		}
	}

	r := build("X-Pod-Name", 404, true)
	analyse(r)
	for _, f := range r.Failures {
		if f.LikelyPod != "" || f.Confidence != 0 || f.Candidates != nil || f.Evidence != "" ||
			f.Context != "the edge answered it itself (status 404 without X-Pod-Name, which the pods put on every response of their own): no pod took part" {
			t.Errorf("failure %+v: want no pod named, the context saying the edge answered", f)
		}
	}
	if find(r, ReadyTooEarly) != nil || find(r, Unexplained) != nil {
		t.Errorf("findings %+v: the edge's own answers are no new pod's and not unexplained", r.Findings)
	}
	fd := find(r, EdgeHadNoBackend)
	if fd == nil || fd.Severity != report.SeverityError {
		t.Fatalf("findings %+v: want %s", r.Findings, EdgeHadNoBackend)
	}
	ev := strings.Join(fd.Evidence, "\n")
	for _, want := range []string{
		"8 requests failed (http_status 8) from +8.63s to +10.38s through the edge with a status below 500 and without X-Pod-Name",
		`pod c turned unready at +8.62s, not deleted; Kubernetes: Readiness probe failed: Get "http://10.244.1.3:8080/readyz": context deadline exceeded; ready again at +9.86s`,
		"Traefik drops a weighted TraefikService",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if strings.Contains(ev, "access log") && strings.Contains(ev, "names no backend for any") {
		t.Errorf("evidence cites an access log the run did not read:\n%s", ev)
	}
	if !strings.Contains(fd.Fix, "Argo Rollouts weighs a canary with no available pod 0") || !strings.Contains(fd.Fix, "failureThreshold above 1") {
		t.Errorf("fix %q", fd.Fix)
	}

	// A 503 the edge made itself (no X-Pod-Name) while the canary's one
	// pod was unready and no pod was terminating: a Traefik with
	// allowEmptyServices answers the empty Service's share so. No pod, the
	// same finding with its own line; not ready-before-serving (whose fix,
	// a readiness probe, c has) nor unexplained, as the timeline alone had
	// them.
	r = build("X-Pod-Name", 503, true)
	analyse(r)
	for _, f := range r.Failures {
		if f.LikelyPod != "" || f.Candidates != nil || !strings.Contains(f.Context, "(status 503 without X-Pod-Name, which the pods put on every response of their own) while pod c was unready and no pod was terminating") {
			t.Errorf("503 failure %+v: want no pod named, the context naming c unready", f)
		}
	}
	if find(r, ReadyTooEarly) != nil || find(r, Unexplained) != nil {
		t.Errorf("findings %+v: the edge's own 503s are no new pod's and not unexplained", r.Findings)
	}
	if fd := find(r, EdgeHadNoBackend); fd == nil || !strings.Contains(strings.Join(fd.Evidence, "\n"),
		"8 requests failed (proxy_5xx 8) from +8.63s to +10.38s through the edge with status 503 and without X-Pod-Name, while a pod was unready and none was terminating") {
		t.Errorf("finding %+v: want %s with the 503s' line", fd, EdgeHadNoBackend)
	}
	// The edge heard of c's unreadiness before rollprobe's watch did: a
	// 503 that began 15 ms before the watch's PodUnready, within the
	// receive tolerance (20 ms: the trigger's round trip), is put beside
	// c too (as the Service's gap counts such early failures its own); one
	// 40 ms before, beyond it, is not.
	r = build("X-Pod-Name", 503, true)
	early, tooEarly := fail(8605, report.ClassProxy5xx, false, ""), fail(8580, report.ClassProxy5xx, false, "")
	for _, f := range []*report.Failure{&early, &tooEarly} {
		f.Status, f.ViaEdge = 503, true
	}
	r.Failures = append([]report.Failure{tooEarly, early}, r.Failures...)
	analyse(r)
	if f := r.Failures[1]; !strings.Contains(f.Context, "while pod c was unready and no pod was terminating") {
		t.Errorf("503 15 ms before the watch heard c unready: context %q, want c named", f.Context)
	}
	if f := r.Failures[0]; strings.Contains(f.Context, "while pod c was unready") {
		t.Errorf("503 40 ms before the watch heard c unready, beyond the tolerance: context %q, want c not named", f.Context)
	}

	// Beside a pod being deleted, a 503 without the header may be the edge
	// relaying a pod it could not reach: the timeline's, as before.
	r = build("X-Pod-Name", 503, true)
	r.Timeline = inOrder(append(slices.Clone(r.Timeline), report.Event{At: at(8000), Kind: report.PodDeletionRequested, Pod: "a", Revision: "old"}))
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "a" || strings.Contains(f.Context, "was unready") {
		t.Errorf("503 beside a's deletion: %+v, want the timeline's pod a", f)
	}

	// The edge's access log naming the pod it sent a request to outranks
	// the header's absence: that request is the pod's (its own 404), and
	// no edge finding claims it.
	r = build("X-Pod-Name", 404, true)
	for i := range r.Failures {
		r.Failures[i].UpstreamAddr = "10.244.1.5:8080"
	}
	analyse(r)
	if f := r.Failures[0]; f.LikelyPod != "a" || f.Evidence != report.EvidenceAccessLog || find(r, EdgeHadNoBackend) != nil {
		t.Errorf("with the access log naming pod a: %+v, findings %v; want a by access_log, no edge finding", f, r.Findings)
	}

	// A pod that lost readiness long before, or because it was deleted,
	// is not named.
	timeline[6].At, timeline[7].At = at(4000), at(4020)
	r = build("X-Pod-Name", 404, true)
	analyse(r)
	if fd := find(r, EdgeHadNoBackend); fd == nil || strings.Contains(strings.Join(fd.Evidence, "\n"), "turned unready") {
		t.Errorf("finding %+v: an unready 4.6 s before the failures is named", fd)
	}
}

// A route weighted by hand over two Services, web's one pod a made
// unready (no rollout): web has no serving endpoint from +5 s to +8 s.
// Probed through two edges: one drops the route whole (every request
// its own 404, none served by the other Service's pod b meanwhile), the
// other keeps it (its own 503s for web's share, b serving the rest).
// The Service's gap explains both (no serving endpoint), those the edges
// answered 10 ms before rollprobe's watch heard of it too, and says, from
// each path's own traffic in the whole seconds of the edge's answers,
// which edge failed the whole route: its fix then keeps the route. A path
// whose route reached no pod outside web says nothing of a share. A path
// that never got an answer from web's pods (its Service a mirror of the
// route: the lab's traefik-weighted-mirror) yet failed whole in the gap
// is said to depend on web; one that went on serving says nothing, nor
// does one when no path's header named web's pods.
func TestEmptyServiceBehindAWeightedRoute(t *testing.T) {
	build := func(paths ...string) *report.Report {
		r := &report.Report{StartedAt: t0, EndedAt: at(12000),
			Rollout: &report.Rollout{Kind: "Deployment", Name: "web", Service: "web", Status: report.StatusNoChange},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "one", Ready: true, IP: "10.244.1.5"},
				endpointAt(1, report.EndpointAdded, "a", "10.244.1.5", true, true),
				ev(4950, report.PodUnready, "a", "one"),
				endpointAt(5000, report.EndpointUnready, "a", "10.244.1.5", false, false),
				ev(7950, report.PodReady, "a", "one"),
				endpointAt(8000, report.EndpointReady, "a", "10.244.1.5", true, true),
			}}
		r.Config.BackendHeader = "X-Pod-Name"
		for _, name := range paths {
			p := report.PathReport{Name: name, Totals: report.Totals{ByBackend: map[string]uint64{"a": 500, "b-1": 1100}}}
			status, class := 404, report.ClassHTTPStatus
			if name == "allow-empty" {
				status, class = 503, report.ClassProxy5xx
			}
			for sec := int64(0); sec < 12; sec++ {
				row := report.SeriesRow{T: sec, Backends: map[string]uint64{"a": 50, "b-1": 50}}
				switch name {
				case "by-version":
					row.Backends = map[string]uint64{"v1": 100}
				case "mirror", "elsewhere":
					row.Backends = map[string]uint64{"b-1": 100}
				}
				if sec >= 5 && sec < 8 {
					row.Backends = map[string]uint64{}
					if name == "allow-empty" || name == "elsewhere" {
						row.Backends["b-1"] = 50
					}
					// From 10 ms before the gap (+4.99 s): the edge heard
					// of the pod's unreadiness before rollprobe's watch did.
					for ms := int(sec)*1000 - 20; ms < int(sec+1)*1000-20; ms += 100 {
						f := fail(ms+10, class, false, "")
						f.Status, f.ViaEdge, f.Path = status, true, name
						r.Failures = append(r.Failures, f)
					}
				}
				p.Series = append(p.Series, row)
			}
			switch name {
			case "alone":
				p.Totals.ByBackend = map[string]uint64{"a": 900}
			case "by-version":
				p.Totals.ByBackend = map[string]uint64{"v1": 900}
			case "mirror", "elsewhere":
				p.Totals.ByBackend = map[string]uint64{"b-1": 900}
			}
			r.Paths = append(r.Paths, p)
		}
		sort.SliceStable(r.Failures, func(i, j int) bool { return r.Failures[i].Intended.Before(r.Failures[j].Intended) })
		return r
	}

	r := build("edge", "allow-empty")
	analyse(r)
	fd := find(r, NoServingEndpoint)
	if fd == nil {
		t.Fatalf("findings %+v: want %s", r.Findings, NoServingEndpoint)
	}
	ev := strings.Join(fd.Evidence, "\n")
	for _, want := range []string{
		"60 of them (http_status 30, proxy_5xx 30) the edge answered itself (its access log names no backend for them, or the response lacks X-Pod-Name",
		"path allow-empty's route also reached pods outside service web during the run (b-1), and in the 2 whole seconds within its 30 answers of the edge's own it served 100 requests from them: the edge kept the route",
		"path edge's route also reached pods outside service web during the run (b-1), and in the 2 whole seconds within its 30 answers of the edge's own it served none of them: the edge failed the whole route",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(fd.Fix, "allowEmptyServices=true: Traefik keeps the route") {
		t.Errorf("fix %q: want the route kept", fd.Fix)
	}
	if !strings.Contains(ev, "60 requests failed in it or within 3s after (2 of them began up to 0.010s before it:") {
		t.Errorf("evidence: want the gap's count to say the 2 that began before it:\n%s", ev)
	}
	if !strings.Contains(ev, "60 requests failed (http_status 30, proxy_5xx 30) from +4.99s to +7.89s") || find(r, EdgeHadNoBackend) != nil {
		t.Errorf("findings %v: want every failure the gap's, those just before it too:\n%s", r.Findings, ev)
	}
	for _, f := range r.Failures {
		if f.LikelyPod != "" {
			t.Errorf("failure %+v: the edge answered it, no pod", f)
		}
	}

	// The edge that kept the route alone: no fix to keep it.
	r = build("allow-empty")
	analyse(r)
	if fd := find(r, NoServingEndpoint); fd == nil || strings.Contains(fd.Fix, "allowEmptyServices") ||
		!strings.Contains(strings.Join(fd.Evidence, "\n"), "served 100 requests from them") {
		t.Errorf("finding %+v: want the share kept, no fix to keep the route", fd)
	}
	// A route that reached only web's pod: nothing to say of a share.
	r = build("alone")
	analyse(r)
	if fd := find(r, NoServingEndpoint); fd == nil || strings.Contains(strings.Join(fd.Evidence, "\n"), "outside service web") {
		t.Errorf("finding %+v: want no share line for a route of web alone", fd)
	}
	// A backend header that names no pod of the timeline (a version, say):
	// every backend looks outside web, yet none is known to be a pod
	// outside it; nothing to say of a share, no fix to keep the route.
	r = build("by-version")
	analyse(r)
	if fd := find(r, NoServingEndpoint); fd == nil || strings.Contains(strings.Join(fd.Evidence, "\n"), "outside service web") ||
		strings.Contains(fd.Fix, "allowEmptyServices") {
		t.Errorf("finding %+v: want no share line when the header names no pod", fd)
	}

	// A route that got no answer from web's pods yet failed whole in the
	// gap, while another path's header named them: it depends on web (a
	// mirror), and its fix keeps the route.
	r = build("edge", "mirror")
	analyse(r)
	fd = find(r, NoServingEndpoint)
	mirrored := "path mirror's route got every answer of the run from outside service web (the backend header named b-1), none from its pods, yet in the 2 whole seconds within its 30 answers of the edge's own, " +
		"while service web had no serving endpoint, it served none: the route depends on service web without sending it requests to answer"
	if fd == nil || !strings.Contains(strings.Join(fd.Evidence, "\n"), mirrored) || !strings.Contains(fd.Fix, "allowEmptyServices=true") {
		t.Errorf("finding %+v: want %q and the fix keeping the route", fd, mirrored)
	}
	// Alone, nothing says the header names pods: nothing said.
	r = build("mirror")
	analyse(r)
	if fd := find(r, NoServingEndpoint); fd == nil || strings.Contains(strings.Join(fd.Evidence, "\n"), "path mirror's route") || strings.Contains(fd.Fix, "allowEmptyServices") {
		t.Errorf("finding %+v: want no line for a path of other pods when no path named web's", fd)
	}
	// Another Service's route that went on serving: nothing of web's.
	r = build("edge", "elsewhere")
	analyse(r)
	if fd := find(r, NoServingEndpoint); fd == nil || strings.Contains(strings.Join(fd.Evidence, "\n"), "path elsewhere's route") {
		t.Errorf("finding %+v: want no line for a route that kept serving other pods", fd)
	}
}
