package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollprobe/rollprobe/internal/field"
)

// Trigger starts a rollout (or, for Watch, waits for one started elsewhere).
type Trigger interface {
	// Describe says what the trigger does, for logs and the report.
	Describe() string
	// Fire starts the rollout of the Deployment.
	Fire(ctx context.Context, kube kubernetes.Interface, namespace, name string) error
	// Verbs are the Deployment verbs the trigger needs, for preflight.
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

func (r Restart) Fire(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{RestartedAtAnnotation: now().Format(time.RFC3339)}},
	}}})
	return strategicPatch(ctx, kube, ns, name, patch)
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

func (s SetImage) Fire(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("set image: %w", err)
	}
	found := false
	for _, c := range d.Spec.Template.Spec.Containers {
		found = found || c.Name == s.Container
	}
	if !found {
		var names []string
		for _, c := range d.Spec.Template.Spec.Containers {
			names = append(names, c.Name)
		}
		return fmt.Errorf("set image: deployment %s has no container %q (it has %s)", name, s.Container, strings.Join(names, ", "))
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []map[string]string{{"name": s.Container, "image": s.Image}},
	}}}})
	return strategicPatch(ctx, kube, ns, name, patch)
}

// Patch applies a strategic merge patch to the Deployment.
type Patch struct{ JSON []byte }

// ParsePatch checks that data is a JSON object.
func ParsePatch(data []byte) (Patch, error) {
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return Patch{}, &field.Error{Field: "Patch", Problem: "not a JSON object: " + err.Error()}
	}
	return Patch{JSON: data}, nil
}

func (Patch) Describe() string { return "strategic merge patch" }
func (Patch) Verbs() []string  { return []string{"patch"} }
func (p Patch) Fire(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	return strategicPatch(ctx, kube, ns, name, p.JSON)
}

func strategicPatch(ctx context.Context, kube kubernetes.Interface, ns, name string, patch []byte) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	if _, err := kube.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch deployment %s/%s: %w", ns, name, CallError(ctx, err))
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

func (e Exec) Fire(ctx context.Context, _ kubernetes.Interface, _, _ string) error {
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

func (Watch) Describe() string                                                 { return "watch (a rollout started elsewhere)" }
func (Watch) Verbs() []string                                                  { return nil }
func (Watch) Fire(context.Context, kubernetes.Interface, string, string) error { return nil }
