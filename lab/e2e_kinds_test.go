package lab_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// testKinds rolls the samples that are not Deployments: StatefulSets
// (each pod deleted, then created again under its own name) and
// DaemonSets (one pod a node, behind a Local-policy Service).
func testKinds(t *testing.T, ctx context.Context, c *lab.Client) {
	t.Run("a StatefulSet that stops at once drops, each failure on a pod it replaced", func(t *testing.T) {
		ip := ensureWorkload(t, ctx, c, rollout.KindStatefulSet, "naive-sts")
		r := startWorkloadRun(t, nil, rollout.KindStatefulSet, "naive-sts", "http://"+ip+"/", "--conn", "new").wait(t)
		if r.repErr != nil || r.exit != 1 || r.rep.Totals.Failed == 0 {
			t.Fatalf("exit %d (%v), want 1 with failures\n%s", r.exit, r.repErr, r.out())
		}
		ro := r.rep.Rollout
		if ro.Kind != "StatefulSet" || ro.Name != "naive-sts" || ro.Deployment != "" || ro.Status != report.StatusComplete ||
			ro.OldRevision == "" || ro.NewRevision == "" || ro.OldRevision == ro.NewRevision {
			t.Fatalf("rollout section %+v", ro)
		}
		checkReplacedUnderTheirNames(t, r.rep, 3)
		// Every failure is on an old pod: the pod the rollout deleted, not
		// its successor of the same name.
		old := map[string]bool{}
		for _, p := range r.rep.Pods {
			if p.Revision == ro.OldRevision {
				old[p.Pod] = true
			}
		}
		// Save a refusal the probing node's own rules made (kube-proxy's
		// nftables map race, checkCleanBesidesTheNodesOwn): no pod, no
		// conntrack entry, the proxy-rules finding, and held to the wire.
		var nodesOwn []report.Failure
		for _, f := range r.rep.Failures {
			if f.NoConntrackEntry && f.LikelyPod == "" {
				nodesOwn = append(nodesOwn, f)
				continue
			}
			if !old[f.LikelyPod] {
				t.Errorf("%s (%s) put on %q, not a pod of the old revision %s (%s)", f.RequestID, f.Class, f.LikelyPod, ro.OldRevision, f.Context)
			}
		}
		if len(nodesOwn) > 0 {
			requireNodesOwnRejects(t, r, nodesOwn)
			if findingByID(r.rep, analysis.ProxyRulesWithoutEndpoint) == nil {
				t.Errorf("%d refusals by the node's own rules, findings %v: want %s", len(nodesOwn), findingIDs(r.rep), analysis.ProxyRulesWithoutEndpoint)
			}
		}
		if findingByID(r.rep, analysis.StopsBeforePropagation) == nil {
			t.Errorf("findings %v: want the propagation finding", findingIDs(r.rep))
		}
		checkPage(t, r.htmlPath, r.rep) // a lane for each pod of a shared name
	})

	t.Run("a StatefulSet pod's own name goes stale while the pod is recreated", func(t *testing.T) {
		testPodDNSName(t, ctx, c)
	})

	t.Run("a graceful StatefulSet drops nothing while it runs a pod short", func(t *testing.T) {
		ip := ensureWorkload(t, ctx, c, rollout.KindStatefulSet, "graceful-sts")
		r := startWorkloadRun(t, nil, rollout.KindStatefulSet, "graceful-sts", "http://"+ip+"/").wait(t)
		if r.repErr != nil {
			t.Fatalf("exit %d, no report: %v\n%s", r.exit, r.repErr, r.out())
		}
		checkClean(t, r)
		checkReplacedUnderTheirNames(t, r.rep, 3)
		// Splitting each name's responses between the pod and its
		// successor loses none: the pods' counts (responses by the backend
		// header, which every pod of the sample sends) add up to the ok
		// count.
		var served uint64
		for _, p := range r.rep.Pods {
			served += p.Served
		}
		if served != r.rep.Totals.OK {
			t.Errorf("the pods served %d by their header, rollprobe counted %d ok", served, r.rep.Totals.OK)
		}
	})

	t.Run("a graceful StatefulSet scaled in drops nothing, its highest ordinal removed", func(t *testing.T) {
		ip := ensureWorkload(t, ctx, c, rollout.KindStatefulSet, "graceful-sts")
		t.Cleanup(func() { // the sample's own replicas again, for later tests
			patch := []byte(`{"spec":{"replicas":3}}`)
			if _, err := c.Kube.AppsV1().StatefulSets("default").Patch(context.Background(), "graceful-sts", types.MergePatchType, patch, metav1.PatchOptions{}, "scale"); err != nil {
				t.Errorf("scaling graceful-sts back: %v", err)
			}
			ensureWorkload(t, ctx, c, rollout.KindStatefulSet, "graceful-sts")
		})
		r := startWorkloadRun(t, nil, rollout.KindStatefulSet, "graceful-sts", "http://"+ip+"/", "--scale", "2").wait(t)
		if r.repErr != nil {
			t.Fatalf("exit %d, no report: %v\n%s", r.exit, r.repErr, r.out())
		}
		checkClean(t, r)
		// The StatefulSet controller removes the highest ordinal first.
		if removed := checkScaled(t, c, r, 3, 2); len(removed) != 1 || !removed["graceful-sts-2"] {
			t.Errorf("removed %v, want graceful-sts-2", removed)
		}
		t.Logf("exit %d, %d failed of %d", r.exit, r.rep.Totals.Failed, r.rep.Totals.Sent)
	})

	t.Run("a StatefulSet of one replica leaves its Service with nothing to serve", func(t *testing.T) {
		ip := ensureWorkload(t, ctx, c, rollout.KindStatefulSet, "single-sts")
		r := startWorkloadRun(t, nil, rollout.KindStatefulSet, "single-sts", "http://"+ip+"/", "--conn", "new").wait(t)
		if r.repErr != nil || r.exit != 1 || r.rep.Totals.Failed == 0 {
			t.Fatalf("exit %d (%v), want 1 with failures\n%s", r.exit, r.repErr, r.out())
		}
		gap := findingByID(r.rep, analysis.NoServingEndpoint)
		if gap == nil {
			t.Fatalf("findings %v: want %s", findingIDs(r.rep), analysis.NoServingEndpoint)
		}
		// The referee is the timeline's own EndpointSlice events: from the
		// old endpoint's last serving to the new one's first, nothing
		// served; the finding says when.
		var stopped, again time.Time
		for _, e := range r.rep.Timeline {
			if !e.Kind.IsEndpoint() {
				continue
			}
			switch {
			case stopped.IsZero() && (e.Kind == report.EndpointRemoved || (!e.Serving && e.Terminating)):
				stopped = e.At
			case !stopped.IsZero() && again.IsZero() && e.Serving:
				again = e.At
			}
		}
		// Or earlier, by the kubelet's own time: the old pod's Ready
		// condition turned false before the report of it (by more than
		// the second its time is rounded to), and it served no more.
		for _, e := range r.rep.Timeline {
			if e.Kind == report.PodUnready && e.Server != nil && e.IP != "" && !stopped.IsZero() {
				if by := e.Server.Add(time.Second); by.Before(e.At) && by.Before(stopped) {
					stopped = by
				}
			}
		}
		want := fmt.Sprintf("had no serving endpoint from %+.2fs to %+.2fs", stopped.Sub(r.rep.StartedAt).Seconds(), again.Sub(r.rep.StartedAt).Seconds())
		if stopped.IsZero() || again.IsZero() || !strings.Contains(strings.Join(gap.Evidence, "\n"), want) {
			t.Errorf("evidence lacks %q:\n%s", want, strings.Join(gap.Evidence, "\n"))
		}
		if zero := findingByID(r.rep, "rollout-can-leave-no-ready-pod"); zero == nil || zero.Source != "doctor" {
			t.Errorf("the doctor's check did not say it before: %v", findingIDs(r.rep))
		}
		t.Logf("single-sts: %d of %d failed %v; %s", r.rep.Totals.Failed, r.rep.Totals.Sent, nonZero(r.rep.Totals.ByClass), strings.Join(gap.Evidence, " | "))
	})

	node := firstNode()
	for _, tc := range []struct {
		sample, why string
		nodePort    int
		wantDrops   bool
	}{
		{"daemonset-local", "without surge a node's pod goes before its replacement is ready", 30082, true},
		{"daemonset-surge", "with surge the node's new pod is ready before the old one goes", 30083, false},
	} {
		t.Run(fmt.Sprintf("a DaemonSet behind a Local policy: %s", tc.why), func(t *testing.T) {
			ensureWorkload(t, ctx, c, rollout.KindDaemonSet, tc.sample)
			target := fmt.Sprintf("http://%s:%d/", node.IP, tc.nodePort)
			if err := waitServingFrom(ctx, netns.LabNetNS, target); err != nil {
				t.Fatal(err)
			}
			// Every node's SYNs: the referee of which pods the run's
			// traffic reached.
			nodeSYNs := map[string]*capture.Capture{}
			if err := capture.Available(); err == nil {
				for _, n := range netns.Nodes(lab.DefaultNodes) {
					nodeSYNs[n.Name] = capture.Start(t, n.NS, "any", capture.SYNFilter)
				}
			} else {
				t.Logf("which pods the traffic reached is not held to the wire: %v", err)
			}
			// A 3 s baseline, not the tests' usual 2 s: the shutdown
			// coverage judges only pods probed at least 2 s before their
			// deletion (analysis.exercisedLeast), and the DaemonSet
			// deletes its first pod at once, about 2.0 s into a 2 s
			// baseline (+2.02 s here): on the knife-edge, a CI run's
			// first deletion fell under it and the finding this test
			// requires was not made.
			r := startWorkloadRun(t, []string{"--client"}, rollout.KindDaemonSet, tc.sample, target, "--conn", "new", "--settle", "3s", "--baseline", "3s").wait(t)
			if r.repErr != nil {
				t.Fatalf("exit %d: %v\n%s", r.exit, r.repErr, r.out())
			}
			ro := r.rep.Rollout
			if ro.Kind != "DaemonSet" || ro.Name != tc.sample || ro.Status != report.StatusComplete || ro.Entry == nil || ro.Entry.Node != node.Name {
				t.Fatalf("rollout section %+v (entry %+v)", ro, ro.Entry)
			}
			checkShutdownsMissedOffTheEntry(t, r.rep, node, nodeSYNs)
			t.Logf("%s: exit %d, %d of %d failed %v", tc.sample, r.exit, r.rep.Totals.Failed, r.rep.Totals.Sent, nonZero(r.rep.Totals.ByClass))
			zero := findingByID(r.rep, "rollout-can-leave-no-ready-pod")
			if !tc.wantDrops {
				// Nothing dropped by the rollout; a refusal the entry
				// node's own rules made, held to the wire, is kube-proxy's
				// (a warm CI run: 1 in 4,086, reset by the node's stack at
				// its node port while the API listed 4 serving endpoints).
				checkClean(t, r)
				if len(r.rep.NodeGaps) != 0 || zero != nil {
					t.Fatalf("gaps %+v, static finding %v: want nothing dropped\n%s", r.rep.NodeGaps, zero, r.out())
				}
				return
			}
			if r.exit != 1 || r.rep.Totals.Failed == 0 {
				t.Fatalf("exit %d with %d failed: the node's traffic must drop while it has no local pod\n%s", r.exit, r.rep.Totals.Failed, r.out())
			}
			local := findingByID(r.rep, analysis.LocalPolicyNoLocalEndpoint)
			if local == nil || len(r.rep.NodeGaps) == 0 {
				t.Fatalf("no local-policy finding (gaps %+v): %v", r.rep.NodeGaps, findingIDs(r.rep))
			}
			inGaps := 0
			for _, g := range r.rep.NodeGaps {
				inGaps += g.Failed
			}
			if inGaps != len(r.rep.Failures) {
				t.Errorf("%d of %d kept failures fall in the node's gaps", inGaps, len(r.rep.Failures))
			}
			// The doctor's static check names the cause before any traffic:
			// no surge, under a Local policy.
			if zero == nil || !strings.Contains(strings.Join(zero.Evidence, " "), "maxSurge 0") {
				t.Errorf("static finding %+v: want the DaemonSet's missing surge named", zero)
			}
		})
	}
	t.Run("refusals the entry node's own stack makes beside a terminating pod that left its rules are put on no pod", func(t *testing.T) {
		testNodesOwnRefusalBesideATerminatingPod(t, ctx, c, node, 4*time.Second, " was terminating but had left the proxy's rules before it")
	})
	t.Run("refusals the entry node's own stack makes beside a terminating pod in its preStop sleep are put on no pod", func(t *testing.T) {
		testNodesOwnRefusalBesideATerminatingPod(t, ctx, c, node, 0, " was terminating but still listening then")
	})
}

// checkShutdownsMissedOffTheEntry: probing entry's NodePort under a Local
// policy reaches only entry's pods, so the run must say that the old pods
// on the other nodes went unexercised (analysis.ShutdownNotExercised), and
// name no pod on entry. The nodes' captures, where given, are the referee:
// no SYN but the node's own (the kubelet's probes, from its pod bridge)
// reached a pod named before its deletion, and some SYN of the run reached
// every old pod not named.
func checkShutdownsMissedOffTheEntry(t *testing.T, rep *report.Report, entry netns.Node, nodeSYNs map[string]*capture.Capture) {
	t.Helper()
	var want []string
	for _, p := range rep.Pods {
		if p.DeletedAt != nil && p.Node != "" && p.Node != entry.Name {
			want = append(want, p.Pod)
		}
	}
	f := findingByID(rep, analysis.ShutdownNotExercised)
	if len(want) == 0 { // every old pod ran on entry
		if f != nil {
			t.Errorf("every old pod ran on %s, yet %s: %v", entry.Name, f.ID, f.Evidence)
		}
		return
	}
	if f == nil {
		// The coverage judges a pod only when it had been ready 2 s of
		// the run before its deletion, stayed ready and in the Service
		// until it, and some response named a pod then: which of these
		// failed is in the timeline and the series (a rehearsal of
		// 25de262 missed the finding once and logged nothing more).
		logPodTimeline(t, rep)
		for _, row := range rep.Series {
			t.Logf("second %d: sent %d, failed %d, backends %v, max schedule lag %.0f ms", row.T, row.Sent, row.Failed, row.Backends, row.MaxLagMS)
		}
		t.Fatalf("no %s finding: the old pods %v on other nodes than %s cannot have been reached (%v)", analysis.ShutdownNotExercised, want, entry.Name, findingIDs(rep))
	}
	if got := slices.Sorted(slices.Values(f.Pods)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("%s names %v, want the old pods off %s: %v (%v)", f.ID, got, entry.Name, want, f.Evidence)
	}
	if ev := strings.Join(f.Evidence, " | "); !strings.Contains(ev, "enters "+entry.Name+" at a NodePort under externalTrafficPolicy: Local") {
		t.Errorf("%s does not name the Local-policy entry: %s", f.ID, ev)
	}
	ipOf := map[string]string{}
	for _, e := range rep.Timeline {
		if e.Pod != "" && e.IP != "" && ipOf[e.Pod] == "" {
			ipOf[e.Pod] = e.IP
		}
	}
	for _, n := range netns.Nodes(lab.DefaultNodes) {
		c := nodeSYNs[n.Name]
		if c == nil {
			continue
		}
		syns := c.SYNs()
		for _, p := range rep.Pods {
			if p.Node != n.Name || p.DeletedAt == nil || ipOf[p.Pod] == "" {
				continue
			}
			reached := 0
			for _, s := range syns {
				if s.Dst.Addr().String() == ipOf[p.Pod] && s.Src.Addr().String() != n.PodGateway && !s.At.Before(rep.StartedAt) && s.At.Before(*p.DeletedAt) {
					reached++
				}
			}
			named := slices.Contains(f.Pods, p.Pod)
			t.Logf("%s on %s: named %v; %d SYNs from off its node before its deletion", p.Pod, n.Name, named, reached)
			switch {
			case named && reached > 0:
				t.Errorf("%s named %s (%s), but %d SYNs from off its node reached it before its deletion on %s's wire", f.ID, p.Pod, ipOf[p.Pod], reached, n.Name)
			case !named && reached == 0:
				t.Errorf("%s left %s (%s) out, but no SYN of the run reached it before its deletion on %s's wire", f.ID, p.Pod, ipOf[p.Pod], n.Name)
			}
		}
	}
}

// testNodesOwnRefusalBesideATerminatingPod makes, on purpose, what a warm
// CI run and a rehearsal met by chance (kube-proxy's nftables race, 1 in
// 4,101): a refusal at the entry node's NodePort made by the node's own
// stack while the node's old pod was terminating beside its ready
// replacement; the timeline alone had blamed it "for certain" on the old
// pod. A while after the old pod's deletion (after), two SYNs to the node
// port half a second apart are left untracked on the node (a rule at raw
// priority, limited to a packet every half second, deleted after three
// quarters of one), so no rule rewrites them and the node's stack, with
// no socket there, resets them. The capture holds the refusals to the
// node's own resets (checkClean); the report must name no pod for
// either, and say for each why the old pod did not refuse it (want, in
// its context after the pod's name).
//
// Four seconds after the deletion (its replacement answering every fresh
// connection since), the run's traffic shows the old pod had left the
// rules (analysis leftTheRules): without that evidence the old pod would
// be named, as in the CI run, and without lastMaybeOf the second refusal,
// within a second of the first, would still be (no whole second of fresh
// connections between them). At once after it, in the seconds the old
// pod still answered (the rehearsal's case, 1.1 s after), only its
// preStop sleep of 3 s shows it had not been told to stop and was still
// listening (analysis stillListening).
func testNodesOwnRefusalBesideATerminatingPod(t *testing.T, ctx context.Context, c *lab.Client, node netns.Node, after time.Duration, want string) {
	const sample, nodePort = "daemonset-surge", 30083
	ensureWorkload(t, ctx, c, rollout.KindDaemonSet, sample)
	target := fmt.Sprintf("http://%s:%d/", node.IP, nodePort)
	if err := waitServingFrom(ctx, netns.LabNetNS, target); err != nil {
		t.Fatal(err)
	}
	onNode := metav1.ListOptions{LabelSelector: "app=" + sample, FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()}
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, onNode)
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s on %s: %v (%v)", sample, node.Name, pods, err)
	}
	old := pods.Items[0].Name
	run := startWorkloadRun(t, []string{"--client"}, rollout.KindDaemonSet, sample, target, "--conn", "new", "--settle", "3s")
	// The old pod's deletion, then after: 4 s, it has left the node's
	// rules (its replacement was ready first) and still terminates (a 3 s
	// preStop, then a 3 s drain); 0, it is in its preStop sleep.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Kube.CoreV1().Pods("default").Get(ctx, old, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("the old pod %s on %s was not deleted: %v\n%s", old, node.Name, err, run.output.String())
	}
	time.Sleep(after)
	if p, err := c.Kube.CoreV1().Pods("default").Get(ctx, old, metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("the old pod %s is gone %s after its deletion (%v): nothing to test", old, after, err)
	}
	const table = "rollprobe_test_untrack"
	rules := fmt.Sprintf(`table ip %s {
  chain pre {
    type filter hook prerouting priority raw; policy accept;
    tcp dport %d tcp flags & (syn|ack) == syn limit rate 2/second burst 1 packets counter notrack
  }
}
`, table, nodePort)
	nft := func(stdin string, args ...string) ([]byte, error) {
		cmd := exec.Command("nsenter", append([]string{"--net=" + netns.NSPath(node.NS), "nft"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		return cmd.CombinedOutput()
	}
	if out, err := nft(rules, "-f", "-"); err != nil {
		t.Fatalf("nft on %s: %v: %s", node.Name, err, out)
	}
	deleted := false
	drop := func() {
		if !deleted {
			if out, err := nft("", "delete", "table", "ip", table); err != nil {
				t.Errorf("nft delete on %s: %v: %s", node.Name, err, out)
			}
			deleted = true
		}
	}
	t.Cleanup(drop)
	time.Sleep(750 * time.Millisecond) // a SYN at once, the next half a second later
	counted, _ := nft("", "list", "table", "ip", table)
	drop()
	if !strings.Contains(string(counted), "counter packets 2 ") {
		t.Fatalf("the rule did not untrack two SYNs in 0.75 s at 200 req/s:\n%s", counted)
	}
	r := run.wait(t)
	if r.repErr != nil {
		t.Fatalf("exit %d: %v\n%s", r.exit, r.repErr, r.out())
	}
	checkClean(t, r) // each failure the node's own reset on the wire, no pod named
	if r.rep.Totals.Failed < 2 {
		t.Fatalf("%d failed: the two untracked SYNs were not both refused\n%s", r.rep.Totals.Failed, r.out())
	}
	why := old + want
	named := 0
	for _, f := range r.rep.Failures {
		if strings.Contains(f.Context, why) {
			named++
		}
	}
	if named < 2 {
		t.Errorf("%d of %d failures' contexts say %q, want both untracked SYNs': the old pod was excluded for another reason, or not at all\n%s", named, len(r.rep.Failures), why, r.out())
	}
	u := findingByID(r.rep, analysis.Unexplained)
	if u == nil || !strings.Contains(strings.Join(u.Evidence, "\n"), why) {
		t.Errorf("finding %+v: want the refusal unexplained, saying %q", u, why)
	}
	t.Logf("%s: %d of %d failed %v; %d said %q", sample, r.rep.Totals.Failed, r.rep.Totals.Sent, nonZero(r.rep.Totals.ByClass), named, why)
}

// testDrain drains the second node under rollprobe run: the drain-web
// sample (4 pods spread over the nodes, a budget of one unavailable)
// loses its pods there one at a time, the budget refusing the second
// eviction until the first pod's replacement is ready, and drops nothing;
// the node stays cordoned unless --uncordon. Every pod on the node is
// evicted, whatever owns it: this runs after the tests that need pods on
// both nodes.
func testDrain(t *testing.T, ctx context.Context, c *lab.Client) {
	node := netns.Nodes(lab.DefaultNodes)[1]
	ip := ensureWorkload(t, ctx, c, rollout.KindDeployment, "drain-web")
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=drain-web"})
	if err != nil {
		t.Fatal(err)
	}
	onNode := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == node.Name {
			onNode++
		}
	}
	if onNode < 2 {
		t.Fatalf("%d of drain-web's pods on %s: the test needs 2 there (the spread put them elsewhere)", onNode, node.Name)
	}
	uncordonAtEnd(t, c, node.Name)
	r := startRunOn(t, nil, "drain-web", "http://"+ip+"/", "--drain", node.Name, "--conn", "new").wait(t)
	if r.repErr != nil {
		t.Fatalf("exit %d, no report: %v\n%s", r.exit, r.repErr, r.out())
	}
	checkClean(t, r)
	rep := r.rep
	if rep.Rollout.Status != report.StatusComplete || rep.Rollout.OldRevision != rep.Rollout.NewRevision || rep.Rollout.Change != report.ChangeDrain {
		t.Errorf("rollout section %+v: want complete, a drain, on one revision (a drain changes none)", rep.Rollout)
	}
	evicted, refused := map[string]bool{}, 0
	for _, e := range rep.Timeline {
		switch e.Kind {
		case report.PodEvicted:
			evicted[e.Pod] = true
		case report.EvictionRefused:
			if strings.HasPrefix(e.Pod, "drain-web-") {
				refused++
			}
		}
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node.Name && !evicted[p.Name] {
			t.Errorf("drain-web's pod %s on %s: no eviction in the timeline (%v)", p.Name, node.Name, evicted)
		}
	}
	if refused == 0 {
		t.Errorf("the budget (maxUnavailable 1) refused no eviction of drain-web's %d pods on %s", onNode, node.Name)
	}
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable {
		t.Errorf("node %s after the drain: unschedulable %v (%v): kubectl drain leaves it cordoned", node.Name, n.Spec.Unschedulable, err)
	}
	after, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=drain-web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range after.Items {
		if p.Spec.NodeName == node.Name && p.DeletionTimestamp == nil {
			t.Errorf("pod %s is still on the drained node", p.Name)
		}
	}
	t.Logf("drained %s: %d of drain-web's pods evicted, %d evictions refused by the budget first; %d requests, none failed", node.Name, onNode, refused, rep.Totals.Sent)
}

// checkReplacedUnderTheirNames: a StatefulSet's rollout replaced each of
// its n pods under the pod's own name, and the report tells the two
// apart: NAME (the old revision) and NAME#2 (the new one).
func checkReplacedUnderTheirNames(t *testing.T, rep *report.Report, n int) {
	t.Helper()
	revs := map[string]string{}
	for _, p := range rep.Pods {
		revs[p.Pod] = p.Revision
	}
	for i := range n {
		name := fmt.Sprintf("%s-%d", rep.Rollout.Name, i)
		if revs[name] != rep.Rollout.OldRevision || revs[name+"#2"] != rep.Rollout.NewRevision {
			t.Errorf("pods %v: want %s at revision %s and %s#2 at %s", revs, name, rep.Rollout.OldRevision, name, rep.Rollout.NewRevision)
		}
	}
}

// ensureWorkload applies a sample of any kind unless it exists, waits until
// it is rolled out as kubectl rollout status judges it (the rollout
// package's viewers, pinned to kubectl's) with as many pods as it wants,
// and returns its Service's ClusterIP.
func ensureWorkload(t *testing.T, ctx context.Context, c *lab.Client, kind rollout.Kind, sample string) string {
	t.Helper()
	if kind == rollout.KindDeployment {
		return ensureSample(t, ctx, c, sample)
	}
	ref := rollout.Ref{Kind: kind, Namespace: "default", Name: sample}
	kube := rollout.WithDynamic(c.Kube, c.Dynamic) // an Argo Rollout is read through the dynamic client
	if _, err := rollout.GetWorkload(ctx, kube, ref); err != nil {
		apply(t, sample)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		w, err := rollout.GetWorkload(ctx, kube, ref)
		if err != nil || !w.Progress().Done {
			return false, nil
		}
		desired, _, _, _ := w.Counts()
		pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + sample})
		return err == nil && desired > 0 && len(pods.Items) == int(desired), nil
	})
	if err != nil {
		t.Fatalf("%s did not roll out: %v", ref, err)
	}
	svc, err := c.Kube.CoreV1().Services("default").Get(ctx, sample, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type == "ClusterIP" {
		waitServing(t, ctx, svc.Spec.ClusterIP)
		waitEveryEndpointServes(t, ctx, c, sample)
	}
	return svc.Spec.ClusterIP
}

// testDrainBlocked drains the other node while drain-web's budget allows
// no disruption (maxUnavailable 0): the API server refuses every eviction
// (429), the drain waits until --timeout, and the run says why: exit 3
// (the rollout timed out), the budget's finding naming the pods held. The
// referee is the API server's own answer: the pods are still on the node.
func testDrainBlocked(t *testing.T, ctx context.Context, c *lab.Client) {
	node := netns.Nodes(lab.DefaultNodes)[0]
	ip := ensureWorkload(t, ctx, c, rollout.KindDeployment, "drain-web")
	pdbs := c.Kube.PolicyV1().PodDisruptionBudgets("default")
	patch := func(maxUnavailable int) {
		body := fmt.Sprintf(`{"spec":{"maxUnavailable":%d}}`, maxUnavailable)
		if _, err := pdbs.Patch(context.Background(), "drain-web", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch(0)
	uncordonAtEnd(t, c, node.Name)
	t.Cleanup(func() { patch(1) }) // before the uncordon (cleanups run last first)
	// The drain evicts every pod on the node: another workload's pod whose
	// own budget refuses at that moment is held too (graceful-sts's, while
	// one of its pods was still starting after the previous drain, when the
	// other groups' samples still ran here; deleteAllBut deletes them now).
	var held []string
	onNode := map[string]bool{}
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node.Name {
			onNode[p.Name] = true
			if p.Labels["app"] == "drain-web" {
				held = append(held, p.Name)
			}
		}
	}
	if len(held) == 0 {
		t.Fatalf("no drain-web pod on %s", node.Name)
	}
	run := startRunOn(t, nil, "drain-web", "http://"+ip+"/", "--drain", node.Name, "--timeout", "20s")
	// Another hand deletes one held pod just after its first refusal: the
	// drain's next ask, 5 s later, finds it deleting and is accepted
	// whatever the budget (the Eviction API's way with a deleting pod):
	// overtaken, not let go by the budget, and not held to the end.
	refusal := regexp.MustCompile(`eviction of default/(drain-web-[a-z0-9]+-[a-z0-9]+) refused`)
	run.waitFor(t, "drain: eviction of default/drain-web-")
	m := refusal.FindStringSubmatch(run.output.String())
	if m == nil {
		t.Fatalf("no refusal of a drain-web pod in the run's output\n%s", run.output.String())
	}
	deleted := m[1]
	if err := c.Kube.CoreV1().Pods("default").Delete(ctx, deleted, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held = slices.DeleteFunc(held, func(n string) bool { return n == deleted })
	r := run.wait(t)
	if r.repErr != nil || r.exit != 3 {
		t.Fatalf("exit %d (%v), want 3 (the drain timed out)\n%s", r.exit, r.repErr, r.out())
	}
	var fate []report.EventKind
	for _, e := range r.rep.Timeline {
		if e.Pod == deleted && e.Kind.IsDrain() && e.Kind != report.EvictionRefused {
			fate = append(fate, e.Kind)
		}
	}
	if !slices.Equal(fate, []report.EventKind{report.EvictionOvertaken}) {
		t.Errorf("%s, deleted by the test after its first refusal: drain events %v, want eviction_overtaken alone\n%s", deleted, fate, evidenceFor(r.rep, deleted))
	}
	f := findingByID(r.rep, "drain-blocked-by-pod-disruption-budget")
	if f == nil {
		t.Fatalf("findings %v: want the blocked drain's", findingIDs(r.rep))
	}
	if slices.Contains(f.Pods, deleted) || !strings.Contains(strings.Join(f.Evidence, "\n"), deleted+"'s eviction was refused from") ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "went another way (eviction_overtaken at") {
		t.Errorf("the finding names %v, with evidence %q: want %s left out as gone another way", f.Pods, f.Evidence, deleted)
	}
	if findingByID(r.rep, "pod-disruption-budget-allows-no-eviction") == nil {
		t.Errorf("findings %v: the doctor's check did not name the budget before the drain", findingIDs(r.rep))
	}
	for _, name := range held {
		if !slices.Contains(f.Pods, name) {
			t.Errorf("the finding names %v, not drain-web's %s on %s", f.Pods, name, node.Name)
		}
	}
	for _, name := range f.Pods {
		if !onNode[name] {
			t.Errorf("the finding names %s, which was not on %s", name, node.Name)
		}
	}
	for _, name := range f.Pods {
		p, err := c.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			touched := "(the pod could not be read)"
			if err == nil {
				touched = whoTouched(ctx, c, p)
			}
			t.Errorf("pod %s after the blocked drain: %v (deleting %v): the budget should have kept it\n%s\n%s", name, err, p.DeletionTimestamp,
				touched, evidenceFor(r.rep, name))
		}
	}
	t.Logf("drain of %s blocked: %s; %s", node.Name, f.Title, f.Evidence[0])
	t.Logf("deleted by the test while refused: %s", evidenceFor(r.rep, deleted))
}

// whoTouched is what the cluster's own events say of a pod, its
// ReplicaSet and that one's owner (a Deployment scaling its old
// ReplicaSet down deletes pods on its own schedule): for a test's failure
// message, when something other than the test removed a pod.
func whoTouched(ctx context.Context, c *lab.Client, p *corev1.Pod) string {
	names := []string{p.Name}
	if o := metav1.GetControllerOf(p); o != nil {
		names = append(names, o.Name)
		if rs, err := c.Kube.AppsV1().ReplicaSets(p.Namespace).Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
			if d := metav1.GetControllerOf(rs); d != nil {
				names = append(names, d.Name)
			}
		}
	}
	var lines []string
	for _, n := range names {
		list, err := c.Kube.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", n).String()})
		if err != nil {
			lines = append(lines, fmt.Sprintf("events of %s: %v", n, err))
			continue
		}
		for _, e := range list.Items {
			at := e.LastTimestamp.Time
			if at.IsZero() {
				at = e.EventTime.Time // events.k8s.io writers (the scheduler) set only this
			}
			lines = append(lines, fmt.Sprintf("%s %s/%s %s: %s (%s, x%d)", at.UTC().Format("15:04:05.000"),
				e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.ReportingController+e.Source.Component, max(e.Count, 1)))
		}
	}
	slices.Sort(lines)
	return "events of the pod, its ReplicaSet and that one's owner:\n  " + strings.Join(lines, "\n  ")
}

// evidenceFor is the run's timeline events naming pod.
func evidenceFor(rep *report.Report, pod string) string {
	var lines []string
	for _, e := range rep.Timeline {
		if e.Pod == pod {
			lines = append(lines, fmt.Sprintf("%+.2fs %s %s", e.At.Sub(rep.StartedAt).Seconds(), e.Kind, e.Detail))
		}
	}
	return fmt.Sprintf("the run's timeline (ended %s) for %s:\n  %s", rep.EndedAt.UTC().Format("15:04:05.0"), pod, strings.Join(lines, "\n  "))
}

// testPodDNSName probes one StatefulSet pod by its own name through the
// headless Service (resolved by the lab's CoreDNS on the node, a name per
// new connection) while the StatefulSet rolls, and holds every failure to
// the DNS answers a packet capture on the node saw (decoded by tshark): a
// failure to resolve came while CoreDNS answered "no such name" for the
// name and never an address; a failed connection went to the address the
// last answer before it gave, the deleted pod's, not its successor's. The
// finding claims every failure, with the negative-cache time the answers
// carried.
func testPodDNSName(t *testing.T, ctx context.Context, c *lab.Client) {
	if err := capture.Available(); err != nil {
		skipOrFail(t, "%v", err)
	}
	if err := capture.TsharkAvailable(); err != nil {
		skipOrFail(t, "%v", err)
	}
	ensureWorkload(t, ctx, c, rollout.KindStatefulSet, "naive-sts")
	const host = "naive-sts-0.naive-sts-pods.default.svc"
	wire := capture.Start(t, firstNode().NS, "any", "udp port 53")
	// Settled long enough for the name to resolve again after the pod's
	// successor is ready (CoreDNS caches "no such name" for 5 s).
	r := startWorkloadRun(t, nil, rollout.KindStatefulSet, "naive-sts", "http://"+host+":8080/", "--conn", "new", "--settle", "8s").wait(t)
	if r.repErr != nil || r.exit != 1 || r.rep.Totals.Failed == 0 {
		t.Fatalf("exit %d (%v), want 1 with failures\n%s", r.exit, r.repErr, r.out())
	}
	// answers are those for the name itself; bare those for the name as
	// given, which Go's resolver asks last of every lookup, after the
	// search list's names (the lab's CoreDNS, with no upstream, answers
	// SERVFAIL: the failures' "server misbehaving"); search those for any
	// of the search list's names, the name itself among them.
	var answers, bare, search []capture.DNSAnswer
	negTTL := map[int]int{}
	for _, a := range wire.DNS() {
		switch {
		case a.Name == host:
			bare = append(bare, a)
		case strings.HasPrefix(a.Name, host+"."):
			search = append(search, a)
			if a.Name == host+".cluster.local" {
				answers = append(answers, a)
				if a.Rcode == 3 {
					negTTL[a.NegativeTTL]++
				}
			}
		}
	}
	// The pod's addresses by revision: the deleted one's and its successor's.
	// Only the pod's own events carry its revision: an endpoint event names
	// the pod and its address but no revision, and one that came after the
	// pod's last event must not blank it (seen in a warm CI of 9e07e87: every
	// address mapped to "").
	ips := map[string]string{}
	for _, e := range r.rep.Timeline {
		if e.Pod == "naive-sts-0" && e.IP != "" && e.Revision != "" {
			ips[e.IP] = e.Revision
		}
	}
	oldRev := r.rep.Rollout.OldRevision
	byClass := map[string]int{}
	var unanswered []report.Failure // dns failures with no answer for the name in the capture
	for _, f := range r.rep.Failures {
		byClass[f.Class]++
		switch f.Class {
		case report.ClassDNS:
			// Go's resolver shares a lookup of a name among the requests
			// that ask for it while it is in flight (singleflight): a
			// request that joins one sends no query of its own and gets
			// its answers (seen on the wire: a 0.1 ms lookup inside
			// another's 3.5 ms of queries). Lookups of the name are
			// therefore one after another on the wire, each from the
			// search list's first name to the bare name. The one that
			// decided a failure ended (its last bare-name answer) before
			// the failure did; its answer for the name itself, the last
			// before that, must say "no such name". The request joined it,
			// or began it, before the next lookup's first answer: had it
			// asked later, it would have been in that one. No bound on how
			// long the lookup took: under load its goroutine may stall
			// between two steps (seen in a cold CI run: 120 ms or more between the
			// name's answer and the bare name's query, and 23 requests that
			// joined it meanwhile). And no address came while it was
			// looked up. (A warm CI of dc713d5 failed on one dns failure
			// with one address answer inside its span. If such an answer
			// came after the lookup that decided the failure had ended,
			// while the request's goroutine had yet to record its end, it
			// would say nothing about the failure; the span would then end
			// at that lookup. The log kept no times to tell: the message
			// now gives each such answer's time against the lookup's end.)
			// An address answer before the lookup that decided the failure
			// began ended an earlier lookup (Go's resolver stops at the
			// first name with addresses, and lookups of one name follow
			// one another): it counts against the failure only after the
			// previous lookup's end (seen in a warm CI of a05f7b0: an
			// address answer 0.3 ms after the request's recorded start and
			// 5.5 ms before its lookup's "no such name" for the name: the
			// request reached the resolver after that lookup had returned).
			var addr int
			var last, decided, next, prevEnd *capture.DNSAnswer
			for i, a := range bare {
				if !a.At.After(f.End.Add(time.Millisecond)) && (last == nil || !a.At.Before(last.At)) {
					last = &bare[i]
				}
			}
			if last != nil {
				for i, a := range answers {
					if !a.At.After(last.At) && (decided == nil || !a.At.Before(decided.At)) {
						decided = &answers[i]
					}
				}
				for i, a := range search {
					if a.At.After(last.At) && (next == nil || a.At.Before(next.At)) {
						next = &search[i]
					}
				}
			}
			if decided != nil {
				// The previous lookup's end: its last bare-name answer, or
				// the address answer that ended it.
				for _, list := range [][]capture.DNSAnswer{bare, answers} {
					for i, a := range list {
						if a.At.Before(decided.At) && (list[i].Name == host || len(a.A) > 0) && (prevEnd == nil || a.At.After(prevEnd.At)) {
							prevEnd = &list[i]
						}
					}
				}
			}
			var addrAt []string // each address answer's time after the lookup's last answer
			for _, a := range answers {
				if prevEnd != nil && !a.At.After(prevEnd.At) {
					continue // an earlier lookup's
				}
				if !a.At.Before(f.Start.Add(-time.Millisecond)) && !a.At.After(f.End.Add(time.Millisecond)) && len(a.A) > 0 {
					addr++
					if last != nil {
						addrAt = append(addrAt, fmt.Sprintf("%+.3fms", float64(a.At.Sub(last.At).Microseconds())/1000))
					}
				}
			}
			// The request began before the next lookup did. (Not "before
			// its lookup's last answer": the process reads an answer
			// after the wire shows it, and a request that joins the
			// lookup meanwhile gets its result at once; seen under load:
			// a 0.0 ms failure 3.5 ms after its lookup's last answer on
			// the wire.)
			joined := next == nil || !f.Start.After(next.At.Add(time.Millisecond))
			nx := decided != nil && decided.Rcode == 3 && joined
			if !nx || addr > 0 {
				t.Errorf("%s (dns, %+.3fs to %+.3fs): its lookup's last answer %+v, that lookup's answer for the name %+v, the previous lookup's end %+v, the next lookup's first answer %+v (no such name, joined before the next lookup: %v), %d address answers while it was looked up (after its lookup's last answer by %v)",
					f.RequestID, f.Start.Sub(r.rep.StartedAt).Seconds(), f.End.Sub(r.rep.StartedAt).Seconds(), last, decided, prevEnd, next, nx, addr, addrAt)
				if !nx && addr == 0 {
					unanswered = append(unanswered, f)
				}
			}
		default:
			remote, err := netip.ParseAddrPort(f.RemoteAddr)
			var last *capture.DNSAnswer
			for i, a := range answers {
				if a.Rcode == 0 && len(a.A) > 0 && !a.At.After(f.Start) {
					last = &answers[i]
				}
			}
			if err != nil || last == nil || !slices.Contains(last.A, remote.Addr()) || ips[remote.Addr().String()] != oldRev {
				t.Errorf("%s (%s) to %s: the last answer before it %+v; the pod's addresses %v (old revision %s)", f.RequestID, f.Class, f.RemoteAddr, last, ips, oldRev)
			}
		}
	}
	// Evidence for a failure no captured "no such name" decided (before
	// lookups were known to be shared, seen in CI: 39 of 1002, 52 of
	// 1001): did tcpdump drop packets, how long did the lookup take and
	// fail how, and where is the nearest answer.
	if len(unanswered) > 0 {
		t.Logf("%d dns failures no captured answer decided; tcpdump dropped %d packets", len(unanswered), wire.Dropped())
		// Every DNS failure's error, by text: Go's resolver tries the
		// search list's names and then the name itself, and says the
		// error for the name itself ("server misbehaving" is a SERVFAIL
		// or another rcode than "no such name").
		texts := map[string]int{}
		for _, f := range r.rep.Failures {
			if f.Class == report.ClassDNS {
				texts[f.Error]++
			}
		}
		t.Logf("the dns failures' errors: %v", texts)
		// The whole exchange on the wire around the first: every name
		// and type asked, every rcode (tcpdump's own decoding).
		first := unanswered[0]
		from, to := float64(first.Start.Add(-5*time.Millisecond).UnixNano())/1e9, float64(first.End.Add(5*time.Millisecond).UnixNano())/1e9
		var around []string
		for _, line := range strings.Split(wire.Text(math.MaxInt), "\n") {
			at, _, _ := strings.Cut(line, " ")
			if v, err := strconv.ParseFloat(at, 64); err == nil && v >= from && v <= to {
				around = append(around, line)
			}
		}
		t.Logf("%s: the wire from 5 ms before to 5 ms after it:\n%s", first.RequestID, strings.Join(around, "\n"))
		for _, f := range unanswered[:min(5, len(unanswered))] {
			nearest := time.Duration(math.MaxInt64)
			var near capture.DNSAnswer
			for _, a := range answers {
				if d := a.At.Sub(f.Start); d.Abs() < nearest.Abs() {
					nearest, near = d, a
				}
			}
			t.Logf("%s: %.1f ms, %q; the nearest answer %+.1f ms from its start (rcode %d, %v)", f.RequestID,
				float64(f.End.Sub(f.Start))/float64(time.Millisecond), f.Error, float64(nearest)/float64(time.Millisecond), near.Rcode, near.A)
		}
	}
	// Which of the two a run sees depends on where CoreDNS's cached answer
	// was in its 5 s when the pod went: one still valid past the
	// successor's readiness sends every failure to the old address (seen
	// here: 620 of them up to 1.55 s after it, no "no such name"); one that
	// expired in the gap makes the name fail to resolve for 5 s more.
	t.Logf("failures %v; the name's answers: %d, no-such-name by negative TTL %v", byClass, len(answers), negTTL)
	f := findingByID(r.rep, analysis.PodDNSStale)
	if f == nil {
		t.Fatalf("findings %v: want %s", findingIDs(r.rep), analysis.PodDNSStale)
	}
	for _, id := range []string{analysis.StopsBeforePropagation, analysis.Unexplained, analysis.NoServingEndpoint} {
		if findingByID(r.rep, id) != nil {
			t.Errorf("findings %v: %s claimed failures of a pod's own name", findingIDs(r.rep), id)
		}
	}
	ev := strings.Join(f.Evidence, "\n")
	if byClass[report.ClassDNS] > 0 && (len(negTTL) != 1 || negTTL[5] == 0 || !strings.Contains(ev, "negative caching, for the SOA minimum: the kubernetes plugin's ttl, 5 s by default")) {
		t.Errorf("CoreDNS's negative TTLs %v, the finding says:\n%s", negTTL, ev)
	}
	t.Logf("%d failed %v; %s: %s\n%s\nfix: %s", r.rep.Totals.Failed, findingIDs(r.rep), f.ID, f.Title, ev, f.Fix)
}

// logPodsAndEndpoints logs the timeline's pod and endpoint events, and
// when the failures began and ended, against the run's start: the
// evidence a finding was read from, for a test that did not get it.
func logPodsAndEndpoints(t *testing.T, rep *report.Report) {
	t.Helper()
	var b strings.Builder
	for _, e := range rep.Timeline {
		if e.Pod == "" {
			continue
		}
		fmt.Fprintf(&b, "%+8.3fs %-28s %-40s node=%s ip=%s ready=%v serving=%v terminating=%v", e.At.Sub(rep.StartedAt).Seconds(),
			e.Kind, e.Pod, e.Node, e.IP, e.Ready, e.Serving, e.Terminating)
		// The object's own time (a container's finishedAt): how long the
		// kubelet took to report what happened, against when it did.
		if e.Server != nil {
			fmt.Fprintf(&b, " server=%+.3fs", e.Server.Sub(rep.StartedAt).Seconds())
		}
		if e.ExitCode != nil {
			fmt.Fprintf(&b, " exit=%d reason=%s", *e.ExitCode, e.Reason)
		}
		b.WriteByte('\n')
	}
	// The failures by class and second: when the Service stopped answering
	// against when the API said its endpoints stopped serving.
	bySecond := map[int]map[string]int{}
	for _, f := range rep.Failures {
		s := int(f.Start.Sub(rep.StartedAt).Seconds())
		if bySecond[s] == nil {
			bySecond[s] = map[string]int{}
		}
		bySecond[s][f.Class]++
	}
	for _, s := range slices.Sorted(maps.Keys(bySecond)) {
		fmt.Fprintf(&b, "failures in second +%d: %v\n", s, bySecond[s])
	}
	var first, last time.Time
	for _, f := range rep.Failures {
		if first.IsZero() || f.Start.Before(first) {
			first = f.Start
		}
		if f.Start.After(last) {
			last = f.Start
		}
	}
	if !first.IsZero() {
		fmt.Fprintf(&b, "failures began from %+.3fs to %+.3fs (%d kept of %d)\n", first.Sub(rep.StartedAt).Seconds(),
			last.Sub(rep.StartedAt).Seconds(), rep.FailureInfo.Kept, rep.FailureInfo.Total)
	}
	t.Logf("the run's pods and endpoints:\n%s", b.String())
}

// testDrainUnprotected drains the second node where both of
// drain-unprotected's pods run (they prefer it) and no budget holds them:
// both are evicted at once, and until a replacement is ready on the other
// node the Service has no endpoint. Every failure is in that gap, the
// finding says the drain took every serving pod and gives the budget as
// the fix; the doctor's check named the missing budget before. The
// referee is the API server: both pods were on the node and are gone.
func testDrainUnprotected(t *testing.T, ctx context.Context, c *lab.Client) {
	node := netns.Nodes(lab.DefaultNodes)[1]
	ip := ensureWorkload(t, ctx, c, rollout.KindDeployment, "drain-unprotected")
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=drain-unprotected"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != node.Name {
			t.Fatalf("pod %s on %s: the test needs both on %s (their preferred node)", p.Name, p.Spec.NodeName, node.Name)
		}
	}
	uncordonAtEnd(t, c, node.Name)
	r := startRunOn(t, nil, "drain-unprotected", "http://"+ip+"/", "--drain", node.Name, "--conn", "new").wait(t)
	if r.repErr != nil || r.exit != 1 || r.rep.Totals.Failed == 0 {
		t.Fatalf("exit %d (%v), want 1 with failures\n%s", r.exit, r.repErr, r.out())
	}
	f := findingByID(r.rep, analysis.NoServingEndpoint)
	if f == nil {
		// Seen once (warm CI of 60965dc, the subtest 58 s against 15 s
		// here): no gap in the timeline, the failures called a race. What
		// the run saw of the pods and endpoints says which half moved.
		logPodsAndEndpoints(t, r.rep)
		t.Fatalf("findings %v: want %s", findingIDs(r.rep), analysis.NoServingEndpoint)
	}
	ev := strings.Join(f.Evidence, "\n")
	if !strings.Contains(ev, "the drain evicted the pods that served") || !strings.Contains(f.Fix, "PodDisruptionBudget") {
		t.Errorf("finding %s:\n%s\nfix: %s", f.Title, ev, f.Fix)
	}
	if findingByID(r.rep, "no-pod-disruption-budget") == nil {
		t.Errorf("findings %v: the doctor did not name the missing budget", findingIDs(r.rep))
	}
	// Every failure has its cause among the pods: in the gap (or just
	// after it, while proxies learnt of the endpoint that ended it), or,
	// between the two evictions while the other pod still served, the
	// race.
	if findingByID(r.rep, analysis.Unexplained) != nil {
		t.Errorf("findings %v: failures the pods' changes do not explain", findingIDs(r.rep))
	}
	for _, p := range pods.Items {
		if _, err := c.Kube.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
			t.Errorf("pod %s is still there after the drain", p.Name)
		}
	}
	t.Logf("%d failed %v; %s: %s\n%s\nfix: %s", r.rep.Totals.Failed, findingIDs(r.rep), f.ID, f.Title, ev, f.Fix)
}

// testDrainSharedBudget drains the second node where both of
// drain-shared-budget's pods run, under a budget that also counts its
// peer's two pods on the other node (minAvailable 2 of 4): it lets both go
// at once, and the Service has no endpoint until a replacement is ready.
// The finding names the budget, each eviction it let through, and the fix
// to the budget; the no-budget finding does not claim the gap. The
// referees are the API server's: the budget allowed 2 disruptions before
// the drain, both pods were on the node, and are gone.
func testDrainSharedBudget(t *testing.T, ctx context.Context, c *lab.Client) {
	node := netns.Nodes(lab.DefaultNodes)[1]
	ip := ensureWorkload(t, ctx, c, rollout.KindDeployment, "drain-shared-budget")
	waitRollout(t, ctx, c, "drain-shared-budget-peer")
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "part-of=drain-shop"})
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, p := range pods.Items {
		want := node.Name
		if p.Labels["app"] != "drain-shared-budget" {
			want = netns.Nodes(lab.DefaultNodes)[0].Name
		} else {
			ours = append(ours, p.Name)
		}
		if p.Spec.NodeName != want {
			t.Fatalf("pod %s on %s: the test needs it on %s (its preferred node)", p.Name, p.Spec.NodeName, want)
		}
	}
	// The disruption controller counts the four pods healthy: 2 allowed.
	waitBudget(t, ctx, c, "drain-shop", 4, 2)
	uncordonAtEnd(t, c, node.Name)
	r := startRunOn(t, nil, "drain-shared-budget", "http://"+ip+"/", "--drain", node.Name, "--conn", "new").wait(t)
	if r.repErr != nil || r.exit != 1 || r.rep.Totals.Failed == 0 {
		t.Fatalf("exit %d (%v), want 1 with failures\n%s", r.exit, r.repErr, r.out())
	}
	evicted := map[string][]string{}
	for _, e := range r.rep.Timeline {
		if e.Kind == report.PodEvicted {
			evicted[e.Pod] = e.Budgets
		}
	}
	for _, p := range ours {
		if b := evicted[p]; len(b) != 1 || b[0] != "drain-shop (minAvailable: 2; 2 disruptions allowed)" {
			t.Errorf("%s evicted with budgets %q, want drain-shop's", p, b)
		}
	}
	f := findingByID(r.rep, analysis.BudgetTooLoose)
	if f == nil {
		t.Fatalf("findings %v: want %s\n%s", findingIDs(r.rep), analysis.BudgetTooLoose, r.out())
	}
	ev := strings.Join(f.Evidence, "\n")
	if !strings.Contains(f.Title, "PodDisruptionBudget drain-shop let a drain evict every pod serving service drain-shared-budget") ||
		!strings.Contains(ev, "the drain evicted 2 pods of the Service") || !strings.Contains(f.Fix, "fix drain-shop") {
		t.Errorf("finding %s:\n%s\nfix: %s", f.Title, ev, f.Fix)
	}
	// The doctor's static checks count the pods the budget does: one
	// that allowed 2 disruptions is not one that allows none, and it is
	// one that lets both of the workload's pods go, as the run measured.
	if findingByID(r.rep, "pod-disruption-budget-allows-evicting-all") == nil {
		t.Errorf("findings %v: the doctor did not say the budget lets every pod go", findingIDs(r.rep))
	}
	for _, id := range []string{analysis.NoServingEndpoint, analysis.Unexplained, "pod-disruption-budget-allows-no-eviction"} {
		if findingByID(r.rep, id) != nil {
			t.Errorf("findings %v: %s beside the budget's", findingIDs(r.rep), id)
		}
	}
	for _, name := range ours {
		if _, err := c.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Errorf("pod %s is still there after the drain", name)
		}
	}
	t.Logf("%d failed %v; %s: %s\n%s\nfix: %s", r.rep.Totals.Failed, findingIDs(r.rep), f.ID, f.Title, ev, f.Fix)
}

// testDrainOverload drains the second node, where 2 of drain-overload's 3
// pods run, under a budget that keeps "at least one" (minAvailable 1): it
// lets both go at once, and the pod left on the first node carries the
// whole load (300 requests/s of 400 ms each: 120 in flight, over its 95)
// until a replacement is ready: it sheds the excess with 503s. The
// finding names the budget, the evictions, the ready endpoints before and
// at the fewest; no other finding claims a failure. The referees are the
// app's own count of the requests it shed (each pod's /stats), which must
// equal the 503s the run counted from each pod, and the API server's: the
// budget allowed 2 disruptions before the drain, the two pods are gone.
func testDrainOverload(t *testing.T, ctx context.Context, c *lab.Client) {
	node := netns.Nodes(lab.DefaultNodes)[1]
	ip := ensureWorkload(t, ctx, c, rollout.KindDeployment, "drain-overload")
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=drain-overload"})
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	left := map[string]string{} // pod -> IP, of those the drain leaves
	for _, p := range pods.Items {
		if p.Spec.NodeName == node.Name {
			ours = append(ours, p.Name)
		} else {
			left[p.Name] = p.Status.PodIP
		}
	}
	if len(ours) != 2 || len(left) != 1 {
		t.Fatalf("%d of drain-overload's pods on %s, %d elsewhere: the test needs 2 and 1 (the spread and the preferred node)", len(ours), node.Name, len(left))
	}
	waitBudget(t, ctx, c, "drain-overload", 3, 2)
	shedBefore := map[string]int{}
	for name, podIP := range left {
		shedBefore[name] = podStat(t, podIP, "shed")
	}
	uncordonAtEnd(t, c, node.Name)
	r := startRunOn(t, nil, "drain-overload", "http://"+ip+"/", "--drain", node.Name, "--conn", "new", "--rate", "300").wait(t)
	if r.repErr != nil || r.exit != 1 || r.rep.Totals.Failed == 0 {
		t.Fatalf("exit %d (%v), want 1 with failures\n%s", r.exit, r.repErr, r.out())
	}
	// The referee: each pod's own count of what it shed, against the 503s
	// the run counted from it. The replacements (on the first node now)
	// count from their start.
	counted := map[string]int{}
	for _, f := range r.rep.Failures {
		if f.Class == report.ClassHTTP5xx {
			counted[f.Backend]++
		}
	}
	after, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=drain-overload"})
	if err != nil {
		t.Fatal(err)
	}
	shed := map[string]int{}
	for _, p := range after.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			shed[p.Name] = podStat(t, p.Status.PodIP, "shed") - shedBefore[p.Name]
		}
	}
	for name, n := range counted {
		if _, ok := shed[name]; !ok {
			t.Errorf("%d 503s counted from %q, which is not a pod left after the drain (%v)", n, name, shed)
		}
	}
	for name, n := range shed {
		if counted[name] != n {
			t.Errorf("pod %s shed %d requests by its own count, the run counted %d 503s from it", name, n, counted[name])
		}
	}
	f := findingByID(r.rep, analysis.BudgetTooLoose)
	if f == nil {
		t.Fatalf("findings %v: want %s\n%s", findingIDs(r.rep), analysis.BudgetTooLoose, r.out())
	}
	ev := strings.Join(f.Evidence, "\n")
	if !strings.Contains(f.Title, "PodDisruptionBudget drain-overload let a drain take 2 of the 3 pods serving service drain-overload at once: the 1 left could not carry the load") ||
		!strings.Contains(ev, "the drain evicted 2 pods of the Service") || !strings.Contains(ev, "drain-overload (minAvailable: 1; 2 disruptions allowed)") ||
		!strings.Contains(ev, "had 3 ready endpoints before the drain and 1 (at the fewest)") || !strings.Contains(f.Fix, "fix drain-overload") {
		t.Errorf("finding %s:\n%s\nfix: %s", f.Title, ev, f.Fix)
	}
	// Static checks cannot know the load: the budget lets 2 of 3 go,
	// which is neither "none" nor "all", and the doctor says neither.
	for _, id := range []string{analysis.NoServingEndpoint, analysis.Unexplained, analysis.ServerErrors,
		"pod-disruption-budget-allows-no-eviction", "pod-disruption-budget-allows-evicting-all"} {
		if findingByID(r.rep, id) != nil {
			t.Errorf("findings %v: %s beside the budget's", findingIDs(r.rep), id)
		}
	}
	for _, name := range ours {
		if _, err := c.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Errorf("pod %s is still there after the drain", name)
		}
	}
	t.Logf("%d failed %v, shed by the pods' own count %v; %s: %s\n%s\nfix: %s", r.rep.Totals.Failed, findingIDs(r.rep), shed, f.ID, f.Title, ev, f.Fix)
}

// waitBudget waits (up to 30 s) until the disruption controller's status
// of budget name counts healthy pods and allows that many disruptions:
// the API server's own word on what a drain may evict.
func waitBudget(t *testing.T, ctx context.Context, c *lab.Client, name string, healthy, allowed int32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pdb, err := c.Kube.PolicyV1().PodDisruptionBudgets("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil && pdb.Status.CurrentHealthy == healthy && pdb.Status.DisruptionsAllowed == allowed {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("budget %s: %v", name, err)
			}
			t.Fatalf("budget %s: %+v, want %d healthy and %d disruptions allowed", name, pdb.Status, healthy, allowed)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// uncordonAtEnd makes node schedulable again when the test ends, however
// it ends: a drain leaves it cordoned, and the next tests need both nodes.
func uncordonAtEnd(t *testing.T, c *lab.Client, node string) {
	t.Helper()
	t.Cleanup(func() {
		if err := rollout.Cordon(context.Background(), c.Kube, node, false); err != nil {
			t.Errorf("uncordon %s: %v", node, err)
			return
		}
		waitSchedulable(t, c, node)
	})
}

// waitSchedulable waits until node takes pods again: uncordoned, and with
// no NoSchedule or NoExecute taint (a lab node taking pods has none). A
// cordon adds the node.kubernetes.io/unschedulable taint, which the
// controller manager's node lifecycle controller removes after the
// uncordon, on its own time; until then a spread with nodeTaintsPolicy:
// Honor leaves the node out. In a warm CI run the next test's sample,
// applied right after this cleanup's uncordon, had all three
// drain-overload pods placed on the other node.
func waitSchedulable(t *testing.T, c *lab.Client, node string) {
	t.Helper()
	var last *corev1.Node
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = n
		if n.Spec.Unschedulable {
			return false, nil
		}
		for _, taint := range n.Spec.Taints {
			if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("node %s does not take pods 30s after its uncordon: %v (last seen: unschedulable %v, taints %v)", node, err, last != nil && last.Spec.Unschedulable, taintsOf(last))
	}
}

func taintsOf(n *corev1.Node) []corev1.Taint {
	if n == nil {
		return nil
	}
	return n.Spec.Taints
}

// drainSamplePrefix names the samples the drain tests roll: every other
// workload is deleted before them (deleteAllBut).
const drainSamplePrefix = "drain-"
