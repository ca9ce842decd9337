package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The sleep no container can have been signalled before: the smallest of
// the containers' sleep actions, none where one has none (an exec hook
// does not count: it can fail at once), capped by the grace period.
func TestPreStopSleep(t *testing.T) {
	sleep := func(s int64) corev1.Container {
		return corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}}
	}
	exec := corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "5"}}}}}
	for _, c := range []struct {
		name       string
		containers []corev1.Container
		grace      int64
		want       int64
	}{
		{"one sleep", []corev1.Container{sleep(3)}, 30, 3},
		{"the smallest of two", []corev1.Container{sleep(5), sleep(3)}, 30, 3},
		{"a container without one", []corev1.Container{sleep(5), {}}, 30, 0},
		{"an exec hook", []corev1.Container{exec}, 30, 0},
		{"cut by the grace period", []corev1.Container{sleep(10)}, 2, 2},
		{"a forced deletion", []corev1.Container{sleep(10)}, 0, 0},
		{"no containers", nil, 30, 0},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: c.containers}}
		if got := PreStopSleep(p, c.grace); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
