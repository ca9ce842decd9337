package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// BudgetTooLoose: a drain evicted more of the Service's pods at once than
// it could lose, though a PodDisruptionBudget selected them: the budget
// counts other workloads' pods, or keeps too few. Measured, not guessed:
// either the Service's serving endpoints went to none right after
// evictions the budget allowed, and until a replacement was ready nothing
// served (svcGap); or the budget let two or more go at once and the pods
// left answered 5xx or too late meanwhile: overloaded (shortfall).
const BudgetTooLoose = "pod-disruption-budget-too-loose"

// emptiedByBudgetedDrain: the gap was opened by a drain's eviction a budget allowed:
// the pod whose endpoint stopped serving last was evicted before the gap,
// and a budget selected one of the pods evicted.
func (g *svcGap) emptiedByBudgetedDrain() bool {
	last := g.went[len(g.went)-1]
	evictedLast, budgeted := false, false
	for _, e := range g.evicted {
		evictedLast = evictedLast || e.Pod == last
		budgeted = budgeted || len(e.Budgets) > 0
	}
	return evictedLast && budgeted
}

func renderBudgetTooLoose(g *group, x facts) (report.Finding, bool) {
	r := x.r
	svc := "the Service"
	if r.Rollout != nil && r.Rollout.Service != "" {
		svc = "service " + r.Rollout.Service
	}
	var ev, budgets []string
	for _, gap := range x.svcGaps {
		if gap.failed == 0 || !gap.emptiedByBudgetedDrain() {
			continue
		}
		pods := evictionLines(gap.evicted, r, &budgets)
		end := fmt.Sprintf("to %+.2fs (%.1fs)", gap.end.Sub(r.StartedAt).Seconds(), gap.end.Sub(gap.start).Seconds())
		if gap.open {
			end = "to the end of the run"
		}
		ev = append(ev, fmt.Sprintf("the drain evicted %s: %s; when the last stopped serving, %s had no serving endpoint from %+.2fs %s, and %s",
			podsOfTheService(len(gap.evicted)), strings.Join(pods, ", "), svc, gap.start.Sub(r.StartedAt).Seconds(), end, gap.failedText()))
	}
	emptied := len(ev) > 0
	// The most pods out at once, and how many were left then, over the
	// shortfalls whose failures are the budget's.
	mostOut, left, before := 0, 0, 0
	for _, sf := range x.shortfalls {
		if sf.failed == 0 {
			continue
		}
		pods := evictionLines(sf.out, r, &budgets)
		if sf.before-sf.least > mostOut {
			mostOut, left, before = sf.before-sf.least, sf.least, sf.before
		}
		end := fmt.Sprintf("to %+.2fs (%.1fs)", sf.end.Sub(r.StartedAt).Seconds(), sf.end.Sub(sf.start).Seconds())
		if sf.open {
			end = "to the end of the run"
		}
		ev = append(ev, fmt.Sprintf("the drain evicted %s: %s; %s had %d ready endpoints before the drain and %d (at the fewest) from %+.2fs %s, and %s that the pods left serving answered with an error or too late (shed or queued: overloaded) began in it or within %s after",
			podsOfTheService(len(sf.out)), strings.Join(pods, ", "), svc, sf.before, sf.least, sf.start.Sub(r.StartedAt).Seconds(), end, nOf(sf.failed, "request"), gapSlack))
	}
	if len(ev) == 0 {
		return report.Finding{}, false
	}
	ev = append(ev, fmt.Sprintf("%s failed (%s) %s", nOf(len(g.fails), "request"), g.classes(), g.span(r.StartedAt)))
	if emptied {
		ev = append(ev, "a budget that keeps the Service serving refuses the eviction of its last serving pods until replacements are ready (429, asked again); this one allowed them all at once: it counts pods of other workloads (a selector shared with them), or keeps fewer than the Service needs")
	} else {
		ev = append(ev, fmt.Sprintf("the pods left could not carry the load: a budget refuses an eviction (429, asked again) that would leave fewer pods than it keeps; this one let the drain leave %d of %d, and the load needed more", left, before))
	}
	// A budget's description starts with its name, which (a Kubernetes
	// name) has no space.
	names := make([]string, len(budgets))
	for i, b := range budgets {
		names[i], _, _ = strings.Cut(b, " ")
	}
	if !emptied {
		return report.Finding{
			Title: fmt.Sprintf("PodDisruptionBudget %s let a drain take %d of the %d pods serving %s at once: the %d left could not carry the load",
				strings.Join(names, ", "), mostOut, before, svc, left),
			Evidence: ev,
			Fix: fmt.Sprintf("keep as many pods through a drain as the load needs: maxUnavailable: 1 (or minAvailable: %d of the %d), so a drain evicts one pod and waits for its replacement; or more replicas; fix %s",
				before-1, before, strings.Join(names, ", ")),
			Pods: g.podList(),
		}, true
	}
	return report.Finding{
		Title:    fmt.Sprintf("PodDisruptionBudget %s let a drain evict every pod serving %s at once", strings.Join(names, ", "), svc),
		Evidence: ev,
		Fix: fmt.Sprintf("give the workload a budget of its own: a selector that matches its pods only (not pods of other workloads) with maxUnavailable: 1 (or minAvailable below its replicas); fix %s, and run at least 2 replicas",
			strings.Join(names, ", ")),
		Pods: g.podList(),
	}, true
}

// evictionLines says each eviction: the pod, when, and the budgets that
// let it go ("a at +2.00s (let go by web (maxUnavailable: 1; ...))"); it
// adds those budgets to budgets, each once. The budgets' status is the
// drain's start's (report.Event.Budgets): for a pod they refused then,
// the line says so rather than read as "0 disruptions allowed let it go".
func evictionLines(evicted []report.Event, r *report.Report, budgets *[]string) []string {
	var lines []string
	for _, e := range evicted {
		line := fmt.Sprintf("%s at %+.2fs", e.Pod, e.At.Sub(r.StartedAt).Seconds())
		if len(e.Budgets) > 0 {
			line += " (let go by " + strings.Join(e.Budgets, ", ")
			if refusedBefore(r.Timeline, e) {
				line += ", after refusing it: their status as read when the drain began"
			}
			line += ")"
		}
		for _, b := range e.Budgets {
			if !slices.Contains(*budgets, b) {
				*budgets = append(*budgets, b)
			}
		}
		lines = append(lines, line)
	}
	return lines
}

func podsOfTheService(n int) string {
	if n == 1 {
		return "1 pod of the Service"
	}
	return fmt.Sprintf("%d pods of the Service", n)
}

// refusedBefore: the drain's eviction of evicted's pod was refused before
// it was accepted.
func refusedBefore(timeline []report.Event, evicted report.Event) bool {
	for _, e := range timeline {
		if e.Kind == report.EvictionRefused && e.Pod == evicted.Pod && !e.At.After(evicted.At) {
			return true
		}
	}
	return false
}
