package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// The edge: what stands between users and a Service in production. CoreDNS
// answers the cluster's names (and the lab's public-looking zone); Traefik is
// the ingress controller and Gateway API implementation. Both are upstream
// builds (make lab-bins) run as processes on the hub, which is the lab's
// client host: CoreDNS is the kube-dns Service's one endpoint, and Traefik
// stands where a cloud load balancer and its ingress would, routing to pod
// IPs from EndpointSlices as Traefik does by default.
const (
	compCoreDNS   = "coredns"
	compEdgeDelay = "edge-delay-proxy"
	compTraefik   = "traefik"
	// compTraefikEmpty is a second Traefik a test starts for as long as it
	// runs (StartTraefikAllowingEmptyServices); lab down stops it too.
	compTraefikEmpty = "traefik-allow-empty"

	// edgeDelayAddr is where the delay proxy in front of Traefik's
	// Kubernetes providers listens when the edge lags: on the hub's lab
	// address, which the apiserver's self-signed certificate names, so
	// Traefik keeps verifying it.
	edgeDelayAddr = netns.HubIP + ":6445"
	// traefikPingURL answers 200 once Traefik serves (its own entry point,
	// on the hub's loopback only).
	traefikPingURL = "http://127.0.0.1:8082/ping"
	// traefikEmptyPingAddr is compTraefikEmpty's own entry point (its
	// ping), beside the default Traefik's on the hub's loopback.
	traefikEmptyPingAddr = "127.0.0.1:8083"
	// AllowEmptyEdgePort is compTraefikEmpty's websecure entry point on the
	// hub's addresses (the default Traefik's is 443).
	AllowEmptyEdgePort = 8443
	// corednsHealthURL answers 200 once CoreDNS serves.
	corednsHealthURL = "http://127.0.0.1:8091/health"

	// EdgeTLSSecret is the Secret (in the default namespace) holding the
	// edge's certificate for *.lab.example, issued by the lab's edge CA.
	EdgeTLSSecret = "lab-edge-tls"
	// GatewayName is the Gateway (default namespace) the samples'
	// HTTPRoutes attach to: listeners "http" (:80) and "https" (:443).
	GatewayName = "lab"
)

// EdgeCAPath is the lab's edge CA certificate, for probing https:// names in
// lab.example (rollprobe probe --cacert).
func (c Config) EdgeCAPath() string { return c.path("pki", "edge-ca.crt") }

// TraefikAccessLog is Traefik's access log: one JSON object a request, with
// the backend address it forwarded to (ServiceAddr). Tests read it as the
// referee for what the edge did.
func (c Config) TraefikAccessLog() string { return c.path("logs", "traefik-access.log") }

// TraefikAllowingEmptyAccessLog is compTraefikEmpty's access log, in the
// same format as TraefikAccessLog.
func (c Config) TraefikAllowingEmptyAccessLog() string {
	return c.path("logs", compTraefikEmpty+"-access.log")
}

// StartTraefikAllowingEmptyServices starts a second Traefik on the hub: the
// lab's build and arguments, but with its CRD provider alone (IngressRoutes,
// TraefikServices), providers.kubernetesCRD.allowEmptyServices=true and
// allowCrossNamespace=true (routes naming another namespace's services,
// which the default Traefik refuses; no other route changes by it), its
// websecure entry point on AllowEmptyEdgePort (web on 8000, its ping on the
// hub's loopback) and its own logs. It serves the same routes as the
// default Traefik, so one request stream through each, side by side, shows
// what the option changes (a Service left without a serving endpoint behind
// a weighted route). The returned stop ends it (lab down does too, by its
// PID file); the caller stops it when done: a second edge reloading on
// every EndpointSlice change is load the other tests do not expect.
func (c Config) StartTraefikAllowingEmptyServices(ctx context.Context) (stop func() error, err error) {
	rec, err := ReadRecorded(c.StateDir)
	if err != nil {
		return nil, err
	}
	var args []string
	for _, a := range c.traefikArgs(apiServerURL) {
		switch {
		case strings.HasPrefix(a, "--providers.") && !strings.HasPrefix(a, "--providers.kubernetesCRD"):
			continue
		case strings.HasPrefix(a, "--entryPoints.web.address="):
			a = "--entryPoints.web.address=:8000"
		case strings.HasPrefix(a, "--entryPoints.websecure.address="):
			a = fmt.Sprintf("--entryPoints.websecure.address=:%d", AllowEmptyEdgePort)
		case strings.HasPrefix(a, "--entryPoints.traefik.address="):
			a = "--entryPoints.traefik.address=" + traefikEmptyPingAddr
		case strings.HasPrefix(a, "--accesslog.filePath="):
			a = "--accesslog.filePath=" + c.TraefikAllowingEmptyAccessLog()
		}
		args = append(args, a)
	}
	args = append(args, "--providers.kubernetesCRD.allowEmptyServices=true", "--providers.kubernetesCRD.allowCrossNamespace=true")
	pidFile := c.path("pids", compTraefikEmpty+".pid")
	if pid, ok := readPID(pidFile); ok && Alive(pid) {
		return nil, fmt.Errorf("%s is running already (pid %d)", compTraefikEmpty, pid)
	}
	c.logf("starting %s", compTraefikEmpty)
	pid, err := startDaemon(netns.LabNetNS, "", append([]string{filepath.Join(rec.BinDir, "traefik")}, args...), nil,
		c.path("logs", compTraefikEmpty+".log"), pidFile)
	if err != nil {
		return nil, err
	}
	stop = func() error {
		if err := stopPID(pid, 5*time.Second); err != nil {
			return fmt.Errorf("stop %s: %w", compTraefikEmpty, err)
		}
		return os.Remove(pidFile)
	}
	if err := waitHTTP(ctx, netns.LabNetNS, compTraefikEmpty, "http://"+traefikEmptyPingAddr+"/ping", "", "", 60*time.Second); err != nil {
		return nil, errors.Join(err, stop())
	}
	return stop, nil
}

// corefile: the kubernetes plugin serves cluster.local from the apiserver
// (through CoreDNS's own kubeconfig); a template answers every name in
// lab.example with the hub's address (A) and no IPv6 (an empty AAAA
// answer, so resolvers do not wait for one); everything else is refused:
// the lab has no upstream. The TTL of cluster names is the plugin's default
// (5 s); the cache is the Deployment-default 30 s, as most clusters run it.
func (c Config) corefile() string {
	return fmt.Sprintf(`.:53 {
    errors
    health 127.0.0.1:8091
    ready 127.0.0.1:8181
    kubernetes %[1]s in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    template IN A %[3]s {
        answer "{{ .Name }} 30 IN A %[4]s"
    }
    template IN AAAA %[3]s {
        rcode NOERROR
    }
    cache 30
    loadbalance
}
`, netns.ClusterDomain, c.path("coredns.kubeconfig"), netns.EdgeDomain, netns.HubIP)
}

// traefikArgs is Traefik's static configuration: entry points web (:80)
// and websecure (:443, TLS on every router; certificates come from the
// Ingresses' and Gateway's Secrets), the Ingress, CRD and Gateway API
// providers, a JSON access log with every field, and ping for health. The
// providers' throttle stays at Traefik's default (2 s for the whole
// provider set): it is part of what the edge's lag is made of.
func (c Config) traefikArgs(apiServer string) []string {
	args := []string{
		"--global.checkNewVersion=false", "--global.sendAnonymousUsage=false",
		"--log.level=INFO", "--log.noColor=true",
		"--entryPoints.web.address=:80",
		"--entryPoints.websecure.address=:443",
		"--entryPoints.websecure.http.tls=true",
		"--entryPoints.traefik.address=127.0.0.1:8082",
		"--ping=true", "--ping.entryPoint=traefik",
		"--accesslog=true", "--accesslog.format=json", "--accesslog.filePath=" + c.TraefikAccessLog(),
		"--accesslog.fields.defaultMode=keep",
		// The request ID rollprobe puts on every request: how a referee
		// finds a run's requests in the log.
		"--accesslog.fields.headers.names.X-Request-Id=keep",
		// The demo app's name on its responses, as the pod sent them
		// (origin_X-Pod-Name): a 5xx without it is one Traefik made itself.
		"--accesslog.fields.headers.names.X-Pod-Name=keep",
	}
	for _, p := range []string{"kubernetesIngress", "kubernetesCRD", "kubernetesGateway"} {
		args = append(args,
			"--providers."+p+"=true",
			"--providers."+p+".endpoint="+apiServer,
			"--providers."+p+".token="+c.path("pki", "traefik.token"),
			"--providers."+p+".certAuthFilePath="+c.apiServerCA(),
		)
	}
	return args
}

// edgeObjects are the cluster objects the edge needs: the kube-dns Service
// at the kubelets' clusterDNS address with the hub as its one endpoint (a
// selectorless Service, kept by the EndpointSlice below), the edge's TLS
// Secret, also Traefik's default certificate (its TLSStore named default:
// without one, Traefik generates a new RSA key pair on every update of its
// dynamic configuration, each EndpointSlice change of a rollout included:
// CPU taken from the edge while the lab measures it), the IngressClass (the
// default one), and Traefik's GatewayClass with the lab's Gateway.
func edgeObjects(cert, key []byte) string {
	indent := func(b []byte) string { return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n    ") }
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: %[1]s
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-hub
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: lab.rollprobe.dev
addressType: IPv4
endpoints:
- addresses: [%[2]s]
  conditions: {ready: true}
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: v1
kind: Secret
metadata:
  name: %[3]s
  namespace: default
type: kubernetes.io/tls
stringData:
  tls.crt: |
    %[4]s
  tls.key: |
    %[5]s
---
apiVersion: traefik.io/v1alpha1
kind: TLSStore
metadata:
  name: default
  namespace: default
spec:
  defaultCertificate: {secretName: %[3]s}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: traefik
  annotations: {ingressclass.kubernetes.io/is-default-class: "true"}
spec:
  controller: traefik.io/ingress-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: traefik
spec:
  controllerName: traefik.io/gateway-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: %[6]s
  namespace: default
spec:
  gatewayClassName: traefik
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    allowedRoutes: {namespaces: {from: All}}
  - name: https
    protocol: HTTPS
    port: 443
    tls:
      mode: Terminate
      certificateRefs: [{name: %[3]s}]
    allowedRoutes: {namespaces: {from: All}}
`, netns.ClusterDNS, netns.HubIP, EdgeTLSSecret, indent(cert), indent(key), GatewayName)
}

// kubectl runs the lab's kubectl on the hub with the admin kubeconfig.
func (c Config) kubectl(ctx context.Context, stdin string, args ...string) error {
	argv := append([]string{"--net=" + netns.NSPath(netns.LabNetNS), "--",
		filepath.Join(c.BinDir, "kubectl"), "--kubeconfig=" + c.KubeconfigPath()}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startEdge installs the CRDs (Traefik's and the Gateway API's standard
// channel, from the same downloads the binary was built from), the edge's
// objects, then starts CoreDNS and Traefik (behind a delay proxy when the
// edge lags) and waits until both answer their health checks.
func (c Config) startEdge(ctx context.Context, tokens map[string]string) error {
	c.logf("installing the Traefik and Gateway API CRDs")
	// Server-side: the HTTPRoute CRD is larger than the annotation a
	// client-side apply keeps.
	if err := c.kubectl(ctx, "", "apply", "--server-side", "-f", filepath.Join(c.BinDir, "crds")); err != nil {
		return err
	}
	if err := c.kubectl(ctx, "", "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"); err != nil {
		return err
	}
	cert, err := os.ReadFile(c.path("pki", "edge.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(c.path("pki", "edge.key"))
	if err != nil {
		return err
	}
	if err := c.kubectl(ctx, edgeObjects(cert, key), "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}

	files := map[string]string{
		c.path("Corefile"):             c.corefile(),
		c.path("coredns.kubeconfig"):   string(kubeconfig(apiServerURL, c.apiServerCA(), "lab-coredns", tokens["coredns"])),
		c.path("pki", "traefik.token"): tokens["traefik"],
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	startHub := func(name string, argv ...string) error {
		c.logf("starting %s", name)
		_, err := startDaemon(netns.LabNetNS, "", argv, nil, c.path("logs", name+".log"), c.path("pids", name+".pid"))
		return err
	}
	if err := startHub(compCoreDNS, filepath.Join(c.BinDir, "coredns"), "-conf", c.path("Corefile")); err != nil {
		return err
	}
	traefikAPI := apiServerURL
	if c.EdgeLag > 0 {
		if err := startHub(compEdgeDelay, c.Self, "lab", "delay-proxy", "--listen="+edgeDelayAddr,
			"--upstream="+apiServerAddr, "--delay="+c.EdgeLag.String()); err != nil {
			return err
		}
		traefikAPI = "https://" + edgeDelayAddr
	}
	if err := startHub(compTraefik, append([]string{filepath.Join(c.BinDir, "traefik")}, c.traefikArgs(traefikAPI)...)...); err != nil {
		return err
	}
	if err := waitHTTP(ctx, netns.LabNetNS, "coredns", corednsHealthURL, "", "", 60*time.Second); err != nil {
		return err
	}
	return waitHTTP(ctx, netns.LabNetNS, "traefik", traefikPingURL, "", "", 60*time.Second)
}

// ResolvConf is the resolv.conf lab exec gives a command on host ns: the
// hub asks CoreDNS directly (it is not a node: no kube-proxy), a node asks
// the kube-dns Service, as its pods do; both search the default namespace's
// Service names as a pod of that namespace does.
func ResolvConf(ns string) string {
	server := netns.ClusterDNS
	if ns == netns.LabNetNS {
		server = netns.HubIP
	}
	d := netns.ClusterDomain
	return fmt.Sprintf("nameserver %s\nsearch default.svc.%s svc.%s %s\noptions ndots:5\n", server, d, d, d)
}

// ExecCommand is the command that runs argv on lab host ns with that host's
// resolv.conf (ResolvConf): in a mount namespace of its own (unshare), where
// the lab's file is bound over /etc/resolv.conf, then in the host's network
// namespace (nsenter). The machine's own /etc/resolv.conf is never touched,
// and the PID stays argv's own through every exec (signals reach it).
func ExecCommand(stateDir, ns string, argv []string) (*exec.Cmd, error) {
	resolv := filepath.Join(stateDir, "resolv", ns+".conf")
	if err := os.MkdirAll(filepath.Dir(resolv), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(resolv, []byte(ResolvConf(ns)), 0o644); err != nil {
		return nil, err
	}
	const bind = `mount --bind "$0" /etc/resolv.conf || exit 126; exec "$@"`
	args := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", bind, resolv,
		"nsenter", "--net=" + netns.NSPath(ns), "--"}, argv...)
	return exec.Command("unshare", args...), nil
}
