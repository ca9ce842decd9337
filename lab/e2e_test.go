package lab_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/rollprobe/rollprobe/internal/testbin"
	"github.com/rollprobe/rollprobe/internal/testenv"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
)

// The lab end-to-end test brings up the real control plane, rolls the
// samples while a prober hits their ClusterIP from inside the lab, and takes
// it all down again. It needs root and the binaries of make lab-bins; it is
// skipped without them unless ROLLPROBE_REQUIRE_LAB=1 (CI), where a skip
// would hide a broken lab.

var (
	binDir   string // rollprobe and demoapp, built for the test
	stateDir string
)

// skipOrFail skips a lab test, or fails it under ROLLPROBE_REQUIRE_LAB=1
// (CI).
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_LAB", format, args...)
}

func rollprobe(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "rollprobe"), append([]string{}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestLab(t *testing.T) {
	if testing.Short() {
		t.Skip("the lab test takes minutes")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "the lab needs root")
	}
	for _, need := range []struct{ path, deb string }{{"nft", "nftables"}, {"/usr/sbin/runc", "runc"}, {"/bin/busybox", "busybox-static"}} {
		if _, err := exec.LookPath(need.path); err != nil {
			skipOrFail(t, "the lab needs %s (make lab-deps, or apt-get install %s)", need.path, need.deb)
		}
	}
	names, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(names), netns.LabNetNS) {
		skipOrFail(t, "a lab is already up (network namespace %s): take it down first", netns.LabNetNS)
	}
	binDir = t.TempDir()
	for _, b := range [][]string{{"rollprobe", ".."}, {"demoapp", "./demoapp"}} {
		if _, err := testbin.Build(binDir, b[0], b[1]); err != nil {
			t.Fatal(err)
		}
	}
	stateDir = filepath.Join(t.TempDir(), "lab")
	sysctlsBefore := hostSysctls(t)
	var times subtestTimes // written as each subtest ends

	start := time.Now()
	out, err := rollprobe(t, "lab", "up", "--state-dir", stateDir)
	if strings.Contains(out, "no lab binaries") {
		skipOrFail(t, "%s", out)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(stateDir); err == nil {
			out, _ := rollprobe(t, "lab", "down", "--state-dir", stateDir)
			t.Logf("cleanup: %s", out)
		}
	})
	if err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	t.Logf("lab up in %s", time.Since(start).Round(time.Second))
	client, err := lab.NewClient(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Idempotent: a second up leaves the healthy lab alone.
	if out, err := rollprobe(t, "lab", "up", "--state-dir", stateDir); err != nil || !strings.Contains(out, "already up") {
		t.Fatalf("second lab up: %v\n%s", err, out)
	}
	// One lab per machine: an up kept elsewhere must not take this one down.
	if got := lab.ActiveStateDir(); got != stateDir {
		t.Fatalf("the marker names %q, want %q", got, stateDir)
	}
	if out, err := rollprobe(t, "lab", "up", "--state-dir", filepath.Join(t.TempDir(), "other")); err == nil || !strings.Contains(out, "a lab is up with its state in "+stateDir) {
		t.Fatalf("an up with another state dir: %v\n%s", err, out)
	}

	times.run(t, "no route out of the lab", func(t *testing.T) {
		// A route lookup sends nothing. The hub must find no way out; a
		// node's only way is the hub.
		out, err := exec.Command("ip", "-n", netns.LabNetNS, "route", "get", "192.0.2.1").CombinedOutput()
		if err == nil {
			t.Fatalf("the lab has a route out: %s", out)
		}
		if !strings.Contains(string(out), "unreachable") {
			t.Fatalf("unexpected route error: %s", out)
		}
		for _, n := range netns.Nodes(lab.DefaultNodes) {
			out, err := exec.Command("ip", "-n", n.NS, "route", "get", "192.0.2.1").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "via "+netns.HubIP+" dev eth0") {
				t.Fatalf("%s routes out other than through the hub: %v %s", n.Name, err, out)
			}
		}
	})

	times.run(t, "nodes are real kubelets with containerd", func(t *testing.T) {
		nodes, err := client.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != lab.DefaultNodes {
			t.Fatalf("%d nodes, want %d", len(nodes.Items), lab.DefaultNodes)
		}
		for _, n := range nodes.Items {
			info := n.Status.NodeInfo
			if info.KubeletVersion != "v1.36.3" || !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://2.") {
				t.Errorf("%s: kubelet %s, runtime %s; want v1.36.3 and containerd 2.x", n.Name, info.KubeletVersion, info.ContainerRuntimeVersion)
			}
		}
	})

	times.run(t, "pods spread over the nodes and reach each other", func(t *testing.T) { testSpread(t, ctx, client) })

	times.run(t, "naive drops requests", func(t *testing.T) {
		r := rollUnderLoad(t, ctx, client, "naive")
		rep, exit := r.rep, r.exit
		if exit != 1 || rep.Totals.Failed == 0 {
			t.Fatalf("exit %d, %d failed of %d: the naive rollout must drop requests (%v)", exit, rep.Totals.Failed, rep.Totals.Sent, rep.Totals.ByClass)
		}
		t.Logf("naive: %d of %d failed: %v", rep.Totals.Failed, rep.Totals.Sent, nonZero(rep.Totals.ByClass))
	})

	times.run(t, "graceful: its pods drop nothing", func(t *testing.T) {
		r := rollUnderLoad(t, ctx, client, "graceful")
		checkClean(t, r)
		rep := r.rep
		if len(rep.Totals.ByBackend) < 6 {
			t.Fatalf("traffic reached %d pods, want the 3 old and the 3 new: %v", len(rep.Totals.ByBackend), rep.Totals.ByBackend)
		}
	})

	times.run(t, "short grace is SIGKILLed", func(t *testing.T) {
		apply(t, "short-grace")
		waitRollout(t, ctx, client, "short-grace")
		w, err := client.Kube.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=short-grace"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		restart(t, ctx, client, "short-grace")
		deadline := time.After(60 * time.Second)
		for {
			select {
			case ev := <-w.ResultChan():
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				for _, cs := range pod.Status.ContainerStatuses {
					if term := cs.State.Terminated; term != nil && term.ExitCode == 137 {
						// preStop (exec sleep 1) + at least 2 s after SIGTERM. The
						// deletion timestamp is the deadline (request + grace);
						// API times have 1 s precision.
						requested := pod.DeletionTimestamp.Add(-time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)
						if ran := term.FinishedAt.Sub(requested); ran < 2*time.Second {
							t.Errorf("%s SIGKILLed %s after deletion, before preStop and the 2 s minimum", pod.Name, ran)
						}
						if term.Reason != "Error" {
							t.Errorf("reason %q, want Error", term.Reason)
						}
						t.Logf("%s: exit %d (%s)", pod.Name, term.ExitCode, term.Reason)
						waitRollout(t, ctx, client, "short-grace")
						return
					}
				}
			case <-deadline:
				t.Fatal("no container ended with exit code 137")
			}
		}
	})

	times.run(t, "run", func(t *testing.T) { testRun(t, ctx, client) })
	times.run(t, "a stalled API server is a gap in the view", func(t *testing.T) { testViewStall(t, ctx, client) })
	times.run(t, "a kubelet slow to kill cuts kept-alive connections late", func(t *testing.T) { testLateKill(t, ctx, client) })
	times.run(t, "probers in the cluster", func(t *testing.T) { testProbers(t, ctx, client) })
	times.run(t, "examples", func(t *testing.T) { testExamples(t, ctx, client) })
	times.run(t, "termination", func(t *testing.T) { testTermination(t, ctx, client) })
	times.run(t, "externalTrafficPolicy Local", func(t *testing.T) { testLocalPolicy(t, ctx, client) })
	times.run(t, "externalTrafficPolicy Local at every node's NodePort", func(t *testing.T) { testLocalPolicyEveryNode(t, ctx, client) })
	times.run(t, "externalTrafficPolicy Local from in-cluster probers", func(t *testing.T) { testLocalPolicyFromProbers(t, ctx, client) })
	times.run(t, "the samples deleted before the edge", func(t *testing.T) { deleteAllBut(t, ctx, client, "") })
	times.run(t, "the edge", func(t *testing.T) { testEdge(t, ctx, client) })
	times.run(t, "attribution agrees with the wire", func(t *testing.T) { testAttributionAgainstTheWire(t, ctx, client) })
	times.run(t, "the samples deleted before workload kinds", func(t *testing.T) { deleteAllBut(t, ctx, client, "") })
	times.run(t, "workload kinds", func(t *testing.T) { testKinds(t, ctx, client) })
	times.run(t, "HTTP2 and gRPC", func(t *testing.T) { testH2(t, ctx, client) })
	times.run(t, "the samples deleted before Argo Rollouts", func(t *testing.T) { deleteAllBut(t, ctx, client, "") })
	times.run(t, "Argo Rollouts", func(t *testing.T) { testArgo(t, ctx, client) })
	// Last on this lab: they evict every pod of a node, of their samples
	// only (deleteAllBut).
	times.run(t, "the samples deleted before the drains", func(t *testing.T) {
		deleteAllBut(t, ctx, client, drainSamplePrefix)
	})
	times.run(t, "a node drain", func(t *testing.T) { testDrain(t, ctx, client) })
	times.run(t, "a drain a budget blocks", func(t *testing.T) { testDrainBlocked(t, ctx, client) })
	times.run(t, "a drain no budget holds leaves the Service nothing", func(t *testing.T) { testDrainUnprotected(t, ctx, client) })
	times.run(t, "a drain a shared budget lets go", func(t *testing.T) { testDrainSharedBudget(t, ctx, client) })
	times.run(t, "a drain a loose budget lets overload", func(t *testing.T) { testDrainOverload(t, ctx, client) })

	times.run(t, "proxy lag delays one node's kube-proxy", func(t *testing.T) {
		// Another lag means another lab: up takes the old one down first.
		// The ingress lags too (--edge-lag), tested below in the same lab.
		const lag = 3 * time.Second
		lagged := netns.Nodes(lab.DefaultNodes)[1]
		if out, err := rollprobe(t, "lab", "up", "--state-dir", stateDir, "--proxy-lag", lagged.Name+"="+lag.String(), "--edge-lag", lag.String()); err != nil {
			t.Fatalf("lab up --proxy-lag: %v\n%s", err, out)
		}
		c, err := lab.NewClient(stateDir)
		if err != nil {
			t.Fatal(err)
		}
		client = c
		apply(t, "graceful")
		svc, err := c.Kube.CoreV1().Services("default").Get(ctx, "graceful", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The moment the first endpoint is ready in the API (seen within
		// 20 ms): the lagged node's kube-proxy hears of it only through the
		// delay line, so the ClusterIP cannot answer there sooner, while it
		// does on the other node.
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, e := range endpointsOf(ctx, c, "graceful") {
				if is(e.Ready) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no endpoint of graceful turned ready: %v", err)
		}
		ready := time.Now()
		took := map[string]time.Duration{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, n := range netns.Nodes(lab.DefaultNodes) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := waitServingFrom(ctx, n.NS, "http://"+svc.Spec.ClusterIP+"/")
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("%s: %v", n.Name, err)
				}
				took[n.Name] = time.Since(ready)
			}()
		}
		wg.Wait()
		t.Logf("the service answered after its endpoints were ready: %v (lag %s on %s)", took, lag, lagged.Name)
		if took[lagged.Name] < lag-500*time.Millisecond {
			t.Errorf("%s answered %s after the endpoints were ready, want at least its %s lag", lagged.Name, took[lagged.Name], lag)
		}
		if other := firstNode().Name; took[other] > took[lagged.Name]-lag/2 {
			t.Errorf("%s (no lag) answered %s after, not clearly before the lagged node (%s)", other, took[other], took[lagged.Name])
		}

		t.Run("scale-ins probed where kube-proxy lags", func(t *testing.T) {
			testScaleInsWhereKubeProxyLags(t, ctx, c, lagged, lag)
		})
		t.Run("probers in the cluster name the lagged node", func(t *testing.T) {
			testProbersSeeTheLaggedNode(t, ctx, c, lagged.Name)
		})
		t.Run("the edge lag lengthens the edge's window", func(t *testing.T) {
			testEdgeLag(t, ctx, c, lag)
		})
		t.Run("a blue-green scaled down at the switch drops on the old pods through the lagging edge", func(t *testing.T) {
			testArgoBlueGreenFast(t, ctx, c)
		})
		t.Run("an aborted canary's way back drops on its pods through the lagging edge", func(t *testing.T) {
			testArgoAbort(t, ctx, c)
		})
		t.Run("a blue-green whose smoke test fails switches back and drops on the new pods through the lagging edge", func(t *testing.T) {
			testArgoBlueGreenAbort(t, ctx, c)
		})
	})

	times.run(t, "down leaves nothing behind", func(t *testing.T) {
		pids := labPIDs()
		// 4 control-plane components, CoreDNS, Traefik, Argo Rollouts'
		// controller, containerd, kubelet and kube-proxy on each node; the
		// edge's and a lagged node's delay proxies when the last up asked
		// for a lag (the proxy lag group's does; a run of a few subtests
		// may not have run it).
		want := 4 + 3 + 3*lab.DefaultNodes
		st := lab.GetStatus(stateDir)
		if st.Recorded.EdgeLag > 0 {
			want++
		}
		for _, lag := range st.Recorded.ProxyLag {
			if lag > 0 {
				want++
			}
		}
		if len(pids) != want {
			t.Fatalf("%d PID files before down, want %d (recorded edge lag %s, proxy lags %v)", len(pids), want, st.Recorded.EdgeLag, st.Recorded.ProxyLag)
		}
		for _, comp := range st.Components {
			if !comp.Alive {
				t.Errorf("%s (PID %d) is not running before down", comp.Name, comp.PID)
			}
		}
		shims := lab.Shims(stateDir)
		if len(shims) == 0 {
			// Pods leave shims behind them; a run of a few subtests may
			// have started none.
			pods, err := client.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) > 0 {
				t.Fatalf("no containerd shims before down, yet %d pods (the first %s/%s)", len(pods.Items), pods.Items[0].Namespace, pods.Items[0].Name)
			}
			t.Log("no pod ran: no containerd shim to check")
		}
		if out, err := rollprobe(t, "lab", "down", "--state-dir", stateDir); err != nil {
			t.Fatalf("lab down: %v\n%s", err, out)
		}
		nothingLeft(t, append(pids, shims...), sysctlsBefore)
	})

	times.run(t, "down cleans up after a crashed up", func(t *testing.T) {
		up := exec.Command(filepath.Join(binDir, "rollprobe"), "lab", "up", "--state-dir", stateDir)
		var out syncBuffer
		up.Stdout, up.Stderr = &out, &out
		if err := up.Start(); err != nil {
			t.Fatal(err)
		}
		// Killed while a node is half up: containerd runs, its kubelet starts.
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return strings.Contains(out.String(), "starting kubelet"), nil
		})
		_ = up.Process.Kill()
		_ = up.Wait()
		if err != nil {
			t.Fatalf("lab up never started a kubelet:\n%s", out.String())
		}
		pids := labPIDs()
		// Its state is not where down looks (as when a test that kept it in
		// a temporary directory was killed): the marker says where.
		if out, err := rollprobe(t, "lab", "down", "--state-dir", filepath.Join(t.TempDir(), "elsewhere")); err != nil || !strings.Contains(out, "the lab's state is in "+stateDir) {
			t.Fatalf("lab down after a crashed up: %v\n%s", err, out)
		}
		nothingLeft(t, pids, sysctlsBefore)
	})
	t.Logf("lab test took %s", time.Since(start).Round(time.Second))
}

func apply(t *testing.T, sample string) {
	t.Helper()
	if out, err := rollprobe(t, "lab", "apply", "--state-dir", stateDir, "-f", filepath.Join("manifests", sample+".yaml")); err != nil {
		t.Fatalf("apply %s: %v\n%s", sample, err, out)
	}
}

// restart does what kubectl rollout restart does.
func restart(t *testing.T, ctx context.Context, c *lab.Client, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	if _, err := c.Kube.AppsV1().Deployments("default").Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("restart %s: %v", name, err)
	}
}

// waitRollout waits until kubectl rollout status would call the rollout
// complete and every old pod object is gone.
func waitRollout(t *testing.T, ctx context.Context, c *lab.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := c.Kube.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if !deploymentComplete(d) {
			return false, nil
		}
		pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		return err == nil && len(pods.Items) == int(*d.Spec.Replicas), nil
	})
	if err != nil {
		t.Fatalf("rollout of %s did not complete: %v", name, err)
	}
}

// deploymentComplete mirrors kubectl's DeploymentStatusViewer.
func deploymentComplete(d *appsv1.Deployment) bool {
	s := d.Status
	return d.Generation <= s.ObservedGeneration && s.UpdatedReplicas == *d.Spec.Replicas &&
		s.Replicas == s.UpdatedReplicas && s.AvailableReplicas == s.UpdatedReplicas
}

// rollUnderLoad applies a sample, then restarts it while rollprobe probes
// its ClusterIP from inside the lab with fresh connections at 200 req/s.
func rollUnderLoad(t *testing.T, ctx context.Context, c *lab.Client, name string) *runResult {
	t.Helper()
	apply(t, name)
	clusterIP := ensureSample(t, ctx, c, name)
	path := filepath.Join(t.TempDir(), "report.json")
	forgetEarlierConnections(t)
	r := &runResult{reportPath: path, output: &syncBuffer{}, rejects: logRejectionsIfFailed(t)}
	probe := exec.Command(filepath.Join(binDir, "rollprobe"), "lab", "exec", "--state-dir", stateDir, "--",
		filepath.Join(binDir, "rollprobe"), "probe", "http://"+clusterIP+"/", "--rate", "200", "--duration", "20s",
		"--conn", "new", "--backend-header", "X-Pod-Name", "--progress", "0", "--report", path)
	probe.Stdout, probe.Stderr = r.output, r.output
	if err := probe.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A failure before Wait below: end it here (the prober it runs
		// inside the lab goes with lab down).
		if probe.ProcessState == nil {
			_ = probe.Process.Kill()
			_ = probe.Wait()
		}
	})
	time.Sleep(3 * time.Second)
	restart(t, ctx, c, name)
	waitRollout(t, ctx, c, name)
	err := probe.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		r.exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if r.rep, err = report.ReadFile(path); err != nil {
		t.Fatalf("%v\n%s", err, r.out())
	}
	rep := r.rep
	if rep.Totals.Sent < 3500 {
		t.Fatalf("sent %d, want ~4000\n%s", rep.Totals.Sent, r.out())
	}
	b, _ := json.Marshal(nonZero(rep.Totals.ByClass))
	t.Logf("%s: exit %d, %s", name, r.exit, b)
	for i, f := range rep.Failures {
		if i == 3 {
			break
		}
		t.Logf("  failure at +%.3fs: %s %s (%s, %s > %s)", f.AtMS/1000, f.Class, f.Phase, f.Error, f.LocalAddr, f.RemoteAddr)
	}
	return r
}

// waitServing waits until the Service's ClusterIP answers from the first
// node: kube-proxy programs a new Service a moment after the apiserver has it.
func waitServing(t *testing.T, ctx context.Context, clusterIP string) {
	t.Helper()
	if err := waitServingFrom(ctx, firstNode().NS, "http://"+clusterIP+"/"); err != nil {
		t.Fatal(err)
	}
}

// waitServingFrom waits until url answers 200 from namespace ns.
func waitServingFrom(ctx context.Context, ns, url string) error {
	client := clientIn(ns, time.Second)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s never answered from %s: %w", url, ns, err)
	}
	return nil
}

// validateSchema checks a report file against report/report.schema.json.
func validateSchema(t *testing.T, path string) {
	t.Helper()
	sch, err := jsonschema.NewCompiler().Compile("../report/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(doc); err != nil {
		t.Fatalf("%s does not match the report schema: %v", path, err)
	}
}

func nonZero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// firstNode is where lab exec runs by default.
func firstNode() netns.Node { return netns.Nodes(lab.DefaultNodes)[0] }

// hostSysctls are the global sysctls a kubelet sets on its host: the lab's
// kubelets must leave the host's values alone.
func hostSysctls(t *testing.T) string {
	t.Helper()
	var vals []string
	for _, f := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops"} {
		b, err := os.ReadFile("/proc/sys/" + f)
		if err != nil {
			t.Fatal(err)
		}
		vals = append(vals, f+"="+strings.TrimSpace(string(b)))
	}
	return strings.Join(vals, " ")
}

// labPIDs are the PIDs in the lab's PID files.
func labPIDs() []int {
	var pids []int
	_ = filepath.WalkDir(filepath.Join(stateDir, "pids"), func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".pid") {
			b, _ := os.ReadFile(path)
			var pid int
			fmt.Sscanf(string(b), "%d", &pid)
			pids = append(pids, pid)
		}
		return nil
	})
	return pids
}

// nothingLeft checks what lab down promises: none of pids alive, no
// namespace, nft table, cgroup, mount or state directory of the lab's, and
// the host's sysctls as they were.
func nothingLeft(t *testing.T, pids []int, sysctlsBefore string) {
	t.Helper()
	for _, pid := range pids {
		if lab.Alive(pid) {
			t.Errorf("process %d survived lab down", pid)
		}
	}
	if shims := lab.Shims(stateDir); len(shims) > 0 {
		t.Errorf("containerd shims survived lab down: %v", shims)
	}
	names, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(names), "rollprobe-") {
		t.Errorf("namespaces left: %s", names)
	}
	tables, _ := exec.Command("nft", "list", "tables").Output()
	if strings.Contains(string(tables), "kube-proxy") {
		t.Errorf("nft tables left: %s", tables)
	}
	// The kubelets keep their pods under the lab's own cgroup root, never
	// in a kubepods cgroup of the host's.
	for _, pattern := range []string{"/sys/fs/cgroup/*" + lab.CgroupRoot, "/sys/fs/cgroup/*/kubepods"} {
		if left, _ := filepath.Glob(pattern); len(left) > 0 {
			t.Errorf("cgroups left: %v", left)
		}
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), stateDir) {
		t.Errorf("mounts left under %s", stateDir)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("state directory left: %v", err)
	}
	if _, err := os.Stat(lab.ActiveMarker); !os.IsNotExist(err) {
		t.Errorf("the marker %s is left: %v", lab.ActiveMarker, err)
	}
	if after := hostSysctls(t); after != sysctlsBefore {
		t.Errorf("host sysctls changed: before %s, after %s", sysctlsBefore, after)
	}
}

// forgetEarlierConnections deletes every conntrack entry towards the
// Service CIDR in the nodes and the client host. kube-proxy does not clear
// TCP entries of removed endpoints (kubernetes#101607), and netfilter lets a
// new SYN follow an entry it matches unless that entry is in TIME_WAIT or
// CLOSE: an unanswered attempt (SYN_SENT, 120 s) or a connection cut
// without a reset (ESTABLISHED, then FIN_WAIT for 120 s after the client
// gives up) sends a later connection from the same source port to a pod
// that is gone. Each test's prober starts as a fresh client would, without
// the previous test's leftovers; within a run, nothing is cleared.
func forgetEarlierConnections(t *testing.T) {
	t.Helper()
	namespaces := []string{netns.LabNetNS}
	for _, n := range netns.Nodes(lab.DefaultNodes) {
		namespaces = append(namespaces, n.NS)
	}
	for _, ns := range namespaces {
		// conntrack exits 1 when nothing matched.
		_ = exec.Command("ip", "netns", "exec", ns, "conntrack", "-D", "-p", "tcp",
			"--orig-dst", serviceNet.Addr().String(), "--mask-dst", serviceMask()).Run()
	}
}

// serviceNet is the lab's Service CIDR.
var serviceNet = netip.MustParsePrefix(netns.ServiceCIDR)

// serviceMask is serviceNet's mask in dotted form, as conntrack takes it.
func serviceMask() string {
	m := net.CIDRMask(serviceNet.Bits(), 32)
	return net.IP(m).String()
}

// conntrackDump is the node's conntrack table towards the Service CIDR, for
// a failure message.
func conntrackDump(ns string) string {
	out, _ := exec.Command("ip", "netns", "exec", ns, "conntrack", "-L", "-p", "tcp",
		"--orig-dst", serviceNet.Addr().String(), "--mask-dst", serviceMask()).CombinedOutput()
	return string(out)
}

// clientIn is an HTTP client whose every request is a fresh connection
// made from inside namespace ns (a node, or the hub as the client host).
func clientIn(ns string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: netns.DialContextIn(ns), DisableKeepAlives: true}}
}

// subtestTimes are how long TestLab's subtests took, in the order they
// ran: written, longest first, to the file ROLLPROBE_LAB_TIMES names (CI
// prints it: which subtests its time goes to, on the machine it ran on).
type subtestTimes []subtestTime

type subtestTime struct {
	name string
	took time.Duration
}

// timeoutReserve is the time TestLab keeps before the test binary's
// -timeout: a subtest is not started with less left. A -timeout ends the
// binary with a panic, which runs no cleanup and leaves the lab up (its
// kubelets, shims, pods and captures running); a subtest not started fails
// by name, and the lab is taken down. It is over the last groups' time on
// a slow machine with lab down's half a minute (2026-12-02, alone: the
// proxy lag group 225 s, each drain under 35 s once the other samples were
// deleted); a longer group started with less left still meets the panic
// (the edge, mid-suite, took 439 s there beside CI's niced release).
const timeoutReserve = 5 * time.Minute

// run is t.Run, timed. The times so far are written as each subtest ends:
// when the test binary's -timeout ends it with a panic, nothing deferred
// runs, and the times are what tells where the minutes went. A subtest is
// not started, and fails, when the -timeout is less than timeoutReserve
// away.
func (s *subtestTimes) run(t *testing.T, name string, f func(t *testing.T)) bool {
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) < timeoutReserve {
		t.Errorf("%s: not run: %s left before the test binary's -timeout, kept to take the lab down (a slow machine: docs/lab.md)",
			name, time.Until(deadline).Round(time.Second))
		*s = append(*s, subtestTime{name + " (not run: the -timeout was near)", 0})
		s.write(t)
		return false
	}
	start := time.Now()
	ok := t.Run(name, f)
	*s = append(*s, subtestTime{name, time.Since(start)})
	s.write(t)
	return ok
}

// write writes the times where ROLLPROBE_LAB_TIMES says, if it does.
func (s subtestTimes) write(t *testing.T) {
	path := os.Getenv("ROLLPROBE_LAB_TIMES")
	if path == "" || len(s) == 0 {
		return
	}
	sorted := slices.Clone(s)
	slices.SortStableFunc(sorted, func(a, b subtestTime) int { return cmp.Compare(b.took, a.took) })
	var b strings.Builder
	for _, x := range sorted {
		fmt.Fprintf(&b, "%6.0f s  %s\n", x.took.Seconds(), x.name)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Logf("the subtests' times: %v", err)
	}
}
