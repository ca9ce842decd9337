package analysis

import (
	"fmt"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// CanaryShareBelowWeight: a step of an Argo canary without traffic
// routing gave the new revision a clearly smaller share of the responses
// than its setWeight, on a run whose requests went partly or wholly on
// kept-alive connections. Such a canary's weight is a share of the pods
// (Argo scales the ReplicaSets to it), which a request reaches only on a
// new connection; a kept-alive one stays on the pod it was opened to.
const CanaryShareBelowWeight = "canary-share-below-weight"

// canaryShareMinNamed is how many responses naming their pod a step needs
// before its share is judged: 500 independent draws at a weight of 25%
// spread with a standard deviation of 1.9 points, so the margin below
// (6.25 points there) is more than three of them.
const canaryShareMinNamed = 500

// canaryShareMargin is how far below the weight, in percentage points, a
// step's share must be to be called below it: a quarter of the weight,
// and at least 5 points.
func canaryShareMargin(weight int) float64 {
	return max(float64(weight)/4, 5)
}

// CanaryShare judges the steps of an Argo canary (report.Rollout.Steps,
// which the runner fills after Explain: they need the pods' revisions).
// routed says whether the Rollout has traffic routing; with it a proxy
// weighs each request, and a share below the weight is the proxy's
// delay in applying it, not this. A run of new connections only follows
// the pods' share request by request: nothing to say either.
func CanaryShare(r *report.Report, routed bool) (report.Finding, bool) {
	if routed || r.Rollout == nil || r.Config.Conn == "new" {
		return report.Finding{}, false
	}
	var below []string
	for _, s := range r.Rollout.Steps {
		if s.Weight <= 0 || s.Weight >= 100 || s.NewSharePct == nil || s.Named < canaryShareMinNamed {
			continue
		}
		if *s.NewSharePct > float64(s.Weight)-canaryShareMargin(s.Weight) {
			continue
		}
		below = append(below, fmt.Sprintf("step %d (%s, weight %d%%), %+.1fs to %+.1fs: the new revision answered %.1f%% of the %s that named their pod",
			s.Index+1, s.Step, s.Weight, s.StartS, s.EndS, *s.NewSharePct, nOf(s.Named, "response")))
	}
	if len(below) == 0 {
		return report.Finding{}, false
	}
	kept := "every request of this run went on a kept-alive connection (--conn keepalive)"
	if fresh, ok := strings.CutPrefix(r.Config.Conn, "mixed="); ok {
		kept = fmt.Sprintf("this run sent a share of its requests on kept-alive connections (--conn mixed=%s: the rest each on a new one)", fresh)
	}
	evidence := append(below,
		"the canary has no traffic routing: its weight is a share of the pods, which only a new connection follows; "+kept+
			", and a kept-alive connection stays on the pod it opened to, a stable one, whatever the weight")
	return report.Finding{
		ID: CanaryShareBelowWeight, Severity: report.SeverityWarning,
		Title:    "a canary step gave the new revision less traffic than its weight: kept-alive connections stay on the stable pods",
		Evidence: evidence,
		Fix: "to weigh requests rather than pods, give the canary traffic routing (spec.strategy.canary.trafficRouting: an ingress " +
			"controller, a service mesh or the Gateway API plugin applies the weight to each request); otherwise judge the canary's " +
			"analysis by the share measured here, not the weight: clients that keep their connections alive (HTTP/2 and gRPC ones " +
			"above all) reach the canary's pods only as they reconnect",
	}, true
}
