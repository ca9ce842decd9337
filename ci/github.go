package ci

import (
	"bytes"
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
//
// GitHub shows at most 10 annotations of each level per step and drops
// the rest without a word: past maxAnnotations of a level, one more says
// how many were left out and where they are.
func WriteCheckAnnotations(w io.Writer, checks []Check) error {
	written := map[string]int{}
	left := map[string]int{}
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
		if written[level] == maxAnnotations {
			left[level]++
			continue
		}
		written[level]++
		msg := c.Message
		if c.Detail != "" {
			msg += "\n" + c.Detail
		}
		if _, err := fmt.Fprintf(w, "::%s title=rollprobe: %s::%s\n", level, escapeProperty(c.Name), escapeData(msg)); err != nil {
			return err
		}
	}
	for _, level := range []string{"error", "warning"} {
		if n := left[level]; n > 0 {
			if _, err := fmt.Fprintf(w, "::%s title=rollprobe: %d more::%s\n", level, n,
				escapeData(fmt.Sprintf("%d more checks at this level are in the step summary and the JUnit report (GitHub shows 10 annotations per level)", n))); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxAnnotations is how many annotations of one level are written: GitHub
// shows 10 per level per step, and the tenth says how many more there are.
const maxAnnotations = 9

// maxStepSummary bounds what one step appends to $GITHUB_STEP_SUMMARY:
// GitHub refuses a step summary over 1 MiB (and then shows none).
const maxStepSummary = 1 << 20

// capSummary cuts a Markdown summary to fit maxStepSummary, at a line
// boundary, with a last line that says so.
func capSummary(md []byte) []byte {
	const note = "\n\n*The summary was cut here: GitHub shows at most 1 MiB. The JSON report has everything.*\n"
	if len(md) <= maxStepSummary {
		return md
	}
	cut := md[:maxStepSummary-len(note)]
	if i := bytes.LastIndexByte(cut, '\n'); i > 0 {
		cut = cut[:i]
	}
	return append(append([]byte(nil), cut...), note...)
}

// Workflow-command escaping (actions/toolkit command.ts).
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func escapeProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
