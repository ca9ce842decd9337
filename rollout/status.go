// Package rollout drives and observes a rollout (of a Deployment,
// StatefulSet, DaemonSet or Argo Rollout) through
// client-go: it resolves the target, triggers the rollout, judges completion
// exactly as kubectl rollout status (kubectl argo rollouts status for a
// Rollout) does (plus: every old pod object gone),
// checks permissions, and records a timeline of what pods and
// EndpointSlices did, stamped with local receive times.
package rollout

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Progress is kubectl's view of a Deployment rollout.
type Progress struct {
	Done bool
	// Failed is set when the Deployment reports ProgressDeadlineExceeded.
	Failed  string
	Message string
	// Paused says why an Argo Rollout waits to be promoted (ArgoProgress);
	// "" for the other kinds, which never wait on a person.
	Paused string
}

// TimedOutReason is the Progressing condition reason of a stuck rollout.
const TimedOutReason = "ProgressDeadlineExceeded"

// DeploymentProgress mirrors kubectl's DeploymentStatusViewer (kubectl
// rollout status) to the letter, so rollprobe and kubectl never disagree on
// whether a rollout is complete. Note that "complete" ignores terminating
// pods, which still receive kept-alive traffic: see OldPodsGone.
func DeploymentProgress(d *appsv1.Deployment) Progress {
	if d.Generation > d.Status.ObservedGeneration {
		return Progress{Message: "waiting for deployment spec update to be observed"}
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == TimedOutReason {
			return Progress{Failed: fmt.Sprintf("deployment %q exceeded its progress deadline: %s", d.Name, c.Message)}
		}
	}
	s := d.Status
	switch {
	// kubectl skips this check when spec.replicas is unset (an object the
	// apiserver returns always has it: it defaults to 1).
	case d.Spec.Replicas != nil && s.UpdatedReplicas < *d.Spec.Replicas:
		return Progress{Message: fmt.Sprintf("%d out of %d new replicas have been updated", s.UpdatedReplicas, *d.Spec.Replicas)}
	case s.Replicas > s.UpdatedReplicas:
		return Progress{Message: fmt.Sprintf("%d old replicas are pending termination", s.Replicas-s.UpdatedReplicas)}
	case s.AvailableReplicas < s.UpdatedReplicas:
		return Progress{Message: fmt.Sprintf("%d of %d updated replicas are available", s.AvailableReplicas, s.UpdatedReplicas)}
	}
	return Progress{Done: true, Message: fmt.Sprintf("deployment %q successfully rolled out", d.Name)}
}

// PodTemplateHashLabel is the label the Deployment controller puts on a
// ReplicaSet's pods: the revision a pod belongs to.
const PodTemplateHashLabel = appsv1.DefaultDeploymentUniqueLabelKey

// OldPods returns the pods that do not belong to revision newHash (see
// PodRevision), the terminating ones included: while any exists, traffic
// may still reach the old version (kept-alive connections survive
// endpoint removal).
func OldPods(pods []*corev1.Pod, newHash string) []*corev1.Pod {
	var old []*corev1.Pod
	for _, p := range pods {
		if PodRevision(p) != newHash {
			old = append(old, p)
		}
	}
	return old
}

// Terminating returns the pods whose deletion was asked for and that are
// not gone yet: until they are, kept-alive connections may still reach
// them.
func Terminating(pods []*corev1.Pod) []*corev1.Pod {
	var going []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			going = append(going, p)
		}
	}
	return going
}

// Active returns the pods that run or will: not terminating, and not
// ended (a pod in phase Succeeded or Failed, an evicted one, serves
// nothing and its controller has already replaced it).
func Active(pods []*corev1.Pod) []*corev1.Pod {
	var up []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			up = append(up, p)
		}
	}
	return up
}
