package rollout

import (
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollprobe/rollprobe/report"
)

func TestEntryOf(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.9", ClusterIPs: []string{"10.96.0.9"},
		Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}}}}
	nodes := map[string]string{"10.0.0.1": "node-1"}
	for target, want := range map[string]*report.Entry{
		"http://10.96.0.9/":                   {Via: report.ViaClusterIP, Port: 80},
		"http://10.0.0.1:30080/x":             {Via: report.ViaNodePort, Node: "node-1", Port: 30080},
		"http://203.0.113.7/":                 {Via: report.ViaLoadBalancer, Port: 80},
		"http://10.0.0.2:30080/":              nil,                                  // no pod of ours ran on that node: unknown
		"http://web.prod.svc/":                {Via: report.ViaClusterIP, Port: 80}, // its cluster DNS name
		"http://web.prod.svc.cluster.local/":  {Via: report.ViaClusterIP, Port: 80},
		"http://WEB.prod.svc.cluster.local./": {Via: report.ViaClusterIP, Port: 80},
		"http://web.prod.svc:8080/":           nil, // no port of the Service
		"http://web.prod/":                    nil, // by the resolver's search list: unknown
		"http://web.prod.svcx/":               nil,
		"http://api.prod.svc/":                nil, // another Service: an ingress's, a proxy's
		"http://web.staging.svc/":             nil,
		"http://10.96.0.9:8080/":              nil,
		"https://10.0.0.1:30080/tls":          {Via: report.ViaNodePort, Node: "node-1", Port: 30080},
	} {
		u, _ := url.Parse(target)
		got := EntryOf(svc, u, nodes)
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("EntryOf(%s) = %+v, want %+v", target, got, want)
		}
	}
	// A headless Service's name resolves to its pods' addresses: no
	// cluster IP to enter by.
	headless := svc.DeepCopy()
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	u, _ := url.Parse("http://web.prod.svc/")
	if got := EntryOf(headless, u, nodes); got != nil {
		t.Errorf("EntryOf(headless, %s) = %+v, want nil", u, got)
	}
}
