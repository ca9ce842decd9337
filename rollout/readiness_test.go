package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	} {
		if got := ReadinessConnects(tc.pod, tc.svc); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
