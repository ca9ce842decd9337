package analysis

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// PodDNSStale: the target is one pod's own DNS name (a StatefulSet pod's,
// POD.GOVERNING-SERVICE.NS.svc, through its headless Service), and the
// rollout took that pod away. Two things fail that no endpoint change can
// fix: requests go to the deleted pod's address while resolvers still
// answer with it (a positive answer is cached up to its TTL), and once its
// record is gone the name does not resolve until the successor is ready
// and the resolvers' cached "no such name" has expired (negative caching).
const PodDNSStale = "pod-dns-name-stale"

// namedPod is the pod name the failure's target host names as its first
// label (a pod's own DNS name), when a pod of that name is on the
// timeline; "" otherwise (a Service's name, an address, an ingress host).
func namedPod(r *report.Report, f *report.Failure, pods *Pods) string {
	target := r.Target
	if f.Path != "" {
		for _, p := range r.Paths {
			if p.Name == f.Path {
				target = p.Target
			}
		}
	}
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	label, rest, ok := strings.Cut(u.Hostname(), ".")
	if !ok || rest == "" || len(pods.Incarnations(label)) == 0 {
		return ""
	}
	return label
}

// podDNSStale claims a failure of a request to a pod's own name once that
// name's pod was deleted (within the attribution's tolerance, as for a
// terminating pod): a connection failure on the deleted pod (its address,
// still answered by resolvers), or a name that did not resolve.
func podDNSStale(s seen) bool {
	if s.named == "" || !s.namedDeleted {
		return false
	}
	switch {
	case s.class == prober.DNS:
		return true
	case connectionFailure(s.class):
		return s.pod != nil && s.pod.PodName == s.named && s.terminating
	}
	return false
}

// firstDeleted is the earliest deleted of the incarnations, nil if none.
func firstDeleted(ps []*Pod) *Pod {
	var out *Pod
	for _, p := range ps {
		if p.DeletedAt != nil && (out == nil || p.DeletedAt.Before(*out.DeletedAt)) {
			out = p
		}
	}
	return out
}

func renderPodDNSStale(g *group, x facts) (report.Finding, bool) {
	r := x.r
	at := func(t time.Time) string { return fmt.Sprintf("%+.2fs", t.Sub(r.StartedAt).Seconds()) }
	var dns, conn []report.Failure
	for _, f := range g.fails {
		if f.Class == report.ClassDNS {
			dns = append(dns, f)
		} else {
			conn = append(conn, f)
		}
	}
	name := namedPod(r, &g.fails[0], x.pods)
	incs := x.pods.Incarnations(name)
	old := firstDeleted(incs)
	var next *Pod // the successor: the first incarnation seen after the old one, ready
	for _, p := range incs {
		if p != old && p.FirstSeen.After(old.FirstSeen) && (next == nil || p.FirstSeen.Before(next.FirstSeen)) {
			next = p
		}
	}
	pods := []string{old.Name}
	if next != nil {
		pods = append(pods, next.Name)
	}
	host := name
	if u, err := url.Parse(r.Target); err == nil {
		host = u.Hostname()
	}
	gone := "its successor was not ready by the end of the run"
	if next != nil && next.ReadyAt != nil {
		gone = fmt.Sprintf("its successor %s was ready at %s, %.2fs later", next.Name, at(*next.ReadyAt), next.ReadyAt.Sub(*old.DeletedAt).Seconds())
	}
	ev := []string{fmt.Sprintf("the target's name %s is one pod's own (%s: a StatefulSet pod's name through its headless Service), and the rollout recreated that pod: its deletion was requested at %s; %s",
		host, name, at(*old.DeletedAt), gone)}
	if len(conn) > 0 {
		first, last := conn[0], conn[len(conn)-1]
		addr := old.IP
		if addr == "" {
			addr = "its address"
		}
		ev = append(ev, fmt.Sprintf("%s (%s) went to the deleted pod's address %s from %s to %s, the last %.2fs after its deletion: resolvers still answered with it (a positive answer is cached up to its TTL, 5 s from CoreDNS's kubernetes plugin by default) after the pod had stopped",
			nOf(len(conn), "request"), classesOf(conn), addr, at(first.Intended), at(last.Intended), beganAt(&last).Sub(*old.DeletedAt).Seconds()))
	}
	if len(dns) > 0 {
		first, last := dns[0], dns[len(dns)-1]
		tail := "its successor was not ready by then"
		if next != nil && next.ReadyAt != nil {
			if d := beganAt(&last).Sub(*next.ReadyAt); d > 0 {
				tail = fmt.Sprintf("the last %.2fs after the successor was ready: a cached \"no such name\" outlives the record's return (negative caching, for the SOA minimum: the kubernetes plugin's ttl, 5 s by default)", d.Seconds())
			} else {
				tail = "all before the successor was ready"
			}
		}
		ev = append(ev, fmt.Sprintf("%s failed to resolve the name from %s to %s: a headless Service publishes only ready pods, so the name had no address from the old pod's removal until the successor was ready; %s",
			nOf(len(dns), "request"), at(first.Intended), at(last.Intended), tail))
	}
	span := beganAt(&g.fails[len(g.fails)-1]).Sub(beganAt(&g.fails[0]))
	svc := "the Service in front of the pods"
	if r.Rollout != nil && r.Rollout.Service != "" {
		svc = "the Service " + r.Rollout.Service
	}
	return report.Finding{
		Title:    fmt.Sprintf("the target is one pod's own name, %s: nothing answered it for %.1fs while the pod was recreated", host, span.Seconds()),
		Evidence: ev,
		Fix: fmt.Sprintf("send traffic that must not drop to %s, whose other pods serve while one is recreated; a client that must reach this one pod (a primary, a shard) has to retry across its recreation, here for %.0fs or more; publishNotReadyAddresses: true on the headless Service publishes the successor's address as soon as it has one (a shorter \"no such name\"), and a preStop sleep keeps the old pod answering while cached answers still point at it",
			svc, math.Ceil(span.Seconds())),
		Pods: pods,
	}, true
}

// classesOf counts fs by class, as group.classes does.
func classesOf(fs []report.Failure) string { return (&group{fails: fs}).classes() }
