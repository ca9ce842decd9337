package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/internal/fixture"
)

// A value from the server (a backend header) with an escape sequence is
// shown escaped by the text and Markdown renderings, never sent raw to a
// terminal or a CI log.
func TestServerValuesAreShownEscaped(t *testing.T) {
	r := fixture.NaiveRun()
	evil := "web-\x1b[2J\x1b]0;owned\x07\u009b31m\xff"
	r.Totals.ByBackend = map[string]uint64{evil: 7}
	r.Pods[0].Pod = evil // a run shows its pods, a probe its backends
	probe := *r
	probe.Command, probe.Rollout, probe.Pods, probe.Timeline = "probe", nil, nil, nil
	for name, render := range map[string]func(*bytes.Buffer) error{
		"run text":       func(b *bytes.Buffer) error { return Text(b, r) },
		"run markdown":   func(b *bytes.Buffer) error { return Markdown(b, r) },
		"probe text":     func(b *bytes.Buffer) error { return Text(b, &probe) },
		"probe markdown": func(b *bytes.Buffer) error { return Markdown(b, &probe) },
	} {
		var b bytes.Buffer
		if err := render(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		shows := name != "probe markdown" // which has no backends table
		if strings.ContainsAny(out, "\x1b\x07\u009b") || shows && !strings.Contains(out, `web-\x1b[2J\x1b]0;owned\x07\u009b31m\xff`) {
			t.Errorf("%s: the backend is not shown escaped:\n%q", name, out)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain":            "plain",
		"tab\tand\nline":   "tab\tand\nline",
		"bell\a":           `bell\x07`,
		"del\x7f":          `del\x7f`,
		"bad\xc3":          `bad\xc3`,
		"é ünïcode ✓":      "é ünïcode ✓",
		"c1 \u0085 \u009b": `c1 \u0085 \u009b`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
