package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/internal/golden"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/render"
	"github.com/rollprobe/rollprobe/rollout"
)

// good is a Deployment that passes every check: the lab's graceful sample.
func good() (*appsv1.Deployment, *corev1.Service, []policyv1.PodDisruptionBudget) {
	grace := int64(20)
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}}
	live := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromString("http")}}}
	replicas := int32(3)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{
				{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: probe, LivenessProbe: live,
					Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}},
				// A sidecar the Service does not target: not checked.
				{Name: "log-shipper", Command: []string{"sh", "-c", "tail -F /var/log/app.log"}},
			}},
		}},
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}}
	pdb := policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	return d, svc, []policyv1.PodDisruptionBudget{pdb}
}

func TestChecks(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(d *appsv1.Deployment, svc *corev1.Service, in *Input)
		id       string // "" = no finding at all
		severity string
		evidence string // substring of the evidence
	}{
		{"good", func(*appsv1.Deployment, *corev1.Service, *Input) {}, "", "", ""},
		{"no preStop", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) { app(d).Lifecycle = nil }, NoPreStop, "error", "container(s) app"},
		{"no preStop under an autoscaler", func(d *appsv1.Deployment, _ *corev1.Service, in *Input) {
			app(d).Lifecycle = nil
			in.Autoscalers = []string{"horizontalpodautoscaler web (2 to 10 replicas)"}
		}, NoPreStop, "error", "horizontalpodautoscaler web (2 to 10 replicas) scales deployment prod/web: each of its scale-ins deletes pods the same way, between deploys too"},
		{"an autoscaler alone is no finding", func(_ *appsv1.Deployment, _ *corev1.Service, in *Input) {
			in.Autoscalers = []string{"horizontalpodautoscaler web (2 to 10 replicas)"}
		}, "", "", ""},
		{"preStop eats the grace period", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) {
			app(d).Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 20"}}}
		}, GraceBelowPreStop, "error", "preStop waits 20s, terminationGracePeriodSeconds is 20"},
		{"grace below preStop + drain", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) {
			app(d).Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sleep", "17"}}}
		}, GraceBelowPreStop, "warning", "preStop 17s + expected drain 5s > terminationGracePeriodSeconds 20"},
		{"default grace is 30", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) {
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = nil
			app(d).Lifecycle.PreStop.Sleep.Seconds = 30
		}, GraceBelowPreStop, "error", "terminationGracePeriodSeconds is 30"},
		{"no readiness", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) { app(d).ReadinessProbe = nil }, NoReadiness, "error", "container(s) app"},
		{"readiness is liveness", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) {
			app(d).LivenessProbe = app(d).ReadinessProbe.DeepCopy()
		},
			ReadinessIsLiveness, "warning", "same handler"},
		{"one replica, maxUnavailable 1", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) {
			one, mu := int32(1), intstr.FromInt32(1)
			d.Spec.Replicas = &one
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: &mu}
		}, ZeroReadyPossible, "error", "replicas 1, maxUnavailable 1 (= 1)"},
		{"maxUnavailable 100%", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) {
			mu := intstr.FromString("100%")
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: &mu}
		}, ZeroReadyPossible, "error", "down to 0"},
		{"recreate", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) {
			d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
		},
			ZeroReadyPossible, "error", "Recreate"},
		{"publishes not-ready addresses", func(_ *appsv1.Deployment, svc *corev1.Service, _ *Input) {
			svc.Spec.PublishNotReadyAddresses = true
		}, PublishesNotReady, "error", "service web has publishNotReadyAddresses: true"},
		{"a headless Service publishes not-ready addresses", func(_ *appsv1.Deployment, svc *corev1.Service, _ *Input) {
			svc.Spec.PublishNotReadyAddresses, svc.Spec.ClusterIP = true, corev1.ClusterIPNone
		}, PublishesNotReady, "warning", "it is headless: a pod's own name then resolves as soon as the pod has an address"},
		{"ETP Local on 1.25", func(_ *appsv1.Deployment, svc *corev1.Service, in *Input) {
			svc.Spec.Type, svc.Spec.ExternalTrafficPolicy = corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal
			in.Version = advice.Version{Major: 1, Minor: 25}
		}, ETPLocalBefore126, "error", "the server is v1.25"},
		{"no PDB", func(_ *appsv1.Deployment, _ *corev1.Service, in *Input) {
			in.PDBs[0].Spec.Selector.MatchLabels = map[string]string{"app": "other"}
		}, NoPDB, "warning", "no PodDisruptionBudget in namespace prod"},
		{"a budget with no selector selects no pod", func(_ *appsv1.Deployment, _ *corev1.Service, in *Input) {
			in.PDBs[0].Spec.Selector = nil
		}, NoPDB, "warning", "no PodDisruptionBudget in namespace prod"},
		{"shell as PID 1", func(d *appsv1.Deployment, _ *corev1.Service, _ *Input) {
			app(d).Command = []string{"/bin/sh", "-c", "./migrate && ./server"}
		}, ShellPID1, "warning", "container(s) app"},
		// A native sidecar the Service targets (a TLS terminator in front
		// of the app) is checked; its stop is held by its own preStop hook
		// or an app container's: the kubelet stops it after them.
		{"a targeted native sidecar held by the app's hook", func(d *appsv1.Deployment, svc *corev1.Service, _ *Input) {
			tlsSidecar(d, svc)
		}, "", "", ""},
		{"a targeted native sidecar with no hook to hold it", func(d *appsv1.Deployment, svc *corev1.Service, _ *Input) {
			tlsSidecar(d, svc)
			app(d).Lifecycle = nil
		}, NoPreStop, "error", "container(s) tls (native sidecar): no lifecycle.preStop"},
		{"a targeted native sidecar's own hook", func(d *appsv1.Deployment, svc *corev1.Service, _ *Input) {
			tlsSidecar(d, svc).Lifecycle = app(d).Lifecycle
			app(d).Lifecycle = nil
		}, "", "", ""},
		{"a targeted native sidecar without a readiness probe", func(d *appsv1.Deployment, svc *corev1.Service, _ *Input) {
			tlsSidecar(d, svc).ReadinessProbe = nil
		}, NoReadiness, "error", "container(s) tls (native sidecar): no readinessProbe"},
		{"a proxy in front of the app, the app's hook alone", func(d *appsv1.Deployment, svc *corev1.Service, _ *Input) {
			spec := &d.Spec.Template.Spec
			spec.Containers = append([]corev1.Container{{Name: "proxy", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8443}},
				ReadinessProbe: app(d).ReadinessProbe}}, spec.Containers...)
			svc.Spec.Ports[0].TargetPort = intstr.FromString("web")
		}, NoPreStop, "error", "container(s) app have a preStop hook, but a hook delays only its own container's stop: the kubelet stops the others at once"},
		{"an untargeted native sidecar is not checked", func(d *appsv1.Deployment, svc *corev1.Service, _ *Input) {
			tlsSidecar(d, svc).ReadinessProbe = nil
			svc.Spec.Ports[0].TargetPort = intstr.FromString("http")
		}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, svc, pdbs := good()
			in := Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, Version: advice.Version{Major: 1, Minor: 36}}
			tt.mutate(d, svc, &in)
			fs := Run(in, Options{})
			if tt.id == "" {
				if len(fs) != 0 {
					t.Fatalf("findings on a good deployment: %+v", fs)
				}
				return
			}
			if len(fs) != 1 {
				t.Fatalf("want exactly %s, got %+v", tt.id, fs)
			}
			f := fs[0]
			if f.ID != tt.id || string(f.Severity) != tt.severity || f.Source != report.SourceDoctor || f.Fix == "" {
				t.Fatalf("got %s/%s (source %q), want %s/%s: %+v", f.ID, f.Severity, f.Source, tt.id, tt.severity, f)
			}
			if !strings.Contains(strings.Join(f.Evidence, "\n"), tt.evidence) {
				t.Fatalf("evidence %q lacks %q", f.Evidence, tt.evidence)
			}
		})
	}
}

func app(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }

// tlsSidecar adds a native sidecar "tls" (port tls, 8443, with a readiness
// probe there and no preStop hook) and points the Service at it.
func tlsSidecar(d *appsv1.Deployment, svc *corev1.Service) *corev1.Container {
	spec := &d.Spec.Template.Spec
	spec.InitContainers = append(spec.InitContainers, corev1.Container{Name: "tls", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports:          []corev1.ContainerPort{{Name: "tls", ContainerPort: 8443}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("tls")}}}})
	svc.Spec.Ports[0].TargetPort = intstr.FromString("tls")
	return &spec.InitContainers[len(spec.InitContainers)-1]
}

// The fix names the hook the cluster supports.
func TestPreStopFixFollowsTheVersion(t *testing.T) {
	for _, tc := range []struct {
		minor int
		want  string
	}{{36, "sleep.seconds: 5"}, {29, `exec.command: ["sleep", "5"]`}} {
		d, svc, pdbs := good()
		app(d).Lifecycle = nil
		fs := Run(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, Version: advice.Version{Major: 1, Minor: tc.minor}}, Options{})
		if len(fs) != 1 || !strings.Contains(fs[0].Fix, tc.want) {
			t.Errorf("1.%d: %+v, want the fix to say %s", tc.minor, fs, tc.want)
		}
	}
}

// A Service Traefik reaches over h2c (gRPC behind it): without a preStop,
// the finding says what Traefik does with a call to a gone pod; over
// http it says nothing of it.
func TestPreStopSaysTraefikHoldsH2CCalls(t *testing.T) {
	for _, scheme := range []string{"h2c", "http", ""} {
		d, svc, pdbs := good()
		app(d).Lifecycle = nil
		if scheme != "" {
			svc.Annotations = map[string]string{"traefik.ingress.kubernetes.io/service.serversscheme": scheme}
		}
		fs := Run(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs}, Options{})
		if len(fs) != 1 || fs[0].ID != NoPreStop {
			t.Fatalf("%q: %+v", scheme, fs)
		}
		says := strings.Contains(strings.Join(fs[0].Evidence, "\n"), "Traefik v3.6 dials h2c backends with no timeout")
		if says != (scheme == "h2c") {
			t.Errorf("serversscheme %q: evidence %q", scheme, fs[0].Evidence)
		}
	}
}

func TestExpectedDrainOption(t *testing.T) {
	d, svc, pdbs := good() // preStop 5s, grace 20s
	if fs := Run(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs}, Options{ExpectedDrain: 16 * time.Second}); len(fs) != 1 || fs[0].ID != GraceBelowPreStop {
		t.Fatalf("a 16s drain does not fit in 20s - 5s: %+v", fs)
	}
}

func TestGather(t *testing.T) {
	d, svc, pdbs := good()
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 4,
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name}}}
	kube := fake.NewClientset(d, svc, &pdbs[0], hpa)
	kube.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: "25+"}
	in, err := Gather(context.Background(), kube, &rollout.Target{Namespace: "prod", Workload: rollout.Workload{Deployment: d}, Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	if in.Version != (advice.Version{Major: 1, Minor: 25}) || len(in.PDBs) != 1 {
		t.Fatalf("gathered %s with %d PDBs", in.Version, len(in.PDBs))
	}
	if strings.Join(in.Autoscalers, ", ") != "horizontalpodautoscaler web (1 to 4 replicas)" {
		t.Errorf("autoscalers %q", in.Autoscalers)
	}
	// Not listable: nothing said of them, the rest gathered.
	kube.PrependReactor("list", "horizontalpodautoscalers", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(autoscalingv2.Resource("horizontalpodautoscalers"), "", errors.New("no rule"))
	})
	if in, err := Gather(context.Background(), kube, &rollout.Target{Namespace: "prod", Workload: rollout.Workload{Deployment: d}, Service: svc}); err != nil || in.Autoscalers != nil || len(in.PDBs) != 1 {
		t.Errorf("autoscalers forbidden: %q, %d PDBs, %v", in.Autoscalers, len(in.PDBs), err)
	}
}

// Every check ID is a finding ID the report schema accepts.
func TestSchemaKnowsEveryCheck(t *testing.T) {
	b, err := os.ReadFile("../report/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Findings struct {
				Items struct {
					Properties struct {
						ID struct {
							Enum []string `json:"enum"`
						} `json:"id"`
					} `json:"properties"`
				} `json:"items"`
			} `json:"findings"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, id := range schema.Properties.Findings.Items.Properties.ID.Enum {
		known[id] = true
	}
	for _, c := range Checks() {
		if !known[c.ID] {
			t.Errorf("check %s is not in the report schema's finding ids", c.ID)
		}
	}
}

// The text rendering and the JSON document of a result with an error and
// a warning, at a fixed input.
func TestResultGolden(t *testing.T) {
	d, svc, _ := good()
	app(d).Lifecycle = nil
	res := Evaluate(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, Version: advice.Version{Major: 1, Minor: 36}}, Options{}, report.FailOn("error"))
	if res.Pass {
		t.Fatal("an error finding passed")
	}
	var text bytes.Buffer
	if err := render.DoctorText(&text, res); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "result.golden.txt", text.Bytes())
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "result.golden.json", append(js, '\n'))
	if Evaluate(Input{Workload: rollout.Workload{Deployment: d}, Service: svc}, Options{}, report.FailNever).Pass != true {
		t.Error("--fail-on never failed")
	}
}

// docs/doctor.md's table of checks is the check table, in its order, with each
// check's severity: documentation cannot drift from what runs.
func TestDocsListTheChecks(t *testing.T) {
	b, err := os.ReadFile("../docs/doctor.md")
	if err != nil {
		t.Fatal(err)
	}
	// The rows of the table headed "| check | severity |".
	_, table, found := strings.Cut(string(b), "| check | severity |")
	if !found {
		t.Fatal("docs/doctor.md has no table of doctor checks")
	}
	var rows []string
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows = append(rows, line)
	}
	if len(rows) != len(checks) {
		t.Fatalf("docs/doctor.md lists %d checks, the table has %d:\n%s", len(rows), len(checks), strings.Join(rows, "\n"))
	}
	for i, c := range checks {
		if !strings.HasPrefix(rows[i], "| `"+c.id+"` | "+string(c.severity)) {
			t.Errorf("docs/doctor.md row %d is %q, want check %s (%s)", i, rows[i], c.id, c.severity)
		}
	}
}

// After a run measured the window, the doctor's preStop advice names that
// number, not its default: one number for one fix in a report.
func TestPreStopFixNamesTheMeasuredWindow(t *testing.T) {
	d, svc, pdbs := good()
	app(d).Lifecycle = nil
	fs := Run(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, Version: advice.Version{Major: 1, Minor: 36}}, Options{MeasuredPreStop: 4})
	if len(fs) != 1 || !strings.Contains(fs[0].Fix, "at least 4s as this run measured") || !strings.Contains(fs[0].Fix, "sleep.seconds: 4") ||
		strings.Contains(fs[0].Fix, "5") {
		t.Fatalf("%+v", fs)
	}
}

// A run that deleted pods under load and dropped nothing outranks the
// static guess: the missing preStop hook becomes a note saying what was
// measured (it printed an ERROR next to verdict PASS). A run that dropped
// requests, one that deleted nothing, and doctor alone keep the error,
// as does a run whose every deleted pod exited at once: it won the race
// with propagation this time (the endpoint change came first), and says
// so.
//
// The same holds for a Service that publishes not-ready addresses: a run
// that deleted pods under load with no failure measured an app that
// listens from its start until it is gone.
func TestMeasuredNoDropOutranksTheStaticCheck(t *testing.T) {
	for _, subject := range []struct {
		id     string
		mutate func(d *appsv1.Deployment, svc *corev1.Service)
	}{
		{NoPreStop, func(d *appsv1.Deployment, _ *corev1.Service) { app(d).Lifecycle = nil }},
		{PublishesNotReady, func(_ *appsv1.Deployment, svc *corev1.Service) { svc.Spec.PublishNotReadyAddresses = true }},
	} {
		d, svc, pdbs := good()
		subject.mutate(d, svc)
		in := Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, Version: advice.Version{Major: 1, Minor: 36}}
		for _, tc := range []struct {
			name     string
			measured *Measured
			want     report.Severity
		}{
			{"doctor alone", nil, report.SeverityError},
			{"no drop", &Measured{PodsDeleted: 3, Sent: 9247, ServedAfterDeletion: 40}, report.SeverityInfo},
			{"drops", &Measured{PodsDeleted: 3, Sent: 9247, Failed: 12}, report.SeverityError},
			{"nothing deleted", &Measured{Sent: 9247}, report.SeverityError},
			// Every deleted pod exited at once: no drop was a race won
			// (kube-proxy had the change first), not the app's delay.
			{"no drop, every pod exited at once", &Measured{PodsDeleted: 2, Sent: 9247, ServedAfterDeletion: 40, ExitsSeen: 2, ExitedWithin: 310 * time.Millisecond}, report.SeverityError},
			{"no drop, a pod ran on", &Measured{PodsDeleted: 2, Sent: 9247, ServedAfterDeletion: 40, ExitsSeen: 2, ExitedWithin: 4200 * time.Millisecond}, report.SeverityInfo},
			{"no drop, one exit unseen", &Measured{PodsDeleted: 2, Sent: 9247, ServedAfterDeletion: 40, ExitsSeen: 1, ExitedWithin: 310 * time.Millisecond}, report.SeverityInfo},
		} {
			want := tc.want
			fs := Run(in, Options{Measured: tc.measured})
			if len(fs) != 1 || fs[0].ID != subject.id || fs[0].Severity != want {
				t.Fatalf("%s, %s: %+v", subject.id, tc.name, fs)
			}
			evidence := strings.Join(fs[0].Evidence, "\n")
			var says string
			switch tc.name {
			case "no drop, every pod exited at once":
				// Both: the endpoint outlives the app, with or without
				// publishNotReadyAddresses.
				says = "each of the 2 pod(s) it deleted exited within 0.31s of its deletion request"
				if subject.id == PublishesNotReady {
					says += " (as the watch received both) while its address stayed published until the pod was gone"
				}
			case "no drop, a pod ran on":
				if subject.id == NoPreStop {
					says = "the slowest of the 2 pod(s) whose exit the run saw exited 4.20s after its deletion request"
				}
			case "no drop, one exit unseen":
				if subject.id == NoPreStop {
					says = "the slowest of the 1 pod(s) whose exit the run saw exited 0.31s after"
				}
			}
			if says != "" && !strings.Contains(evidence, says) {
				t.Errorf("%s, %s: evidence %q lacks %q", subject.id, tc.name, evidence, says)
			}
			tc.want = want
			if tc.want == report.SeverityInfo && (!strings.Contains(fs[0].Title, "this run measured no drop") ||
				!strings.Contains(evidence, "none of its 9247 requests failed") ||
				(subject.id == NoPreStop && !strings.Contains(evidence, "40 responses"))) {
				t.Errorf("%s, %s: the note does not say what was measured: %+v", subject.id, tc.name, fs[0])
			}
		}
	}
}

// Every check's finding has its page in docs/findings, listed in the index.
func TestEveryCheckHasItsPage(t *testing.T) {
	index, err := os.ReadFile("../docs/findings/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Checks() {
		page, err := os.ReadFile("../docs/findings/" + c.ID + ".md")
		if err != nil || !strings.HasPrefix(string(page), "# `"+c.ID+"`") || !strings.Contains(string(page), "## The fix") {
			t.Errorf("docs/findings/%s.md: %v (want a page titled with the ID, with a fix)", c.ID, err)
		}
		if !strings.Contains(string(index), "("+c.ID+".md)") {
			t.Errorf("docs/findings/README.md does not list %s", c.ID)
		}
	}
}

// budgetFinding runs the doctor on good()'s Deployment (3 replicas) with
// budget in its namespace and returns the finding id, or nil.
func budgetFinding(id string, budget policyv1.PodDisruptionBudget) *report.Finding {
	d, svc, _ := good()
	in := Input{Workload: rollout.Workload{Deployment: d}, Service: svc, Version: advice.Version{Major: 1, Minor: 36},
		PDBs: []policyv1.PodDisruptionBudget{budget}}
	for _, f := range Run(in, Options{}) {
		if f.ID == id {
			return &f
		}
	}
	return nil
}

// A budget that allows no disruption with every pod ready is named: by
// maxUnavailable 0 or 0%, by minAvailable at or above the replicas (100%,
// or 90% of 3 rounded up); one that lets a pod go, or covers other pods,
// is not. A budget over several workloads counts all the pods it selects
// (its status's expectedPods, once observed): minAvailable 3 of the 5 it
// counts lets 2 go though this workload has 3 replicas.
func TestPDBAllowsNoEviction(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		maxUnavailable, minAvl *intstr.IntOrString
		selector               map[string]string
		want                   bool
		status                 policyv1.PodDisruptionBudgetStatus
	}{
		{"minAvailable 3 of the 5 a shared budget counts", nil, ptr.To(intstr.FromInt32(3)), map[string]string{"app": "web"}, false,
			policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, ExpectedPods: 5, DisruptionsAllowed: 2}},
		{"minAvailable 3 of 3, the status not yet observed", nil, ptr.To(intstr.FromInt32(3)), map[string]string{"app": "web"}, true,
			policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 0, ExpectedPods: 5}},
		{"minAvailable 5 of the 5 a shared budget counts", nil, ptr.To(intstr.FromInt32(5)), map[string]string{"app": "web"}, true,
			policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, ExpectedPods: 5}},
		{"maxUnavailable 0", ptr.To(intstr.FromInt32(0)), nil, map[string]string{"app": "web"}, true, policyv1.PodDisruptionBudgetStatus{}},
		{"maxUnavailable 0%", ptr.To(intstr.FromString("0%")), nil, map[string]string{"app": "web"}, true, policyv1.PodDisruptionBudgetStatus{}},
		{"maxUnavailable 1", ptr.To(intstr.FromInt32(1)), nil, map[string]string{"app": "web"}, false, policyv1.PodDisruptionBudgetStatus{}},
		{"maxUnavailable 10% rounds up to 1", ptr.To(intstr.FromString("10%")), nil, map[string]string{"app": "web"}, false, policyv1.PodDisruptionBudgetStatus{}},
		{"minAvailable 3 of 3", nil, ptr.To(intstr.FromInt32(3)), map[string]string{"app": "web"}, true, policyv1.PodDisruptionBudgetStatus{}},
		{"minAvailable 90% of 3 rounds up to 3", nil, ptr.To(intstr.FromString("90%")), map[string]string{"app": "web"}, true, policyv1.PodDisruptionBudgetStatus{}},
		{"minAvailable 2 of 3", nil, ptr.To(intstr.FromInt32(2)), map[string]string{"app": "web"}, false, policyv1.PodDisruptionBudgetStatus{}},
		{"another app's budget", ptr.To(intstr.FromInt32(0)), nil, map[string]string{"app": "db"}, false, policyv1.PodDisruptionBudgetStatus{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := budgetFinding(PDBAllowsNoEviction, policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web-pdb", Namespace: "prod", Generation: 1},
				Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: tc.maxUnavailable, MinAvailable: tc.minAvl,
					Selector: &metav1.LabelSelector{MatchLabels: tc.selector}}, Status: tc.status})
			if (got != nil) != tc.want {
				t.Fatalf("finding %+v, want one: %v", got, tc.want)
			}
			if got != nil && (!strings.Contains(got.Title, "web-pdb") || !strings.Contains(got.Fix, "maxUnavailable: 1")) {
				t.Errorf("finding %+v", got)
			}
		})
	}
}

// policy/v1 reads a budget's empty selector ({}) as every pod of its
// namespace: such a budget covers the workload (no no-pod-disruption-
// budget), and one with maxUnavailable 0 refuses its evictions.
func TestBudgetWithEmptySelectorCoversEveryPod(t *testing.T) {
	all := policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "everything", Namespace: "prod"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{}, MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
	if got := budgetFinding(NoPDB, all); got != nil {
		t.Errorf("an empty selector selects every pod, yet: %+v", got)
	}
	all.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(0))
	if got := budgetFinding(PDBAllowsNoEviction, all); got == nil || !strings.Contains(got.Title, "everything") {
		t.Errorf("maxUnavailable 0 over every pod: finding %+v, want %s naming the budget", got, PDBAllowsNoEviction)
	}
}

// A budget that, with every pod ready, allows as many disruptions as the
// workload has replicas is named: one shared with another workload
// (minAvailable 3 of the 6 it counts, 3 replicas here), maxUnavailable
// 100%, minAvailable 0; one that keeps a pod of the workload, or covers
// other pods only, is not.
func TestPDBAllowsEvictingAll(t *testing.T) {
	observed := func(expected int32) policyv1.PodDisruptionBudgetStatus {
		return policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, ExpectedPods: expected}
	}
	for _, tc := range []struct {
		name                   string
		maxUnavailable, minAvl *intstr.IntOrString
		selector               map[string]string
		status                 policyv1.PodDisruptionBudgetStatus
		want                   bool
	}{
		{"minAvailable 3 of the 6 a shared budget counts", nil, ptr.To(intstr.FromInt32(3)), map[string]string{"app": "web"}, observed(6), true},
		{"minAvailable 4 of the 6 a shared budget counts", nil, ptr.To(intstr.FromInt32(4)), map[string]string{"app": "web"}, observed(6), false},
		{"maxUnavailable 100%", ptr.To(intstr.FromString("100%")), nil, map[string]string{"app": "web"}, observed(3), true},
		{"minAvailable 0", nil, ptr.To(intstr.FromInt32(0)), map[string]string{"app": "web"}, policyv1.PodDisruptionBudgetStatus{}, true},
		{"maxUnavailable 1", ptr.To(intstr.FromInt32(1)), nil, map[string]string{"app": "web"}, observed(3), false},
		{"minAvailable 50% of 3 rounds up to 2", nil, ptr.To(intstr.FromString("50%")), map[string]string{"app": "web"}, observed(3), false},
		{"another app's budget", ptr.To(intstr.FromString("100%")), nil, map[string]string{"app": "db"}, observed(3), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := budgetFinding(PDBAllowsEvictingAll, policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "prod", Generation: 1},
				Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: tc.maxUnavailable, MinAvailable: tc.minAvl,
					Selector: &metav1.LabelSelector{MatchLabels: tc.selector}}, Status: tc.status})
			if (got != nil) != tc.want {
				t.Fatalf("finding %+v, want one: %v", got, tc.want)
			}
			if got != nil && (!strings.Contains(got.Title, "shop lets a drain evict every pod of web") || !strings.Contains(got.Evidence[0], "and web has 3 replicas") ||
				!strings.Contains(got.Fix, "a selector matching its pods only")) {
				t.Errorf("finding %+v", got)
			}
		})
	}
}

// An Argo canary without traffic routing scales its stable pods down as a
// Deployment does, with Argo's 25% defaults ("25" without the % is a
// percentage to Argo too); a blue/green or a traffic-routed canary keeps
// its stable pods whole and is never flagged.
func TestZeroReadyArgoCanary(t *testing.T) {
	ptr := func(v intstr.IntOrString) *intstr.IntOrString { return &v }
	for _, tt := range []struct {
		name             string
		replicas         *int32
		surge, unavail   *intstr.IntOrString
		blueGreen, route bool
		want             string // evidence substring; "" = no finding
	}{
		{name: "defaults, one replica (25% rounds down to 0)", want: ""},
		{name: "one replica, maxUnavailable 1", unavail: ptr(intstr.FromInt32(1)), want: "argo canary with replicas 1, maxUnavailable 1 (= 1)"},
		{name: "both zero resolves to maxUnavailable 1", surge: ptr(intstr.FromInt32(0)), unavail: ptr(intstr.FromString("0%")), want: "replicas 1, maxUnavailable 0% (= 1)"},
		{name: "\"100\" is 100% to Argo", unavail: ptr(intstr.FromString("100")), replicas: int32Ptr(4), want: "down to 0"},
		{name: "four replicas, 25% unavailable", replicas: int32Ptr(4), want: ""},
		{name: "blue/green", blueGreen: true, unavail: ptr(intstr.FromInt32(1)), want: ""},
		{name: "traffic routing keeps the stable pods", route: true, unavail: ptr(intstr.FromInt32(1)), want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &rollout.ArgoRollout{}
			r.Spec.Replicas = tt.replicas
			if tt.blueGreen {
				r.Spec.Strategy.BlueGreen = &rollout.ArgoBlueGreen{ActiveService: "web"}
			} else {
				r.Spec.Strategy.Canary = &rollout.ArgoCanary{MaxSurge: tt.surge, MaxUnavailable: tt.unavail}
				if tt.route {
					r.Spec.Strategy.Canary.TrafficRouting = []byte(`{"nginx":{"stableIngress":"web"}}`)
				}
			}
			f, ok := zeroReady(rollout.Workload{Rollout: r}, nil)
			if tt.want == "" {
				if ok {
					t.Fatalf("flagged: %+v", f)
				}
				return
			}
			if !ok || !strings.Contains(strings.Join(f.Evidence, "\n"), tt.want) || !strings.Contains(f.Fix, "spec.strategy.canary.maxUnavailable: 0") {
				t.Fatalf("finding %+v (%v): want evidence %q and the canary's fix", f, ok, tt.want)
			}
		})
	}
}

func int32Ptr(v int32) *int32 { return &v }

// argoWith is good()'s pod template and Service in a Rollout with strategy
// set by mutate.
func argoWith(mutate func(r *rollout.ArgoRollout, c *corev1.Container)) Input {
	d, svc, pdbs := good()
	r := &rollout.ArgoRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"}}
	r.Spec.Replicas, r.Spec.Template = d.Spec.Replicas, d.Spec.Template
	r.Spec.Strategy.BlueGreen = &rollout.ArgoBlueGreen{ActiveService: "web"}
	mutate(r, &r.Spec.Template.Spec.Containers[0])
	return Input{Workload: rollout.Workload{Rollout: r}, Service: svc, PDBs: pdbs, Version: advice.Version{Major: 1, Minor: 36}}
}

// A Rollout that moves its traffic before it deletes the old pods (a
// blue/green's switch, a traffic-routed canary's full promotion) must keep
// them serving until the move has propagated: the scale-down delay plus
// the preStop sleep, as Argo Rollouts v1.10.1 applies them (a revision
// limit of 0 deletes at once, a delay of 0 never deletes). The missing
// preStop hook is then only a warning: the rollout does not need it.
func TestScaleDownDelayBelowPropagation(t *testing.T) {
	noHook := func(c *corev1.Container) { c.Lifecycle = nil }
	routed := func(r *rollout.ArgoRollout) {
		r.Spec.Strategy.BlueGreen = nil
		r.Spec.Strategy.Canary = &rollout.ArgoCanary{TrafficRouting: []byte(`{"traefik":{"weightedTraefikServiceName":"web"}}`)}
	}
	for _, tt := range []struct {
		name     string
		mutate   func(r *rollout.ArgoRollout, c *corev1.Container)
		opts     Options
		want     report.Severity // of the scale-down check; "" = none
		evidence []string        // in its evidence and fix
		preStop  report.Severity // of no-prestop-hook; "" = none
		// preStopEvidence is in no-prestop-hook's evidence.
		preStopEvidence string
	}{
		{name: "the default delay, a preStop sleep", mutate: func(*rollout.ArgoRollout, *corev1.Container) {}},
		{name: "the default delay, no preStop: the hook is for drains only", mutate: func(_ *rollout.ArgoRollout, c *corev1.Container) { noHook(c) },
			preStop: report.SeverityWarning},
		{name: "revision limit 0, a 5 s sleep covers it", mutate: func(r *rollout.ArgoRollout, _ *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelayRevisionLimit = int32Ptr(0)
		}},
		{name: "revision limit 0 whatever the delay, a 2 s sleep", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelayRevisionLimit, r.Spec.Strategy.BlueGreen.ScaleDownDelaySeconds = int32Ptr(0), int32Ptr(60)
			c.Lifecycle.PreStop.Sleep.Seconds = 2
		}, want: report.SeverityError, evidence: []string{"deletes the old pods 0 s later: scaleDownDelayRevisionLimit: 0", "keeps them serving 2 s more: 2 s after the move",
			`kubectl patch rollout web -n prod --type merge -p '{"spec":{"strategy":{"blueGreen":{"scaleDownDelaySeconds":30,"scaleDownDelayRevisionLimit":null}}}}'`}},
		{name: "a 3 s delay, no preStop", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelaySeconds = int32Ptr(3)
			noHook(c)
		}, want: report.SeverityError, evidence: []string{"3 s later: scaleDownDelaySeconds: 3", "container(s) app: no lifecycle.preStop", "5 s is the least",
			`{"blueGreen":{"scaleDownDelaySeconds":30}}`}, preStop: report.SeverityError},
		{name: "a delay of 0 never deletes", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelaySeconds = int32Ptr(0)
			noHook(c)
		}, preStop: report.SeverityWarning},
		{name: "a hook whose length cannot be read", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelayRevisionLimit = int32Ptr(0)
			c.Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/drain.sh"}}}
		}},
		{name: "a run measured an 8 s window", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelaySeconds = int32Ptr(6)
			noHook(c)
		}, opts: Options{MeasuredPreStop: 8}, want: report.SeverityError, evidence: []string{"8 s is the least to allow (the window this run measured)"},
			preStop: report.SeverityError},
		{name: "a run measured a window under the doctor's floor", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelaySeconds = int32Ptr(3)
			noHook(c)
		}, opts: Options{MeasuredPreStop: 3}, want: report.SeverityError, evidence: []string{"5 s is the least to allow (this run measured 3 s; the doctor allows no less than its 5 s)"},
			preStop: report.SeverityError},
		{name: "a run that measured no drop", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelaySeconds = int32Ptr(3)
			noHook(c)
		}, opts: Options{Measured: &Measured{PodsDeleted: 2, Sent: 5000}}, want: report.SeverityInfo,
			evidence: []string{"none of its 5000 requests failed"}, preStop: report.SeverityInfo},
		{name: "a canary routed by a proxy, a 2 s delay", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			routed(r)
			r.Spec.Strategy.Canary.ScaleDownDelaySeconds = int32Ptr(2)
			noHook(c)
		}, want: report.SeverityError, evidence: []string{"the full promotion", `{"canary":{"scaleDownDelaySeconds":30}}`}, preStop: report.SeverityError},
		{name: "a routed canary at the default delay", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) { routed(r); noHook(c) },
			preStop: report.SeverityWarning},
		// Its pods exited at once and nothing dropped: a race won, which
		// the Rollout's own updates do not run, the other deletions do.
		{name: "a routed canary, no drop, every pod exited at once", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) { routed(r); noHook(c) },
			opts:    Options{Measured: &Measured{PodsDeleted: 2, Sent: 5000, ExitsSeen: 2, ExitedWithin: 300 * time.Millisecond}},
			preStop: report.SeverityWarning, preStopEvidence: "exited within 0.30s of its deletion request (as the watch received both): the app does not wait for its endpoint's removal to propagate; the change reached the probed paths first this time, a race the next drain, eviction or scale-down may lose"},
		{name: "a routed canary scaling its stable pods with the weights", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			routed(r)
			r.Spec.Strategy.Canary.DynamicStableScale = true
			noHook(c)
		}, preStop: report.SeverityError},
		{name: "a canary without routing deletes as its weights rise", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen, r.Spec.Strategy.Canary = nil, &rollout.ArgoCanary{}
			noHook(c)
		}, preStop: report.SeverityError},
		// An abort moves the traffic back to the stable pods and deletes
		// the new revision's abortScaleDownDelaySeconds later (Argo's
		// GetAbortScaleDownDelaySecondsOrDefault: 30 unset, 0 never).
		{name: "an abort's 2 s delay, no preStop", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.AbortScaleDownDelaySeconds = int32Ptr(2)
			noHook(c)
		}, want: report.SeverityWarning, evidence: []string{"an abort after the switch", "deletes the new revision's pods 2 s later: abortScaleDownDelaySeconds: 2",
			"keep an aborted update's pods at least 5 s after the move back", `{"blueGreen":{"abortScaleDownDelaySeconds":30}}`}, preStop: report.SeverityError},
		{name: "an abort's 1 s delay, a 5 s sleep covers it", mutate: func(r *rollout.ArgoRollout, _ *corev1.Container) {
			routed(r)
			r.Spec.Strategy.Canary.AbortScaleDownDelaySeconds = int32Ptr(1)
		}},
		{name: "an abort's delay of 0 keeps the pods", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			routed(r)
			r.Spec.Strategy.Canary.AbortScaleDownDelaySeconds = int32Ptr(0)
			noHook(c)
		}, preStop: report.SeverityWarning},
		{name: "both delays short", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelaySeconds, r.Spec.Strategy.BlueGreen.AbortScaleDownDelaySeconds = int32Ptr(3), int32Ptr(2)
			noHook(c)
		}, want: report.SeverityError, evidence: []string{"deletes the old pods 3 s later", "deletes the new revision's pods 2 s later",
			`{"blueGreen":{"scaleDownDelaySeconds":30,"abortScaleDownDelaySeconds":30}}`}, preStop: report.SeverityError},
		{name: "both short, a run that measured no drop: the abort is left", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen.ScaleDownDelaySeconds, r.Spec.Strategy.BlueGreen.AbortScaleDownDelaySeconds = int32Ptr(3), int32Ptr(2)
			noHook(c)
		}, opts: Options{Measured: &Measured{PodsDeleted: 2, Sent: 5000}}, want: report.SeverityWarning,
			evidence: []string{"none of its 5000 requests failed; a slower ingress or load balancer than the paths it probed may not be as quick (an abort was not exercised)"}, preStop: report.SeverityInfo},
		{name: "a canary without routing has no abort delay", mutate: func(r *rollout.ArgoRollout, c *corev1.Container) {
			r.Spec.Strategy.BlueGreen, r.Spec.Strategy.Canary = nil, &rollout.ArgoCanary{AbortScaleDownDelaySeconds: int32Ptr(1)}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			byID := map[string]report.Finding{}
			for _, f := range Run(argoWith(tt.mutate), tt.opts) {
				byID[f.ID] = f
			}
			f, found := byID[ScaleDownBeforeProp]
			if found != (tt.want != "") || f.Severity != tt.want {
				t.Fatalf("scale-down check: %+v (found %v), want severity %q", f, found, tt.want)
			}
			text := strings.Join(f.Evidence, "\n") + "\n" + f.Fix
			for _, want := range tt.evidence {
				if !strings.Contains(text, want) {
					t.Errorf("%q not in:\n%s", want, text)
				}
			}
			if p := byID[NoPreStop]; p.Severity != tt.preStop {
				t.Errorf("no-prestop-hook: %+v, want severity %q", p, tt.preStop)
			}
			if tt.preStop == report.SeverityWarning && !strings.Contains(strings.Join(byID[NoPreStop].Evidence, "\n"), "own updates do not need it") {
				t.Errorf("the warning does not say why: %+v", byID[NoPreStop])
			}
			if want := tt.preStopEvidence; want != "" && !strings.Contains(strings.Join(byID[NoPreStop].Evidence, "\n"), want) {
				t.Errorf("no-prestop-hook's evidence lacks %q: %+v", want, byID[NoPreStop])
			}
		})
	}
}

// A Rollout that takes its template from another object (workloadRef):
// the result says which object's template the checks read.
func TestResultNamesTheReferencedTemplate(t *testing.T) {
	in := argoWith(func(r *rollout.ArgoRollout, _ *corev1.Container) {
		r.Spec.WorkloadRef = &rollout.ArgoObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web-template"}
	})
	res := Evaluate(in, Options{}, report.FailOn("error"))
	if res.TemplateFrom != "deployment web-template" || res.Kind != "Rollout" {
		t.Fatalf("result %+v", res)
	}
	var text bytes.Buffer
	if err := render.DoctorText(&text, res); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(text.String(), "\n"); first != "rollprobe doctor rollout prod/web (its pod template from deployment web-template, workloadRef) behind service web (Kubernetes 1.36)" {
		t.Errorf("first line %q", first)
	}
}

// A canary without traffic routing whose setWeight its pods cannot come
// near: Argo's own approximation (argoCanaryPods, checked against Argo
// Rollouts v1.10.1's approximateWeightedCanaryStableReplicaCounts for 1-40
// replicas, every weight, surges 0-5, outside this repository) gives the
// canary a different share of the pods.
func TestCanaryWeightRoundedToPods(t *testing.T) {
	surge := func(v intstr.IntOrString) *intstr.IntOrString { return &v }
	for _, tt := range []struct {
		name     string
		replicas int32
		weights  []int32
		surge    *intstr.IntOrString
		mutate   func(c *rollout.ArgoCanary)
		want     []string // evidence lines; none: no finding
	}{
		{name: "4 replicas at 25 and 50: exact", replicas: 4, weights: []int32{25, 50}},
		{name: "4 replicas at 10: one canary beside four (it surges)", replicas: 4, weights: []int32{10, 50},
			want: []string{"setWeight: 10 on 4 replicas: Argo Rollouts runs 1 canary pod(s) beside 4 stable one(s), 20% of the pods"}},
		{name: "4 replicas at 10, no surge: one beside three", replicas: 4, weights: []int32{10}, surge: surge(intstr.FromInt32(0)),
			want: []string{"runs 1 canary pod(s) beside 3 stable one(s), 25% of the pods"}},
		{name: "2 replicas at 10", replicas: 2, weights: []int32{10}, want: []string{"setWeight: 10 on 2 replicas: Argo Rollouts runs 1 canary pod(s) beside 2 stable one(s), 33% of the pods"}},
		{name: "3 replicas at 25: the surge makes it one of four", replicas: 3, weights: []int32{25}},
		{name: "10 replicas at 15: 2 of 11, within the margin", replicas: 10, weights: []int32{15}},
		{name: "routed: the proxy weighs requests", replicas: 2, weights: []int32{10}, mutate: func(c *rollout.ArgoCanary) {
			c.TrafficRouting = []byte(`{"nginx":{"stableIngress":"web"}}`)
		}},
		{name: "setCanaryScale sets the pods itself", replicas: 2, weights: []int32{10}, mutate: func(c *rollout.ArgoCanary) {
			c.Steps = append(c.Steps, rollout.ArgoCanaryStep{SetCanaryScale: []byte(`{"replicas":1}`)})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := argoWith(func(r *rollout.ArgoRollout, _ *corev1.Container) {
				r.Spec.Replicas = &tt.replicas
				c := &rollout.ArgoCanary{MaxSurge: tt.surge}
				for _, w := range tt.weights {
					c.Steps = append(c.Steps, rollout.ArgoCanaryStep{SetWeight: &w}, rollout.ArgoCanaryStep{Pause: &rollout.ArgoPause{}})
				}
				if tt.mutate != nil {
					tt.mutate(c)
				}
				r.Spec.Strategy.BlueGreen, r.Spec.Strategy.Canary = nil, c
			})
			f := warningWithLines(t, Run(in, Options{}), CanaryWeightRounded, tt.want)
			if f == nil {
				return
			}
		})
	}
}

// A canary routed by Traefik's weights whose side is one pod at a step:
// Argo Rollouts v1.10.1 runs ceil(weight × replicas / maxTrafficWeight)
// canary pods (at least minPodsPerReplicaSet), the stable side whole
// unless dynamicStableScale. While a side of one pod is unready Traefik
// drops the route (the lab's argo-canary-traefik: 2 replicas at 25%).
func TestTraefikWeightedRouteOnOnePod(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	traefik := []byte(`{"traefik":{"weightedTraefikServiceName":"web"}}`)
	for _, tt := range []struct {
		name     string
		replicas int32
		weights  []int32
		mutate   func(c *rollout.ArgoCanary, ct *corev1.Container)
		want     []string // evidence lines before the reason; none: no finding
	}{
		{name: "2 replicas at 25: one canary pod", replicas: 2, weights: []int32{25, 50},
			want: []string{"setWeight: 25 on 2 replicas: Argo Rollouts runs 1 canary pod behind service web-canary",
				"setWeight: 50 on 2 replicas: Argo Rollouts runs 1 canary pod behind service web-canary"}},
		{name: "and its probe takes it out on one failure", replicas: 2, weights: []int32{25},
			mutate: func(_ *rollout.ArgoCanary, ct *corev1.Container) { ct.ReadinessProbe.FailureThreshold = 1 },
			want:   []string{"runs 1 canary pod", "failureThreshold: 1 in app"}},
		{name: "8 replicas at 25: two", replicas: 8, weights: []int32{25}},
		{name: "8 replicas at 10: one", replicas: 8, weights: []int32{10, 25}, want: []string{"setWeight: 10 on 8 replicas"}},
		{name: "minPodsPerReplicaSet 2", replicas: 2, weights: []int32{25},
			mutate: func(c *rollout.ArgoCanary, _ *corev1.Container) { c.MinPodsPerReplicaSet = i32(2) }},
		{name: "maxTrafficWeight 1000: 250 of it on 4 replicas is one pod", replicas: 4, weights: []int32{250},
			mutate: func(c *rollout.ArgoCanary, _ *corev1.Container) {
				c.TrafficRouting = []byte(`{"traefik":{"weightedTraefikServiceName":"web"},"maxTrafficWeight":1000}`)
			},
			want: []string{"setWeight: 250 on 4 replicas"}},
		{name: "dynamicStableScale at 75 of 4: one stable pod", replicas: 4, weights: []int32{50, 75},
			mutate: func(c *rollout.ArgoCanary, _ *corev1.Container) { c.DynamicStableScale = true },
			want:   []string{"setWeight: 75 on 4 replicas with dynamicStableScale: Argo Rollouts keeps 1 stable pod behind service web"}},
		{name: "nginx routes otherwise", replicas: 2, weights: []int32{25},
			mutate: func(c *rollout.ArgoCanary, _ *corev1.Container) {
				c.TrafficRouting = []byte(`{"nginx":{"stableIngress":"web"}}`)
			}},
		{name: "no traffic routing", replicas: 2, weights: []int32{25},
			mutate: func(c *rollout.ArgoCanary, _ *corev1.Container) { c.TrafficRouting = nil }},
		{name: "setCanaryScale sets the pods itself", replicas: 2, weights: []int32{25},
			mutate: func(c *rollout.ArgoCanary, _ *corev1.Container) {
				c.Steps = append(c.Steps, rollout.ArgoCanaryStep{SetCanaryScale: []byte(`{"replicas":2}`)})
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := argoWith(func(r *rollout.ArgoRollout, ct *corev1.Container) {
				r.Spec.Replicas = &tt.replicas
				c := &rollout.ArgoCanary{CanaryService: "web-canary", StableService: "web", TrafficRouting: traefik}
				for _, w := range tt.weights {
					c.Steps = append(c.Steps, rollout.ArgoCanaryStep{SetWeight: &w}, rollout.ArgoCanaryStep{Pause: &rollout.ArgoPause{}})
				}
				if tt.mutate != nil {
					tt.mutate(c, ct)
				}
				r.Spec.Strategy.BlueGreen, r.Spec.Strategy.Canary = nil, c
			})
			f := warningWithLines(t, Run(in, Options{}), TraefikWeightedRouteOnePod, tt.want)
			if f == nil {
				return
			}
			if last := f.Evidence[len(f.Evidence)-1]; !strings.Contains(last, "answers 404 for every request of the host") {
				t.Errorf("reason %q", last)
			}
			// allowEmptyServices keeps the route, and Argo weighs an
			// empty canary 0 (the lab measures both side by side).
			if !strings.Contains(f.Fix, "minPodsPerReplicaSet: 2") || !strings.Contains(f.Fix, "allowEmptyServices=true: it keeps the route while a side is empty, and Argo Rollouts sets the weight of a canary with no available pod to 0") {
				t.Errorf("fix %q", f.Fix)
			}
		})
	}
}

// warningWithLines is the finding id among fs, held to be a warning whose
// evidence lines hold want in order, one more line after them (the
// reason); nil, and no finding allowed, when want is empty.
func warningWithLines(t *testing.T, fs []report.Finding, id string, want []string) *report.Finding {
	t.Helper()
	var f *report.Finding
	for i := range fs {
		if fs[i].ID == id {
			f = &fs[i]
		}
	}
	if len(want) == 0 {
		if f != nil {
			t.Fatalf("flagged: %+v", f)
		}
		return nil
	}
	if f == nil || f.Severity != report.SeverityWarning || len(f.Evidence) != len(want)+1 {
		t.Fatalf("finding %+v: want a warning with %d lines before the reason", f, len(want))
	}
	for i, w := range want {
		if !strings.Contains(f.Evidence[i], w) {
			t.Errorf("evidence %q, want %q", f.Evidence[i], w)
		}
	}
	return f
}

// A Deployment's Service weighed by hand in a TraefikService beside
// another: one replica makes its readiness the whole route's (the lab's
// traefik-weighted measured every request of the host failing while it
// was unready). Two replicas, no such route, or a DaemonSet are not
// flagged; TraefikServices that could not be read leave the check unmade,
// said as info, never passed.
func TestHandWeightedTraefikRoute(t *testing.T) {
	one, three := int32(1), int32(3)
	route := []WeightedRoute{{Name: "split", Weight: ptr.To[int64](1), Others: []string{"service web-other"}}}
	for _, tt := range []struct {
		name     string
		replicas *int32
		routes   []WeightedRoute
		unread   string
		want     []string
	}{
		{name: "one replica", replicas: &one, routes: route,
			want: []string{"TraefikService split weighs service web at weight 1 beside service web-other", "deployment web runs 1 replica behind service web"}},
		{name: "replicas unset (1)", routes: []WeightedRoute{{Name: "split", Others: []string{"traefikservice mirror", "service other/web-b"}}},
			want: []string{"TraefikService split weighs service web with no weight set beside traefikservice mirror, service other/web-b", "deployment web runs 1 replica"}},
		{name: "nested", replicas: &one, routes: []WeightedRoute{{Name: "outer", Weight: ptr.To[int64](2), Through: []string{"traefikservice inner"}, Others: []string{"service web-d"}}},
			want: []string{"TraefikService outer weighs service web through traefikservice inner (which holds it) at weight 2 beside service web-d", "deployment web runs 1 replica"}},
		{name: "a mirror", replicas: &one, routes: []WeightedRoute{{Name: "shadow", Kind: TraefikMirroring, Mirror: true, Percent: ptr.To[int64](100), Others: []string{"service web-main"}}},
			want: []string{"TraefikService shadow mirrors to service web the requests it sends to service web-main (a copy of 100% of them, whose answers Traefik throws away)", "deployment web runs 1 replica"}},
		{name: "a mirror, no percent", replicas: &one, routes: []WeightedRoute{{Name: "shadow", Kind: TraefikMirroring, Mirror: true, Others: []string{"service web-main"}}},
			want: []string{"TraefikService shadow mirrors to service web the requests it sends to service web-main (no percent set: a copy of none, whose answers Traefik throws away)", "deployment web runs 1 replica"}},
		{name: "mirrored", replicas: &one, routes: []WeightedRoute{{Name: "main", Kind: TraefikMirroring, Others: []string{"service web-shadow", "traefikservice other-shadow"}}},
			want: []string{"TraefikService main sends to service web, mirroring to service web-shadow, traefikservice other-shadow", "deployment web runs 1 replica"}},
		{name: "highest random weight", replicas: &one, routes: []WeightedRoute{{Name: "pick", Kind: TraefikHRW, Weight: ptr.To[int64](2), Others: []string{"service web-b"}}},
			want: []string{"TraefikService pick chooses by highest random weight (by client address) service web at weight 2 beside service web-b", "deployment web runs 1 replica"}},
		{name: "another namespace's", replicas: &one, routes: []WeightedRoute{{Name: "edge/split", Weight: ptr.To[int64](4), Others: []string{"service edge/web-e"}, CrossNamespace: true}},
			want: []string{"TraefikService edge/split weighs service web at weight 4 beside service edge/web-e (it names another namespace's: Traefik builds it only with its CRD provider's allowCrossNamespace)", "deployment web runs 1 replica"}},
		{name: "three replicas", replicas: &three, routes: route},
		{name: "no route", replicas: &one},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, svc, pdbs := good()
			d.Spec.Replicas = tt.replicas
			in := Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, WeightedRoutes: tt.routes}
			f := warningWithLines(t, Run(in, Options{}), TraefikWeightedRouteOnePod, tt.want)
			if f == nil {
				return
			}
			if last := f.Evidence[len(f.Evidence)-1]; !strings.Contains(last, "answers 404 for every request of the host, not this Service's share") {
				t.Errorf("reason %q", last)
			}
			if !strings.Contains(f.Fix, "allowEmptyServices=true") || !strings.Contains(f.Fix, "two pods or more behind each Service") {
				t.Errorf("fix %q", f.Fix)
			}
			mirror := tt.routes[0].Mirror
			if strings.Contains(f.Fix, "a mirror's copies are then lost") != mirror || strings.Contains(f.Evidence[len(f.Evidence)-1], "as a mirror") != mirror {
				t.Errorf("fix %q and reason %q: want the mirror's case said when, and only when, the Service is a mirror", f.Fix, f.Evidence[len(f.Evidence)-1])
			}
		})
	}

	// One failed probe takes the pod out: said before the reason.
	d, svc, pdbs := good()
	d.Spec.Replicas = &one
	d.Spec.Template.Spec.Containers[0].ReadinessProbe.FailureThreshold = 1
	warningWithLines(t, Run(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, WeightedRoutes: route}, Options{}),
		TraefikWeightedRouteOnePod, []string{"TraefikService split", "runs 1 replica", "failureThreshold: 1 in app"})

	// A DaemonSet's pods are one per node: not judged here.
	ds := &appsv1.DaemonSet{ObjectMeta: d.ObjectMeta, Spec: appsv1.DaemonSetSpec{Template: d.Spec.Template}}
	// Nor are its budgets judged: a drain leaves its pods be. None, one
	// that refuses every eviction, one that allows them all: no finding.
	ds.Status.DesiredNumberScheduled = 3
	for _, budget := range []*intstr.IntOrString{nil, ptr.To(intstr.FromInt32(0)), ptr.To(intstr.FromString("100%"))} {
		var pdbs []policyv1.PodDisruptionBudget
		if budget != nil {
			pdbs = []policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Name: "ds", Namespace: "prod"},
				Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: budget, Selector: &metav1.LabelSelector{MatchLabels: ds.Spec.Template.Labels}}}}
		}
		for _, f := range Run(Input{Workload: rollout.Workload{DaemonSet: ds}, Service: svc, PDBs: pdbs}, Options{}) {
			if f.ID == NoPDB || f.ID == PDBAllowsNoEviction || f.ID == PDBAllowsEvictingAll {
				t.Errorf("a DaemonSet, budget %v: %+v, want no budget finding", budget, f)
			}
		}
	}
	warningWithLines(t, Run(Input{Workload: rollout.Workload{DaemonSet: ds}, Service: svc, PDBs: pdbs, WeightedRoutes: route}, Options{}), TraefikWeightedRouteOnePod, nil)

	// Unread: info, whatever the replicas.
	d.Spec.Replicas = &three
	fs := Run(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, WeightedRoutesUnread: "list traefikservices.traefik.io: forbidden"}, Options{})
	var got *report.Finding
	for i := range fs {
		if fs[i].ID == TraefikWeightedRouteOnePod {
			got = &fs[i]
		}
	}
	if got == nil || got.Severity != report.SeverityInfo || !strings.HasPrefix(got.Title, "not checked") || !strings.Contains(got.Evidence[0], "forbidden") {
		t.Errorf("unread: %+v, want an info finding saying the check was not made", got)
	}
}

// Gather reads the TraefikServices of the namespace that weigh the
// Service, itself or through TraefikServices that hold it at any depth,
// beside another child: not one of another Service, nor one that weighs
// it alone; none and nothing said where Traefik's CRDs are not
// served; the reason where the list fails.
func TestGatherWeightedRoutes(t *testing.T) {
	d, svc, pdbs := good()
	spec := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "traefik.io/v1alpha1", "kind": "TraefikService",
			"metadata": map[string]any{"name": name, "namespace": "prod"},
			"spec":     spec,
		}}
	}
	ts := func(name string, children ...map[string]any) *unstructured.Unstructured {
		services := make([]any, len(children))
		for i, c := range children {
			services[i] = c
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "traefik.io/v1alpha1", "kind": "TraefikService",
			"metadata": map[string]any{"name": name, "namespace": "prod"},
			"spec":     map[string]any{"weighted": map[string]any{"services": services}},
		}}
	}
	inNS := func(ns string, u *unstructured.Unstructured) *unstructured.Unstructured {
		u.SetNamespace(ns)
		return u
	}
	objs := []runtime.Object{
		ts("split", map[string]any{"name": "web", "port": int64(80), "weight": int64(3)}, map[string]any{"name": "web-b", "port": int64(80), "weight": int64(1)}),
		ts("alone", map[string]any{"name": "web", "port": int64(80)}),
		ts("others", map[string]any{"name": "api"}, map[string]any{"name": "api-b"}),
		ts("nested", map[string]any{"name": "web", "kind": "TraefikService"}, map[string]any{"name": "web-b"}),
		// web twice (its weights add: 2, and 1 unset) beside web-c.
		ts("twice", map[string]any{"name": "web", "weight": int64(2)}, map[string]any{"name": "web-c"}, map[string]any{"name": "web", "namespace": "prod"}),
		// Nested: outer weighs inner (web alone) beside web-d; top weighs
		// middle (inner alone) beside web-g; a cycle (loop-a and loop-b,
		// each naming the other) holds no web.
		ts("inner", map[string]any{"name": "web", "port": int64(80)}),
		ts("outer", map[string]any{"name": "inner", "kind": "TraefikService", "weight": int64(2)}, map[string]any{"name": "web-d"}),
		ts("middle", map[string]any{"name": "inner", "kind": "TraefikService"}),
		ts("top", map[string]any{"name": "middle", "kind": "TraefikService"}, map[string]any{"name": "web-g"}),
		ts("loop-a", map[string]any{"name": "loop-b", "kind": "TraefikService"}, map[string]any{"name": "web-e"}),
		ts("loop-b", map[string]any{"name": "loop-a", "kind": "TraefikService"}, map[string]any{"name": "web-f"}),
		// Mirroring: web a mirror (50%) of web-m's requests; web main,
		// mirrored to web-x; web-y mirrored to inner (web alone); web
		// alone with no mirror (nothing beside it); and a weighted one
		// over shadow beside web-z. Highest random weight: web at 2
		// beside web-h.
		spec("shadow", map[string]any{"mirroring": map[string]any{"name": "web-m", "mirrors": []any{map[string]any{"name": "web", "percent": int64(50)}}}}),
		spec("main", map[string]any{"mirroring": map[string]any{"name": "web", "port": int64(80), "mirrors": []any{map[string]any{"name": "web-x"}}}}),
		spec("shadow-nested", map[string]any{"mirroring": map[string]any{"name": "web-y", "mirrors": []any{map[string]any{"name": "inner", "kind": "TraefikService"}}}}),
		spec("main-alone", map[string]any{"mirroring": map[string]any{"name": "web"}}),
		ts("over-shadow", map[string]any{"name": "shadow", "kind": "TraefikService"}, map[string]any{"name": "web-z"}),
		spec("pick", map[string]any{"highestRandomWeight": map[string]any{"services": []any{map[string]any{"name": "web", "weight": int64(2)}, map[string]any{"name": "web-h"}}}}),
		// Across namespaces: edge's split weighs prod's web beside its own
		// web-e; edge's own web is not prod's; prod's via-edge weighs
		// edge's inner (prod's web alone) beside web-k.
		inNS("edge", ts("edge-split", map[string]any{"name": "web", "namespace": "prod", "weight": int64(4)}, map[string]any{"name": "web-e"})),
		inNS("edge", ts("edge-other", map[string]any{"name": "web"}, map[string]any{"name": "web-b"})),
		inNS("edge", ts("edge-inner", map[string]any{"name": "web", "namespace": "prod"})),
		ts("via-edge", map[string]any{"name": "edge-inner", "namespace": "edge", "kind": "TraefikService"}, map[string]any{"name": "web-k"}),
	}
	clients := func(served bool, objs ...runtime.Object) rollout.DynamicClients {
		kube := fake.NewClientset(d, svc, &pdbs[0])
		if served {
			kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
				GroupVersion: TraefikServicesGVR.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: "traefikservices", Kind: "TraefikService", Namespaced: true}},
			}}
		}
		dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{TraefikServicesGVR: "TraefikServiceList"}, objs...)
		return rollout.WithDynamic(kube, dyn)
	}
	target := &rollout.Target{Namespace: "prod", Workload: rollout.Workload{Deployment: d}, Service: svc}
	in, err := Gather(context.Background(), clients(true, objs...), target)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(in.WeightedRoutes, func(i, j int) bool { return in.WeightedRoutes[i].Name < in.WeightedRoutes[j].Name })
	byName := map[string]WeightedRoute{}
	var routes []WeightedRoute
	for _, r := range in.WeightedRoutes {
		switch r.Name {
		case "shadow", "main", "shadow-nested", "main-alone", "over-shadow", "pick", "edge/edge-split", "edge/edge-other", "edge/edge-inner", "via-edge":
			byName[r.Name] = r
		default:
			routes = append(routes, r)
		}
	}
	for name, want := range map[string]string{
		"shadow":          "mirroring mirror 50 [] [service web-m]",
		"main":            "mirroring main <nil> [] [service web-x]",
		"shadow-nested":   "mirroring mirror <nil> [traefikservice inner] [service web-y]",
		"over-shadow":     "weighted main <nil> [traefikservice shadow] [service web-z]",
		"pick":            "highestRandomWeight main <nil> [] [service web-h] weight 2",
		"edge/edge-split": "weighted main <nil> [] [service edge/web-e] weight 4 cross",
		"via-edge":        "weighted main <nil> [traefikservice edge/edge-inner] [service web-k] cross",
	} {
		r, ok := byName[name]
		role, percent, weight := "main", "<nil>", ""
		if r.Mirror {
			role = "mirror"
		}
		if r.Percent != nil {
			percent = fmt.Sprint(*r.Percent)
		}
		if r.Weight != nil {
			weight = fmt.Sprintf(" weight %d", *r.Weight)
		}
		if r.CrossNamespace {
			weight += " cross"
		}
		if got := fmt.Sprintf("%s %s %s %v %v%s", r.Kind, role, percent, r.Through, r.Others, weight); !ok || got != want {
			t.Errorf("route %s: %q (found %v), want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"main-alone", "edge/edge-other", "edge/edge-inner"} {
		if _, ok := byName[name]; ok {
			t.Errorf("%s listed: it holds no prod/web beside another child", name)
		}
	}
	if in.WeightedRoutesUnread != "" || len(routes) != 4 || routes[0].Name != "outer" || routes[1].Name != "split" || routes[2].Name != "top" || routes[3].Name != "twice" ||
		routes[0].Weight == nil || *routes[0].Weight != 2 || strings.Join(routes[0].Others, ",") != "service web-d" || strings.Join(routes[0].Through, ",") != "traefikservice inner" ||
		routes[1].Weight == nil || *routes[1].Weight != 3 || strings.Join(routes[1].Others, ",") != "service web-b" || routes[1].Through != nil ||
		routes[2].Weight != nil || strings.Join(routes[2].Others, ",") != "service web-g" || strings.Join(routes[2].Through, ",") != "traefikservice middle" ||
		routes[3].Weight == nil || *routes[3].Weight != 3 || strings.Join(routes[3].Others, ",") != "service web-c" {
		t.Errorf("routes %+v (unread %q): want outer, web through traefikservice inner at 2 beside service web-d; split, web at 3 beside service web-b; "+
			"top, web through traefikservice middle (over inner) unweighted beside service web-g; and twice, web at 2+1 beside service web-c", routes, in.WeightedRoutesUnread)
	}

	// Traefik's CRDs not served: nothing read, nothing said.
	if in, err := Gather(context.Background(), clients(false, objs...), target); err != nil || in.WeightedRoutes != nil || in.WeightedRoutesUnread != "" {
		t.Errorf("without Traefik's CRDs: %+v %q %v", in.WeightedRoutes, in.WeightedRoutesUnread, err)
	}

	// Forbidden: the reason, and Gather goes on.
	c := clients(true, objs...)
	c.Dynamic().(*dynamicfake.FakeDynamicClient).PrependReactor("list", "traefikservices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(TraefikServicesGVR.GroupResource(), "", errors.New("no rule"))
	})
	in, err = Gather(context.Background(), c, target)
	if err != nil || in.WeightedRoutes != nil || !strings.Contains(in.WeightedRoutesUnread, "forbidden") || len(in.PDBs) != 1 {
		t.Errorf("forbidden: %+v %q %v; want the reason and the rest gathered", in.WeightedRoutes, in.WeightedRoutesUnread, err)
	}

	// Forbidden cluster-wide only (deploy/rbac.yaml's Role): the
	// namespace's own, none of edge's, nothing said.
	c = clients(true, objs...)
	c.Dynamic().(*dynamicfake.FakeDynamicClient).PrependReactor("list", "traefikservices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "" {
			return true, nil, apierrors.NewForbidden(TraefikServicesGVR.GroupResource(), "", errors.New("no rule"))
		}
		return false, nil, nil
	})
	in, err = Gather(context.Background(), c, target)
	var names []string
	for _, r := range in.WeightedRoutes {
		names = append(names, r.Name)
	}
	sort.Strings(names)
	if err != nil || in.WeightedRoutesUnread != "" || strings.Join(names, ",") != "main,outer,over-shadow,pick,shadow,shadow-nested,split,top,twice" {
		t.Errorf("the namespace's alone: %v %q %v; want prod's routes, via-edge not among them (edge's inner unread)", names, in.WeightedRoutesUnread, err)
	}
}

// Without a preStop hook behind a Service that publishes not-ready
// addresses, the hook's finding says the hook alone is not enough there.
func TestNoPreStopBehindAServiceThatPublishesNotReady(t *testing.T) {
	d, svc, pdbs := good()
	app(d).Lifecycle = nil
	svc.Spec.PublishNotReadyAddresses = true
	fs := Run(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, Version: advice.Version{Major: 1, Minor: 36}}, Options{})
	if len(fs) != 2 || fs[0].ID != NoPreStop || fs[1].ID != PublishesNotReady {
		t.Fatalf("findings %+v, want the hook's and the Service's", fs)
	}
	if !strings.Contains(strings.Join(fs[0].Evidence, "\n"), "a preStop sleep alone does not keep traffic off a terminating pod there") {
		t.Errorf("the hook's evidence %q does not say the hook is not enough", fs[0].Evidence)
	}
	svc.Spec.PublishNotReadyAddresses = false
	if fs := Run(Input{Workload: rollout.Workload{Deployment: d}, Service: svc, PDBs: pdbs, Version: advice.Version{Major: 1, Minor: 36}}, Options{}); strings.Contains(strings.Join(fs[0].Evidence, "\n"), "not-ready") {
		t.Errorf("without the setting: %q", fs[0].Evidence)
	}
}
