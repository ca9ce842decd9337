package rollout

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestCheckPermissionsNamesWhatIsMissing(t *testing.T) {
	kube := fake.NewClientset()
	denied := map[string]bool{"patch deployments.apps": true, "watch endpointslices.discovery.k8s.io": true}
	var asked []string
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		ra := review.Spec.ResourceAttributes
		p := Permission{Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource, Subresource: ra.Subresource}.String()
		asked = append(asked, p)
		if ra.Namespace != "prod" {
			t.Errorf("asked about namespace %q", ra.Namespace)
		}
		review.Status.Allowed = !denied[p]
		return true, review, nil
	})
	err := CheckPermissions(context.Background(), kube, "prod", RequiredPermissions(KindDeployment, Restart{}))
	if err == nil || !strings.Contains(err.Error(), "patch deployments.apps") || !strings.Contains(err.Error(), "watch endpointslices.discovery.k8s.io") {
		t.Fatalf("error %v must name both missing permissions", err)
	}
	if len(asked) != len(RequiredPermissions(KindDeployment, Restart{})) {
		t.Fatalf("asked %d reviews, want one per permission", len(asked))
	}
	denied = map[string]bool{}
	if err := CheckPermissions(context.Background(), kube, "prod", RequiredPermissions(KindDeployment, Watch{})); err != nil {
		t.Fatalf("all allowed: %v", err)
	}
}
