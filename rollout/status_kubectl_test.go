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

// StatefulSetProgress mirrors kubectl's StatefulSetStatusViewer over every
// combination of strategy (OnDelete, RollingUpdate with and without a
// rollingUpdate block and partition), generations, replica counts and
// revisions.
func TestStatefulSetProgressIsKubectls(t *testing.T) {
	viewer, err := polymorphichelpers.StatusViewerFor(schema.GroupKind{Group: "apps", Kind: "StatefulSet"})
	if err != nil {
		t.Fatal(err)
	}
	type strategy struct {
		typ       appsv1.StatefulSetUpdateStrategyType
		block     bool
		partition *int32
	}
	n := 0
	for _, st := range []strategy{{appsv1.OnDeleteStatefulSetStrategyType, false, nil}, {appsv1.RollingUpdateStatefulSetStrategyType, false, nil},
		{appsv1.RollingUpdateStatefulSetStrategyType, true, nil}, {appsv1.RollingUpdateStatefulSetStrategyType, true, ptr.To[int32](0)},
		{appsv1.RollingUpdateStatefulSetStrategyType, true, ptr.To[int32](2)}} {
		for _, gen := range [][2]int64{{1, 1}, {2, 1}, {1, 0}, {1, 2}} {
			for _, specReplicas := range []*int32{nil, ptr.To[int32](0), ptr.To[int32](3)} {
				for ready := int32(0); ready <= 3; ready++ {
					for updated := int32(0); updated <= 3; updated++ {
						for _, revs := range [][2]string{{"web-a", "web-a"}, {"web-a", "web-b"}} {
							s := &appsv1.StatefulSet{
								ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Generation: gen[0]},
								Spec:       appsv1.StatefulSetSpec{Replicas: specReplicas, UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: st.typ}},
								Status: appsv1.StatefulSetStatus{ObservedGeneration: gen[1], ReadyReplicas: ready, UpdatedReplicas: updated,
									CurrentReplicas: 3 - updated, CurrentRevision: revs[0], UpdateRevision: revs[1]},
							}
							if st.block {
								s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: st.partition}
							}
							agree(t, viewer, s, StatefulSetProgress(s), fmt.Sprintf("%+v gen %v spec %v ready %d updated %d revs %v", st, gen, deref(specReplicas), ready, updated, revs))
							n++
						}
					}
				}
			}
		}
	}
	t.Logf("%d states agree", n)
}

// DaemonSetProgress mirrors kubectl's DaemonSetStatusViewer over every
// combination of strategy, generations and scheduled, updated and
// available counts.
func TestDaemonSetProgressIsKubectls(t *testing.T) {
	viewer, err := polymorphichelpers.StatusViewerFor(schema.GroupKind{Group: "apps", Kind: "DaemonSet"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, typ := range []appsv1.DaemonSetUpdateStrategyType{appsv1.OnDeleteDaemonSetStrategyType, appsv1.RollingUpdateDaemonSetStrategyType} {
		for _, gen := range [][2]int64{{1, 1}, {2, 1}, {1, 2}} {
			for desired := int32(0); desired <= 3; desired++ {
				for updated := int32(0); updated <= 3; updated++ {
					for available := int32(0); available <= 3; available++ {
						d := &appsv1.DaemonSet{
							ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "prod", Generation: gen[0]},
							Spec:       appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: typ}},
							Status: appsv1.DaemonSetStatus{ObservedGeneration: gen[1], DesiredNumberScheduled: desired,
								UpdatedNumberScheduled: updated, NumberAvailable: available},
						}
						agree(t, viewer, d, DaemonSetProgress(d), fmt.Sprintf("%s gen %v desired %d updated %d available %d", typ, gen, desired, updated, available))
						n++
					}
				}
			}
		}
	}
	t.Logf("%d states agree", n)
}

// agree fails the test unless got says what kubectl's viewer says of obj:
// done, failed (kubectl's error), and a message kubectl's contains.
func agree(t *testing.T, viewer polymorphichelpers.StatusViewer, obj any, got Progress, name string) {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	msg, done, kerr := viewer.Status(&unstructured.Unstructured{Object: u}, 0)
	if got.Done != done || (got.Failed != "") != (kerr != nil) {
		t.Fatalf("%s: rollprobe done %v failed %q, kubectl done %v error %v", name, got.Done, got.Failed, done, kerr)
	}
	if kerr != nil && !strings.Contains(kerr.Error(), got.Failed) {
		t.Fatalf("%s: failed %q, kubectl %q", name, got.Failed, kerr)
	}
	if kerr == nil && !strings.Contains(strings.ToLower(msg), strings.ToLower(got.Message)) {
		t.Fatalf("%s: message %q, kubectl %q", name, got.Message, msg)
	}
}
