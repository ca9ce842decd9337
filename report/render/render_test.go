package render

import (
	"bytes"
	"strings"
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

// eof and eof_reused are split by server close in both summaries.
func TestEOFSplit(t *testing.T) {
	r := fixture.NaiveRun()
	r.Totals.EOFBeforeRequest, r.Totals.EOFAfterRequest = 3, 2
	var text, md bytes.Buffer
	if err := Text(&text, r); err != nil {
		t.Fatal(err)
	}
	if err := Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	want := "3 before the request reached the server (the keep-alive race: nothing processed), 2 after the server had it (cut in flight)"
	if !strings.Contains(text.String(), "closes    "+want) || !strings.Contains(md.String(), want) {
		t.Fatalf("the split is missing:\n%s\n%s", text.String(), md.String())
	}
}

// More than podsOpenUpTo pods: the table is collapsed.
func TestMarkdownCollapsesALongPodTable(t *testing.T) {
	r := fixture.NaiveRun()
	for len(r.Pods) <= podsOpenUpTo {
		r.Pods = append(r.Pods, r.Pods[0])
	}
	var md bytes.Buffer
	if err := Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "<details><summary>11 pods</summary>") {
		t.Fatalf("%s", md.String())
	}
}
