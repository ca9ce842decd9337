package rollout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollprobe/rollprobe/internal/field"
)

// Kind is a kind of workload whose pods rollprobe follows as they roll.
type Kind string

const (
	KindDeployment  Kind = "Deployment"
	KindStatefulSet Kind = "StatefulSet"
	KindDaemonSet   Kind = "DaemonSet"
	// KindRollout is Argo Rollouts' Rollout (argoproj.io/v1alpha1).
	KindRollout Kind = "Rollout"
)

// WorkloadKinds are the kinds run follows, in the order --help names them.
var WorkloadKinds = []Kind{KindDeployment, KindStatefulSet, KindDaemonSet, KindRollout}

// Resource is the kind's API resource (in Group).
func (k Kind) Resource() string { return strings.ToLower(string(k)) + "s" }

// Group is the kind's API group: apps, or argoproj.io for a Rollout.
func (k Kind) Group() string {
	if k == KindRollout {
		return RolloutsGVR.Group
	}
	return "apps"
}

// Lower is the kind as kubectl writes it in messages ("deployment").
func (k Kind) Lower() string { return strings.ToLower(string(k)) }

// short are the names kubectl accepts before a slash, by kind.
var short = map[Kind][]string{
	KindDeployment:  {"deployment", "deployments", "deploy"},
	KindStatefulSet: {"statefulset", "statefulsets", "sts"},
	KindDaemonSet:   {"daemonset", "daemonsets", "ds"},
	KindRollout:     {"rollout", "rollouts", "ro"},
}

// Ref names a workload.
type Ref struct {
	Kind      Kind
	Namespace string
	Name      string
}

func (r Ref) String() string { return fmt.Sprintf("%s %s/%s", r.Kind.Lower(), r.Namespace, r.Name) }

// ParseRef splits "[NS/]NAME" for a workload of kind k (a leading
// "KIND/", as kubectl writes it, is allowed); defaultNS applies without a
// namespace.
func ParseRef(k Kind, ref, defaultNS string) (Ref, error) {
	for _, s := range short[k] {
		ref = strings.TrimPrefix(ref, s+"/")
	}
	flag := string(k)
	if ns, name, ok := strings.Cut(ref, "/"); ok {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return Ref{}, field.Invalid(flag, strconv.Quote(ref), "want [NAMESPACE/]NAME")
		}
		return Ref{Kind: k, Namespace: ns, Name: name}, nil
	}
	if ref == "" {
		return Ref{}, field.Missing(flag, "required")
	}
	return Ref{Kind: k, Namespace: defaultNS, Name: ref}, nil
}

// Workload is one object whose pods roll: exactly one of the pointers is
// set, the one of its Kind.
type Workload struct {
	Deployment  *appsv1.Deployment
	StatefulSet *appsv1.StatefulSet
	DaemonSet   *appsv1.DaemonSet
	Rollout     *ArgoRollout
}

// IsZero: no object is held.
func (w Workload) IsZero() bool {
	return w.Deployment == nil && w.StatefulSet == nil && w.DaemonSet == nil && w.Rollout == nil
}

// Kind is the kind of the object held.
func (w Workload) Kind() Kind {
	switch {
	case w.StatefulSet != nil:
		return KindStatefulSet
	case w.DaemonSet != nil:
		return KindDaemonSet
	case w.Rollout != nil:
		return KindRollout
	}
	return KindDeployment
}

// Object is the object held.
func (w Workload) Object() metav1.Object {
	switch {
	case w.StatefulSet != nil:
		return w.StatefulSet
	case w.DaemonSet != nil:
		return w.DaemonSet
	case w.Rollout != nil:
		return w.Rollout
	}
	return w.Deployment
}

// Ref names the object held.
func (w Workload) Ref() Ref {
	o := w.Object()
	return Ref{Kind: w.Kind(), Namespace: o.GetNamespace(), Name: o.GetName()}
}

// Template is the pod template.
func (w Workload) Template() *corev1.PodTemplateSpec {
	switch {
	case w.StatefulSet != nil:
		return &w.StatefulSet.Spec.Template
	case w.DaemonSet != nil:
		return &w.DaemonSet.Spec.Template
	case w.Rollout != nil:
		return &w.Rollout.Spec.Template
	}
	return &w.Deployment.Spec.Template
}

// Selector is the pod selector.
func (w Workload) Selector() *metav1.LabelSelector {
	switch {
	case w.StatefulSet != nil:
		return w.StatefulSet.Spec.Selector
	case w.DaemonSet != nil:
		return w.DaemonSet.Spec.Selector
	case w.Rollout != nil:
		return w.Rollout.Spec.Selector
	}
	return w.Deployment.Spec.Selector
}

// Progress is kubectl rollout status's verdict on the object (see the
// kind's function).
func (w Workload) Progress() Progress {
	switch {
	case w.StatefulSet != nil:
		return StatefulSetProgress(w.StatefulSet)
	case w.DaemonSet != nil:
		return DaemonSetProgress(w.DaemonSet)
	case w.Rollout != nil:
		return ArgoProgress(w.Rollout)
	}
	return DeploymentProgress(w.Deployment)
}

// Generation is the generation of the object whose pod template the
// workload's pods are made from: a change of the template moves it. That is
// the object's own metadata.generation, except for a Rollout that takes its
// template from another object (spec.workloadRef): then it is that
// object's, read from it when GetWorkload resolved the reference, else as
// the Rollout shows it (argoTemplateGeneration; the watch's copies). A
// change to such a Rollout's own spec moves no template.
func (w Workload) Generation() int64 {
	if r := w.Rollout; r != nil && r.Spec.WorkloadRef != nil {
		if r.RefGeneration > 0 {
			return r.RefGeneration
		}
		return argoTemplateGeneration(r)
	}
	return w.Object().GetGeneration()
}

// SpecGeneration is the object's own metadata.generation: any write to
// its spec moves it, a scale's among them. It differs from Generation
// only for a Rollout whose template is another object's, which a scale
// of the Rollout leaves where it was.
func (w Workload) SpecGeneration() int64 { return w.Object().GetGeneration() }

// TemplateFrom names the object the workload's pod template is read from
// and the triggers write ("deployment web"), when that is not the
// workload itself (an Argo Rollout's workloadRef); "" otherwise.
func (w Workload) TemplateFrom() string {
	if w.Rollout != nil && w.Rollout.Spec.WorkloadRef != nil {
		return w.Rollout.Spec.WorkloadRef.String()
	}
	return ""
}

// Counts are the pods the workload wants and how many of them are
// updated, ready and available, as its status says: replicas for a
// Deployment, StatefulSet or Rollout (spec.replicas defaults to 1), scheduled pods
// for a DaemonSet.
func (w Workload) Counts() (desired, updated, ready, available int32) {
	switch {
	case w.StatefulSet != nil:
		st := w.StatefulSet.Status
		return replicasOrOne(w.StatefulSet.Spec.Replicas), st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas
	case w.DaemonSet != nil:
		st := w.DaemonSet.Status
		return st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable
	case w.Rollout != nil:
		st := w.Rollout.Status
		return replicasOrOne(w.Rollout.Spec.Replicas), st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas
	}
	st := w.Deployment.Status
	return replicasOrOne(w.Deployment.Spec.Replicas), st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas
}

// replicasOrOne is spec.replicas as the apiserver defaults it.
func replicasOrOne(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// CanRoll says why a trigger cannot start a rollout of the object as it
// is, or nil: a paused Deployment does not roll, and a StatefulSet or
// DaemonSet with the OnDelete strategy replaces no pod by itself.
func (w Workload) CanRoll() error {
	switch {
	case w.Deployment != nil && w.Deployment.Spec.Paused:
		return fmt.Errorf("deployment %s: %w", w.Deployment.Name, ErrPaused)
	case w.StatefulSet != nil && w.StatefulSet.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType:
		return fmt.Errorf("statefulset %s: %w", w.StatefulSet.Name, ErrOnDelete)
	case w.DaemonSet != nil && w.DaemonSet.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType:
		return fmt.Errorf("daemonset %s: %w", w.DaemonSet.Name, ErrOnDelete)
	case w.Rollout != nil && w.Rollout.Spec.WorkloadRef != nil && w.Rollout.RefReplicas > 0:
		r := w.Rollout
		scaleDown := r.Spec.WorkloadRef.ScaleDown
		if scaleDown == "" {
			scaleDown = "never"
		}
		return fmt.Errorf("rollout %s: %s, whose template it takes (workloadRef; scaleDown: %s), wants %d pod(s) of its own: %w",
			r.Name, w.TemplateFrom(), scaleDown, r.RefReplicas, ErrTemplateHolderRunsPods)
	}
	return nil
}

// ErrTemplateHolderRunsPods: the object a Rollout's workloadRef names runs
// pods of its own (a move from a Deployment to a Rollout not finished): a
// change to its template rolls those pods too, beside the Rollout's, and
// rollprobe follows one workload (it would wait for them to take the
// Rollout's revision, which they never do).
var ErrTemplateHolderRunsPods = errors.New("a change to that template rolls them too, beside the rollout's, and rollprobe follows one workload: scale it to 0 first (or let Argo do it: workloadRef.scaleDown onsuccess or progressively, and wait until it has)")

// ErrOnDelete: with the OnDelete update strategy the controller replaces a
// pod only when someone deletes it; nothing rolls by itself.
var ErrOnDelete = errors.New("its update strategy is OnDelete: a change replaces no pod until someone deletes it (use RollingUpdate, or delete the pods yourself under rollprobe run --watch)")

// ControllerRevisionHashLabel is the label the StatefulSet and DaemonSet
// controllers put on their pods: the revision a pod belongs to.
const ControllerRevisionHashLabel = appsv1.ControllerRevisionHashLabelKey

// PodRevision is the revision a pod belongs to, whichever controller made
// it: its ReplicaSet's pod-template-hash (Argo Rollouts' own label for
// its ReplicaSets), or its controller revision.
func PodRevision(p *corev1.Pod) string {
	if h := p.Labels[PodTemplateHashLabel]; h != "" {
		return h
	}
	if h := p.Labels[ArgoPodHashLabel]; h != "" {
		return h
	}
	return p.Labels[ControllerRevisionHashLabel]
}

// StatefulSetProgress mirrors kubectl's StatefulSetStatusViewer to the
// letter (pinned by a test against it). Its quirk is kept: with a
// rollingUpdate block whose partition is unset it says done once every
// replica is ready; the apiserver defaults the partition to 0, so objects
// it returns never have that.
func StatefulSetProgress(s *appsv1.StatefulSet) Progress {
	if s.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		return Progress{Done: true, Failed: "rollout status is only available for RollingUpdate strategy type"}
	}
	st := s.Status
	if st.ObservedGeneration == 0 || s.Generation > st.ObservedGeneration {
		return Progress{Message: "waiting for statefulset spec update to be observed"}
	}
	if s.Spec.Replicas != nil && st.ReadyReplicas < *s.Spec.Replicas {
		return Progress{Message: fmt.Sprintf("waiting for %d pods to be ready", *s.Spec.Replicas-st.ReadyReplicas)}
	}
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		if s.Spec.Replicas != nil && ru.Partition != nil && st.UpdatedReplicas < *s.Spec.Replicas-*ru.Partition {
			return Progress{Message: fmt.Sprintf("waiting for partitioned roll out to finish: %d out of %d new pods have been updated",
				st.UpdatedReplicas, *s.Spec.Replicas-*ru.Partition)}
		}
		return Progress{Done: true, Message: fmt.Sprintf("partitioned roll out complete: %d new pods have been updated", st.UpdatedReplicas)}
	}
	if st.UpdateRevision != st.CurrentRevision {
		return Progress{Message: fmt.Sprintf("waiting for statefulset rolling update to complete %d pods at revision %s", st.UpdatedReplicas, st.UpdateRevision)}
	}
	return Progress{Done: true, Message: fmt.Sprintf("statefulset rolling update complete %d pods at revision %s", st.CurrentReplicas, st.CurrentRevision)}
}

// DaemonSetProgress mirrors kubectl's DaemonSetStatusViewer to the letter
// (pinned by a test against it).
func DaemonSetProgress(d *appsv1.DaemonSet) Progress {
	if d.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return Progress{Done: true, Failed: "rollout status is only available for RollingUpdate strategy type"}
	}
	st := d.Status
	if d.Generation > st.ObservedGeneration {
		return Progress{Message: "waiting for daemon set spec update to be observed"}
	}
	switch {
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return Progress{Message: fmt.Sprintf("%d out of %d new pods have been updated", st.UpdatedNumberScheduled, st.DesiredNumberScheduled)}
	case st.NumberAvailable < st.DesiredNumberScheduled:
		return Progress{Message: fmt.Sprintf("%d of %d updated pods are available", st.NumberAvailable, st.DesiredNumberScheduled)}
	}
	return Progress{Done: true, Message: fmt.Sprintf("daemon set %q successfully rolled out", d.Name)}
}
