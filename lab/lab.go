// Package lab runs a real local Kubernetes cluster to try and test rollprobe
// on one machine: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler on a control-plane host, and N nodes, each a real kubelet
// with containerd, runc and the CNI bridge plugin, plus kube-proxy in
// nftables mode. Every host is a network namespace on a lab network with no
// uplink, so rollouts drop requests exactly as they do in production and no
// packet leaves the machine. It needs root.
package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// DefaultStateDir holds the lab's state: keys, kubeconfigs, logs, PIDs, etcd
// data, each node's containerd and kubelet directories. It is under /run
// because the namespaces it describes do not survive a reboot either.
const DefaultStateDir = "/run/rollprobe-lab"

// ActiveMarker names the state directory of the lab that is up. The lab's
// namespaces and cgroups have fixed names, so only one lab runs on a
// machine; the marker lets lab up refuse to take down a lab kept elsewhere,
// and lets lab down find a lab whose state is not where it looks (a test's
// lab, left up when its process was killed).
const ActiveMarker = "/run/rollprobe-lab.active"

// ActiveStateDir is the state directory the marker names, or "" when there
// is no marker.
func ActiveStateDir() string {
	b, err := os.ReadFile(ActiveMarker)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// DefaultNodes is the size of a lab unless told otherwise: two, the fewest
// that show what happens on one node while another still has ready pods.
const DefaultNodes = 2

// Components. Each is a process with a PID file and a log under the state
// directory; the control plane's are in the hub namespace, the others in
// their node's (under pids/<node>/ and logs/<node>/).
const (
	compEtcd       = "etcd"
	compAPIServer  = "kube-apiserver"
	compController = "kube-controller-manager"
	compScheduler  = "kube-scheduler"
	compDelay      = "delay-proxy"
	compProxy      = "kube-proxy"
)

// hubComponents in start order (the edge's after the control plane's; the
// edge's delay proxy runs only when the edge lags).
var hubComponents = []string{compEtcd, compAPIServer, compController, compScheduler, compCoreDNS, compEdgeDelay, compTraefik, compArgo}

const (
	apiServerAddr = netns.HubIP + ":6443"
	apiServerURL  = "https://" + apiServerAddr
	etcdAddr      = "127.0.0.1:2379"
	// delayAddr is where a lagged node's delay proxy listens, inside that
	// node's namespace.
	delayAddr = "127.0.0.1:6444"
)

// Config says where things are and how the lab behaves.
type Config struct {
	StateDir string
	// BinDir holds what make lab-bins builds: etcd, the Kubernetes
	// components, containerd/ and cni/.
	BinDir string
	// Self is the rollprobe binary, run as the delay proxy.
	Self string
	// Nodes is how many nodes (1 to netns.MaxNodes).
	Nodes int
	// Images maps an image repository ("rollprobe/demoapp") to the static
	// binary its image runs; each is imported under every tag in ImageTags.
	Images map[string]string
	// Pause is a static binary that waits for SIGTERM when run with the
	// argument "pause" (demoapp): every pod's sandbox container.
	Pause string
	// ProxyLag delays everything a node's kube-proxy hears from the
	// apiserver, by node name.
	ProxyLag map[string]time.Duration
	// EdgeLag delays everything Traefik's Kubernetes providers hear from
	// the apiserver: the ingress's own endpoint propagation lag.
	EdgeLag time.Duration
	// Progress receives one line per step.
	Progress io.Writer
}

// Recorded is what `lab up` leaves in the state directory for later
// commands (status, exec, down).
type Recorded struct {
	Nodes    []string                 `json:"nodes"`
	ProxyLag map[string]time.Duration `json:"proxy_lag,omitempty"`
	EdgeLag  time.Duration            `json:"edge_lag,omitempty"`
	Images   map[string]string        `json:"images"`
	Tokens   map[string]string        `json:"tokens"`
	Started  time.Time                `json:"started"`
	// BinDir holds the components and kubectl: lab exec puts it first on
	// PATH.
	BinDir string `json:"bin_dir"`
}

// NodeLayouts are the recorded nodes' places in the network layout.
func (r *Recorded) NodeLayouts() []netns.Node { return netns.Nodes(len(r.Nodes)) }

// Paths inside the state directory.
func (c Config) path(parts ...string) string {
	return filepath.Join(append([]string{c.StateDir}, parts...)...)
}

// apiServerCA is the apiserver's certificate with the CA that signed it,
// which it makes itself in --cert-dir (for the hub's address, the
// kubernetes Service's and names): what the lab's kubeconfigs verify it
// against. Absolute: a kubeconfig's relative paths are its directory's.
func (c Config) apiServerCA() string {
	p := c.path("pki", "apiserver", "apiserver.crt")
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// KubeconfigPath is the admin kubeconfig. Its server is the apiserver's
// address on the lab network, so it works from every lab host and pod, or
// from outside with a client that dials through netns.DialContextIn.
func (c Config) KubeconfigPath() string { return c.path("kubeconfig") }

func (c Config) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "lab: "+format+"\n", args...)
	}
}

// ReadRecorded loads what lab up recorded.
func ReadRecorded(stateDir string) (*Recorded, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, "lab.json"))
	if err != nil {
		return nil, fmt.Errorf("the lab is not up (%w): run rollprobe lab up", err)
	}
	var r Recorded
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("lab state %s: %w", stateDir, err)
	}
	return &r, nil
}

// requiredBins are what Up needs from BinDir.
var requiredBins = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet", "kubectl",
	"containerd/containerd", "containerd/containerd-shim-runc-v2", "containerd/ctr",
	"cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap",
	"coredns", "traefik", "crds/traefik.yaml", "crds/gateway.networking.k8s.io_httproutes.yaml",
	"rollouts-controller", "argo-crds/rollout-crd.yaml"}

// Up brings the lab up. It is idempotent: a healthy lab of the same shape
// (nodes, proxy lags, images) is left as it is; anything else (a
// half-started lab, a crash, another shape) is taken down first and started
// afresh.
func Up(ctx context.Context, c Config) error {
	if err := requireRoot(); err != nil {
		return err
	}
	// The daemons and the node mount namespaces are given paths under the
	// state directory: they must not depend on this process's working
	// directory.
	state, err := filepath.Abs(c.StateDir)
	if err != nil {
		return err
	}
	c.StateDir = state
	if c.Nodes < 1 || c.Nodes > netns.MaxNodes {
		return fmt.Errorf("a lab has 1 to %d nodes, not %d", netns.MaxNodes, c.Nodes)
	}
	for node := range c.ProxyLag {
		if !slices.ContainsFunc(netns.Nodes(c.Nodes), func(n netns.Node) bool { return n.Name == node }) {
			return fmt.Errorf("proxy lag for node %s: a lab of %d nodes has no such node", node, c.Nodes)
		}
	}
	for _, b := range requiredBins {
		if _, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil {
			return fmt.Errorf("lab binaries: %s not found in %s (build them with make lab-bins): %w", b, c.BinDir, err)
		}
	}
	if err := checkImageBinaries(c); err != nil {
		return err
	}
	if other := ActiveStateDir(); other != "" && other != c.StateDir && netns.Exists(netns.LabNetNS) {
		if _, err := ReadRecorded(other); err == nil {
			return fmt.Errorf("a lab is up with its state in %s: take it down first (rollprobe lab down --state-dir %s)", other, other)
		}
	}
	if rec, err := ReadRecorded(c.StateDir); err == nil {
		st := GetStatus(c.StateDir)
		if st.Healthy() && len(rec.Nodes) == c.Nodes && maps.Equal(rec.ProxyLag, c.ProxyLag) && rec.EdgeLag == c.EdgeLag && maps.Equal(rec.Images, c.Images) {
			c.logf("already up (started %s)", rec.Started.Format(time.RFC3339))
			return nil
		}
		c.logf("found a lab that is not healthy or has another shape: taking it down first")
	}
	if err := Down(c.StateDir, c.Progress); err != nil {
		return err
	}
	if err := up(ctx, c); err != nil {
		c.logf("up failed: %v; logs are in %s (rollprobe lab down cleans up)", err, c.path("logs"))
		return err
	}
	return nil
}

func up(ctx context.Context, c Config) error {
	start := time.Now()
	for _, d := range []string{"", "logs", "pids", "etcd", "images"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}
	nodes := netns.Nodes(c.Nodes)
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	tokens, err := writePKI(c.path("pki"), names)
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	if err := writeEdgePKI(c.path("pki")); err != nil {
		return fmt.Errorf("edge keys: %w", err)
	}
	if err := os.WriteFile(ActiveMarker, []byte(c.StateDir+"\n"), 0o644); err != nil {
		return fmt.Errorf("marker: %w", err)
	}
	rec := Recorded{Nodes: names, ProxyLag: c.ProxyLag, EdgeLag: c.EdgeLag, Images: c.Images, Tokens: tokens, Started: time.Now().UTC(), BinDir: c.BinDir}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(c.path("lab.json"), b, 0o600); err != nil {
		return err
	}
	for name, id := range map[string]string{"kubeconfig": "admin", "controller-manager.kubeconfig": "controller-manager", "scheduler.kubeconfig": "scheduler"} {
		if err := os.WriteFile(c.path(name), kubeconfig(apiServerURL, c.apiServerCA(), id, tokens[id]), 0o600); err != nil {
			return err
		}
	}
	images, err := c.writeImages()
	if err != nil {
		return err
	}

	c.logf("lab network %s on %s (hub %s, no uplink), %d nodes", netns.LabCIDR, netns.LabNetNS, netns.HubIP, c.Nodes)
	if err := netns.SetupHub(); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := netns.SetupNode(n, nodes); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	startHub := func(name string, argv ...string) error {
		c.logf("starting %s", name)
		_, err := startDaemon(netns.LabNetNS, "", argv, nil, c.path("logs", name+".log"), c.path("pids", name+".pid"))
		return err
	}
	bin := func(name string) string { return filepath.Join(c.BinDir, name) }

	if err := startHub(compEtcd, bin("etcd"),
		"--name=lab", "--data-dir="+c.path("etcd"),
		"--listen-client-urls=http://"+etcdAddr, "--advertise-client-urls=http://"+etcdAddr,
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=lab=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, netns.LabNetNS, "etcd", "http://"+etcdAddr+"/health", "", "", 60*time.Second); err != nil {
		return err
	}
	if err := startHub(compAPIServer, bin("kube-apiserver"),
		"--etcd-servers=http://"+etcdAddr,
		"--bind-address=0.0.0.0", "--secure-port=6443", "--advertise-address="+netns.HubIP,
		"--cert-dir="+c.path("pki", "apiserver"),
		"--token-auth-file="+c.path("pki", "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		// Nodes have no DNS names: the apiserver reaches kubelets (logs,
		// exec) at their InternalIP.
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file="+c.path("pki", "sa.pub"),
		"--service-account-signing-key-file="+c.path("pki", "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range="+netns.ServiceCIDR,
		"--profiling=false", "--v=1"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, netns.LabNetNS, "kube-apiserver", apiServerURL+"/readyz", tokens["admin"], c.apiServerCA(), 90*time.Second); err != nil {
		return err
	}
	// nodelifecycle removes the not-ready taint a kubelet registers with;
	// without it, pods stay Pending.
	if err := startHub(compController, bin("kube-controller-manager"),
		"--kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--authentication-kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--authorization-kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--controllers=*,-nodeipam,-cloud-node-lifecycle,-route,-service",
		"--leader-elect=false", "--bind-address=127.0.0.1",
		"--service-account-private-key-file="+c.path("pki", "sa.key"),
		"--root-ca-file="+c.apiServerCA(),
		"--v=1"); err != nil {
		return err
	}
	if err := startHub(compScheduler, bin("kube-scheduler"),
		"--kubeconfig="+c.path("scheduler.kubeconfig"),
		"--authentication-kubeconfig="+c.path("scheduler.kubeconfig"),
		"--authorization-kubeconfig="+c.path("scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address=127.0.0.1", "--v=1"); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes)+1)
	// The edge needs only the apiserver: it starts while the nodes do.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.startEdge(ctx, tokens); err != nil {
			errs[len(nodes)] = fmt.Errorf("edge: %w", err)
			return
		}
		if err := c.startArgo(ctx); err != nil {
			errs[len(nodes)] = fmt.Errorf("argo rollouts: %w", err)
		}
	}()
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.startNode(ctx, n, tokens["node:"+n.Name], tokens["kube-proxy"], images)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	client, err := NewClient(c.StateDir)
	if err != nil {
		return err
	}
	c.logf("waiting for %d nodes to be Ready", len(nodes))
	if err := client.waitNodesReady(ctx, names, 90*time.Second); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := waitHTTP(ctx, n.NS, n.Name+" kube-proxy", "http://127.0.0.1:10256/healthz", "", "", 60*time.Second); err != nil {
			return err
		}
	}
	c.logf("waiting for the default service account")
	if err := client.waitServiceAccount(ctx, 60*time.Second); err != nil {
		return err
	}
	c.logf("up in %s: kubeconfig %s", time.Since(start).Round(100*time.Millisecond), c.KubeconfigPath())
	return nil
}

// waitHTTP polls url in the namespace ns until it answers 200, for up to
// limit. An https url is verified against the certificate in caFile
// (read at each try: the apiserver writes its own as it starts); the
// token, when given, goes as a bearer token, so never to an unverified
// server.
func waitHTTP(ctx context.Context, ns, what, url, token, caFile string, limit time.Duration) error {
	dial := netns.DialContextIn(ns)
	deadline := time.Now().Add(limit)
	var last string
	var c *http.Client // built once its certificate can be read, then kept (one transport, its connection reused)
	for time.Now().Before(deadline) {
		var err error
		if c == nil {
			c, err = waitClient(url, caFile, dial)
		}
		if err == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			var resp *http.Response
			if resp, err = c.Do(req); err == nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
				last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
			}
		}
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %s (last: %s)", what, limit, last)
}

// waitClient is waitHTTP's client for url: an https one trusts only the
// certificate in caFile.
func waitClient(url, caFile string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*http.Client, error) {
	tr := &http.Transport{DialContext: dial}
	if strings.HasPrefix(url, "https://") {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("its certificate: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("its certificate %s: no PEM certificate in it", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: tr}, nil
}
