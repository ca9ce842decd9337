package analysis

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// Finding IDs (stable: CI annotations and JUnit cases use them).
const (
	StopsBeforePropagation = "stops-accepting-before-endpoints-propagate"
	AbruptKeepAliveClose   = "abrupt-keepalive-close"
	ReadyTooEarly          = "ready-before-serving"
	GraceTooShort          = "grace-period-too-short"
	ServerErrors           = "5xx-during-rollout"
	Unexplained            = "failures-without-lifecycle-event"
)

func findings(r *report.Report, pods map[string]*life) []report.Finding {
	var out []report.Finding
	type group struct {
		fails []report.Failure
		pods  map[string]bool
		worst time.Duration // longest time from the pod's deletion to a failure
	}
	groups := map[string]*group{}
	add := func(id string, f report.Failure, since time.Duration) {
		g := groups[id]
		if g == nil {
			g = &group{pods: map[string]bool{}}
			groups[id] = g
		}
		g.fails = append(g.fails, f)
		if f.LikelyPod != "" {
			g.pods[f.LikelyPod] = true
		}
		g.worst = max(g.worst, since)
	}
	for _, f := range r.Failures {
		if f.Class == "local" {
			continue
		}
		p := pods[f.LikelyPod]
		terminating := p != nil && p.deletedBy(f.Intended)
		switch {
		case f.Class == "http_5xx":
			add(ServerErrors, f, 0)
		case terminating && (f.Class == "eof_reused" || (f.Class == "reset" && !f.Fresh)):
			add(AbruptKeepAliveClose, f, max(0, f.Intended.Sub(*p.deleted)))
		case terminating && connectionClasses[f.Class]:
			add(StopsBeforePropagation, f, max(0, f.Intended.Sub(*p.deleted)))
		case p != nil && p.ready != nil && !terminating && f.LikelyPod != "":
			add(ReadyTooEarly, f, 0)
		default:
			add(Unexplained, f, 0)
		}
	}
	span := func(fs []report.Failure) string {
		first, last := fs[0].Intended, fs[len(fs)-1].Intended
		return fmt.Sprintf("%+.2fs to %+.2fs", first.Sub(r.StartedAt).Seconds(), last.Sub(r.StartedAt).Seconds())
	}
	classes := func(fs []report.Failure) string {
		n := map[string]int{}
		for _, f := range fs {
			n[f.Class]++
		}
		var parts []string
		for c, k := range n {
			parts = append(parts, fmt.Sprintf("%s %d", c, k))
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	}
	podList := func(m map[string]bool) []string {
		var out []string
		for p := range m {
			out = append(out, p)
		}
		sort.Strings(out)
		return out
	}

	if g := groups[StopsBeforePropagation]; g != nil {
		// Size the preStop sleep from what was measured: the longest time
		// traffic kept arriving after a deletion request, plus a margin.
		sleep := int(math.Ceil(g.worst.Seconds()*1.5 + 1))
		out = append(out, report.Finding{
			ID: StopsBeforePropagation, Severity: "error",
			Title: "pods stopped accepting connections while traffic was still routed to them",
			Evidence: []string{
				fmt.Sprintf("%d requests failed (%s) from %s", len(g.fails), classes(g.fails), span(g.fails)),
				fmt.Sprintf("each came after the deletion of the pod it most likely hit had been requested; the last %.2fs after it: the endpoint change had not reached every proxy yet", g.worst.Seconds()),
				"connect_timeout means new connections went to the IP of a pod that no longer existed; refused, to a pod no longer listening",
			},
			Fix: fmt.Sprintf("give the container a preStop hook that waits at least %ds (lifecycle.preStop.sleep.seconds: %d, or exec [\"sleep\", \"%d\"] before Kubernetes 1.34) so it keeps serving until endpoints have propagated, and set terminationGracePeriodSeconds above %ds plus the time the app needs to drain",
				sleep, sleep, sleep, sleep),
			Pods: podList(g.pods),
		})
	}
	if g := groups[AbruptKeepAliveClose]; g != nil {
		out = append(out, report.Finding{
			ID: AbruptKeepAliveClose, Severity: "error",
			Title: "kept-alive connections were closed abruptly at pod termination",
			Evidence: []string{
				fmt.Sprintf("%d requests on reused connections failed (%s) from %s, after their pods' deletion was requested", len(g.fails), classes(g.fails), span(g.fails)),
				"endpoint changes never touch established connections: kept-alive clients keep sending to a terminating pod until it closes the connection",
			},
			Fix:  "drain on SIGTERM: keep serving for a few seconds answering with Connection: close (Go: srv.SetKeepAlivesEnabled(false)), then http.Server.Shutdown, never Close; keep the grace period above preStop plus this drain",
			Pods: podList(g.pods),
		})
	}
	if g := groups[ReadyTooEarly]; g != nil {
		out = append(out, report.Finding{
			ID: ReadyTooEarly, Severity: "error",
			Title:    "new pods received traffic before they could serve it",
			Evidence: []string{fmt.Sprintf("%d requests failed (%s) from %s, within %s after a new pod turned ready", len(g.fails), classes(g.fails), span(g.fails), readyWindow)},
			Fix:      "add a readiness probe that succeeds only when the app serves requests (an HTTP check of a real endpoint, not a process or TCP check), and a startupProbe for slow starts",
			Pods:     podList(g.pods),
		})
	}
	if g := groups[ServerErrors]; g != nil {
		named := 0
		for _, f := range g.fails {
			if f.Backend != "" {
				named++
			}
		}
		source := "the responses named their pod (backend header): the app itself answered 5xx"
		fix := "find why the app answers 5xx while pods change (dependencies not ready at start, shutdown order); fail readiness instead of serving errors"
		if named == 0 {
			source = "the responses carried no backend header: a proxy or ingress in front most likely answered them (upstream refused or reset)"
			fix = "the proxy in front routed to pods that were going away: apply the preStop and draining fixes, and check its endpoint update lag and retry policy"
			if r.Config.BackendHeader == "" {
				source = "no --backend-header was set, so the source (app or proxy) cannot be told apart; run with --backend-header X-Pod-Name (or your app's equivalent)"
			}
		}
		out = append(out, report.Finding{
			ID: ServerErrors, Severity: "error", Title: "5xx responses during the rollout",
			Evidence: []string{fmt.Sprintf("%d 5xx responses from %s", len(g.fails), span(g.fails)), source},
			Fix:      fix, Pods: podList(g.pods),
		})
	}
	var killed []string
	for name, p := range pods {
		if p.exitCode != nil && *p.exitCode == 137 && p.deleted != nil {
			killed = append(killed, name)
		}
	}
	sort.Strings(killed)
	if len(killed) > 0 {
		out = append(out, report.Finding{
			ID: GraceTooShort, Severity: "warning",
			Title:    "containers were SIGKILLed at the end of their grace period",
			Evidence: []string{fmt.Sprintf("%d pods ended with exit code 137 after their deletion was requested: %s", len(killed), strings.Join(killed, ", "))},
			Fix:      "raise terminationGracePeriodSeconds above the preStop hook plus the app's drain time, or make the app exit promptly after draining; a SIGKILL cuts in-flight requests even when none was seen to fail here",
			Pods:     killed,
		})
	}
	if g := groups[Unexplained]; g != nil {
		out = append(out, report.Finding{
			ID: Unexplained, Severity: "warning",
			Title:    "failures with no pod lifecycle event around them",
			Evidence: []string{fmt.Sprintf("%d requests failed (%s) from %s while no pod was terminating or just ready", len(g.fails), classes(g.fails), span(g.fails))},
			Fix:      "look beyond the rollout: the target's own errors, a proxy in front, or the network; the failures list has each error",
		})
	}
	return out
}
