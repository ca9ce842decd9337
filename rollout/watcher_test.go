package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/report"
)

func waitKinds(t *testing.T, tl *Timeline, want ...report.EventKind) []report.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got []report.EventKind
		for _, e := range tl.Events() {
			got = append(got, e.Kind)
		}
		if containsInOrder(got, want) {
			return tl.Events()
		}
		if time.Now().After(deadline) {
			t.Fatalf("timeline %v lacks, in order, %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startWatcher starts a watcher on the fake clientset, stopped with the test.
func startWatcher(t *testing.T, ctx context.Context, kube *fake.Clientset, d *appsv1.Deployment, svc *corev1.Service) *Timeline {
	t.Helper()
	_, tl := startWatcherOn(t, ctx, kube, &Target{Namespace: "prod", Workload: Workload{Deployment: d}, Service: svc})
	return tl
}

// startWatcherOn starts a watcher of any target, stopped with the test.
func startWatcherOn(t *testing.T, ctx context.Context, kube kubernetes.Interface, target *Target) (*Watcher, *Timeline) {
	t.Helper()
	tl := NewTimeline(nil)
	w, err := NewWatcher(kube, target, tl)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w, tl
}

func containsInOrder(got, want []report.EventKind) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// The pods there when watching began are in the timeline when Start
// returns, before any probe starts: a run once showed two of four pods
// present from the first as ready at +0.00s, not before, their present
// events recorded after the prober's start.
func TestWatcherStartReturnsWithThePodsPresent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := webDeployment()
	svc := service("web", map[string]string{"app": "web"})
	objs := []runtime.Object{d, svc}
	const n = 400 // enough that handing them over takes a while
	for i := range n {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-abc-%d", i), Namespace: "prod",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)), Labels: map[string]string{"app": "web", PodTemplateHashLabel: "abc"}}})
	}
	tl := startWatcher(t, ctx, fake.NewClientset(objs...), d, svc)
	present := 0
	for _, e := range tl.Events() {
		if e.Kind == report.PodPresent {
			present++
		}
	}
	if present != n {
		t.Fatalf("%d of the %d pods present in the timeline when Start returned", present, n)
	}
}

// TestWatcherRecordsPodLifecycle drives a pod through its life on a fake
// clientset and checks the timeline records each step, in order, with the
// facts the analysis needs (exit code, grace, revision, IP).
func TestWatcherRecordsPodLifecycle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := webDeployment()
	svc := service("web", map[string]string{"app": "web"})
	svc.Spec.Ports = []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}
	kube := fake.NewClientset(d, svc)
	tl := startWatcher(t, ctx, kube, d, svc)

	pods := kube.CoreV1().Pods("prod")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-abc-1", Namespace: "prod", CreationTimestamp: metav1.Now(),
		Labels: map[string]string{"app": "web", PodTemplateHashLabel: "abc"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}}}}}}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Spec.NodeName = "node-1"
	pod.Status = corev1.PodStatus{PodIP: "10.0.0.5",
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}},
	}
	update := func() {
		t.Helper()
		if _, err := pods.Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update()
	waitKinds(t, tl, report.PodCreated, report.PodScheduled, report.ContainerStarted, report.PodReady)

	slices := kube.DiscoveryV1().EndpointSlices("prod")
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-x", Namespace: "prod", Labels: map[string]string{ServiceNameLabel: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.5"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod.Name},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}},
	}
	if _, err := slices.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKinds(t, tl, report.EndpointAdded)

	// Deletion requested with a 30 s grace period; the endpoint turns
	// not-ready but keeps serving (readiness still passes) and terminating.
	deadline := metav1.NewTime(time.Now().Add(30 * time.Second))
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &deadline, ptr.To[int64](30)
	update()
	slice.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	if _, err := slices.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions[0].Status = corev1.ConditionFalse
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: metav1.Now()}}
	update()
	slice.Endpoints = nil
	if _, err := slices.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pod and EndpointSlice events come through different informers: each
	// stream is ordered, their interleaving is not.
	waitKinds(t, tl, report.PodDeletionRequested, report.ContainerTerminated, report.PodUnready, report.PodGone)
	events := waitKinds(t, tl, report.EndpointAdded, report.EndpointUnready, report.EndpointTerminating, report.EndpointRemoved)

	for _, e := range events {
		switch e.Kind {
		case report.PodDeletionRequested:
			if e.Detail != "grace 30s, preStop sleep 3s" || e.PreStopSleepS != 3 || e.GracePeriodS == nil || *e.GracePeriodS != 30 || e.Server == nil || time.Until(*e.Server) > 2*time.Second {
				t.Errorf("deletion event %+v: want the request time (deadline minus grace), the grace period and the preStop sleep", e)
			}
		case report.ContainerTerminated:
			if e.ExitCode == nil || *e.ExitCode != 137 || e.Reason != "Error" || e.Container != "app" || !e.ServicePort {
				t.Errorf("terminated event %+v", e)
			}
		case report.EndpointUnready:
			if e.Pod != pod.Name || e.IP != "10.0.0.5" || e.Ready || !e.Serving || !e.Terminating || e.Detail != "" {
				t.Errorf("endpoint event %+v", e)
			}
		}
		if e.At.IsZero() {
			t.Errorf("event %s without receive time", e.Kind)
		}
		if e.Pod != "" && e.Kind != report.EndpointUnready && e.Kind != report.EndpointAdded && e.Kind != report.EndpointTerminating && e.Kind != report.EndpointRemoved && e.Revision != "abc" {
			t.Errorf("%s: revision %q, want abc", e.Kind, e.Revision)
		}
	}
	if got := len(Kinds(events, report.EndpointServing, report.EndpointNotServing)); got != 0 {
		t.Errorf("serving never changed, yet %d serving events", got)
	}
}

func TestTimelineSince(t *testing.T) {
	tl := NewTimeline(func() time.Time { return time.Unix(100, 0) })
	for i := 0; i < 3; i++ {
		tl.Add(report.Event{Kind: report.PodCreated, Pod: fmt.Sprint(i)})
	}
	if got := tl.Since(1); len(got) != 2 || got[0].Pod != "1" || !got[0].At.Equal(time.Unix(100, 0)) {
		t.Fatalf("Since(1) = %+v", got)
	}
	if tl.Since(3) != nil {
		t.Fatal("Since(len) must be empty")
	}
}

// A pods watch that breaks is recorded in the timeline and resumed: pod
// events after the break still arrive.
func TestWatcherRecordsAndResumesABrokenWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := webDeployment()
	svc := service("web", map[string]string{"app": "web"})
	kube := fake.NewClientset(d, svc)
	var broken atomic.Bool
	kube.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if broken.CompareAndSwap(false, true) {
			return true, nil, errors.New("stream error: connection reset by peer")
		}
		return false, nil, nil
	})
	tl := startWatcher(t, ctx, kube, d, svc)
	waitKinds(t, tl, report.WatchError)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-abc-1", Namespace: "prod", CreationTimestamp: metav1.Now(),
		Labels: map[string]string{"app": "web", PodTemplateHashLabel: "abc"}}}
	if _, err := kube.CoreV1().Pods("prod").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	events := waitKinds(t, tl, report.WatchError, report.PodCreated)
	for _, e := range events {
		if e.Kind == report.WatchError && !strings.Contains(e.Detail, "pods watch") {
			t.Errorf("watch error %q does not say which watch broke", e.Detail)
		}
	}
}
