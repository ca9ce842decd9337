package rollout

import (
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestReadinessConnects(t *testing.T) {
	svc := func(target intstr.IntOrString) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: target}}}}
	}
	pod := func(probe *corev1.Probe, ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Ports: ports, ReadinessProbe: probe},
			{Name: "sidecar", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}}},
		}}}
	}
	http := func(port intstr.IntOrString, host string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: port, Host: host}}}
	}
	tcp := func(port intstr.IntOrString) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}}}
	}
	exec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	httpPort := corev1.ContainerPort{Name: "http", ContainerPort: 8080}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		svc  *corev1.Service
		want bool
	}{
		{"httpGet on the named target port", pod(http(intstr.FromString("http"), ""), httpPort), svc(intstr.FromString("http")), true},
		{"httpGet by number, target by name", pod(http(intstr.FromInt32(8080), ""), httpPort), svc(intstr.FromString("http")), true},
		{"tcpSocket by name, target by number", pod(tcp(intstr.FromString("http")), httpPort), svc(intstr.FromInt32(8080)), true},
		{"no readiness probe (the late-ready sample)", pod(nil, httpPort), svc(intstr.FromString("http")), false},
		{"a probe on another port", pod(http(intstr.FromInt32(8081), ""), httpPort, corev1.ContainerPort{ContainerPort: 8081}), svc(intstr.FromString("http")), false},
		{"an httpGet to another host", pod(http(intstr.FromString("http"), "10.0.0.1"), httpPort), svc(intstr.FromString("http")), false},
		{"an exec probe", pod(exec, httpPort), svc(intstr.FromString("http")), false},
		{"the Service reaches the unprobed sidecar too", pod(http(intstr.FromString("http"), ""), httpPort),
			&corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}, {Port: 9090, TargetPort: intstr.FromString("metrics")}}}}, false},
		{"the Service reaches no container", pod(http(intstr.FromString("http"), ""), httpPort), svc(intstr.FromString("grpc")), false},
		{"target 0 means the Service port", pod(tcp(intstr.FromInt32(80)), corev1.ContainerPort{ContainerPort: 80}), svc(intstr.FromInt32(0)), true},
		{"no Service", pod(http(intstr.FromString("http"), ""), httpPort), nil, false},
		{"the target is a native sidecar's port, probed", withSidecar(pod(nil, httpPort), tcp(intstr.FromString("tls"))), svc(intstr.FromString("tls")), true},
		{"the target is a native sidecar's port, unprobed", withSidecar(pod(http(intstr.FromString("http"), ""), httpPort), nil), svc(intstr.FromString("tls")), false},
		{"an ordinary init container's port is no target", withInit(pod(nil, httpPort), tcp(intstr.FromString("tls"))), svc(intstr.FromString("tls")), false},
	} {
		if got := ReadinessConnects(tc.pod, tc.svc, 0); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// withSidecar adds a native sidecar listening on port "tls" (8443), probed
// by probe.
func withSidecar(p *corev1.Pod, probe *corev1.Probe) *corev1.Pod {
	p = withInit(p, probe)
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers[0].RestartPolicy = &always
	return p
}

// withInit adds an ordinary init container declaring port "tls" (8443),
// probed by probe (which the API would refuse: the kubelet never uses it).
func withInit(p *corev1.Pod, probe *corev1.Probe) *corev1.Pod {
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "tls", ReadinessProbe: probe,
		Ports: []corev1.ContainerPort{{Name: "tls", ContainerPort: 8443}}})
	return p
}

// A Service with an http and a grpc port whose readiness probe checks http
// only: traffic to the http port is judged by that port (the pod listened
// there when it turned ready); traffic to the grpc port, or to a port that
// cannot be told, by every port the Service reaches, as before.
func TestReadinessConnectsOnTheProbedPort(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
		Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "grpc", ContainerPort: 9555}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}}}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30080}, {Name: "grpc", Port: 9555, TargetPort: intstr.FromString("grpc")}}}}
	for _, tc := range []struct {
		target string
		port   int32
		want   bool
	}{
		{"http://10.96.0.10/", 80, true},
		{"http://10.100.0.11:30080/", 80, true},
		{"http://10.96.0.10:9555/", 9555, false},
		{"http://web.prod.svc/", 80, true},
		{"http://web.prod.svc.cluster.local:9555/", 9555, false},
		{"https://shop.example.com/", 0, false},
	} {
		u, _ := url.Parse(tc.target)
		port := ServicePortOf(svc, u)
		if port != tc.port || ReadinessConnects(pod, svc, port) != tc.want {
			t.Errorf("%s: service port %d (want %d), readiness connects %v (want %v)", tc.target, port, tc.port, ReadinessConnects(pod, svc, port), tc.want)
		}
	}
}

// The containers a Service's ports reach are the ones whose exit stops
// the pod's traffic: by the target port's name or declared number, on the
// app's containers and native sidecars, for the probed Service port only
// when one is known.
func TestServiceContainers(t *testing.T) {
	newPod := func() *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "proxy", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
			{Name: "app", Ports: []corev1.ContainerPort{{Name: "upstream", ContainerPort: 9090}, {Name: "admin", ContainerPort: 9091}}},
		}}}
	}
	pod := newPod()
	svc := func(ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Ports: ports}}
	}
	web := corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("http")}
	admin := corev1.ServicePort{Port: 91, TargetPort: intstr.FromInt32(9091)}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		svc  *corev1.Service
		port int32
		want string
	}{
		{"by name, a container in front of the app", pod, svc(web), 0, "proxy"},
		{"by declared number", pod, svc(admin), 0, "app"},
		{"every port when none is probed", pod, svc(web, admin), 0, "app,proxy"},
		{"only the probed port's", pod, svc(web, admin), 91, "app"},
		{"an undeclared number names none", pod, svc(corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(7000)}), 0, ""},
		{"a native sidecar's port", withSidecar(newPod(), nil), svc(corev1.ServicePort{Port: 443, TargetPort: intstr.FromString("tls")}), 0, "tls"},
		{"no Service", pod, nil, 0, ""},
	} {
		got := slices.Sorted(maps.Keys(ServiceContainers(tc.pod, tc.svc, tc.port)))
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, got, tc.want)
		}
	}
}
