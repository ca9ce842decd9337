package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// BudgetTooLoose: a drain evicted every pod that served the Service,
// though a PodDisruptionBudget selected them: the budget let more pods go
// at once than the Service could lose (it counts other workloads' pods,
// or keeps too few), and until a replacement was ready nothing served.
// Measured, not guessed: the Service's serving endpoints went to none
// right after evictions the budget allowed.
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
		var pods []string
		for _, e := range gap.evicted {
			line := fmt.Sprintf("%s at %+.2fs", e.Pod, e.At.Sub(r.StartedAt).Seconds())
			if len(e.Budgets) > 0 {
				line += " (let go by " + strings.Join(e.Budgets, ", ") + ")"
			}
			for _, b := range e.Budgets {
				if !slices.Contains(budgets, b) {
					budgets = append(budgets, b)
				}
			}
			pods = append(pods, line)
		}
		end := fmt.Sprintf("to %+.2fs (%.1fs)", gap.end.Sub(r.StartedAt).Seconds(), gap.end.Sub(gap.start).Seconds())
		if gap.open {
			end = "to the end of the run"
		}
		ev = append(ev, fmt.Sprintf("the drain evicted %s: %s; when the last stopped serving, %s had no serving endpoint from %+.2fs %s, and %d requests failed in it or within %s after",
			podsOfTheService(len(gap.evicted)), strings.Join(pods, ", "), svc, gap.start.Sub(r.StartedAt).Seconds(), end, gap.failed, gapSlack))
	}
	if len(ev) == 0 {
		return report.Finding{}, false
	}
	ev = append(ev, fmt.Sprintf("%d requests failed (%s) from %s", len(g.fails), g.classes(), g.span(r.StartedAt)),
		"a budget that keeps the Service serving refuses the eviction of its last serving pods until replacements are ready (429, asked again); this one allowed them all at once: it counts pods of other workloads (a selector shared with them), or keeps fewer than the Service needs")
	// A budget's description starts with its name, which (a Kubernetes
	// name) has no space.
	names := make([]string, len(budgets))
	for i, b := range budgets {
		names[i], _, _ = strings.Cut(b, " ")
	}
	return report.Finding{
		Title:    fmt.Sprintf("PodDisruptionBudget %s let a drain evict every pod serving %s at once", strings.Join(names, ", "), svc),
		Evidence: ev,
		Fix: fmt.Sprintf("give the workload a budget of its own: a selector that matches its pods only (not pods of other workloads) with maxUnavailable: 1 (or minAvailable below its replicas); fix %s, and run at least 2 replicas",
			strings.Join(names, ", ")),
		Pods: g.podList(),
	}, true
}

func podsOfTheService(n int) string {
	if n == 1 {
		return "1 pod of the Service"
	}
	return fmt.Sprintf("%d pods of the Service", n)
}
