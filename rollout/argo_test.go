package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/rollprobe/rollprobe/report"
)

// canaryYAML is a Rollout as the apiserver returns it mid-update: the
// canary shape of Argo's own examples (examples/rollout-canary.yaml), with
// the status its controller writes at a pause step.
const canaryYAML = `
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: web, namespace: prod, generation: 3, uid: 0d6a1c1e-0000-4000-8000-000000000001}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: app, image: "example/web:v1"}
      - {name: sidecar, image: "example/proxy:v1"}
  strategy:
    canary:
      stableService: web-stable
      canaryService: web-canary
      steps:
      - setWeight: 25
      - pause: {}
      - setWeight: 50
      - pause: {duration: 10s}
      - analysis: {templates: [{templateName: success-rate}]}
status:
  observedGeneration: "3"
  phase: Paused
  message: CanaryPauseStep
  currentPodHash: 6b4d9f8c7
  stableRS: 5f7c6d9b8
  currentStepIndex: 1
  controllerPause: true
  pauseConditions:
  - {reason: CanaryPauseStep, startTime: "2026-11-26T03:00:00Z"}
  replicas: 5
  updatedReplicas: 1
  readyReplicas: 5
  availableReplicas: 5
`

func unstructuredFrom(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(y), &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func canary(t *testing.T) *ArgoRollout {
	t.Helper()
	r, err := ArgoRolloutFrom(unstructuredFrom(t, canaryYAML))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestArgoRolloutDecodes(t *testing.T) {
	r := canary(t)
	if r.Name != "web" || r.Generation != 3 || *r.Spec.Replicas != 4 || len(r.Spec.Template.Spec.Containers) != 2 ||
		r.Spec.Strategy.Canary == nil || len(r.Spec.Strategy.Canary.Steps) != 5 || r.Status.CurrentPodHash != "6b4d9f8c7" ||
		*r.Status.CurrentStepIndex != 1 || r.Status.PauseConditions[0].Reason != "CanaryPauseStep" {
		t.Fatalf("decoded %+v", r)
	}
	w := Workload{Rollout: r}
	if w.Kind() != KindRollout || w.Ref() != (Ref{Kind: KindRollout, Namespace: "prod", Name: "web"}) || w.Template().Labels["app"] != "web" {
		t.Errorf("workload: kind %s, ref %v", w.Kind(), w.Ref())
	}
	if d, u, rd, a := w.Counts(); d != 4 || u != 1 || rd != 5 || a != 5 {
		t.Errorf("counts %d %d %d %d", d, u, rd, a)
	}
	want := []string{"setWeight: 25", "pause", "setWeight: 50", "pause: 10s", "analysis", ""}
	for i, s := range want {
		if got := ArgoStep(r, int32(i)); got != s {
			t.Errorf("step %d: %q, want %q", i, got, s)
		}
	}
	for i, timed := range []bool{false, false, false, true, false, false} {
		if ArgoTimedPause(r, int32(i)) != timed {
			t.Errorf("step %d: timed pause %v, want %v", i, !timed, timed)
		}
	}
	for i, wgt := range []int32{25, 25, 50, 50, 50, 100} {
		if got := ArgoSetWeight(r, int32(i)); got != wgt {
			t.Errorf("weight at step %d: %d, want %d", i, got, wgt)
		}
	}
	if got := ArgoServices(r); strings.Join(got, ",") != "web-stable,web-canary" {
		t.Errorf("services %v", got)
	}
}

// TestArgoProgress: the plugin's verdicts (rolloututil.GetRolloutPhase):
// the controller's phase once the generation and an unpause are observed.
func TestArgoProgress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(r *ArgoRollout)
		want   Progress
	}{
		{"paused at a step", func(*ArgoRollout) {}, Progress{Paused: "CanaryPauseStep", Message: "Paused - CanaryPauseStep"}},
		{"generation not observed", func(r *ArgoRollout) { r.Generation = 4 }, Progress{Message: "waiting for rollout spec update to be observed"}},
		{"a hash, not a number (before v0.10)", func(r *ArgoRollout) { r.Status.ObservedGeneration = "7d9f"; r.Generation = 9 },
			Progress{Paused: "CanaryPauseStep", Message: "Paused - CanaryPauseStep"}},
		{"unpausing", func(r *ArgoRollout) { r.Status.PauseConditions = nil }, Progress{Message: "waiting for rollout to unpause"}},
		{"manually paused", func(r *ArgoRollout) {
			r.Status.PauseConditions, r.Status.ControllerPause, r.Status.Message = nil, false, "manually paused"
		}, Progress{Paused: "manually paused", Message: "Paused - manually paused"}},
		{"progressing", func(r *ArgoRollout) {
			r.Status.Phase, r.Status.Message, r.Status.PauseConditions, r.Status.ControllerPause = ArgoProgressing, "more replicas need to be updated", nil, false
		}, Progress{Message: "Progressing - more replicas need to be updated"}},
		{"healthy", func(r *ArgoRollout) {
			r.Status.Phase, r.Status.Message, r.Status.PauseConditions, r.Status.ControllerPause = ArgoHealthy, "", nil, false
		}, Progress{Done: true, Message: `rollout "web" is healthy`}},
		{"degraded", func(r *ArgoRollout) {
			r.Status.Phase, r.Status.Message, r.Status.PauseConditions, r.Status.ControllerPause = ArgoDegraded, "RolloutAborted: Rollout aborted update to revision 3", nil, false
		}, Progress{Failed: `rollout "web" is degraded: RolloutAborted: Rollout aborted update to revision 3`}},
		{"not reconciled yet", func(r *ArgoRollout) {
			r.Status.Phase, r.Status.Message, r.Status.PauseConditions, r.Status.ControllerPause = "", "", nil, false
		}, Progress{Message: "waiting for the Argo Rollouts controller to report the rollout's phase"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := canary(t)
			tc.mutate(r)
			if got := (Workload{Rollout: r}).Progress(); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestArgoPodsAndServices(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", ArgoPodHashLabel: "6b4d9f8c7"}}}
	if PodRevision(p) != "6b4d9f8c7" {
		t.Errorf("revision %q", PodRevision(p))
	}
	// Argo points its Services at one ReplicaSet by the hash label; the
	// template has no such label, and still the Service is the Rollout's.
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web", ArgoPodHashLabel: "5f7c6d9b8"}}}
	tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}
	if !selects(svc, tmpl, true) || selects(svc, tmpl, false) {
		t.Error("the hash label must be left out for a Rollout's pods, and only for them")
	}
	if selects(&corev1.Service{Spec: corev1.ServiceSpec{Selector: map[string]string{ArgoPodHashLabel: "x"}}}, tmpl, true) {
		t.Error("a selector of the hash label alone selects nothing of the template")
	}
}

func argoClients(t *testing.T, objs ...runtime.Object) (DynamicClients, *dynamicfake.FakeDynamicClient) {
	c, dyn, _ := argoFakes(t, objs...)
	return c, dyn
}

func argoFakes(t *testing.T, objs ...runtime.Object) (DynamicClients, *dynamicfake.FakeDynamicClient, *fake.Clientset) {
	t.Helper()
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{RolloutsGVR: "RolloutList"}, objs...)
	kube := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-stable", Namespace: "prod"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web", ArgoPodHashLabel: "5f7c6d9b8"}},
	}, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-canary", Namespace: "prod"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web", ArgoPodHashLabel: "6b4d9f8c7"}},
	})
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: RolloutsGVR.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: "rollouts", Kind: "Rollout", Namespaced: true}},
	}}
	return WithDynamic(kube, dyn), dyn, kube
}

func TestArgoResolveAndTriggers(t *testing.T) {
	ctx := context.Background()
	clients, dyn := argoClients(t, unstructuredFrom(t, canaryYAML))
	ref := Ref{Kind: KindRollout, Namespace: "prod", Name: "web"}
	target, err := Resolve(ctx, clients, ref, "")
	if err != nil {
		t.Fatal(err)
	}
	if target.Workload.Rollout == nil || target.Service.Name != "web-stable" {
		t.Fatalf("target %+v: want the rollout and its stable Service", target)
	}
	if _, err := Resolve(ctx, clients, Ref{Kind: KindRollout, Namespace: "prod", Name: "nope"}, ""); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing rollout: %v", err)
	}
	// A cluster without Argo's CRDs is told so, not "not found".
	noCRD := WithDynamic(fake.NewClientset(), dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{RolloutsGVR: "RolloutList"}))
	if _, err := Resolve(ctx, noCRD, ref, ""); !errors.Is(err, ErrNoArgoRollouts) {
		t.Errorf("without the CRD: %v", err)
	}
	if _, err := Resolve(ctx, fake.NewClientset(), ref, ""); !errors.Is(err, ErrNoDynamicClient) {
		t.Errorf("without a dynamic client: %v", err)
	}

	// set image: one JSON patch of the one image, its container's name
	// tested first (a merge patch would replace the whole list).
	dyn.ClearActions()
	if err := (SetImage{Container: "sidecar", Image: "example/proxy:v2"}).Fire(ctx, clients, ref); err != nil {
		t.Fatal(err)
	}
	patch := lastPatch(t, dyn)
	if patch.GetPatchType() != "application/json-patch+json" ||
		string(patch.GetPatch()) != `[{"op":"test","path":"/spec/template/spec/containers/1/name","value":"sidecar"},{"op":"replace","path":"/spec/template/spec/containers/1/image","value":"example/proxy:v2"}]` {
		t.Errorf("set image sent %s %s", patch.GetPatchType(), patch.GetPatch())
	}
	u, err := dyn.Resource(RolloutsGVR).Namespace("prod").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := ArgoRolloutFrom(u); r.Spec.Template.Spec.Containers[1].Image != "example/proxy:v2" || r.Spec.Template.Spec.Containers[0].Image != "example/web:v1" {
		t.Errorf("after set image: %+v", r.Spec.Template.Spec.Containers)
	}
	if err := (SetImage{Container: "nope", Image: "x"}).Fire(ctx, clients, ref); err == nil || !strings.Contains(err.Error(), "it has app, sidecar") {
		t.Errorf("an unknown container: %v", err)
	}

	// restart: the template annotation, as a merge patch.
	dyn.ClearActions()
	if err := (Restart{}).Fire(ctx, clients, ref); err != nil {
		t.Fatal(err)
	}
	if p := lastPatch(t, dyn); p.GetPatchType() != "application/merge-patch+json" || !strings.Contains(string(p.GetPatch()), RestartedAtAnnotation) {
		t.Errorf("restart sent %s %s", p.GetPatchType(), p.GetPatch())
	}

	// promote: the pause conditions cleared through the status
	// subresource; spec.paused only when set.
	dyn.ClearActions()
	r := canary(t)
	if err := PromoteRollout(ctx, clients, r); err != nil {
		t.Fatal(err)
	}
	acts := patches(dyn)
	if len(acts) != 1 || acts[0].GetSubresource() != "status" || string(acts[0].GetPatch()) != argoClearPauseConditions {
		t.Errorf("promote sent %v", describePatches(acts))
	}
	dyn.ClearActions()
	r.Spec.Paused, r.Status.PauseConditions, r.Status.ControllerPause = true, nil, false
	if err := PromoteRollout(ctx, clients, r); err != nil {
		t.Fatal(err)
	}
	if acts := patches(dyn); len(acts) != 1 || acts[0].GetSubresource() != "" || string(acts[0].GetPatch()) != argoUnpause {
		t.Errorf("unpause sent %v", describePatches(acts))
	}
}

func patches(dyn *dynamicfake.FakeDynamicClient) []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range dyn.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, p)
		}
	}
	return out
}

func lastPatch(t *testing.T, dyn *dynamicfake.FakeDynamicClient) k8stesting.PatchAction {
	t.Helper()
	ps := patches(dyn)
	if len(ps) == 0 {
		t.Fatal("no patch sent")
	}
	return ps[len(ps)-1]
}

func describePatches(ps []k8stesting.PatchAction) string {
	var out []string
	for _, p := range ps {
		b, _ := json.Marshal(map[string]string{"sub": p.GetSubresource(), "patch": string(p.GetPatch())})
		out = append(out, string(b))
	}
	return strings.Join(out, " ")
}

// TestWatcherFollowsArgoRollout: the watch reads the Rollout through the
// dynamic client, its ReplicaSets (Argo's hash label and revision
// annotation) as revisions, and its current pod hash as the new revision
// once the controller has seen the spec.
func TestWatcherFollowsArgoRollout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients, dyn, kube := argoFakes(t, unstructuredFrom(t, canaryYAML))
	r := canary(t)
	svc, err := kube.CoreV1().Services("prod").Get(ctx, "web-stable", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, tl := startWatcherOn(t, ctx, clients, &Target{Namespace: "prod", Workload: Workload{Rollout: r}, Service: svc})
	if got := w.NewRevision(); got != "6b4d9f8c7" {
		t.Errorf("new revision %q, want the current pod hash", got)
	}
	if p := w.Workload().Progress(); p.Paused != "CanaryPauseStep" {
		t.Errorf("progress %+v: want paused at the step", p)
	}

	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-6b4d9f8c7", Namespace: "prod", CreationTimestamp: metav1.Now(),
		Labels:          map[string]string{"app": "web", ArgoPodHashLabel: "6b4d9f8c7"},
		Annotations:     map[string]string{ArgoRevisionAnnotation: "3"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: r.UID, Controller: ptrBool(true)}},
	}}
	if _, err := kube.AppsV1().ReplicaSets("prod").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	events := waitKinds(t, tl, report.RevisionCreated)
	for _, e := range events {
		if e.Kind == report.RevisionCreated && (e.Revision != "6b4d9f8c7" || e.Detail != "revision 3") {
			t.Errorf("revision event %+v", e)
		}
	}

	// The controller gives the ReplicaSet a scale-down deadline: one
	// event, none for an update that leaves it as it was, another when it
	// moves.
	setDeadline := func(deadline string, replicas int32) {
		t.Helper()
		rs.Annotations[ArgoScaleDownDeadlineAnnotation] = deadline
		rs.Spec.Replicas = &replicas
		if _, err := kube.AppsV1().ReplicaSets("prod").Update(ctx, rs, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first := time.Now().Add(30 * time.Second).UTC().Format(time.RFC3339)
	setDeadline(first, 2)
	waitKinds(t, tl, report.RevisionCreated, report.ScaleDownDeadline)
	setDeadline(first, 1)
	second := time.Now().Add(-5 * time.Second).UTC().Format(time.RFC3339)
	setDeadline(second, 1)
	events = waitKinds(t, tl, report.ScaleDownDeadline, report.ScaleDownDeadline)
	var details []string
	for _, e := range events {
		if e.Kind == report.ScaleDownDeadline {
			details = append(details, e.Detail)
			if e.Revision != "6b4d9f8c7" {
				t.Errorf("scale-down event %+v: want the ReplicaSet's revision", e)
			}
		}
	}
	if len(details) != 2 || !strings.HasPrefix(details[0], "revision 3 scales down at "+first+" (") ||
		!strings.HasPrefix(details[1], "revision 3 was due to scale down at "+second+" (") {
		t.Errorf("scale-down events %q: want one per deadline, in order", details)
	}

	// The controller promotes to the end: the watch sees it done.
	u := unstructuredFrom(t, canaryYAML)
	_ = unstructured.SetNestedField(u.Object, ArgoHealthy, "status", "phase")
	_ = unstructured.SetNestedField(u.Object, "", "status", "message")
	_ = unstructured.SetNestedField(u.Object, false, "status", "controllerPause")
	unstructured.RemoveNestedField(u.Object, "status", "pauseConditions")
	if _, err := dyn.Resource(RolloutsGVR).Namespace("prod").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !w.Workload().Progress().Done {
		if time.Now().After(deadline) {
			t.Fatalf("progress %+v: the watch never saw the rollout healthy", w.Workload().Progress())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ptrBool(b bool) *bool { return &b }

// The report's trigger says what was sent: a JSON merge patch to a
// Rollout (cmd sets Merge for --rollout).
func TestPatchSaysWhichPatch(t *testing.T) {
	if d := (Patch{}).Describe(); d != "strategic merge patch" {
		t.Errorf("%q", d)
	}
	if d := (Patch{Merge: true}).Describe(); d != "JSON merge patch" {
		t.Errorf("%q", d)
	}
}

// workloadRefYAML is a Rollout that takes its pod template and selector
// from a Deployment (Argo's examples/rollout-workloadref.yaml shape).
const workloadRefYAML = `
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: web, namespace: prod, generation: 1}
spec:
  replicas: 4
  workloadRef: {apiVersion: apps/v1, kind: KIND, name: web-template}
  strategy:
    canary:
      stableService: web-stable
      steps: [{setWeight: 25}, {pause: {}}]
status: {observedGeneration: "1", phase: Healthy, currentPodHash: 5f7c6d9b8, stableRS: 5f7c6d9b8}
`

// A Rollout with a workloadRef is read with the template it refers to, as
// Argo's controller resolves it (a Deployment or ReplicaSet: their
// selector too; a PodTemplate): the Service that selects those labels is
// found and the doctor can check the containers. A reference Argo would not resolve, or to nothing, is an
// error naming it.
func TestWorkloadRefTemplateIsRead(t *testing.T) {
	ctx := context.Background()
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example/web:v1"}}}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	om := metav1.ObjectMeta{Name: "web-template", Namespace: "prod"}
	none := int32(0)
	for _, tc := range []struct {
		kind, apiVersion string
		obj              runtime.Object
		wantSelector     bool
	}{
		{"Deployment", "apps/v1", &appsv1.Deployment{ObjectMeta: om, Spec: appsv1.DeploymentSpec{Replicas: &none, Selector: sel, Template: tmpl}}, true},
		{"ReplicaSet", "apps/v1", &appsv1.ReplicaSet{ObjectMeta: om, Spec: appsv1.ReplicaSetSpec{Replicas: &none, Selector: sel, Template: tmpl}}, true},
		{"PodTemplate", "v1", &corev1.PodTemplate{ObjectMeta: om, Template: tmpl}, false},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			y := strings.Replace(strings.Replace(workloadRefYAML, "KIND", tc.kind, 1), "apps/v1", tc.apiVersion, 1)
			clients, _, kube := argoFakes(t, unstructuredFrom(t, y))
			if err := kube.Tracker().Add(tc.obj); err != nil {
				t.Fatal(err)
			}
			target, err := Resolve(ctx, clients, Ref{Kind: KindRollout, Namespace: "prod", Name: "web"}, "")
			if err != nil {
				t.Fatal(err)
			}
			r := target.Workload.Rollout
			if target.Workload.TemplateFrom() != strings.ToLower(tc.kind)+" web-template" || len(r.Spec.Template.Spec.Containers) != 1 ||
				r.Spec.Template.Spec.Containers[0].Image != "example/web:v1" || target.Service.Name != "web-stable" {
				t.Fatalf("rollout %+v, service %s: want the template of %s web-template and the stable Service", r, target.Service.Name, tc.kind)
			}
			if (r.Spec.Selector != nil) != tc.wantSelector {
				t.Errorf("selector %v: want one only from a Deployment or ReplicaSet", r.Spec.Selector)
			}
			if err := target.Workload.CanRoll(); err != nil {
				t.Errorf("CanRoll: %v, want nil (the triggers write the referenced template)", err)
			}
		})
	}
	// A Deployment that still runs pods of its own (a move to the Rollout
	// not finished; a Deployment's replicas default to 1): a change to its
	// template would roll them too. Refused, naming it.
	three := int32(3)
	for _, replicas := range []*int32{nil, &three} {
		clients, _, kube := argoFakes(t, unstructuredFrom(t, strings.Replace(workloadRefYAML, "KIND", "Deployment", 1)))
		if err := kube.Tracker().Add(&appsv1.Deployment{ObjectMeta: om, Spec: appsv1.DeploymentSpec{Replicas: replicas, Selector: sel, Template: tmpl}}); err != nil {
			t.Fatal(err)
		}
		target, err := Resolve(ctx, clients, Ref{Kind: KindRollout, Namespace: "prod", Name: "web"}, "")
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if replicas != nil {
			want = int(*replicas)
		}
		err = target.Workload.CanRoll()
		if !errors.Is(err, ErrTemplateHolderRunsPods) || !strings.Contains(err.Error(), fmt.Sprintf("deployment web-template, whose template it takes (workloadRef; scaleDown: never), wants %d pod(s) of its own", want)) {
			t.Errorf("a template Deployment of %d replicas: CanRoll %v", want, err)
		}
	}
	for _, tc := range []struct{ name, kind, apiVersion, want string }{
		{"nothing by that name", "Deployment", "apps/v1", "its workloadRef deployment prod/web-template not found"},
		{"a kind Argo does not resolve", "StatefulSet", "apps/v1", "its workloadRef is a StatefulSet of \"apps/v1\", which Argo Rollouts does not resolve"},
		{"a Deployment outside apps", "Deployment", "extensions/v1beta1", "which Argo Rollouts does not resolve"},
	} {
		y := strings.Replace(strings.Replace(workloadRefYAML, "KIND", tc.kind, 1), "apps/v1", tc.apiVersion, 1)
		clients, _ := argoClients(t, unstructuredFrom(t, y))
		if _, err := Resolve(ctx, clients, Ref{Kind: KindRollout, Namespace: "prod", Name: "web"}, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// The triggers write the template of the object a workloadRef names, where
// that kind keeps it (spec.template; template for a PodTemplate), and
// leave the Rollout alone (Argo refuses a Rollout with a template of its
// own beside the reference). The Generation the run waits on is that
// object's.
func TestWorkloadRefTriggersWriteTheReferencedTemplate(t *testing.T) {
	ctx := context.Background()
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example/web:v1"}, {Name: "sidecar", Image: "example/proxy:v1"}}}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	om := metav1.ObjectMeta{Name: "web-template", Namespace: "prod", Generation: 7}
	for _, tc := range []struct {
		kind, apiVersion string
		obj              runtime.Object
		userPatch        string
		read             func(t *testing.T, kube *fake.Clientset) corev1.PodTemplateSpec
	}{
		{"Deployment", "apps/v1", &appsv1.Deployment{ObjectMeta: om, Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl}},
			`{"spec":{"template":{"metadata":{"labels":{"tier":"web"}}}}}`,
			func(t *testing.T, kube *fake.Clientset) corev1.PodTemplateSpec {
				d, err := kube.AppsV1().Deployments("prod").Get(ctx, "web-template", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return d.Spec.Template
			}},
		{"ReplicaSet", "apps/v1", &appsv1.ReplicaSet{ObjectMeta: om, Spec: appsv1.ReplicaSetSpec{Selector: sel, Template: tmpl}},
			`{"spec":{"template":{"metadata":{"labels":{"tier":"web"}}}}}`,
			func(t *testing.T, kube *fake.Clientset) corev1.PodTemplateSpec {
				rs, err := kube.AppsV1().ReplicaSets("prod").Get(ctx, "web-template", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return rs.Spec.Template
			}},
		{"PodTemplate", "v1", &corev1.PodTemplate{ObjectMeta: om, Template: tmpl},
			`{"template":{"metadata":{"labels":{"tier":"web"}}}}`,
			func(t *testing.T, kube *fake.Clientset) corev1.PodTemplateSpec {
				pt, err := kube.CoreV1().PodTemplates("prod").Get(ctx, "web-template", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return pt.Template
			}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			y := strings.Replace(strings.Replace(workloadRefYAML, "KIND", tc.kind, 1), "apps/v1", tc.apiVersion, 1)
			clients, dyn, kube := argoFakes(t, unstructuredFrom(t, y))
			if err := kube.Tracker().Add(tc.obj); err != nil {
				t.Fatal(err)
			}
			ref := Ref{Kind: KindRollout, Namespace: "prod", Name: "web"}
			w, err := GetWorkload(ctx, clients, ref)
			if err != nil {
				t.Fatal(err)
			}
			if g := w.Generation(); g != 7 {
				t.Errorf("Generation %d, want the %s's 7 (the Rollout's own is 1)", g, tc.kind)
			}
			dyn.ClearActions()
			if err := (Restart{Now: func() time.Time { return time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC) }}).Fire(ctx, clients, ref); err != nil {
				t.Fatal(err)
			}
			if got := tc.read(t, kube); got.Annotations[RestartedAtAnnotation] != "2026-11-30T09:00:00Z" {
				t.Errorf("after restart, the %s's template annotations %v", tc.kind, got.Annotations)
			}
			if err := (SetImage{Container: "sidecar", Image: "example/proxy:v2"}).Fire(ctx, clients, ref); err != nil {
				t.Fatal(err)
			}
			if c := tc.read(t, kube).Spec.Containers; len(c) != 2 || c[0].Image != "example/web:v1" || c[1].Image != "example/proxy:v2" {
				t.Errorf("after set image, the %s's containers %+v: want only the sidecar's image changed", tc.kind, c)
			}
			if err := (SetImage{Container: "nope", Image: "x"}).Fire(ctx, clients, ref); err == nil || !strings.Contains(err.Error(), "it has app, sidecar") {
				t.Errorf("an unknown container: %v", err)
			}
			if err := (Patch{JSON: []byte(tc.userPatch), Merge: true}).Fire(ctx, clients, ref); err != nil {
				t.Fatal(err)
			}
			if got := tc.read(t, kube); got.Labels["tier"] != "web" || got.Labels["app"] != "web" || got.Annotations[RestartedAtAnnotation] == "" {
				t.Errorf("after the user's patch, the %s's template %+v: want its label added, the rest kept", tc.kind, got.ObjectMeta)
			}
			if ps := patches(dyn); len(ps) != 0 {
				t.Errorf("the Rollout was patched: %s", describePatches(ps))
			}
		})
	}
	// A referenced object gone since: the trigger says which, and writes nothing.
	clients, dyn, _ := argoFakes(t, unstructuredFrom(t, strings.Replace(workloadRefYAML, "KIND", "Deployment", 1)))
	err := (Restart{}).Fire(ctx, clients, Ref{Kind: KindRollout, Namespace: "prod", Name: "web"})
	if err == nil || !strings.Contains(err.Error(), "deployment prod/web-template not found") || len(patches(dyn)) != 0 {
		t.Errorf("restart with the Deployment gone: %v, patches %s", err, describePatches(patches(dyn)))
	}
}

// A watched copy of a workloadRef Rollout has no template: its Generation
// is the referenced object's as the Rollout shows it (the annotation the
// controller writes when that object changes, or the generation its status
// says it reconciled, whichever is newer), and its progress waits until
// the controller has reconciled the generation the annotation records.
func TestWorkloadRefGenerationAndProgressFromTheRollout(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		annotation, observed string
		wantGen              int64
		wantWaiting          bool
	}{
		{"neither written yet", "", "", 0, false},
		{"in step", "7", "7", 7, false},
		{"the object changed, not yet reconciled", "8", "7", 8, true},
		{"reconciled before the annotation came back", "7", "8", 8, true},
		{"a value that is no number", "x", "7", 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ArgoRolloutFrom(unstructuredFrom(t, strings.Replace(workloadRefYAML, "KIND", "Deployment", 1)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.annotation != "" {
				r.Annotations = map[string]string{ArgoWorkloadGenerationAnnotation: tc.annotation}
			}
			r.Status.WorkloadObservedGeneration = tc.observed
			w := Workload{Rollout: r}
			if g := w.Generation(); g != tc.wantGen {
				t.Errorf("Generation %d, want %d", g, tc.wantGen)
			}
			p := w.Progress()
			if waiting := p.Message == "waiting for rollout spec update to be observed for the reference workload"; waiting != tc.wantWaiting || (!waiting && !p.Done) {
				t.Errorf("progress %+v: want waiting %v, else done (Healthy)", p, tc.wantWaiting)
			}
		})
	}
	// A Rollout with its own template: its metadata.generation, whatever
	// annotation it carries.
	r := canary(t)
	r.Annotations = map[string]string{ArgoWorkloadGenerationAnnotation: "12"}
	if g := (Workload{Rollout: r}).Generation(); g != 3 {
		t.Errorf("a Rollout with its own template: Generation %d, want its own 3", g)
	}
}

// How long after an abort Argo scales the aborted revision down, as
// v1.10.1 decides it (GetAbortScaleDownDelaySecondsOrDefault,
// shouldDelayScaleDownOnAbort).
func TestArgoAbortDelay(t *testing.T) {
	n := func(v int32) *int32 { return &v }
	routing := json.RawMessage(`{"traefik":{"weightedTraefikServiceName":"web"}}`)
	for _, tc := range []struct {
		name   string
		bg     *ArgoBlueGreen
		canary *ArgoCanary
		delay  time.Duration
		keep   bool
	}{
		{"a blue/green, unset", &ArgoBlueGreen{}, nil, 30 * time.Second, false},
		{"a blue/green, 2 s", &ArgoBlueGreen{AbortScaleDownDelaySeconds: n(2)}, nil, 2 * time.Second, false},
		{"a blue/green, 0 keeps", &ArgoBlueGreen{AbortScaleDownDelaySeconds: n(0)}, nil, 0, true},
		{"a routed canary, unset", nil, &ArgoCanary{TrafficRouting: routing}, 30 * time.Second, false},
		{"a routed canary, 1 s", nil, &ArgoCanary{TrafficRouting: routing, AbortScaleDownDelaySeconds: n(1)}, time.Second, false},
		{"a dynamicStableScale canary, unset: at once", nil, &ArgoCanary{TrafficRouting: routing, DynamicStableScale: true}, 0, false},
		{"a dynamicStableScale canary, 5 s", nil, &ArgoCanary{TrafficRouting: routing, DynamicStableScale: true, AbortScaleDownDelaySeconds: n(5)}, 5 * time.Second, false},
		{"a canary without routing: at once, whatever is set", nil, &ArgoCanary{AbortScaleDownDelaySeconds: n(9)}, 0, false},
	} {
		r := &ArgoRollout{}
		r.Spec.Strategy.BlueGreen, r.Spec.Strategy.Canary = tc.bg, tc.canary
		if d, keep, why := ArgoAbortDelay(r); d != tc.delay || keep != tc.keep || why == "" {
			t.Errorf("%s: %s, keep %v (%q); want %s, keep %v", tc.name, d, keep, why, tc.delay, tc.keep)
		}
	}
}

// A Rollout's native sidecar is set by a JSON patch of its place among the
// init containers, its name tested first, as a container's is.
func TestArgoSetImageOfANativeSidecar(t *testing.T) {
	ctx := context.Background()
	withMesh := strings.Replace(canaryYAML, "      containers:\n", "      initContainers:\n      - {name: mesh, image: \"example/mesh:v1\", restartPolicy: Always}\n      containers:\n", 1)
	if withMesh == canaryYAML {
		t.Fatal("the fixture has no containers list to put an init container before")
	}
	clients, dyn := argoClients(t, unstructuredFrom(t, withMesh))
	ref := Ref{Kind: KindRollout, Namespace: "prod", Name: "web"}
	if err := (SetImage{Container: "mesh", Image: "example/mesh:v2"}).Fire(ctx, clients, ref); err != nil {
		t.Fatal(err)
	}
	if patch := lastPatch(t, dyn); string(patch.GetPatch()) != `[{"op":"test","path":"/spec/template/spec/initContainers/0/name","value":"mesh"},{"op":"replace","path":"/spec/template/spec/initContainers/0/image","value":"example/mesh:v2"}]` {
		t.Errorf("set image sent %s", patch.GetPatch())
	}
	u, err := dyn.Resource(RolloutsGVR).Namespace("prod").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := ArgoRolloutFrom(u); len(r.Spec.Template.Spec.InitContainers) != 1 || r.Spec.Template.Spec.InitContainers[0].Image != "example/mesh:v2" || r.Spec.Template.Spec.Containers[0].Image != "example/web:v1" {
		t.Errorf("after set image: init containers %+v, containers %+v", r.Spec.Template.Spec.InitContainers, r.Spec.Template.Spec.Containers)
	}
}

// A scale of a Rollout whose template is another object's moves the
// Rollout's own generation and not its template's: the watch records it
// as a spec generation that wanted the new replicas, which is how a scale
// is known to have been seen, and as no new template generation.
func TestWatcherSeesAWorkloadRefRolloutsScale(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const y = `
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: web
  namespace: prod
  generation: 7
  annotations: {rollout.argoproj.io/workload-generation: "4"}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web-template}
status: {observedGeneration: "7", workloadObservedGeneration: "4"}
`
	clients, dyn, kube := argoFakes(t, unstructuredFrom(t, y))
	r, err := ArgoRolloutFrom(unstructuredFrom(t, y))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := kube.CoreV1().Services("prod").Get(ctx, "web-stable", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := startWatcherOn(t, ctx, clients, &Target{Namespace: "prod", Workload: Workload{Rollout: r}, Service: svc})
	if g, s := w.Workload().Generation(), w.Workload().SpecGeneration(); g != 4 || s != 7 {
		t.Fatalf("generations: template %d, spec %d; want 4 and 7", g, s)
	}
	scaled := unstructuredFrom(t, y)
	_ = unstructured.SetNestedField(scaled.Object, int64(1), "spec", "replicas")
	scaled.SetGeneration(8) // the fake API server bumps no generation
	if _, err := dyn.Resource(RolloutsGVR).Namespace("prod").Update(ctx, scaled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.Workload().SpecGeneration() != 8 {
		if time.Now().After(deadline) {
			t.Fatal("the watch never showed the scaled Rollout")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := w.ReplicasSeenAfter(7, 1); !ok {
		t.Error("the scale to 1 was not recorded as seen")
	}
	if _, ok := w.ReplicasSeenAfter(7, 2); ok {
		t.Error("a scale to 2 recorded, which no write after generation 7 asked for")
	}
	if _, ok := w.GenerationSeenAfter(4); ok {
		t.Error("a new template generation recorded for a scale")
	}
	before, after := Workload{Rollout: r}, w.Workload()
	if sc, ok := ScaledOnly(before, after); !ok || sc.Change() != "from 2 replicas to 1" {
		t.Errorf("ScaledOnly: %+v %v, want a scale from 2 to 1", sc, ok)
	}
}
