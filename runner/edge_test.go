package runner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollprobe/rollprobe/report"
)

// A failed connection is to an edge only when its address is none of the
// Service's, no node's and no pod's: an address in doubt keeps the pods as
// candidates.
func TestMarkEdgeConnections(t *testing.T) {
	svc := &corev1.Service{
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::a"}, ExternalIPs: []string{"192.0.2.7"}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{
			Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.4"}, {Hostname: "lb.example"}}}},
	}
	nodes := map[string]string{"10.100.0.11": "n1"}
	rep := &report.Report{Timeline: []report.Event{{Kind: report.PodReady, Pod: "p", IP: "10.244.1.7"}}}
	for _, addr := range []string{"10.96.0.10:80", "[fd00::a]:80", "192.0.2.7:80", "198.51.100.4:443", "10.100.0.11:30080",
		"10.100.0.11:8443", "10.244.1.7:8080", "10.100.0.1:443", "", "0.0.0.0:0", "10.100.0.99:30080"} {
		rep.Failures = append(rep.Failures, report.Failure{RemoteAddr: addr})
	}
	markEdgeConnections(rep, svc, nodes)
	for _, f := range rep.Failures {
		if want := f.RemoteAddr == "10.100.0.1:443"; f.ViaEdge != want {
			t.Errorf("%q: via_edge %v, want %v", f.RemoteAddr, f.ViaEdge, want)
		}
	}
	// Without the Service, nothing is known to be direct: nothing is marked.
	rep.Failures[7].ViaEdge = false
	markEdgeConnections(rep, nil, nodes)
	if rep.Failures[7].ViaEdge {
		t.Errorf("marked with no Service known")
	}
}
