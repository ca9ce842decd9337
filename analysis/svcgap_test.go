package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// A StatefulSet of one replica recreates its pod: from the old pod's
// endpoint no longer serving until the new one's does, the Service has no
// serving endpoint. Every failure from then until proxies learn of the new
// endpoint is the gap's, not the propagation race's: capacity, with the
// StatefulSet's own fix.
func TestNoServingEndpoint(t *testing.T) {
	ep := func(ms int, kind report.EventKind, ip string, ready, serving, terminating bool) report.Event {
		return report.Event{At: at(ms), Kind: kind, Pod: "web-0", IP: ip, Ready: ready, Serving: serving, Terminating: terminating}
	}
	r := &report.Report{StartedAt: t0, EndedAt: at(15000),
		Rollout: &report.Rollout{Kind: "StatefulSet", Name: "web", Service: "web", Trigger: "restart (kubectl rollout restart)"},
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "web-0", Revision: "web-a", Ready: true, IP: "10.0.0.5"},
			ep(1, report.EndpointAdded, "10.0.0.5", true, true, false),
			ev(5000, report.PodDeletionRequested, "web-0", "web-a"),
			ep(5100, report.EndpointTerminating, "10.0.0.5", false, false, true),
			ev(5400, report.PodGone, "web-0", "web-a"),
			ep(5500, report.EndpointRemoved, "10.0.0.5", false, false, true),
			{At: at(5600), Kind: report.PodCreated, Pod: "web-0", Revision: "web-b"},
			ep(6000, report.EndpointAdded, "10.0.0.9", false, false, false),
			{At: at(9000), Kind: report.PodReady, Pod: "web-0", Revision: "web-b", IP: "10.0.0.9"},
			ep(9000, report.EndpointReady, "10.0.0.9", true, true, false),
		}}
	for _, ms := range []int{5200, 5300, 6500, 8000, 9500, 11900} {
		r.Failures = append(r.Failures, fail(ms, report.ClassConnectTimeout, true, ""))
	}
	late := fail(12500, report.ClassRefused, true, "") // past the gap and its slack
	r.Failures = append(r.Failures, late)
	analyse(r)
	f := find(r, NoServingEndpoint)
	if f == nil || f.Severity != report.SeverityError {
		t.Fatalf("findings %+v: want the no-serving-endpoint error", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"service web had no serving endpoint from +5.10s to +9.00s (3.9s)", "the last to stop serving was web-0", "6 requests failed in it",
		"a StatefulSet deletes each pod before it creates its replacement"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(f.Fix, "at least 2 replicas of the StatefulSet") || !strings.Contains(f.Title, "for 3.9s") {
		t.Errorf("title %q, fix %q", f.Title, f.Fix)
	}
	if p := find(r, StopsBeforePropagation); p != nil && strings.Contains(strings.Join(p.Evidence, " "), "7 requests") {
		t.Errorf("the race finding claims the gap's failures: %+v", p)
	}
}

// Endpoints that keep serving while terminating (or a second pod ready)
// leave no gap; nor does a run whose endpoints were never seen serving.
func TestNoServiceGapWhileAnEndpointServes(t *testing.T) {
	ep := func(ms int, kind report.EventKind, pod, ip string, serving bool) report.Event {
		return report.Event{At: at(ms), Kind: kind, Pod: pod, IP: ip, Ready: serving, Serving: serving}
	}
	r := &report.Report{StartedAt: t0, EndedAt: at(10000), Timeline: []report.Event{
		ep(1, report.EndpointAdded, "a", "10.0.0.5", true),
		ep(2, report.EndpointAdded, "b", "10.0.0.6", true),
		ep(5000, report.EndpointTerminating, "a", "10.0.0.5", false),
		ep(5500, report.EndpointRemoved, "a", "10.0.0.5", false),
	}}
	if gaps := serviceGaps(r); len(gaps) != 0 {
		t.Errorf("gaps %+v with b serving throughout", gaps)
	}
	r.Timeline = []report.Event{ep(1, report.EndpointAdded, "a", "10.0.0.5", false), ep(3000, report.EndpointRemoved, "a", "10.0.0.5", false)}
	if gaps := serviceGaps(r); len(gaps) != 0 {
		t.Errorf("gaps %+v though no endpoint was ever seen serving", gaps)
	}
}

// When no failure of the race could be put on one pod for certain, the
// finding does not speak of "the last certain one" (it said 0.00s).
func TestPropagationWithoutACertainFailure(t *testing.T) {
	r := &report.Report{StartedAt: t0, EndedAt: at(10000), Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "c", Revision: "old", Ready: true},
		ev(5000, report.PodDeletionRequested, "a", "old"),
		ev(5100, report.PodDeletionRequested, "b", "old"),
	}}
	r.Failures = []report.Failure{fail(5300, report.ClassRefused, true, ""), fail(5400, report.ClassRefused, true, "")}
	analyse(r)
	f := find(r, StopsBeforePropagation)
	if f == nil {
		t.Fatalf("findings %+v", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	if r.Failures[0].Confidence == 1 || strings.Contains(ev, "the last certain one") || !strings.Contains(ev, "none could be put on one pod for certain") {
		t.Errorf("confidence %v; evidence:\n%s", r.Failures[0].Confidence, ev)
	}
}

// A drain evicts both pods of a Service at once, a budget selecting them
// letting both go (it counts another workload's pods too): the gap that
// follows is the budget's finding, with each eviction and the budget named
// and a fix to the budget; the same drain with no budget on the evictions
// is the plain no-serving-endpoint finding, which says no budget kept one.
func TestBudgetTooLoose(t *testing.T) {
	build := func(budgets []string, refusedB bool) *report.Report {
		ep := func(ms int, kind report.EventKind, pod, ip string, serving bool) report.Event {
			return endpointAt(ms, kind, pod, ip, serving, serving)
		}
		evicted := func(ms int, pod string) report.Event { return evictedAt(ms, pod, budgets) }
		r := &report.Report{StartedAt: t0, EndedAt: at(15000),
			Rollout: &report.Rollout{Kind: "Deployment", Name: "web", Service: "web", Change: report.ChangeDrain, Trigger: "drain node n2 (kubectl drain --ignore-daemonsets --delete-emptydir-data)"},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.0.0.5"},
				{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.0.0.6"},
				ep(1, report.EndpointAdded, "a", "10.0.0.5", true),
				ep(1, report.EndpointAdded, "b", "10.0.0.6", true),
				// another workload's pod on the node, evicted too: not the Service's
				{At: at(2000), Kind: report.PodEvicted, Pod: "other-x", Node: "n2", Budgets: budgets},
				evicted(2001, "a"), evicted(2002, "b"),
				ev(2003, report.PodDeletionRequested, "a", "old"),
				ev(2004, report.PodDeletionRequested, "b", "old"),
				ep(2500, report.EndpointTerminating, "a", "10.0.0.5", false),
				ep(2700, report.EndpointTerminating, "b", "10.0.0.6", false),
				ep(6000, report.EndpointReady, "c", "10.0.0.9", true),
			}}
		if refusedB {
			r.Timeline = slices.Insert(r.Timeline, 4, report.Event{At: at(1500), Kind: report.EvictionRefused, Pod: "b", Node: "n2"})
		}
		for _, ms := range []int{2600, 3000, 4000, 5500, 7000} {
			r.Failures = append(r.Failures, fail(ms, report.ClassConnectTimeout, true, ""))
		}
		analyse(r)
		return r
	}
	r := build([]string{"shop (minAvailable: 2; 2 disruptions allowed)"}, false)
	f := find(r, BudgetTooLoose)
	if f == nil || f.Severity != report.SeverityError || find(r, NoServingEndpoint) != nil {
		t.Fatalf("findings %+v: want the budget's finding alone", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"the drain evicted 2 pods of the Service: a at +2.00s (let go by shop (minAvailable: 2; 2 disruptions allowed)), b at +2.00s",
		"service web had no serving endpoint from +2.70s to +6.00s (3.3s)", "4 requests failed in it"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if strings.Contains(ev, "other-x") || !strings.Contains(f.Title, "PodDisruptionBudget shop let a drain evict every pod serving service web") ||
		!strings.Contains(f.Fix, "maxUnavailable: 1") || !strings.Contains(f.Fix, "fix shop") {
		t.Errorf("title %q, fix %q, evidence:\n%s", f.Title, f.Fix, ev)
	}
	// b's eviction was refused at first: the budget's status, read when
	// the drain began, is not what let it go, and its line says so.
	r = build([]string{"shop (minAvailable: 2; 0 disruptions allowed)"}, true)
	if f = find(r, BudgetTooLoose); f == nil {
		t.Fatalf("findings %+v: want the budget's finding", r.Findings)
	}
	ev = strings.Join(f.Evidence, "\n")
	if want := "a at +2.00s (let go by shop (minAvailable: 2; 0 disruptions allowed)), b at +2.00s (let go by shop (minAvailable: 2; 0 disruptions allowed), after refusing it: their status as read when the drain began)"; !strings.Contains(ev, want) {
		t.Errorf("evidence lacks %q:\n%s", want, ev)
	}
	r = build(nil, false)
	f = find(r, NoServingEndpoint)
	if f == nil || find(r, BudgetTooLoose) != nil {
		t.Fatalf("findings %+v: with no budget, want no-serving-endpoint alone", r.Findings)
	}
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "no PodDisruptionBudget kept one of them serving") {
		t.Errorf("evidence:\n%s", ev)
	}
}

// A drain evicts both pods at once; they exit at once, but the kubelet
// reports them unready many seconds late, so their endpoints are listed as
// serving (terminating) past the time the replacement turns ready. By the
// pods' own Ready condition (its transition time, the kubelet's) nothing
// served from the second pod's stop to the replacement: the gap is the
// no-serving-endpoint finding's, with the lag said. The timeline is the
// lab's, from a warm CI run where this test's premise failed. Without the
// condition's time the endpoints alone show no gap, as before.
func TestServiceGapByTheKubeletsTime(t *testing.T) {
	build := func(withServerTimes bool) *report.Report {
		unready := func(ms, serverMS int, pod, ip string) report.Event {
			e := report.Event{At: at(ms), Kind: report.PodUnready, Pod: pod, Revision: "old", IP: ip}
			if withServerTimes {
				s := at(serverMS)
				e.Server = &s
			}
			return e
		}
		term := func(ms int, pod, ip string) report.Event {
			return report.Event{At: at(ms), Kind: report.EndpointTerminating, Pod: pod, IP: ip, Serving: true, Terminating: true}
		}
		r := &report.Report{StartedAt: t0, EndedAt: at(30000),
			Rollout: &report.Rollout{Kind: "Deployment", Name: "web", Service: "web", Change: report.ChangeDrain, Trigger: "drain node n2 (kubectl drain --ignore-daemonsets --delete-emptydir-data)"},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.0.0.5"},
				{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.0.0.6"},
				endpointAt(1, report.EndpointAdded, "a", "10.0.0.5", true, true),
				endpointAt(1, report.EndpointAdded, "b", "10.0.0.6", true, true),
				evictedAt(2317, "a", nil), ev(2359, report.PodDeletionRequested, "a", "old"),
				evictedAt(2655, "b", nil), ev(2852, report.PodDeletionRequested, "b", "old"),
				term(2994, "a", "10.0.0.5"),
				term(4175, "b", "10.0.0.6"),
				unready(11575, 2162, "a", "10.0.0.5"),
				endpointAt(11589, report.EndpointNotServing, "a", "10.0.0.5", false, false),
				endpointAt(13045, report.EndpointAdded, "c", "10.0.1.7", false, false),
				endpointAt(15240, report.EndpointRemoved, "a", "10.0.0.5", false, false),
				endpointAt(16707, report.EndpointServing, "c", "10.0.1.7", true, true),
				unready(20425, 3162, "b", "10.0.0.6"),
				endpointAt(20450, report.EndpointRemoved, "b", "10.0.0.6", false, true),
			}}
		for ms := 2500; ms < 16000; ms += 500 {
			r.Failures = append(r.Failures, fail(ms, report.ClassConnectTimeout, true, ""))
		}
		analyse(r)
		return r
	}
	r := build(true)
	f := find(r, NoServingEndpoint)
	if f == nil {
		t.Fatalf("findings %+v: want %s", r.Findings, NoServingEndpoint)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"service web had no serving endpoint from +4.16s to +16.71s (12.5s): the last to stop serving was b",
		"b was not Ready by +4.16s by the kubelet's own time (its Ready condition's transition, to the second), reported only at +20.43s",
		"the drain evicted the pods that served",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if gaps := serviceGaps(build(false)); len(gaps) != 0 {
		t.Errorf("gaps %+v from the endpoints alone, which served throughout", gaps)
	}
}

// A StatefulSet's pod is recreated under its name at a new address. The
// old pod's unready report comes late, after the replacement's endpoint
// serves but before its own Ready report: the mark holds the old pod's
// endpoint, never the name, so the replacement's serving ends the gap
// when the EndpointSlice says it serves.
func TestUnreadyMarkHoldsTheAddressNotTheName(t *testing.T) {
	serverAt := at(2000)
	r := &report.Report{StartedAt: t0, EndedAt: at(15000),
		Rollout: &report.Rollout{Kind: "StatefulSet", Name: "web", Service: "web"},
		Timeline: []report.Event{
			endpointAt(1, report.EndpointAdded, "web-0", "10.0.0.5", true, true),
			ev(1500, report.PodDeletionRequested, "web-0", "web-a"),
			endpointAt(6000, report.EndpointAdded, "web-0", "10.0.0.9", false, false),
			endpointAt(8000, report.EndpointReady, "web-0", "10.0.0.9", true, true),
			{At: at(8500), Kind: report.PodUnready, Pod: "web-0", IP: "10.0.0.5", Server: &serverAt},
			endpointAt(8600, report.EndpointRemoved, "web-0", "10.0.0.5", false, false),
			{At: at(9000), Kind: report.PodReady, Pod: "web-0", IP: "10.0.0.9"},
		}}
	gaps := serviceGaps(r)
	if len(gaps) != 1 || !gaps[0].start.Equal(at(3000)) || !gaps[0].end.Equal(at(8000)) || gaps[0].open {
		t.Fatalf("gaps %+v: want one from +3s (the kubelet's time, to the second) to +8s (the replacement serving)", gaps)
	}
}
