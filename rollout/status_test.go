package rollout

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func deployment(gen, observed int64, replicas, updated, total, available int32, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Generation: gen},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: observed, UpdatedReplicas: updated, Replicas: total,
			AvailableReplicas: available, Conditions: conds,
		},
	}
}

func TestDeploymentProgress(t *testing.T) {
	deadline := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: TimedOutReason, Message: "ReplicaSet web-2 has timed out progressing."}
	tests := []struct {
		name   string
		d      *appsv1.Deployment
		done   bool
		failed bool
		msg    string
	}{
		{"spec not observed", deployment(3, 2, 3, 3, 3, 3), false, false, "spec update"},
		{"updating", deployment(2, 2, 3, 1, 4, 3), false, false, "1 out of 3 new replicas"},
		{"old pending termination", deployment(2, 2, 3, 3, 4, 3), false, false, "1 old replicas are pending"},
		{"not available", deployment(2, 2, 3, 3, 3, 2), false, false, "2 of 3 updated replicas are available"},
		{"complete", deployment(2, 2, 3, 3, 3, 3), true, false, "successfully rolled out"},
		{"deadline exceeded", deployment(2, 2, 3, 1, 4, 3, deadline), false, true, "exceeded its progress deadline"},
		{"deadline beats spec lag? no: spec first", deployment(3, 2, 3, 1, 4, 3, deadline), false, false, "spec update"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DeploymentProgress(tt.d)
			if p.Done != tt.done || (p.Failed != "") != tt.failed {
				t.Fatalf("got %+v", p)
			}
			if !strings.Contains(p.Message+p.Failed, tt.msg) {
				t.Fatalf("message %q lacks %q", p.Message+p.Failed, tt.msg)
			}
		})
	}
}

func TestOldPods(t *testing.T) {
	pod := func(name, hash string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{PodTemplateHashLabel: hash}}}
	}
	old := OldPods([]*corev1.Pod{pod("a", "new"), pod("b", "old"), pod("c", "older")}, "new")
	if len(old) != 2 || old[0].Name != "b" || old[1].Name != "c" {
		t.Fatalf("old pods %v", old)
	}
}
