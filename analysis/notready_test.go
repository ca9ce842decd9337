package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/report"
)

// A Service with publishNotReadyAddresses lists a new pod from its start
// and an old one until it is gone: the failures before the new pod was
// ready and after the old one stopped listening are its doing, and neither
// a readiness probe nor a preStop sleep is the fix (the lab's experiment
// of 2026-12-05: 381 refusals on new pods up to 3 s before they turned
// ready, 131 on old pods up to 7.4 s after their deletion with a 3 s
// preStop). Without the setting the same failures keep their usual fixes.
func TestPublishedNotReadyAddressesChangeTheFixes(t *testing.T) {
	publishing := func(publish bool) *report.Report {
		return &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 20, Service: "web", PublishNotReadyAddresses: publish},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.0.0.1"},
				{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.0.0.2"},
				{At: at(4000), Kind: report.PodCreated, Pod: "n", Revision: "new", IP: "10.0.0.3"},
				ev(6000, report.PodReady, "n", "new"),
				ev(7000, report.PodDeletionRequested, "a", "old"),
				ev(13000, report.PodGone, "a", "old"),
			}, Failures: []report.Failure{
				{Intended: at(5500), Start: at(5500), End: at(5502), Class: "refused", Fresh: true, PodAddr: "10.0.0.3:8080"},
				{Intended: at(12500), Start: at(12500), End: at(12502), Class: "refused", Fresh: true, PodAddr: "10.0.0.1:8080"},
			}}
	}
	r := publishing(true)
	x := Explain(r)
	ready, prop := findIn(x.Findings, ReadyTooEarly), findIn(x.Findings, StopsBeforePropagation)
	if ready == nil || prop == nil {
		t.Fatalf("findings %+v: want both", x.Findings)
	}
	for _, f := range []*report.Finding{ready, prop} {
		if f.Fix != advice.ClientsOffNotReadyService || !strings.Contains(strings.Join(f.Evidence, "\n"), "service web has publishNotReadyAddresses: true") {
			t.Errorf("%s: fix %q evidence %q; want the Service's setting named and its fix", f.ID, f.Fix, f.Evidence)
		}
	}
	if strings.Contains(strings.Join(prop.Evidence, "\n"), "had not reached every proxy") {
		t.Errorf("propagation blamed while the Service kept the endpoint: %q", prop.Evidence)
	}
	if ready.Title != "new pods received traffic before they were ready" || !strings.Contains(strings.Join(ready.Evidence, "\n"), "1 of them began before the pod they hit had turned ready") {
		t.Errorf("ready: %+v", ready)
	}
	if x.PreStopSeconds != 0 {
		t.Errorf("preStop sized at %ds from a window the setting made", x.PreStopSeconds)
	}

	x = Explain(publishing(false))
	ready, prop = findIn(x.Findings, ReadyTooEarly), findIn(x.Findings, StopsBeforePropagation)
	if ready == nil || prop == nil || ready.Fix == advice.ClientsOffNotReadyService || prop.Fix == advice.ClientsOffNotReadyService || !strings.Contains(prop.Fix, "preStop") || x.PreStopSeconds == 0 {
		t.Errorf("without the setting: findings %+v, preStop %d; want the usual fixes", x.Findings, x.PreStopSeconds)
	}
}

func findIn(fs []report.Finding, id string) *report.Finding {
	for i := range fs {
		if fs[i].ID == id {
			return &fs[i]
		}
	}
	return nil
}

// Behind a Service that publishes not-ready addresses, the findings that
// would name a preStop sleep to keep traffic off a going pod (a latency
// spike an edge's retries paid for, the edge's hidden retries, requests
// the edge held on a gone pod) name the setting instead.
func TestPublishedNotReadyAddressesReplaceEveryPreStopAdvice(t *testing.T) {
	publish := func(r *report.Report) *report.Report {
		if r.Rollout == nil {
			r.Rollout = &report.Rollout{TriggerSeenAfterMS: 20}
		}
		r.Rollout.Service, r.Rollout.PublishNotReadyAddresses = "web", true
		return r
	}
	spike := publish(spikeRun(map[string]map[int64]float64{"svc": {6: 30}, "edge": {6: 1100, 7: 900}}, 20, 12))
	retried := publish(clientRaceBesideEdgeAttempts(report.EdgeFailedAttempts{Addr: "10.244.1.5:8080", T: 3, Attempts: 1}))
	held := func(ms int, upstream string, edgeMS float64) report.Failure {
		f := fail(ms, report.ClassTimeout, false, "")
		f.End = at(ms + 5000)
		f.RemoteAddr, f.ViaEdge, f.UpstreamAddr, f.EdgeDurationMS = "10.100.0.1:443", true, upstream, edgeMS
		return f
	}
	gone := publish(&report.Report{StartedAt: t0, Config: report.Config{Protocol: "grpc", TimeoutMS: 5000},
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", IP: "10.244.1.5", Ready: true},
			{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", IP: "10.244.2.6", Ready: true},
			ev(5000, report.PodDeletionRequested, "a", "old"),
		},
		EdgeLog:  &report.EdgeLog{Format: "traefik", Requests: 2000, FailuresFound: 2},
		Failures: []report.Failure{held(5200, "10.244.1.5:8080", 133478.4), held(5600, "10.244.1.5:8080", 72001)}})
	for _, tc := range []struct {
		r  *report.Report
		id string
	}{{spike, LatencySpikeAtDeletion}, {retried, EdgeRetriesHidFailures}, {gone, EdgeHeldPastTimeout}} {
		analyse(tc.r)
		f := find(tc.r, tc.id)
		if f == nil {
			t.Errorf("no %s: %+v", tc.id, tc.r.Findings)
			continue
		}
		if !strings.Contains(f.Fix, publishesNotReadyStop) || strings.Contains(f.Fix, "preStop hook that waits") || strings.Contains(f.Fix, "finding sizes") {
			t.Errorf("%s: fix %q; want the Service's setting, no preStop sized", tc.id, f.Fix)
		}
	}
}

// Behind a Service that publishes not-ready addresses, a new pod is sent
// connections from when its endpoint is listed, before it is ready: the
// timeline's inference (no conntrack) keeps it a candidate for refusals
// from then until rollprobe received it ready. In the lab (2026-12-06) the
// timeline put such refusals on no pod before any deletion, and for
// certain on an old pod still in its 3 s preStop sleep after one; the
// wire showed every SYN going to the new, unready pod. Without the
// setting a pod's listing before readiness changes nothing.
func TestListedBeforeReadyIsACandidate(t *testing.T) {
	run := func(publish bool) *report.Report {
		return &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 20, Service: "web", PublishNotReadyAddresses: publish},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.0.0.1"},
				{At: at(2000), Kind: report.PodCreated, Pod: "n", Revision: "new", IP: "10.0.0.3"},
				endpointAt(2800, report.EndpointAdded, "n", "10.0.0.3", true, false),
				{At: at(3500), Kind: report.PodDeletionRequested, Pod: "a", Revision: "old", PreStopSleepS: 3},
				{At: at(6000), Kind: report.PodReady, Pod: "n", Revision: "new", ReadinessConnects: true},
				endpointAt(6020, report.EndpointServing, "n", "10.0.0.3", true, true),
				ev(14000, report.PodGone, "a", "old"),
			}, Failures: []report.Failure{
				fail(3000, "refused", true, ""), // before any deletion: only n can have refused it
				fail(5000, "refused", true, ""), // a in its preStop, n listed and not listening
			}}
	}
	r := run(true)
	x := Explain(r)
	if f := x.Failures[0]; f.LikelyPod != "n" || f.Confidence != 1 {
		t.Errorf("a refusal before any deletion: on %q (confidence %.2f, candidates %v: %s), want n for certain", f.LikelyPod, f.Confidence, f.Candidates, f.Context)
	}
	if f := x.Failures[1]; f.Confidence == 1 && f.LikelyPod != "n" || !slices.Contains(append(f.Candidates, f.LikelyPod), "n") {
		t.Errorf("a refusal beside a's deletion: on %q (confidence %.2f, candidates %v), want n among them and a never certain", f.LikelyPod, f.Confidence, f.Candidates)
	}
	if fd := findIn(x.Findings, ReadyTooEarly); fd == nil || !slices.Contains(fd.Pods, "n") {
		t.Errorf("ready-before-serving: %+v", x.Findings)
	}
	x = Explain(run(false))
	if f := x.Failures[0]; f.LikelyPod != "" {
		t.Errorf("without the setting, a refusal before n was ready and before any deletion: on %q (%s), want none", f.LikelyPod, f.Context)
	}
}
