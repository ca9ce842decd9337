package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// A node is upstream's node stack, each process in the node's network
// namespace: containerd (with runc and the CNI bridge plugin) and the
// kubelet, both also in a private mount namespace, and kube-proxy (behind a
// delay proxy when the node's proxy lag is set).
const (
	compContainerd = "containerd"
	compKubelet    = "kubelet"
)

// nodeComponents in start order.
var nodeComponents = []string{compContainerd, compKubelet, compDelay, compProxy}

// CgroupRoot is the cgroup (in every v1 hierarchy) under which each node's
// kubelet keeps its pods: /rollprobe-lab/<node>. Each kubelet needs its own
// root, or it would remove the others' pod cgroups as orphans.
const CgroupRoot = "/rollprobe-lab"

// sandboxImage is the image of every pod's sandbox ("pause") container.
const sandboxImage = "localhost/lab/pause:1"

// hostSysctls are what the kubelet sets on start (they are global, not per
// namespace); inside the node's mount namespace it writes to files bound
// over them, so the host keeps its values.
var hostSysctls = map[string]string{
	"vm.overcommit_memory": "1", "vm.panic_on_oom": "0", "kernel.panic": "10", "kernel.panic_on_oops": "1",
}

func (c Config) nodeDir(n netns.Node, parts ...string) string {
	return c.path(append([]string{"nodes", n.Name}, parts...)...)
}

// mountNSPath is the file holding node n's mount namespace.
func (c Config) mountNSPath(n netns.Node) string { return c.nodeDir(n, "ns", "mnt") }

// containerdSocket is node n's containerd endpoint.
func (c Config) containerdSocket(n netns.Node) string {
	return c.nodeDir(n, "containerd", "containerd.sock")
}

// startNode writes node n's configuration and starts its stack, returning
// once its containerd holds the lab's images and its kubelet and kube-proxy
// are running (the caller waits for the Node to be Ready).
func (c Config) startNode(ctx context.Context, n netns.Node, nodeToken, proxyToken string, images []string) error {
	logf := func(format string, args ...any) { c.logf("%s: "+format, append([]any{n.Name}, args...)...) }
	for _, d := range []string{"ns", "hostdirs/var-lib", "hostdirs/var-log", "hostdirs/run", "fakesysctl",
		"containerd/root", "containerd/state", "containerd/opt", "containerd/runc",
		"cni/net.d", "cni/ipam", "kubelet/root", "kubelet/pki", "kubelet/podlogs", "kube-proxy"} {
		if err := os.MkdirAll(c.nodeDir(n, d), 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{c.path("logs", n.Name), c.path("pids", n.Name)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := makeCgroups(n.Name); err != nil {
		return err
	}
	files := map[string]string{
		c.nodeDir(n, "resolv.conf"):                     "nameserver 127.0.0.1\n", // no DNS: unknown images fail to pull at once
		c.nodeDir(n, "containerd", "config.toml"):       c.containerdConfig(n),
		c.nodeDir(n, "cni", "net.d", "10-lab.conflist"): c.cniConfig(n),
		c.nodeDir(n, "kubelet", "config.yaml"):          c.kubeletConfig(n),
		c.nodeDir(n, "kubelet", "kubeconfig"):           string(kubeconfig(apiServerURL, c.apiServerCA(), "system:node:"+n.Name, nodeToken)),
		c.nodeDir(n, "kube-proxy", "config.yaml"):       kubeProxyConfig(n, c.nodeDir(n, "kube-proxy", "kubeconfig")),
	}
	proxyServer := apiServerURL
	if c.ProxyLag[n.Name] > 0 {
		proxyServer = "https://" + delayAddr
	}
	files[c.nodeDir(n, "kube-proxy", "kubeconfig")] = string(kubeconfig(proxyServer, c.apiServerCA(), "system:kube-proxy", proxyToken))
	for k, v := range hostSysctls {
		files[c.nodeDir(n, "fakesysctl", k)] = v + "\n"
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	if err := c.makeMountNS(n); err != nil {
		return fmt.Errorf("%s: mount namespace: %w", n.Name, err)
	}

	start := func(name string, mountNS bool, env []string, argv ...string) error {
		logf("starting %s", name)
		mnt := ""
		if mountNS {
			mnt = c.mountNSPath(n)
		}
		_, err := startDaemon(n.NS, mnt, argv, env, c.path("logs", n.Name, name+".log"), c.path("pids", n.Name, name+".pid"))
		return err
	}
	bin := func(name string) string { return filepath.Join(c.BinDir, name) }

	// containerd finds its shim on PATH: its own build, not a host one.
	if err := start(compContainerd, true, []string{"PATH=" + bin("containerd") + ":" + os.Getenv("PATH")},
		bin("containerd/containerd"), "--config", c.nodeDir(n, "containerd", "config.toml")); err != nil {
		return err
	}
	if err := c.waitContainerd(ctx, n, 30*time.Second); err != nil {
		return err
	}
	for _, img := range images {
		if out, err := exec.CommandContext(ctx, bin("containerd/ctr"), "-a", c.containerdSocket(n), "-n", "k8s.io",
			"images", "import", img).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: import %s: %w: %s", n.Name, filepath.Base(img), err, strings.TrimSpace(string(out)))
		}
	}
	logf("images imported")
	if err := start(compKubelet, true, nil, bin("kubelet"),
		"--config="+c.nodeDir(n, "kubelet", "config.yaml"),
		"--kubeconfig="+c.nodeDir(n, "kubelet", "kubeconfig"),
		"--root-dir="+c.nodeDir(n, "kubelet", "root"),
		"--cert-dir="+c.nodeDir(n, "kubelet", "pki"),
		"--hostname-override="+n.Name, "--node-ip="+n.IP, "--v=2"); err != nil {
		return err
	}
	if lag := c.ProxyLag[n.Name]; lag > 0 {
		if err := start(compDelay, false, nil, c.Self, "lab", "delay-proxy", "--listen="+delayAddr,
			"--upstream="+apiServerAddr, "--delay="+lag.String()); err != nil {
			return err
		}
	}
	return start(compProxy, false, nil, bin("kube-proxy"), "--config="+c.nodeDir(n, "kube-proxy", "config.yaml"), "--v=1")
}

// makeMountNS creates node n's private mount namespace, kept alive by a
// bind mount at mountNSPath. In it, /var/lib, /var/log and /run are the
// node's own directories (the kubelet writes device-plugin sockets,
// container logs and CNI results there whatever its flags say), the
// sysctls the kubelet sets are files of the node's, and resolv.conf names
// no resolver. The state directory is bound back in, since /run (its
// default parent) is hidden by the node's own.
func (c Config) makeMountNS(n netns.Node) error {
	nsDir := c.nodeDir(n, "ns")
	if err := run("mount", "--bind", nsDir, nsDir); err != nil {
		return err
	}
	if err := run("mount", "--make-private", nsDir); err != nil {
		return err
	}
	if err := os.WriteFile(c.mountNSPath(n), nil, 0o600); err != nil {
		return err
	}
	state := c.StateDir // absolute (Up)
	// Every source is read through /mnt, where the state directory stays
	// reachable while /run, /var/lib or /var/log (its parent, maybe) are
	// hidden; at the end it is bound back at its own path.
	src := func(parts ...string) string {
		rel, _ := filepath.Rel(state, c.nodeDir(n, parts...)) // both absolute: no error
		return filepath.Join("/mnt", rel)
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	fmt.Fprintf(&script, "mount --bind %q /mnt\n", state)
	for k := range hostSysctls {
		fmt.Fprintf(&script, "mount --bind %q /proc/sys/%s\n", src("fakesysctl", k), strings.ReplaceAll(k, ".", "/"))
	}
	fmt.Fprintf(&script, "mount --bind %q /etc/resolv.conf\n", src("resolv.conf"))
	fmt.Fprintf(&script, "mount --bind %q /var/lib\n", src("hostdirs", "var-lib"))
	fmt.Fprintf(&script, "mount --bind %q /var/log\n", src("hostdirs", "var-log"))
	fmt.Fprintf(&script, "mount --bind %q /run\n", src("hostdirs", "run"))
	fmt.Fprintf(&script, "mkdir -p %q && mount --bind /mnt %q && umount /mnt\n", state, state)
	scriptPath := c.nodeDir(n, "mount-ns.sh")
	if err := os.WriteFile(scriptPath, []byte(script.String()), 0o644); err != nil {
		return err
	}
	return run("unshare", "--mount="+c.mountNSPath(n), "--propagation", "private", "sh", scriptPath)
}

func (c Config) waitContainerd(ctx context.Context, n netns.Node, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last []byte
	for time.Now().Before(deadline) {
		out, err := exec.CommandContext(ctx, filepath.Join(c.BinDir, "containerd", "ctr"), "-a", c.containerdSocket(n), "version").CombinedOutput()
		if err == nil {
			return nil
		}
		last = out
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: containerd not serving after %s: %s", n.Name, limit, strings.TrimSpace(string(last)))
}

// containerdConfig is containerd 2.x's configuration for node n: cgroupfs
// (no systemd), runc from Debian, the CNI plugins from lab-bins, pod network
// namespaces under its state directory (so `ip netns` shows only the lab's
// own), and restrict_oom_score_adj because a sandbox without
// CAP_SYS_RESOURCE cannot lower a container's oom_score_adj.
func (c Config) containerdConfig(n netns.Node) string {
	d := func(parts ...string) string { return c.nodeDir(n, parts...) }
	return fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = %q
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %q
  [plugins.'io.containerd.cri.v1.runtime']
    disable_apparmor = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %q
          Root = %q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%q]
      conf_dir = %q
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
`, d("containerd", "root"), d("containerd", "state"), c.containerdSocket(n), c.containerdSocket(n)+".ttrpc",
		d("containerd", "opt"), sandboxImage, runcPath, d("containerd", "runc"),
		filepath.Join(c.BinDir, "cni"), d("cni", "net.d"))
}

// runcPath is Debian's runc (it needs cgo, so the lab does not build it).
const runcPath = "/usr/sbin/runc"

// cniConfig wires node n's pods to its bridge, with addresses from the
// node's pod subnet and the bridge as their gateway.
func (c Config) cniConfig(n netns.Node) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "lab",
  "plugins": [
    {
      "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, netns.PodBridge, c.nodeDir(n, "cni", "ipam"), n.PodCIDR, n.PodGateway)
}

// kubeletConfig: cgroup v1 is allowed (these hosts have it; the setting is
// inert on v2), the pods' cgroups go under this node's own root, and node
// status is reported often so readiness changes reach the API quickly. Pods
// resolve names through the lab's CoreDNS (clusterDNS); the node itself
// keeps a resolv.conf naming no resolver, so image pulls of unknown names
// fail at once.
func (c Config) kubeletConfig(n netns.Node) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
resolvConf: /etc/resolv.conf
clusterDNS: [%s]
clusterDomain: %s
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
`, CgroupRoot+"/"+n.Name, c.containerdSocket(n), c.nodeDir(n, "kubelet", "podlogs"), n.IP, netns.ClusterDNS, netns.ClusterDomain)
}

// kubeProxyConfig: nftables mode; conntrack sizing is left alone (it is a
// global table setting, not the node's to change).
func kubeProxyConfig(n netns.Node, kubeconfigPath string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: %s
clusterCIDR: %s
clientConnection:
  kubeconfig: %s
conntrack:
  maxPerCore: 0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 0.0.0.0:10256
`, n.Name, netns.ClusterCIDR, kubeconfigPath)
}

// cgroupHierarchies are the mounted hierarchies under /sys/fs/cgroup (v1
// controllers and named hierarchies; on a pure v2 host, the one root).
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var dirs []string
	for _, e := range entries {
		if e.IsDir() { // symlinks such as cpu,cpuacct are not followed
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"} // cgroup v2 only
	}
	return dirs
}

// makeCgroups creates CgroupRoot/<node> in every hierarchy (the kubelet
// refuses a cgroup root that does not exist). On cgroup v1 a new cpuset
// cgroup has no CPUs or memory nodes until given its parent's; on v2 a new
// cgroup's children get only the controllers it enables for its subtree
// (untested: these machines have v1 only).
func makeCgroups(node string) error {
	for _, h := range cgroupHierarchies() {
		for _, dir := range []string{filepath.Join(h, CgroupRoot), filepath.Join(h, CgroupRoot, node)} {
			if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
			if h == "/sys/fs/cgroup" { // v2: pass every available controller down
				if avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers")); err == nil {
					var enable []string
					for _, c := range strings.Fields(string(avail)) {
						enable = append(enable, "+"+c)
					}
					_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644)
				}
				continue
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
						return fmt.Errorf("cgroup %s: %w", dir, err)
					}
				}
			}
		}
	}
	return nil
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
