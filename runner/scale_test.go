package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/rollout"
)

// webPods are the Deployment's three pods, as the watch lists them.
func webPods() []runtime.Object {
	var pods []runtime.Object
	for _, name := range []string{"web-a", "web-b", "web-c"} {
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod",
			Labels: map[string]string{"app": "web", rollout.PodTemplateHashLabel: "h1"}}})
	}
	return pods
}

// A scale the preflight refuses changes nothing: one an autoscaler would
// undo, one to the replicas the workload has, one without the permission
// on the scale subresource.
func TestScalePreflightChangesNothing(t *testing.T) {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: ptr.To[int32](2), MaxReplicas: 6,
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}}}
	for _, tc := range []struct {
		name     string
		replicas int32
		denied   map[string]bool
		extra    []runtime.Object
		want     string
	}{
		{"under an autoscaler", 1, nil, []runtime.Object{hpa}, "horizontalpodautoscaler web (2 to 6 replicas) scales deployment prod/web: it would undo the scale"},
		{"to the same count", 3, nil, nil, "deployment web wants 3 replicas: a scale to the replicas it already has changes nothing"},
		{"no permission", 1, map[string]bool{"patch deployments/scale.apps": true}, nil, "missing permissions in namespace prod: patch deployments/scale.apps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, svc := objects()
			kube := fakeKube(tc.denied, append([]runtime.Object{d, svc}, tc.extra...)...)
			cfg := config(t, kube, "/ok")
			cfg.Trigger = rollout.Scale{Replicas: tc.replicas}
			rep, err := run(context.Background(), cfg)
			if rep != nil || exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("report %v, error %v (exit %d), want exit 2 saying %q", rep != nil, err, exitcode.Of(err), tc.want)
			}
			if w := writes(kube); len(w) > 0 {
				t.Fatalf("preflight failed, yet it wrote: %v", w)
			}
		})
	}
}

// revisionedWeb is the Deployment with its Service, its ReplicaSet of
// revision 1 (the watch's NewRevision needs one) and webPods.
func revisionedWeb() []runtime.Object {
	d, svc := objects()
	d.UID = "d1"
	d.Annotations = map[string]string{rollout.RevisionAnnotation: "1"}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-h1", Namespace: "prod",
		Labels:          map[string]string{"app": "web", rollout.PodTemplateHashLabel: "h1"},
		Annotations:     map[string]string{rollout.RevisionAnnotation: "1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d1", Controller: ptr.To(true)}}}}
	return append([]runtime.Object{d, svc, rs}, webPods()...)
}

// goneDetail is the detail of the report's all_old_pods_gone event.
func goneDetail(rep *report.Report) string {
	for _, e := range rep.Timeline {
		if e.Kind == report.AllOldPodsGone {
			return e.Detail
		}
	}
	return ""
}

// onScale applies a scale of the Deployment as the apiserver does (the
// fake alone bumps no generation) and its controller's status at once,
// then runs then after delay, or, for a delay of 0, before the patch
// returns (the fake has no controllers: then plays their part).
func onScale(kube *fake.Clientset, delay time.Duration, then func()) {
	kube.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != rollout.ScaleSubresource {
			return false, nil, nil
		}
		pa := a.(k8stesting.PatchAction)
		var p struct {
			Spec struct{ Replicas int32 }
		}
		if err := json.Unmarshal(pa.GetPatch(), &p); err != nil {
			return true, nil, err
		}
		obj, err := kube.Tracker().Get(a.GetResource(), a.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		dep := obj.(*appsv1.Deployment).DeepCopy()
		dep.Generation++
		dep.Spec.Replicas = ptr.To(p.Spec.Replicas)
		dep.Status = observed(dep)
		if err := kube.Tracker().Update(a.GetResource(), dep, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		if delay == 0 {
			then()
			// The patch returns once the watch could deliver both
			// writes: the follow's first read is of the later one.
			time.Sleep(300 * time.Millisecond)
		} else {
			time.AfterFunc(delay, then)
		}
		return true, dep, nil // what the typed fake wants back
	})
}

// scaleBack is another hand setting the Deployment's replicas, a new
// generation as the apiserver makes one. It writes through the tracker:
// onScale may call it inside a reactor, where the clientset is locked.
func scaleBack(kube *fake.Clientset, replicas int32) {
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	obj, err := kube.Tracker().Get(gvr, "prod", "web")
	if err != nil {
		return
	}
	dep := obj.(*appsv1.Deployment).DeepCopy()
	dep.Generation++
	dep.Spec.Replicas = ptr.To(replicas)
	dep.Status = observed(dep)
	_ = kube.Tracker().Update(gvr, dep, "prod")
}

// observed is the status the Deployment controller would write once it
// ran dep's replicas, each ready.
func observed(dep *appsv1.Deployment) appsv1.DeploymentStatus {
	n := *dep.Spec.Replicas
	return appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
}

// A scale-in is followed until the pod it removed is gone, not only until
// the Deployment's status (which counts no terminating pod) is complete.
func TestScaleIsFollowedUntilTheRemovedPodIsGone(t *testing.T) {
	d, svc := objects()
	kube := fakeKube(nil, append([]runtime.Object{d, svc}, webPods()...)...)
	var goneAt time.Time
	var during Phase // the live phase while the scale's pod goes
	started := make(chan Live, 1)
	onScale(kube, 200*time.Millisecond, func() {
		during = (<-started).Phase()
		goneAt = time.Now()
		_ = kube.CoreV1().Pods("prod").Delete(context.Background(), "web-c", metav1.DeleteOptions{})
	})
	cfg := config(t, kube, "/ok")
	cfg.Trigger = rollout.Scale{Replicas: 2}
	r, err := StartRollout(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	started <- r.Live()
	rep, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if during != PhaseScaling {
		t.Errorf("phase %q while the scale went on, want %q", during, PhaseScaling)
	}
	ro := rep.Rollout
	if ro.Status != report.StatusComplete || ro.Trigger != "scale from 3 replicas to 2 (kubectl scale --replicas=2)" || ro.Change != report.ChangeScale || ro.OldRevision != ro.NewRevision {
		t.Fatalf("rollout %+v", ro)
	}
	if goneAt.IsZero() || ro.OldPodsGoneAt == nil || ro.OldPodsGoneAt.Before(goneAt) {
		t.Fatalf("old pods gone at %v, the pod deleted at %v: the run ended before the scale's pod was gone", ro.OldPodsGoneAt, goneAt)
	}
	if ro.TriggerSeenAfterMS <= 0 {
		t.Errorf("trigger seen after %v ms", ro.TriggerSeenAfterMS)
	}
	if gone := goneDetail(rep); gone != "every pod the scale removed is gone" {
		t.Errorf("all_old_pods_gone %q", gone)
	}
	validate(t, rep)
}

// Something else scaling the workload back (an autoscaler the preflight
// could not see) makes the scale's end unmeasurable: a failed rollout
// (exit 3) that says why, not a wait until --timeout.
func TestScaleUndoneByAnotherHand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{
		{"after the follow saw the scale", 200 * time.Millisecond},
		// Both writes are in before the follow first reads the workload:
		// only the watch's record of each generation shows the scale.
		{"before the follow looked", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, svc := objects()
			kube := fakeKube(nil, d, svc)
			onScale(kube, tc.after, func() { scaleBack(kube, 3) })
			cfg := config(t, kube, "/ok")
			cfg.Trigger = rollout.Scale{Replicas: 1}
			cfg.Timeout = time.Minute
			start := time.Now()
			rep, err := run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Rollout.Status != report.StatusFailed || rep.Verdict.ExitCode != exitcode.RolloutFailed ||
				!strings.Contains(rep.Rollout.Message, "deployment prod/web wants 3 replicas again, not the 1 it was scaled to: something else scales it") {
				t.Fatalf("rollout %+v verdict %+v", rep.Rollout, rep.Verdict)
			}
			if took := time.Since(start); took > cfg.Timeout/2 {
				t.Fatalf("took %v: it waited for the timeout", took)
			}
			if rep.Rollout.TriggerSeenAfterMS <= 0 {
				t.Errorf("trigger seen after %v ms: the watch received the scale", rep.Rollout.TriggerSeenAfterMS)
			}
		})
	}
}

// A --patch (or deploy command) that scales in moves the generation but
// no revision: the run lasts until the pod it removed is gone, though no
// pod is of an old revision and the status is complete at once, and says
// it is a scale.
func TestPatchThatScalesInWaitsForTheTerminatingPod(t *testing.T) {
	kube := fakeKube(nil, revisionedWeb()...)
	var goneAt time.Time
	ctx := context.Background()
	kube.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := kube.Tracker().Get(a.GetResource(), a.GetNamespace(), "web")
		if err != nil {
			return true, nil, err
		}
		dep := obj.(*appsv1.Deployment).DeepCopy()
		dep.Generation++ // as a real apiserver does on a spec change
		dep.Spec.Replicas = ptr.To[int32](2)
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
		time.AfterFunc(200*time.Millisecond, func() {
			p, err := kube.CoreV1().Pods("prod").Get(ctx, "web-c", metav1.GetOptions{})
			if err != nil {
				return
			}
			p = p.DeepCopy()
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			_, _ = kube.CoreV1().Pods("prod").Update(ctx, p, metav1.UpdateOptions{})
			time.AfterFunc(time.Second, func() {
				goneAt = time.Now()
				_ = kube.CoreV1().Pods("prod").Delete(ctx, "web-c", metav1.DeleteOptions{})
			})
		})
		return true, dep, kube.Tracker().Update(a.GetResource(), dep, a.GetNamespace())
	})
	cfg := config(t, kube, "/ok")
	patch, err := rollout.ParsePatch([]byte(`{"spec":{"replicas":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Trigger = patch
	cfg.Timeout = 10 * time.Second
	var log bytes.Buffer
	cfg.Log = &log
	rep, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ro := rep.Rollout
	if ro.Status != report.StatusComplete || goneAt.IsZero() || ro.OldPodsGoneAt == nil || ro.OldPodsGoneAt.Before(goneAt) {
		t.Fatalf("rollout %+v, the terminating pod gone at %v: the run ended before it was", ro, goneAt)
	}
	// It wrote the replicas alone: a scale, said as one but for the
	// trigger, which is the patch the user gave.
	if ro.Change != report.ChangeScale || ro.Trigger != "strategic merge patch" {
		t.Errorf("change %q, trigger %q: the patch wrote the replicas alone", ro.Change, ro.Trigger)
	}
	for _, want := range []string{"it changed the replicas alone: a scale from 3 replicas to 2", "every pod the scale removed is gone; settling"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log %q: want %q", log.String(), want)
		}
	}
}

// A watched change that is only a scale (an autoscaler's) is said as one:
// in the log, the phase and the timeline's end; the run lasts until the
// pod it removed is gone.
func TestWatchedScaleIsSaidAsOne(t *testing.T) {
	kube := fakeKube(nil, revisionedWeb()...)
	r, log := startWatch(t, kube, 10*time.Second)
	live := r.Live()
	var during Phase
	time.AfterFunc(500*time.Millisecond, func() {
		scaleBack(kube, 2) // here the autoscaler's scale-in
		time.AfterFunc(300*time.Millisecond, func() {
			during = live.Phase()
			_ = kube.CoreV1().Pods("prod").Delete(context.Background(), "web-c", metav1.DeleteOptions{})
		})
	})
	rep, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rollout.Status != report.StatusComplete || rep.Rollout.Trigger != "watch (a scale started elsewhere: from 3 replicas to 2)" || rep.Rollout.Change != report.ChangeScale {
		t.Fatalf("rollout %+v\n%s", rep.Rollout, log.String())
	}
	for _, want := range []string{"a scale started elsewhere: from 3 replicas to 2", "the scale is done", "every pod the scale removed is gone; settling"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log %q: want %q", log.String(), want)
		}
	}
	if strings.Contains(log.String(), "rollprobe: a rollout started\n") {
		t.Errorf("log %q: a scale said as a rollout", log.String())
	}
	if during != PhaseScaling {
		t.Errorf("phase %q while the scale's pod went, want %q", during, PhaseScaling)
	}
	if gone := goneDetail(rep); gone != "every pod the scale removed is gone" {
		t.Errorf("all_old_pods_gone %q", gone)
	}
	validate(t, rep)
}

// What the report's rollout.change says: a trigger's kind when it alone
// knows (a drain, a scale, a template write), otherwise what the
// workload showed before and after (a patch, a deploy command, a watch).
func TestChangeKind(t *testing.T) {
	for _, tc := range []struct {
		trigger rollout.Trigger
		want    report.ChangeKind
	}{
		{rollout.Restart{}, report.ChangeRevision},
		{rollout.SetImage{Container: "app"}, report.ChangeRevision},
		{rollout.Drain{Node: "n1"}, report.ChangeDrain},
		{rollout.Scale{Replicas: 2}, report.ChangeScale},
		{rollout.Exec{Argv: []string{"deploy"}}, ""},
		{rollout.Patch{}, ""},
		{rollout.Watch{}, ""},
	} {
		if got := changeOf(tc.trigger); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.trigger.Describe(), got, tc.want)
		}
	}
	d, _ := objects()
	before := rollout.Workload{Deployment: d}
	scaled := d.DeepCopy()
	scaled.Spec.Replicas = ptr.To(int32(1))
	rolled := d.DeepCopy()
	rolled.Spec.Template.Annotations = map[string]string{rollout.RestartedAtAnnotation: "now"}
	var o outcome
	if o.met(before, rollout.Workload{Deployment: scaled}); o.change != report.ChangeScale || o.metScale.Change() != "from 3 replicas to 1" {
		t.Errorf("replicas alone: %q, %+v", o.change, o.metScale)
	}
	o = outcome{}
	if o.met(before, rollout.Workload{Deployment: rolled}); o.change != report.ChangeRevision || o.metScale.Replicas != 0 {
		t.Errorf("a template change: %q, %+v", o.change, o.metScale)
	}
}
