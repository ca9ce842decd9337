package analysis

import (
	"fmt"
	"slices"
	"time"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/report"
)

// AbortEarlyScaleDown: an aborted Argo Rollout's way back dropped
// requests. The abort moved the traffic back to the stable revision, and
// the controller deleted the aborted revision's pods
// (abortScaleDownDelaySeconds later) while proxies still sent them
// traffic: the move back had not propagated. The race of
// StopsBeforePropagation, with its own knob and its own clock (from the
// abort), as BlueGreenEarlyScaleDown's is from the switch.
const AbortEarlyScaleDown = "abort-scale-down-before-propagation"

// abortBack is an aborted Rollout's way back (report.AbortedWayBack):
// when rollprobe saw the abort, and the revision it deleted.
type abortBack struct {
	at       time.Time
	revision string
}

func abortOf(r *report.Report) *abortBack {
	seen, _, revision, ok := report.AbortedWayBack(r)
	if !ok {
		return nil
	}
	return &abortBack{at: seen, revision: revision}
}

// abortedAway is the abort whose way back deleted p (a pod of the aborted
// revision whose deletion came after the abort was seen, give or take
// switchTolerance: the status and the pods come through two watches), or
// nil.
func abortedAway(a *abortBack, p *Pod) *abortBack {
	if a == nil || p == nil || p.DeletedAt == nil || p.Revision != a.revision || p.DeletedAt.Before(a.at.Add(-switchTolerance)) {
		return nil
	}
	return a
}

// renderAbortScaleDown measures, from the abort, how long traffic still
// went to the aborted revision's pods (the last failure), and how soon
// after the abort they went, and sizes abortScaleDownDelaySeconds from the
// first.
func renderAbortScaleDown(g *group, x facts) (report.Finding, bool) {
	r := x.r
	a := abortOf(r)
	if a == nil {
		return report.Finding{}, false
	}
	lag := time.Duration(0) // the last failure's start after the abort
	for i := range g.fails {
		lag = max(lag, beganAt(&g.fails[i]).Sub(a.at))
	}
	var firstDeletion *time.Time
	for _, p := range x.pods.All() {
		if abortedAway(a, p) != nil && (firstDeletion == nil || p.DeletedAt.Before(*firstDeletion)) {
			firstDeletion = p.DeletedAt
		}
	}
	if firstDeletion == nil {
		return report.Finding{}, false
	}
	start := r.StartedAt
	evidence := []string{
		// Both as the watches received them: the abort from the Rollout's
		// status, which may be seen after the deletions it led to.
		fmt.Sprintf("the rollout was aborted: seen at %+.2fs (the Rollout Degraded); an abort moves the traffic back to the stable revision, then deletes the aborted revision %s's pods: deleted from %+.2fs (%+.2fs from the abort as seen)",
			a.at.Sub(start).Seconds(), a.revision, firstDeletion.Sub(start).Seconds(), firstDeletion.Sub(a.at).Seconds()),
		fmt.Sprintf("%s failed (%s) %s on the aborted pods, still sent traffic while they went: the last began %.2fs after the abort was seen, so the move back had not reached every proxy by then",
			nOf(len(g.fails), "request"), g.classes(), g.span(start), lag.Seconds()),
	}
	// A blue/green's move back is a switch of its active Service (the
	// Rollout's status.blueGreen.activeSelector, as the watch saw it):
	// quoted beside the abort, both as seen.
	if i := slices.IndexFunc(x.switches, func(s activeSwitch) bool {
		return s.to != a.revision && !s.at.Before(a.at.Add(-switchTolerance))
	}); i >= 0 {
		back := x.switches[i]
		evidence = append(evidence, fmt.Sprintf("the active Service switched back to revision %s at %+.2fs (%+.2fs from the abort as seen)",
			back.to, back.at.Sub(start).Seconds(), back.at.Sub(a.at).Seconds()))
	}
	if d := scaleDownDeadline(r, a.revision); d != "" {
		evidence = append(evidence, "the controller's plan for the aborted ReplicaSet: "+d)
	}
	// The delay is sized as a preStop sleep is (×1.5 + 1 s), from the
	// abort as seen; the alternative preStop from the pods' deletions.
	delay := PreStopSeconds(lag)
	sleep := PreStopSeconds(max(g.window, g.conservative))
	name, ns := patchTarget(r)
	// The strategy, by what the run saw of it: a canary's steps, a
	// blue/green's switch; neither (a blue/green aborted before its
	// switch, say) leaves it to the reader.
	strategy := "STRATEGY"
	switch {
	case len(x.switches) > 0:
		strategy = "blueGreen"
	case slices.ContainsFunc(r.Timeline, func(e report.Event) bool { return e.Kind == report.RolloutStep }):
		strategy = "canary"
	}
	return report.Finding{
		Title:    "an aborted rollout's pods were scaled down before the traffic's move back had propagated",
		Evidence: evidence,
		Fix: fmt.Sprintf("keep the aborted revision's pods up until the move back has propagated: spec.strategy.%s.abortScaleDownDelaySeconds: %d or more (Argo's default is 30; 0 keeps them up until the next update), e.g. kubectl %spatch rollout %s --type merge -p '{\"spec\":{\"strategy\":{\"%s\":{\"abortScaleDownDelaySeconds\":%d}}}}'; or give the pods a preStop hook that waits %ds (%s) so each keeps serving after its deletion",
			strategy, delay, ns, name, strategy, delay, sleep, advice.PreStopSleep(sleep, x.version)),
		Pods: g.podList(),
	}, true
}
