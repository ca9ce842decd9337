package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// minTerminationWait is the kubelet's floor for the time between SIGTERM and
// SIGKILL when preStop used up the grace period.
const minTerminationWait = 2 * time.Second

// podRunner owns one pod on the node, from network setup to deletion.
type podRunner struct {
	a   *Agent
	log *slog.Logger

	mu         sync.Mutex
	pod        *corev1.Pod // latest seen
	terminate  chan struct{}
	terminated bool // terminate closed
	forced     bool // the object is gone: no grace

	net        netns.PodNetwork
	dir        string
	containers []*container
	status     corev1.PodStatus
	statusMu   sync.Mutex
}

func newPodRunner(a *Agent, pod *corev1.Pod, log *slog.Logger) *podRunner {
	uid := strings.ReplaceAll(string(pod.UID), "-", "")
	return &podRunner{
		a: a, log: log, pod: pod.DeepCopy(), terminate: make(chan struct{}),
		net: netns.PodNetwork{NS: netns.PodNetNSPref + uid[:10], Veth: "rpv" + uid[:10]},
		dir: filepath.Join(a.cfg.StateDir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, uid[:8])),
	}
}

// update hands the runner the latest object; a deletion timestamp (or a
// forced delete) starts termination.
func (r *podRunner) update(pod *corev1.Pod, gone bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pod = pod.DeepCopy()
	if (pod.DeletionTimestamp != nil || gone) && !r.terminated {
		r.forced = gone
		r.terminated = true
		close(r.terminate)
	}
}

func (r *podRunner) current() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pod
}

func (r *podRunner) run(ctx context.Context) {
	pod := r.current()
	r.status = corev1.PodStatus{
		Phase: corev1.PodPending, HostIP: r.a.cfg.NodeIP, HostIPs: []corev1.HostIP{{IP: r.a.cfg.NodeIP}},
		StartTime: ptr.To(metav1.Now()), QOSClass: corev1.PodQOSBestEffort,
	}
	r.setCondition(corev1.PodScheduled, true, "")
	r.setCondition(corev1.PodInitialized, true, "")
	r.setCondition(corev1.ContainersReady, false, "ContainersNotReady")
	r.setCondition(corev1.PodReady, false, "ContainersNotReady")

	ip, err := r.a.ips.get()
	if err != nil {
		r.log.Error("no pod IP", "err", err)
		return
	}
	defer r.a.ips.put(ip)
	r.net.IP = ip
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		r.log.Error("pod dir", "err", err)
		return
	}
	if err := netns.SetupPod(r.net); err != nil {
		r.log.Error("pod network", "err", err)
		_ = netns.TeardownPod(r.net)
		return
	}
	var tornDown bool
	teardown := func() {
		if tornDown {
			return
		}
		tornDown = true
		if err := netns.TeardownPod(r.net); err != nil {
			r.log.Warn("pod network teardown", "err", err)
		}
	}
	defer teardown()
	r.statusMu.Lock()
	r.status.PodIP, r.status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	r.statusMu.Unlock()

	for i := range pod.Spec.Containers {
		r.containers = append(r.containers, newContainer(r, &pod.Spec.Containers[i]))
	}
	r.pushStatus(ctx)

	var wg sync.WaitGroup
	for _, c := range r.containers {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(ctx) }()
	}
	select {
	case <-r.terminate:
	case <-ctx.Done():
		return
	}
	r.shutdown(ctx)
	wg.Wait()
	// As the kubelet does: the sandbox (and the pod's IP with it) goes
	// before the pod object is deleted, so a pod seen gone no longer
	// answers at its IP.
	teardown()
	r.finish(ctx)
}

// shutdown runs the kubelet's termination sequence on every container in
// parallel, within the pod's grace period.
func (r *podRunner) shutdown(ctx context.Context) {
	pod := r.current()
	grace := 30 * time.Second
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	r.mu.Lock()
	if r.forced {
		grace = 0
	}
	r.mu.Unlock()
	r.log.Info("terminating", "grace", grace)
	var wg sync.WaitGroup
	for _, c := range r.containers {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(ctx, grace) }()
	}
	wg.Wait()
}

// finish reports the final status and removes the pod object, as the
// kubelet does once every container has stopped.
func (r *podRunner) finish(ctx context.Context) {
	r.statusMu.Lock()
	allZero := true
	for _, cs := range r.status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			allZero = false
		}
	}
	if allZero {
		r.status.Phase = corev1.PodSucceeded
	} else {
		r.status.Phase = corev1.PodFailed
	}
	r.statusMu.Unlock()
	r.setCondition(corev1.ContainersReady, false, "PodCompleted")
	r.setCondition(corev1.PodReady, false, "PodCompleted")
	r.pushStatus(ctx)
	pod := r.current()
	err := r.a.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		r.log.Warn("delete pod", "err", err)
	}
	r.log.Info("pod gone")
}

// setCondition sets a pod condition, moving its transition time only when
// the status changes.
func (r *podRunner) setCondition(t corev1.PodConditionType, ok bool, reason string) bool {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
		reason = ""
	}
	for i := range r.status.Conditions {
		c := &r.status.Conditions[i]
		if c.Type == t {
			if c.Status == status {
				return false
			}
			c.Status, c.Reason, c.LastTransitionTime = status, reason, metav1.Now()
			return true
		}
	}
	r.status.Conditions = append(r.status.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.Now()})
	return true
}

// containerChanged recomputes the pod-level view after a container's state
// changed and writes the status.
func (r *podRunner) containerChanged(ctx context.Context) {
	r.statusMu.Lock()
	statuses := make([]corev1.ContainerStatus, 0, len(r.containers))
	allReady, anyRunning := len(r.containers) > 0, false
	for _, c := range r.containers {
		cs := c.snapshot()
		statuses = append(statuses, cs)
		allReady = allReady && cs.Ready
		anyRunning = anyRunning || cs.State.Running != nil
	}
	r.status.ContainerStatuses = statuses
	if anyRunning && r.status.Phase == corev1.PodPending {
		r.status.Phase = corev1.PodRunning
	}
	r.statusMu.Unlock()
	reason := "ContainersNotReady"
	r.setCondition(corev1.ContainersReady, allReady, reason)
	r.setCondition(corev1.PodReady, allReady, reason)
	r.pushStatus(ctx)
}

// pushStatus writes the runner's status to the API (retrying conflicts).
func (r *podRunner) pushStatus(ctx context.Context) {
	pod := r.current()
	api := r.a.kube.CoreV1().Pods(pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := api.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return nil
		}
		r.statusMu.Lock()
		cur.Status = *r.status.DeepCopy()
		r.statusMu.Unlock()
		_, err = api.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		r.log.Warn("status update", "err", err)
	}
}
