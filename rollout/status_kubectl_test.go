package rollout

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubectl/pkg/polymorphichelpers"
	"k8s.io/utils/ptr"
)

// DeploymentProgress mirrors kubectl rollout status to the letter: pinned
// here against kubectl's own DeploymentStatusViewer over every
// combination of generations, replica counts (spec.replicas unset
// included) and the progress-deadline condition, so rollprobe and kubectl
// never disagree on whether a rollout is done, failed, or where it is.
func TestDeploymentProgressIsKubectls(t *testing.T) {
	viewer, err := polymorphichelpers.StatusViewerFor(schema.GroupKind{Group: "apps", Kind: "Deployment"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, gen := range [][2]int64{{1, 1}, {2, 1}, {1, 2}} {
		for _, specReplicas := range []*int32{nil, ptr.To[int32](0), ptr.To[int32](1), ptr.To[int32](3)} {
			for _, timedOut := range []bool{false, true} {
				for updated := int32(0); updated <= 3; updated++ {
					for replicas := int32(0); replicas <= 4; replicas++ {
						for available := int32(0); available <= 3; available++ {
							d := &appsv1.Deployment{
								ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Generation: gen[0]},
								Spec:       appsv1.DeploymentSpec{Replicas: specReplicas},
								Status: appsv1.DeploymentStatus{ObservedGeneration: gen[1], Replicas: replicas,
									UpdatedReplicas: updated, AvailableReplicas: available},
							}
							if timedOut {
								d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing,
									Reason: TimedOutReason, Message: "ReplicaSet web-abc has timed out progressing."}}
							}
							u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
							if err != nil {
								t.Fatal(err)
							}
							msg, done, kerr := viewer.Status(&unstructured.Unstructured{Object: u}, 0)
							got := DeploymentProgress(d)
							name := fmt.Sprintf("gen %v spec %v timedOut %v status %d/%d/%d", gen, deref(specReplicas), timedOut, updated, replicas, available)
							if got.Done != done || (got.Failed != "") != (kerr != nil) {
								t.Fatalf("%s: rollprobe done %v failed %q, kubectl done %v error %v", name, got.Done, got.Failed, done, kerr)
							}
							if kerr != nil && !strings.Contains(got.Failed, kerr.Error()) {
								t.Fatalf("%s: failed %q, kubectl %q", name, got.Failed, kerr)
							}
							if kerr == nil && !strings.Contains(strings.ToLower(msg), strings.ToLower(got.Message)) {
								t.Fatalf("%s: message %q, kubectl %q", name, got.Message, msg)
							}
							n++
						}
					}
				}
			}
		}
	}
	t.Logf("%d states agree", n)
}

func deref(p *int32) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
