package doctor

import (
	"fmt"
	"io"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// ResultSchema names the JSON document of rollprobe doctor -o json.
const ResultSchema = "rollprobe.doctor/v1"

// Result is one doctor run: every check's status and the findings.
type Result struct {
	Schema         string           `json:"schema"`
	Namespace      string           `json:"namespace"`
	Deployment     string           `json:"deployment"`
	Service        string           `json:"service,omitempty"`
	ServerVersion  string           `json:"server_version,omitempty"`
	ExpectedDrainS float64          `json:"expected_drain_s"`
	FailOn         string           `json:"fail_on"`
	Checks         []CheckStatus    `json:"checks"`
	Findings       []report.Finding `json:"findings"`
	// Pass: no finding at or above FailOn.
	Pass bool `json:"pass"`
}

// CheckStatus is "pass", or the severity of the check's finding.
type CheckStatus struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status string `json:"status"`
}

// Evaluate runs the checks and judges them against failOn (a severity, or
// "never").
func Evaluate(in Input, opts Options, failOn string) Result {
	if opts.ExpectedDrain <= 0 {
		opts.ExpectedDrain = DefaultExpectedDrain
	}
	res := Result{Schema: ResultSchema, Namespace: in.Deployment.Namespace, Deployment: in.Deployment.Name,
		ExpectedDrainS: opts.ExpectedDrain.Seconds(), FailOn: failOn, Findings: Run(in, opts), Pass: true}
	if in.Service != nil {
		res.Service = in.Service.Name
	}
	if in.Major > 0 {
		res.ServerVersion = fmt.Sprintf("%d.%d", in.Major, in.Minor)
	}
	byID := map[string]report.Finding{}
	for _, f := range res.Findings {
		byID[f.ID] = f
		if AtLeast(f.Severity, failOn) {
			res.Pass = false
		}
	}
	for _, c := range Checks {
		st := CheckStatus{ID: c.ID, Title: c.Title, Status: "pass"}
		if f, ok := byID[c.ID]; ok {
			st.Status = f.Severity
		}
		res.Checks = append(res.Checks, st)
	}
	return res
}

// WriteText renders the result for a terminal.
func WriteText(w io.Writer, r Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "rollprobe doctor deployment %s/%s", r.Namespace, r.Deployment)
	if r.Service != "" {
		fmt.Fprintf(&b, " behind service %s", r.Service)
	}
	if r.ServerVersion != "" {
		fmt.Fprintf(&b, " (Kubernetes %s)", r.ServerVersion)
	}
	b.WriteString("\n")
	findings := map[string]report.Finding{}
	for _, f := range r.Findings {
		findings[f.ID] = f
	}
	counts := map[string]int{}
	for _, c := range r.Checks {
		f, found := findings[c.ID]
		if !found {
			fmt.Fprintf(&b, "  ok        %s\n", c.Title)
			continue
		}
		counts[f.Severity]++
		fmt.Fprintf(&b, "  %-9s %s  [%s]\n", strings.ToUpper(f.Severity), f.Title, f.ID)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "            - %s\n", e)
		}
		fmt.Fprintf(&b, "            fix: %s\n", f.Fix)
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	threshold := "failing on " + r.FailOn + " and above"
	if r.FailOn == "never" {
		threshold = "never failing"
	}
	fmt.Fprintf(&b, "doctor: %s: %s, %s (%s)\n", verdict, plural(counts["error"], "error"), plural(counts["warning"], "warning"), threshold)
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
