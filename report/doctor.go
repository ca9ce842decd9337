package report

import "strings"

// DoctorSchema names the JSON document of rollprobe doctor -o json.
const DoctorSchema = "rollprobe.doctor/v1"

// DoctorResult is one doctor run: every check's status and the findings.
type DoctorResult struct {
	Schema    string `json:"schema"`
	Namespace string `json:"namespace"`
	// Kind and Name are the workload's (Kind absent: a Deployment, in
	// documents of earlier versions); Deployment is the name when the
	// workload is a Deployment.
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name,omitempty"`
	Deployment string `json:"deployment"`
	// TemplateFrom names the object whose pod template the checks read
	// ("deployment web") when it is not the workload's own: an Argo
	// Rollout's spec.workloadRef.
	TemplateFrom   string        `json:"template_from,omitempty"`
	Service        string        `json:"service,omitempty"`
	ServerVersion  string        `json:"server_version,omitempty"`
	ExpectedDrainS float64       `json:"expected_drain_s"`
	FailOn         FailOn        `json:"fail_on"`
	Checks         []CheckStatus `json:"checks"`
	Findings       []Finding     `json:"findings"`
	// Pass: no finding at or above FailOn.
	Pass bool `json:"pass"`
}

// Workload names the workload as kubectl writes it: "deployment NS/NAME".
func (r DoctorResult) Workload() string {
	kind, name := r.Kind, r.Name
	if kind == "" {
		kind, name = "Deployment", r.Deployment
	}
	return strings.ToLower(kind) + " " + r.Namespace + "/" + name
}

// CheckStatus is one doctor check: Status is "pass", or the severity of
// the check's finding.
type CheckStatus struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status string `json:"status"`
}

// CheckPassed is a CheckStatus's Status when the check found nothing.
const CheckPassed = "pass"

// FailOn is the severity from which findings fail a doctor run, or
// FailNever.
type FailOn string

// FailNever: no finding fails the run.
const FailNever FailOn = "never"

// ParseFailOn accepts a severity or "never".
func ParseFailOn(s string) (FailOn, bool) {
	if FailOn(s) == FailNever {
		return FailNever, true
	}
	_, ok := ParseSeverity(s)
	return FailOn(s), ok
}

// Fails reports whether a finding of severity s fails a run.
func (f FailOn) Fails(s Severity) bool {
	return f != FailNever && s.AtLeast(Severity(f))
}
