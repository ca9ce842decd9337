package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// A drain evicts 2 of a Service's 3 pods at once (a budget keeping "at
// least one" lets both go), and the pod left answers 503 (shed) and too
// late while its peers are out: the budget's finding takes those, with
// the evictions, the ready endpoints before and at the fewest, and a fix
// to the budget. A 503 of the same pod after the replacement is ready, a
// refused connection to it meanwhile, and every failure of the same drain
// with no budget on its evictions are not the budget's; nor is anything
// when the drain evicts one pod at a time.
func TestBudgetTooLooseWhenThePodsLeftAreOverloaded(t *testing.T) {
	// lag: how late each eviction's record comes after the API took it
	// (a loaded machine can receive the endpoint change it causes first).
	build := func(budgets []string, second, lag int) *report.Report {
		// A terminating pod in its preStop sleep serves, but is not ready.
		ep := func(ms int, kind report.EventKind, pod, ip string, ready bool) report.Event {
			return endpointAt(ms, kind, pod, ip, ready, true)
		}
		evicted := func(ms int, pod string) report.Event { return evictedAt(ms+lag, pod, budgets) }
		r := &report.Report{StartedAt: t0, EndedAt: at(20000),
			Rollout: &report.Rollout{Kind: "Deployment", Name: "web", Service: "web", Change: report.ChangeDrain, Trigger: "drain node n2 (kubectl drain --ignore-daemonsets --delete-emptydir-data)"},
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true, IP: "10.0.0.5"},
				{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true, IP: "10.0.0.6"},
				{At: at(0), Kind: report.PodPresent, Pod: "c", Revision: "old", Ready: true, IP: "10.0.0.7"},
				{At: at(1000), Kind: report.RolloutTriggered},
				ep(1, report.EndpointAdded, "a", "10.0.0.5", true),
				ep(1, report.EndpointAdded, "b", "10.0.0.6", true),
				ep(1, report.EndpointAdded, "c", "10.0.0.7", true),
				evicted(2000, "a"),
				ev(2001, report.PodDeletionRequested, "a", "old"),
				ep(2100, report.EndpointTerminating, "a", "10.0.0.5", false),
				evicted(second, "b"),
				ev(second+1, report.PodDeletionRequested, "b", "old"),
				ep(second+100, report.EndpointTerminating, "b", "10.0.0.6", false),
				ep(6000, report.EndpointReady, "d", "10.0.0.9", true),
			}}
		slices.SortStableFunc(r.Timeline, func(x, y report.Event) int { return x.At.Compare(y.At) })
		for _, ms := range []int{2500, 3000, 4000} {
			r.Failures = append(r.Failures, fail(ms, report.ClassHTTP5xx, true, "c"))
		}
		r.Failures = append(r.Failures, fail(4500, report.ClassTimeout, true, "c"), fail(5000, report.ClassRefused, true, "c"), fail(15000, report.ClassHTTP5xx, true, "c"))
		analyse(r)
		return r
	}
	r := build([]string{"web (minAvailable: 1; 2 disruptions allowed)"}, 2010, 0)
	f := find(r, BudgetTooLoose)
	if f == nil || f.Severity != report.SeverityError {
		t.Fatalf("findings %+v: want the budget's", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"the drain evicted 2 pods of the Service: a at +2.00s (let go by web (minAvailable: 1; 2 disruptions allowed)), b at +2.01s",
		"service web had 3 ready endpoints before the drain and 1 (at the fewest) from +2.11s to +6.00s (3.9s)",
		"4 requests that the pods left serving answered",
		"4 requests failed (http_5xx 3, timeout 1)",
		"this one let the drain leave 1 of 3",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(f.Title, "PodDisruptionBudget web let a drain take 2 of the 3 pods serving service web at once: the 1 left could not carry the load") ||
		!strings.Contains(f.Fix, "maxUnavailable: 1 (or minAvailable: 2 of the 3)") || !strings.Contains(f.Fix, "fix web") {
		t.Errorf("title %q, fix %q", f.Title, f.Fix)
	}
	if s := find(r, ServerErrors); s == nil || !strings.HasPrefix(s.Evidence[0], "1 5xx response at +15.00s") {
		t.Errorf("findings %+v: the 503 after the replacement was ready is the 5xx finding's", r.Findings)
	}
	for _, id := range []string{NoServingEndpoint} {
		if find(r, id) != nil {
			t.Errorf("findings %+v: %s beside the budget's", r.Findings, id)
		}
	}

	r = build(nil, 2010, 0)
	if find(r, BudgetTooLoose) != nil {
		t.Errorf("findings %+v: with no budget on the evictions, not the budget's", r.Findings)
	}
	// One at a time: b evicted once d is ready, 2 of 3 always ready.
	r = build([]string{"web (maxUnavailable: 1; 1 disruption allowed)"}, 7000, 0)
	if find(r, BudgetTooLoose) != nil {
		t.Errorf("findings %+v: one pod out at a time, not the budget's", r.Findings)
	}
	// Each eviction's record received 300 ms late, after the endpoint
	// change it caused: the ready endpoints before the drain are still 3
	// (each evicted pod out before the first record counts back in at its
	// own), and the shortfall opens at the second record, when the count
	// is known short.
	r = build([]string{"web (minAvailable: 1; 2 disruptions allowed)"}, 2010, 300)
	if f := find(r, BudgetTooLoose); f == nil {
		t.Errorf("records after their endpoint changes: findings %+v, want the budget's", r.Findings)
	} else if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "had 3 ready endpoints before the drain and 1 (at the fewest) from +2.31s to +6.00s") ||
		!strings.Contains(ev, "4 requests failed (http_5xx 3, timeout 1)") {
		t.Errorf("records after their endpoint changes: evidence\n%s", ev)
	}
	// The same, one at a time: no shortfall for a record's lateness.
	r = build([]string{"web (maxUnavailable: 1; 1 disruption allowed)"}, 7000, 300)
	if find(r, BudgetTooLoose) != nil {
		t.Errorf("findings %+v: one pod out at a time, records late, not the budget's", r.Findings)
	}
}

// With each eviction's record received after the endpoint change it
// caused, a pod another hand deleted after the trigger (its replacement
// ready) is not counted among those ready before the drain: only evicted
// pods out before the first record are. The drain takes 2 of 4 at once;
// the shortfall closes when one replacement is ready, 3 of 4 again.
func TestAShortfallCountsBackOnlyEvictedPods(t *testing.T) {
	ep := func(ms int, kind report.EventKind, pod, ip string, ready bool) report.Event {
		return endpointAt(ms, kind, pod, ip, ready, true)
	}
	budget := []string{"web (minAvailable: 1; 3 disruptions allowed)"}
	r := &report.Report{StartedAt: t0, EndedAt: at(20000), Timeline: []report.Event{
		ep(1, report.EndpointAdded, "a", "10.0.0.5", true),
		ep(1, report.EndpointAdded, "b", "10.0.0.6", true),
		ep(1, report.EndpointAdded, "c", "10.0.0.7", true),
		ep(1, report.EndpointAdded, "d", "10.0.0.8", true),
		{At: at(1000), Kind: report.RolloutTriggered},
		ep(1500, report.EndpointTerminating, "d", "10.0.0.8", false), // its controller's doing
		ep(1800, report.EndpointReady, "d2", "10.0.0.9", true),
		ep(2100, report.EndpointTerminating, "a", "10.0.0.5", false),
		ep(2110, report.EndpointTerminating, "b", "10.0.0.6", false),
		evictedAt(2300, "a", budget),
		evictedAt(2310, "b", budget),
		ep(5000, report.EndpointReady, "a2", "10.0.0.10", true),
		ep(6000, report.EndpointReady, "b2", "10.0.0.11", true),
	}}
	s := drainShortfalls(r)
	if len(s) != 1 {
		t.Fatalf("shortfalls %+v: want one", s)
	}
	if s[0].before != 4 || s[0].least != 2 || !s[0].start.Equal(at(2310)) || !s[0].end.Equal(at(5000)) {
		t.Errorf("shortfall: %d ready before, %d at the fewest, %v to %v; want 4, 2, +2.31s to +5.00s",
			s[0].before, s[0].least, s[0].start.Sub(t0), s[0].end.Sub(t0))
	}
}
