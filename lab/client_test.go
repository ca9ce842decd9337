package lab

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/retry"
)

// Every sample the lab ships is applied, every document of it, by lab
// apply: a kind it does not handle would otherwise be found only when the
// lab's end-to-end test applies the sample, half an hour into CI. Applied
// twice, as a re-run of a test does: the second time each object is
// updated in place.
func TestApplyEverySample(t *testing.T) {
	files, err := filepath.Glob("manifests/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in manifests/: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			c := fakeClient()
			for round := 1; round <= 2; round++ {
				applied, err := c.Apply(context.Background(), bytes.NewReader(raw), "default")
				if err != nil {
					t.Fatalf("apply %d: %v", round, err)
				}
				if want := documents(raw); len(applied) != want {
					t.Fatalf("apply %d: %d objects applied (%v), the file has %d documents", round, len(applied), applied, want)
				}
			}
			// What was applied is there, in the namespace the document
			// names or "default".
			objs, err := decodeManifests(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range objs {
				m := obj.(metav1.Object)
				ns := m.GetNamespace()
				if ns == "" {
					ns = "default"
				}
				if !stored(c, obj, ns, m.GetName()) {
					t.Errorf("%s %s/%s: not stored after apply", obj.GetObjectKind().GroupVersionKind().Kind, ns, m.GetName())
				}
			}
		})
	}
}

// A kind lab apply does not handle is refused with the way out, and
// nothing after it is applied.
func TestApplyRefusesOtherKinds(t *testing.T) {
	c := fakeClient()
	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports: [{port: 80}]\n"
	applied, err := c.Apply(context.Background(), strings.NewReader(manifest), "default")
	if err == nil || !strings.Contains(err.Error(), "kubectl apply -f") {
		t.Fatalf("err = %v, want a refusal naming kubectl apply", err)
	}
	if len(applied) != 0 {
		t.Errorf("applied %v before the refusal, want nothing", applied)
	}
	if _, err := c.Kube.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{}); err == nil {
		t.Error("the Service after the refused ConfigMap was applied")
	}
}

// An update that conflicts (a controller wrote the object between lab
// apply's read and its update, as the disruption controller writes a
// budget's status) is read again and tried again; one that conflicts every
// time fails, with the server's conflict.
func TestApplyRetriesAConflictingUpdate(t *testing.T) {
	manifest := "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\nspec:\n  maxUnavailable: 1\n  selector: {matchLabels: {app: web}}\n"
	for _, tc := range []struct {
		conflicts int // updates refused before one is let through
		wantErr   bool
	}{{0, false}, {2, false}, {100, true}} {
		c := fakeClient()
		if _, err := c.Apply(context.Background(), strings.NewReader(manifest), "default"); err != nil {
			t.Fatal(err)
		}
		kube := c.Kube.(*fake.Clientset)
		updates := 0
		kube.PrependReactor("update", "poddisruptionbudgets", func(action k8stesting.Action) (bool, runtime.Object, error) {
			updates++
			if updates <= tc.conflicts {
				return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}, "web", errors.New("the object has been modified"))
			}
			return false, nil, nil
		})
		_, err := c.Apply(context.Background(), strings.NewReader(manifest), "default")
		if tc.wantErr != (err != nil) || (err != nil && !apierrors.IsConflict(err)) {
			t.Fatalf("%d conflicts: err = %v, want an error %v (a conflict)", tc.conflicts, err, tc.wantErr)
		}
		if want := min(tc.conflicts+1, retry.DefaultRetry.Steps); updates != want {
			t.Errorf("%d conflicts: %d updates sent, want %d", tc.conflicts, updates, want)
		}
	}
}

func fakeClient() *Client {
	listKinds := map[schema.GroupVersionResource]string{}
	for gvk, resource := range customKinds {
		listKinds[gvk.GroupVersion().WithResource(resource)] = gvk.Kind + "List"
	}
	return &Client{
		Kube:    fake.NewClientset(),
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds),
	}
}

// stored reports whether the fake clientsets hold obj's kind named name
// in ns, read from their object trackers: client-go's own kinds under the
// resource their kind names, customKinds under theirs.
func stored(c *Client, obj runtime.Object, ns, name string) bool {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if resource, ok := customKinds[gvk]; ok {
		_, err := c.Dynamic.(*dynamicfake.FakeDynamicClient).Tracker().Get(gvk.GroupVersion().WithResource(resource), ns, name)
		return err == nil
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	_, err := c.Kube.(*fake.Clientset).Tracker().Get(gvr, ns, name)
	return err == nil
}

// documents counts the non-empty YAML documents in a stream, by its
// "---" separators, independently of the decoder under test.
func documents(raw []byte) int {
	n := 0
	for _, doc := range strings.Split("\n"+string(raw), "\n---") {
		for _, line := range strings.Split(doc, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				n++
				break
			}
		}
	}
	return n
}
