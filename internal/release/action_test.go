package release

import (
	"encoding/xml"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/report"
)

// action is the part of action.yml a composite action's runner reads.
type action struct {
	Inputs map[string]struct {
		Default  string `json:"default"`
		Required bool   `json:"required"`
	} `json:"inputs"`
	Outputs map[string]struct {
		Value string `json:"value"`
	} `json:"outputs"`
	Runs struct {
		Using string       `json:"using"`
		Steps []actionStep `json:"steps"`
	} `json:"runs"`
}

type actionStep struct {
	Name  string            `json:"name"`
	ID    string            `json:"id"`
	If    string            `json:"if"`
	Shell string            `json:"shell"`
	Run   string            `json:"run"`
	Uses  string            `json:"uses"`
	Env   map[string]string `json:"env"`
	With  map[string]string `json:"with"`
}

// runner simulates what GitHub's runner does with a composite action: the
// expressions of the forms action.yml uses, a step's `if` (success() by
// default, always(), comparisons joined by &&), `shell: bash` as
// `bash --noprofile --norc -eo pipefail FILE`, a fresh $GITHUB_OUTPUT per
// step read back as that step's outputs (name=value and the heredoc form),
// $GITHUB_PATH prepended to later steps' PATH, one $GITHUB_STEP_SUMMARY.
// A `uses:` step is not run; its resolved `with` is recorded. An
// expression it does not know fails the test: action.yml must stay within
// what is simulated here.
type runner struct {
	t       *testing.T
	root    string // the action's directory (github.action_path)
	inputs  map[string]string
	env     []string // the job's environment
	temp    string
	summary string
	path    []string
	outputs map[string]map[string]string // step id -> outputs
	failed  bool
	ran     []string
	with    map[string]map[string]string // uses step name -> with
	logs    map[string]string            // run step name -> its output
}

// result is what a workflow sees of the action.
type result struct {
	failed  bool
	outputs map[string]string
	ran     []string // step names, in order
	with    map[string]map[string]string
	summary string
	logs    map[string]string // each run step's output, by step name
}

func runAction(t *testing.T, inputs map[string]string, jobEnv ...string) result {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "action.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var a action
	if err := yaml.Unmarshal(data, &a); err != nil {
		t.Fatalf("action.yml: %v", err)
	}
	if a.Runs.Using != "composite" {
		t.Fatalf("runs.using %q: a composite action needs no node toolchain", a.Runs.Using)
	}
	dir := t.TempDir()
	r := &runner{t: t, root: root, inputs: map[string]string{}, temp: filepath.Join(dir, "runner-temp"),
		summary: filepath.Join(dir, "summary.md"), outputs: map[string]map[string]string{}, with: map[string]map[string]string{}, logs: map[string]string{}}
	for name, in := range a.Inputs {
		v, given := inputs[name]
		if !given {
			if in.Required {
				t.Fatalf("input %s is required", name)
			}
			v = in.Default
		}
		r.inputs[name] = v
	}
	for name := range inputs {
		if _, ok := a.Inputs[name]; !ok {
			t.Fatalf("action.yml has no input %q", name)
		}
	}
	workspace := filepath.Join(dir, "workspace")
	for _, d := range []string{r.temp, workspace} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	arch := map[string]string{"amd64": "X64", "arm64": "ARM64"}[runtime.GOARCH]
	// No rollprobe on the PATH but the one the action installs.
	r.env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir,
		"GITHUB_ACTIONS=true", "CI=true", "RUNNER_OS=Linux", "RUNNER_ARCH=" + arch, "RUNNER_TEMP=" + r.temp,
		"GITHUB_WORKSPACE=" + workspace, "GITHUB_STEP_SUMMARY=" + r.summary}, jobEnv...)
	for _, s := range a.Runs.Steps {
		r.step(s, workspace)
	}
	res := result{failed: r.failed, outputs: map[string]string{}, ran: r.ran, with: r.with, logs: r.logs}
	for name, o := range a.Outputs {
		res.outputs[name] = r.expand(o.Value)
	}
	summary, _ := os.ReadFile(r.summary)
	res.summary = string(summary)
	return res
}

var exprRE = regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`)

// value resolves one expression operand.
func (r *runner) value(x string) string {
	switch {
	case strings.HasPrefix(x, "inputs."):
		v, ok := r.inputs[strings.TrimPrefix(x, "inputs.")]
		if !ok {
			r.t.Fatalf("expression %q: no such input", x)
		}
		return v
	case x == "github.action_path":
		return r.root
	case strings.HasPrefix(x, "steps."):
		parts := strings.Split(x, ".")
		if len(parts) != 4 || parts[2] != "outputs" {
			r.t.Fatalf("expression %q: not simulated", x)
		}
		return r.outputs[parts[1]][parts[3]] // "" when the step did not run or set it, as on GitHub
	case len(x) >= 2 && x[0] == '\'' && x[len(x)-1] == '\'':
		return x[1 : len(x)-1]
	}
	r.t.Fatalf("expression %q: not simulated", x)
	return ""
}

func (r *runner) expand(s string) string {
	return exprRE.ReplaceAllStringFunc(s, func(m string) string { return r.value(exprRE.FindStringSubmatch(m)[1]) })
}

// condition evaluates a step's `if`: terms joined by &&, each always(),
// success(), failure(), or A == B / A != B.
func (r *runner) condition(expr string) bool {
	expr = strings.TrimSpace(exprRE.ReplaceAllString(expr, "$1"))
	if expr == "" {
		return !r.failed
	}
	status := false
	ok := true
	for _, term := range strings.Split(expr, "&&") {
		term = strings.TrimSpace(term)
		switch {
		case term == "always()":
			status = true
		case term == "success()":
			status, ok = true, ok && !r.failed
		case term == "failure()":
			status, ok = true, ok && r.failed
		case strings.Contains(term, "!="):
			a, b, _ := strings.Cut(term, "!=")
			ok = ok && r.value(strings.TrimSpace(a)) != r.value(strings.TrimSpace(b))
		case strings.Contains(term, "=="):
			a, b, _ := strings.Cut(term, "==")
			ok = ok && r.value(strings.TrimSpace(a)) == r.value(strings.TrimSpace(b))
		default:
			r.t.Fatalf("if: %q: term %q not simulated", expr, term)
		}
	}
	if !status { // no status function: success() is implied
		ok = ok && !r.failed
	}
	return ok
}

func (r *runner) step(s actionStep, workspace string) {
	t := r.t
	if !r.condition(s.If) {
		return
	}
	r.ran = append(r.ran, s.Name)
	if s.Uses != "" {
		with := map[string]string{}
		for k, v := range s.With {
			with[k] = r.expand(v)
		}
		r.with[s.Name] = with
		return
	}
	if s.Shell != "bash" {
		t.Fatalf("step %q: shell %q (only bash is simulated; a composite run step must name its shell)", s.Name, s.Shell)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "step.sh")
	outputs := filepath.Join(dir, "output")
	pathFile := filepath.Join(dir, "path")
	for _, f := range []string{outputs, pathFile} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(script, []byte(r.expand(s.Run)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", script)
	cmd.Dir = workspace
	env := append([]string(nil), r.env...)
	if len(r.path) > 0 {
		for i, e := range env {
			if strings.HasPrefix(e, "PATH=") {
				env[i] = "PATH=" + strings.Join(r.path, ":") + ":" + strings.TrimPrefix(e, "PATH=")
			}
		}
	}
	env = append(env, "GITHUB_OUTPUT="+outputs, "GITHUB_PATH="+pathFile)
	for k, v := range s.Env {
		env = append(env, k+"="+r.expand(v))
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("step %q (err %v):\n%s", s.Name, err, out)
	r.logs[s.Name] = string(out)
	if err != nil {
		r.failed = true
	}
	if s.ID != "" {
		r.outputs[s.ID] = readOutputs(t, outputs)
	}
	added, _ := os.ReadFile(pathFile)
	for _, p := range strings.Fields(string(added)) {
		r.path = append([]string{p}, r.path...)
	}
}

// readOutputs parses a $GITHUB_OUTPUT file as the runner does; a name set
// twice keeps its last value.
func readOutputs(t *testing.T, path string) map[string]string {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	outs := map[string]string{}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if line == "" {
			continue
		}
		if name, delim, ok := strings.Cut(line, "<<"); ok && !strings.Contains(name, "=") {
			var value []string
			for i++; i < len(lines) && lines[i] != delim; i++ {
				value = append(value, lines[i])
			}
			outs[name] = strings.Join(value, "\n")
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("$GITHUB_OUTPUT line %q", line)
		}
		outs[name] = value
	}
	return outs
}

// localRelease lays the snapshot out as GitHub serves a release
// (BASE/vVERSION/FILE) and returns the file:// base for install.sh.
func localRelease(t *testing.T, d dist, tamper bool) string {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "v"+d.version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"checksums.txt"}
	for _, p := range platforms {
		names = append(names, d.archive(p[0], p[1]))
	}
	for _, name := range names {
		if err := os.Symlink(d.path(name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if tamper { // an archive that is not what checksums.txt says
		mine := filepath.Join(dir, d.archive(runtime.GOOS, runtime.GOARCH))
		os.Remove(mine)
		if err := os.WriteFile(mine, []byte("not the release"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return "file://" + base
}

// The action in a simulated runner, installing from the snapshot as from a
// release and probing a local server: a pass sets its outputs and uploads
// the report; dropped requests still upload the report and JUnit, set the
// outputs (agreeing with the report) and fail the job with exit 1; an
// archive that does not match its checksum is not installed; a bad input
// fails with exit 2 and verdict error.
func TestActionInASimulatedRunner(t *testing.T) {
	d := snapshot(t)
	srv := faultserver.New(t, "pod-a")
	release := "ROLLPROBE_RELEASE_URL=" + localRelease(t, d, false)
	probe := func(path string) map[string]string {
		// 20 req/s: these cases test the action's plumbing (outputs, the
		// upload, the gate), and a busy runner must not turn the pass case
		// into 'inconclusive' by failing to hold a rate.
		return map[string]string{"version": "v" + d.version, "command": "probe", "target": srv.URL(path),
			"rate": "20", "duration": "1s", "conn": "new"}
	}
	steps := func(r result) string { return strings.Join(r.ran, " | ") }

	t.Run("pass", func(t *testing.T) {
		r := runAction(t, probe("/ok"), release)
		if r.failed || r.outputs["verdict"] != "pass" || r.outputs["exit-code"] != "0" || r.outputs["failed"] != "0" {
			t.Fatalf("failed %v, outputs %v, steps %s", r.failed, r.outputs, steps(r))
		}
		uploaded := r.with["Upload the report"]
		if uploaded == nil || uploaded["name"] != "rollprobe-report" {
			t.Fatalf("no upload: steps %s", steps(r))
		}
		for _, f := range []string{"report.json", "junit.xml", "report.html"} {
			if _, err := os.Stat(filepath.Join(uploaded["path"], f)); err != nil {
				t.Errorf("the uploaded directory lacks %s: %v", f, err)
			}
		}
		if r.outputs["report"] != filepath.Join(uploaded["path"], "report.json") {
			t.Errorf("report output %q", r.outputs["report"])
		}
		if !strings.Contains(r.summary, "rollprobe probe") {
			t.Errorf("step summary:\n%s", r.summary)
		}
	})

	t.Run("dropped requests fail the job, with the report uploaded", func(t *testing.T) {
		r := runAction(t, probe("/reset"), release)
		if !r.failed || r.outputs["verdict"] != "fail" || r.outputs["exit-code"] != "1" {
			t.Fatalf("failed %v, outputs %v, steps %s", r.failed, r.outputs, steps(r))
		}
		if r.ran[len(r.ran)-1] != "Gate on the verdict" || r.with["Upload the report"] == nil {
			t.Fatalf("the upload and the gate must both run: %s", steps(r))
		}
		rep, err := report.ReadFile(r.outputs["report"])
		if err != nil {
			t.Fatal(err)
		}
		if rep.Totals.Failed == 0 || r.outputs["failed"] != fmt.Sprint(rep.Totals.Failed) {
			t.Errorf("failed output %q, the report says %d", r.outputs["failed"], rep.Totals.Failed)
		}
		junit, err := os.ReadFile(filepath.Join(r.with["Upload the report"]["path"], "junit.xml"))
		var doc struct {
			Failures int `xml:"failures,attr"`
		}
		if err != nil || xml.Unmarshal(junit, &doc) != nil || doc.Failures == 0 {
			t.Errorf("junit: %v\n%s", err, junit)
		}
	})

	t.Run("a tampered archive is not installed", func(t *testing.T) {
		r := runAction(t, probe("/ok"), "ROLLPROBE_RELEASE_URL="+localRelease(t, d, true))
		if !r.failed || len(r.ran) != 1 || r.outputs["verdict"] != "" {
			t.Fatalf("failed %v, steps %s, outputs %v: only the install may run, and fail", r.failed, steps(r), r.outputs)
		}
	})

	t.Run("a bad trigger is a usage error", func(t *testing.T) {
		in := probe("/ok")
		in["command"], in["deployment"], in["trigger"] = "run", "shop/web", "bounce"
		r := runAction(t, in, release)
		if !r.failed || r.outputs["exit-code"] != "2" || r.outputs["verdict"] != "error" {
			t.Fatalf("failed %v, outputs %v, steps %s", r.failed, r.outputs, steps(r))
		}
	})

	// scale=N is passed as --scale N: rollprobe's own check of N answers.
	t.Run("a scale trigger reaches rollprobe", func(t *testing.T) {
		in := probe("/ok")
		in["command"], in["deployment"], in["trigger"] = "run", "shop/web", "scale=0"
		r := runAction(t, in, release)
		if !r.failed || r.outputs["exit-code"] != "2" || !strings.Contains(strings.Join(slices.Collect(maps.Values(r.logs)), "\n"), "--scale 0: want 1 or more") {
			t.Fatalf("failed %v, outputs %v, steps %s, logs %v", r.failed, r.outputs, steps(r), r.logs)
		}
	})

	t.Run("no version", func(t *testing.T) {
		in := probe("/ok")
		in["version"] = ""
		if r := runAction(t, in, release); !r.failed || len(r.ran) != 1 {
			t.Fatalf("failed %v, steps %s", r.failed, steps(r))
		}
	})
}
