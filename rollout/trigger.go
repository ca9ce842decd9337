package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/internal/field"
)

// Trigger starts a rollout (or, for Watch, waits for one started elsewhere).
type Trigger interface {
	// Describe says what the trigger does, for logs and the report.
	Describe() string
	// Fire starts the rollout of the workload ref names.
	Fire(ctx context.Context, kube kubernetes.Interface, ref Ref) error
	// Verbs are the verbs the trigger needs on the workload's resource,
	// for preflight.
	Verbs() []string
}

// RestartedAtAnnotation is what kubectl rollout restart sets on the pod
// template.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// Restart does what kubectl rollout restart does: set the restartedAt
// annotation on the pod template (RFC 3339, 1 s resolution).
type Restart struct{ Now func() time.Time }

func (Restart) Describe() string { return "restart (kubectl rollout restart)" }
func (Restart) Verbs() []string  { return []string{"patch"} }

func (r Restart) Fire(ctx context.Context, kube kubernetes.Interface, ref Ref) error {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	tmpl := map[string]any{"metadata": map[string]any{"annotations": map[string]string{RestartedAtAnnotation: now().Format(time.RFC3339)}}}
	if ref.Kind == KindRollout {
		ro, err := rolloutWithRef(ctx, kube, ref)
		if err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		if ro != nil {
			return patchTemplateHolder(ctx, kube, ro, types.StrategicMergePatchType, templatePatch(ro.Spec.WorkloadRef.Kind, tmpl))
		}
	}
	return strategicPatch(ctx, kube, ref, templatePatch("", tmpl))
}

// SetImage changes one container's image (kubectl set image).
type SetImage struct{ Container, Image string }

// ParseSetImage parses CONTAINER=IMAGE.
func ParseSetImage(s string) (SetImage, error) {
	c, img, ok := strings.Cut(s, "=")
	if !ok || c == "" || img == "" {
		return SetImage{}, field.Invalid("Image", strconv.Quote(s), "want CONTAINER=IMAGE")
	}
	return SetImage{Container: c, Image: img}, nil
}

func (s SetImage) Describe() string { return fmt.Sprintf("set image %s=%s", s.Container, s.Image) }
func (SetImage) Verbs() []string    { return []string{"patch"} }

func (s SetImage) Fire(ctx context.Context, kube kubernetes.Interface, ref Ref) error {
	w, err := GetWorkload(ctx, kube, ref)
	if err != nil {
		return fmt.Errorf("set image: %w", err)
	}
	// A container's name is unique among a pod's containers and init
	// containers together; kubectl set image looks in both, and so does
	// this: a native sidecar (a mesh proxy, say) is rolled by its image.
	spec := w.Template().Spec
	list, i := "containers", slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == s.Container })
	if i < 0 {
		list, i = "initContainers", slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == s.Container })
	}
	if i < 0 {
		var names, inits []string
		for _, c := range spec.Containers {
			names = append(names, c.Name)
		}
		has := strings.Join(names, ", ")
		for _, c := range spec.InitContainers {
			inits = append(inits, c.Name)
		}
		if len(inits) > 0 {
			has += "; init containers: " + strings.Join(inits, ", ")
		}
		return fmt.Errorf("set image: %s has no container %q (it has %s)", ref, s.Container, has)
	}
	tmpl := map[string]any{"spec": map[string]any{list: []map[string]string{{"name": s.Container, "image": s.Image}}}}
	if r := w.Rollout; r != nil && r.Spec.WorkloadRef != nil {
		return patchTemplateHolder(ctx, kube, r, types.StrategicMergePatchType, templatePatch(r.Spec.WorkloadRef.Kind, tmpl))
	}
	if ref.Kind == KindRollout {
		// A custom resource takes no strategic merge patch, and a merge
		// patch would replace the whole list: a JSON patch of the one
		// image, tested against the container's name at that index.
		path := "/spec/template/spec/" + list + "/" + strconv.Itoa(i)
		patch, _ := json.Marshal([]map[string]string{
			{"op": "test", "path": path + "/name", "value": s.Container},
			{"op": "replace", "path": path + "/image", "value": s.Image},
		})
		return patchRollout(ctx, kube, ref, types.JSONPatchType, patch)
	}
	return strategicPatch(ctx, kube, ref, templatePatch("", tmpl))
}

// Patch applies a strategic merge patch to the workload; to a Rollout,
// which takes none, the same JSON as a merge patch. Fire chooses by the
// workload's kind; Merge only names the choice in the description the
// report records, so whoever builds a Patch must set it to agree (cmd's
// patchFor does).
type Patch struct {
	JSON  []byte
	Merge bool
}

// ParsePatch checks that data is a JSON object.
func ParsePatch(data []byte) (Patch, error) {
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return Patch{}, &field.Error{Field: "Patch", Problem: "not a JSON object: " + err.Error()}
	}
	return Patch{JSON: data}, nil
}

func (p Patch) Describe() string {
	if p.Merge {
		return "JSON merge patch"
	}
	return "strategic merge patch"
}
func (Patch) Verbs() []string { return []string{"patch"} }

// Fire patches the workload; a Rollout with a workloadRef has no template
// of its own, so the patch goes, as a merge patch, to the object it names
// (the patch is written for that object: "spec.template" for a Deployment
// or ReplicaSet, "template" for a PodTemplate).
func (p Patch) Fire(ctx context.Context, kube kubernetes.Interface, ref Ref) error {
	if ref.Kind == KindRollout {
		r, err := rolloutWithRef(ctx, kube, ref)
		if err != nil {
			return fmt.Errorf("patch: %w", err)
		}
		if r != nil {
			return patchTemplateHolder(ctx, kube, r, types.MergePatchType, p.JSON)
		}
	}
	return strategicPatch(ctx, kube, ref, p.JSON)
}

// templatePatch is a patch of the pod template fields tmpl where an object
// of kind holds its template: spec.template, or template for a
// PodTemplate.
func templatePatch(kind string, tmpl map[string]any) []byte {
	if kind == "PodTemplate" {
		patch, _ := json.Marshal(map[string]any{"template": tmpl})
		return patch
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	return patch
}

// rolloutWithRef reads the Rollout ref names and returns it when it takes
// its template from another object (spec.workloadRef), nil otherwise.
func rolloutWithRef(ctx context.Context, kube kubernetes.Interface, ref Ref) (*ArgoRollout, error) {
	w, err := GetWorkload(ctx, kube, ref)
	if err != nil {
		return nil, err
	}
	if w.Rollout == nil || w.Rollout.Spec.WorkloadRef == nil {
		return nil, nil
	}
	return w.Rollout, nil
}

// patchTemplateHolder patches the object r's workloadRef names: the
// template Argo's controller rolls r to when it changes (r's own must
// stay empty: the controller refuses a Rollout with both).
func patchTemplateHolder(ctx context.Context, kube kubernetes.Interface, r *ArgoRollout, pt types.PatchType, patch []byte) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	ref, opts := r.Spec.WorkloadRef, metav1.PatchOptions{}
	var err error
	switch ref.Kind {
	case "Deployment":
		_, err = kube.AppsV1().Deployments(r.Namespace).Patch(ctx, ref.Name, pt, patch, opts)
	case "ReplicaSet":
		_, err = kube.AppsV1().ReplicaSets(r.Namespace).Patch(ctx, ref.Name, pt, patch, opts)
	case "PodTemplate":
		_, err = kube.CoreV1().PodTemplates(r.Namespace).Patch(ctx, ref.Name, pt, patch, opts)
	default: // GetWorkload refused it already
		return fmt.Errorf("rollout %s: its workloadRef %s cannot be patched", r.Name, ref)
	}
	if err != nil {
		return fmt.Errorf("patch %s %s/%s (rollout %s's template): %w", strings.ToLower(ref.Kind), r.Namespace, ref.Name, r.Name, CallError(ctx, err))
	}
	return nil
}

// strategicPatch patches the workload; a Rollout (a custom resource, which
// takes no strategic merge) gets the same JSON as a merge patch.
func strategicPatch(ctx context.Context, kube kubernetes.Interface, ref Ref, patch []byte) error {
	if ref.Kind == KindRollout {
		return patchRollout(ctx, kube, ref, types.MergePatchType, patch)
	}
	ctx, cancel := Bound(ctx)
	defer cancel()
	var err error
	apps, opts := kube.AppsV1(), metav1.PatchOptions{}
	switch ref.Kind {
	case KindStatefulSet:
		_, err = apps.StatefulSets(ref.Namespace).Patch(ctx, ref.Name, types.StrategicMergePatchType, patch, opts)
	case KindDaemonSet:
		_, err = apps.DaemonSets(ref.Namespace).Patch(ctx, ref.Name, types.StrategicMergePatchType, patch, opts)
	default:
		_, err = apps.Deployments(ref.Namespace).Patch(ctx, ref.Name, types.StrategicMergePatchType, patch, opts)
	}
	if err != nil {
		return fmt.Errorf("patch %s: %w", ref, CallError(ctx, err))
	}
	return nil
}

// patchRollout patches a Rollout through the dynamic client.
func patchRollout(ctx context.Context, kube kubernetes.Interface, ref Ref, pt types.PatchType, patch []byte) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	ri, err := rollouts(kube, ref.Namespace)
	if err == nil {
		_, err = ri.Patch(ctx, ref.Name, pt, patch, metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("patch %s: %w", ref, CallError(ctx, err))
	}
	return nil
}

// Exec runs the user's own deploy step (helm upgrade, kubectl apply, a
// script) as the trigger, its output passed through. A non-zero exit is a
// failed trigger.
type Exec struct {
	Argv           []string
	Stdout, Stderr io.Writer
}

func (e Exec) Describe() string { return "exec " + strings.Join(e.Argv, " ") }
func (Exec) Verbs() []string    { return nil }

func (e Exec) Fire(ctx context.Context, _ kubernetes.Interface, _ Ref) error {
	if len(e.Argv) == 0 {
		return errors.New("exec trigger: no command")
	}
	cmd := exec.CommandContext(ctx, e.Argv[0], e.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = e.Stdout, e.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("deploy command %q: %w", strings.Join(e.Argv, " "), err)
	}
	return nil
}

// Watch triggers nothing: the rollout is started by someone else.
type Watch struct{}

func (Watch) Describe() string                                      { return "watch (a rollout started elsewhere)" }
func (Watch) Verbs() []string                                       { return nil }
func (Watch) Fire(context.Context, kubernetes.Interface, Ref) error { return nil }
