package output

import (
	"fmt"
	"io"
	"strings"

	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/report"
)

// DoctorChecks is a check per doctor check: failed when its finding is at
// or above the result's fail-on severity, a warning when it is below.
func DoctorChecks(r doctor.Result) []Check {
	findings := map[string]report.Finding{}
	for _, f := range r.Findings {
		findings[f.ID] = f
	}
	checks := make([]Check, 0, len(r.Checks))
	for _, c := range r.Checks {
		ck := Check{Name: "doctor: " + c.ID, Message: c.Title}
		if f, ok := findings[c.ID]; ok {
			ck.Message = f.Title
			ck.Detail = strings.Join(f.Evidence, "\n") + "\nfix: " + f.Fix
			ck.Failed = doctor.AtLeast(f.Severity, r.FailOn)
			ck.Warning = !ck.Failed
		}
		checks = append(checks, ck)
	}
	return checks
}

// WriteDoctorMarkdown writes a GitHub step summary for a doctor result.
func WriteDoctorMarkdown(w io.Writer, r doctor.Result) error {
	var b strings.Builder
	verdict := "✅ pass"
	if !r.Pass {
		verdict = "❌ fail"
	}
	fmt.Fprintf(&b, "### rollprobe doctor: %s/%s — %s\n\n", r.Namespace, r.Deployment, verdict)
	b.WriteString("| check | status |\n|---|---|\n")
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "| %s | %s |\n", c.Title, c.Status)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "\n**%s** (%s, `%s`)\n\n", f.Title, f.Severity, f.ID)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "- %s\n", e)
		}
		fmt.Fprintf(&b, "\nFix: %s\n", f.Fix)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
