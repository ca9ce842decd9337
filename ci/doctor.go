package ci

import (
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// DoctorChecks is a check per doctor check: failed when its finding is at
// or above the result's fail-on severity, a warning when it is below.
func DoctorChecks(r report.DoctorResult) []Check {
	findings := map[string]report.Finding{}
	for _, f := range r.Findings {
		findings[f.ID] = f
	}
	checks := make([]Check, 0, len(r.Checks))
	for _, c := range r.Checks {
		ck := Check{Name: "doctor: " + c.ID, Message: c.Title}
		if f, ok := findings[c.ID]; ok {
			ck.Message = f.Title
			ck.Detail = strings.Join(f.Evidence, "\n") + "\nfix: " + f.Fix + "\ndocs: " + report.FindingDoc(f.ID)
			ck.Failed = r.FailOn.Fails(f.Severity)
			ck.Warning = !ck.Failed
		}
		checks = append(checks, ck)
	}
	return checks
}
