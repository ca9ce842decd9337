package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/internal/field"
)

// Scale is kubectl scale --replicas=N as the trigger: the workload's
// replicas set through its scale subresource, as a HorizontalPodAutoscaler
// does. A scale-in takes pods away as a rollout does (the same endpoint
// propagation race, the same SIGTERM), many times a day where an
// autoscaler runs, and a scale-out adds pods that must be ready before
// they get traffic. Nothing changes revision: the run follows the pods
// (Done), not a revision.
type Scale struct {
	Replicas int32
	// From is the replicas the workload wanted before (Check sets it);
	// 0 when not known yet.
	From int32
}

// ScaleSubresource is the subresource kubectl scale and autoscalers write.
const ScaleSubresource = "scale"

// ParseScale checks N for --scale: at least 1, since 0 leaves the Service
// no pod at all, and every request after it fails by design, not by a
// drop a fix can prevent.
func ParseScale(n int64) (Scale, error) {
	if n < 1 || n > 1<<31-1 {
		return Scale{}, field.Invalid("Replicas", fmt.Sprint(n), "want 1 or more: at 0 the Service has no pod, every request after it fails by design")
	}
	return Scale{Replicas: int32(n)}, nil
}

func (s Scale) Describe() string {
	if s.From > 0 {
		return fmt.Sprintf("scale %s (kubectl scale --replicas=%d)", s.Change(), s.Replicas)
	}
	return fmt.Sprintf("scale to %s (kubectl scale --replicas=%d)", replicas(s.Replicas), s.Replicas)
}

// Change is how the scale moves the replicas, From known: "from 3
// replicas to 1".
func (s Scale) Change() string {
	return fmt.Sprintf("from %s to %d", replicas(s.From), s.Replicas)
}

// Gone is how a followed scale's end is said: a scale-in's removed pods
// are gone; a scale-out removes none, and "gone" would say one went.
func (s Scale) Gone() string {
	if s.Replicas > s.From {
		return "the scale removed no pod"
	}
	return "every pod the scale removed is gone"
}

func podsN(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

func replicas(n int32) string {
	if n == 1 {
		return "1 replica"
	}
	return fmt.Sprintf("%d replicas", n)
}

// Verbs: a scale writes the scale subresource only (Permissions).
func (Scale) Verbs() []string { return nil }

// Permissions are what a scale of a workload of kind k needs beyond
// RequiredPermissions: patch on its scale subresource, the one RBAC
// grants autoscalers (deployments/scale).
func (Scale) Permissions(k Kind) []Permission {
	return []Permission{{Verb: "patch", Group: k.Group(), Resource: k.Resource(), Subresource: ScaleSubresource}}
}

// ErrNoReplicas: a DaemonSet runs one pod per eligible node; it has no
// replicas to set.
var ErrNoReplicas = errors.New("a DaemonSet runs one pod per node and has no replicas to scale (--drain NODE takes its pod off a node)")

// ErrScaleNoChange: the workload already wants that many replicas, so a
// scale would change nothing.
var ErrScaleNoChange = errors.New("a scale to the replicas it already has changes nothing")

// Check says why the scale cannot be made of the workload as it is, or
// nil, and returns the scale with From set. A paused Deployment and an
// OnDelete StatefulSet scale (only their template changes wait), so
// CanRoll is not asked.
func (s Scale) Check(w Workload) (Scale, error) {
	if w.DaemonSet != nil {
		return s, fmt.Errorf("daemonset %s: %w", w.DaemonSet.Name, ErrNoReplicas)
	}
	desired, _, _, _ := w.Counts()
	if desired == s.Replicas {
		return s, fmt.Errorf("%s %s wants %s: %w", w.Kind().Lower(), w.Object().GetName(), replicas(desired), ErrScaleNoChange)
	}
	s.From = desired
	return s, nil
}

// Autoscalers names the HorizontalPodAutoscalers (KEDA's ScaledObjects
// make them too) that scale the workload ref names: each would undo the
// scale at its next sync, so a run must not begin under one. The error is
// the API's (a Forbidden one means the caller may not list them).
func Autoscalers(ctx context.Context, kube kubernetes.Interface, ref Ref) ([]string, error) {
	ctx, cancel := Bound(ctx)
	defer cancel()
	list, err := kube.AutoscalingV2().HorizontalPodAutoscalers(ref.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list horizontalpodautoscalers: %w", CallError(ctx, err))
	}
	var names []string
	for _, h := range list.Items {
		if scalesTarget(h.Spec.ScaleTargetRef, ref) {
			names = append(names, fmt.Sprintf("horizontalpodautoscaler %s (%s)", h.Name, replicaRange(h.Spec)))
		}
	}
	return names, nil
}

// scalesTarget: the autoscaler's target is the workload (same kind and
// name; the API group from its apiVersion, where one is given).
func scalesTarget(t autoscalingv2.CrossVersionObjectReference, ref Ref) bool {
	if t.Kind != string(ref.Kind) || t.Name != ref.Name {
		return false
	}
	if t.APIVersion == "" {
		return true
	}
	// A malformed apiVersion names nothing the autoscaler can scale.
	gv, err := schema.ParseGroupVersion(t.APIVersion)
	return err == nil && gv.Group == ref.Kind.Group()
}

func replicaRange(s autoscalingv2.HorizontalPodAutoscalerSpec) string {
	lo := "1"
	if s.MinReplicas != nil {
		lo = fmt.Sprint(*s.MinReplicas)
	}
	return fmt.Sprintf("%s to %d replicas", lo, s.MaxReplicas)
}

// ErrAutoscaled: an autoscaler scales the workload and would undo the
// scale.
var ErrAutoscaled = errors.New("it would undo the scale at its next sync (15 s by default): scale through it instead, with its minReplicas and maxReplicas (rollprobe run --watch while it acts, or --exec -- kubectl patch hpa ...)")

// Fire patches the scale subresource, as kubectl scale does; a Rollout's
// through the dynamic client (its CRD serves the subresource).
func (s Scale) Fire(ctx context.Context, kube kubernetes.Interface, ref Ref) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, s.Replicas)
	opts := metav1.PatchOptions{}
	var err error
	switch ref.Kind {
	case KindDeployment:
		_, err = kube.AppsV1().Deployments(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, opts, ScaleSubresource)
	case KindStatefulSet:
		_, err = kube.AppsV1().StatefulSets(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, opts, ScaleSubresource)
	case KindRollout:
		ri, rerr := rollouts(kube, ref.Namespace)
		if err = rerr; err == nil {
			_, err = ri.Patch(ctx, ref.Name, types.MergePatchType, patch, opts, ScaleSubresource)
		}
	default:
		return fmt.Errorf("scale %s: %w", ref, ErrNoReplicas)
	}
	if err != nil {
		return fmt.Errorf("scale %s: %w", ref, CallError(ctx, err))
	}
	return nil
}

// ScaleProgress is how far a scale has come: Done once the workload wants
// Replicas, is done as kubectl rollout status judges it, runs exactly
// Replicas pods and no pod of it is terminating (a scale-in is over only
// when the pods it removed are gone: they serve kept-alive connections
// until then). Undone is set when the workload wants another count than
// the scale set after the watch saw the scale: something else scales it.
type ScaleProgress struct {
	Done    bool
	Message string
	Undone  string
}

// Progress judges the scale against the workload and its pods as the
// watch sees them; seen says whether the watch has shown the workload
// wanting Replicas since the scale was made.
func (s Scale) Progress(w Workload, pods []*corev1.Pod, seen bool) ScaleProgress {
	desired, _, _, _ := w.Counts()
	if desired != s.Replicas {
		if seen {
			return ScaleProgress{Undone: fmt.Sprintf("%s wants %s again, not the %d it was scaled to: something else scales it (a HorizontalPodAutoscaler, KEDA, a GitOps sync), so the scale's end cannot be measured", w.Ref(), replicas(desired), s.Replicas)}
		}
		return ScaleProgress{Message: "waiting for the scale to be observed"}
	}
	if pr := w.Progress(); !pr.Done {
		return ScaleProgress{Message: pr.Message}
	}
	if going := Terminating(pods); len(going) > 0 {
		names := make([]string, len(going))
		for i, p := range going {
			names[i] = p.Name
		}
		slices.Sort(names)
		return ScaleProgress{Message: fmt.Sprintf("%s terminating (%s)", podsN(len(going)), strings.Join(names, ", "))}
	}
	if n := len(Active(pods)); n != int(s.Replicas) {
		return ScaleProgress{Message: fmt.Sprintf("%s, %d wanted", podsN(n), s.Replicas)}
	}
	return ScaleProgress{Done: true, Message: fmt.Sprintf("scaled to %s: each ready, every pod the scale removed gone", replicas(s.Replicas))}
}

// ScaledOnly says whether after differs from before by its replicas alone,
// its pod template the same: a scale, by hand or by an autoscaler, not a
// rollout (a watch sees both as a new generation), returned with From
// set. For a Rollout whose template is another object's (TemplateFrom)
// the same means that object at the same generation (Generation), as its
// template is empty in a watched copy and that object's in a fresh read:
// unknown, and so false, when neither copy shows the generation.
func ScaledOnly(before, after Workload) (Scale, bool) {
	if before.IsZero() || after.IsZero() || before.DaemonSet != nil {
		return Scale{}, false
	}
	from, _, _, _ := before.Counts()
	to, _, _, _ := after.Counts()
	if from == to {
		return Scale{}, false
	}
	if holder := before.TemplateFrom(); holder != "" || after.TemplateFrom() != "" {
		if holder != after.TemplateFrom() || before.Generation() == 0 || before.Generation() != after.Generation() {
			return Scale{}, false
		}
	} else if !equality.Semantic.DeepEqual(before.Template(), after.Template()) {
		return Scale{}, false
	}
	return Scale{Replicas: to, From: from}, true
}
