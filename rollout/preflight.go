package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Permission is one verb on one resource.
type Permission struct {
	Verb, Group, Resource string
	Subresource           string // "log", "attach"; "" for the resource itself
}

func (p Permission) String() string {
	r := p.Resource
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	if p.Group != "" {
		r += "." + p.Group
	}
	return p.Verb + " " + r
}

// RequiredPermissions lists what rollprobe run needs in the namespace for
// a workload of kind k: read and watch everything it observes, plus the
// trigger's own verbs on the workload. deploy/rbac.yaml grants exactly
// the union over the kinds.
func RequiredPermissions(k Kind, trigger Trigger) []Permission {
	revisions := "replicasets"
	if k != KindDeployment && k != KindRollout {
		revisions = "controllerrevisions"
	}
	g := k.Group()
	perms := []Permission{
		{Verb: "get", Group: g, Resource: k.Resource()}, {Verb: "list", Group: g, Resource: k.Resource()}, {Verb: "watch", Group: g, Resource: k.Resource()},
		{Verb: "list", Group: "apps", Resource: revisions}, {Verb: "watch", Group: "apps", Resource: revisions},
		{Verb: "list", Group: "", Resource: "pods"}, {Verb: "watch", Group: "", Resource: "pods"},
		{Verb: "get", Group: "", Resource: "services"}, {Verb: "list", Group: "", Resource: "services"},
		{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices"}, {Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices"},
		{Verb: "list", Group: "", Resource: "events"}, {Verb: "watch", Group: "", Resource: "events"},
		{Verb: "list", Group: "policy", Resource: "poddisruptionbudgets"}, // the doctor's static checks
	}
	if trigger != nil {
		for _, v := range trigger.Verbs() {
			perms = append(perms, Permission{Verb: v, Group: g, Resource: k.Resource()})
		}
		if s, ok := trigger.(Scale); ok {
			perms = append(perms, s.Permissions(k)...)
		}
	}
	return perms
}

// DoctorOptionalPermissions is what the doctor's checks read when granted
// and preflight never asks for: without it a check is reported unmade
// (info), nothing fails. Traefik's TraefikServices: a route weighed over
// the Service and others (doctor.checkHandWeightedRoutes). deploy/rbac.yaml
// grants it.
func DoctorOptionalPermissions() []Permission {
	return []Permission{{Verb: "list", Group: "traefik.io", Resource: "traefikservices"}, listAutoscalers}
}

// listAutoscalers reads the HorizontalPodAutoscalers (Autoscalers): the
// doctor's preStop finding names them, and a scale refuses to begin under
// one. Without it neither is said or checked (a scale says so, and still
// notices one that undoes it: ScaleProgress.Undone).
var listAutoscalers = Permission{Verb: "list", Group: "autoscaling", Resource: "horizontalpodautoscalers"}

// TemplateHolderPermissions is what a Rollout that takes its pod template
// from another object (spec.workloadRef) needs on top, on that object: read
// (its template, its generation after an exec trigger) and the trigger's
// own verbs (the triggers write its template). None for other workloads.
// deploy/rbac.yaml grants them for a Deployment; a ReplicaSet or
// PodTemplate needs a grant of its own.
func TemplateHolderPermissions(w Workload, trigger Trigger) []Permission {
	if w.Rollout == nil || w.Rollout.Spec.WorkloadRef == nil {
		return nil
	}
	ref := w.Rollout.Spec.WorkloadRef
	group, resource := "apps", strings.ToLower(ref.Kind)+"s"
	if ref.Kind == "PodTemplate" {
		group = ""
	}
	perms := []Permission{{Verb: "get", Group: group, Resource: resource}}
	if trigger != nil {
		for _, v := range trigger.Verbs() {
			perms = append(perms, Permission{Verb: v, Group: group, Resource: resource})
		}
	}
	return perms
}

// PromotePermissions is what promoting an Argo Rollout through its pauses
// (run --promote) needs on top: its status patched (the pause conditions
// cleared) and the rollout itself (spec.paused).
func PromotePermissions() []Permission {
	return []Permission{
		{Verb: "patch", Group: RolloutsGVR.Group, Resource: RolloutsGVR.Resource, Subresource: "status"},
		{Verb: "patch", Group: RolloutsGVR.Group, Resource: RolloutsGVR.Resource},
	}
}

// CheckPermissions asks the apiserver (SelfSubjectAccessReview) whether the
// caller holds every permission, and names each one it lacks.
// ProberPermissions is what probing from the cluster (run --probers)
// needs in the probers' namespace, on top of RequiredPermissions: making,
// watching and deleting the prober pods, attaching to them (get for
// WebSocket, create for SPDY) and reading their logs.
func ProberPermissions() []Permission {
	return []Permission{
		{Verb: "create", Resource: "pods"}, {Verb: "delete", Resource: "pods"}, {Verb: "get", Resource: "pods"},
		{Verb: "list", Resource: "pods"}, {Verb: "watch", Resource: "pods"},
		{Verb: "get", Resource: "pods", Subresource: "log"},
		{Verb: "create", Resource: "pods", Subresource: "attach"}, {Verb: "get", Resource: "pods", Subresource: "attach"},
	}
}

func CheckPermissions(ctx context.Context, kube kubernetes.Interface, namespace string, perms []Permission) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	var missing []string
	for _, p := range perms {
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("permission check (%s): %w", p, CallError(ctx, err))
		}
		if !review.Status.Allowed {
			missing = append(missing, p.String())
		}
	}
	if len(missing) > 0 {
		where := "in namespace " + namespace
		if namespace == "" {
			where = "cluster-wide"
		}
		return fmt.Errorf("missing permissions %s: %s (deploy/rbac.yaml grants what rollprobe run needs)",
			where, strings.Join(missing, ", "))
	}
	return nil
}

// ErrPaused: a paused Deployment does not roll.
var ErrPaused = errors.New("the deployment is paused: resume it (kubectl rollout resume) or rollprobe would wait forever")

// ErrMidRollout: the workload is rolling (its status not done, with pods
// of another revision than its current one still there, or its current
// one not shown yet), so a trigger would start a rollout on top of one
// nobody probed from its start. The caller may offer to follow the
// running rollout instead. Wrapped after the workload's kind and name;
// also when its pods could not be read to tell this from ErrUnavailable.
var ErrMidRollout = errors.New("it is already mid-rollout: wait for it to finish")

// ErrUnavailable: the workload's status is not done, yet every pod is of
// its current revision: nothing is rolling, some pod is not available (a
// crash, an eviction, a node gone). A trigger would start a rollout over
// pods already failing, whose failures the run would blame on it; and
// there is no rollout to follow. Wrapped after the workload's kind and
// name.
var ErrUnavailable = errors.New("not every pod is available, yet every pod is of its current revision: nothing is rolling; mend the pods or wait until they are available")
