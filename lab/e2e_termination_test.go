package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/lab"
)

// testTermination checks, on the real kubelet and kube-proxy, what
// rollprobe's findings rely on about pod termination.
func testTermination(t *testing.T, ctx context.Context, c *lab.Client) {
	t.Run("a terminating pod that still serves gets traffic only when no endpoint is ready", func(t *testing.T) {
		testTerminatingServing(t, ctx, c)
	})
	t.Run("readiness probes run during termination, liveness probes do not", func(t *testing.T) {
		testProbesDuringTermination(t, ctx, c)
	})
	t.Run("preStop runs before SIGTERM, within the grace period, and SIGKILL comes 2s after SIGTERM at the least", func(t *testing.T) {
		testPreStopAndGrace(t, ctx, c)
	})
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// createService creates a ClusterIP Service for the pods labelled app=name
// and returns its address once it answers from the first node.
func createService(t *testing.T, ctx context.Context, c *lab.Client, name string) string {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	svc, err := c.Kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitServing(t, ctx, svc.Spec.ClusterIP)
	return svc.Spec.ClusterIP
}

// endpointsOf returns the conditions of the Service's endpoints by pod.
func endpointsOf(ctx context.Context, c *lab.Client, service string) map[string]discoveryv1.EndpointConditions {
	list, err := c.Kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	out := map[string]discoveryv1.EndpointConditions{}
	if err != nil {
		return out
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil {
				out[e.TargetRef.Name] = e.Conditions
			}
		}
	}
	return out
}

func is(b *bool) bool { return b != nil && *b }

// answers sends n requests on fresh connections from the first node and
// counts the answers by the pod that gave them ("" for a failure).
func answers(t *testing.T, ip string, n int) map[string]int {
	t.Helper()
	client := clientIn(firstNode().NS, 2*time.Second)
	by := map[string]int{}
	for range n {
		resp, err := client.Get("http://" + ip + "/")
		if err != nil {
			by[""]++
			continue
		}
		by[resp.Header.Get("X-Pod-Name")]++
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return by
}

// testTerminatingServing: a deleted pod whose app keeps serving (and
// passing readiness) while it drains is ready=false, serving=true,
// terminating=true in its EndpointSlice; kube-proxy sends it no new
// connections while another endpoint is ready, and falls back to it (and
// its terminating peers) once none is.
func testTerminatingServing(t *testing.T, ctx context.Context, c *lab.Client) {
	const name = "linger"
	d := demoDeployment(name, 2)
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	d.Spec.Template.Spec.Containers[0].Env = append(d.Spec.Template.Spec.Containers[0].Env, env("SHUTDOWN", "drain=30s"))
	if _, err := c.Kube.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.AppsV1().Deployments("default").Delete(context.Background(), name, metav1.DeleteOptions{})
		// Its pods would drain for 30 s: end them now.
		_ = c.Kube.CoreV1().Pods("default").DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
			metav1.ListOptions{LabelSelector: "app=" + name})
	})
	waitRollout(t, ctx, c, name)
	ip := createService(t, ctx, c, name)
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods: %v (%d)", err, len(pods.Items))
	}
	victim, victimIP := pods.Items[0].Name, pods.Items[0].Status.PodIP
	if err := c.Kube.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, ctx, c, name, func(eps map[string]discoveryv1.EndpointConditions) bool {
		v, ok := eps[victim]
		return ok && !is(v.Ready) && is(v.Serving) && is(v.Terminating)
	})
	// kube-proxy's own rules say when it has acted on the change: new
	// connections no longer go to the victim (a fixed 2 s sleep could be
	// too short on a busy runner).
	waitProxyEndpoints(t, ctx, firstNode().NS, name, func(ips []string) bool {
		return len(ips) > 0 && !slices.Contains(ips, victimIP)
	})
	by := answers(t, ip, 60)
	t.Logf("with %s terminating and serving, the answers came from %v", victim, by)
	if by[victim] > 0 || by[""] > 0 {
		t.Errorf("%d new connections reached the terminating pod and %d failed, while other endpoints were ready", by[victim], by[""])
	}

	// Scale to zero: every endpoint terminates, none is ready; the ones
	// still serving take the traffic.
	if _, err := c.Kube.AppsV1().Deployments("default").Patch(ctx, name, "application/merge-patch+json",
		[]byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, ctx, c, name, func(eps map[string]discoveryv1.EndpointConditions) bool {
		for _, e := range eps {
			if is(e.Ready) || !is(e.Serving) || !is(e.Terminating) {
				return false
			}
		}
		return len(eps) >= 2
	})
	// Every endpoint terminating: kube-proxy's rules list the serving ones
	// (its fallback) once it has acted on it. The victim, still draining
	// (30 s) and serving, is routed to only through the fallback: the
	// event to wait for.
	waitProxyEndpoints(t, ctx, firstNode().NS, name, func(ips []string) bool { return slices.Contains(ips, victimIP) })
	by = answers(t, ip, 30)
	t.Logf("with every endpoint terminating and serving, the answers came from %v", by)
	if by[""] > 0 {
		t.Errorf("%d of 30 requests failed: kube-proxy must fall back to terminating endpoints that still serve", by[""])
	}
}

// proxyEndpoints are the pod IPs kube-proxy (nftables mode) on the node of
// network namespace ns sends new connections to for the default/service
// Service: the addresses its service chain DNATs to ("dnat ip to numgen
// random mod N map { 0 : IP . PORT, ... }", kube-proxy 1.36; older ones
// jump to endpoint chains named "endpoint-HASH-.../tcp/PORT__IP/PORT").
func proxyEndpoints(t *testing.T, ns, service string) []string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "nft", "list", "table", "ip", "kube-proxy").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table ip kube-proxy in %s: %v\n%s", ns, err, out)
	}
	var ips []string
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "chain service-"):
			in = strings.Contains(line, "-default/"+service+"/tcp/")
		case strings.HasPrefix(line, "chain "):
			in = false
		case in:
			for _, m := range proxyEndpointIP.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(ips, m[1]) {
					ips = append(ips, m[1])
				}
			}
		}
	}
	return ips
}

var proxyEndpointIP = regexp.MustCompile(`(?:__|: )([0-9]+(?:\.[0-9]+){3})(?:/| \. )`)

// waitProxyEndpoints waits until kube-proxy's rules on the node of ns send
// service's new connections to IPs that satisfy done.
func waitProxyEndpoints(t *testing.T, ctx context.Context, ns, service string, done func([]string) bool) {
	t.Helper()
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = proxyEndpoints(t, ns, service)
		return done(last), nil
	})
	if err != nil {
		t.Fatalf("kube-proxy in %s still sends %s's connections to %v: %v", ns, service, last, err)
	}
}

func waitEndpoints(t *testing.T, ctx context.Context, c *lab.Client, service string, done func(map[string]discoveryv1.EndpointConditions) bool) {
	t.Helper()
	var last map[string]discoveryv1.EndpointConditions
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = endpointsOf(ctx, c, service)
		return done(last), nil
	})
	if err != nil {
		t.Fatalf("endpoints of %s never got there; last: %s", service, fmtEndpoints(last))
	}
}

func fmtEndpoints(eps map[string]discoveryv1.EndpointConditions) string {
	var parts []string
	for pod, e := range eps {
		parts = append(parts, fmt.Sprintf("%s ready=%v serving=%v terminating=%v", pod, is(e.Ready), is(e.Serving), is(e.Terminating)))
	}
	return strings.Join(parts, "; ")
}

// testProbesDuringTermination: both probes ask /readyz, which fails once
// the app has SIGTERM. The kubelet keeps running the readiness probe while
// the pod terminates (it fails, the pod turns unready) but not the
// liveness probe (it would fail too, and restart the container).
//
// The liveness probe fails at its first miss (period 1 s, threshold 1), so
// that one run during the 6 s drain would show. The same probe can also
// restart the container at its start, when it runs before the app listens:
// the likely reading of a cold CI run that failed here with a restart, its
// new events a start's and a readiness probe refused before the app
// listened (not reproduced since). A startup probe holds the liveness probe
// back until the app answers, as users are told to do, and restarts are
// counted from the scale-down on; one before it is logged with its cause.
// The liveness probe is seen running before the scale-down (the kubelet's
// count of its successful runs), or "not during termination" would prove
// nothing.
func testProbesDuringTermination(t *testing.T, ctx context.Context, c *lab.Client) {
	const name = "probes"
	d := demoDeployment(name, 1)
	spec := &d.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	ctr := &spec.Containers[0]
	ctr.Env = append(ctr.Env, env("SHUTDOWN", "drain=6s"), env("UNREADY_ON_TERM", "true"))
	ctr.LivenessProbe = ctr.ReadinessProbe.DeepCopy()
	ctr.StartupProbe = ctr.ReadinessProbe.DeepCopy()
	ctr.StartupProbe.FailureThreshold = 60
	if _, err := c.Kube.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.AppsV1().Deployments("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitRollout(t, ctx, c, name)
	// No replacement: scale to zero, which deletes the pod.
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v", err)
	}
	pod := pods.Items[0]
	// The liveness probe must be seen running before the scale-down: a probe
	// that never started would pass the "not during termination" half below.
	// The referee is the kubelet's own count of the probe's runs.
	var livenessOK float64
	var readErr error // the last reading's, for the failure message
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		runs, err := probeRuns(ctx, c, pod.Spec.NodeName, pod.Name, "Liveness")
		if readErr = err; err != nil {
			return false, nil
		}
		livenessOK = runs["successful"]
		return livenessOK > 0, nil
	}); err != nil {
		t.Fatalf("the kubelet never counted a successful liveness probe of %s before the scale-down (the last reading's error: %v)", pod.Name, readErr)
	}
	t.Logf("the kubelet counted %v successful liveness probe(s) before the scale-down", livenessOK)
	if p, err := c.Kube.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else {
		pod = *p // restarts and the watch's resource version from now on
	}
	restartsSeen := restartCount(&pod) // those before the scale-down, then each one reported
	if restartsSeen > 0 {
		t.Logf("the container restarted %d time(s) before the scale-down (last: %s); counting restarts from here", restartsSeen, lastTermination(&pod))
	}
	events := func() map[string]int32 { // "reason: message" -> count
		list, _ := c.Kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod.Name).String()})
		out := map[string]int32{}
		for _, e := range list.Items {
			out[e.Reason+": "+e.Message] += max(e.Count, 1)
		}
		return out
	}
	before := events()
	w, err := c.Kube.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := c.Kube.AppsV1().Deployments("default").Patch(ctx, name, "application/merge-patch+json",
		[]byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	unreadyWhileRunning := false
	deadline := time.After(60 * time.Second)
watch:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				break watch
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == "DELETED" {
				break watch
			}
			running := len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionFalse && p.DeletionTimestamp != nil && running {
					unreadyWhileRunning = true
				}
			}
			if n := restartCount(p); n > restartsSeen {
				t.Errorf("the container was restarted while the pod terminated (restarts %d, were %d; last: %s)", n, restartsSeen, lastTermination(p))
				restartsSeen = n // one error per restart, not per watch event
			}
		case <-deadline:
			t.Fatal("the pod was not gone within 60s")
		}
	}
	after := events()
	var readinessFailed, livenessFailed bool
	for ev, n := range after {
		if n <= before[ev] {
			continue
		}
		t.Logf("during termination: %s (x%d)", ev, n-before[ev])
		readinessFailed = readinessFailed || strings.Contains(ev, "Readiness probe failed")
		livenessFailed = livenessFailed || strings.Contains(ev, "Liveness probe failed") || strings.Contains(ev, "failed liveness probe")
	}
	if !unreadyWhileRunning || !readinessFailed {
		t.Errorf("the readiness probe did not run during termination: unready while running %v, a failure event %v", unreadyWhileRunning, readinessFailed)
	}
	if livenessFailed {
		t.Errorf("the liveness probe ran during termination")
	}
}

// probeRuns is the kubelet's count of a pod's probe runs of one type
// (Liveness, Readiness, Startup) by result (successful, failed, unknown):
// its prober_probe_total, read from the node's /metrics/probes through the
// API server's node proxy.
func probeRuns(ctx context.Context, c *lab.Client, node, pod, probeType string) (map[string]float64, error) {
	body, err := c.Kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "metrics", "probes").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s's /metrics/probes: %w", node, err)
	}
	runs := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != "prober_probe_total" {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		set := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				set[k] = strings.Trim(v, `"`)
			}
		}
		if set["pod"] != pod || set["namespace"] != "default" || set["probe_type"] != probeType {
			continue
		}
		parts := strings.Fields(value) // the value, then an optional timestamp
		if len(parts) == 0 {
			return nil, fmt.Errorf("a sample with no value: %s", line)
		}
		n, err := strconv.ParseFloat(parts[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", line, err)
		}
		runs[set["result"]] += n
	}
	return runs, nil
}

// restartCount is the pod's one container's restart count (0 without a
// status yet).
func restartCount(p *corev1.Pod) int32 {
	if len(p.Status.ContainerStatuses) != 1 {
		return 0
	}
	return p.Status.ContainerStatuses[0].RestartCount
}

// lastTermination says how the container's previous instance ended.
func lastTermination(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].LastTerminationState.Terminated == nil {
		return "unknown"
	}
	term := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
	return fmt.Sprintf("%s, exit %d at %s", term.Reason, term.ExitCode, term.FinishedAt.UTC().Format("15:04:05"))
}

// testPreStopAndGrace: a pod whose preStop hook takes 3 s, whose app
// ignores SIGTERM (and logs a line every 100 ms), with a 4 s grace period.
// The container log, timestamped by containerd, shows the hook start after
// the deletion and end before SIGTERM; SIGKILL (the last line) comes 2 s
// after SIGTERM (the kubelet's minimum, since the hook used 3 of the 4 s),
// not the 4 s a grace period counted from SIGTERM would give.
func testPreStopAndGrace(t *testing.T, ctx context.Context, c *lab.Client) {
	const name = "hooks"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](4),
			Containers: []corev1.Container{{
				Name: "app", Image: "rollprobe/demoapp:v1",
				Env: []corev1.EnvVar{env("POD_NAME", name), env("SHUTDOWN", "ignore"), env("HEARTBEAT", "100ms")},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
					Command: []string{"sh", "-c", "echo prestop start >/proc/1/fd/1; sleep 3; echo prestop end >/proc/1/fd/1"}}}},
			}},
		},
	}
	if _, err := c.Kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s not running: %v", name, err)
	}
	logs := exec.CommandContext(ctx, filepath.Join(binDir, "rollprobe"), "lab", "exec", "--state-dir", stateDir, "--",
		"kubectl", "logs", "-f", "--timestamps", name)
	var out bytes.Buffer
	logs.Stdout, logs.Stderr = &out, &out
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	// kubectl runs until the container's log ends: a test failing before
	// that ends it here, by PID.
	waitDone := make(chan error, 1)
	go func() { waitDone <- logs.Wait() }()
	t.Cleanup(func() {
		_ = logs.Process.Kill()
		<-waitDone
	})
	time.Sleep(time.Second) // the stream is open
	deleted := time.Now()
	if err := c.Kube.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// kubectl logs -f ends when the container does.
	select {
	case err := <-waitDone:
		waitDone <- err // for the cleanup
	case <-time.After(30 * time.Second):
		_ = logs.Process.Kill()
		waitDone <- <-waitDone // reaped: out is complete
		t.Fatalf("the container log did not end within 30s:\n%s", out.String())
	}
	var hookStart, hookEnd, sigterm, lastAlive time.Time
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		ts, text, ok := strings.Cut(sc.Text(), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil {
			continue
		}
		switch {
		case strings.Contains(text, "prestop start"):
			hookStart = at
		case strings.Contains(text, "prestop end"):
			hookEnd = at
		case strings.Contains(text, "terminated: ignored"):
			sigterm = at
		case strings.Contains(text, "alive"):
			lastAlive = at
		}
	}
	if hookStart.IsZero() || hookEnd.IsZero() || sigterm.IsZero() || lastAlive.IsZero() {
		t.Fatalf("the log lacks a mark (hook start %v, end %v, SIGTERM %v, last heartbeat %v):\n%s", hookStart, hookEnd, sigterm, lastAlive, out.String())
	}
	rel := func(at time.Time) string { return fmt.Sprintf("%+.2fs", at.Sub(deleted).Seconds()) }
	t.Logf("deletion requested at 0: preStop %s to %s, SIGTERM %s, last heartbeat (SIGKILL) %s",
		rel(hookStart), rel(hookEnd), rel(sigterm), rel(lastAlive))
	if hookStart.Before(deleted.Add(-100*time.Millisecond)) || !hookEnd.Before(sigterm) {
		t.Errorf("the preStop hook must run after the deletion and end before SIGTERM")
	}
	if gap := sigterm.Sub(deleted); gap < 2900*time.Millisecond {
		t.Errorf("SIGTERM came %s after the deletion: before the 3s hook could have ended", gap)
	}
	if kill := lastAlive.Sub(sigterm); kill < 1800*time.Millisecond || kill > 3200*time.Millisecond {
		t.Errorf("SIGKILL came %s after SIGTERM; want the 2s minimum (the hook used 3 of the 4s grace period)", kill)
	}
}
