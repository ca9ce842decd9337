package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/agent"
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
		Short: "A real local Kubernetes control plane to try and test rollprobe (needs root)",
		Long: `lab runs etcd, kube-apiserver, kube-controller-manager and kube-proxy (nftables mode)
with rollprobe's node agent, inside a network namespace with no uplink. Pods run as local
processes in their own namespaces; their rollouts drop requests exactly as in production.

It needs root (network namespaces, veth pairs, nftables) and the component binaries
built by 'make lab-bins'.`,
	}
	cmd.PersistentFlags().StringVar(&o.stateDir, "state-dir", o.stateDir, "where the lab keeps its keys, logs, PIDs and data")
	cmd.AddCommand(newLabUpCommand(o), newLabDownCommand(o), newLabStatusCommand(o), newLabExecCommand(o),
		newLabApplyCommand(o), newLabServiceIPCommand(o), newLabAgentCommand(o), newLabDelayProxyCommand())
	return cmd
}

func newLabUpCommand(o *labOptions) *cobra.Command {
	var (
		proxyLag time.Duration
		bins     string
		images   []string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring the lab up (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if proxyLag < 0 {
				return exitcode.UsageError(fmt.Errorf("--proxy-lag %s: must not be negative", proxyLag))
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if bins == "" {
				if bins, err = findLabBins(); err != nil {
					return exitcode.UsageError(err)
				}
			}
			imageMap, err := labImages(self, images)
			if err != nil {
				return exitcode.UsageError(err)
			}
			cmd.SilenceUsage = true
			cfg := lab.Config{StateDir: o.stateDir, BinDir: bins, Self: self, Images: imageMap, ProxyLag: proxyLag, Progress: o.stderr}
			if err := lab.Up(cmd.Context(), cfg); err != nil {
				return exitcode.UsageError(err)
			}
			fmt.Fprintf(o.stdout, "kubeconfig: %s (valid inside the lab's network namespace)\n", cfg.KubeconfigPath())
			fmt.Fprintf(o.stdout, "run commands inside: rollprobe lab exec -- kubectl get pods\n")
			fmt.Fprintf(o.stdout, "samples: rollprobe lab apply -f lab/manifests/naive.yaml\n")
			return nil
		},
	}
	cmd.Flags().DurationVar(&proxyLag, "proxy-lag", 0, "delay everything kube-proxy hears from the apiserver (endpoint propagation lag)")
	cmd.Flags().StringVar(&bins, "bins", os.Getenv("ROLLPROBE_LAB_BINS"), "directory with etcd, kube-apiserver, kube-controller-manager, kube-proxy (default: the newest make lab-bins build)")
	cmd.Flags().StringArrayVar(&images, "image", nil, "map an image repository to a local binary, REPO=PATH (repeatable)")
	return cmd
}

// findLabBins returns the newest directory of lab binaries in the cache.
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
		fi, err := os.Stat(filepath.Join(d, "kube-proxy"))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "kube-apiserver")); err != nil {
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
		"rollprobe/demoapp":   filepath.Join(filepath.Dir(self), "demoapp"),
		"rollprobe/rollprobe": self,
	}
	for _, e := range extra {
		repo, path, ok := strings.Cut(e, "=")
		if !ok || repo == "" || path == "" {
			return nil, fmt.Errorf("--image %q: want REPO=PATH", e)
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

func newLabDownCommand(o *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop every lab process, remove its namespaces, nft tables and state",
		Args:  cobra.NoArgs,
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
		Args:  cobra.NoArgs,
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
				fmt.Fprintf(o.stdout, "%-24s pid %-8d %s\n", c.Name, c.PID, state)
			}
			fmt.Fprintf(o.stdout, "proxy lag %s, started %s, kubeconfig %s\n", st.Recorded.ProxyLag,
				st.Recorded.Started.Format(time.RFC3339), filepath.Join(o.stateDir, "kubeconfig"))
			if !st.Healthy() {
				return exitcode.With(exitcode.Failures, errors.New("the lab is not healthy: rollprobe lab up starts it afresh"))
			}
			return nil
		},
	}
}

func newLabExecCommand(o *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "exec -- COMMAND [ARGS...]",
		Short: "Run a command inside the lab's network namespace with KUBECONFIG set",
		Example: `  rollprobe lab exec -- kubectl get pods -o wide
  rollprobe lab exec -- rollprobe probe http://10.96.12.34/`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := lab.ReadRecorded(o.stateDir)
			if err != nil {
				return exitcode.UsageError(err)
			}
			cmd.SilenceUsage = true
			c := exec.Command("ip", append([]string{"netns", "exec", netns.LabNetNS}, args...)...)
			c.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(o.stateDir, "kubeconfig"))
			if rec.BinDir != "" {
				// The lab's own kubectl (make lab-bins) matches its apiserver.
				c.Env = append(c.Env, "PATH="+rec.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
			}
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, o.stdout, o.stderr
			if err := c.Start(); err != nil {
				return err
			}
			// Ctrl-C or SIGTERM to this wrapper (which the root command
			// catches) is passed on as SIGINT: the command decides how to
			// stop (rollprobe writes its report), and we wait for it.
			done := make(chan struct{})
			go func() {
				select {
				case <-cmd.Context().Done():
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
		},
	}
}

func newLabApplyCommand(o *labOptions) *cobra.Command {
	var files []string
	namespace := "default"
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update the Deployments and Services in a manifest (the samples)",
		Args:  cobra.NoArgs,
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
	cmd := &cobra.Command{
		Use:   "svc-ip SERVICE",
		Short: "Print a Service's ClusterIP (for scripts)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := lab.NewClient(o.stateDir)
			if err != nil {
				return exitcode.UsageError(err)
			}
			svc, err := client.Kube.CoreV1().Services(namespace).Get(cmd.Context(), args[0], metav1.GetOptions{})
			if err != nil {
				return exitcode.UsageError(err)
			}
			fmt.Fprintln(o.stdout, svc.Spec.ClusterIP)
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", namespace, "namespace")
	return cmd
}

// newLabAgentCommand is the node agent process lab up starts inside the
// lab's namespace; not for direct use.
func newLabAgentCommand(o *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:    "node-agent",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := lab.ReadRecorded(o.stateDir)
			if err != nil {
				return err
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(o.stateDir, "agent.kubeconfig"))
			if err != nil {
				return err
			}
			cfg.QPS, cfg.Burst = 100, 200
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			a, err := agent.New(agent.Config{
				Node: lab.NodeName, NodeIP: netns.NodeIP, PodCIDR: netns.PodCIDR, StateDir: o.stateDir,
				Images: rec.Images, Log: o.log,
			}, kube)
			if err != nil {
				return err
			}
			images := make([]string, 0, len(rec.Images))
			for k := range rec.Images {
				images = append(images, k)
			}
			sort.Strings(images)
			o.log.Info("node agent starting", "node", lab.NodeName, "images", images)
			err = a.Run(cmd.Context())
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
}

func newLabDelayProxyCommand() *cobra.Command {
	var p lab.DelayProxy
	cmd := &cobra.Command{
		Use:    "delay-proxy",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return p.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&p.Listen, "listen", "", "address to listen on")
	cmd.Flags().StringVar(&p.Upstream, "upstream", "", "address to forward to")
	cmd.Flags().DurationVar(&p.Delay, "delay", 0, "delay of everything the upstream sends")
	return cmd
}
