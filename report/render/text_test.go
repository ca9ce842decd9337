package render

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/fixture"
	"github.com/rollprobe/rollprobe/report"
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

// An abort followed back says, on the rollout line (text and Markdown),
// how long after the abort the aborted revision's pods were gone; a
// completed rollout says nothing of it.
func TestAbortedPodsGoneIsSaid(t *testing.T) {
	r := fixture.NaiveRun()
	var plain bytes.Buffer
	if err := Text(&plain, r); err != nil {
		t.Fatal(err)
	}
	at := r.StartedAt.Add(8 * time.Second)
	r.Timeline = append(r.Timeline,
		report.Event{At: at, Kind: report.RolloutFailed, Detail: "RolloutAborted"},
		report.Event{At: at.Add(1500 * time.Millisecond), Kind: report.AbortedPodsGone, Revision: "r2"})
	var b bytes.Buffer
	if err := Text(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ", the aborted revision's pods gone 1.5s after the abort") || strings.Contains(plain.String(), "aborted") {
		t.Errorf("with the abort:\n%s\nwithout:\n%s", b.String(), plain.String())
	}
	var md bytes.Buffer
	if err := Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(strings.SplitN(md.String(), "\n\n", 3)[1], "\n"); !strings.HasSuffix(first, ", the aborted revision's pods gone 1.5s after the abort") {
		t.Errorf("Markdown's rollout line %q", first)
	}
}

// The entry line names each path's node port when the paths entered by
// different nodes (a Local policy probed at every node), and the run's
// one when there is one path; none when no path entered by a node port.
func TestEntryLineNamesEveryPathsNodePort(t *testing.T) {
	line := func(r *report.Report) string {
		var b bytes.Buffer
		if err := Text(&b, r); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "  entry ") {
				return l
			}
		}
		return ""
	}
	r := fixture.NaiveRun()
	r.Rollout.ServiceType, r.Rollout.ExternalTrafficPolicy = "NodePort", "Local"
	r.Rollout.Entry = &report.Entry{Via: report.ViaNodePort, Node: "node-1", Port: 30080}
	if got, want := line(r), "  entry     node node-1's NodePort 30080 (service type NodePort, externalTrafficPolicy Local)"; got != want {
		t.Errorf("one path: %q, want %q", got, want)
	}
	r.Paths = []report.PathReport{
		{Name: "n1", Entry: &report.Entry{Via: report.ViaNodePort, Node: "node-1", Port: 30080}},
		{Name: "svc", Entry: &report.Entry{Via: report.ViaClusterIP}},
		{Name: "n2", Entry: &report.Entry{Via: report.ViaNodePort, Node: "node-2", Port: 30080}},
	}
	if got, want := line(r), "  entry     node node-1's NodePort 30080 (path n1), node node-2's NodePort 30080 (path n2) (service type NodePort, externalTrafficPolicy Local)"; got != want {
		t.Errorf("three paths: %q, want %q", got, want)
	}
	r.Rollout.Entry, r.Paths[0].Entry, r.Paths[2].Entry = nil, nil, &report.Entry{Via: report.ViaLoadBalancer}
	if got := line(r); got != "" {
		t.Errorf("no path by a node port: %q", got)
	}
}

// A drain or a scale changes no revision: the rollout line says the one
// revision is unchanged (text and Markdown), not "r1 -> r1".
func TestOneRevisionIsSaidUnchanged(t *testing.T) {
	r := fixture.NaiveRun()
	r.Rollout.NewRevision = r.Rollout.OldRevision
	var b, md bytes.Buffer
	if err := Text(&b, r); err != nil {
		t.Fatal(err)
	}
	if err := Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	rev := r.Rollout.OldRevision
	if !strings.Contains(b.String(), ", revision "+rev+" (unchanged)") || strings.Contains(b.String(), " -> ") {
		t.Errorf("text:\n%s", b.String())
	}
	// Its end is said as its follow recorded it: a scale-out removed no
	// pod, and "old pods gone" would say one went.
	r.Timeline = append(r.Timeline, report.Event{At: *r.Rollout.OldPodsGoneAt, Kind: report.AllOldPodsGone, Revision: rev, Detail: "the scale removed no pod"})
	b.Reset()
	if err := Text(&b, r); err != nil {
		t.Fatal(err)
	}
	after := r.Rollout.OldPodsGoneAt.Sub(*r.Rollout.TriggeredAt).Seconds()
	if want := fmt.Sprintf(", done %.1fs after the trigger (the scale removed no pod)", after); !strings.Contains(b.String(), want) || strings.Contains(b.String(), "old pods gone") {
		t.Errorf("text lacks %q:\n%s", want, b.String())
	}
	if !strings.Contains(md.String(), " (`"+rev+"`, unchanged)") || strings.Contains(md.String(), "` → `") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

// A grpc-go path's hidden retries read as what was measured: none said as
// none, not "0 in 0 calls"; a raw path, which has none to measure, says
// nothing of them.
func TestPathLineSaysHiddenRetries(t *testing.T) {
	r := fixture.NaiveRun()
	r.Paths = []report.PathReport{{Name: "raw"}, {Name: "grpc-go", Totals: report.Totals{HiddenRetries: &report.HiddenRetries{}}},
		{Name: "again", Totals: report.Totals{HiddenRetries: &report.HiddenRetries{Calls: 1, Attempts: 2}}}}
	var b bytes.Buffer
	if err := Text(&b, r); err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(b.String(), "\n") {
		for _, p := range r.Paths {
			if strings.Contains(l, " "+p.Name+" ") && strings.Contains(l, " sent ") {
				lines[p.Name] = l
			}
		}
	}
	if l := lines["raw"]; l == "" || strings.Contains(l, "hidden") {
		t.Errorf("raw: %q, want a line without hidden retries", l)
	}
	if l := lines["grpc-go"]; !strings.Contains(l, "; no hidden retry") {
		t.Errorf("grpc-go: %q, want \"; no hidden retry\"", l)
	}
	if l := lines["again"]; !strings.Contains(l, "; hidden retries 2 in 1 call ") {
		t.Errorf("again: %q, want \"; hidden retries 2 in 1 call\"", l)
	}
}
