package rollout

import (
	"bufio"
	"errors"
	"io"
	"os"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// deploy/rbac.yaml grants exactly what run checks for with the restart,
// image and patch triggers: no verb missing, none to spare.
func TestRBACManifestGrantsExactlyTheRequiredPermissions(t *testing.T) {
	f, err := os.Open("../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var granted []string
	roles := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		role, ok := obj.(*rbacv1.Role)
		if !ok {
			continue
		}
		roles++
		for _, rule := range role.Rules {
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					for _, v := range rule.Verbs {
						granted = append(granted, Permission{v, g, r}.String())
					}
				}
			}
		}
	}
	var required []string
	for _, p := range RequiredPermissions(Restart{}) {
		required = append(required, p.String())
	}
	sort.Strings(granted)
	sort.Strings(required)
	if roles != 1 || strings.Join(granted, "\n") != strings.Join(required, "\n") {
		t.Fatalf("deploy/rbac.yaml (%d roles) grants\n  %s\nrun requires\n  %s", roles, strings.Join(granted, "\n  "), strings.Join(required, "\n  "))
	}
}
