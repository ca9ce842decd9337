package analysis

import (
	"fmt"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/report"
)

// BlueGreenEarlyScaleDown: an Argo blue/green scaled its old ReplicaSet
// down while proxies still sent new connections to the old pods, whose
// endpoints the switch of the active Service had removed: the switch had
// not propagated yet. The race of StopsBeforePropagation, with its own
// knob (scaleDownDelaySeconds) and its own clock (from the switch).
const BlueGreenEarlyScaleDown = "bluegreen-scale-down-before-propagation"

// switchTolerance: how much earlier than its active_switched event a
// deletion may be seen and still follow that switch. Argo scales the old
// ReplicaSet down in a reconcile after the one that switched (the old one
// is referenced by the status until then), but the status and the pods
// reach rollprobe through two watches, each with its own delay.
const switchTolerance = time.Second

// activeSwitch is a blue/green switch of the active Service, from the
// timeline's active_switched events.
type activeSwitch struct {
	at time.Time
	// to is the revision the active Service selects from then on.
	to string
}

func activeSwitches(r *report.Report) []activeSwitch {
	var out []activeSwitch
	for _, e := range r.Timeline {
		if e.Kind == report.ActiveSwitched {
			out = append(out, activeSwitch{at: e.At, to: e.Revision})
		}
	}
	return out
}

// switchedAway is the switch that moved the active Service off p's
// revision before p's deletion (the last such), or nil: p then went away
// for another reason (a canary, a Deployment, a preview pod replaced).
func switchedAway(switches []activeSwitch, p *Pod) *activeSwitch {
	if p == nil || p.DeletedAt == nil || p.Revision == "" {
		return nil
	}
	var out *activeSwitch
	for i := range switches {
		s := &switches[i]
		if s.to != p.Revision && !s.at.After(p.DeletedAt.Add(switchTolerance)) {
			out = s
		}
	}
	return out
}

// renderBlueGreenScaleDown measures, from the switch, how long new
// connections still went to the old revision (the last failure), and how
// soon after the switch the old pods went (the scale-down as it
// happened), and sizes scaleDownDelaySeconds from the first.
func renderBlueGreenScaleDown(g *group, x facts) (report.Finding, bool) {
	r := x.r
	var sw *activeSwitch
	var lag time.Duration // the last failure's start after its switch
	for i := range g.fails {
		f := &g.fails[i]
		s := switchedAway(x.switches, x.pods.Get(f.LikelyPod))
		if s == nil {
			continue
		}
		if d := beganAt(f).Sub(s.at); sw == nil || d > lag {
			sw, lag = s, d
		}
	}
	if sw == nil {
		return report.Finding{}, false
	}
	lag = max(lag, 0)
	// The scale-down as it happened: the first deletion of a pod the
	// switch left behind, after it.
	var firstDeletion *time.Time
	var old string
	for _, p := range x.pods.All() {
		if s := switchedAway(x.switches, p); s == sw && (firstDeletion == nil || p.DeletedAt.Before(*firstDeletion)) {
			firstDeletion, old = p.DeletedAt, p.Revision
		}
	}
	start := r.StartedAt
	evidence := []string{
		// Both times are as the watches received them: the switch from
		// the Rollout's status, written at the end of the controller's
		// reconcile, may be seen after the deletions it caused (hence
		// %+.2fs, never "after" a negative time).
		fmt.Sprintf("the active Service switched from revision %s to %s at %+.2fs (as the Rollout's status showed it); the old revision's pods were deleted from %+.2fs (%+.2fs from the switch)",
			old, sw.to, sw.at.Sub(start).Seconds(), firstDeletion.Sub(start).Seconds(), firstDeletion.Sub(sw.at).Seconds()),
		fmt.Sprintf("%s failed (%s) %s on the old pods, still sent new traffic while they went: the last began %.2fs after the switch, so it had not reached every proxy by then",
			nOf(len(g.fails), "request"), g.classes(), g.span(start), lag.Seconds()),
	}
	// Without a deadline on the old ReplicaSet the controller scaled it
	// down without waiting: scaleDownDelayRevisionLimit 0 does that
	// whatever the delay (Argo Rollouts v1.10.1's scaleDownDelayHelper),
	// so the fix that sets the delay must lift the limit too, or it
	// changes nothing. Clearing a limit the spec does not set is harmless.
	patch := `{"scaleDownDelaySeconds":%d}`
	if d := scaleDownDeadline(r, old); d != "" {
		evidence = append(evidence, "the controller's plan for the old ReplicaSet: "+d)
	} else {
		evidence = append(evidence, "the controller set no scale-down deadline on the old ReplicaSet: it did not wait; scaleDownDelayRevisionLimit: 0 does that, whatever scaleDownDelaySeconds says")
		patch = `{"scaleDownDelaySeconds":%d,"scaleDownDelayRevisionLimit":null}`
	}
	// The delay is sized as a preStop sleep is (×1.5 + 1 s), from the
	// switch; the alternative preStop from the pods' deletions.
	delay := PreStopSeconds(lag)
	sleep := PreStopSeconds(max(g.window, g.conservative))
	name, ns := patchTarget(r)
	return report.Finding{
		Title:    "the old pods of a blue/green were scaled down before the switch of the active Service had propagated",
		Evidence: evidence,
		Fix: fmt.Sprintf("keep the old ReplicaSet up until the switch has propagated: spec.strategy.blueGreen.scaleDownDelaySeconds: %d or more (Argo's default is 30; 0 does not mean at once: Argo leaves the old ReplicaSet up, argoproj/argo-rollouts#1992), e.g. kubectl %spatch rollout %s --type merge -p '{\"spec\":{\"strategy\":{\"blueGreen\":%s}}}'; or give the pods a preStop hook that waits %ds (%s) so each keeps serving after its deletion",
			delay, ns, name, fmt.Sprintf(patch, delay), sleep, advice.PreStopSleep(sleep, x.version)),
		Pods: g.podList(),
	}, true
}

// scaleDownDeadline is the detail of the last scale_down_deadline event
// about revision rev ("" without one).
func scaleDownDeadline(r *report.Report, rev string) string {
	var out string
	for _, e := range r.Timeline {
		if e.Kind == report.ScaleDownDeadline && e.Revision == rev {
			out = strings.TrimSpace(e.Detail)
		}
	}
	return out
}

// patchTarget is the Rollout's name and kubectl's namespace flag ("-n NS "
// or "") for a fix's kubectl patch; NAME when the report has no rollout.
func patchTarget(r *report.Report) (name, nsFlag string) {
	ro := r.Rollout
	if ro == nil {
		return "NAME", ""
	}
	if ro.Namespace != "" {
		nsFlag = "-n " + ro.Namespace + " "
	}
	return ro.Name, nsFlag
}
