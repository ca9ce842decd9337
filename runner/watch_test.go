package runner

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/rollout"
)

// whenRolling runs then once the run's watch is waiting (its phase is
// rolling), or fails the test after 10 s.
func whenRolling(t *testing.T, r *Run, then func()) {
	t.Helper()
	live := r.Live()
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for live.Phase() != PhaseRolling && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		then()
	}()
}

// startWatch starts run --watch on kube, waiting up to wait for a change;
// its log is returned beside it.
func startWatch(t *testing.T, kube *fake.Clientset, wait time.Duration) (*Run, *bytes.Buffer) {
	t.Helper()
	cfg := config(t, kube, "/ok")
	cfg.Trigger = rollout.Watch{}
	cfg.Wait, cfg.Timeout = wait, 20*time.Second
	log := &bytes.Buffer{}
	cfg.Log = log
	r, err := StartRollout(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, log
}

// setStatus writes the Deployment's status as its controller would.
func setStatus(kube *fake.Clientset, status func(*appsv1.Deployment) appsv1.DeploymentStatus) {
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	obj, err := kube.Tracker().Get(gvr, "prod", "web")
	if err != nil {
		return
	}
	dep := obj.(*appsv1.Deployment).DeepCopy()
	dep.Status = status(dep)
	_ = kube.Tracker().Update(gvr, dep, "prod")
}

// secondRevisionRolling is web rolling from revision 1 (h1) to 2 (h2): two
// of its three pods of h2, web-a still of h1. done: its status done,
// web-a terminating (the rollout's tail); else its status says 2 of 3
// updated.
func secondRevisionRolling(done bool) []runtime.Object {
	d, svc := objects()
	d.UID = "d1"
	d.Annotations = map[string]string{rollout.RevisionAnnotation: "2"}
	if !done {
		d.Status.UpdatedReplicas, d.Status.AvailableReplicas = 2, 2
	}
	objs := []runtime.Object{d, svc}
	for rev, hash := range []string{"h1", "h2"} {
		objs = append(objs, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-" + hash, Namespace: "prod",
			Labels:          map[string]string{"app": "web", rollout.PodTemplateHashLabel: hash},
			Annotations:     map[string]string{rollout.RevisionAnnotation: fmt.Sprint(rev + 1)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d1", Controller: ptr.To(true)}}}})
	}
	for name, hash := range map[string]string{"web-a": "h1", "web-b": "h2", "web-c": "h2"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod",
			Labels: map[string]string{"app": "web", rollout.PodTemplateHashLabel: hash}}}
		if done && hash == "h1" {
			p.DeletionTimestamp = ptr.To(metav1.Now())
		}
		objs = append(objs, p)
	}
	return objs
}

// A pod gone unavailable while a watch waits (a crash, an eviction)
// changes no spec: it starts no rollout. Taken for one, the run waited
// for a new generation until --timeout and failed, "not finished: deployment
// successfully rolled out" (exit 3).
func TestWatchIsNotStartedByAPodGoneUnavailable(t *testing.T) {
	kube := fakeKube(nil, revisionedWeb()...)
	r, log := startWatch(t, kube, 2*time.Second)
	whenRolling(t, r, func() {
		setStatus(kube, func(d *appsv1.Deployment) appsv1.DeploymentStatus {
			s := observed(d)
			s.AvailableReplicas, s.ReadyReplicas = 2, 2
			return s
		})
		time.AfterFunc(500*time.Millisecond, func() { setStatus(kube, observed) })
	})
	rep, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if ro := rep.Rollout; ro.Status != report.StatusNotStarted || !strings.Contains(ro.Message, "no rollout started within the 2s wait") || ro.Change != "" {
		t.Fatalf("rollout %+v\n%s", ro, log.String())
	}
	if strings.Contains(log.String(), "rollprobe: a rollout started\n") || strings.Contains(log.String(), "following the change") {
		t.Errorf("log %q: a pod's unavailability followed as a change", log.String())
	}
}

// A watch that begins mid-rollout (what run suggests when it refuses to
// trigger then) follows that rollout to its end: its generation, the one
// at the start, is the one to finish, and what it changed is unknown.
// Waiting for a newer generation, the run failed at --timeout (exit 3).
// A rollout already done whose old pod is still terminating is not one
// in progress (a trigger would be let start the next): the watch waits
// for the next change.
func TestWatchFollowsTheRolloutInProgress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		done   bool
		follow string // the log's line, "" for not followed
	}{
		{"its status not done", false, "following the change already in progress when the watch began (2 out of 3 new replicas have been updated): its start was not probed"},
		{"done, an old pod terminating", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fakeKube(nil, secondRevisionRolling(tc.done)...)
			r, log := startWatch(t, kube, 2*time.Second)
			whenRolling(t, r, func() {
				time.AfterFunc(300*time.Millisecond, func() {
					_ = kube.CoreV1().Pods("prod").Delete(context.Background(), "web-a", metav1.DeleteOptions{})
					setStatus(kube, observed)
				})
			})
			rep, err := r.Wait()
			if err != nil {
				t.Fatal(err)
			}
			ro := rep.Rollout
			if tc.follow == "" {
				if ro.Status != report.StatusNotStarted || strings.Contains(log.String(), "following the change") {
					t.Fatalf("rollout %+v: a done rollout's tail followed\n%s", ro, log.String())
				}
				return
			}
			if ro.Status != report.StatusComplete || ro.Change != "" || ro.OldRevision != "h1" || ro.NewRevision != "h2" || ro.OldPodsGoneAt == nil || rep.Verdict.ExitCode != exitcode.OK {
				t.Fatalf("rollout %+v, verdict %+v\n%s", ro, rep.Verdict, log.String())
			}
			if !strings.Contains(log.String(), tc.follow) {
				t.Errorf("log %q: want %q", log.String(), tc.follow)
			}
		})
	}
}

// A watched write that changed the spec but neither the pod template nor
// the replicas (minReadySeconds) ends on the revision it began at: the
// report does not say it made a new revision.
func TestWatchedSpecChangeWithoutANewRevision(t *testing.T) {
	kube := fakeKube(nil, revisionedWeb()...)
	r, _ := startWatch(t, kube, 5*time.Second)
	whenRolling(t, r, func() {
		gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
		obj, err := kube.Tracker().Get(gvr, "prod", "web")
		if err != nil {
			return
		}
		dep := obj.(*appsv1.Deployment).DeepCopy()
		dep.Generation++ // the fake API server bumps none
		dep.Spec.MinReadySeconds = 5
		dep.Status = observed(dep)
		_ = kube.Tracker().Update(gvr, dep, "prod")
	})
	rep, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if ro := rep.Rollout; ro.Status != report.StatusComplete || ro.OldRevision != "h1" || ro.NewRevision != "h1" || ro.Change != "" {
		t.Fatalf("rollout %+v: want complete on revision h1, no change said", ro)
	}
}

// A watch begun mid-rollout whose rollout ends during the baseline is at
// rest when the follow judges it, and waits for the next change: the
// report's old revision is the one the workload then rests on, not the one
// that was going when the watch began (judged before the baseline, it was
// reported for a change the run never followed).
func TestWatchWhoseRolloutEndsInTheBaseline(t *testing.T) {
	kube := fakeKube(nil, secondRevisionRolling(false)...)
	cfg := config(t, kube, "/ok")
	cfg.Trigger = rollout.Watch{}
	// The baseline outlasts the watcher's hearing of the end (in-process,
	// milliseconds); the test fails, not passes, if it did not.
	cfg.Baseline, cfg.Wait, cfg.Timeout = time.Second, 500*time.Millisecond, 20*time.Second
	log := &bytes.Buffer{}
	cfg.Log = log
	r, err := StartRollout(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if old, _ := r.Live().Revisions(); old != "h1" {
		t.Errorf("live old revision %q during the baseline, want h1 (the revision going)", old)
	}
	if err := kube.CoreV1().Pods("prod").Delete(context.Background(), "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setStatus(kube, observed)
	live := r.Live()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		wl, _ := live.Workload()
		if wl.Progress().Done && len(r.live.watcher.Pods()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher never saw the rollout end")
		}
	}
	if ph := live.Phase(); ph != PhaseBaseline {
		t.Fatalf("the rollout's end was seen in phase %q, not during the baseline: the test proves nothing", ph)
	}
	rep, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if ro := rep.Rollout; ro.Status != report.StatusNotStarted || ro.OldRevision != "h2" {
		t.Fatalf("rollout %+v: want not started, old revision h2 (the one at rest)\n%s", ro, log.String())
	}
	if strings.Contains(log.String(), "following the change") {
		t.Errorf("log %q: a rollout that ended in the baseline followed", log.String())
	}
}
