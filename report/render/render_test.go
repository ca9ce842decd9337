package render

import (
	"bytes"
	"testing"

	"github.com/rollprobe/rollprobe/internal/fixture"
	"github.com/rollprobe/rollprobe/internal/golden"
)

// The text summary of a run: rollout, outages, per-pod table, findings
// (the doctor's marked as static).
func TestRunText(t *testing.T) {
	var buf bytes.Buffer
	if err := Text(&buf, fixture.NaiveRun()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "naive.txt", buf.Bytes())
}

func TestRunMarkdown(t *testing.T) {
	var md bytes.Buffer
	if err := Markdown(&md, fixture.NaiveRun()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "naive.summary.md", md.Bytes())
}
