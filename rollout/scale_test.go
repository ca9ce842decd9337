package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func TestParseScale(t *testing.T) {
	for _, n := range []int64{0, -1, 1 << 31} {
		if _, err := ParseScale(n); err == nil {
			t.Errorf("--scale %d accepted", n)
		}
	}
	s, err := ParseScale(2)
	if err != nil || s.Replicas != 2 {
		t.Fatalf("--scale 2: %+v %v", s, err)
	}
	if got := s.Describe(); got != "scale to 2 replicas (kubectl scale --replicas=2)" {
		t.Errorf("before Check: %q", got)
	}
	s.From = 3
	// The analysis reads the trigger by this prefix, as it does "drain node".
	if got := s.Describe(); got != "scale from 3 replicas to 2 (kubectl scale --replicas=2)" {
		t.Errorf("after Check: %q", got)
	}
}

func TestScaleCheck(t *testing.T) {
	dep := func(n int32, paused bool) Workload {
		return Workload{Deployment: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(n), Paused: paused}}}
	}
	s, err := Scale{Replicas: 1}.Check(dep(3, true))
	if err != nil || s.From != 3 {
		t.Errorf("a paused Deployment of 3 (it scales; only its template waits): %+v %v", s, err)
	}
	if _, err := (Scale{Replicas: 3}).Check(dep(3, false)); !errors.Is(err, ErrScaleNoChange) || !strings.Contains(err.Error(), "deployment web wants 3 replicas") {
		t.Errorf("a scale to the same count: %v", err)
	}
	// spec.replicas unset is 1, as the apiserver defaults it.
	if _, err := (Scale{Replicas: 1}).Check(Workload{StatefulSet: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"}}}); !errors.Is(err, ErrScaleNoChange) {
		t.Errorf("a StatefulSet without replicas, to 1: %v", err)
	}
	if _, err := (Scale{Replicas: 2}).Check(Workload{DaemonSet: &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}}); !errors.Is(err, ErrNoReplicas) {
		t.Errorf("a DaemonSet: %v", err)
	}
}

func TestAutoscalers(t *testing.T) {
	hpa := func(name, apiVersion, kind, target string, min *int32) *autoscalingv2.HorizontalPodAutoscaler {
		return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod"},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: min, MaxReplicas: 10,
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: apiVersion, Kind: kind, Name: target}}}
	}
	kube := fake.NewClientset(
		hpa("web", "apps/v1", "Deployment", "web", ptr.To[int32](2)),
		hpa("keda-hpa-web", "apps/v1", "Deployment", "web", nil),
		hpa("other-name", "apps/v1", "Deployment", "api", nil),
		hpa("other-kind", "apps/v1", "StatefulSet", "web", nil),
		hpa("other-group", "example.com/v1", "Deployment", "web", nil),
		hpa("rollout", "argoproj.io/v1alpha1", "Rollout", "web", nil),
	)
	got, err := Autoscalers(context.Background(), kube, Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "horizontalpodautoscaler keda-hpa-web (1 to 10 replicas), horizontalpodautoscaler web (2 to 10 replicas)"; strings.Join(got, ", ") != want {
		t.Errorf("deployment web: %q, want %q", got, want)
	}
	got, _ = Autoscalers(context.Background(), kube, Ref{Kind: KindRollout, Namespace: "prod", Name: "web"})
	if len(got) != 1 || !strings.Contains(got[0], "rollout") {
		t.Errorf("rollout web: %q", got)
	}
}

// The scale is written to the scale subresource, as kubectl scale does;
// the fake tracker applies it to the Deployment itself.
func TestScaleFire(t *testing.T) {
	kube := fake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)}})
	if err := (Scale{Replicas: 1}).Fire(context.Background(), kube, Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	var sent []string
	for _, a := range kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			sent = append(sent, p.GetResource().Resource+"/"+p.GetSubresource()+" "+string(p.GetPatch()))
		}
	}
	if strings.Join(sent, "; ") != `deployments/scale {"spec":{"replicas":1}}` {
		t.Errorf("sent %q", sent)
	}
	d, err := kube.AppsV1().Deployments("prod").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 1 {
		t.Errorf("after the scale: %v %v", d.Spec.Replicas, err)
	}
	if err := (Scale{Replicas: 1}).Fire(context.Background(), kube, Ref{Kind: KindStatefulSet, Namespace: "prod", Name: "nope"}); err == nil || !strings.Contains(err.Error(), "scale statefulset prod/nope") {
		t.Errorf("a missing StatefulSet: %v", err)
	}
}

func TestArgoScaleFire(t *testing.T) {
	clients, dyn := argoClients(t, unstructuredFrom(t, canaryYAML))
	if err := (Scale{Replicas: 1}).Fire(context.Background(), clients, Ref{Kind: KindRollout, Namespace: "prod", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	if p := lastPatch(t, dyn); p.GetSubresource() != "scale" || string(p.GetPatch()) != `{"spec":{"replicas":1}}` {
		t.Errorf("sent %v", describePatches([]k8stesting.PatchAction{p}))
	}
}

func TestScaleProgress(t *testing.T) {
	pod := func(name string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return p
	}
	dep := func(want int32, status appsv1.DeploymentStatus) Workload {
		return Workload{Deployment: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Generation: 2},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(want)}, Status: status}}
	}
	at := func(n int32) appsv1.DeploymentStatus {
		return appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	}
	evicted := pod("e", false)
	evicted.Status.Phase = corev1.PodFailed
	s := Scale{Replicas: 1, From: 3}
	for _, tc := range []struct {
		name string
		w    Workload
		pods []*corev1.Pod
		seen bool
		want ScaleProgress
	}{
		{"not seen yet", dep(3, at(3)), []*corev1.Pod{pod("a", false), pod("b", false), pod("c", false)}, false,
			ScaleProgress{Message: "waiting for the scale to be observed"}},
		{"scaled back by another hand", dep(3, at(3)), nil, true,
			ScaleProgress{Undone: "deployment prod/web wants 3 replicas again, not the 1 it was scaled to: something else scales it (a HorizontalPodAutoscaler, KEDA, a GitOps sync), so the scale's end cannot be measured"}},
		{"not observed by the controller", dep(1, appsv1.DeploymentStatus{ObservedGeneration: 1}), nil, true,
			ScaleProgress{Message: "waiting for deployment spec update to be observed"}},
		// Deployment status counts no terminating pod: complete as kubectl
		// judges it while two pods still serve kept-alive connections.
		{"pods terminating", dep(1, at(1)), []*corev1.Pod{pod("a", false), pod("c", true), pod("b", true)}, true,
			ScaleProgress{Message: "2 pods terminating (b, c)"}},
		{"a pod too many", dep(1, at(1)), []*corev1.Pod{pod("a", false), pod("b", false)}, true,
			ScaleProgress{Message: "2 pods, 1 wanted"}},
		{"done beside an evicted pod (phase Failed, replaced)", dep(1, at(1)), []*corev1.Pod{pod("a", false), evicted}, true,
			ScaleProgress{Done: true, Message: "scaled to 1 replica: each ready, every pod the scale removed gone"}},
		{"done", dep(1, at(1)), []*corev1.Pod{pod("a", false)}, true,
			ScaleProgress{Done: true, Message: "scaled to 1 replica: each ready, every pod the scale removed gone"}},
	} {
		if got := s.Progress(tc.w, tc.pods, tc.seen); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A watch tells a scale (the replicas alone changed) from a rollout (the
// template changed, with or without the replicas).
func TestScaledOnly(t *testing.T) {
	dep := func(n int32, image string) Workload {
		return Workload{Deployment: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(n),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}}}}
	}
	// referenced: a Rollout whose template is Deployment web's, at the
	// generation Argo recorded (recorded) or a fresh read resolved (read),
	// 0 for not shown; a fresh read has the template too, as
	// resolveTemplateRef fills it in.
	referenced := func(n int32, recorded, read int64) Workload {
		r := &ArgoRollout{ObjectMeta: metav1.ObjectMeta{Name: "web"}, RefGeneration: read,
			Spec: ArgoRolloutSpec{Replicas: ptr.To(n), WorkloadRef: &ArgoObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}}}
		if read > 0 {
			r.Spec.Template = dep(n, "v1").Deployment.Spec.Template
		}
		if recorded > 0 {
			r.Annotations = map[string]string{ArgoWorkloadGenerationAnnotation: fmt.Sprint(recorded)}
		}
		return Workload{Rollout: r}
	}
	own := func(n int32) Workload {
		return Workload{Rollout: &ArgoRollout{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: ArgoRolloutSpec{Replicas: ptr.To(n)}}}
	}
	for _, tc := range []struct {
		name          string
		before, after Workload
		want          string // "" for not a scale
	}{
		{"scaled in", dep(3, "v1"), dep(1, "v1"), "from 3 replicas to 1"},
		{"scaled out", dep(1, "v1"), dep(4, "v1"), "from 1 replica to 4"},
		{"a new image", dep(3, "v1"), dep(3, "v2"), ""},
		{"a new image and replicas", dep(3, "v1"), dep(2, "v2"), ""},
		{"nothing changed", dep(3, "v1"), dep(3, "v1"), ""},
		{"a template read elsewhere, at one generation", referenced(3, 4, 0), referenced(1, 4, 0), "from 3 replicas to 1"},
		{"a template read elsewhere, recorded then read", referenced(3, 4, 0), referenced(1, 0, 4), "from 3 replicas to 1"},
		{"a template read elsewhere, changed there too", referenced(3, 4, 0), referenced(1, 4, 5), ""},
		{"a template read elsewhere, changed there alone", referenced(3, 4, 0), referenced(3, 5, 0), ""},
		{"a template read elsewhere, its generation unknown", referenced(3, 0, 0), referenced(1, 0, 0), ""},
		{"a template read elsewhere, then its own", referenced(3, 4, 0), own(1), ""},
		{"a Rollout's own template", own(3), own(1), "from 3 replicas to 1"},
		{"a DaemonSet", Workload{DaemonSet: &appsv1.DaemonSet{}}, Workload{DaemonSet: &appsv1.DaemonSet{}}, ""},
	} {
		sc, ok := ScaledOnly(tc.before, tc.after)
		how := ""
		if ok {
			how = sc.Change()
		}
		if how != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %q %v, want %q", tc.name, how, ok, tc.want)
		}
	}
}

// A scale's end says what went: a scale-out removes no pod.
func TestScaleGone(t *testing.T) {
	if got := (Scale{From: 3, Replicas: 1}).Gone(); got != "every pod the scale removed is gone" {
		t.Errorf("scale-in: %q", got)
	}
	if got := (Scale{From: 1, Replicas: 3}).Gone(); got != "the scale removed no pod" {
		t.Errorf("scale-out: %q", got)
	}
}
