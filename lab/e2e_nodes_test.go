package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/render/htmlreport"
)

// demoDeployment is a Deployment of demoapp with a readiness probe, for
// tests that need pods but no particular shutdown behaviour.
func demoDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []corev1.Container{{
						Name: "app", Image: "rollprobe/demoapp:v1",
						Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
							PeriodSeconds: 1, FailureThreshold: 1,
						},
					}},
				},
			},
		},
	}
}

// testSpread: the scheduler spreads a 4-replica Deployment over both nodes,
// and a pod on one node reaches a pod on the other by its IP (through the
// apiserver's exec into the kubelet, the lab network and both bridges).
func testSpread(t *testing.T, ctx context.Context, c *lab.Client) {
	const name = "spread"
	if _, err := c.Kube.AppsV1().Deployments("default").Create(ctx, demoDeployment(name, 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Kube.AppsV1().Deployments("default").Delete(ctx, name, metav1.DeleteOptions{}) }()
	waitRollout(t, ctx, c, name)
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		byNode[p.Spec.NodeName] = p
	}
	if len(byNode) != lab.DefaultNodes {
		t.Fatalf("the pods of a 4-replica Deployment are on %d nodes, want %d", len(byNode), lab.DefaultNodes)
	}
	from, to := byNode["lab-node-1"], byNode["lab-node-2"]
	out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", "kubectl", "exec", from.Name, "--",
		"demoapp", "get", "http://"+to.Status.PodIP+":8080/")
	if err != nil || !strings.Contains(out, "hello from "+to.Name) {
		t.Fatalf("%s (lab-node-1) -> %s (lab-node-2, %s): %v\n%s", from.Name, to.Name, to.Status.PodIP, err, out)
	}
}

// testLocalPolicy rolls the two externalTrafficPolicy: Local samples while
// rollprobe probes the first node's NodePort from the client host (a load
// balancer without health checks), and polls that node's healthCheckNodePort
// meanwhile. With an app that turns unready on SIGTERM, the node has no
// usable local endpoint while its only pod terminates: traffic to it drops
// and the health check turns 503. With an app that keeps passing readiness,
// kube-proxy falls back to the terminating, still serving pod: nothing drops.
func testLocalPolicy(t *testing.T, ctx context.Context, c *lab.Client) {
	node := firstNode()
	for _, tc := range []struct {
		sample           string
		nodePort, health int
		wantDrops        bool
	}{
		{"local-policy", 30080, 32080, true},
		{"local-policy-serving", 30081, 32081, false},
	} {
		t.Run(tc.sample, func(t *testing.T) {
			apply(t, tc.sample)
			waitRollout(t, ctx, c, tc.sample)
			target := fmt.Sprintf("http://%s:%d/", node.IP, tc.nodePort)
			if err := waitServingFrom(ctx, netns.LabNetNS, target); err != nil {
				t.Fatal(err)
			}
			// kube-proxy updates its health check server after it writes
			// the rules: a warm CI run (of 344dba4) read 503 first, once
			// the NodePort already served (waitServingFrom), then 200,
			// then the rollout's 503. The run starts from a node whose
			// health check says it serves.
			healthURL := fmt.Sprintf("http://%s:%d/", node.IP, tc.health)
			if err := waitServingFrom(ctx, netns.LabNetNS, healthURL); err != nil {
				t.Fatal(err)
			}
			health := pollStatus(t, ctx, healthURL)
			var resets *capture.Capture // every reset sent to the client: who refused what (see checkOutsideGaps)
			if tc.wantDrops && capture.Available() == nil {
				resets = capture.Start(t, node.NS, "any", "tcp[tcpflags] & tcp-rst != 0 and dst host "+netns.HubIP)
			}
			r := startRunOn(t, []string{"--client"}, tc.sample, target, "--conn", "new", "--settle", "3s").wait(t)
			codes := health()
			if r.repErr != nil {
				t.Fatalf("exit %d: %v\n%s", r.exit, r.repErr, r.out())
			}
			t.Logf("%s: exit %d, %d of %d failed %v; %s's health check answered %v", tc.sample, r.exit, r.rep.Totals.Failed,
				r.rep.Totals.Sent, nonZero(r.rep.Totals.ByClass), node.Name, codes)
			// The target is recognised as the node's NodePort of a Local
			// Service, whatever happened.
			ro := r.rep.Rollout
			if e := ro.Entry; e == nil || e.Via != "node_port" || e.Node != node.Name || int(e.Port) != tc.nodePort ||
				ro.ExternalTrafficPolicy != "Local" || ro.ServiceType != "LoadBalancer" || int(ro.HealthCheckNodePort) != tc.health {
				t.Errorf("rollout section: entry %+v, type %q, policy %q, health %d", ro.Entry, ro.ServiceType, ro.ExternalTrafficPolicy, ro.HealthCheckNodePort)
			}
			checkShutdownsMissedOffTheEntry(t, r.rep, node, nil)
			local := findingByID(r.rep, "local-policy-node-without-serving-endpoint")
			if tc.wantDrops {
				if r.exit != 1 || r.rep.Totals.Failed == 0 {
					t.Errorf("exit %d with %d failed: traffic to a node whose only pod terminates must drop", r.exit, r.rep.Totals.Failed)
				}
				if !slices.Contains(codes, http.StatusServiceUnavailable) || codes[0] != http.StatusOK {
					t.Errorf("health check answers %v: want 200, then 503 while the node has no ready local endpoint", codes)
				}
				// The blackhole is explained as what it is: the node's gap
				// without a serving endpoint claims the drops, not the race.
				inGaps := 0
				for _, g := range r.rep.NodeGaps {
					if g.Node != node.Name || len(g.ReadyElsewhere) == 0 {
						t.Errorf("gap %+v: want %s's, with a pod ready on another node", g, node.Name)
					}
					inGaps += g.Failed
				}
				if local == nil || local.Severity != "error" || inGaps == 0 {
					t.Fatalf("no local-policy finding (gaps %+v):\n%+v", r.rep.NodeGaps, r.rep.Findings)
				}
				if race := findingByID(r.rep, "stops-accepting-before-endpoints-propagate"); race != nil {
					t.Errorf("the race finding claims part of the blackhole:\n%s\n%s", strings.Join(race.Evidence, "\n"), strings.Join(local.Evidence, "\n"))
				}
				if inGaps != len(r.rep.Failures) {
					checkOutsideGaps(t, r.rep, node, tc.nodePort, resets)
				}
				var page bytes.Buffer
				if err := htmlreport.Write(&page, r.rep); err != nil || !strings.Contains(page.String(), `class="node-gap" data-node="`+node.Name+`"`) {
					t.Errorf("the HTML page does not draw %s's gap on its pod lanes: %v", node.Name, err)
				}
				t.Logf("finding: %s / fix: %s", strings.Join(local.Evidence, " | "), local.Fix)
			} else {
				if r.exit != 0 || r.rep.Totals.Failed != 0 {
					t.Errorf("exit %d with %d failed: kube-proxy must fall back to the terminating pod that still serves\n%s", r.exit, r.rep.Totals.Failed, r.out())
				}
				if local != nil || len(r.rep.NodeGaps) != 0 {
					t.Errorf("a node gap where a terminating endpoint kept serving: %+v %+v", r.rep.NodeGaps, local)
				}
			}
		})
	}
}

// testLocalPolicyEveryNode probes every node's NodePort of the dropping
// Local-policy sample, one path each (what shutdown-not-exercised advises
// under a Local policy). Each path's own responses are the referee of the
// premise the analysis rests on: their backend header names only pods on
// the node the path enters. Against it: each path's entry is its node,
// every failure is put only on pods of its path's node, each node's gap
// holds failures (both nodes' only pods go), the finding names both
// entries, and no pod is left unexercised, the run's paths together
// having met every one.
func testLocalPolicyEveryNode(t *testing.T, ctx context.Context, c *lab.Client) {
	const sample, nodePort = "local-policy", 30080
	apply(t, sample)
	waitRollout(t, ctx, c, sample)
	nodes := netns.Nodes(lab.DefaultNodes)
	var targets []string
	for _, n := range nodes {
		u := fmt.Sprintf("http://%s:%d/", n.IP, nodePort)
		if err := waitServingFrom(ctx, netns.LabNetNS, u); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, n.Name+"="+u)
	}
	args := []string{"--conn", "new", "--settle", "3s"}
	for _, tg := range targets[1:] {
		args = append(args, "--target", tg)
	}
	r := startRunOn(t, []string{"--client"}, sample, targets[0], args...).wait(t)
	if r.repErr != nil {
		t.Fatalf("exit %d: %v\n%s", r.exit, r.repErr, r.out())
	}
	rep := r.rep
	if r.exit != 1 || rep.Totals.Failed == 0 || len(rep.Paths) != len(nodes) {
		t.Fatalf("exit %d, %d failed, %d paths: want drops on %d paths\n%s", r.exit, rep.Totals.Failed, len(rep.Paths), len(nodes), r.out())
	}
	nodeOf := map[string]string{} // pod -> node
	for _, p := range rep.Pods {
		nodeOf[p.Pod] = p.Node
	}
	pathNode := map[string]string{}
	for i, p := range rep.Paths {
		pathNode[p.Name] = nodes[i].Name
		if e := p.Entry; e == nil || e.Via != report.ViaNodePort || e.Node != nodes[i].Name || int(e.Port) != nodePort {
			t.Errorf("path %s: entry %+v, want %s's NodePort %d", p.Name, p.Entry, nodes[i].Name, nodePort)
		}
		served := 0
		for _, pt := range p.Pods {
			if pt.Served == 0 {
				continue
			}
			served++
			if nodeOf[pt.Pod] != nodes[i].Name {
				t.Errorf("path %s answered by %s on %q: the Local policy's premise does not hold here", p.Name, pt.Pod, nodeOf[pt.Pod])
			}
		}
		if served == 0 {
			t.Errorf("path %s: no response named a pod", p.Name)
		}
		t.Logf("path %s: %d of %d failed %v", p.Name, p.Totals.Failed, p.Totals.Sent, nonZero(p.Totals.ByClass))
	}
	for _, f := range rep.Failures {
		for _, pod := range append([]string{f.LikelyPod}, f.Candidates...) {
			if pod != "" && nodeOf[pod] != pathNode[f.Path] {
				t.Errorf("a failure on path %s (%s at %s) put on %s, on %q: traffic entering %s cannot reach it", f.Path, f.Class,
					f.Intended.Sub(rep.StartedAt), pod, nodeOf[pod], pathNode[f.Path])
			}
		}
	}
	failedIn := map[string]int{}
	for _, g := range rep.NodeGaps {
		failedIn[g.Node] += g.Failed
	}
	for _, n := range nodes {
		if failedIn[n.Name] == 0 {
			t.Errorf("no failure in a gap of %s (gaps %+v)", n.Name, rep.NodeGaps)
		}
	}
	local := findingByID(rep, "local-policy-node-without-serving-endpoint")
	if local == nil {
		t.Fatalf("no local-policy finding (gaps %+v): %v", rep.NodeGaps, findingIDs(rep))
	}
	ev := strings.Join(local.Evidence, "\n")
	for _, n := range nodes {
		if want := fmt.Sprintf("path %s's target is node %s's NodePort %d", n.Name, n.Name, nodePort); !strings.Contains(ev, want) {
			t.Errorf("the finding does not say %q:\n%s", want, ev)
		}
	}
	checkEveryShutdownExercised(t, r)
	t.Logf("finding: %s | %s", local.Title, strings.Join(local.Evidence, " | "))
}

// checkOutsideGaps holds the failures of a Local-policy run that fall
// outside the entry node's gaps to the wire. The sample's drops are the
// gaps'; but a CI run (706acaf) had one refusal 4.6 s before the gap, 55 ms
// after the other node's pod was deleted, and its capture showed the reset
// sent by the node itself (from its NodePort, on its uplink only: a pod's
// reset is seen on its veth and the bridge too, translated back on the
// uplink): a SYN that met no DNAT there. Not reproduced in 19 runs of
// this test alone, and a chain replaced as kube-proxy replaces it, 4,000
// times under 22,000 connections, refused none; its cause is not known.
// Such a failure must be a refusal the capture shows the node sent, and
// rollprobe must not pin it on a pod traffic entering the node cannot
// reach (a pod on another node: the Local policy keeps it there). Without
// a capture every failure must be the gaps'.
func checkOutsideGaps(t *testing.T, rep *report.Report, node netns.Node, nodePort int, resets *capture.Capture) {
	t.Helper()
	if resets == nil {
		t.Errorf("failures outside the node's gaps, and no capture to tell who refused them (%d gaps)", len(rep.NodeGaps))
		return
	}
	podNode := map[string]string{}
	for _, e := range rep.Timeline {
		if e.Pod != "" && e.Node != "" {
			podNode[e.Pod] = e.Node
		}
	}
	entry := netip.AddrPortFrom(netip.MustParseAddr(node.IP), uint16(nodePort))
	byNode, byPod := map[uint16]bool{}, map[uint16]bool{}
	for _, seg := range resets.Segments() {
		switch {
		case seg.Src == entry:
			byNode[seg.Dst.Port()] = true
		case seg.Src.Addr() != entry.Addr():
			byPod[seg.Dst.Port()] = true // a pod's (its veth, the bridge): before the node translates it
		}
	}
	for _, f := range rep.Failures {
		began := f.Start
		if began.IsZero() {
			began = f.Intended
		}
		inGap := false
		for _, g := range rep.NodeGaps { // as the analysis places them (its gapSlack: up to 3 s after)
			if !began.Before(g.Start) && began.Before(g.End.Add(3*time.Second)) {
				inGap = true
			}
		}
		if inGap {
			continue
		}
		local, err := netip.ParseAddrPort(f.LocalAddr)
		if err != nil {
			t.Errorf("failure #%d (%s at %+.2fs) outside the gaps has no local address %q to find on the wire", f.Seq, f.Class, f.AtMS/1000, f.LocalAddr)
			continue
		}
		port := local.Port()
		if f.Class != report.ClassRefused || !byNode[port] || byPod[port] {
			t.Errorf("failure #%d (%s at %+.2fs, port %d) outside the gaps: reset by the node %v, by a pod %v; want a refusal the node sent\n%s",
				f.Seq, f.Class, f.AtMS/1000, port, byNode[port], byPod[port], resets.Text(40))
			continue
		}
		if n := podNode[f.LikelyPod]; f.LikelyPod != "" && n != node.Name {
			t.Errorf("failure #%d pinned on %s (node %q), which traffic entering %s cannot reach", f.Seq, f.LikelyPod, n, node.Name)
			continue
		}
		t.Logf("failure #%d (%s at %+.2fs, port %d) outside the gaps: the node's own reset; likely pod %q (%s)", f.Seq, f.Class, f.AtMS/1000, port, f.LikelyPod, f.Context)
	}
}

// pollStatus polls url from the client host every 100 ms until the
// returned function is called (or the test ends), which returns the
// distinct status codes in the order they changed (0 for no answer).
func pollStatus(t *testing.T, ctx context.Context, url string) func() []int {
	client := clientIn(netns.LabNetNS, time.Second)
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var codes []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			code := 0
			if resp, err := client.Get(url); err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			if len(codes) == 0 || codes[len(codes)-1] != code {
				codes = append(codes, code)
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	stop := func() []int {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return codes
	}
	t.Cleanup(func() { stop() })
	return stop
}

// testLocalPolicyFromProbers probes the dropping Local-policy sample at
// the first node's NodePort from in-cluster probers, one per node.
//
// On the nodes' network (--probers-conntrack) the prober on the other node
// comes to the node port from outside and meets the Local policy: its
// failures are the node's gap, every one; the prober on the entry node is
// sent to the whole Service by kube-proxy (what a node sends to its own
// node port) and fails none. No node's kube-proxy is named as lagging: the
// entry node routed all of it (before, the other node's prober was).
//
// In the pod network the prober on the other node keeps its pod address
// to the entry node, whose kube-proxy sends pod traffic to the whole
// Service: to the other node's pod too, whose answer goes straight back to
// the prober, unrewritten, and is dropped (about half its connections
// time out, before any change). The baseline must refuse that, naming the
// prober; it passed before, its timeouts merged only after the baseline's
// end, and the run put them on the rollout.
func testLocalPolicyFromProbers(t *testing.T, ctx context.Context, c *lab.Client) {
	const sample, nodePort = "local-policy", 30080
	node := firstNode()
	apply(t, sample)
	waitRollout(t, ctx, c, sample)
	target := fmt.Sprintf("http://%s:%d/", node.IP, nodePort)
	if err := waitServingFrom(ctx, netns.LabNetNS, target); err != nil {
		t.Fatal(err)
	}
	t.Run("pod network: refused at the baseline", func(t *testing.T) {
		before, err := c.Kube.AppsV1().Deployments("default").Get(ctx, sample, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{}, proberArgs...), "--conn", "new")
		r := startRunOn(t, []string{"--client"}, sample, target, args...).wait(t)
		other := netns.Nodes(lab.DefaultNodes)[1].Name
		if out := r.out(); r.exit != 2 || !strings.Contains(out, "is not healthy before the rollout") || !strings.Contains(out, "connect_timeout") ||
			!strings.Contains(out, "on node "+other+")") || !strings.Contains(out, "nothing triggered") {
			t.Errorf("exit %d: want 2, the baseline refused for the connect timeouts of the prober on %s\n%s", r.exit, other, out)
		}
		for _, line := range strings.Split(r.out(), "\n") {
			if strings.Contains(line, "not healthy") {
				t.Log(line)
			}
		}
		if d, err := c.Kube.AppsV1().Deployments("default").Get(ctx, sample, metav1.GetOptions{}); err != nil || d.Generation != before.Generation {
			t.Errorf("the Deployment after the refused run: %v, generation %d, was %d", err, d.Generation, before.Generation)
		}
		noProberPods(t, ctx, c) // a refused run deletes its probers too
	})
	t.Run("nodes' network: the other node's prober meets the gap", func(t *testing.T) {
		args := append(append([]string{}, proberArgs...), "--probers-conntrack", "--conn", "new", "--settle", "3s")
		r := startRunOn(t, []string{"--client"}, sample, target, args...).wait(t)
		if r.repErr != nil {
			t.Fatalf("exit %d: %v\n%s", r.exit, r.repErr, r.out())
		}
		rep := r.rep
		if r.exit != 1 || rep.Totals.Failed == 0 {
			t.Fatalf("exit %d, %d failed: want the gap's drops\n%s", r.exit, rep.Totals.Failed, r.out())
		}
		for _, p := range rep.Probers {
			t.Logf("prober %s on %s: sent %d, failed %d %v", p.Pod, p.Node, p.Sent, p.Failed, p.ByClass)
			if p.Node == node.Name && p.Failed != 0 {
				t.Errorf("the prober on the entry node %s failed %d: kube-proxy should send a node's own traffic to its node port to the whole Service", node.Name, p.Failed)
			}
		}
		inGaps := 0
		for _, g := range rep.NodeGaps {
			inGaps += g.Failed
		}
		if inGaps != len(rep.Failures) {
			for _, f := range rep.Failures {
				t.Logf("%s from %s on %s: %s started %s, pod %s (%s)", f.RequestID, f.Prober, f.Node, f.Class, f.Start.Sub(rep.StartedAt), f.LikelyPod, f.PodAddr)
			}
			t.Errorf("%d of %d failures in the gaps %+v: every one should be", inGaps, len(rep.Failures), rep.NodeGaps)
		}
		if local := findingByID(rep, "local-policy-node-without-serving-endpoint"); local == nil {
			t.Errorf("no local-policy finding: %v", findingIDs(rep))
		}
		if late := findingByID(rep, "node-routes-to-terminating-pods-longer"); late != nil {
			t.Errorf("a node's kube-proxy named, though the entry node routed every request: %s", late.Title)
		}
		noProberPods(t, ctx, c)
	})
}
