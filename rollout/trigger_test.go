package rollout

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

func webDeployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "front"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:v1"}, {Name: "sidecar", Image: "proxy:v1"}}},
			},
		},
	}
}

func service(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod"}, Spec: corev1.ServiceSpec{Selector: selector}}
}

func TestRestartSetsTheAnnotationKubectlSets(t *testing.T) {
	kube := fake.NewClientset(webDeployment())
	at := time.Date(2026, 11, 21, 9, 30, 15, 500, time.UTC)
	if err := (Restart{Now: func() time.Time { return at }}).Fire(context.Background(), kube, webRef); err != nil {
		t.Fatal(err)
	}
	d, _ := kube.AppsV1().Deployments("prod").Get(context.Background(), "web", metav1.GetOptions{})
	if got := d.Spec.Template.Annotations[RestartedAtAnnotation]; got != "2026-11-21T09:30:15Z" {
		t.Fatalf("restartedAt = %q", got)
	}
}

func TestSetImage(t *testing.T) {
	kube := fake.NewClientset(webDeployment())
	ctx := context.Background()
	if err := (SetImage{Container: "app", Image: "web:v2"}).Fire(ctx, kube, webRef); err != nil {
		t.Fatal(err)
	}
	d, _ := kube.AppsV1().Deployments("prod").Get(ctx, "web", metav1.GetOptions{})
	if d.Spec.Template.Spec.Containers[0].Image != "web:v2" || d.Spec.Template.Spec.Containers[1].Image != "proxy:v1" {
		t.Fatalf("containers %+v", d.Spec.Template.Spec.Containers)
	}
	err := (SetImage{Container: "nope", Image: "x"}).Fire(ctx, kube, webRef)
	if err == nil || !strings.Contains(err.Error(), "app, sidecar") {
		t.Fatalf("unknown container: %v", err)
	}
	for _, bad := range []string{"app", "=img", "app="} {
		if _, err := ParseSetImage(bad); err == nil {
			t.Errorf("ParseSetImage(%q) accepted", bad)
		}
	}
}

// An init container's image is set as kubectl set image sets it: a native
// sidecar (a mesh proxy) is rolled out by its image. The other init
// container and the app's containers are left as they were, and a name
// found nowhere lists the init containers too.
func TestSetImageOfANativeSidecar(t *testing.T) {
	d := webDeployment()
	d.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "migrate:v1"},
		{Name: "mesh", Image: "mesh:v1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	kube := fake.NewClientset(d)
	ctx := context.Background()
	if err := (SetImage{Container: "mesh", Image: "mesh:v2"}).Fire(ctx, kube, webRef); err != nil {
		t.Fatal(err)
	}
	got, _ := kube.AppsV1().Deployments("prod").Get(ctx, "web", metav1.GetOptions{})
	spec := got.Spec.Template.Spec
	if len(spec.InitContainers) != 2 || spec.InitContainers[0].Image != "migrate:v1" || spec.InitContainers[1].Image != "mesh:v2" ||
		spec.InitContainers[1].RestartPolicy == nil || spec.Containers[0].Image != "web:v1" || spec.Containers[1].Image != "proxy:v1" {
		t.Errorf("after set image mesh=mesh:v2: init containers %+v, containers %+v", spec.InitContainers, spec.Containers)
	}
	err := (SetImage{Container: "nope", Image: "x"}).Fire(ctx, kube, webRef)
	if err == nil || !strings.Contains(err.Error(), "(it has app, sidecar; init containers: migrate, mesh)") {
		t.Errorf("unknown container: %v", err)
	}
}

func TestPatchAndExec(t *testing.T) {
	if _, err := ParsePatch([]byte("not json")); err == nil {
		t.Error("ParsePatch accepted garbage")
	}
	kube := fake.NewClientset(webDeployment())
	ctx := context.Background()
	p, err := ParsePatch([]byte(`{"spec":{"template":{"metadata":{"labels":{"rev":"2"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Fire(ctx, kube, webRef); err != nil {
		t.Fatal(err)
	}
	d, _ := kube.AppsV1().Deployments("prod").Get(ctx, "web", metav1.GetOptions{})
	if d.Spec.Template.Labels["rev"] != "2" || d.Spec.Template.Labels["app"] != "web" {
		t.Fatalf("labels %v", d.Spec.Template.Labels)
	}
	var out bytes.Buffer
	if err := (Exec{Argv: []string{"echo", "deployed"}, Stdout: &out}).Fire(ctx, nil, Ref{}); err != nil || out.String() != "deployed\n" {
		t.Fatalf("exec: %v, output %q", err, out.String())
	}
	if err := (Exec{Argv: []string{"false"}}).Fire(ctx, nil, Ref{}); err == nil {
		t.Fatal("a failing deploy command must fail the trigger")
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	other := service("other", map[string]string{"app": "api"})
	web := service("web", map[string]string{"app": "web"})
	front := service("front", map[string]string{"tier": "front"})
	headless := service("headless", nil)

	kube := fake.NewClientset(webDeployment(), web, other, headless)
	tg, err := Resolve(ctx, kube, Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"}, "")
	if err != nil || tg.Service.Name != "web" {
		t.Fatalf("auto-detect: %v %v", tg, err)
	}
	kube = fake.NewClientset(webDeployment(), web, front)
	if _, err := Resolve(ctx, kube, Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"}, ""); err == nil || !strings.Contains(err.Error(), "front, web") {
		t.Fatalf("ambiguity must name the candidates: %v", err)
	}
	if tg, err := Resolve(ctx, kube, Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"}, "front"); err != nil || tg.Service.Name != "front" {
		t.Fatalf("explicit service: %v", err)
	}
	kube = fake.NewClientset(webDeployment(), other)
	if _, err := Resolve(ctx, kube, Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"}, ""); !errors.Is(err, ErrNameTheService) {
		t.Fatalf("no match: %v", err)
	}
	if _, err := Resolve(ctx, kube, Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"}, "other"); err == nil || !strings.Contains(err.Error(), "does not select") {
		t.Fatalf("explicit non-matching service: %v", err)
	}
	if _, err := Resolve(ctx, kube, Ref{Kind: KindDeployment, Namespace: "prod", Name: "nope"}, ""); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing deployment: %v", err)
	}
}

func TestParseRef(t *testing.T) {
	for in, want := range map[string][2]string{"web": {"def", "web"}, "prod/web": {"prod", "web"}, "deploy/web": {"def", "web"}} {
		r, err := ParseRef(KindDeployment, in, "def")
		if err != nil || r.Namespace != want[0] || r.Name != want[1] {
			t.Errorf("%q: %+v %v", in, r, err)
		}
	}
	for _, bad := range []string{"", "/web", "prod/", "a/b/c"} {
		if _, err := ParseRef(KindDeployment, bad, "def"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

var webRef = Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"}

func webStatefulSet() *appsv1.StatefulSet {
	d := webDeployment()
	return &appsv1.StatefulSet{ObjectMeta: d.ObjectMeta, Spec: appsv1.StatefulSetSpec{Replicas: d.Spec.Replicas, Selector: d.Spec.Selector,
		Template: d.Spec.Template, ServiceName: "web-pods"}}
}

func webDaemonSet() *appsv1.DaemonSet {
	d := webDeployment()
	return &appsv1.DaemonSet{ObjectMeta: d.ObjectMeta, Spec: appsv1.DaemonSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template}}
}

// The triggers write the workload of the kind they are given, as kubectl
// does for each (rollout restart and set image work on all three), and
// leave an object of the same name but another kind alone.
func TestTriggersOnEveryKind(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 11, 21, 9, 30, 15, 0, time.UTC)
	template := func(kube *fake.Clientset, k Kind) corev1.PodTemplateSpec {
		w, err := GetWorkload(ctx, kube, Ref{Kind: k, Namespace: "prod", Name: "web"})
		if err != nil {
			t.Fatal(err)
		}
		return *w.Template()
	}
	for _, k := range []Kind{KindStatefulSet, KindDaemonSet} {
		t.Run(string(k), func(t *testing.T) {
			kube := fake.NewClientset(webDeployment(), webStatefulSet(), webDaemonSet())
			ref := Ref{Kind: k, Namespace: "prod", Name: "web"}
			if err := (Restart{Now: func() time.Time { return at }}).Fire(ctx, kube, ref); err != nil {
				t.Fatal(err)
			}
			if err := (SetImage{Container: "app", Image: "web:v2"}).Fire(ctx, kube, ref); err != nil {
				t.Fatal(err)
			}
			got := template(kube, k)
			if got.Annotations[RestartedAtAnnotation] != "2026-11-21T09:30:15Z" || got.Spec.Containers[0].Image != "web:v2" || got.Spec.Containers[1].Image != "proxy:v1" {
				t.Errorf("%s's template after restart and set image: %+v", k, got)
			}
			if d := template(kube, KindDeployment); d.Annotations[RestartedAtAnnotation] != "" || d.Spec.Containers[0].Image != "web:v1" {
				t.Errorf("the Deployment of the same name changed: %+v", d)
			}
			if err := (SetImage{Container: "nope", Image: "x"}).Fire(ctx, kube, ref); err == nil || !strings.Contains(err.Error(), k.Lower()+" prod/web has no container") {
				t.Errorf("unknown container: %v", err)
			}
		})
	}
}

// A StatefulSet's governing Service is headless and selects its pods too:
// the Service in front is the other one, unless the headless one is all
// there is.
func TestResolveLeavesTheHeadlessServiceAside(t *testing.T) {
	ctx := context.Background()
	web := service("web", map[string]string{"app": "web"})
	pods := service("web-pods", map[string]string{"app": "web"})
	pods.Spec.ClusterIP = corev1.ClusterIPNone
	ref := Ref{Kind: KindStatefulSet, Namespace: "prod", Name: "web"}
	tg, err := Resolve(ctx, fake.NewClientset(webStatefulSet(), web, pods), ref, "")
	if err != nil || tg.Service.Name != "web" || tg.Workload.Kind() != KindStatefulSet {
		t.Fatalf("with a headless governing Service: %+v %v", tg, err)
	}
	tg, err = Resolve(ctx, fake.NewClientset(webStatefulSet(), pods), ref, "")
	if err != nil || tg.Service.Name != "web-pods" {
		t.Fatalf("the headless Service alone: %+v %v", tg, err)
	}
	if _, err := Resolve(ctx, fake.NewClientset(webDeployment(), web), ref, ""); err == nil || !strings.Contains(err.Error(), "statefulset prod/web not found") {
		t.Fatalf("a Deployment where a StatefulSet is named: %v", err)
	}
}

// The OnDelete strategy rolls nothing by itself; a paused Deployment does
// not roll: both are refused before anything changes.
func TestCanRoll(t *testing.T) {
	sts, ds, d := webStatefulSet(), webDaemonSet(), webDeployment()
	sts.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
	ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	d.Spec.Paused = true
	for _, w := range []Workload{{StatefulSet: sts}, {DaemonSet: ds}} {
		if err := w.CanRoll(); !errors.Is(err, ErrOnDelete) {
			t.Errorf("%s with OnDelete: %v", w.Kind(), err)
		}
	}
	if err := (Workload{Deployment: d}).CanRoll(); !errors.Is(err, ErrPaused) {
		t.Errorf("paused deployment: %v", err)
	}
	if err := (Workload{StatefulSet: webStatefulSet()}).CanRoll(); err != nil {
		t.Errorf("a rolling StatefulSet: %v", err)
	}
}

// A server at the kubeconfig's address that is not an API server (a proxy,
// a web server on the network a host outside the lab reaches) answers 404
// in a page of its own: that is no answer about the workload, and the
// error says so instead of "not found". The API's own 404 (a Status) is
// still "not found".
func TestGetWorkloadTellsAForeignServerFromNotFound(t *testing.T) {
	ctx := context.Background()
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "404 page not found", http.StatusNotFound)
	}))
	defer foreign.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"deployments.apps \"web\" not found","reason":"NotFound","details":{"name":"web","group":"apps","kind":"deployments"},"code":404}`)
	}))
	defer api.Close()
	ref := Ref{Kind: KindDeployment, Namespace: "prod", Name: "web"}
	for _, c := range []struct {
		server, want string
		notFound     bool
	}{
		{foreign.URL, "the server's answer is not the Kubernetes API's", false},
		{api.URL, "deployment prod/web not found", true},
	} {
		kube, err := kubernetes.NewForConfig(&rest.Config{Host: c.server})
		if err != nil {
			t.Fatal(err)
		}
		_, err = GetWorkload(ctx, kube, ref)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want it to say %q", c.server, err, c.want)
		}
		if got := strings.HasSuffix(err.Error(), "not found"); got != c.notFound {
			t.Errorf("%s: %v: ends in \"not found\" %v, want %v", c.server, err, got, c.notFound)
		}
	}
}
