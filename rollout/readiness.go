package rollout

import (
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollprobe/rollprobe/prober"
)

// ReadinessConnects reports whether a Ready pod was listening where the
// Service sends the run's traffic: every port of svc that reaches a
// container of the pod (only the probed one, port, when it is known: a
// Service port number, 0 for every port) is one that container's
// readiness probe connects to (httpGet or tcpSocket on the pod's own IP,
// or grpc). The kubelet marks such a pod ready only after a probe
// connected there, so a new Ready pod does not refuse connections unless
// its container exits. False when no such port reaches the pod, or any
// that does is not probed. (A Service of an http and a grpc port whose
// readiness probe checks http: traffic to the http port is judged by the
// http port alone.) A native sidecar (an init container with
// restartPolicy Always) counts as a container: a Service may target its
// ports (Kubernetes 1.32 and later resolve their names), and its readiness
// probe gates the pod's Ready as the app's does.
func ReadinessConnects(pod *corev1.Pod, svc *corev1.Service, port int32) bool {
	reached := targetedPorts(pod, svc, port)
	for _, t := range reached {
		if !probes(t.container, t.port) {
			return false
		}
	}
	return len(reached) > 0
}

// ServiceContainers names the containers of pod (its app's and its native
// sidecars) that declare a port svc sends traffic to (only service port
// port's, when it is known; 0 for every port): the ones whose exit stops
// the pod's share of the traffic. A target port given as a number that no
// container declares reaches one that cannot be told, and names none.
func ServiceContainers(pod *corev1.Pod, svc *corev1.Service, port int32) map[string]bool {
	out := map[string]bool{}
	for _, t := range targetedPorts(pod, svc, port) {
		out[t.container.Name] = true
	}
	return out
}

// targetedPort is a container's port that a Service port reaches.
type targetedPort struct {
	container corev1.Container
	port      int32
}

// targetedPorts resolves every port of svc (only port's, when it is not 0)
// on pod's app containers and native sidecars.
func targetedPorts(pod *corev1.Pod, svc *corev1.Service, port int32) []targetedPort {
	if svc == nil {
		return nil
	}
	var out []targetedPort
	for _, sp := range svc.Spec.Ports {
		if port != 0 && sp.Port != port {
			continue
		}
		target := sp.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(sp.Port)
		}
		for _, c := range appAndSidecars(pod) {
			if p, ok := containerPort(c, target); ok {
				out = append(out, targetedPort{c, p})
			}
		}
	}
	return out
}

// appAndSidecars are the containers that run while p serves: its
// containers and its native sidecars (init containers with restartPolicy
// Always); not the ordinary init containers, which end before.
func appAndSidecars(p *corev1.Pod) []corev1.Container {
	out := slices.Clone(p.Spec.Containers)
	for _, c := range p.Spec.InitContainers {
		if IsNativeSidecar(c) {
			out = append(out, c)
		}
	}
	return out
}

// IsNativeSidecar reports whether c, an init container, is a native
// sidecar: restartPolicy Always, so it runs beside the app's containers
// for the pod's life, and at a deletion the kubelet stops it after them
// (or once the grace period has run out waiting for them).
func IsNativeSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
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

// ServicePortOf is the port of svc (its spec.ports[].port) that a target
// URL reaches: at the Service's cluster IP or a load balancer address by
// that port, by the Service's own DNS name, or at any address by one of its
// node ports. 0 when the URL reaches none that can be told (another name:
// an ingress): then every port counts.
func ServicePortOf(svc *corev1.Service, target *url.URL) int32 {
	if svc == nil || target == nil {
		return 0
	}
	port := prober.URLPort(target)
	host := target.Hostname()
	// By address, or by the Service's own DNS name (NAME, NAME.NS,
	// NAME.NS.svc, NAME.NS.svc.cluster.local).
	named := host == svc.Name || host == svc.Name+"."+svc.Namespace || strings.HasPrefix(host, svc.Name+"."+svc.Namespace+".svc")
	addressed := named || host == svc.Spec.ClusterIP || slices.Contains(svc.Spec.ClusterIPs, host)
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		addressed = addressed || (ing.IP != "" && ing.IP == host)
	}
	for _, sp := range svc.Spec.Ports {
		if (addressed && int(sp.Port) == port) || (sp.NodePort != 0 && int(sp.NodePort) == port) {
			return sp.Port
		}
	}
	return 0
}
