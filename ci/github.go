package ci

import (
	"fmt"
	"io"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// WriteAnnotations prints GitHub Actions workflow commands: ::error for
// failed checks, ::warning for warnings.
func WriteAnnotations(w io.Writer, r *report.Report) error {
	return WriteCheckAnnotations(w, Checks(r))
}

// WriteCheckAnnotations prints the annotations of any list of checks.
func WriteCheckAnnotations(w io.Writer, checks []Check) error {
	for _, c := range checks {
		level := ""
		switch {
		case c.Failed:
			level = "error"
		case c.Warning:
			level = "warning"
		default:
			continue
		}
		msg := c.Message
		if c.Detail != "" {
			msg += "\n" + c.Detail
		}
		if _, err := fmt.Fprintf(w, "::%s title=rollprobe: %s::%s\n", level, escapeProperty(c.Name), escapeData(msg)); err != nil {
			return err
		}
	}
	return nil
}

// Workflow-command escaping (actions/toolkit command.ts).
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func escapeProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
