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
// image, patch and scale triggers, for every kind, --promote's and what the doctor reads when granted (Role rollprobe), and what probing from the
// cluster adds (Role rollprobe-probers): no verb missing, none to spare.
func TestRBACManifestGrantsExactlyTheRequiredPermissions(t *testing.T) {
	granted := grants(t, "../deploy/rbac.yaml")
	if len(granted) != 2 {
		t.Fatalf("deploy/rbac.yaml has roles %v, want rollprobe and rollprobe-probers", granted)
	}
	// The role serves every kind: the union of what each needs.
	var every []Permission
	for _, k := range WorkloadKinds {
		every = append(every, RequiredPermissions(k, Restart{})...)
		if k != KindDaemonSet { // it has no replicas
			every = append(every, RequiredPermissions(k, Scale{Replicas: 1})...)
		}
	}
	every = append(every, PromotePermissions()...)        // run --rollout --promote
	every = append(every, DoctorOptionalPermissions()...) // read when granted
	for role, perms := range map[string][]Permission{"rollprobe": every, "rollprobe-probers": ProberPermissions()} {
		same(t, "deploy/rbac.yaml's role "+role, granted[role], perms)
	}
}

// A Rollout that takes its template from a Deployment (workloadRef) needs
// read and the trigger's verbs on that Deployment, which the role already
// grants; a ReplicaSet's or PodTemplate's are not granted (their own grant,
// as rbac.yaml's comment says), and preflight names them.
func TestWorkloadRefPermissions(t *testing.T) {
	granted := grants(t, "../deploy/rbac.yaml")["rollprobe"]
	for _, tc := range []struct {
		kind, want string
		granted    bool
	}{
		{"Deployment", "get deployments.apps, patch deployments.apps", true},
		{"ReplicaSet", "get replicasets.apps, patch replicasets.apps", false},
		{"PodTemplate", "get podtemplates, patch podtemplates", false},
	} {
		w := Workload{Rollout: &ArgoRollout{Spec: ArgoRolloutSpec{WorkloadRef: &ArgoObjectRef{Kind: tc.kind, Name: "web"}}}}
		var names []string
		all := true
		for _, p := range TemplateHolderPermissions(w, Restart{}) {
			names = append(names, p.String())
			all = all && slices.Contains(granted, p.String())
		}
		if strings.Join(names, ", ") != tc.want || all != tc.granted {
			t.Errorf("%s: %s (granted by deploy/rbac.yaml: %v), want %s (%v)", tc.kind, strings.Join(names, ", "), all, tc.want, tc.granted)
		}
	}
	if p := TemplateHolderPermissions(Workload{Rollout: &ArgoRollout{}}, Restart{}); p != nil {
		t.Errorf("a Rollout with its own template: %v, want none on top", p)
	}
}

// deploy/rbac-drain.yaml's ClusterRole grants exactly what run --drain
// checks for cluster-wide.
func TestDrainRBACManifestGrantsExactlyItsPermissions(t *testing.T) {
	granted := grants(t, "../deploy/rbac-drain.yaml")
	if len(granted) != 1 {
		t.Fatalf("deploy/rbac-drain.yaml has roles %v, want rollprobe-drain", granted)
	}
	same(t, "deploy/rbac-drain.yaml's cluster role", granted["rollprobe-drain"], (Drain{}).ClusterPermissions())
}

// grants reads the permissions each Role and ClusterRole of a manifest
// grants, by role name.
func grants(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	granted := map[string][]string{}
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return granted
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var name string
		var rules []rbacv1.PolicyRule
		switch r := obj.(type) {
		case *rbacv1.Role:
			name, rules = r.Name, r.Rules
		case *rbacv1.ClusterRole:
			name, rules = r.Name, r.Rules
		default:
			continue
		}
		for _, rule := range rules {
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					resource, sub, _ := strings.Cut(r, "/")
					for _, v := range rule.Verbs {
						granted[name] = append(granted[name], Permission{Verb: v, Group: g, Resource: resource, Subresource: sub}.String())
					}
				}
			}
		}
	}
}

// same fails the test unless granted is exactly perms (duplicates aside).
func same(t *testing.T, what string, granted []string, perms []Permission) {
	t.Helper()
	var required []string
	for _, p := range perms {
		if !slices.Contains(required, p.String()) {
			required = append(required, p.String())
		}
	}
	sort.Strings(granted)
	sort.Strings(required)
	if strings.Join(granted, "\n") != strings.Join(required, "\n") {
		t.Errorf("%s grants\n  %s\nthe code requires\n  %s", what, strings.Join(granted, "\n  "), strings.Join(required, "\n  "))
	}
}
