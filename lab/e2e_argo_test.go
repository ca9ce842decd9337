package lab_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// testArgo rolls Argo Rollouts under the lab's own Argo Rollouts
// controller (v1.10.1): the canary's steps, its pauses and rollprobe's
// promotes through them are on the timeline, as the controller's status
// showed them.
func testArgo(t *testing.T, ctx context.Context, c *lab.Client) {
	t.Run("a graceful canary promoted through its steps: its pods drop nothing", func(t *testing.T) {
		ip := ensureWorkload(t, ctx, c, rollout.KindRollout, "argo-canary")
		r := startWorkloadRun(t, nil, rollout.KindRollout, "argo-canary", "http://"+ip+"/", "--promote", "--timeout", "3m").wait(t)
		if r.repErr != nil {
			t.Fatalf("exit %d (%v)\n%s", r.exit, r.repErr, r.out())
		}
		ro := r.rep.Rollout
		var windows [][2]float64
		for _, s := range ro.Steps {
			windows = append(windows, [2]float64{s.StartS, s.EndS})
		}
		nodeOwn := checkCleanBesidesTheNodesOwn(t, r, windows)
		if ro.Kind != "Rollout" || ro.Name != "argo-canary" || ro.Service != "argo-canary" || ro.Status != report.StatusComplete ||
			ro.OldRevision == "" || ro.NewRevision == "" || ro.OldRevision == ro.NewRevision {
			t.Fatalf("rollout section %+v", ro)
		}
		// The controller's steps, in order, then the end; the indefinite
		// pause promoted by rollprobe, the timed one ending by itself.
		var steps []string
		paused, promoted := 0, 0
		for _, e := range r.rep.Timeline {
			switch e.Kind {
			case report.RolloutStep:
				steps = append(steps, e.Detail)
			case report.RolloutPaused:
				paused++
			case report.RolloutPromoted:
				promoted++
				if !strings.Contains(e.Detail, "pause") {
					t.Errorf("promote event %q", e.Detail)
				}
			}
		}
		want := []string{"step 1 of 4: setWeight: 25", "step 2 of 4: pause", "step 3 of 4: setWeight: 50", "step 4 of 4: pause: 3s", "every step done (4)"}
		if !containsAll(steps, want) {
			t.Errorf("steps on the timeline %q, want %q among them, in order", steps, want)
		}
		if paused < 2 || promoted != 1 {
			t.Errorf("%d pauses and %d promotes on the timeline: want both pauses and one promote (the timed pause ends by itself)\n%s", paused, promoted, r.out())
		}
		// A verdict per step, and the new revision's share of the named
		// responses: both revisions answered at 25% (one canary pod of
		// four); every step passed.
		byStep := map[string]report.CanaryStep{}
		for i, s := range ro.Steps {
			byStep[s.Step] = s
			if s.Pass != (nodeOwn[i] == 0) || s.Failed != uint64(nodeOwn[i]) {
				t.Errorf("step %+v: want a pass, or a fail with only the %d requests the node refused itself", s, nodeOwn[i])
			}
			share := "unknown"
			if s.NewSharePct != nil {
				share = fmt.Sprintf("%.1f%%", *s.NewSharePct)
			}
			t.Logf("step %d %s (weight %d%%): %+.1fs to %+.1fs, sent %d, new revision's share %s of %d named", s.Index+1, s.Step, s.Weight, s.StartS, s.EndS, s.Sent, share, s.Named)
		}
		if p, ok := byStep["pause"]; !ok || p.Weight != 25 || p.NewSharePct == nil || *p.NewSharePct <= 0 || *p.NewSharePct >= 100 {
			t.Errorf("the pause at 25%%: %+v, want both revisions answering", p)
		}
		if f, ok := byStep["full promotion"]; !ok || f.Weight != 100 {
			t.Errorf("steps %+v: want the full promotion last", ro.Steps)
		}
		// The canary has no traffic routing and the run kept some of its
		// connections alive (--conn mixed=0.5): a step whose share fell
		// clearly below its weight is named, each such step and no other
		// (the lab's pause at 25% gave 11.8%, 15.8% and 20.0% in three runs:
		// named in the first two).
		checkCanaryShareFinding(t, r.rep)
		// Both revisions served while the canary ran: the share follows
		// the replicas.
		served := map[string]uint64{}
		for _, p := range r.rep.Pods {
			served[p.Revision] += p.Served
		}
		if served[ro.OldRevision] == 0 || served[ro.NewRevision] == 0 {
			t.Errorf("served by revision %v: want both", served)
		}
	})

	t.Run("a canary routed by Traefik's weights follows setWeight on kept-alive connections", func(t *testing.T) { testArgoCanaryTraefik(t, ctx, c) })
	t.Run("the canary's one pod unready for a moment: Traefik drops the whole route", func(t *testing.T) { testArgoCanaryTraefikUnready(t, ctx, c) })
	t.Run("a blue-green switch, then the old pods go", func(t *testing.T) { testArgoBlueGreen(t, ctx, c) })
	t.Run("a canary weight its pods cannot express: the doctor says the pods Argo runs", func(t *testing.T) { testArgoCanaryTen(t, ctx, c) })
	t.Run("a Rollout whose template is a Deployment's: the doctor reads it, run rolls it", func(t *testing.T) { testArgoWorkloadRef(t, ctx, c) })
	t.Run("a graceful canary scaled in through rollouts/scale drops nothing", func(t *testing.T) { testArgoScaleIn(t, ctx, c) })
	// The fast blue/green runs on the lab whose edge lags (testArgoBlueGreenFast).
}

// testArgoBlueGreenFast: a blue/green of naive pods whose old ReplicaSet
// is scaled down as soon as the switch is done (scaleDownDelayRevisionLimit:
// 0), probed through the ingress of a lab whose edge hears of the API's
// changes late (--edge-lag, as a busy ingress does): until Traefik has the
// switch it still sends requests to the old pods, which are being
// deleted, and answers for them (502, 504) or waits on them. Without the
// lag the drop hung on Traefik's 2 s provider throttle: a switch it
// applied at once dropped nothing (0 of 2,538 in one CI run of six; 11 to
// 102 failures in the others). (At the Service nothing dropped in the lab:
// kube-proxy had the switch before the old pods went.) Traefik's access log is the referee of every count and
// of the pod each failed request was sent to; the finding names the
// switch, the scale-down and a delay sized from the failures.
func testArgoBlueGreenFast(t *testing.T, ctx context.Context, c *lab.Client) {
	const host = "argo-bluegreen-fast.lab.example"
	cfg := lab.Config{StateDir: stateDir}
	ensureWorkload(t, ctx, c, rollout.KindRollout, "argo-bluegreen-fast")
	waitEdge(t, "https://"+host+"/", cfg.EdgeCAPath())
	hub := edgeCapture(t)
	r := startWorkloadRun(t, nil, rollout.KindRollout, "argo-bluegreen-fast", "https://"+host+"/",
		"--cacert", cfg.EdgeCAPath(), "--conn", "new", "--promote", "--timeout", "3m").wait(t)
	checkEdgeReport(t, r)
	if r.exit != 1 || r.rep.Totals.Failed == 0 {
		t.Fatalf("exit %d, %d failed: want 1 with failures\n%s", r.exit, r.rep.Totals.Failed, r.out())
	}
	sentTo := refereeAccessLog(t, cfg, r.rep, host)
	// A handshake to Traefik the starved machine left unfinished, or a
	// connection to it not up in time, is the edge's own, on no pod (held
	// to the capture, as the edge tests hold it): left out of what the
	// blue/green's pods are held to below.
	edgeOwn := heldAtTheEdge(t, r, hub)
	ro := r.rep.Rollout
	var switched *report.Event
	for i, e := range r.rep.Timeline {
		if e.Kind == report.ActiveSwitched {
			switched = &r.rep.Timeline[i]
		}
	}
	if switched == nil || switched.Revision != ro.NewRevision {
		t.Fatalf("switch %+v: want one to the new revision %s\n%s", switched, ro.NewRevision, r.out())
	}
	old := map[string]bool{}
	for _, p := range r.rep.Pods {
		if p.Revision == ro.OldRevision {
			old[p.Pod] = true
		}
	}
	// Traefik says where each failed request went: an old pod, after the
	// switch; the report's likely pod is one of them too.
	for _, f := range r.rep.Failures {
		if edgeOwnClass(f.Class) {
			continue // the edge's own, above
		}
		if hit, ok := sentTo[f.RequestID]; ok && !old[hit] {
			t.Errorf("%s (%s): Traefik sent it to %s, not a pod of the old revision", f.RequestID, f.Class, hit)
		}
		if causedBy(f).Before(switched.At.Add(-switchSeenLate)) {
			t.Errorf("%s (%s) caused by %s, before the switch at %s", f.RequestID, f.Class, causedBy(f), switched.At)
		}
		if f.LikelyPod != "" && !old[f.LikelyPod] {
			t.Errorf("%s (%s) put on %q, not a pod of the old revision", f.RequestID, f.Class, f.LikelyPod)
		}
	}
	f := findingByID(r.rep, "bluegreen-scale-down-before-propagation")
	if f == nil {
		t.Fatalf("findings %v: want the blue/green's\n%s", findingIDs(r.rep), r.out())
	}
	ev := strings.Join(f.Evidence, "\n")
	if !strings.Contains(ev, "switched from revision "+ro.OldRevision+" to "+ro.NewRevision) || !strings.Contains(f.Fix, "scaleDownDelaySeconds") {
		t.Errorf("finding %+v: want the switch and the delay", f)
	}
	if findingByID(r.rep, "stops-accepting-before-endpoints-propagate") != nil {
		t.Errorf("findings %v: the race finding claims what the blue/green's does", findingIDs(r.rep))
	}
	// Every failure is a new connection's (--conn new): the finding claims
	// them all but the edge's own, none left to another.
	if want := nRequests(r.rep.Totals.Failed-edgeOwn) + " failed ("; !strings.Contains(ev, want) {
		t.Errorf("the finding does not claim all %d failures on pods (%d the edge's own):\n%s", r.rep.Totals.Failed-edgeOwn, edgeOwn, ev)
	}
	// The controller set no deadline (the revision limit of 0 does not
	// wait): the run's patch lifts the limit, or it would change nothing;
	// the doctor's check named the limit before any traffic.
	if !strings.Contains(f.Fix, `"scaleDownDelayRevisionLimit":null`) {
		t.Errorf("the fix leaves scaleDownDelayRevisionLimit: 0 in place: %s", f.Fix)
	}
	if d := findingByID(r.rep, "scale-down-delay-below-propagation"); d == nil || d.Source != report.SourceDoctor || d.Severity != report.SeverityError ||
		!strings.Contains(strings.Join(d.Evidence, "\n"), "scaleDownDelayRevisionLimit: 0") || !strings.Contains(d.Fix, `"scaleDownDelayRevisionLimit":null`) {
		t.Errorf("the doctor's check: %+v, want an error naming the revision limit", d)
	}
	t.Logf("%d failed of %d %v; %s; fix: %s", r.rep.Totals.Failed, r.rep.Totals.Sent, nonZero(r.rep.Totals.ByClass), ev, f.Fix)
}

// testArgoBlueGreen: a blue/green of naive pods, promoted: the pause, the
// promote and then the switch are on the timeline, as the controller's
// status showed them, and the run ends when the old pods are gone. It
// dropped nothing in the lab's runs (the old pods go 3 s after the
// switch); whatever does drop must be on an old pod, after the switch.
func testArgoBlueGreen(t *testing.T, ctx context.Context, c *lab.Client) {
	ip := ensureWorkload(t, ctx, c, rollout.KindRollout, "argo-bluegreen")
	r := startWorkloadRun(t, nil, rollout.KindRollout, "argo-bluegreen", "http://"+ip+"/", "--promote", "--timeout", "3m").wait(t)
	if r.repErr != nil || r.rep.Rollout == nil || r.rep.Rollout.Status != report.StatusComplete {
		t.Fatalf("exit %d (%v): want a complete rollout\n%s", r.exit, r.repErr, r.out())
	}
	ro := r.rep.Rollout
	if ro.Service != "argo-bluegreen" || len(ro.Steps) != 0 {
		t.Errorf("service %q, steps %+v: want the active Service and no canary steps", ro.Service, ro.Steps)
	}
	var switched, promoted, paused, deadline *report.Event
	for i, e := range r.rep.Timeline {
		switch e.Kind {
		case report.ScaleDownDeadline:
			deadline = &r.rep.Timeline[i]
		case report.ActiveSwitched:
			switched = &r.rep.Timeline[i]
		case report.RolloutPromoted:
			promoted = &r.rep.Timeline[i]
		case report.RolloutPaused:
			paused = &r.rep.Timeline[i]
		}
	}
	if paused == nil || paused.Detail != "BlueGreenPause" || promoted == nil || switched == nil ||
		switched.Revision != ro.NewRevision || switched.At.Before(promoted.At) {
		t.Fatalf("timeline: paused %+v, promoted %+v, switched %+v: want the pause, the promote, then the switch to %s\n%s", paused, promoted, switched, ro.NewRevision, r.out())
	}
	// The controller annotates the old ReplicaSet with the time it scales
	// it down: scaleDownDelaySeconds (3) after the switch, to the second.
	if deadline == nil || deadline.Revision != ro.OldRevision || !strings.Contains(deadline.Detail, "scales down at") {
		t.Errorf("scale-down deadline %+v: want one for the old revision %s", deadline, ro.OldRevision)
	} else if d := deadline.At.Sub(switched.At); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("the scale-down deadline was set %s from the switch: want the same reconcile or the next", d)
	}
	old := map[string]bool{}
	for _, p := range r.rep.Pods {
		if p.Revision == ro.OldRevision {
			old[p.Pod] = true
		}
	}
	for _, f := range r.rep.Failures {
		if causedBy(f).Before(switched.At.Add(-switchSeenLate)) {
			t.Errorf("%s (%s) caused by %s, before the switch at %s", f.RequestID, f.Class, causedBy(f), switched.At)
		}
		if f.LikelyPod != "" && !old[f.LikelyPod] {
			t.Errorf("%s (%s) put on %q, not a pod of the old revision", f.RequestID, f.Class, f.LikelyPod)
		}
	}
	// The doctor's check: the old pods go 3 s after the switch and have no
	// preStop hook, under the 5 s it allows; a note when this run, at the
	// Service, measured no drop (the measurement outranks the guess).
	want := report.SeverityError
	if r.rep.Totals.Failed == 0 {
		want = report.SeverityInfo
	}
	if d := findingByID(r.rep, "scale-down-delay-below-propagation"); d == nil || d.Source != report.SourceDoctor || d.Severity != want ||
		!strings.Contains(strings.Join(d.Evidence, "\n"), "scaleDownDelaySeconds: 3") {
		t.Errorf("the doctor's check: %+v, want %s naming the 3 s delay", d, want)
	}
	t.Logf("exit %d, %d failed of %d %v; switched %.1fs after the promote", r.exit, r.rep.Totals.Failed, r.rep.Totals.Sent,
		nonZero(r.rep.Totals.ByClass), switched.At.Sub(promoted.At).Seconds())
}

// checkCanaryShareFinding: canary-share-below-weight names exactly the
// steps of rep whose share of named responses was judged below their
// weight (at least 500 named, a quarter of the weight and 5 points under
// it), absent when none was.
func checkCanaryShareFinding(t *testing.T, rep *report.Report) {
	t.Helper()
	f := findingByID(rep, "canary-share-below-weight")
	ev := ""
	if f != nil {
		ev = strings.Join(f.Evidence, "\n")
	}
	below := 0
	for _, s := range rep.Rollout.Steps {
		judged := s.Weight > 0 && s.Weight < 100 && s.NewSharePct != nil && s.Named >= 500 &&
			*s.NewSharePct <= float64(s.Weight)-max(float64(s.Weight)/4, 5)
		if judged {
			below++
		}
		if named := strings.Contains(ev, fmt.Sprintf("step %d (", s.Index+1)); named != judged {
			t.Errorf("step %+v: named by the finding %v, below its weight %v:\n%s", s, named, judged, ev)
		}
	}
	if (f != nil) != (below > 0) {
		t.Errorf("finding %+v with %d steps below their weight", f, below)
	}
	t.Logf("canary-share-below-weight: %d steps below their weight", below)
}

// testArgoCanaryTen: a canary of 4 pods without traffic routing whose
// step is setWeight: 10. The doctor's check, in the run's report, says
// Argo runs 1 canary pod beside 4 stable ones; the referee is Argo's
// controller itself: the pods the run saw at the pause, by revision.
func testArgoCanaryTen(t *testing.T, ctx context.Context, c *lab.Client) {
	const sample = "argo-canary-ten"
	deleteSampleAtEnd(t, c, sample, "")
	ip := ensureWorkload(t, ctx, c, rollout.KindRollout, sample)
	r := startWorkloadRun(t, nil, rollout.KindRollout, sample, "http://"+ip+"/", "--promote", "--conn", "new", "--timeout", "3m").wait(t)
	if r.repErr != nil || r.rep.Rollout == nil || r.rep.Rollout.Status != report.StatusComplete {
		t.Fatalf("exit %d (%v): want a complete rollout\n%s", r.exit, r.repErr, r.out())
	}
	ro := r.rep.Rollout
	f := findingByID(r.rep, "canary-weight-rounded-to-pods")
	if f == nil || f.Source != report.SourceDoctor || f.Severity != report.SeverityWarning ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "setWeight: 10 on 4 replicas: Argo Rollouts runs 1 canary pod(s) beside 4 stable one(s), 20% of the pods") {
		t.Fatalf("the doctor's check: %+v, want a warning naming 1 canary pod beside 4 stable ones\n%s", f, r.out())
	}
	var pause *report.CanaryStep
	for i, s := range ro.Steps {
		if s.Step == "pause" {
			pause = &ro.Steps[i]
		}
	}
	if pause == nil || pause.Weight != 10 {
		t.Fatalf("steps %+v: want the pause at 10%%", ro.Steps)
	}
	// The pods at the pause's middle, as the watch saw them: the new
	// revision's ready ones, the old revision's not yet deleted.
	mid := r.rep.StartedAt.Add(time.Duration((pause.StartS + pause.EndS) / 2 * float64(time.Second)))
	pods := map[string]int{}
	for _, p := range r.rep.Pods {
		if p.DeletedAt != nil && !p.DeletedAt.After(mid) {
			continue
		}
		if p.Revision == ro.NewRevision && (p.ReadyAt == nil || p.ReadyAt.After(mid)) {
			continue
		}
		pods[p.Revision]++
	}
	if pods[ro.NewRevision] != 1 || pods[ro.OldRevision] != 4 {
		t.Errorf("at the pause: %d pods of the new revision, %d of the old: want 1 and 4, as the doctor said", pods[ro.NewRevision], pods[ro.OldRevision])
	}
	share := "unknown"
	if pause.NewSharePct != nil {
		share = fmt.Sprintf("%.1f%%", *pause.NewSharePct)
	}
	t.Logf("at the pause (weight 10%%): %d canary and %d stable pods; the new revision answered %s of %d named (--conn new)", pods[ro.NewRevision], pods[ro.OldRevision], share, pause.Named)
}

// testArgoWorkloadRef: a Rollout that takes its pod template from a
// Deployment (spec.workloadRef). The lab's Argo controller makes its pods
// from that template (the referee of what the template is and of whether
// a write to it rolled the Rollout); rollprobe doctor reads the same
// template (the Deployment's naive container: no preStop hook) and says
// where it read it. rollprobe run writes that Deployment's template
// (--restart), never the Rollout's, and follows Argo's rollout to its end;
// a deploy command that changes nothing is told apart by the Deployment's
// generation; --scale writes the Rollout's own replicas, not the
// Deployment's; a watch tells another hand's scale of the Rollout from a
// rollout by the Deployment's generation.
func testArgoWorkloadRef(t *testing.T, ctx context.Context, c *lab.Client) {
	const sample, holder = "argo-workloadref", "argo-workloadref-template"
	kube := rollout.WithDynamic(c.Kube, c.Dynamic)
	ref := rollout.Ref{Kind: rollout.KindRollout, Namespace: "default", Name: sample}
	deleteSampleAtEnd(t, c, sample, holder)
	ip := ensureWorkload(t, ctx, c, rollout.KindRollout, sample)
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + sample})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Labels[rollout.ArgoPodHashLabel] == "" ||
		pods.Items[0].Spec.Containers[0].Lifecycle != nil || pods.Items[0].Spec.Containers[0].Name != "app" {
		t.Fatalf("pods %+v (%v): want the Rollout's one pod, made from the Deployment's template (container app, no preStop)", pods, err)
	}
	out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
		"doctor", "--rollout", "default/"+sample, "-o", "json")
	var res report.DoctorResult
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || exitCode(err) != 1 {
		t.Fatalf("doctor: exit %d (want 1), %v\n%s", exitCode(err), jerr, out)
	}
	var preStop *report.Finding
	for i, f := range res.Findings {
		if f.ID == "no-prestop-hook" {
			preStop = &res.Findings[i]
		}
	}
	if res.TemplateFrom != "deployment "+holder || res.Service != sample || preStop == nil ||
		preStop.Severity != report.SeverityError || !strings.Contains(strings.Join(preStop.Evidence, "\n"), "container(s) app") {
		t.Fatalf("doctor: template from %q, service %q, no-prestop-hook %+v: want the Deployment's template, the Service, the missing hook\n%s", res.TemplateFrom, res.Service, preStop, out)
	}
	// The Deployment scaled up (a move to the Rollout not finished): a
	// change to its template would roll its own pods too. Refused before
	// anything is written; scaled back, its pod gone, before going on.
	scale := func(n int32) *appsv1.Deployment {
		t.Helper()
		d, err := c.Kube.AppsV1().Deployments("default").Patch(ctx, holder, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	scaled := scale(1)
	out, err = rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
		"run", "--rollout", sample, "--target", "http://"+ip+"/", "--restart", "--baseline", "1s", "--timeout", "30s")
	if exit := exitCode(err); exit != 2 || !strings.Contains(out, "deployment "+holder+", whose template it takes (workloadRef; scaleDown: never), wants 1 pod(s) of its own") {
		t.Errorf("run with the Deployment scaled to 1: exit %d, want 2 naming its pod\n%s", exit, out)
	}
	if d, err := c.Kube.AppsV1().Deployments("default").Get(ctx, holder, metav1.GetOptions{}); err != nil {
		t.Errorf("the Deployment after the refused run: %v", err)
	} else if d.Generation != scaled.Generation {
		t.Errorf("the Deployment after the refused run: generation %d, was %d", d.Generation, scaled.Generation)
	}
	scale(0)
	// Its pod gone, and Argo's controller past the Deployment's two new
	// generations (a run refuses a Rollout it has not caught up with).
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + sample + ",!" + rollout.ArgoPodHashLabel})
		w, werr := rollout.GetWorkload(ctx, kube, ref)
		return err == nil && len(pods.Items) == 0 && werr == nil && w.Progress().Done &&
			w.Rollout.Annotations[rollout.ArgoWorkloadGenerationAnnotation] == fmt.Sprint(w.Generation()), nil
	})
	if err != nil {
		t.Fatalf("the Deployment's own pod still there after scaling it to 0, or Argo not caught up: %v", err)
	}

	before, err := rollout.GetWorkload(ctx, kube, ref)
	if err != nil {
		t.Fatal(err)
	}
	oldHash := before.Rollout.Status.CurrentPodHash

	// A deploy command that writes nothing: no rollout, said by the
	// Deployment's generation (the Rollout's own never moves for it).
	r := startWorkloadRun(t, nil, rollout.KindRollout, sample, "http://"+ip+"/", "--exec", "--", "true").wait(t)
	if r.repErr != nil || r.exit != 0 || r.rep.Rollout.Status != report.StatusNoChange ||
		!strings.Contains(r.rep.Rollout.Message, "deployment "+holder+", the rollout's template") {
		t.Fatalf("a deploy command that changes nothing: exit %d (%v), want 0 and no change naming the Deployment\n%s", r.exit, r.repErr, r.out())
	}

	// --restart: the Deployment's template gets the annotation, Argo rolls
	// the Rollout to a new ReplicaSet made from it, and the run follows
	// that to the old pod's end.
	r = startWorkloadRun(t, nil, rollout.KindRollout, sample, "http://"+ip+"/", "--restart", "--promote", "--promote-after", "2s").wait(t)
	if r.repErr != nil || r.rep.Rollout == nil || r.rep.Rollout.Status != report.StatusComplete || (r.exit != 0 && r.exit != 1) {
		t.Fatalf("exit %d (%v): want a complete rollout (0, or 1 for the naive pod's drops)\n%s", r.exit, r.repErr, r.out())
	}
	ro := r.rep.Rollout
	after, err := rollout.GetWorkload(ctx, kube, ref)
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Kube.AppsV1().Deployments("default").Get(ctx, holder, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stamp := d.Spec.Template.Annotations[rollout.RestartedAtAnnotation]
	switch {
	case stamp == "" || d.Generation != before.Generation()+1:
		t.Errorf("the Deployment: generation %d (was %d), restartedAt %q: want one write of the restart", d.Generation, before.Generation(), stamp)
	case after.Rollout.Generation != before.Rollout.Generation:
		t.Errorf("the Rollout's own generation moved %d → %d: its spec was written", before.Rollout.Generation, after.Rollout.Generation)
	case ro.TemplateFrom != "deployment "+holder || ro.OldRevision != oldHash || ro.NewRevision == oldHash ||
		ro.NewRevision != after.Rollout.Status.CurrentPodHash:
		t.Errorf("report: template from %q, revisions %s → %s; Argo: %s → %s", ro.TemplateFrom, ro.OldRevision, ro.NewRevision, oldHash, after.Rollout.Status.CurrentPodHash)
	case !slices.ContainsFunc(r.rep.Timeline, func(e report.Event) bool { return e.Kind == report.RolloutPromoted }):
		t.Errorf("no promote through the canary's pause on the timeline")
	}
	pods, err = c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + sample})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Labels[rollout.ArgoPodHashLabel] != ro.NewRevision ||
		pods.Items[0].Annotations[rollout.RestartedAtAnnotation] != stamp {
		t.Errorf("pods %+v (%v): want the one pod of revision %s, made from the restarted template (%s)", pods, err, ro.NewRevision, stamp)
	}
	if (r.exit == 1) != (r.rep.Totals.Failed > 0) {
		t.Errorf("exit %d with %d failed", r.exit, r.rep.Totals.Failed)
	}
	// The naive pod the rollout deleted exits at once: what failed was
	// its (the new pod was told nothing).
	revision := map[string]string{}
	for _, p := range r.rep.Pods {
		revision[p.Pod] = p.Revision
	}
	for _, f := range r.rep.Failures {
		if f.LikelyPod != "" && revision[f.LikelyPod] != ro.OldRevision {
			t.Errorf("failure %+v: put on %s of revision %q, want the old revision's pod", f, f.LikelyPod, revision[f.LikelyPod])
		}
	}
	var findings []string
	for _, f := range r.rep.Findings {
		findings = append(findings, f.ID)
	}
	t.Logf("doctor: %d findings from %s; run: %s → %s through %s, %d of %d failed %v, findings %v, the trigger seen %.0f ms after its write",
		len(res.Findings), res.TemplateFrom, ro.OldRevision, ro.NewRevision, ro.TemplateFrom, r.rep.Totals.Failed, r.rep.Totals.Sent,
		r.rep.Totals.ByClass, findings, ro.TriggerSeenAfterMS)

	// --scale: the replicas are the Rollout's own (its spec, through
	// rollouts/scale), never the Deployment's, which keeps none; Argo
	// adds a pod of the one revision and nothing is removed.
	holderGen := d.Generation
	r = startWorkloadRun(t, nil, rollout.KindRollout, sample, "http://"+ip+"/", "--scale", "2").wait(t)
	if r.repErr != nil {
		t.Fatalf("exit %d, no report: %v\n%s", r.exit, r.repErr, r.out())
	}
	if r.rep.Totals.Failed > 0 {
		checkClean(t, r)
	} else if r.exit != 0 {
		t.Fatalf("exit %d with nothing failed\n%s", r.exit, r.out())
	}
	checkScaled(t, c, r, 1, 2)
	if ro := r.rep.Rollout; ro.TemplateFrom != "deployment "+holder || ro.OldRevision != after.Rollout.Status.CurrentPodHash {
		t.Errorf("rollout section %+v: want the template from %s, revision %s", ro, holder, after.Rollout.Status.CurrentPodHash)
	}
	if d, err := c.Kube.AppsV1().Deployments("default").Get(ctx, holder, metav1.GetOptions{}); err != nil {
		t.Errorf("the Deployment after the scale: %v", err)
	} else if d.Generation != holderGen || ptr.Deref(d.Spec.Replicas, -1) != 0 {
		t.Errorf("the Deployment after the scale: generation %d (was %d), replicas %d: the scale wrote it", d.Generation, holderGen, ptr.Deref(d.Spec.Replicas, -1))
	}
	t.Logf("--scale 2: exit %d, %d failed of %d", r.exit, r.rep.Totals.Failed, r.rep.Totals.Sent)

	// --watch while another hand scales the Rollout back in (its scale
	// subresource, as kubectl scale or an autoscaler writes it): the
	// Deployment's generation unchanged, the watch tells a scale from a
	// rollout, which it cannot by the Rollout's template (empty).
	run := startWorkloadRun(t, nil, rollout.KindRollout, sample, "http://"+ip+"/", "--watch", "--wait", "60s")
	run.waitFor(t, "triggered: watch")
	if _, err := c.Dynamic.Resource(rollout.RolloutsGVR).Namespace("default").Patch(ctx, sample, types.MergePatchType,
		[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}
	r = run.wait(t)
	if r.repErr != nil {
		t.Fatalf("exit %d, no report: %v\n%s", r.exit, r.repErr, r.out())
	}
	if want := "a scale started elsewhere: from 2 replicas to 1"; r.rep.Rollout.Trigger != "watch ("+want+")" || r.rep.Rollout.Change != report.ChangeScale || !strings.Contains(r.out(), want) {
		t.Errorf("trigger %q, change %q: want %q in it and in the run's log, a scale\n%s", r.rep.Rollout.Trigger, r.rep.Rollout.Change, want, r.out())
	}
	removed := checkPodsAfterScale(t, c, r, 2, 1)
	// The pod the scale removed is naive's (no preStop): it may drop or
	// not (a race with kube-proxy on this unlagged node), and what drops
	// is its own.
	if (r.exit == 1) != (r.rep.Totals.Failed > 0) || (r.exit != 0 && r.exit != 1) {
		t.Errorf("exit %d with %d failed", r.exit, r.rep.Totals.Failed)
	}
	for _, f := range r.rep.Failures {
		if f.LikelyPod != "" && f.Confidence == 1 && !removed[f.LikelyPod] {
			t.Errorf("a failure put for certain on %s, which the scale did not remove (%v): %s", f.LikelyPod, removed, failureJSON(&f))
		}
	}
	if d, err := c.Kube.AppsV1().Deployments("default").Get(ctx, holder, metav1.GetOptions{}); err != nil {
		t.Errorf("the Deployment after the watched scale: %v", err)
	} else if d.Generation != holderGen {
		t.Errorf("the Deployment after the watched scale: generation %d (was %d): the scale wrote it", d.Generation, holderGen)
	}
	t.Logf("--watch of a scale to 1: exit %d, %d failed of %d", r.exit, r.rep.Totals.Failed, r.rep.Totals.Sent)
}

// switchSeenLate: how much later than the old pods' end the switch may be
// seen. active_switched comes from the Rollout's status, which the
// controller writes at the end of a reconcile; the old pods may already be
// failing by then (a cold CI run: proxy_5xx from 0.13 s before the
// event). The analysis allows the same second (switchTolerance).
const switchSeenLate = time.Second

// causedBy is the latest time a failure can have been caused: a refused or
// unanswered connect's start, any other failure's end.
func causedBy(f report.Failure) time.Time {
	if f.Class == report.ClassRefused || f.Class == report.ClassConnectTimeout {
		return f.Start
	}
	return f.End
}

// containsAll says whether want appears in got in order (other elements
// between them allowed).
func containsAll(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// testArgoCanaryTraefik: a canary whose weights Argo sets on a Traefik
// TraefikService (weighted round robin per request), probed through the
// ingress on kept-alive connections, promoted through its pause. No pod
// drops anything (checkCleanThroughTheEdge); Traefik's access log is the
// referee of every count and pod (refereeAccessLog) and of each step's
// share: the share rollprobe gives a step is the one the log gives for
// the same seconds, and in the second half of the 25% pause (Traefik
// applies a weight within its providers' 2 s throttle) the log's share is
// the weight's, per request, though no connection moved: what a
// replica-weighted canary cannot show on kept-alive connections.
func testArgoCanaryTraefik(t *testing.T, ctx context.Context, c *lab.Client) {
	const host = "argo-canary-traefik.lab.example"
	cfg := lab.Config{StateDir: stateDir}
	ensureWorkload(t, ctx, c, rollout.KindRollout, "argo-canary-traefik")
	waitEdge(t, "https://"+host+"/", cfg.EdgeCAPath())
	hub := edgeCapture(t)
	r := startWorkloadRun(t, nil, rollout.KindRollout, "argo-canary-traefik", "https://"+host+"/",
		"--cacert", cfg.EdgeCAPath(), "--conn", "keepalive", "--promote", "--promote-after", "8s", "--timeout", "3m").wait(t)
	checkEdgeReport(t, r)
	checkCleanThroughTheEdge(t, r, hub)
	ro := r.rep.Rollout
	if ro.Service != "argo-canary-traefik" || ro.OldRevision == ro.NewRevision {
		t.Fatalf("rollout section %+v", ro)
	}
	refereeAccessLog(t, cfg, r.rep, host)
	revision := map[string]string{} // by pod IP
	for _, e := range r.rep.Timeline {
		if e.IP != "" && e.Revision != "" {
			revision[e.IP] = e.Revision
		}
	}
	// Each access-log entry in the series' second Traefik ended it in: the
	// series counts a response's backend in the second its response came
	// back (prober.Recorder, the end row), which follows Traefik's end by
	// the answer's trip to the client. (By the second Traefik began it,
	// the two differed by the requests' whole latency at each boundary:
	// a CI run's pause counted 392 responses against the log's 400, and
	// 49.0% against 50.0%.)
	type tally struct{ all, new int }
	bySecond := map[int64]*tally{}
	for _, e := range readAccessLog(t, cfg, r.rep.Config.RunID, host) {
		ip, _, _ := net.SplitHostPort(e.ServiceAddr)
		sec := int64(e.StartUTC.Add(e.Duration).Sub(r.rep.StartedAt) / time.Second)
		n := bySecond[sec]
		if n == nil {
			n = &tally{}
			bySecond[sec] = n
		}
		n.all++
		if revision[ip] == ro.NewRevision {
			n.new++
		}
	}
	share := func(from, to float64) (float64, int) {
		var all, nw int
		for sec, n := range bySecond {
			if at := float64(sec); at >= from && at < to {
				all += n.all
				nw += n.new
			}
		}
		if all == 0 {
			return -1, 0
		}
		return 100 * float64(nw) / float64(all), all
	}
	var pause *report.CanaryStep
	for i, s := range ro.Steps {
		if s.NewSharePct == nil {
			// No whole second of the series began in it (a step the
			// controller passed within the second): unknown, not 0.
			if s.Named != 0 || s.EndS-s.StartS >= 1 {
				t.Errorf("step %+v: no share", s)
			}
			continue
		}
		logShare, n := share(math.Ceil(s.StartS), math.Ceil(s.EndS))
		t.Logf("step %d %s (weight %d%%): %+.1fs to %+.1fs, new revision's share %.1f%% of %d named; Traefik's log %.1f%% of %d", s.Index+1, s.Step, s.Weight, s.StartS, s.EndS, *s.NewSharePct, s.Named, logShare, n)
		if n > 0 && math.Abs(logShare-*s.NewSharePct) > 1 {
			t.Errorf("step %s: rollprobe's share %.1f%%, Traefik's log %.1f%% for the same seconds", s.Step, *s.NewSharePct, logShare)
		}
		if s.Step == "pause" {
			pause = &ro.Steps[i]
		}
	}
	if pause == nil || pause.Weight != 25 {
		t.Fatalf("steps %+v: want the pause at 25%%", ro.Steps)
	}
	mid := math.Ceil((pause.StartS + pause.EndS) / 2)
	got, n := share(mid, math.Floor(pause.EndS))
	if n == 0 || math.Abs(got-25) > 3 {
		t.Errorf("the pause's second half: Traefik sent %.1f%% of %d requests to the new revision, want 25%% (its weight)", got, n)
	}
	t.Logf("the pause's second half: Traefik sent %.1f%% of %d requests to the new revision", got, n)
	// The proxy weighs requests: a share below the weight over a whole
	// step is its delay in applying it, which the finding does not claim.
	if f := findingByID(r.rep, "canary-share-below-weight"); f != nil {
		t.Errorf("a routed canary named as below its weight: %+v", f)
	}
}

// testArgoCanaryTraefikUnready: argo-canary-traefik again, its one canary
// pod made unready for a moment at the 25% pause while it goes on serving
// (demoapp's /unready, as a readiness probe that timed out under load: a
// CI run met it so). The canary Service then has no serving endpoint, and
// Traefik drops the weighted TraefikService over it with the route that
// uses it: 404 for every request of the host, not the canary's 25%, until
// its next configuration after the pod is ready again. Referees: Traefik's
// own log ("no servers found" for the canary Service) and its access log
// (each failure a 404 it answered itself, no backend). rollprobe names no
// pod for them (their responses lack X-Pod-Name, which every pod's has)
// and explains them with edge-had-no-backend, naming the pod that turned
// unready; not with ready-before-serving, whose fix (a readiness probe)
// the pod had. The doctor's traefik-weighted-route-on-one-pod warned of
// it before any traffic. A second path goes through a second Traefik with
// allowEmptyServices=true: checkAllowEmptyShare says what it changes.
func testArgoCanaryTraefikUnready(t *testing.T, ctx context.Context, c *lab.Client) {
	const (
		sample = "argo-canary-traefik"
		host   = sample + ".lab.example"
		canary = sample + "-canary"
	)
	cfg := lab.Config{StateDir: stateDir}
	ensureWorkload(t, ctx, c, rollout.KindRollout, sample)
	waitEdge(t, "https://"+host+"/", cfg.EdgeCAPath())
	traefikLogOnFailure(t)
	old := map[string]bool{}
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + sample})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		old[p.Name] = true
	}
	// Beside the lab's Traefik, a second one with allowEmptyServices=true,
	// which the findings' fixes name: the same blip through it, side by
	// side, is what the option changes, by its own access log.
	emptyURL := startTraefikAllowingEmpty(t, ctx, host)
	since := time.Now().Add(-time.Second).Truncate(time.Second)
	run := startWorkloadRun(t, nil, rollout.KindRollout, sample, "edge=https://"+host+"/", "--target", "allow-empty="+emptyURL,
		"--cacert", cfg.EdgeCAPath(), "--conn", "keepalive", "--promote", "--promote-after", "15s", "--timeout", "3m")

	// The canary Service serving the new pod alone: Argo switched it.
	var pod, ip string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		eps, err := c.Kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + canary})
		if err != nil {
			return false, nil
		}
		pod, ip = "", ""
		n := 0
		for _, s := range eps.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Serving == nil || !*e.Conditions.Serving || e.TargetRef == nil || len(e.Addresses) == 0 {
					continue
				}
				n++
				pod, ip = e.TargetRef.Name, e.Addresses[0]
			}
		}
		return n == 1 && !old[pod], nil
	})
	if err != nil {
		t.Fatalf("the canary Service never served the new pod alone: %v\n%s", err, run.output.String())
	}
	out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "demoapp"), "get",
		"http://"+net.JoinHostPort(ip, "8080")+"/unready?for=5s")
	if err != nil {
		t.Fatalf("/unready on %s: %v\n%s", pod, err, out)
	}
	unreadyAt := time.Now()
	r := run.wait(t)
	checkEdgeReport(t, r)
	if r.exit != 1 {
		t.Fatalf("exit %d, want 1 (requests failed)\n%s", r.exit, r.out())
	}

	// Traefik's own word on why.
	traefikSaid := false
	for _, line := range traefikLogLines(t, since) {
		if strings.Contains(line, "no servers found for default/"+canary) {
			traefikSaid = true
		}
	}
	if !traefikSaid {
		t.Errorf("Traefik's log never said it had no server for %s", canary)
	}
	if len(r.rep.Paths) != 2 || r.rep.Paths[0].Name != "edge" || r.rep.Paths[1].Name != "allow-empty" {
		t.Fatalf("paths %+v, want edge and allow-empty", r.rep.Paths)
	}
	edge, empty := r.rep.Paths[0], r.rep.Paths[1]
	// Through the lab's Traefik every failure a 404 it answered itself, by
	// its access log.
	byID := readAccessLog(t, cfg, edge.RunID, host)
	var own404 uint64
	var from404, to404 time.Time
	for _, e := range byID {
		if e.DownstreamStatus == 404 && e.ServiceAddr == "" && e.OriginPod == "" {
			own404++
			if from404.IsZero() || e.StartUTC.Before(from404) {
				from404 = e.StartUTC
			}
			if e.StartUTC.After(to404) {
				to404 = e.StartUTC
			}
		}
	}
	if own404 == 0 || edge.Totals.Failed != own404 || edge.Totals.ByClass[report.ClassHTTPStatus] != own404 {
		t.Fatalf("Traefik answered %d requests 404 itself; rollprobe counted %d failed %v", own404, edge.Totals.Failed, nonZero(edge.Totals.ByClass))
	}
	emptyFails := checkAllowEmptyShare(t, r, empty, readAccessLogFile(t, cfg.TraefikAllowingEmptyAccessLog(), []string{empty.RunID}, host),
		from404, to404, own404)
	for _, f := range r.rep.Failures {
		if f.Path != edge.Name {
			continue
		}
		if e, ok := byID[f.RequestID]; !ok || e.DownstreamStatus != 404 || e.ServiceAddr != "" {
			t.Errorf("failure %s (%s %d): Traefik's line %+v, want its own 404", f.RequestID, f.Class, f.Status, e)
		}
		if f.LikelyPod != "" || !strings.Contains(f.Context, "the edge answered it itself") {
			t.Errorf("failure %s put on %q (%s): the edge answered it, no pod did", f.RequestID, f.LikelyPod, f.Context)
		}
	}
	fd := findingByID(r.rep, "edge-had-no-backend")
	if fd == nil {
		t.Fatalf("no edge-had-no-backend finding: %v\n%s", r.rep.Findings, r.out())
	}
	if ev := strings.Join(fd.Evidence, "\n"); !strings.Contains(ev, "pod "+pod+" turned unready at") || !strings.Contains(ev, "without X-Pod-Name") {
		t.Errorf("the finding names neither the unready pod %s nor the missing header:\n%s", pod, ev)
	}
	// The doctor warned of it before any traffic.
	if d := findingByID(r.rep, "traefik-weighted-route-on-one-pod"); d == nil || d.Source != report.SourceDoctor || d.Severity != report.SeverityWarning ||
		!strings.Contains(strings.Join(d.Evidence, "\n"), "setWeight: 25 on 2 replicas: Argo Rollouts runs 1 canary pod behind service "+canary) {
		t.Errorf("the doctor's check: %+v, want a warning naming the one canary pod at 25%%", d)
	}
	for _, wrong := range []string{"ready-before-serving", "failures-without-lifecycle-event"} {
		if findingByID(r.rep, wrong) != nil {
			t.Errorf("finding %s for the edge's own answers", wrong)
		}
	}
	t.Logf("%s unready from %s: %d requests answered 404 by Traefik itself, from %+.2fs to %+.2fs of the run, as its access log says; "+
		"through the Traefik allowing empty Services, %d answered 503 by it", pod, unreadyAt.Format("15:04:05.000"), own404,
		r.rep.Failures[0].Start.Sub(r.rep.StartedAt).Seconds(), r.rep.Failures[len(r.rep.Failures)-1].End.Sub(r.rep.StartedAt).Seconds(), emptyFails)
}

// checkAllowEmptyShare holds the path through the Traefik with
// allowEmptyServices=true (empty) to that Traefik's access log (byID, its
// requests of the run). It keeps the weighted route while the canary
// Service is empty: no 404, and requests served by pods all through the
// span the default Traefik answered its own 404s (from404 to to404).
// Argo Rollouts sets the canary's weight to 0 once the canary has no
// available pod (v1.10.1, rollout/trafficrouting.go: "never weight to
// canary"), and a Service of weight 0 gets no request; until Traefik has
// that weight, a canary Service with no serving endpoint has its share
// answered 503 by Traefik itself ("no available server"). So the run
// fails only Traefik's own 503s, fewer than the default Traefik's 404s
// (own404), each put on no pod: rollprobe counts exactly those. It
// returns how many. (Two lab runs of 2026-12-03 met none: Traefik's 2 s
// provider throttle applied the canary's weight 0 in the same reload as
// its empty Service.)
func checkAllowEmptyShare(t *testing.T, r *runResult, empty report.PathReport, byID map[string]accessEntry, from404, to404 time.Time, own404 uint64) uint64 {
	t.Helper()
	var own503, servedIn404s uint64
	for _, e := range byID {
		switch {
		case e.DownstreamStatus == 503 && e.ServiceAddr == "" && e.OriginPod == "":
			own503++
		case e.DownstreamStatus == 200 && e.OriginPod != "":
			if !e.StartUTC.Before(from404) && !e.StartUTC.After(to404) {
				servedIn404s++
			}
		default:
			t.Errorf("request %s through the Traefik allowing empty Services: status %d from %q (%s), want 200 from a pod or its own 503",
				e.RequestID, e.DownstreamStatus, e.OriginPod, e.ServiceAddr)
		}
	}
	if servedIn404s == 0 {
		t.Errorf("the Traefik allowing empty Services served no request while the default one answered 404 (%s to %s): it keeps the route\n%s",
			from404.Format("15:04:05.000"), to404.Format("15:04:05.000"), tallyBySecond(byID))
	}
	if own503 >= own404 {
		t.Errorf("the Traefik allowing empty Services answered %d requests 503 itself, the default one %d 404: want fewer (only the canary's share, until its weight is 0)\n%s",
			own503, own404, tallyBySecond(byID))
	}
	if empty.Totals.Failed != own503 {
		t.Errorf("path %s: rollprobe counted %d failed %v, Traefik answered %d requests 503 itself", empty.Name, empty.Totals.Failed, nonZero(empty.Totals.ByClass), own503)
	}
	for _, f := range r.rep.Failures {
		if f.Path != empty.Name {
			continue
		}
		if e, ok := byID[f.RequestID]; !ok || e.DownstreamStatus != 503 || e.ServiceAddr != "" {
			t.Errorf("failure %s on %s (%s %d): Traefik's line %+v, want its own 503", f.RequestID, empty.Name, f.Class, f.Status, e)
		}
		// No pod took part: the run says so from the response (no
		// X-Pod-Name) and the pod unready beside no pod terminating.
		if f.LikelyPod != "" || !strings.Contains(f.Context, "was unready and no pod was terminating") {
			t.Errorf("failure %s on %s put on %q (%s): Traefik answered it, no pod did", f.RequestID, empty.Name, f.LikelyPod, f.Context)
		}
	}
	if own503 > 0 {
		if fd := findingByID(r.rep, "edge-had-no-backend"); fd == nil || !strings.Contains(strings.Join(fd.Evidence, "\n"), "through the edge with status 503 and without X-Pod-Name") {
			t.Errorf("edge-had-no-backend %+v: want its line for the 503s", fd)
		}
	}
	t.Logf("through the Traefik allowing empty Services: %d requests answered 503 by it, %d served from %s to %s (the default Traefik's 404s)",
		own503, servedIn404s, from404.Format("15:04:05.000"), to404.Format("15:04:05.000"))
	return own503
}

// tallyBySecond sums an access log's requests by the second they began
// in, by status and by the pod that answered (OriginPod, "-" for none): what
// a failed check shows of the edge's answers over the run.
func tallyBySecond(byID map[string]accessEntry) string {
	type key struct {
		sec    int64
		status int
		pod    string
	}
	n := map[key]int{}
	for _, e := range byID {
		pod := e.OriginPod
		if pod == "" {
			pod = "-"
		}
		n[key{e.StartUTC.Unix(), e.DownstreamStatus, pod}]++
	}
	keys := slices.Collect(maps.Keys(n))
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.sec, b.sec), cmp.Compare(a.status, b.status), strings.Compare(a.pod, b.pod))
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d %s: %d\n", time.Unix(k.sec, 0).UTC().Format("15:04:05"), k.status, k.pod, n[k])
	}
	return b.String()
}

// deleteSampleAtEnd deletes, when the test ends however it ends, the
// Rollout and the Service named sample and, if given, the Deployment the
// Rollout takes its template from: a sample whose pods would stay beside
// the tests after (the drains count the pods on a node). Registered before
// the sample is applied; what was never made is no error.
func deleteSampleAtEnd(t *testing.T, c *lab.Client, sample, deployment string) {
	t.Cleanup(func() {
		ctx := context.Background()
		deletes := map[string]func() error{
			"rollout " + sample: func() error {
				return c.Dynamic.Resource(rollout.RolloutsGVR).Namespace("default").Delete(ctx, sample, metav1.DeleteOptions{})
			},
			"service " + sample: func() error { return c.Kube.CoreV1().Services("default").Delete(ctx, sample, metav1.DeleteOptions{}) },
		}
		if deployment != "" {
			deletes["deployment "+deployment] = func() error {
				return c.Kube.AppsV1().Deployments("default").Delete(ctx, deployment, metav1.DeleteOptions{})
			}
		}
		for what, del := range deletes {
			if err := del(); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s: %v", what, err)
			}
		}
	})
}

// testArgoAbort: a routed canary of naive pods aborted at its 25% pause,
// probed through the ingress of a lab whose edge hears of the API 3 s late
// (--edge-lag). The abort moves the weights back to the stable pods and
// the controller deletes the canary's pod 1 s later
// (abortScaleDownDelaySeconds: 1), while Traefik, still on the old
// weights, sends it requests: the way back drops them. The run follows
// the abort until the canary's pods are gone (aborted_pods_gone), exits 3
// (the rollout failed), and puts every failure on the aborted revision's
// pod, after the abort, as Traefik's access log says; the doctor's check
// warned of the 1 s delay before any traffic.
func testArgoAbort(t *testing.T, ctx context.Context, c *lab.Client) {
	const sample = "argo-canary-abort"
	run, hub := startAbortSampleRun(t, ctx, c, sample)
	// At the pause, once the lagging edge has had the 25% for a while
	// (3 s lag, 2 s throttle), abort as kubectl argo rollouts abort does.
	run.waitFor(t, "waiting for a promote")
	time.Sleep(8 * time.Second)
	abortedAt := time.Now()
	if _, err := c.Dynamic.Resource(argoRolloutsGVR).Namespace("default").Patch(ctx, sample, types.MergePatchType,
		[]byte(`{"status":{"abort":true}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	checkAbortWayBack(t, run.wait(t), hub, sample, "canary", abortedAt)
}

// testArgoBlueGreenAbort: a blue/green of naive pods whose post-promotion
// smoke test (an AnalysisTemplate's Job) fails, probed through the ingress
// of the lab whose edge lags 3 s. The run promotes it; Argo switches the
// active Service to the new pods, runs the Job, and on its failure aborts
// by itself: the Service switches back to the old pods (still up: the old
// ReplicaSet waits for the analysis) and the new ones go 1 s later
// (abortScaleDownDelaySeconds: 1), while Traefik, not yet told, sends them
// requests. The abort's finding must claim those (not the blue/green
// switch's, whose rule would otherwise take a switch followed by
// deletions), with the blueGreen field; Traefik's log is the referee.
func testArgoBlueGreenAbort(t *testing.T, ctx context.Context, c *lab.Client) {
	const sample = "argo-bluegreen-abort"
	run, hub := startAbortSampleRun(t, ctx, c, sample, "--promote")
	r := run.wait(t)
	// The switch to the new pods, then the switch back: the abort, as the
	// Rollout's status (activeSelector) shows it.
	var switches []report.Event
	for _, e := range r.rep.Timeline {
		if e.Kind == report.ActiveSwitched {
			switches = append(switches, e)
		}
	}
	ro := r.rep.Rollout
	if ro == nil || len(switches) != 2 || switches[0].Revision != ro.NewRevision || switches[1].Revision != ro.OldRevision {
		t.Fatalf("rollout %+v, switches %+v: want one to the new revision, then one back to the old\n%s", ro, switches, r.out())
	}
	if !strings.Contains(ro.Message, "smoke") {
		t.Errorf("rollout message %q: want the failed analysis's metric named", ro.Message)
	}
	checkAbortWayBack(t, r, hub, sample, "blueGreen", switches[1].At.Add(-switchSeenLate))
	if f := findingByID(r.rep, "bluegreen-scale-down-before-propagation"); f != nil {
		t.Errorf("the blue/green switch's finding claims the abort's failures: %+v", f)
	}
}

// startAbortSampleRun readies an Argo sample routed through the ingress
// (SAMPLE.lab.example), its objects deleted at the test's end (an aborted
// Rollout stays Degraded: the next test's would not start), and starts a
// run on it through the ingress with a new connection a request, reading
// Traefik's access log; hub captures the edge's handshakes.
func startAbortSampleRun(t *testing.T, ctx context.Context, c *lab.Client, sample string, args ...string) (*startedRun, *capture.Capture) {
	t.Helper()
	cfg := lab.Config{StateDir: stateDir}
	ensureWorkload(t, ctx, c, rollout.KindRollout, sample)
	t.Cleanup(func() { deleteArgoSample(t, sample) })
	target := "https://" + sample + ".lab.example/"
	waitEdge(t, target, cfg.EdgeCAPath())
	hub := edgeCapture(t)
	args = append([]string{"--cacert", cfg.EdgeCAPath(), "--conn", "new", "--edge-access-log", cfg.TraefikAccessLog(), "--timeout", "3m"}, args...)
	return startWorkloadRun(t, nil, rollout.KindRollout, sample, target, args...), hub
}

// checkAbortWayBack holds an aborted rollout's run through the lagging
// edge to its referees: exit 3 with the abort in the rollout's message;
// the abort, then the aborted revision's pods gone; something dropped on
// them (beside the edge's own unfinished handshakes, held to the hub's
// capture), each such failure sent by Traefik (its access log) to a pod
// of the aborted revision, caused no sooner than abortedAt and put on no
// other pod; the abort's finding claiming them all with the strategy's
// field, the race finding claiming none; and the doctor's warning of the
// 1 s abortScaleDownDelaySeconds, before any traffic.
func checkAbortWayBack(t *testing.T, r *runResult, hub *capture.Capture, sample, strategy string, abortedAt time.Time) {
	t.Helper()
	cfg := lab.Config{StateDir: stateDir}
	if r.repErr != nil {
		t.Fatalf("report: %v\n%s", r.repErr, r.out())
	}
	validateSchema(t, r.reportPath)
	checkPage(t, r.htmlPath, r.rep)
	if r.exit != 3 || r.rep.Rollout.Status != report.StatusFailed {
		t.Fatalf("exit %d: want 3 (the rollout was aborted)\n%s", r.exit, r.out())
	}
	var gone *report.Event
	failedAt := time.Time{}
	for i, e := range r.rep.Timeline {
		switch e.Kind {
		case report.AbortedPodsGone:
			gone = &r.rep.Timeline[i]
		case report.RolloutFailed:
			failedAt = e.At
		}
	}
	if gone == nil || failedAt.IsZero() || gone.At.Before(failedAt) || !strings.Contains(r.rep.Rollout.Message, "RolloutAborted") || gone.Revision != r.rep.Rollout.NewRevision {
		t.Fatalf("rollout %+v, failed at %s, aborted pods gone %+v: want the abort, then its pods gone\n%s", r.rep.Rollout, failedAt, gone, r.out())
	}
	aborted := map[string]bool{}
	for _, p := range r.rep.Pods {
		if p.Revision == gone.Revision {
			aborted[p.Pod] = true
		}
	}
	if len(aborted) == 0 {
		t.Fatalf("no pod of the aborted revision %s in %+v", gone.Revision, r.rep.Pods)
	}
	sentTo := refereeAccessLog(t, cfg, r.rep, sample+".lab.example")
	edgeOwn := heldAtTheEdge(t, r, hub)
	onPods := r.rep.Totals.Failed - edgeOwn
	if onPods == 0 {
		t.Fatalf("nothing dropped on the way back (edge's own %d): the edge lags 3 s, the pods went 1 s after the abort\n%s", edgeOwn, r.out())
	}
	for _, f := range r.rep.Failures {
		if edgeOwnClass(f.Class) {
			continue // the edge's own, held to the capture above
		}
		if hit := sentTo[f.RequestID]; !aborted[hit] {
			t.Errorf("%s (%s): Traefik sent it to %q, not a pod of the aborted revision", f.RequestID, f.Class, hit)
		}
		if causedBy(f).Before(abortedAt) {
			t.Errorf("%s (%s) caused by %s, before the abort at %s", f.RequestID, f.Class, causedBy(f), abortedAt)
		}
		if f.LikelyPod != "" && !aborted[f.LikelyPod] {
			t.Errorf("%s (%s) put on %q, not a pod of the aborted revision", f.RequestID, f.Class, f.LikelyPod)
		}
	}
	// The run's own finding: the abort's way back raced the move back,
	// every failure on the pods claimed, the abort's delay the fix.
	f := findingByID(r.rep, "abort-scale-down-before-propagation")
	if f == nil {
		t.Fatalf("findings %v: want the abort's\n%s", findingIDs(r.rep), r.out())
	}
	if want := nRequests(onPods) + " failed ("; !strings.Contains(strings.Join(f.Evidence, "\n"), want) {
		t.Errorf("the finding does not claim all %d failures on pods:\n%s", onPods, strings.Join(f.Evidence, "\n"))
	}
	if want := `{"spec":{"strategy":{"` + strategy + `":{"abortScaleDownDelaySeconds":`; !strings.Contains(f.Fix, want) {
		t.Errorf("fix %q: want the %s's abortScaleDownDelaySeconds", f.Fix, strategy)
	}
	if findingByID(r.rep, "stops-accepting-before-endpoints-propagate") != nil {
		t.Errorf("findings %v: the race finding claims what the abort's does", findingIDs(r.rep))
	}
	// The doctor's check read the 1 s delay before any traffic: a warning
	// (only an abort meets it), with the patch that covers it.
	d := findingByID(r.rep, "scale-down-delay-below-propagation")
	if d == nil || d.Source != report.SourceDoctor || d.Severity != report.SeverityWarning ||
		!strings.Contains(strings.Join(d.Evidence, "\n"), "abortScaleDownDelaySeconds: 1") || !strings.Contains(d.Fix, `"`+strategy+`":{"abortScaleDownDelaySeconds":30`) {
		t.Errorf("the doctor's abort check: %+v", d)
	}
	t.Logf("aborted at %s: %d failed on the way back (%d the edge's own, %v), the aborted pods gone %.1fs after the abort; findings %v",
		abortedAt.Sub(r.rep.StartedAt).Round(10*time.Millisecond), r.rep.Totals.Failed, edgeOwn, nonZero(r.rep.Totals.ByClass), gone.At.Sub(abortedAt).Seconds(), findingIDs(r.rep))
	t.Logf("%s: %s; fix: %s", f.Title, strings.Join(f.Evidence, "; "), f.Fix)
}

var argoRolloutsGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}

// deleteArgoSample deletes what an Argo sample's manifest made (its
// Rollout, Services, routes, AnalysisTemplate; what the controller made
// for them, ReplicaSets, AnalysisRuns and their Jobs, goes with the
// Rollout that owns them), as kubectl delete -f does.
func deleteArgoSample(t *testing.T, sample string) {
	if out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", "kubectl", "delete", "-n", "default",
		"--ignore-not-found", "--wait=false", "-f", filepath.Join("manifests", sample+".yaml")); err != nil {
		t.Errorf("delete %s: %v\n%s", sample, err, out)
	}
}

// startTraefikAllowingEmpty starts the second Traefik, with
// allowEmptyServices=true, for the test's life, and returns host's URL
// through it once it serves there.
func startTraefikAllowingEmpty(t *testing.T, ctx context.Context, host string) string {
	t.Helper()
	cfg := lab.Config{StateDir: stateDir}
	stop, err := cfg.StartTraefikAllowingEmptyServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	url := fmt.Sprintf("https://%s:%d/", host, lab.AllowEmptyEdgePort)
	waitEdge(t, url, cfg.EdgeCAPath())
	return url
}

// nRequests is how findings count requests: "1 request", "3 requests".
func nRequests[N ~int | ~uint64](n N) string {
	if n == 1 {
		return "1 request"
	}
	return fmt.Sprintf("%d requests", n)
}

// testArgoScaleIn scales argo-canary from 4 replicas to 2 through the
// Rollout's scale subresource, as kubectl scale and autoscalers do: the
// Argo Rollouts controller removes two pods of the one revision, each
// stopping gracefully, and nothing drops. The API is the referee of which
// pods went (checkScaled). The sample goes back to 4 replicas after.
func testArgoScaleIn(t *testing.T, ctx context.Context, c *lab.Client) {
	ip := ensureWorkload(t, ctx, c, rollout.KindRollout, "argo-canary")
	t.Cleanup(func() {
		patch := []byte(`{"spec":{"replicas":4}}`)
		if _, err := c.Dynamic.Resource(rollout.RolloutsGVR).Namespace("default").Patch(context.Background(), "argo-canary", types.MergePatchType, patch, metav1.PatchOptions{}, "scale"); err != nil {
			t.Errorf("scaling argo-canary back: %v", err)
		}
		ensureWorkload(t, context.Background(), c, rollout.KindRollout, "argo-canary")
	})
	r := startWorkloadRun(t, nil, rollout.KindRollout, "argo-canary", "http://"+ip+"/", "--scale", "2").wait(t)
	if r.repErr != nil {
		t.Fatalf("exit %d, no report: %v\n%s", r.exit, r.repErr, r.out())
	}
	checkClean(t, r)
	removed := checkScaled(t, c, r, 4, 2)
	if ro := r.rep.Rollout; ro.Kind != "Rollout" || ro.Status != report.StatusComplete {
		t.Errorf("rollout section %+v", ro)
	}
	t.Logf("exit %d, %d failed of %d, removed %v", r.exit, r.rep.Totals.Failed, r.rep.Totals.Sent, removed)
}
