package render

import (
	"fmt"
	"io"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// DoctorText renders a doctor result for a terminal.
func DoctorText(w io.Writer, r report.DoctorResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "rollprobe doctor %s", r.Workload())
	if r.TemplateFrom != "" {
		fmt.Fprintf(&b, " (its pod template from %s, workloadRef)", r.TemplateFrom)
	}
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
	counts := map[report.Severity]int{}
	for _, c := range r.Checks {
		f, found := findings[c.ID]
		if !found {
			fmt.Fprintf(&b, "  ok        %s\n", c.Title)
			continue
		}
		counts[f.Severity]++
		fmt.Fprintf(&b, "  %-9s %s  [%s]\n", strings.ToUpper(string(f.Severity)), f.Title, f.ID)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "            - %s\n", e)
		}
		fmt.Fprintf(&b, "            fix: %s\n", f.Fix)
		fmt.Fprintf(&b, "            docs: %s\n", report.FindingDoc(f.ID))
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	threshold := "failing on " + string(r.FailOn) + " and above"
	if r.FailOn == report.FailNever {
		threshold = "never failing"
	}
	fmt.Fprintf(&b, "doctor: %s: %s, %s (%s)\n", verdict, plural(counts[report.SeverityError], "error"), plural(counts[report.SeverityWarning], "warning"), threshold)
	_, err := io.WriteString(w, Printable(b.String()))
	return err
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// DoctorMarkdown renders a doctor result for a pull request or a GitHub
// step summary.
func DoctorMarkdown(w io.Writer, r report.DoctorResult) error {
	var b strings.Builder
	verdict := "✅ pass"
	if !r.Pass {
		verdict = "❌ fail"
	}
	fmt.Fprintf(&b, "### rollprobe doctor: %s — %s\n\n", r.Workload(), verdict)
	b.WriteString("| check | status |\n|---|---|\n")
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "| %s | %s |\n", c.Title, c.Status)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "\n**%s** (%s, `%s`)\n\n", f.Title, f.Severity, f.ID)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "- %s\n", e)
		}
		fmt.Fprintf(&b, "\nFix: %s ([%s](%s))\n", f.Fix, f.ID, report.FindingDoc(f.ID))
	}
	_, err := io.WriteString(w, Printable(b.String()))
	return err
}
