package runner

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/internal/testenv"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/rollout"
)

// These tests cover the flow's decisions on a fake clientset (no
// controllers: a triggered rollout never progresses). That rollouts are
// followed to the end against the real components is the lab's e2e test.

func objects() (*appsv1.Deployment, *corev1.Service) {
	replicas := int32(3)
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Generation: 1},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3},
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"}, Spec: corev1.ServiceSpec{Selector: labels}}
	return d, svc
}

// fakeKube answers access reviews: allowed unless denied names the permission.
func fakeKube(denied map[string]bool, objs ...runtime.Object) *fake.Clientset {
	kube := fake.NewClientset(objs...)
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		ra := review.Spec.ResourceAttributes
		review.Status.Allowed = !denied[rollout.Permission{Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource, Subresource: ra.Subresource}.String()]
		return true, review, nil
	})
	return kube
}

func config(t *testing.T, kube *fake.Clientset, path string) RolloutConfig {
	t.Helper()
	testenv.Timed(t)
	srv := faultserver.New(t, "web-0")
	probe := prober.DefaultConfig()
	probe.Target, _ = url.Parse(srv.URL(path))
	probe.Rate = 50
	return RolloutConfig{Kube: kube, Namespace: "prod", Name: "web", Trigger: rollout.Restart{}, Probe: probe,
		Baseline: 100 * time.Millisecond, Settle: 0, Wait: 300 * time.Millisecond, Timeout: 3 * time.Second,
		Tool: report.Tool{Name: "rollprobe", Version: "test"}}
}

// writes lists the actions that change something.
func writes(kube *fake.Clientset) []string {
	var out []string
	for _, a := range kube.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			if a.GetResource().Resource != "selfsubjectaccessreviews" {
				out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
			}
		}
	}
	return out
}

// A workload whose status is not done is refused either way, but told
// apart: a rollout in progress (which --watch can follow) from pods merely
// unavailable, every one of the current revision (nothing to follow: the
// command must not offer --watch for it). Either refusal writes nothing.
func TestRefusalTellsARolloutFromUnavailablePods(t *testing.T) {
	unavailable := revisionedWeb()
	unavailable[0].(*appsv1.Deployment).Status.AvailableReplicas = 2
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		rolling bool
		want    string
	}{
		{"a pod unavailable, every pod of the current revision", unavailable, false,
			"not every pod is available, yet every pod is of its current revision: nothing is rolling"},
		{"a rollout in progress", secondRevisionRolling(false), true,
			"1 of its 3 pods is not of its current revision h2: it is already mid-rollout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fakeKube(nil, tc.objs...)
			rep, err := run(context.Background(), config(t, kube, "/ok"))
			if rep != nil || exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("report %v, error %v (exit %d), want exit 2 saying %q", rep != nil, err, exitcode.Of(err), tc.want)
			}
			if errors.Is(err, rollout.ErrMidRollout) != tc.rolling || errors.Is(err, rollout.ErrUnavailable) == tc.rolling {
				t.Fatalf("error %v: matches ErrMidRollout %v, ErrUnavailable %v; want a rollout in progress %v",
					err, errors.Is(err, rollout.ErrMidRollout), errors.Is(err, rollout.ErrUnavailable), tc.rolling)
			}
			t.Logf("refused: %v", err)
			if w := writes(kube); len(w) > 0 {
				t.Fatalf("preflight failed, yet it wrote: %v", w)
			}
		})
	}
}

func TestPreflightChangesNothing(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(d *appsv1.Deployment)
		denied map[string]bool
		path   string
		want   string
	}{
		{"missing permission", nil, map[string]bool{"patch deployments.apps": true}, "/ok", "missing permissions in namespace prod: patch deployments.apps"},
		{"paused", func(d *appsv1.Deployment) { d.Spec.Paused = true }, nil, "/ok", "paused"},
		{"mid-rollout", func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 1 }, nil, "/ok", "already mid-rollout"},
		{"unhealthy target", nil, nil, "/status/503", "not healthy before the rollout: 0 of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, svc := objects()
			if tt.mutate != nil {
				tt.mutate(d)
			}
			kube := fakeKube(tt.denied, d, svc)
			rep, err := run(context.Background(), config(t, kube, tt.path))
			if rep != nil || err == nil || exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("report %v, error %v (exit %d), want exit 2 saying %q", rep != nil, err, exitcode.Of(err), tt.want)
			}
			if tt.name == "mid-rollout" && !errors.Is(err, rollout.ErrMidRollout) {
				t.Fatalf("error %v does not match rollout.ErrMidRollout: the command could not offer --watch", err)
			}
			if w := writes(kube); len(w) > 0 {
				t.Fatalf("preflight failed, yet it wrote: %v", w)
			}
		})
	}
	t.Run("an edge access log that cannot be read", func(t *testing.T) {
		d, svc := objects()
		kube := fakeKube(nil, d, svc)
		cfg := config(t, kube, "/ok")
		cfg.EdgeAccessLog = filepath.Join(t.TempDir(), "traefik.log")
		rep, err := run(context.Background(), cfg)
		if rep != nil || exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), "edge access log: open "+cfg.EdgeAccessLog) {
			t.Fatalf("report %v, error %v: want exit 2 naming the log", rep != nil, err)
		}
		if w := writes(kube); len(w) > 0 {
			t.Fatalf("preflight failed, yet it wrote: %v", w)
		}
	})
	t.Run("no deployment", func(t *testing.T) {
		_, svc := objects()
		kube := fakeKube(nil, svc)
		_, err := run(context.Background(), config(t, kube, "/ok"))
		if exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), "deployment prod/web not found") {
			t.Fatalf("error %v", err)
		}
	})
}

// A restart the cluster never acts on: the trigger patched the template
// annotation, the run times out (exit 3) and still reports what it probed,
// with the doctor's findings.
//
// The fake never bumps the generation: every status the run sees is the
// object's from before the trigger, and none may be printed as the
// rollout's progress ("successfully rolled out" right after the trigger).
func TestTimeoutIsARolloutFailure(t *testing.T) {
	d, svc := objects()
	kube := fakeKube(nil, d, svc)
	cfg := config(t, kube, "/ok")
	var log bytes.Buffer
	cfg.Log = &log
	rep, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rollout.Status != report.StatusTimedOut || rep.Verdict.ExitCode != exitcode.RolloutFailed || rep.Totals.Sent == 0 || rep.Totals.Failed != 0 {
		t.Fatalf("rollout %+v verdict %+v totals %+v", rep.Rollout, rep.Verdict, rep.Totals)
	}
	got, err := kube.AppsV1().Deployments("prod").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil || got.Spec.Template.Annotations[rollout.RestartedAtAnnotation] == "" {
		t.Fatalf("the restart trigger did not patch the template: %v %v", err, got.Spec.Template.Annotations)
	}
	static := 0
	for _, f := range rep.Findings {
		if f.Source == report.SourceDoctor {
			static++
		}
	}
	if static == 0 {
		t.Errorf("no doctor findings in the report (the objects have no probes, no preStop): %+v", rep.Findings)
	}
	validate(t, rep)
	if !hasEvent(rep, report.RolloutTriggered) || !hasEvent(rep, report.RolloutFailed) {
		t.Errorf("timeline %+v", rep.Timeline)
	}
	if strings.Contains(log.String(), "rollout: ") {
		t.Errorf("progress printed from the object as it was before the trigger:\n%s", log.String())
	}
}

// --watch with nothing rolling within --wait: no rollout, nothing changed.
func TestWatchWithoutRollout(t *testing.T) {
	d, svc := objects()
	kube := fakeKube(nil, d, svc)
	cfg := config(t, kube, "/ok")
	cfg.Trigger = rollout.Watch{}
	rep, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rollout.Status != report.StatusNotStarted || !strings.Contains(rep.Rollout.Message, "no rollout started within the 300ms wait") || rep.Rollout.Change != "" ||
		rep.Verdict.ExitCode != exitcode.RolloutFailed {
		t.Fatalf("rollout %+v verdict %+v", rep.Rollout, rep.Verdict)
	}
	if w := writes(kube); len(w) > 0 {
		t.Fatalf("--watch wrote: %v", w)
	}
}

// Canceling mid-run (Ctrl-C) still yields a report, marked interrupted.
func TestCancelYieldsAnInterruptedReport(t *testing.T) {
	d, svc := objects()
	kube := fakeKube(nil, d, svc)
	cfg := config(t, kube, "/ok")
	cfg.Timeout = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	r, err := StartRollout(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	live := r.Live()
	if wl, ok := live.Workload(); live.Phase() != PhaseBaseline || live.Recorder() == nil || !ok || wl.Ref().Name != "web" || live.Timeline() == nil {
		t.Errorf("live at start: phase %q, workload %v", live.Phase(), wl.Ref())
	}
	time.AfterFunc(500*time.Millisecond, cancel)
	rep, err := r.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if rep == nil || !rep.Interrupted || rep.Rollout.Status != report.StatusInterrupted || rep.Verdict.ExitCode != exitcode.Interrupted {
		t.Fatalf("report %+v", rep)
	}
}

func hasEvent(r *report.Report, kind report.EventKind) bool {
	for _, e := range r.Timeline {
		if e.Kind == kind {
			return true
		}
	}
	return false
}

// run starts the rollout flow and waits for its report.
func run(ctx context.Context, cfg RolloutConfig) (*report.Report, error) {
	r, err := StartRollout(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return r.Wait()
}

// The probe flow: the live handle counts while it runs, Wait gives the
// report with its verdict.
func TestProbeFlow(t *testing.T) {
	testenv.Timed(t)
	srv := faultserver.New(t, "web-0")
	cfg := prober.DefaultConfig()
	cfg.Target, _ = url.Parse(srv.URL("/status/503"))
	cfg.Rate, cfg.Duration = 100, 300*time.Millisecond
	r, err := StartProbe(context.Background(), ProbeConfig{Probe: cfg, Tool: report.Tool{Name: "rollprobe", Version: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Live().Workload(); r.Live().Phase() != PhaseProbing || r.Live().Timeline() != nil || ok {
		t.Errorf("a probe's live handle: phase %q", r.Live().Phase())
	}
	rep, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if r.Live().Phase() != PhaseDone || rep.Command != "probe" || rep.Totals.ByClass["http_5xx"] != rep.Totals.Sent ||
		rep.Totals.Sent == 0 || rep.Verdict.ExitCode != exitcode.Failures || rep.Rollout != nil {
		t.Fatalf("phase %q, report %+v", r.Live().Phase(), rep.Totals)
	}
	// A probe has outages too (OpenMetrics said 0 outages for one that
	// failed every request).
	if len(rep.Outages) != 1 || uint64(rep.Outages[0].Count) != rep.Totals.Failed {
		t.Errorf("outages %+v for %d failures", rep.Outages, rep.Totals.Failed)
	}
}

// The restart trigger's own write is timed to its receipt through the
// watch: the bound on the watch's delay the attribution uses.
func TestTriggerWriteIsTimed(t *testing.T) {
	d, svc := objects()
	kube := fakeKube(nil, d, svc)
	// The fake apiserver does not bump the generation on a patch; a real
	// one does when the template changes.
	kube.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := kube.Tracker().Get(a.GetResource(), a.GetNamespace(), "web")
		if err != nil {
			return true, nil, err
		}
		dep := obj.(*appsv1.Deployment).DeepCopy()
		dep.Generation++
		return true, dep, kube.Tracker().Update(a.GetResource(), dep, a.GetNamespace())
	})
	rep, err := run(context.Background(), config(t, kube, "/ok"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rollout.TriggerSeenAfterMS <= 0 || rep.Rollout.TriggerSeenAfterMS > 3000 {
		t.Fatalf("trigger seen after %v ms", rep.Rollout.TriggerSeenAfterMS)
	}
	if rep.Rollout.Change != report.ChangeRevision {
		t.Errorf("change %q: a restart makes a new revision", rep.Rollout.Change)
	}
	if rep.Attribution == nil || rep.Attribution.ReceiveToleranceMS != rep.Rollout.TriggerSeenAfterMS {
		t.Fatalf("attribution %+v, trigger seen after %v ms", rep.Attribution, rep.Rollout.TriggerSeenAfterMS)
	}
}

// A panic in the prober during the baseline: the trigger never fires
// (nothing probes it), the report is still made and marked as
// rollprobe's own failure, exit 70 (Go's runtime would have exited 2,
// "nothing was changed", with no report).
func TestProberPanicBeforeTheTrigger(t *testing.T) {
	t.Setenv(prober.TestPanicEnv, "prober")
	d, svc := objects()
	kube := fakeKube(nil, d, svc)
	cfg := config(t, kube, "/ok")
	cfg.Baseline = 500 * time.Millisecond // the panic comes after 2 requests
	rep, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict.ExitCode != exitcode.Internal || !strings.Contains(rep.Verdict.InternalError, "injected by") ||
		!strings.Contains(rep.Verdict.InternalError, "goroutine") || rep.Totals.Sent < 2 {
		t.Fatalf("verdict %+v, sent %d", rep.Verdict, rep.Totals.Sent)
	}
	if w := writes(kube); len(w) > 0 || hasEvent(rep, report.RolloutTriggered) {
		t.Fatalf("the trigger fired with nothing probing: writes %v", w)
	}
	if rep.Rollout.Status != report.StatusNotStarted || !strings.Contains(rep.Rollout.Message, "nothing was triggered") {
		t.Errorf("rollout %+v", rep.Rollout)
	}
	validate(t, rep)
}

// A panic after the report was built (in the analysis): the report keeps
// what was measured, is marked exit 70 with the stack, and validates.
func TestAnalysisPanicMarksTheReport(t *testing.T) {
	t.Setenv(prober.TestPanicEnv, "run")
	d, svc := objects()
	kube := fakeKube(nil, d, svc)
	rep, err := run(context.Background(), config(t, kube, "/ok"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict.ExitCode != exitcode.Internal || rep.Verdict.Pass || !strings.Contains(rep.Verdict.InternalError, "panic in the analysis") ||
		rep.Totals.Sent == 0 || !hasEvent(rep, report.RolloutTriggered) {
		t.Fatalf("verdict %+v, sent %d", rep.Verdict, rep.Totals.Sent)
	}
	validate(t, rep)
}

// A deploy command that changes nothing (an idempotent helm upgrade): the
// run says so and ends in seconds with the traffic's verdict, instead of
// waiting out the timeout and failing the rollout (exit 3).
func TestExecThatChangesNothing(t *testing.T) {
	d, svc := objects()
	kube := fakeKube(nil, d, svc)
	cfg := config(t, kube, "/ok")
	cfg.Trigger = rollout.Exec{Argv: []string{"true"}}
	cfg.Timeout = time.Minute
	start := time.Now()
	rep, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rollout.Status != report.StatusNoChange || !strings.Contains(rep.Rollout.Message, "changed nothing") || rep.Rollout.Change != "" ||
		!hasEvent(rep, report.NoRollout) || rep.Totals.Failed != 0 {
		t.Fatalf("rollout %+v verdict %+v, %d failed", rep.Rollout, rep.Verdict, rep.Totals.Failed)
	}
	// It passes, unless the prober could not hold its rate (a starved
	// machine: 16.3 of 50 requests/s once), which proves nothing and says
	// so: inconclusive for that reason alone, never a failure.
	if !rep.Verdict.Pass && (rep.Verdict.ExitCode != exitcode.Inconclusive || len(rep.Verdict.Reasons) != 1 ||
		!strings.Contains(rep.Verdict.Reasons[0], "req/s, below")) {
		t.Fatalf("verdict %+v: want a pass, or inconclusive for a rate not held alone", rep.Verdict)
	}
	if !rep.Verdict.Pass {
		t.Logf("the machine starved the prober: %s", rep.Verdict.Reasons[0])
	}
	if took := time.Since(start); took > cfg.Timeout/2 {
		t.Fatalf("took %v: it waited for the timeout", took)
	}
	validate(t, rep)
}

// What the doctor is told of the deleted pods' shutdown: each pod once,
// its last container exit after its deletion request (an exit before it,
// a crash, is not its shutdown), the slowest of them.
func TestShutdownMeasured(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	m := shutdownMeasured([]report.Event{
		{Kind: report.ContainerTerminated, Pod: "a", At: at(0)}, // a crash before the deletion
		{Kind: report.PodDeletionRequested, Pod: "a", At: at(100)},
		{Kind: report.PodDeletionRequested, Pod: "b", At: at(120)},
		{Kind: report.PodDeletionRequested, Pod: "a", At: at(150)}, // the same deletion seen again
		{Kind: report.ContainerTerminated, Pod: "a", At: at(300)},
		{Kind: report.ContainerTerminated, Pod: "a", At: at(420)}, // its sidecar, last
		{Kind: report.PodDeletionRequested, Pod: "c", At: at(130)},
		{Kind: report.ContainerTerminated, Pod: "c", At: at(400)},
		{Kind: report.ContainerTerminated, Pod: "d", At: at(500)}, // never deleted
	})
	if m.PodsDeleted != 3 || m.ExitsSeen != 2 || m.ExitedWithin != 320*time.Millisecond {
		t.Fatalf("%+v: want 3 deleted, 2 exits seen (b's not), the slowest a's 320ms", m)
	}
}
