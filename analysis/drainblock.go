package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// DrainBlocked: a drain could not finish because a PodDisruptionBudget
// refused an eviction until the run ended. A budget holding a pod back
// for a while is its job (the drain waits for a replacement); one that
// never lets it go allows no disruption at all.
const DrainBlocked = "drain-blocked-by-pod-disruption-budget"

// renderDrainBlocked fires for a drain that did not complete (timed out
// or failed) while evictions a budget refused were never accepted.
func renderDrainBlocked(_ *group, x facts) (report.Finding, bool) {
	r := x.r
	ro := r.Rollout
	if ro == nil || ro.Change != report.ChangeDrain || (ro.Status != report.StatusTimedOut && ro.Status != report.StatusFailed) {
		return report.Finding{}, false
	}
	firstRefused := map[string]report.Event{}
	var order []string
	evicted := map[string]bool{}
	// A refused pod deleted by something other than the drain (its
	// controller scaling it down, a user) was not held until the end:
	// the watch saw it (the workload's pods) or the drain's last look did.
	// One whose eviction failed otherwise is said apart.
	wentAway := map[string]report.Event{}
	var failed []string
	for _, e := range r.Timeline {
		switch e.Kind {
		case report.EvictionRefused:
			if _, ok := firstRefused[e.Pod]; !ok {
				firstRefused[e.Pod] = e
				order = append(order, e.Pod)
			}
		case report.PodEvicted:
			evicted[e.Pod] = true
		case report.EvictionFailed:
			failed = append(failed, fmt.Sprintf("%s at %+.2fs", e.Detail, e.At.Sub(r.StartedAt).Seconds()))
		case report.PodDeletionRequested, report.PodGone, report.EvictionOvertaken:
			if _, refused := firstRefused[e.Pod]; refused {
				// The first sign, but the drain's own account when there
				// is one: it says whose doing it was.
				if prev, seen := wentAway[e.Pod]; !seen || (e.Kind == report.EvictionOvertaken && prev.Kind != report.EvictionOvertaken) {
					wentAway[e.Pod] = e
				}
			}
		}
	}
	var held []string
	var ev, away []string
	for _, pod := range order {
		if evicted[pod] {
			continue
		}
		if e, ok := wentAway[pod]; ok {
			away = append(away, fmt.Sprintf("%s's eviction was refused from %+.2fs, and it went another way (%s at %+.2fs): %s", pod,
				firstRefused[pod].At.Sub(r.StartedAt).Seconds(), e.Kind, e.At.Sub(r.StartedAt).Seconds(), e.Detail))
			continue
		}
		held = append(held, pod)
		e := firstRefused[pod]
		why := e.Detail
		if _, after, ok := strings.Cut(why, " refused: "); ok {
			why = after // the Detail names the pod again
		}
		ev = append(ev, fmt.Sprintf("%s's eviction was refused from %+.2fs to the end of the run (%s): %s", pod,
			e.At.Sub(r.StartedAt).Seconds(), r.EndedAt.Sub(e.At).Round(100_000_000), why))
	}
	if len(held) == 0 {
		return report.Finding{}, false
	}
	slices.Sort(held)
	ev = append(ev, away...)
	ev = append(ev, failed...)
	ev = append(ev, fmt.Sprintf("the drain of the node ended %s, its pods not all gone: a budget that refuses every eviction allows no disruption (ALLOWED DISRUPTIONS 0 in kubectl get pdb), so a node upgrade would wait on it forever", ro.Status))
	return report.Finding{
		Title:    fmt.Sprintf("A PodDisruptionBudget refused the drain's eviction of %s until the run ended", strings.Join(held, ", ")),
		Evidence: ev,
		Fix: fmt.Sprintf("let the budget allow one disruption when every pod is ready: maxUnavailable: 1 (or minAvailable below the replicas), and run more replicas than it keeps (kubectl get pdb -n %s shows ALLOWED DISRUPTIONS); pods that are not ready count against it too",
			ro.Namespace),
		Pods: held,
	}, true
}
