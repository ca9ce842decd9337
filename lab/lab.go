// Package lab runs a real local Kubernetes control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-proxy in nftables mode) and
// rollprobe's own node agent, all inside a network namespace with no uplink,
// so that rollouts drop requests exactly as they do in production and
// rollprobe can be tried and tested on one machine. It needs root.
package lab

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// NodeName is the lab's single node.
const NodeName = "lab-node"

// DefaultStateDir holds the lab's state: keys, kubeconfigs, logs, PIDs, etcd
// data. It is under /run because the namespaces it describes do not survive
// a reboot either.
const DefaultStateDir = "/run/rollprobe-lab"

// Components, in start order. Each is a process in the lab namespace with a
// PID file and a log under the state directory.
const (
	compEtcd       = "etcd"
	compAPIServer  = "kube-apiserver"
	compController = "kube-controller-manager"
	compDelay      = "delay-proxy"
	compAgent      = "node-agent"
	compProxy      = "kube-proxy"
)

var componentOrder = []string{compEtcd, compAPIServer, compController, compDelay, compAgent, compProxy}

const (
	apiServerAddr = "127.0.0.1:6443"
	delayAddr     = "127.0.0.1:6444"
	etcdAddr      = "127.0.0.1:2379"
)

// Config says where things are and how the lab behaves.
type Config struct {
	StateDir string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-proxy
	// (make lab-bins).
	BinDir string
	// Self is the rollprobe binary, run as the node agent and delay proxy.
	Self string
	// Images maps an image repository (the part before ':') to the local
	// binary that runs as that container.
	Images map[string]string
	// ProxyLag delays everything kube-proxy hears from the apiserver.
	ProxyLag time.Duration
	// Progress receives one line per step.
	Progress io.Writer
}

// Recorded is what `lab up` leaves in the state directory for later
// commands (status, exec, the agent).
type Recorded struct {
	ProxyLag time.Duration     `json:"proxy_lag"`
	Images   map[string]string `json:"images"`
	Tokens   map[string]string `json:"tokens"`
	Started  time.Time         `json:"started"`
	// BinDir holds the components, and kubectl when make lab-bins built
	// it: lab exec puts it first on PATH.
	BinDir string `json:"bin_dir"`
}

// Paths inside the state directory.
func (c Config) path(parts ...string) string {
	return filepath.Join(append([]string{c.StateDir}, parts...)...)
}

// KubeconfigPath is the admin kubeconfig; it works from inside the lab
// namespace (lab exec) or with a client that dials through netns.DialContextIn.
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

// Up brings the lab up. It is idempotent: a healthy lab with the same proxy
// lag is left as it is; anything else (a half-started lab, a crash, another
// lag) is taken down first and started afresh.
func Up(ctx context.Context, c Config) error {
	if err := requireRoot(); err != nil {
		return err
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil {
			return fmt.Errorf("lab binaries: %s not found in %s (build them with make lab-bins): %w", b, c.BinDir, err)
		}
	}
	if rec, err := ReadRecorded(c.StateDir); err == nil {
		st := GetStatus(c.StateDir)
		if st.Healthy() && rec.ProxyLag == c.ProxyLag {
			c.logf("already up (started %s)", rec.Started.Format(time.RFC3339))
			return nil
		}
		c.logf("found a lab that is not healthy or has another --proxy-lag: taking it down first")
	}
	if err := Down(c.StateDir, c.Progress); err != nil {
		return err
	}
	if err := up(ctx, c); err != nil {
		c.logf("up failed: %v; logs are in %s", err, c.path("logs"))
		return err
	}
	return nil
}

func up(ctx context.Context, c Config) error {
	for _, d := range []string{"", "logs", "pids", "pods", "etcd"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}
	tokens, err := writePKI(c.path("pki"))
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	rec := Recorded{ProxyLag: c.ProxyLag, Images: c.Images, Tokens: tokens, Started: time.Now().UTC(), BinDir: c.BinDir}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(c.path("lab.json"), b, 0o600); err != nil {
		return err
	}
	server := "https://" + apiServerAddr
	for name, tok := range map[string]string{"kubeconfig": tokens["admin"], "controller-manager.kubeconfig": tokens["controller-manager"], "agent.kubeconfig": tokens["agent"]} {
		if err := os.WriteFile(c.path(name), kubeconfig(server, name, tok), 0o600); err != nil {
			return err
		}
	}
	proxyServer := server
	if c.ProxyLag > 0 {
		proxyServer = "https://" + delayAddr
	}
	if err := os.WriteFile(c.path("kube-proxy.kubeconfig"), kubeconfig(proxyServer, "kube-proxy", tokens["kube-proxy"]), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("kube-proxy.yaml"), []byte(kubeProxyConfig(c.path("kube-proxy.kubeconfig"))), 0o644); err != nil {
		return err
	}

	c.logf("network namespace %s (bridge %s %s, no uplink)", netns.LabNetNS, netns.Bridge, netns.NodeIP)
	if err := netns.SetupLab(); err != nil {
		return err
	}
	start := func(name string, argv ...string) error {
		c.logf("starting %s", name)
		_, err := startDaemon(netns.LabNetNS, argv, nil, c.path("logs", name+".log"), c.path("pids", name+".pid"))
		return err
	}
	bin := func(name string) string { return filepath.Join(c.BinDir, name) }

	if err := start(compEtcd, bin("etcd"),
		"--name=lab", "--data-dir="+c.path("etcd"),
		"--listen-client-urls=http://"+etcdAddr, "--advertise-client-urls=http://"+etcdAddr,
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=lab=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "etcd", "http://"+etcdAddr+"/health", "", 60*time.Second); err != nil {
		return err
	}
	if err := start(compAPIServer, bin("kube-apiserver"),
		"--etcd-servers=http://"+etcdAddr,
		"--bind-address=0.0.0.0", "--secure-port=6443", "--advertise-address="+netns.NodeIP,
		"--cert-dir="+c.path("pki", "apiserver"),
		"--token-auth-file="+c.path("pki", "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-key-file="+c.path("pki", "sa.pub"),
		"--service-account-signing-key-file="+c.path("pki", "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range="+netns.ServiceCIDR,
		"--profiling=false", "--v=1"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "kube-apiserver", "https://"+apiServerAddr+"/readyz", tokens["admin"], 90*time.Second); err != nil {
		return err
	}
	if err := start(compController, bin("kube-controller-manager"),
		"--kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--authentication-kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--authorization-kubeconfig="+c.path("controller-manager.kubeconfig"),
		"--controllers=*,-nodelifecycle,-nodeipam,-cloud-node-lifecycle,-route,-service,-serviceaccount-token",
		"--leader-elect=false", "--bind-address=127.0.0.1",
		"--service-account-private-key-file="+c.path("pki", "sa.key"),
		"--root-ca-file="+c.path("pki", "apiserver", "apiserver.crt"),
		"--v=1"); err != nil {
		return err
	}
	if c.ProxyLag > 0 {
		if err := start(compDelay, c.Self, "lab", "delay-proxy", "--listen="+delayAddr, "--upstream="+apiServerAddr,
			"--delay="+c.ProxyLag.String()); err != nil {
			return err
		}
	}
	if err := start(compAgent, c.Self, "lab", "node-agent", "-v", "--state-dir="+c.StateDir); err != nil {
		return err
	}
	client, err := NewClient(c.StateDir)
	if err != nil {
		return err
	}
	c.logf("waiting for node %s to be Ready", NodeName)
	if err := client.waitNodeReady(ctx, 60*time.Second); err != nil {
		return err
	}
	if err := start(compProxy, bin("kube-proxy"), "--config="+c.path("kube-proxy.yaml"), "--v=1"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "kube-proxy", "http://127.0.0.1:10256/healthz", "", 60*time.Second); err != nil {
		return err
	}
	c.logf("waiting for the default service account")
	if err := client.waitServiceAccount(ctx, 60*time.Second); err != nil {
		return err
	}
	c.logf("up: kubeconfig %s", c.KubeconfigPath())
	return nil
}

func kubeProxyConfig(kubeconfigPath string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: %s
clusterCIDR: 10.244.0.0/16
clientConnection:
  kubeconfig: %s
conntrack:
  maxPerCore: 0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, NodeName, kubeconfigPath)
}

// waitHTTP polls url from inside the lab namespace until it answers 200.
func waitHTTP(ctx context.Context, what, url, token string, limit time.Duration) error {
	client := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			DialContext:     netns.DialContextIn(netns.LabNetNS),
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // lab-local self-signed
		},
	}
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
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

// Down stops everything the lab started and removes its namespaces, nft
// tables (they live in the namespaces) and state. It works from whatever
// state is left, including after a crashed up, and only ends processes the
// lab started: those in its PID files and those inside its namespaces.
func Down(stateDir string, progress io.Writer) error {
	logf := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, "lab: "+format+"\n", args...)
		}
	}
	if err := requireRoot(); err != nil {
		return err
	}
	var errs []error
	// Components in reverse start order, then pod containers.
	for _, name := range slices.Backward(componentOrder) {
		if pid, ok := readPID(filepath.Join(stateDir, "pids", name+".pid")); ok && Alive(pid) {
			logf("stopping %s (pid %d)", name, pid)
			if err := stopPID(pid, 5*time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	podPIDs, _ := filepath.Glob(filepath.Join(stateDir, "pods", "*", "*.pid"))
	for _, f := range podPIDs {
		if pid, ok := readPID(f); ok && Alive(pid) {
			if err := stopPID(pid, time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	names, _ := netns.List()
	for _, ns := range names {
		if ns != netns.LabNetNS && !strings.HasPrefix(ns, netns.PodNetNSPref) {
			continue
		}
		// Anything still inside our namespaces was started by the lab.
		for _, pid := range netns.PIDs(ns) {
			if err := stopPID(pid, time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		logf("removing network namespace %s", ns)
		if _, err := netns.IP("netns", "delete", ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(stateDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ComponentStatus is one process of the lab.
type ComponentStatus struct {
	Name  string
	PID   int
	Alive bool
}

// Status is what lab status reports.
type Status struct {
	StateDir   string
	Up         bool // state recorded
	Components []ComponentStatus
	Recorded   *Recorded
}

// Healthy reports whether every component that should run does.
func (s Status) Healthy() bool {
	if !s.Up {
		return false
	}
	for _, c := range s.Components {
		if !c.Alive && (c.Name != compDelay || (s.Recorded != nil && s.Recorded.ProxyLag > 0)) {
			return false
		}
	}
	return netns.Exists(netns.LabNetNS)
}

// GetStatus reads the state directory and checks each component's process.
func GetStatus(stateDir string) Status {
	st := Status{StateDir: stateDir}
	rec, err := ReadRecorded(stateDir)
	if err != nil {
		return st
	}
	st.Up, st.Recorded = true, rec
	for _, name := range componentOrder {
		if name == compDelay && rec.ProxyLag == 0 {
			continue
		}
		pid, ok := readPID(filepath.Join(stateDir, "pids", name+".pid"))
		st.Components = append(st.Components, ComponentStatus{Name: name, PID: pid, Alive: ok && Alive(pid)})
	}
	return st
}
