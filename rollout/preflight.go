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
}

func (p Permission) String() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	return p.Verb + " " + r
}

// RequiredPermissions lists what rollprobe run needs in the namespace: read
// and watch everything it observes, plus the trigger's own verbs on
// Deployments. deploy/rbac.yaml grants exactly this set.
func RequiredPermissions(trigger Trigger) []Permission {
	perms := []Permission{
		{"get", "apps", "deployments"}, {"list", "apps", "deployments"}, {"watch", "apps", "deployments"},
		{"list", "apps", "replicasets"}, {"watch", "apps", "replicasets"},
		{"list", "", "pods"}, {"watch", "", "pods"},
		{"get", "", "services"}, {"list", "", "services"},
		{"list", "discovery.k8s.io", "endpointslices"}, {"watch", "discovery.k8s.io", "endpointslices"},
		{"list", "", "events"}, {"watch", "", "events"},
		{"list", "policy", "poddisruptionbudgets"}, // the doctor's static checks
	}
	if trigger != nil {
		for _, v := range trigger.Verbs() {
			perms = append(perms, Permission{v, "apps", "deployments"})
		}
	}
	return perms
}

// CheckPermissions asks the apiserver (SelfSubjectAccessReview) whether the
// caller holds every permission, and names each one it lacks.
func CheckPermissions(ctx context.Context, kube kubernetes.Interface, namespace string, perms []Permission) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	var missing []string
	for _, p := range perms {
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: p.Verb, Group: p.Group, Resource: p.Resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("permission check (%s): %w", p, err)
		}
		if !review.Status.Allowed {
			missing = append(missing, p.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing permissions in namespace %s: %s (deploy/rbac.yaml grants what rollprobe run needs)",
			namespace, strings.Join(missing, ", "))
	}
	return nil
}

// ErrPaused: a paused Deployment does not roll.
var ErrPaused = errors.New("the deployment is paused: resume it (kubectl rollout resume) or rollprobe would wait forever")

// ErrMidRollout: the Deployment is already rolling, so a trigger would
// start a second rollout on top of one nobody probed from its start. The
// caller may offer to follow the running rollout instead.
var ErrMidRollout = errors.New("the deployment is already mid-rollout: wait for it to finish")
