package analysis

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// ProxyRulesWithoutEndpoint: requests were refused (or dropped) by a
// host's own rules before any pod, conntrack on the probing host shows
// (Failure.NoConntrackEntry) or the ICMP error that refused them does
// (Failure.RefusedBy, from no pod's address), while the API listed serving endpoints for
// the Service: kube-proxy there held none it could use at that moment, or
// the packet met its rules mid-update (kube-proxy's nftables mode rewrites
// a Service's DNAT rule, an anonymous numgen map, on each sync of its
// endpoints; a SYN evaluated across that commit can miss the map and meet
// the reject of ClusterIPs: reproduced in a scratch namespace, see
// docs/findings). Not the pods' shutdown: no pod was reached.
const ProxyRulesWithoutEndpoint = "proxy-rules-without-endpoint"

// noEntryShown bounds the failures the finding lists one by one.
const noEntryShown = 5

// endpointsAt is what the timeline's endpoint events (all nodes) say of
// the Service at t: how many endpoints served, and when they last changed
// (zero when no event came by t).
func endpointsAt(r *report.Report, t time.Time) (serving int, changed time.Time) {
	state := map[string]bool{}
	for _, e := range r.Timeline {
		if e.At.After(t) {
			break
		}
		if !e.Kind.IsEndpoint() || e.Pod == "" {
			continue
		}
		key := e.Pod + " " + e.IP
		if e.Kind == report.EndpointRemoved {
			delete(state, key)
		} else {
			state[key] = e.Serving
		}
		changed = e.At
	}
	for _, s := range state {
		if s {
			serving++
		}
	}
	return serving, changed
}

// hostOf names where a failure's SYN left from: its in-cluster prober's
// node, or this process's host.
func hostOf(f *report.Failure) string {
	if f.Node != "" {
		return "node " + f.Node
	}
	return "the probing host"
}

// rejecterOf names the host whose rules refused f's SYN: the probing
// host when conntrack there showed it (Failure.NoConntrackEntry), else the
// sender of the ICMP error that refused it, as the probing host saw it.
func rejecterOf(f *report.Failure) string {
	if f.NoConntrackEntry || f.ICMP == nil {
		return hostOf(f)
	}
	return "the host at " + f.ICMP.From
}

// icmpSaid is ", an ICMP port unreachable from X" for a failure an ICMP
// error refused, else "".
func icmpSaid(f *report.Failure) string {
	if f.RefusedBy != report.RefusedByICMP || f.ICMP == nil {
		return ""
	}
	return ", an ICMP " + f.ICMP.Name + " from " + f.ICMP.From
}

func renderProxyRulesWithoutEndpoint(g *group, x facts) (report.Finding, bool) {
	r := x.r
	svc := "the Service"
	if r.Rollout != nil && r.Rollout.Service != "" {
		svc = "service " + r.Rollout.Service
	}
	hosts := map[string]bool{}
	listed := 0 // the fewest serving endpoints the API listed at one of them
	var each []string
	byConntrack, byICMP := 0, 0
	for i := range g.fails {
		f := &g.fails[i]
		hosts[rejecterOf(f)] = true
		if f.NoConntrackEntry {
			byConntrack++
		} else {
			byICMP++
		}
		at := beganAt(f)
		n, changed := endpointsAt(r, at)
		if i == 0 || n < listed {
			listed = n
		}
		if i >= noEntryShown {
			continue
		}
		line := fmt.Sprintf("%+.2fs (%s, from %s%s): the API listed %d serving endpoints", at.Sub(r.StartedAt).Seconds(), f.Class, hostOf(f), icmpSaid(f), n)
		if !changed.IsZero() {
			line += fmt.Sprintf(", unchanged since %+.2fs (%.2fs before)", changed.Sub(r.StartedAt).Seconds(), at.Sub(changed).Seconds())
		}
		each = append(each, line)
	}
	if len(g.fails) > noEntryShown {
		each = append(each, fmt.Sprintf("and %d more", len(g.fails)-noEntryShown))
	}
	var hostList []string
	for h := range hosts {
		hostList = append(hostList, h)
	}
	sort.Strings(hostList)
	on := strings.Join(hostList, ", ")
	ev := []string{fmt.Sprintf("%s failed (%s) %s, and reached no pod", nOf(len(g.fails), "request"), g.classes(), g.span(r.StartedAt))}
	if byConntrack > 0 {
		ev = append(ev, fmt.Sprintf("%d of them: conntrack on the probing host has no entry for them: their SYN met no rewrite to a pod and was refused by that host's own rules (conntrack was read throughout, nothing lost; only refusals are judged so)", byConntrack))
	}
	if byICMP > 0 {
		ev = append(ev, fmt.Sprintf("%d of them: an ICMP port unreachable refused the SYN, from an address no pod of the run held (the kernel queued it on the socket): a reject rule's answer; a pod's TCP stack refuses with a reset", byICMP))
	}
	ev = append(ev, each...)
	if listed > 0 {
		ev = append(ev, "two causes give this while the API lists endpoints: kube-proxy's view held none for a sync, or a SYN met its rules while it rewrote them "+
			"(in nftables mode each sync of the Service's endpoints replaces its DNAT rule and map, and a packet evaluated across that update can miss the map: "+
			"rare, at the moments kube-proxy syncs)")
	}
	ev = append(ev, "no pod was reached: not the pods' shutdown, so no preStop sleep or grace period changes it; a client may retry a refused connect safely (no request was sent)")
	title := fmt.Sprintf("the rules on %s sent no request to a pod of %s while the API listed %d serving endpoints: %s reached no pod", on, svc, listed, nOf(len(g.fails), "request"))
	if listed == 0 {
		title = fmt.Sprintf("kube-proxy on %s held no endpoint for %s: %s reached no pod", on, svc, nOf(len(g.fails), "request"))
	}
	return report.Finding{
		Title:    title,
		Evidence: ev,
		Fix: "look at kube-proxy on " + on + " at those times: its log, and its sync metrics (kubeproxy_sync_proxy_rules_last_timestamp_seconds, " +
			"kubeproxy_sync_proxy_rules_endpoint_changes_pending) for a sync that held the Service without endpoints; watch the Service's EndpointSlices " +
			"(kubectl get endpointslices -l kubernetes.io/service-name=<service> -w) for one emptied or replaced; if neither shows one and kube-proxy runs in " +
			"nftables mode, the failures likely came as it rewrote the Service's rules: clients that retry a refused connect " +
			"(safe: nothing was sent) do not see it",
	}, true
}
