package examples

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/rollprobe/rollprobe/internal/testbin"
)

var binary string

func TestMain(m *testing.M) { testbin.Main(m, "rollprobe", "..", &binary) }

// documents splits a YAML file into its documents.
func documents(t *testing.T, name string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
	return docs
}

// decodeStrict decodes a Kubernetes object of a built-in kind, refusing
// fields the API does not have.
func decodeStrict(t *testing.T, doc []byte) runtime.Object {
	t.Helper()
	s := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
	obj, _, err := s.Decode(doc, nil, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return obj
}

// strictInto decodes YAML into a typed value, refusing unknown fields.
func strictInto(t *testing.T, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
}

// accepts checks that rollprobe takes args as they are: with --validate it
// runs every check of the command line that needs nothing outside the
// process (flags, values, target, trigger, output paths) and exits 0, or
// 2 naming the problem. (Appending --help, as this did, checked only that
// the flags exist.)
func accepts(t *testing.T, args []string) {
	t.Helper()
	testbin.Required(t)
	if len(args) > 0 && (args[0] == "rollprobe" || args[0] == "/rollprobe") {
		args = args[1:]
	}
	cmd := exec.Command(binary, append(append([]string(nil), args...), "--validate")...)
	cmd.Dir = t.TempDir() // relative output paths are checked (and nothing left) there
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "the command line is valid") {
		t.Fatalf("rollprobe %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// checkJobSpec: the rollprobe container runs the release image with a
// command line rollprobe accepts, once (backoffLimit 0: a failed verdict
// must not be retried into a pass), never restarted in place.
func checkJobSpec(t *testing.T, spec batchv1.JobSpec, vars map[string]string) {
	t.Helper()
	if spec.BackoffLimit == nil || *spec.BackoffLimit != 0 || spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("backoffLimit %v, restartPolicy %q: want 0 and Never", spec.BackoffLimit, spec.Template.Spec.RestartPolicy)
	}
	c := spec.Template.Spec.Containers[0]
	if !strings.HasPrefix(c.Image, "rollprobe/rollprobe:v") {
		t.Errorf("image %q: want the release image", c.Image)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("the container should run with a read-only root file system")
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		for k, v := range vars {
			a = strings.ReplaceAll(a, k, v)
		}
		args[i] = a
	}
	accepts(t, args)
}

func TestJobs(t *testing.T) {
	for _, name := range []string{"job-probe.yaml", "job-run.yaml"} {
		t.Run(name, func(t *testing.T) {
			docs := documents(t, name)
			if len(docs) != 1 {
				t.Fatalf("%d documents", len(docs))
			}
			job, ok := decodeStrict(t, docs[0]).(*batchv1.Job)
			if !ok {
				t.Fatalf("not a Job")
			}
			checkJobSpec(t, job.Spec, nil)
			if name == "job-run.yaml" && job.Spec.Template.Spec.ServiceAccountName != "rollprobe" {
				t.Errorf("job-run runs as %q: want deploy/rbac.yaml's rollprobe ServiceAccount", job.Spec.Template.Spec.ServiceAccountName)
			}
		})
	}
}

func TestArgoRolloutsAnalysisTemplate(t *testing.T) {
	docs := documents(t, "argo-rollouts-analysis.yaml")
	var tmpl struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Args []struct {
				Name  string  `json:"name"`
				Value *string `json:"value,omitempty"`
			} `json:"args"`
			Metrics []struct {
				Name         string `json:"name"`
				Count        int    `json:"count"`
				FailureLimit int    `json:"failureLimit"`
				Provider     struct {
					Job struct {
						Spec batchv1.JobSpec `json:"spec"`
					} `json:"job"`
				} `json:"provider"`
			} `json:"metrics"`
		} `json:"spec"`
	}
	strictInto(t, docs[0], &tmpl)
	if tmpl.APIVersion != "argoproj.io/v1alpha1" || tmpl.Kind != "AnalysisTemplate" || len(tmpl.Spec.Metrics) != 1 {
		t.Fatalf("%+v", tmpl)
	}
	m := tmpl.Spec.Metrics[0]
	if m.FailureLimit != 0 || m.Count != 1 {
		t.Errorf("failureLimit %d count %d: one measurement, and its failure fails the analysis", m.FailureLimit, m.Count)
	}
	vars := map[string]string{}
	for _, a := range tmpl.Spec.Args {
		v := "http://web-canary/"
		if a.Value != nil {
			v = *a.Value
		}
		vars["{{args."+a.Name+"}}"] = v
	}
	checkJobSpec(t, m.Provider.Job.Spec, vars)
}

func TestFlaggerCanary(t *testing.T) {
	testbin.Required(t)
	docs := documents(t, "flagger-canary.yaml")
	if len(docs) != 2 {
		t.Fatalf("%d documents: want the Canary and the load tester patch", len(docs))
	}
	var canary struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Analysis struct {
				Webhooks []struct {
					Name     string            `json:"name"`
					Type     string            `json:"type"`
					URL      string            `json:"url"`
					Timeout  string            `json:"timeout"`
					Metadata map[string]string `json:"metadata"`
				} `json:"webhooks"`
			} `json:"analysis"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(docs[0], &canary); err != nil {
		t.Fatal(err)
	}
	if canary.APIVersion != "flagger.app/v1beta1" || canary.Kind != "Canary" || len(canary.Spec.Analysis.Webhooks) != 1 {
		t.Fatalf("%+v", canary)
	}
	hook := canary.Spec.Analysis.Webhooks[0]
	// A "rollout" webhook is a check of every step; the load tester runs
	// a "cmd" and answers with an error when it exits non-zero.
	if hook.Type != "rollout" || hook.Metadata["type"] != "cmd" {
		t.Errorf("webhook %+v", hook)
	}
	accepts(t, strings.Fields(hook.Metadata["cmd"]))
	// The patch is a partial Deployment: its fields must be Deployment
	// fields, and its init container must run `rollprobe install` into the
	// volume the load tester's PATH starts with.
	var patch appsv1.Deployment
	strictInto(t, docs[1], &patch)
	init := patch.Spec.Template.Spec.InitContainers
	if len(init) != 1 || len(init[0].Args) != 2 || init[0].Args[0] != "install" {
		t.Fatalf("init containers %+v", init)
	}
	dir := init[0].Args[1]
	env := patch.Spec.Template.Spec.Containers[0].Env
	if len(env) != 1 || !strings.HasPrefix(env[0].Value, dir+":") {
		t.Errorf("the load tester's PATH %+v does not start with %s", env, dir)
	}
	out, err := exec.Command(binary, "install", t.TempDir()).CombinedOutput()
	if err != nil {
		t.Errorf("rollprobe install: %v %s", err, out)
	}
}

func TestGitHubWorkflow(t *testing.T) {
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				ID   string            `json:"id"`
				Uses string            `json:"uses"`
				With map[string]string `json:"with"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(documents(t, "github-workflow-gitops.yaml")[0], &wf); err != nil {
		t.Fatal(err)
	}
	var action struct {
		Inputs map[string]struct {
			Required bool `json:"required"`
		} `json:"inputs"`
	}
	if err := yaml.Unmarshal(documents(t, "../action.yml")[0], &action); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, job := range wf.Jobs {
		for _, s := range job.Steps {
			if !strings.HasPrefix(s.Uses, "rollprobe/rollprobe@") {
				continue
			}
			found = true
			for k := range s.With {
				if _, ok := action.Inputs[k]; !ok {
					t.Errorf("input %q is not in action.yml", k)
				}
			}
			for k, in := range action.Inputs {
				if _, ok := s.With[k]; in.Required && !ok {
					t.Errorf("required input %q missing", k)
				}
			}
			if s.With["trigger"] != "watch" {
				t.Errorf("trigger %q: a GitOps controller starts the rollout; rollprobe watches", s.With["trigger"])
			}
			// The command line action.yml composes from these inputs.
			accepts(t, append([]string{"run", "--deployment", s.With["deployment"], "--target", s.With["target"], "--watch",
				"--probers", s.With["probers"], "--rate", s.With["rate"]}, strings.Fields(s.With["args"])...))
		}
	}
	if !found {
		t.Fatal("no rollprobe step")
	}
}

func TestGitLabJob(t *testing.T) {
	var ci map[string]struct {
		Variables    map[string]string `json:"variables"`
		BeforeScript []string          `json:"before_script"`
		Script       []string          `json:"script"`
		Artifacts    struct {
			When    string            `json:"when"`
			Reports map[string]string `json:"reports"`
		} `json:"artifacts"`
	}
	if err := yaml.Unmarshal(documents(t, "gitlab-ci.yml")[0], &ci); err != nil {
		t.Fatal(err)
	}
	job, ok := ci["rollprobe"]
	if !ok {
		t.Fatal("no rollprobe job")
	}
	if job.Artifacts.When != "always" || job.Artifacts.Reports["junit"] != "rollprobe-junit.xml" || job.Artifacts.Reports["metrics"] != "metrics.txt" {
		t.Errorf("artifacts %+v: JUnit and metrics reports, uploaded always", job.Artifacts)
	}
	script := strings.Join(job.Script, "\n")
	if !strings.Contains(script, "--junit rollprobe-junit.xml") || !strings.Contains(script, "-o openmetrics > metrics.txt") {
		t.Errorf("script does not write what artifacts reads:\n%s", script)
	}
	// The run line, with the job's variables, is one rollprobe accepts.
	line := job.Script[0]
	for k, v := range job.Variables {
		line = strings.ReplaceAll(line, `"$`+k+`"`, v)
	}
	line, _, _ = strings.Cut(line, "&&")
	accepts(t, strings.Fields(line))
	// bash can parse the script as GitLab joins it.
	all := strings.Join(append(append([]string(nil), job.BeforeScript...), job.Script...), "\n")
	if out, err := exec.Command("bash", "-n", "-c", all).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v %s", err, out)
	}
}

// Every file here is checked above.
func TestEveryRecipeIsTested(t *testing.T) {
	tested := map[string]bool{"job-probe.yaml": true, "job-run.yaml": true, "argo-rollouts-analysis.yaml": true,
		"flagger-canary.yaml": true, "github-workflow-gitops.yaml": true, "gitlab-ci.yml": true}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); (ext == ".yaml" || ext == ".yml") && !tested[e.Name()] {
			t.Errorf("%s has no test", e.Name())
		}
	}
}

// stripComments drops comment lines (a document of only comments is empty).
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
