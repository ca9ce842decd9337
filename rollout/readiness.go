package rollout

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ReadinessConnects reports whether a Ready pod was listening where the
// Service sends traffic: every port of svc that reaches a container of the
// pod is one that container's readiness probe connects to (httpGet or
// tcpSocket on the pod's own IP, or grpc). The kubelet marks such a pod
// ready only after a probe connected there, so a new Ready pod does not
// refuse connections unless its container exits. False when no port of
// svc reaches the pod, or any that does is not probed.
func ReadinessConnects(pod *corev1.Pod, svc *corev1.Service) bool {
	if svc == nil {
		return false
	}
	reached := false
	for _, sp := range svc.Spec.Ports {
		target := sp.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(sp.Port)
		}
		for _, c := range pod.Spec.Containers {
			port, ok := containerPort(c, target)
			if !ok {
				continue
			}
			reached = true
			if !probes(c, port) {
				return false
			}
		}
	}
	return reached
}

// containerPort resolves a Service's target port on c: by name among its
// declared ports, or by number among them (an undeclared number cannot be
// told apart from another container's).
func containerPort(c corev1.Container, target intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP {
			continue
		}
		if (target.Type == intstr.String && cp.Name == target.StrVal) || (target.Type == intstr.Int && cp.ContainerPort == target.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// probes reports whether c's readiness probe connects to port on the
// pod's IP.
func probes(c corev1.Container, port int32) bool {
	p := c.ReadinessProbe
	if p == nil {
		return false
	}
	var probed intstr.IntOrString
	switch {
	case p.HTTPGet != nil && p.HTTPGet.Host == "":
		probed = p.HTTPGet.Port
	case p.TCPSocket != nil && p.TCPSocket.Host == "":
		probed = p.TCPSocket.Port
	case p.GRPC != nil:
		return p.GRPC.Port == port
	default:
		return false
	}
	if probed.Type == intstr.Int {
		return probed.IntVal == port
	}
	named, ok := containerPort(c, probed)
	return ok && named == port
}
