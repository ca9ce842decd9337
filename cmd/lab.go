package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report/exitcode"
)

type labOptions struct {
	*globalOptions
	stateDir string
}

func newLabCommand(g *globalOptions) *cobra.Command {
	o := &labOptions{globalOptions: g, stateDir: lab.DefaultStateDir}
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "A real local Kubernetes cluster to try and test rollprobe (needs root)",
		Long: `lab runs a real Kubernetes cluster on this machine: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler on a control-plane host, and N nodes, each a
real kubelet with containerd, runc and the CNI bridge plugin, and kube-proxy (nftables).
Every host is a network namespace on a lab network with no uplink; pods are real
containers from images the lab builds from local binaries. Rollouts drop requests
exactly as in production.

It needs root (namespaces, cgroups, nftables), Debian's runc and busybox-static
(make lab-deps), and the component binaries built by 'make lab-bins'.`,
	}
	cmd.PersistentFlags().StringVar(&o.stateDir, "state-dir", o.stateDir, "where the lab keeps its keys, logs, PIDs and data")
	cmd.AddCommand(newLabUpCommand(o), newLabDownCommand(o), newLabStatusCommand(o), newLabExecCommand(o),
		newLabApplyCommand(o), newLabServiceIPCommand(o), newLabDelayProxyCommand())
	return cmd
}

type labUpOptions struct {
	*labOptions
	nodes    int
	proxyLag []string
	bins     string
	images   []string
	cfg      lab.Config
}

func newLabUpCommand(lo *labOptions) *cobra.Command {
	o := &labUpOptions{labOptions: lo, nodes: lab.DefaultNodes}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring the lab up (idempotent)",
		Example: `  rollprobe lab up                           # 2 nodes
  rollprobe lab up --nodes 3 --proxy-lag lab-node-2=3s   # node 2's kube-proxy hears of changes 3s late
  rollprobe lab up --edge-lag 3s             # the ingress (Traefik) hears of changes 3s late`,
		Args: positional(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return exitcode.UsageError(err)
			}
			if err := o.complete(); err != nil {
				return exitcode.UsageError(err)
			}
			cmd.SilenceUsage = true
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().IntVar(&o.nodes, "nodes", o.nodes, fmt.Sprintf("how many nodes (1 to %d)", netns.MaxNodes))
	cmd.Flags().StringArrayVar(&o.proxyLag, "proxy-lag", nil, "delay what kube-proxy hears from the apiserver (endpoint propagation lag): D for every node, NODE=D for one (repeatable)")
	cmd.Flags().DurationVar(&o.cfg.EdgeLag, "edge-lag", 0, "delay what the ingress controller (Traefik) hears from the apiserver: the edge's own endpoint propagation lag")
	cmd.Flags().StringVar(&o.bins, "bins", os.Getenv("ROLLPROBE_LAB_BINS"), "directory with the components make lab-bins builds (default: the newest build in the cache)")
	cmd.Flags().StringArrayVar(&o.images, "image", nil, "map an image repository to a local static binary, REPO=PATH (repeatable); imported under the tags "+strings.Join(lab.ImageTags, ", "))
	return cmd
}

func (o *labUpOptions) validate() error {
	if o.nodes < 1 || o.nodes > netns.MaxNodes {
		return fmt.Errorf("--nodes %d: want 1 to %d", o.nodes, netns.MaxNodes)
	}
	if o.cfg.EdgeLag < 0 {
		return fmt.Errorf("--edge-lag %s: a lag is not negative", o.cfg.EdgeLag)
	}
	lags, err := parseProxyLags(o.proxyLag, o.nodes)
	if err != nil {
		return err
	}
	o.cfg.ProxyLag = lags
	return nil
}

// parseProxyLags reads --proxy-lag values (D, or NODE=D) into a lag per
// node of a lab of n nodes; a node's own value beats the one for all.
func parseProxyLags(values []string, n int) (map[string]time.Duration, error) {
	all := time.Duration(0)
	own := map[string]time.Duration{}
	for _, v := range values {
		node, d, hasNode := strings.Cut(v, "=")
		if !hasNode {
			node, d = "", v
		}
		lag, err := time.ParseDuration(d)
		if err != nil || lag < 0 {
			return nil, fmt.Errorf("--proxy-lag %q: want a non-negative duration, D or NODE=D", v)
		}
		if !hasNode {
			all = lag
			continue
		}
		valid := false
		for _, l := range netns.Nodes(n) {
			valid = valid || l.Name == node
		}
		if !valid {
			return nil, fmt.Errorf("--proxy-lag %q: a lab of %d nodes has nodes %s to %s", v, n, netns.NodeName(1), netns.NodeName(n))
		}
		own[node] = lag
	}
	lags := map[string]time.Duration{}
	for _, l := range netns.Nodes(n) {
		lag, ok := own[l.Name]
		if !ok {
			lag = all
		}
		if lag > 0 {
			lags[l.Name] = lag
		}
	}
	return lags, nil
}

func (o *labUpOptions) complete() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bins := o.bins
	if bins == "" {
		if bins, err = findLabBins(); err != nil {
			return err
		}
	}
	images, err := labImages(self, o.images)
	if err != nil {
		return err
	}
	o.cfg.StateDir, o.cfg.BinDir, o.cfg.Self, o.cfg.Nodes = o.stateDir, bins, self, o.nodes
	// The sandbox is the demoapp next to this binary, whatever --image maps.
	o.cfg.Images, o.cfg.Pause, o.cfg.Progress = images, demoappNextTo(self), o.stderr
	return nil
}

func (o *labUpOptions) run(ctx context.Context) error {
	if err := lab.Up(ctx, o.cfg); err != nil {
		return exitcode.UsageError(err)
	}
	fmt.Fprintf(o.stdout, "kubeconfig: %s (for commands on the lab's hosts, which lab exec runs: this machine's own network does not reach the lab)\n", o.cfg.KubeconfigPath())
	fmt.Fprintf(o.stdout, "run commands on a node: rollprobe lab exec -- kubectl get nodes -o wide\n")
	fmt.Fprintf(o.stdout, "samples: rollprobe lab apply -f lab/manifests/naive.yaml\n")
	return nil
}

// findLabBins returns the newest complete directory of lab binaries in the
// cache.
func findLabBins() (string, error) {
	cache := os.Getenv("ROLLPROBE_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "rollprobe")
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "lab-bins", "*"))
	var best string
	var bestTime time.Time
	for _, d := range dirs {
		// The last binaries build.sh makes: a directory with them is complete.
		fi, err := os.Stat(filepath.Join(d, "cni", "portmap"))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "kubelet")); err != nil {
			continue
		}
		if fi.ModTime().After(bestTime) {
			best, bestTime = d, fi.ModTime()
		}
	}
	if best == "" {
		return "", fmt.Errorf("no lab binaries under %s/lab-bins: build them with make lab-bins (or pass --bins)", cache)
	}
	return best, nil
}

// labImages maps the samples' images to local binaries: rollprobe/demoapp is
// the demoapp next to this binary, rollprobe/rollprobe is this binary.
func labImages(self string, extra []string) (map[string]string, error) {
	m := map[string]string{
		"rollprobe/demoapp": demoappNextTo(self),
		lab.ReleaseRepo:     self,
	}
	for _, e := range extra {
		repo, path, ok := strings.Cut(e, "=")
		if !ok || repo == "" || path == "" || strings.Contains(repo, ":") {
			return nil, fmt.Errorf("--image %q: want REPO=PATH (a repository without a tag)", e)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		m[repo] = abs
	}
	for repo, path := range m {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("image %s: binary %s: %w (make build puts demoapp next to rollprobe)", repo, path, err)
		}
	}
	return m, nil
}

func demoappNextTo(self string) string { return filepath.Join(filepath.Dir(self), "demoapp") }

func newLabDownCommand(o *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop every lab process (pods and shims too), remove its namespaces, cgroups, nft tables and state",
		Args:  positional(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			if err := lab.Down(o.stateDir, o.stderr); err != nil {
				return err
			}
			fmt.Fprintln(o.stdout, "lab: down")
			return nil
		},
	}
}

func newLabStatusCommand(o *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the lab's processes",
		Args:  positional(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			st := lab.GetStatus(o.stateDir)
			if !st.Up {
				fmt.Fprintln(o.stdout, "lab: down")
				return exitcode.With(exitcode.Failures, errors.New("the lab is not up"))
			}
			for _, c := range st.Components {
				state := "running"
				if !c.Alive {
					state = "NOT RUNNING"
				}
				fmt.Fprintf(o.stdout, "%-30s pid %-8d %s\n", c.Name, c.PID, state)
			}
			fmt.Fprintf(o.stdout, "%-30s %d (one per pod)\n", "containerd shims", st.Shims)
			lags := "none"
			if len(st.Recorded.ProxyLag) > 0 {
				var parts []string
				for node, lag := range st.Recorded.ProxyLag {
					parts = append(parts, node+"="+lag.String())
				}
				sort.Strings(parts)
				lags = strings.Join(parts, " ")
			}
			fmt.Fprintf(o.stdout, "nodes %s, proxy lag %s, started %s, kubeconfig %s\n", strings.Join(st.Recorded.Nodes, " "), lags,
				st.Recorded.Started.Format(time.RFC3339), filepath.Join(o.stateDir, "kubeconfig"))
			c := lab.Config{StateDir: o.stateDir}
			fmt.Fprintf(o.stdout, "cluster DNS %s (CoreDNS on the client host %s), domain %s\n", netns.ClusterDNS, netns.HubIP, netns.ClusterDomain)
			fmt.Fprintf(o.stdout, "edge: Traefik on %s :80 and :443 for every name in %s (ingress lag %s), CA %s, access log %s\n",
				netns.HubIP, netns.EdgeDomain, st.Recorded.EdgeLag, c.EdgeCAPath(), c.TraefikAccessLog())
			if !st.Healthy() {
				return exitcode.With(exitcode.Failures, errors.New("the lab is not healthy: rollprobe lab up starts it afresh"))
			}
			return nil
		},
	}
}

type labExecOptions struct {
	*labOptions
	node   string
	client bool
	args   []string
	ns     string
	env    []string
}

func newLabExecCommand(lo *labOptions) *cobra.Command {
	o := &labExecOptions{labOptions: lo}
	cmd := &cobra.Command{
		Use:   "exec [--node NAME | --client] -- COMMAND [ARGS...]",
		Short: "Run a command on a lab host (a node by default) with KUBECONFIG set",
		Long: `exec runs a command in a lab host's network namespace: a node (the first one by
default), where kube-proxy routes ClusterIP traffic, or the client host (--client),
which is not a node and reaches Services only through NodePorts, as a load balancer would.
Names resolve through the lab's CoreDNS as in a pod of the default namespace
(naive, naive.default.svc, naive.default.svc.cluster.local), and every name in
lab.example is the ingress (Traefik) on the client host.`,
		Example: `  rollprobe lab exec -- kubectl get pods -o wide
  rollprobe lab exec -- rollprobe probe http://naive.default.svc/
  rollprobe lab exec -- rollprobe probe https://naive.lab.example/ --cacert /run/rollprobe-lab/pki/edge-ca.crt
  rollprobe lab exec -- rollprobe probe http://10.96.12.34/
  rollprobe lab exec --node lab-node-2 -- rollprobe probe http://10.96.12.34/ --duration 5s
  rollprobe lab exec --client -- rollprobe probe http://10.100.0.11:30080/`,
		Args: positional(1, -1, "a command to run after --"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.args = args
			if err := o.validate(); err != nil {
				return exitcode.UsageError(err)
			}
			if err := o.complete(); err != nil {
				return exitcode.UsageError(err)
			}
			cmd.SilenceUsage = true
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.node, "node", "", "the node to run on (default: the first)")
	cmd.Flags().BoolVar(&o.client, "client", false, "run on the client host (the control plane's, not a node)")
	return cmd
}

func (o *labExecOptions) validate() error {
	if o.client && o.node != "" {
		return errors.New("--node and --client: choose one host")
	}
	return nil
}

func (o *labExecOptions) complete() error {
	rec, err := lab.ReadRecorded(o.stateDir)
	if err != nil {
		return err
	}
	switch {
	case o.client:
		o.ns = netns.LabNetNS
	case o.node == "":
		o.ns = rec.NodeLayouts()[0].NS
	default:
		for _, n := range rec.NodeLayouts() {
			if n.Name == o.node {
				o.ns = n.NS
			}
		}
		if o.ns == "" {
			return fmt.Errorf("--node %s: the lab's nodes are %s", o.node, strings.Join(rec.Nodes, ", "))
		}
	}
	o.env = append(os.Environ(), "KUBECONFIG="+filepath.Join(o.stateDir, "kubeconfig"))
	if rec.BinDir != "" {
		// The lab's own kubectl (make lab-bins) matches its apiserver.
		o.env = append(o.env, "PATH="+rec.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	return nil
}

// run passes Ctrl-C or SIGTERM to this wrapper (which the root command
// catches) on as SIGINT: the command decides how to stop (rollprobe writes
// its report), and we wait for it. Its exit code is ours.
func (o *labExecOptions) run(ctx context.Context) error {
	c, err := lab.ExecCommand(o.stateDir, o.ns, o.args)
	if err != nil {
		return err
	}
	c.Env = o.env
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, o.stdout, o.stderr
	if err := c.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = c.Process.Signal(os.Interrupt)
		case <-done:
		}
	}()
	err = c.Wait()
	close(done)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitcode.Silent{Code: exitcode.Code(128 + int(ws.Signal()))}
		}
		return exitcode.Silent{Code: exitcode.Code(exit.ExitCode())}
	}
	return err
}

func newLabApplyCommand(o *labOptions) *cobra.Command {
	var files []string
	namespace := "default"
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update the workloads, Services and routes in a manifest (the samples)",
		Args:  positional(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(files) == 0 {
				return exitcode.UsageError(errors.New("-f FILE is required"))
			}
			client, err := lab.NewClient(o.stateDir)
			if err != nil {
				return exitcode.UsageError(err)
			}
			cmd.SilenceUsage = true
			for _, f := range files {
				applied, err := client.ApplyFile(cmd.Context(), f, namespace)
				for _, a := range applied {
					fmt.Fprintf(o.stdout, "%s applied\n", a)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file (repeatable)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", namespace, "namespace for objects that name none")
	return cmd
}

func newLabServiceIPCommand(o *labOptions) *cobra.Command {
	namespace := "default"
	port := ""
	cmd := &cobra.Command{
		Use:   "svc-ip SERVICE",
		Short: "Print a Service's ClusterIP, or with --node-port NAME its NodePort (for scripts)",
		Args:  positional(1, 1, "one Service's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := lab.NewClient(o.stateDir)
			if err != nil {
				return exitcode.UsageError(err)
			}
			svc, err := client.Kube.CoreV1().Services(namespace).Get(cmd.Context(), args[0], metav1.GetOptions{})
			if err != nil {
				return exitcode.UsageError(err)
			}
			cmd.SilenceUsage = true
			if port == "" {
				fmt.Fprintln(o.stdout, svc.Spec.ClusterIP)
				return nil
			}
			for _, p := range svc.Spec.Ports {
				if p.Name == port && p.NodePort != 0 {
					fmt.Fprintln(o.stdout, strconv.Itoa(int(p.NodePort)))
					return nil
				}
			}
			return exitcode.UsageError(fmt.Errorf("service %s has no node port named %q", args[0], port))
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", namespace, "namespace")
	cmd.Flags().StringVar(&port, "node-port", "", "print the node port of the service port of this name")
	return cmd
}

func newLabDelayProxyCommand() *cobra.Command {
	var p lab.DelayProxy
	cmd := &cobra.Command{
		Use:    "delay-proxy",
		Hidden: true,
		Args:   positional(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return p.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&p.Listen, "listen", "", "address to listen on")
	cmd.Flags().StringVar(&p.Upstream, "upstream", "", "address to forward to")
	cmd.Flags().DurationVar(&p.Delay, "delay", 0, "delay of everything the upstream sends")
	return cmd
}
