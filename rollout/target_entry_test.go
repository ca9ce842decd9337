package rollout

import (
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollprobe/rollprobe/report"
)

func TestEntryOf(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.9", ClusterIPs: []string{"10.96.0.9"},
		Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}}}}
	nodes := map[string]string{"10.0.0.1": "node-1"}
	for target, want := range map[string]*report.Entry{
		"http://10.96.0.9/":          {Via: report.ViaClusterIP, Port: 80},
		"http://10.0.0.1:30080/x":    {Via: report.ViaNodePort, Node: "node-1", Port: 30080},
		"http://203.0.113.7/":        {Via: report.ViaLoadBalancer, Port: 80},
		"http://10.0.0.2:30080/":     nil, // no pod of ours ran on that node: unknown
		"http://web.prod.svc/":       nil,
		"http://10.96.0.9:8080/":     nil,
		"https://10.0.0.1:30080/tls": {Via: report.ViaNodePort, Node: "node-1", Port: 30080},
	} {
		u, _ := url.Parse(target)
		got := EntryOf(svc, u, nodes)
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("EntryOf(%s) = %+v, want %+v", target, got, want)
		}
	}
}
