package lab_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
)

// proberArgs probe from two prober pods, with the lab's image of this
// rollprobe.
var proberArgs = []string{"--probers", "2", "--prober-image", "rollprobe/rollprobe:latest"}

// Probing from the cluster: rollprobe runs on the client host, which has
// no route to the ClusterIP, and its prober pods probe from the nodes.
func testProbers(t *testing.T, ctx context.Context, c *lab.Client) {
	// The run suite's bad-image test applies graceful again in its cleanup;
	// applying it here too keeps this suite right when run without it, or
	// after a run that died before that cleanup (a no-op otherwise).
	apply(t, "graceful")

	t.Run("naive from two probers", func(t *testing.T) {
		ip := ensureSample(t, ctx, c, "naive")
		r := startRunOn(t, []string{"--client"}, "naive", "http://"+ip+"/", proberArgs...).wait(t)
		checkRunReport(t, r, report.StatusComplete)
		if r.exit != 1 || r.rep.Totals.Failed == 0 {
			t.Fatalf("exit %d, %d failed; want 1 with failures\n%s", r.exit, r.rep.Totals.Failed, r.out())
		}
		checkProbers(t, ctx, c, r.rep)
		for _, f := range r.rep.Failures {
			switch f.Class {
			// naive exits at once on SIGTERM: new connections are refused
			// or time out, connections it had are cut (reset, eof_reused),
			// and one it accepted just before exiting, with the request not
			// yet in, ends with its FIN first (eof: seen once in CI).
			case "refused", "connect_timeout", "reset", "eof_reused", "eof":
			default:
				t.Errorf("failure %s of a kind local probing does not see here: %s (%s)", f.RequestID, f.Class, f.Error)
			}
			if f.Prober == "" || f.Node == "" {
				t.Fatalf("failure %s names no prober or node", f.RequestID)
			}
		}
		if findingByID(r.rep, "stops-accepting-before-endpoints-propagate") == nil {
			t.Errorf("findings %v: want the propagation finding, as local probing gives", findingIDs(r.rep))
		}
	})

	t.Run("conntrack from probers on the nodes' network agrees with the wire", func(t *testing.T) { testProbersConntrack(t, ctx, c) })

	t.Run("graceful from two probers: ok is what the pods served", func(t *testing.T) {
		ip := ensureSample(t, ctx, c, "graceful")
		old := podsOf(t, ctx, c, "graceful")
		before := map[string]int{}
		finals := map[string]chan int{}
		for _, p := range old {
			before[p.Name] = servedNow(t, p.Status.PodIP)
			finals[p.Name] = followServed(t, ctx, c, p.Name)
		}
		r := startRunOn(t, []string{"--client"}, "graceful", "http://"+ip+"/", proberArgs...).wait(t)
		checkRunReport(t, r, report.StatusComplete)
		checkClean(t, r)
		checkProbers(t, ctx, c, r.rep)
		served := 0
		for name, ch := range finals {
			select {
			case n := <-ch:
				served += n - before[name]
			case <-time.After(30 * time.Second):
				t.Fatalf("old pod %s never logged what it served", name)
			}
		}
		for _, p := range podsOf(t, ctx, c, "graceful") {
			served += servedNow(t, p.Status.PodIP)
		}
		if uint64(served) != r.rep.Totals.OK {
			t.Fatalf("the pods served %d requests during the run; the merged report counts %d ok", served, r.rep.Totals.OK)
		}
		t.Logf("the pods served %d, the probers' merged ok %d", served, r.rep.Totals.OK)
	})

	t.Run("graceful from two probers by the Service's name: the entry is where they dialled", func(t *testing.T) {
		// A name takes the goroutine engine (the loops probe an address),
		// so checkRunReport's engine check is not this test's: the rest of
		// it is. CoreDNS resolves the name in the prober pods; what they
		// dialled comes back on their end lines, and the run reads the
		// entry from it: the Service's cluster IP (the API server's word).
		ip := ensureSample(t, ctx, c, "graceful")
		r := startRunOn(t, []string{"--client"}, "graceful", "http://graceful.default.svc/", proberArgs...).wait(t)
		if r.repErr != nil {
			t.Fatalf("report: %v\n%s", r.repErr, r.out())
		}
		validateSchema(t, r.reportPath)
		if ro := r.rep.Rollout; ro == nil || ro.Status != report.StatusComplete || r.rep.Prober.Engine != "goroutines" {
			t.Fatalf("rollout %+v on the %q engine: want complete, on the goroutines\n%s", ro, r.rep.Prober.Engine, r.out())
		}
		// Nothing fails but kube-proxy's reject of the Service address while
		// it rewrites its rules, each held to the wire, put on no pod: the
		// probers read the ICMP error that refused it (refused_by), which
		// tells a rule's reject from a pod's reset from the pod network,
		// without conntrack (checkClean). The first run of this test, before
		// they did, met one such and put it among two terminating pods.
		checkClean(t, r)
		checkProbers(t, ctx, c, r.rep)
		want := fmt.Sprint([]string{net.JoinHostPort(ip, "80")})
		if e, got := r.rep.Rollout.Entry, fmt.Sprint(r.rep.Prober.Dialled); e == nil || e.Via != report.ViaClusterIP || e.From != report.EntryFromDialled || got != want {
			t.Errorf("entry %+v, the probers dialled %s: want the cluster IP %s, read from what they dialled", e, got, want)
		}
	})

	// gRPC from the pods: each prober speaks it as a local one does, and
	// what they measured merges: the raw streams' classes and GOAWAY
	// fields, grpc-go's hidden retries (wire aggregates and results).
	t.Run("gRPC from two probers, raw and raw beside grpc-go", func(t *testing.T) {
		ip := ensureSample(t, ctx, c, "grpc-single-goaway")
		raw := startRunOn(t, []string{"--client"}, "grpc-single-goaway", "http://"+ip, append([]string{"--protocol", "grpc"}, proberArgs...)...).wait(t)
		if raw.repErr != nil || raw.exit != 1 {
			t.Fatalf("raw: exit %d (%v), want 1\n%s", raw.exit, raw.repErr, raw.out())
		}
		validateSchema(t, raw.reportPath)
		checkProbers(t, ctx, c, raw.rep)
		unprocessed := 0
		for _, f := range raw.rep.Failures {
			if f.Class == report.ClassGoAwayUnprocessed && f.GoAway == report.GoAwaySingle && f.H2Code == "NO_ERROR" && f.Prober != "" {
				unprocessed++
			}
		}
		if unprocessed == 0 || raw.rep.Config.Protocol != "grpc" || raw.rep.Totals.HiddenRetries != nil {
			t.Errorf("raw from probers: %d goaway_unprocessed with their GOAWAY and prober, %v, hidden %+v", unprocessed, nonZero(raw.rep.Totals.ByClass), raw.rep.Totals.HiddenRetries)
		}
		// grpc-go beside raw (--grpc-client both: two paths of one
		// target), each path from its own two probers: raw fails the
		// unprocessed streams, grpc-go resends them unseen.
		both := startRunOn(t, []string{"--client"}, "grpc-single-goaway", "http://"+ip,
			append([]string{"--protocol", "grpc", "--grpc-client", "both"}, proberArgs...)...).wait(t)
		if both.repErr != nil || both.exit != 1 {
			t.Fatalf("both: exit %d (%v), want 1 (the raw path fails)\n%s", both.exit, both.repErr, both.out())
		}
		validateSchema(t, both.reportPath)
		rep := both.rep
		if len(rep.Paths) != 2 || rep.Paths[0].GRPCClient != "raw" || rep.Paths[1].GRPCClient != "grpc-go" {
			t.Fatalf("paths %+v: want raw and grpc-go", rep.Paths)
		}
		checkPathProbers(t, rep, rep.Config.Rate/2)
		rawPath, goPath := rep.Paths[0].Totals, rep.Paths[1].Totals
		h := goPath.HiddenRetries
		if rawPath.ByClass[report.ClassGoAwayUnprocessed] == 0 || rawPath.HiddenRetries != nil {
			t.Errorf("raw path from probers: %v, hidden %+v: want goaway_unprocessed, nothing hidden", nonZero(rawPath.ByClass), rawPath.HiddenRetries)
		}
		if h == nil || h.Calls == 0 || goPath.Failed >= rawPath.Failed {
			t.Errorf("grpc-go path from probers: %v, hidden %+v: want hidden retries, merged from its probers, and fewer failures than raw's %d",
				nonZero(goPath.ByClass), h, rawPath.Failed)
		}
		// As from this process: the run says both clients made its calls,
		// and what grpc-go resent over the run is its path's.
		if rep.Config.GRPCClient != report.GRPCClientBoth || rep.Totals.HiddenRetries == nil || h == nil || *rep.Totals.HiddenRetries != *h {
			t.Errorf("the run's client %q, hidden retries %+v: want both, the grpc-go path's %+v", rep.Config.GRPCClient, rep.Totals.HiddenRetries, h)
		}
		noProberPods(t, ctx, c)
		t.Logf("raw %v; both: raw path %v, grpc-go path %v, hidden %+v", nonZero(raw.rep.Totals.ByClass), nonZero(rawPath.ByClass), nonZero(goPath.ByClass), h)
	})

	t.Run("probe from two probers", func(t *testing.T) {
		ip := ensureSample(t, ctx, c, "graceful")
		path := filepath.Join(t.TempDir(), "probe.json")
		out, err := rollprobe(t, append([]string{"lab", "exec", "--state-dir", stateDir, "--client", "--",
			filepath.Join(binDir, "rollprobe"), "probe", "http://" + ip + "/", "--rate", "100", "--duration", "3s",
			"--progress", "0", "--report", path}, proberArgs...)...)
		if err != nil {
			t.Fatalf("probe --probers: %v\n%s", err, out)
		}
		rep, err := report.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		validateSchema(t, path)
		if rep.Command != "probe" || rep.Totals.OK != rep.Totals.Sent || rep.Totals.Sent < 280 || rep.Totals.Sent > 320 {
			t.Fatalf("%s: sent %d, ok %d; want about 300, all ok\n%s", rep.Command, rep.Totals.Sent, rep.Totals.OK, out)
		}
		checkProbers(t, ctx, c, rep)

		// Two paths (the ClusterIP, and the Service by name through
		// CoreDNS in the pods), each from its own two probers, each
		// held to its 3 s window at its own rate.
		out, err = rollprobe(t, append([]string{"lab", "exec", "--state-dir", stateDir, "--client", "--",
			filepath.Join(binDir, "rollprobe"), "probe", "ip=http://" + ip + "/", "name=http://graceful.default.svc/", "--rate", "100",
			"--duration", "3s", "--progress", "0", "--report", path}, proberArgs...)...)
		if err != nil {
			t.Fatalf("probe of two paths --probers: %v\n%s", err, out)
		}
		if rep, err = report.ReadFile(path); err != nil {
			t.Fatal(err)
		}
		validateSchema(t, path)
		if len(rep.Paths) != 2 || rep.Totals.OK != rep.Totals.Sent {
			t.Fatalf("%d paths, %d of %d ok: want two paths, all ok\n%s", len(rep.Paths), rep.Totals.OK, rep.Totals.Sent, out)
		}
		checkPathProbers(t, rep, 50)
		// What each path's probers dialled came back over the wire: the
		// name, resolved by CoreDNS in the pods, went where the address
		// did, the Service's cluster IP (the API server's word for it).
		want := fmt.Sprint([]string{net.JoinHostPort(ip, "80")})
		for _, p := range rep.Paths {
			if !p.Verdict.Pass || p.Totals.Sent < 280 || p.Totals.Sent > 320 {
				t.Errorf("path %s: sent %d, pass %v: want about 300, passing", p.Name, p.Totals.Sent, p.Verdict.Pass)
			}
			if got := fmt.Sprint(p.Prober.Dialled); got != want || p.Prober.DialledMore {
				t.Errorf("path %s: its probers dialled %s (more %v), want %s", p.Name, got, p.Prober.DialledMore, want)
			}
		}
		if got := fmt.Sprint(rep.Prober.Dialled); got != want {
			t.Errorf("the run's probers dialled %s, want %s", got, want)
		}
		noProberPods(t, ctx, c)
	})

	t.Run("a Service with no endpoint, from two probers and a node: each refusal is the node's ICMP reject", func(t *testing.T) {
		testRefusedByTheRules(t, ctx, c)
	})

	t.Run("a namespace whose PodSecurity refuses host-network probers changes nothing", func(t *testing.T) {
		// The API server's own PodSecurity admission is the referee: at
		// level baseline it refuses hostNetwork and added capabilities.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "baseline-probers",
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
		if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
		ip := ensureSample(t, ctx, c, "naive")
		gen := deploymentGeneration(t, ctx, c, "naive")
		r := startRunOn(t, []string{"--client"}, "naive", "http://"+ip+"/", append(append([]string{}, proberArgs...),
			"--probers-conntrack", "--prober-namespace", ns.Name)...).wait(t)
		if r.exit != 2 || !strings.Contains(r.out(), "pod-security.kubernetes.io/enforce=privileged") || !strings.Contains(r.out(), "PodSecurity") {
			t.Fatalf("exit %d; want 2 saying the policy refused the probers\n%s", r.exit, r.out())
		}
		if got := deploymentGeneration(t, ctx, c, "naive"); got != gen {
			t.Fatalf("the Deployment changed (generation %d -> %d): something was triggered", gen, got)
		}
		pods, err := c.Kube.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 0 {
			t.Fatalf("pods in %s: %v %v", ns.Name, pods, err)
		}
	})

	t.Run("a bad prober image changes nothing", func(t *testing.T) {
		ip := ensureSample(t, ctx, c, "naive")
		gen := deploymentGeneration(t, ctx, c, "naive")
		r := startRunOn(t, []string{"--client"}, "naive", "http://"+ip+"/", "--probers", "2",
			"--prober-image", "rollprobe/nothing:v1", "--prober-start-timeout", "30s").wait(t)
		if r.exit != 2 || !strings.Contains(r.out(), "ErrImagePull") {
			t.Fatalf("exit %d; want 2 naming ErrImagePull\n%s", r.exit, r.out())
		}
		if got := deploymentGeneration(t, ctx, c, "naive"); got != gen {
			t.Fatalf("the Deployment changed (generation %d -> %d): something was triggered", gen, got)
		}
		noProberPods(t, ctx, c)
	})

	t.Run("a prober that dies makes the run inconclusive", func(t *testing.T) {
		ip := ensureSample(t, ctx, c, "graceful")
		gen := deploymentGeneration(t, ctx, c, "graceful")
		// A baseline long enough that the lost stream is seen before it ends
		// (it took about 1 s in the lab).
		s := startRunOn(t, []string{"--client"}, "graceful", "http://"+ip+"/", append(proberArgs, "--baseline", "10s")...)
		s.waitFor(t, "probers sending from the cluster")
		list, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: fleet.LabelName + "=" + fleet.NameValue})
		if err != nil || len(list.Items) != 2 {
			t.Fatalf("prober pods: %v, %v", list, err)
		}
		victim := list.Items[0].Name
		if err := c.Kube.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r := s.wait(t)
		if r.exit != 4 || r.repErr != nil {
			t.Fatalf("exit %d, report %v; want 4 with a report\n%s", r.exit, r.repErr, r.out())
		}
		// It died during the baseline: the trigger must not fire with a
		// prober missing (and the rollout did not fail: exit 4, not 3).
		if got := deploymentGeneration(t, ctx, c, "graceful"); got != gen || r.rep.Rollout.Status != report.StatusNotStarted {
			t.Errorf("triggered with a prober lost: generation %d -> %d, rollout %s", gen, got, r.rep.Rollout.Status)
		}
		if reasons := strings.Join(r.rep.Verdict.Reasons, "; "); !strings.Contains(reasons, victim) {
			t.Errorf("the verdict does not name the lost prober %s: %s", victim, reasons)
		}
		for _, p := range r.rep.Probers {
			if (p.Pod == victim) != (p.Status == report.ProberLost) || (p.Pod == victim && p.LostAt == nil) {
				t.Errorf("prober %s: status %s, lost at %v", p.Pod, p.Status, p.LostAt)
			}
		}
		noProberPods(t, ctx, c)
	})

	t.Run("Ctrl-C mid-rollout leaves no prober pod", func(t *testing.T) {
		ip := ensureSample(t, ctx, c, "naive")
		s := startRunOn(t, []string{"--client"}, "naive", "http://"+ip+"/", proberArgs...)
		s.waitFor(t, "triggered")
		if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		r := s.wait(t)
		if r.exit != 130 || r.repErr != nil {
			t.Fatalf("exit %d, report %v; want 130 with a report\n%s", r.exit, r.repErr, r.out())
		}
		noProberPods(t, ctx, c)
		waitRollout(t, ctx, c, "naive") // let the interrupted rollout finish for the next test
	})
}

// checkProbers: two probers on two nodes, each with its part of the
// rate, started together, none lost; their counts add up to the totals;
// and no prober pod is left.
func checkProbers(t *testing.T, ctx context.Context, c *lab.Client, rep *report.Report) {
	t.Helper()
	if len(rep.Probers) != 2 || rep.Probers[0].Node == rep.Probers[1].Node {
		t.Fatalf("probers %+v: want two, on two nodes", rep.Probers)
	}
	var sent, ok uint64
	for _, p := range rep.Probers {
		if p.Status != report.ProberOK || p.ShareRPS != rep.Config.Rate/2 || p.StartedAt == nil {
			t.Errorf("prober %+v", p)
		}
		sent, ok = sent+p.Sent, ok+p.OK
	}
	if sent != rep.Totals.Sent || ok != rep.Totals.OK {
		t.Errorf("the probers sent %d (%d ok); the totals say %d (%d ok)", sent, ok, rep.Totals.Sent, rep.Totals.OK)
	}
	if s := rep.Prober.StartSpreadMS; s >= 100 {
		t.Errorf("the probers started %.1f ms apart: want within 100 ms", s)
	}
	checkProberClocks(t, rep)
	t.Logf("probers on %s and %s, start spread %.2f ms, clock offsets %.3f and %.3f ms", rep.Probers[0].Node, rep.Probers[1].Node,
		rep.Prober.StartSpreadMS, rep.Probers[0].ClockOffsetMS, rep.Probers[1].ClockOffsetMS)
	noProberPods(t, ctx, c)
}

// checkPathProbers holds a run of several paths from two probers a path:
// each path's own two probers, on two nodes, each at share req/s, started
// within 100 ms of all the others, whose counts are the path's; and every
// failure seen by a prober of its path.
func checkPathProbers(t *testing.T, rep *report.Report, share float64) {
	t.Helper()
	if len(rep.Probers) != 2*len(rep.Paths) || len(rep.Paths) < 2 {
		t.Fatalf("%d probers for %d paths: want two a path", len(rep.Probers), len(rep.Paths))
	}
	pathOf := map[string]string{}
	for _, path := range rep.Paths {
		var sent, ok uint64
		nodes := map[string]bool{}
		for _, p := range rep.Probers {
			if p.Path != path.Name {
				continue
			}
			if p.Status != report.ProberOK || p.RunID == "" || p.StartedAt == nil || p.ShareRPS != share {
				t.Errorf("prober %+v: want ok, started, with its run ID, at %v req/s", p, share)
			}
			sent, ok, nodes[p.Node], pathOf[p.Pod] = sent+p.Sent, ok+p.OK, true, p.Path
		}
		if len(nodes) != 2 || sent != path.Totals.Sent || ok != path.Totals.OK {
			t.Errorf("path %s: its probers on %d nodes sent %d (%d ok); the path counted %d (%d ok)", path.Name, len(nodes), sent, ok, path.Totals.Sent, path.Totals.OK)
		}
	}
	if s := rep.Prober.StartSpreadMS; s >= 100 {
		t.Errorf("the probers started %.1f ms apart: want within 100 ms", s)
	}
	checkProberClocks(t, rep)
	for _, f := range rep.Failures {
		if f.Path == "" || f.Prober == "" || pathOf[f.Prober] != f.Path {
			t.Fatalf("failure %s on path %q from prober %q (of path %q)", f.RequestID, f.Path, f.Prober, pathOf[f.Prober])
		}
	}
}

// checkProberClocks holds each prober's clock offset to the bound the
// analysis takes it to be within (half its ping's round trip, which widens
// the attribution of its failures). The referee is the kernel: the lab's
// pods share the host's one clock, so the true offset is 0 and the
// estimate is all error.
func checkProberClocks(t *testing.T, rep *report.Report) {
	t.Helper()
	var each []string
	for _, p := range rep.Probers {
		if p.ClockRTTMS <= 0 || math.Abs(p.ClockOffsetMS) > p.ClockRTTMS/2 {
			t.Errorf("prober %s: clock offset %+.3f ms outside half its ping's round trip (%.3f ms); the true offset is 0", p.Pod, p.ClockOffsetMS, p.ClockRTTMS)
		}
		each = append(each, fmt.Sprintf("%+.3f ms (round trip %.3f ms)", p.ClockOffsetMS, p.ClockRTTMS))
	}
	t.Logf("probers' clock offsets: %s", strings.Join(each, ", "))
}

// noProberPods: every prober pod is gone (deleted, not merely ending).
func noProberPods(t *testing.T, ctx context.Context, c *lab.Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: fleet.LabelName + "=" + fleet.NameValue})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		deleting := true
		for _, p := range list.Items {
			deleting = deleting && p.DeletionTimestamp != nil
		}
		if !deleting || time.Now().After(deadline) {
			t.Fatalf("%d prober pods left (deletion requested for all: %v)", len(list.Items), deleting)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func podsOf(t *testing.T, ctx context.Context, c *lab.Client, app string) []corev1.Pod {
	t.Helper()
	list, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func deploymentGeneration(t *testing.T, ctx context.Context, c *lab.Client, name string) int64 {
	t.Helper()
	d, err := c.Kube.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Generation
}

// servedNow asks a demoapp pod how many requests it has served (its
// /stats, from the first node).
func servedNow(t *testing.T, podIP string) int {
	t.Helper()
	return podStat(t, podIP, "served")
}

// podStat is one count of a demoapp pod's /stats (served, shed, ...),
// asked from the first node.
func podStat(t *testing.T, podIP, name string) int {
	t.Helper()
	resp, err := clientIn(firstNode().NS, 5*time.Second).Get("http://" + podIP + ":8080/stats")
	if err != nil {
		t.Fatalf("stats of %s: %v", podIP, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `=(\d+)`).FindSubmatch(b)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("stats of %s: %d %s (want %s=N)", podIP, resp.StatusCode, b, name)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

var stoppedServed = regexp.MustCompile(`stopped, served (\d+)`)

// followServed follows a demoapp pod's log and sends the count its last
// line gives ("stopped, served N") when it has shut down.
func followServed(t *testing.T, ctx context.Context, c *lab.Client, pod string) chan int {
	t.Helper()
	stream, err := c.Kube.CoreV1().Pods("default").GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", pod, err)
	}
	out := make(chan int, 1)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { _ = stream.Close() }) })
	go func() {
		defer once.Do(func() { _ = stream.Close() })
		sc := bufio.NewScanner(stream)
		for sc.Scan() {
			if m := stoppedServed.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.Atoi(m[1])
				out <- n
				return
			}
		}
	}()
	return out
}

// With one node's kube-proxy lagging, the probers' failures go on longer
// on that node, and the finding names it.
func testProbersSeeTheLaggedNode(t *testing.T, ctx context.Context, c *lab.Client, lagged string) {
	ip := ensureSample(t, ctx, c, "naive")
	// ensureSample waits for the Service from the client host; the lagged
	// node's kube-proxy learns of the endpoints seconds later, and a
	// prober there would find the baseline refused until then.
	for _, n := range netns.Nodes(lab.DefaultNodes) {
		if err := waitServingFrom(ctx, n.NS, "http://"+ip+"/"); err != nil {
			t.Fatal(err)
		}
	}
	r := startRunOn(t, []string{"--client"}, "naive", "http://"+ip+"/", proberArgs...).wait(t)
	checkRunReport(t, r, report.StatusComplete)
	checkProbers(t, ctx, c, r.rep)
	failed := map[string]uint64{}
	for _, p := range r.rep.Probers {
		failed[p.Node] = p.Failed
	}
	// Each node's last connection failures, which the finding compares:
	// logged in every run, so a passing one shows how near the other
	// node's came.
	tails := lastConnectFailures(r.rep, 4)
	fd := findingByID(r.rep, "node-routes-to-terminating-pods-longer")
	if fd == nil || !strings.Contains(fd.Title, "node "+lagged+" ") {
		t.Fatalf("findings %v (%+v): want the lagged node %s named; failures by node %v\n%s\n%s", findingIDs(r.rep), fd, lagged, failed, tails, r.out())
	}
	t.Logf("%s; failures by node %v\n%s", fd.Title, failed, tails)
	for node, n := range failed {
		if node != lagged && n >= failed[lagged] {
			t.Errorf("node %s's prober failed %d times, the lagged node's %d: want the lagged node's to be more", node, n, failed[lagged])
		}
	}
}

// lastConnectFailures lists each node's last n connection failures
// (refused, connect_timeout) with what the report knows of each.
func lastConnectFailures(r *report.Report, n int) string {
	byNode := map[string][]report.Failure{}
	for _, f := range r.Failures {
		if f.Class == report.ClassRefused || f.Class == report.ClassConnectTimeout {
			byNode[f.Node] = append(byNode[f.Node], f)
		}
	}
	var b strings.Builder
	for _, p := range r.Pods {
		if p.DeletedAt != nil {
			fmt.Fprintf(&b, "pod %s on %s: deletion requested at %+.3fs\n", p.Pod, p.Node, p.DeletedAt.Sub(r.StartedAt).Seconds())
		}
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		fs := byNode[node]
		sort.Slice(fs, func(i, j int) bool { return fs[i].Intended.Before(fs[j].Intended) })
		fmt.Fprintf(&b, "node %s: %d connection failures, the last:\n", node, len(fs))
		for _, f := range fs[max(0, len(fs)-n):] {
			fmt.Fprintf(&b, "  %+.3fs %s %s -> %s likely %s (%.2f, %s): %s\n", f.AtMS/1000, f.Class, f.LocalAddr, f.RemoteAddr, f.LikelyPod, f.Confidence, f.Evidence, f.Error)
		}
	}
	return b.String()
}

// testRefusedByTheRules probes a Service with no endpoint, which
// kube-proxy rejects on every node with an ICMP port unreachable, from two
// prober pods on the pod network (no conntrack there), by its address
// (the loops engine) and by its name (the goroutine engine), and from a
// node (its own rules, in its output path):
// every request refused, each failure saying an ICMP error refused it,
// from the sender the nodes' captures show (requireNodesOwnRejects: the
// pods' gateway of the prober's node, or the node itself). Without reading
// the socket's error queue nothing in the report tells this refusal from a
// pod's reset. (probe attributes nothing, so its failures name no pod in
// any case: that a run puts such a refusal on no pod is the analysis'
// unit test's and checkClean's, for a rollout that meets one.)
func testRefusedByTheRules(t *testing.T, ctx context.Context, c *lab.Client) {
	const name = "no-endpoint"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	svc, err := c.Kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	url := "http://" + svc.Spec.ClusterIP + "/"
	// Every node's kube-proxy holds the Service (and rejects it) before
	// the probe: a refusal from each, not a SYN that met no rule yet.
	for _, n := range netns.Nodes(lab.DefaultNodes) {
		client := clientIn(n.NS, time.Second)
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			_, err := client.Get(url)
			return errors.Is(err, syscall.ECONNREFUSED), nil
		})
		if err != nil {
			t.Fatalf("%s never refused from %s: %v", url, n.Name, err)
		}
	}
	// A node sends the pods' rejects at most one a second per pod after a
	// burst of six (the kernel's ICMP rate limit, net.ipv4.icmp_ratelimit;
	// its own, over loopback, unlimited): beyond that a SYN is dropped
	// unanswered and ends in connect_timeout (a first run at 50/s had 85 of
	// 102 so). The probers' rate stays within it: each refusal a reject.
	// By the Service's name too: CoreDNS resolves it in the pods, and the
	// goroutine engine dials it (the loops probe an address).
	for _, tc := range []struct {
		name, url, rate, duration string
		extra                     []string
	}{{"from two probers", url, "4", "3s", proberArgs}, {"by its name from two probers", "http://" + name + ".default.svc/", "4", "3s", proberArgs},
		{"from a node", url, "50", "2s", nil}} {
		rejects := logRejectionsIfFailed(t)
		if rejects == nil {
			t.Skip("no tcpdump: nothing to hold the refusals to")
		}
		path := filepath.Join(t.TempDir(), "probe.json")
		args := []string{"lab", "exec", "--state-dir", stateDir}
		if tc.extra != nil {
			args = append(args, "--client") // the probers' own client
		}
		args = append(args, "--", filepath.Join(binDir, "rollprobe"), "probe", tc.url, "--rate", tc.rate, "--duration", tc.duration, "--conn", "new",
			"--progress", "0", "--report", path)
		out, err := rollprobe(t, append(args, tc.extra...)...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("%s: probe exited %v, want 1 (every request refused)\n%s", tc.name, err, out)
		}
		rep, err := report.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		validateSchema(t, path)
		if tc.extra != nil && (len(rep.Probers) != 2 || rep.Probers[0].Node == rep.Probers[1].Node) {
			t.Fatalf("%s: probers %+v, want two on two nodes", tc.name, rep.Probers)
		}
		if engine := map[bool]string{true: "goroutines", false: "loops"}[tc.url != url]; rep.Prober.Engine != engine {
			t.Fatalf("%s: the %s engine probed, want the %s", tc.name, rep.Prober.Engine, engine)
		}
		refused := rep.Totals.ByClass[report.ClassRefused]
		if refused == 0 || refused != rep.Totals.Sent || uint64(len(rep.Failures)) != refused {
			t.Fatalf("%s: %v of %d sent, %d kept: want every request refused, each kept\n%s", tc.name, nonZero(rep.Totals.ByClass), rep.Totals.Sent, len(rep.Failures), out)
		}
		for _, f := range rep.Failures {
			// likely_pod is not checked: a probe watches no pods (its
			// runner.Live has no timeline), so it is empty whatever the
			// analysis would make of these refusals.
			if f.RefusedBy != report.RefusedByICMP || f.ICMP == nil || f.ICMP.Name != "port unreachable" {
				t.Fatalf("%s: failure %s refused by %q (icmp %+v): want a port unreachable read", tc.name, f.RequestID, f.RefusedBy, f.ICMP)
			}
		}
		buf := &syncBuffer{}
		_, _ = buf.Write([]byte(out))
		requireNodesOwnRejects(t, &runResult{rep: rep, rejects: rejects, output: buf}, rep.Failures)
		t.Logf("%s: %d refusals, each a rule's ICMP reject as the wire shows (the first from %s)", tc.name, refused, rep.Failures[0].ICMP.From)
	}
	noProberPods(t, ctx, c)
}
