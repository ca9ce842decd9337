package rollout

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/report"
)

// Native sidecars report their status among the init containers'. Their
// starts and exits are events, marked sidecar; an ordinary init
// container's are not (it ends before the pod serves, and its exit 0
// would read as the pod's). Only changes make events: a status seen again
// adds nothing.
func TestContainerEventsReadNativeSidecars(t *testing.T) {
	started := metav1.Now()
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	done := func(code int32, reason string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: metav1.Now()}}
	}
	pod := func(initState, proxy, app corev1.ContainerState) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "migrate"}, {Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
				Containers:     []corev1.Container{{Name: "app"}}},
			Status: corev1.PodStatus{
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "migrate", State: initState}, {Name: "proxy", State: proxy}},
				ContainerStatuses:     []corev1.ContainerStatus{{Name: "app", State: app}}}}
	}
	describe := func(es []report.Event) string {
		var out []string
		for _, e := range es {
			s := fmt.Sprintf("%s %s sidecar=%v", e.Kind, e.Detail, e.Sidecar)
			if e.ServicePort {
				s += " service_port"
			}
			if e.ExitCode != nil {
				s += fmt.Sprintf(" code=%d", *e.ExitCode)
			}
			out = append(out, s)
		}
		return strings.Join(out, "; ")
	}
	serving := map[string]bool{"proxy": true} // the Service targets the sidecar's port
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}

	steps := []struct {
		name     string
		from, to *corev1.Pod
		want     string
	}{
		{"init ran, sidecar started", pod(running, waiting, waiting), pod(done(0, "Completed"), running, waiting),
			"container_started sidecar proxy sidecar=true service_port"},
		{"app started", pod(done(0, "Completed"), running, waiting), pod(done(0, "Completed"), running, running),
			"container_started container app sidecar=false"},
		{"nothing changed", pod(done(0, "Completed"), running, running), pod(done(0, "Completed"), running, running), ""},
		{"app exited, then the sidecar killed", pod(done(0, "Completed"), running, running), pod(done(0, "Completed"), done(137, "Error"), done(0, "Completed")),
			"container_terminated sidecar proxy (SIGKILL) sidecar=true service_port code=137; container_terminated container app sidecar=false code=0"},
	}
	for _, s := range steps {
		if got := describe(containerEvents(s.from, s.to, serving)); got != s.want {
			t.Errorf("%s: events %q, want %q", s.name, got, s.want)
		}
	}
	for _, e := range containerEvents(steps[3].from, steps[3].to, serving) {
		if e.Container == "" || e.Pod != "web-1" || e.Server == nil {
			t.Errorf("event %+v: want the container, the pod and the kubelet's time", e)
		}
	}
}
