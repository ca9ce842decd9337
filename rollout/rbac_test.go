package rollout

import (
	"bufio"
	"errors"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// deploy/rbac.yaml grants exactly what run checks for with the restart,
// image and patch triggers, for every kind (Role rollprobe), and what probing from the
// cluster adds (Role rollprobe-probers): no verb missing, none to spare.
func TestRBACManifestGrantsExactlyTheRequiredPermissions(t *testing.T) {
	f, err := os.Open("../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	granted := map[string][]string{}
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
		for _, rule := range role.Rules {
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					resource, sub, _ := strings.Cut(r, "/")
					for _, v := range rule.Verbs {
						granted[role.Name] = append(granted[role.Name], Permission{Verb: v, Group: g, Resource: resource, Subresource: sub}.String())
					}
				}
			}
		}
	}
	if len(granted) != 2 {
		t.Fatalf("deploy/rbac.yaml has roles %v, want rollprobe and rollprobe-probers", granted)
	}
	// The role serves every kind: the union of what each needs.
	var every []Permission
	for _, k := range WorkloadKinds {
		every = append(every, RequiredPermissions(k, Restart{})...)
	}
	for role, perms := range map[string][]Permission{"rollprobe": every, "rollprobe-probers": ProberPermissions()} {
		var required []string
		for _, p := range perms {
			if !slices.Contains(required, p.String()) {
				required = append(required, p.String())
			}
		}
		sort.Strings(granted[role])
		sort.Strings(required)
		if strings.Join(granted[role], "\n") != strings.Join(required, "\n") {
			t.Errorf("deploy/rbac.yaml's role %s grants\n  %s\nthe code requires\n  %s", role, strings.Join(granted[role], "\n  "), strings.Join(required, "\n  "))
		}
	}
}

// deploy/rbac-drain.yaml's ClusterRole grants exactly what run --drain
// checks for cluster-wide.
func TestDrainRBACManifestGrantsExactlyItsPermissions(t *testing.T) {
	data, err := os.ReadFile("../deploy/rbac-drain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(string(data))))
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
		role, ok := obj.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		roles++
		for _, rule := range role.Rules {
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					resource, sub, _ := strings.Cut(r, "/")
					for _, v := range rule.Verbs {
						granted = append(granted, Permission{Verb: v, Group: g, Resource: resource, Subresource: sub}.String())
					}
				}
			}
		}
	}
	var required []string
	for _, p := range (Drain{}).ClusterPermissions() {
		required = append(required, p.String())
	}
	sort.Strings(granted)
	sort.Strings(required)
	if roles != 1 || strings.Join(granted, "\n") != strings.Join(required, "\n") {
		t.Errorf("deploy/rbac-drain.yaml (%d cluster roles) grants\n  %s\nthe code requires\n  %s", roles, strings.Join(granted, "\n  "), strings.Join(required, "\n  "))
	}
}
