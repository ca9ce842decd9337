package lab_test

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
)

// testScaleInsWhereKubeProxyLags: naive scaled in, by rollprobe and by a
// real HorizontalPodAutoscaler, probed from the node whose kube-proxy
// hears of changes late (lab up --proxy-lag), so the removed pods are
// still routed to after they exit: the drop is certain, and what the
// tests hold is rollprobe's measure of it (every failure it puts on a pod
// for certain is on a removed one, the API the referee of which went).
//
// On a lab without the lag the drop is a race the test cannot hold. A
// scale-in deletes its pods at once, and whether they fail hangs on how
// the EndpointSlice controller writes them: in one update, kube-proxy
// takes both out in one sync 50-105 ms later, often before the kubelet
// has stopped them (0 failed of 2,373 new connections at 500 a second in
// CI on 2026-12-07; 1 to 37 in six runs by hand that hour); in two
// updates 37-106 ms apart, the second waits out kube-proxy's minimum
// sync period (1 s by default, nftables and iptables alike) after the
// first, and its pod fails for about a second (236 to 288 failed in four
// runs; the second pod's last failure 8 ms before the nft rule without
// it). Ten of ten runs by hand fell so, `nft monitor` on the probing node
// and the report's endpoint events the referees. Production clusters meet
// both, and in a busy one kube-proxy, syncing for other Services' changes
// too, may hold even a single update for up to that period.
func testScaleInsWhereKubeProxyLags(t *testing.T, ctx context.Context, c *lab.Client, lagged netns.Node, lag time.Duration) {
	on := []string{"--node", lagged.Name}
	// ensureNaive: naive rolled out, and the lagged node's kube-proxy has
	// heard of it all (it hears what the API said lag before).
	ensureNaive := func(t *testing.T) string {
		ip := ensureSample(t, ctx, c, "naive")
		if err := waitServingFrom(ctx, lagged.NS, "http://"+ip+"/"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(lag)
		return ip
	}
	scaleRun := func(t *testing.T, exit int, check func(*testing.T, *runResult), args ...string) {
		ip := ensureNaive(t)
		r := startRunOn(t, on, "naive", "http://"+ip+"/", args...).wait(t)
		if exit >= 0 && r.exit != exit {
			t.Fatalf("exit %d, want %d\n%s", r.exit, exit, r.out())
		}
		checkRunReport(t, r, "complete")
		check(t, r)
		t.Logf("exit %d, %d failed of %d %v, findings %v", r.exit, r.rep.Totals.Failed, r.rep.Totals.Sent,
			nonZero(r.rep.Totals.ByClass), findingIDs(r.rep))
	}
	// A scale-in takes pods away as a rollout does, and naive drops as it
	// does then; the scale back out adds pods that are ready before they
	// get traffic, and drops none. The pair leaves naive at its
	// manifest's three replicas.
	t.Run("naive drops on a scale-in", func(t *testing.T) {
		scaleRun(t, 1, checkScaleIn(c), "--scale", "1", "--conn", "new")
	})
	t.Run("naive scaled back out drops none", func(t *testing.T) {
		scaleRun(t, judgedByCheck, checkScaleOut(c), "--scale", "3")
	})

	// An autoscaler's scale-in is what most often takes pods away; the run
	// watches one the real HorizontalPodAutoscaler controller makes. Its
	// bounds (1 to 1) make it scale naive in without metrics (a count
	// above maxReplicas is brought down at its first sync).
	t.Run("watch follows an autoscaler's scale-in", func(t *testing.T) {
		ip := ensureNaive(t)
		hpas := c.Kube.AutoscalingV2().HorizontalPodAutoscalers("default")
		t.Cleanup(func() {
			bg := context.Background()
			_ = hpas.Delete(bg, "naive", metav1.DeleteOptions{})
			patch := []byte(`{"spec":{"replicas":3}}`)
			if _, err := c.Kube.AppsV1().Deployments("default").Patch(bg, "naive", types.MergePatchType, patch, metav1.PatchOptions{}, "scale"); err != nil {
				t.Errorf("scaling naive back: %v", err)
			}
			ensureSample(t, bg, c, "naive")
		})
		run := startRunOn(t, on, "naive", "http://"+ip+"/", "--watch", "--wait", "60s", "--conn", "new")
		run.waitFor(t, "triggered: watch")
		hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "naive"},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: ptr.To[int32](1), MaxReplicas: 1,
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "naive"}}}
		if _, err := hpas.Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		r := run.wait(t)
		checkWatchedNaiveDropped(t, r)
		checkRunReportOnly(t, r, "complete")
		// The autoscaler wrote the replicas alone: a scale, said as one.
		if want := "a scale started elsewhere: from 3 replicas to 1"; !strings.Contains(r.out(), want) || r.rep.Rollout.Trigger != "watch ("+want+")" || r.rep.Rollout.Change != report.ChangeScale {
			t.Errorf("trigger %q, change %q; want %q in it and in the run's log, a scale\n%s", r.rep.Rollout.Trigger, r.rep.Rollout.Change, want, r.out())
		}
		removed := checkPodsAfterScale(t, c, r, 3, 1)
		for _, f := range r.rep.Failures {
			if f.LikelyPod != "" && f.Confidence == 1 && !removed[f.LikelyPod] {
				t.Errorf("a failure put for certain on %s, which the autoscaler did not remove (%v): %s", f.LikelyPod, removed, failureJSON(&f))
			}
		}
		t.Logf("exit %d, %d failed of %d %v", r.exit, r.rep.Totals.Failed, r.rep.Totals.Sent, nonZero(r.rep.Totals.ByClass))
	})
}
