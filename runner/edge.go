package runner

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollprobe/rollprobe/report"
)

// markEdgeConnections sets Failure.ViaEdge on each failure whose
// connection went to an address that is none of svc's (its cluster IPs,
// external IPs and load balancer IPs), no node's (nodeIPs, as
// rollout.Watcher.NodeIPs gives them) and no pod's of the run (an address
// in the timeline): something else, an ingress or a proxy, ended that
// connection, so what failed before the request reached it cannot have
// been a pod's doing. Any port of those addresses counts as theirs: a
// node's address with another port (a hostPort, an ingress on the host
// network) is left unmarked, and so is any address at one of svc's node
// ports (a node no pod of the run was on is known to no one here): an
// address in doubt keeps the pods as candidates, as before.
func markEdgeConnections(rep *report.Report, svc *corev1.Service, nodeIPs map[string]string) {
	if svc == nil {
		return
	}
	direct := map[netip.Addr]bool{}
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			direct[a.Unmap()] = true
		}
	}
	add(svc.Spec.ClusterIP)
	for _, ip := range svc.Spec.ClusterIPs {
		add(ip)
	}
	for _, ip := range svc.Spec.ExternalIPs {
		add(ip)
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		add(ing.IP)
	}
	for ip := range nodeIPs {
		add(ip)
	}
	for _, e := range rep.Timeline {
		add(e.IP)
	}
	nodePorts := map[uint16]bool{}
	for _, p := range svc.Spec.Ports {
		if p.NodePort > 0 && p.NodePort < 1<<16 {
			nodePorts[uint16(p.NodePort)] = true
		}
	}
	for i := range rep.Failures {
		f := &rep.Failures[i]
		remote, err := netip.ParseAddrPort(f.RemoteAddr)
		if err != nil || !remote.Addr().IsValid() || remote.Addr().IsUnspecified() {
			continue // no connection was attempted (dns, a local error)
		}
		f.ViaEdge = !direct[remote.Addr().Unmap()] && !nodePorts[remote.Port()]
	}
}
