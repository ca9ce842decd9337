package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Argo Rollouts' Rollout (argoproj.io/v1alpha1) is read and written
// through the dynamic client: Argo is no compile-time dependency (its
// module pins its own Kubernetes libraries), and a cluster without its
// CRD is told so, not crashed on. ArgoRollout holds only the fields
// rollprobe reads, with Argo's JSON names (pkg/apis/rollouts/v1alpha1).

// RolloutsGVR is the Rollout resource.
var RolloutsGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}

// ArgoPodHashLabel is the label Argo Rollouts puts on its ReplicaSets'
// pods (its DefaultRolloutUniqueLabelKey): the revision a pod belongs to,
// and what it adds to the active, preview, stable and canary Services'
// selectors to point them at one ReplicaSet.
const ArgoPodHashLabel = "rollouts-pod-template-hash"

// ArgoScaleDownDeadlineAnnotation holds the time (RFC 3339) the controller
// will scale an old ReplicaSet down: the switch (blue/green) or the end of
// the canary plus scaleDownDelaySeconds.
const ArgoScaleDownDeadlineAnnotation = "scale-down-deadline"

// ArgoRevisionAnnotation holds a Rollout's and its ReplicaSets' revision.
const ArgoRevisionAnnotation = "rollout.argoproj.io/revision"

// ArgoWorkloadGenerationAnnotation holds, on a Rollout with a workloadRef,
// the generation of the referenced object as the controller last saw it
// (its WorkloadGenerationAnnotation): the controller writes it when that
// object changes, then reconciles and records the generation it rolled to
// in status.workloadObservedGeneration.
const ArgoWorkloadGenerationAnnotation = "rollout.argoproj.io/workload-generation"

// ArgoRollout is the part of a Rollout rollprobe reads.
type ArgoRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ArgoRolloutSpec   `json:"spec"`
	Status            ArgoRolloutStatus `json:"status"`
	// RefGeneration is that object's metadata.generation as it was read
	// (0 when the template is the Rollout's own).
	RefGeneration int64 `json:"-"`
	// RefReplicas is how many pods of its own that object wants (a
	// Deployment's or ReplicaSet's spec.replicas; 0 for a PodTemplate).
	RefReplicas int32 `json:"-"`
}

type ArgoRolloutSpec struct {
	Replicas *int32                 `json:"replicas,omitempty"`
	Selector *metav1.LabelSelector  `json:"selector"`
	Template corev1.PodTemplateSpec `json:"template"`
	// WorkloadRef names the object whose pod template the Rollout uses (a
	// Deployment, a ReplicaSet or a PodTemplate): GetWorkload reads that
	// template into Template, and the triggers write that object
	// (Argo's controller rolls the Rollout when its template changes).
	WorkloadRef *ArgoObjectRef `json:"workloadRef,omitempty"`
	Paused      bool           `json:"paused,omitempty"`
	RestartAt   *metav1.Time   `json:"restartAt,omitempty"`
	Strategy    struct {
		BlueGreen *ArgoBlueGreen `json:"blueGreen,omitempty"`
		Canary    *ArgoCanary    `json:"canary,omitempty"`
	} `json:"strategy"`
}

// ArgoObjectRef names an object in the Rollout's namespace.
type ArgoObjectRef struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	// ScaleDown is whether Argo scales a referenced Deployment's own pods
	// down: never (the default), onsuccess, progressively.
	ScaleDown string `json:"scaleDown,omitempty"`
}

// String is the object as kubectl writes it: "deployment web".
func (o ArgoObjectRef) String() string { return strings.ToLower(o.Kind) + " " + o.Name }

type ArgoBlueGreen struct {
	ActiveService         string `json:"activeService"`
	PreviewService        string `json:"previewService,omitempty"`
	AutoPromotionEnabled  *bool  `json:"autoPromotionEnabled,omitempty"`
	AutoPromotionSeconds  int32  `json:"autoPromotionSeconds,omitempty"`
	ScaleDownDelaySeconds *int32 `json:"scaleDownDelaySeconds,omitempty"`
	// ScaleDownDelayRevisionLimit 0 scales the old ReplicaSet down as soon
	// as the switch is done, whatever the delay.
	ScaleDownDelayRevisionLimit *int32 `json:"scaleDownDelayRevisionLimit,omitempty"`
	// AbortScaleDownDelaySeconds: after an abort switches the active
	// Service back, the new revision's pods are scaled down this much
	// later (Argo's default 30; 0 keeps them).
	AbortScaleDownDelaySeconds *int32 `json:"abortScaleDownDelaySeconds,omitempty"`
}

type ArgoCanary struct {
	CanaryService  string           `json:"canaryService,omitempty"`
	StableService  string           `json:"stableService,omitempty"`
	Steps          []ArgoCanaryStep `json:"steps,omitempty"`
	TrafficRouting json.RawMessage  `json:"trafficRouting,omitempty"`
	// MaxSurge and MaxUnavailable bound a canary without traffic routing
	// as a Deployment's do (Argo's defaults: 25% each).
	MaxSurge       *intstr.IntOrString `json:"maxSurge,omitempty"`
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// With traffic routing the old stable ReplicaSet is scaled down
	// scaleDownDelaySeconds after the full promotion, as a blue/green's
	// after its switch; dynamicStableScale scales it down as the weights
	// move instead.
	ScaleDownDelaySeconds       *int32 `json:"scaleDownDelaySeconds,omitempty"`
	ScaleDownDelayRevisionLimit *int32 `json:"scaleDownDelayRevisionLimit,omitempty"`
	DynamicStableScale          bool   `json:"dynamicStableScale,omitempty"`
	// MinPodsPerReplicaSet, with traffic routing, is the fewest pods Argo
	// runs on a side that has any (capped at the replicas).
	MinPodsPerReplicaSet *int32 `json:"minPodsPerReplicaSet,omitempty"`
	// AbortScaleDownDelaySeconds, with traffic routing: after an abort
	// sets the weights back to the stable pods, the canary's pods are
	// scaled down this much later (Argo's default 30; 0 keeps them).
	AbortScaleDownDelaySeconds *int32 `json:"abortScaleDownDelaySeconds,omitempty"`
}

// ArgoCanaryStep is one step of a canary; the kinds rollprobe does not
// name are kept as their JSON.
type ArgoCanaryStep struct {
	SetWeight      *int32          `json:"setWeight,omitempty"`
	Pause          *ArgoPause      `json:"pause,omitempty"`
	Analysis       json.RawMessage `json:"analysis,omitempty"`
	Experiment     json.RawMessage `json:"experiment,omitempty"`
	SetCanaryScale json.RawMessage `json:"setCanaryScale,omitempty"`
}

// ArgoPause is a canary's pause step: until promoted, or for Duration.
type ArgoPause struct {
	Duration *intstr.IntOrString `json:"duration,omitempty"`
}

type ArgoRolloutStatus struct {
	Abort           bool `json:"abort,omitempty"`
	PauseConditions []struct {
		Reason    string      `json:"reason"`
		StartTime metav1.Time `json:"startTime"`
	} `json:"pauseConditions,omitempty"`
	ControllerPause   bool   `json:"controllerPause,omitempty"`
	CurrentPodHash    string `json:"currentPodHash,omitempty"`
	Replicas          int32  `json:"replicas,omitempty"`
	UpdatedReplicas   int32  `json:"updatedReplicas,omitempty"`
	ReadyReplicas     int32  `json:"readyReplicas,omitempty"`
	AvailableReplicas int32  `json:"availableReplicas,omitempty"`
	CurrentStepIndex  *int32 `json:"currentStepIndex,omitempty"`
	// ObservedGeneration is a string in Argo's API (a hash before v0.10).
	ObservedGeneration string `json:"observedGeneration,omitempty"`
	// WorkloadObservedGeneration is the generation of the workloadRef's
	// object whose template the controller last reconciled (a number as a
	// string; empty without a workloadRef).
	WorkloadObservedGeneration string `json:"workloadObservedGeneration,omitempty"`
	StableRS                   string `json:"stableRS,omitempty"`
	Phase                      string `json:"phase,omitempty"`
	Message                    string `json:"message,omitempty"`
	BlueGreen                  struct {
		ActiveSelector  string `json:"activeSelector,omitempty"`
		PreviewSelector string `json:"previewSelector,omitempty"`
	} `json:"blueGreen,omitempty"`
}

// The phases Argo's controller writes in status.phase.
const (
	ArgoHealthy     = "Healthy"
	ArgoDegraded    = "Degraded"
	ArgoProgressing = "Progressing"
	ArgoPaused      = "Paused"
)

// ArgoRolloutFrom decodes a Rollout from the dynamic client's object.
func ArgoRolloutFrom(u *unstructured.Unstructured) (*ArgoRollout, error) {
	var r ArgoRollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &r); err != nil {
		return nil, fmt.Errorf("rollout %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &r, nil
}

// ArgoProgress is the Argo Rollouts kubectl plugin's view of a Rollout
// (kubectl argo rollouts status: rolloututil.GetRolloutPhase, which
// trusts the controller's status.phase once the spec's generation and an
// unpause were observed): done when Healthy, failed when Degraded.
// Paused is the pause's reason while the Rollout waits to be promoted
// (a pause step without a duration, a blue/green before its switch, an
// inconclusive analysis) or "manually paused" (spec.paused).
func ArgoProgress(r *ArgoRollout) Progress {
	if !argoGenerationObserved(r) {
		return Progress{Message: "waiting for rollout spec update to be observed"}
	}
	st := r.Status
	if st.ControllerPause && len(st.PauseConditions) == 0 {
		return Progress{Message: "waiting for rollout to unpause"}
	}
	if !argoWorkloadObserved(r) {
		return Progress{Message: "waiting for rollout spec update to be observed for the reference workload"}
	}
	msg := st.Phase
	if st.Message != "" {
		msg += " - " + st.Message
	}
	switch st.Phase {
	case ArgoHealthy:
		return Progress{Done: true, Message: fmt.Sprintf("rollout %q is healthy", r.Name)}
	case ArgoDegraded:
		return Progress{Failed: fmt.Sprintf("rollout %q is degraded: %s", r.Name, st.Message)}
	case ArgoPaused:
		reason := "manually paused"
		if len(st.PauseConditions) > 0 {
			reason = st.PauseConditions[0].Reason
		} else if st.Message != "" {
			reason = st.Message
		}
		return Progress{Paused: reason, Message: msg}
	case "":
		// Argo's controller writes the phase since v1.0; before it does,
		// the Rollout has not been reconciled.
		return Progress{Message: "waiting for the Argo Rollouts controller to report the rollout's phase"}
	}
	return Progress{Message: msg}
}

// argoGenerationObserved: status.observedGeneration, when numeric, has
// caught up with metadata.generation (Argo's isGenerationObserved).
func argoGenerationObserved(r *ArgoRollout) bool {
	g, err := strconv.ParseInt(r.Status.ObservedGeneration, 10, 64)
	if err != nil {
		return true
	}
	return g >= r.Generation
}

// argoWorkloadObserved: a Rollout with a workloadRef has reconciled the
// referenced object's generation its annotation records (the plugin's
// isWorkloadGenerationObserved: equal, when both are numbers). The
// plugin asks only when its copy resolved the template; every watched
// copy is asked here, as a workloadRef's template changes only there.
func argoWorkloadObserved(r *ArgoRollout) bool {
	if r.Spec.WorkloadRef == nil {
		return true
	}
	recorded, err := strconv.ParseInt(r.Annotations[ArgoWorkloadGenerationAnnotation], 10, 32)
	if err != nil {
		return true
	}
	observed, err := strconv.ParseInt(r.Status.WorkloadObservedGeneration, 10, 32)
	if err != nil {
		return true
	}
	return observed == recorded
}

// argoTemplateGeneration is the generation of a workloadRef's object the
// Rollout shows: the larger of the one its annotation records and the one
// its status says was reconciled (the controller may reconcile a newer
// template before its annotation is written back); 0 when neither is set.
func argoTemplateGeneration(r *ArgoRollout) int64 {
	var g int64
	for _, s := range []string{r.Annotations[ArgoWorkloadGenerationAnnotation], r.Status.WorkloadObservedGeneration} {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			g = max(g, n)
		}
	}
	return g
}

// ArgoStep describes the canary step at index i as the plugin does
// ("setWeight: 20", "pause", "pause: 10s", "analysis"), "" beyond the
// steps.
func ArgoStep(r *ArgoRollout, i int32) string {
	c := r.Spec.Strategy.Canary
	if c == nil || i < 0 || int(i) >= len(c.Steps) {
		return ""
	}
	s := c.Steps[i]
	switch {
	case s.SetWeight != nil:
		return fmt.Sprintf("setWeight: %d", *s.SetWeight)
	case s.Pause != nil && s.Pause.Duration != nil:
		return "pause: " + s.Pause.Duration.String()
	case s.Pause != nil:
		return "pause"
	case len(s.Analysis) > 0:
		return "analysis"
	case len(s.Experiment) > 0:
		return "experiment"
	case len(s.SetCanaryScale) > 0:
		return "setCanaryScale"
	}
	return "step"
}

// ArgoTimedPause says whether the canary step at index i is a pause with a
// duration: one that ends by itself.
func ArgoTimedPause(r *ArgoRollout, i int32) bool {
	c := r.Spec.Strategy.Canary
	if c == nil || i < 0 || int(i) >= len(c.Steps) {
		return false
	}
	p := c.Steps[i].Pause
	return p != nil && p.Duration != nil
}

// ArgoSetWeight is the canary weight in force at step index i: the last
// setWeight at or before it (0 before any; 100 past the last step, when
// the canary is promoted).
func ArgoSetWeight(r *ArgoRollout, i int32) int32 {
	c := r.Spec.Strategy.Canary
	if c == nil {
		return 100
	}
	if int(i) >= len(c.Steps) {
		return 100
	}
	var w int32
	for j := int32(0); j <= i && int(j) < len(c.Steps); j++ {
		if s := c.Steps[j].SetWeight; s != nil {
			w = *s
		}
	}
	return w
}

// Promote patches, as kubectl argo rollouts promote sends them: the pause
// conditions cleared through the status subresource, and spec.paused set
// false when it was set.
const (
	argoClearPauseConditions = `{"status":{"pauseConditions":null}}`
	argoUnpause              = `{"spec":{"paused":false}}`
)

// DynamicClients is a kubernetes.Interface that also carries a dynamic
// client: the functions that take a kubernetes.Interface reach a Rollout
// through it (WithDynamic), so their callers need no second parameter.
type DynamicClients interface {
	kubernetes.Interface
	Dynamic() dynamic.Interface
	// Typed is the typed client itself: informers must get it, not the
	// wrapper, since client-go asks the client it is given about itself by
	// type assertion (a fake declares that it cannot watch-list, and an
	// informer given the wrapper waits forever for the fake's bookmark).
	Typed() kubernetes.Interface
}

type withDynamic struct {
	kubernetes.Interface
	dyn dynamic.Interface
}

func (w withDynamic) Dynamic() dynamic.Interface  { return w.dyn }
func (w withDynamic) Typed() kubernetes.Interface { return w.Interface }

// typed is kube without a DynamicClients wrapper.
func typed(kube kubernetes.Interface) kubernetes.Interface {
	if d, ok := kube.(DynamicClients); ok {
		return d.Typed()
	}
	return kube
}

// WithDynamic joins a typed and a dynamic client.
func WithDynamic(kube kubernetes.Interface, dyn dynamic.Interface) DynamicClients {
	return withDynamic{Interface: kube, dyn: dyn}
}

// ErrNoDynamicClient: a Rollout was asked of a client without the dynamic
// one (a caller's mistake, not the user's).
var ErrNoDynamicClient = errors.New("argo rollouts: the client has no dynamic client (rollout.WithDynamic)")

func rollouts(kube kubernetes.Interface, ns string) (dynamic.ResourceInterface, error) {
	d, ok := kube.(DynamicClients)
	if !ok {
		return nil, ErrNoDynamicClient
	}
	return d.Dynamic().Resource(RolloutsGVR).Namespace(ns), nil
}

// PromoteRollout does what kubectl argo rollouts promote does for a paused
// Rollout: clear its pause conditions (status subresource), and unpause
// its spec if paused there.
func PromoteRollout(ctx context.Context, kube kubernetes.Interface, r *ArgoRollout) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	ri, err := rollouts(kube, r.Namespace)
	if err != nil {
		return err
	}
	if len(r.Status.PauseConditions) > 0 || r.Status.ControllerPause {
		if _, err := ri.Patch(ctx, r.Name, types.MergePatchType, []byte(argoClearPauseConditions), metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("promote rollout %s/%s: %w", r.Namespace, r.Name, CallError(ctx, err))
		}
	}
	if r.Spec.Paused {
		if _, err := ri.Patch(ctx, r.Name, types.MergePatchType, []byte(argoUnpause), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("unpause rollout %s/%s: %w", r.Namespace, r.Name, CallError(ctx, err))
		}
	}
	return nil
}

// ArgoAbortDelay is how long after an abort Argo Rollouts v1.10.1 scales
// the aborted revision's ReplicaSet down, as its
// GetAbortScaleDownDelaySecondsOrDefault and shouldDelayScaleDownOnAbort
// decide: abortScaleDownDelaySeconds for a blue/green and a canary with
// traffic routing (30 unset; 0 keeps the pods: keep), except a
// dynamicStableScale canary that leaves it unset, and a canary without
// routing, which scale it down at once (0). why says which setting.
func ArgoAbortDelay(r *ArgoRollout) (delay time.Duration, keep bool, why string) {
	var set *int32
	switch st := r.Spec.Strategy; {
	case st.BlueGreen != nil:
		set = st.BlueGreen.AbortScaleDownDelaySeconds
	case st.Canary != nil && len(st.Canary.TrafficRouting) > 0:
		set = st.Canary.AbortScaleDownDelaySeconds
		if set == nil && st.Canary.DynamicStableScale {
			return 0, false, "a dynamicStableScale canary without abortScaleDownDelaySeconds scales the canary down as the weights go back"
		}
	default:
		return 0, false, "a canary without traffic routing scales the canary down at once"
	}
	switch {
	case set == nil:
		return ArgoDefaultAbortDelay * time.Second, false, fmt.Sprintf("abortScaleDownDelaySeconds unset: Argo Rollouts' default, %d", ArgoDefaultAbortDelay)
	case *set == 0:
		return 0, true, "abortScaleDownDelaySeconds: 0 keeps them"
	}
	return time.Duration(*set) * time.Second, false, fmt.Sprintf("abortScaleDownDelaySeconds: %d", *set)
}

// ArgoDefaultAbortDelay is abortScaleDownDelaySeconds unset, in seconds
// (utils/defaults).
const ArgoDefaultAbortDelay = 30

// ArgoServices are the Services a Rollout's strategy names, which Argo
// points at one ReplicaSet by adding ArgoPodHashLabel to their selectors:
// blue/green's active first, then its preview; a canary's stable first,
// then its canary.
func ArgoServices(r *ArgoRollout) []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
		}
	}
	if bg := r.Spec.Strategy.BlueGreen; bg != nil {
		add(bg.ActiveService)
		add(bg.PreviewService)
	}
	if c := r.Spec.Strategy.Canary; c != nil {
		add(c.StableService)
		add(c.CanaryService)
	}
	return out
}
