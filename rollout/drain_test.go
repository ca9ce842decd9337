package rollout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/report"
)

func nodePod(name, node, ownerKind string, annotations map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod", Annotations: annotations}, Spec: corev1.PodSpec{NodeName: node}}
	if ownerKind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: "owner", Controller: ptr.To(true), APIVersion: "apps/v1"}}
	}
	return p
}

// A drain cordons the node and evicts its pods as kubectl drain
// --ignore-daemonsets does: DaemonSet and mirror pods stay, other nodes'
// pods are not touched, and an eviction a PodDisruptionBudget refuses
// (429) is asked again until it is allowed, each refusal and acceptance
// recorded.
func TestDrainCordonsAndEvicts(t *testing.T) {
	fastEvictionRetries(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	webA := nodePod("web-a", "n1", "ReplicaSet", nil)
	webA.Labels = map[string]string{"app": "web"}
	budget := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec:   policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 2}}
	// A budget with no selector selects nothing; one in another namespace
	// is not the workload's.
	noSelector := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "none", Namespace: "prod"}, Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1))}}
	elsewhere := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "other"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromString("50%")), Selector: &metav1.LabelSelector{}}}
	webB := nodePod("web-b", "n1", "ReplicaSet", nil)
	webB.Labels = webA.Labels
	kube := fake.NewClientset(node, budget, noSelector, elsewhere,
		webA, webB, nodePod("unlabelled", "n1", "ReplicaSet", nil),
		nodePod("agent", "n1", "DaemonSet", nil), nodePod("static", "n1", "", map[string]string{MirrorPodAnnotation: "x"}),
		nodePod("web-c", "n2", "ReplicaSet", nil))
	var mu sync.Mutex
	var evicted []string
	refusals := map[string]int{}
	onEviction(kube, func(name string) error {
		if name == "web-b" && refusals[name] < 2 { // the budget allows it on the third ask
			refusals[name]++
			return budgetRefusal()
		}
		evicted = append(evicted, name)
		return nil
	})
	var events []report.Event
	d := Drain{Node: "n1", Record: func(e report.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	ctx := context.Background()
	if err := d.Prepare(ctx, kube); err != nil {
		t.Fatal(err)
	}
	if err := d.Fire(ctx, kube, Ref{Namespace: "prod", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	n, _ := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if !n.Spec.Unschedulable {
		t.Error("the node is not cordoned")
	}
	slices.Sort(evicted)
	if !slices.Equal(evicted, []string{"unlabelled", "web-a", "web-b"}) {
		t.Errorf("evicted %v, want unlabelled, web-a and web-b (not the DaemonSet's, the mirror pod or another node's)", evicted)
	}
	kinds := map[report.EventKind]int{}
	for _, e := range events {
		kinds[e.Kind]++
	}
	// The same refusal twice is recorded once.
	if kinds[report.PodEvicted] != 3 || kinds[report.EvictionRefused] != 1 {
		t.Errorf("events %+v: want 3 evictions and 1 refusal", events)
	}
	// Each eviction names the budgets that let it through; one refused
	// before says the budgets' status is the drain's start's, when they
	// refused it, not what let it go.
	for _, e := range events {
		if e.Kind != report.PodEvicted {
			continue
		}
		const web = "web (maxUnavailable: 2; 2 disruptions allowed)"
		want := map[string]string{"web-a": web, "web-b": web, "unlabelled": ""}[e.Pod]
		detail := map[string]string{"web-a": web + " let it go",
			"web-b":      web + " let it go once it allowed a disruption, after refusing it (its status as read when the drain began)",
			"unlabelled": "evicted from node n1"}[e.Pod]
		if strings.Join(e.Budgets, ",") != want || !strings.HasSuffix(e.Detail, detail) {
			t.Errorf("%s evicted with budgets %q (%s), want %q ending %q", e.Pod, e.Budgets, e.Detail, want, detail)
		}
	}
	if err := Cordon(ctx, kube, "n1", false); err != nil {
		t.Fatal(err)
	}
	if n, _ := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); n.Spec.Unschedulable {
		t.Error("uncordon left the node unschedulable")
	}
}

// A pod no controller would bring back stops the drain before anything
// changes, as does a node that does not exist.
func TestDrainRefusesUnmanagedPods(t *testing.T) {
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, nodePod("web-a", "n1", "ReplicaSet", nil), nodePod("scratch", "n1", "", nil))
	err := Drain{Node: "n1"}.Prepare(context.Background(), kube)
	if err == nil || !strings.Contains(err.Error(), "prod/scratch") {
		t.Fatalf("prepare: %v, want the unmanaged pod named", err)
	}
	if n, _ := kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{}); n.Spec.Unschedulable {
		t.Error("the node was cordoned by a refused drain")
	}
	if err := (Drain{Node: "nope"}).Prepare(context.Background(), kube); err == nil || !strings.Contains(err.Error(), "node nope not found") {
		t.Errorf("a missing node: %v", err)
	}
}

// The drain is over for the workload once none of its pods is on the node
// and it is whole again.
func TestDrainDone(t *testing.T) {
	d := webDeployment()
	d.Generation, d.Status = 1, appsv1DeploymentStatus(3)
	w := Workload{Deployment: d}
	on := nodePod("web-a", "n1", "ReplicaSet", nil)
	off := nodePod("web-b", "n2", "ReplicaSet", nil)
	if done, msg := (Drain{Node: "n1"}).Done(w, []*corev1.Pod{on, off}); done || !strings.Contains(msg, "1 pods of deployment prod/web still on node n1") {
		t.Errorf("a pod left on the node: done %v, %q", done, msg)
	}
	if done, _ := (Drain{Node: "n1"}).Done(w, []*corev1.Pod{off}); !done {
		t.Error("no pod on the node and the deployment whole: not done")
	}
	d.Status.AvailableReplicas = 2
	if done, msg := (Drain{Node: "n1"}).Done(w, []*corev1.Pod{off}); done || !strings.Contains(msg, "available") {
		t.Errorf("a replacement not available yet: done %v, %q", done, msg)
	}
}

func appsv1DeploymentStatus(n int32) appsv1.DeploymentStatus {
	return appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
}

// When the run ends while budgets still refuse, the drain reads each
// refused pod once more and records what became of it, so that "held
// until the end" is said only of pods still there: one evicted after all
// (the Eviction API's DisruptionTarget condition; here the answer to the
// call in flight was cut off by the end), one deleted by its controller
// (deleting, no such condition), one gone and one deleted by another hand
// seconds before an eviction marked it (all three overtaken), and one
// still there (nothing recorded beyond its refusal).
func TestDrainLooksOnceMoreAtTheEnd(t *testing.T) {
	fastEvictionRetries(t)
	names := []string{"held", "scaled-down", "gone", "cut-off", "marked-later"}
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	for _, n := range names {
		p := nodePod(n, "n1", "ReplicaSet", nil)
		p.UID = types.UID("uid-" + n)
		objs = append(objs, p)
	}
	kube := fake.NewClientset(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	// deleting marks a pod as a delete with a 20 s grace period does, and
	// as an eviction does when evicted.
	deleting := func(name string, evicted bool) error {
		o, err := kube.Tracker().Get(podsGVR, "prod", name)
		if err != nil {
			return err
		}
		p := o.(*corev1.Pod).DeepCopy()
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(time.Date(2026, 11, 28, 14, 27, 34, 0, time.UTC))), ptr.To(int64(20))
		if evicted { // in the second it was deleted: the eviction's own
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 28, 14, 27, 14, 0, time.UTC))})
		}
		return kube.Tracker().Update(podsGVR, p, "prod")
	}
	// markedLater: deleted by another hand, then marked by an eviction 6 s
	// later (an eviction accepts a deleting pod whatever its budget).
	markedLater := func(name string) error {
		if err := deleting(name, false); err != nil {
			return err
		}
		o, err := kube.Tracker().Get(podsGVR, "prod", name)
		if err != nil {
			return err
		}
		p := o.(*corev1.Pod).DeepCopy()
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 28, 14, 27, 20, 0, time.UTC))})
		return kube.Tracker().Update(podsGVR, p, "prod")
	}
	refused := map[string]bool{}
	var changeErr error
	onEviction(kube, func(name string) error {
		refused[name] = true
		if name == "cut-off" && len(refused) == len(names) && ctx.Err() == nil {
			// Every pod refused once: the world changes while this call
			// is in flight, and the run ends before its answer comes.
			changeErr = errors.Join(deleting("scaled-down", false), deleting("cut-off", true), kube.Tracker().Delete(podsGVR, "prod", "gone"), markedLater("marked-later"))
			cancel()
			return ctx.Err()
		}
		return budgetRefusal()
	})
	var mu sync.Mutex
	var events []report.Event
	d := Drain{Node: "n1", Record: func(e report.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	if err := d.Fire(ctx, kube, Ref{Namespace: "prod", Name: "web"}); err == nil {
		t.Error("the drain ended with its pods not all evicted, and no error")
	}
	if changeErr != nil {
		t.Fatal(changeErr)
	}
	after := map[string]report.Event{}
	for _, e := range events {
		if e.Kind != report.EvictionRefused {
			after[e.Pod] = e
		}
	}
	want := map[string]report.EventKind{"scaled-down": report.EvictionOvertaken, "cut-off": report.PodEvicted, "gone": report.EvictionOvertaken,
		"marked-later": report.EvictionOvertaken}
	for pod, kind := range want {
		e, ok := after[pod]
		if !ok || e.Kind != kind {
			t.Errorf("%s: recorded %+v, want %s", pod, e, kind)
		}
	}
	if e, ok := after["held"]; ok {
		t.Errorf("held, still there at the end: recorded %+v", e)
	}
	if d := after["scaled-down"].Detail; !strings.Contains(d, "asked for at about 14:27:14") || !strings.Contains(d, "not by an eviction") {
		t.Errorf("scaled-down's detail %q", d)
	}
}

// An eviction the API refuses with anything but a budget's 429 (here a
// pod under two budgets: 500) is recorded and not asked again, while the
// drain goes on waiting for the pods a budget holds; Fire's error is the
// failure, not the end's.
func TestDrainRecordsAFailedEviction(t *testing.T) {
	fastEvictionRetries(t)
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		nodePod("two-budgets", "n1", "ReplicaSet", nil), nodePod("held", "n1", "ReplicaSet", nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	asked := map[string]int{}
	onEviction(kube, func(name string) error {
		asked[name]++
		if name == "two-budgets" {
			return apierrors.NewInternalError(errors.New("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
		}
		if asked[name] >= 3 && asked["two-budgets"] > 0 {
			cancel() // the run's end, while held is still refused
		}
		return budgetRefusal()
	})
	var mu sync.Mutex
	var events []report.Event
	d := Drain{Node: "n1", Record: func(e report.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	err := d.Fire(ctx, kube, Ref{Namespace: "prod", Name: "web"})
	if err == nil || !strings.Contains(err.Error(), "more than one PodDisruptionBudget") {
		t.Errorf("Fire: %v, want the failed eviction's error", err)
	}
	if asked["two-budgets"] != 1 {
		t.Errorf("the failed eviction was asked %d times, want once", asked["two-budgets"])
	}
	var failed []report.Event
	for _, e := range events {
		if e.Kind == report.EvictionFailed {
			failed = append(failed, e)
		}
	}
	if len(failed) != 1 || failed[0].Pod != "two-budgets" || !strings.Contains(failed[0].Detail, "more than one PodDisruptionBudget") {
		t.Errorf("eviction_failed events %+v, want one for two-budgets with the API's message", failed)
	}
}

// An eviction accepted after refusals, of a pod another hand had begun
// deleting seconds before (the Eviction API lets a deleting pod go
// whatever its budget), is recorded as overtaken, not as the budget
// letting it go, as is one gone before the drain asked again; one the
// eviction itself deleted is pod_evicted.
func TestDrainAcceptedForADeletingPodIsOvertaken(t *testing.T) {
	fastEvictionRetries(t)
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		nodePod("rolled", "n1", "ReplicaSet", nil), nodePod("let-go", "n1", "ReplicaSet", nil), nodePod("vanished", "n1", "ReplicaSet", nil))
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	asked := map[string]int{}
	var changeErr error
	onEviction(kube, func(name string) error {
		asked[name]++
		if asked[name] == 1 {
			return budgetRefusal()
		}
		if name == "vanished" { // deleted and gone between two asks
			changeErr = errors.Join(changeErr, kube.Tracker().Delete(podsGVR, "prod", name))
			return apierrors.NewNotFound(podsGVR.GroupResource(), name)
		}
		// Accepted: the API server marks the pod and deletes it, at
		// 14:27:20; "rolled" had been deleted by its controller at 14:27:14.
		o, err := kube.Tracker().Get(podsGVR, "prod", name)
		if err != nil {
			changeErr = err
			return err
		}
		p := o.(*corev1.Pod).DeepCopy()
		asked := time.Date(2026, 11, 28, 14, 27, 20, 0, time.UTC)
		if name == "rolled" {
			asked = asked.Add(-6 * time.Second)
		}
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(asked.Add(30*time.Second))), ptr.To(int64(30))
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 28, 14, 27, 20, 0, time.UTC))})
		changeErr = errors.Join(changeErr, kube.Tracker().Update(podsGVR, p, "prod"))
		return nil
	})
	var mu sync.Mutex
	events := map[string][]report.EventKind{}
	d := Drain{Node: "n1", Record: func(e report.Event) { mu.Lock(); events[e.Pod] = append(events[e.Pod], e.Kind); mu.Unlock() }}
	if err := d.Fire(context.Background(), kube, Ref{Namespace: "prod", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	if changeErr != nil {
		t.Fatal(changeErr)
	}
	want := map[string][]report.EventKind{"rolled": {report.EvictionRefused, report.EvictionOvertaken}, "let-go": {report.EvictionRefused, report.PodEvicted},
		"vanished": {report.EvictionRefused, report.EvictionOvertaken}}
	for pod, kinds := range want {
		if !slices.Equal(events[pod], kinds) {
			t.Errorf("%s: recorded %v, want %v", pod, events[pod], kinds)
		}
	}
}

// fastEvictionRetries has a refused eviction asked again at once.
func fastEvictionRetries(t *testing.T) {
	d := EvictionRetry
	EvictionRetry = time.Millisecond
	t.Cleanup(func() { EvictionRetry = d })
}

// onEviction answers the fake's evictions with answer(pod name); the Fake
// serialises its reactors, so answer needs no lock of its own.
func onEviction(kube *fake.Clientset, answer func(name string) error) {
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, answer(a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName())
	})
}

func budgetRefusal() error {
	return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
}
