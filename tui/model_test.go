package tui

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/internal/golden"
	"github.com/rollprobe/rollprobe/prober"
)

// naiveMidRollout is a synthetic frame: a naive rollout 14 s in, one old
// pod terminating, requests failing since second 9.
func naiveMidRollout() Snapshot {
	s := Snapshot{Command: "run", Target: "http://10.96.12.34/", Phase: "rolling", Elapsed: 14300 * time.Millisecond,
		TargetRate: 200, AchievedRate: 199.6, Sent: 2860, OK: 2744, Failed: 116,
		Classes: []ClassCount{{"refused", 12}, {"reset", 2}, {"connect_timeout", 102}},
		Latency: Quantiles{P50: 1100 * time.Microsecond, P90: 1600 * time.Microsecond, P99: 4900 * time.Microsecond, Max: 1002 * time.Millisecond},
		Rollout: &Rollout{Kind: "deployment", Name: "default/naive", OldRevision: "5d45cdff87", NewRevision: "7688d6b996", Desired: 3, Updated: 2, Ready: 3, Available: 3, OldPod: 2},
		Marks:   []Mark{{7, MarkReady}, {8, MarkDeleted}, {10, MarkReady}, {11, MarkDeleted}},
	}
	for i := 0; i < 15; i++ {
		sec := Second{Sent: 200, OK: 200}
		switch i {
		case 9:
			sec.OK, sec.Failed = 140, 60
		case 12:
			sec.OK, sec.Failed = 144, 56
		case 14:
			sec = Second{Sent: 60, OK: 60} // the open second
		}
		s.Seconds = append(s.Seconds, sec)
	}
	s.Pods = []Pod{
		{Name: "naive-7688d6b996-x2v9q", Revision: "7688d6b996", Ready: true, Serving: true, Age: 4 * time.Second, Served: 610},
		{Name: "naive-7688d6b996-k8mzt", Revision: "7688d6b996", Ready: true, Serving: true, Age: 7 * time.Second, Served: 790},
		{Name: "naive-5d45cdff87-9fffl", Revision: "5d45cdff87", Ready: true, Serving: true, Terminating: true, Age: 31 * time.Second, Served: 1140},
		{Name: "naive-5d45cdff87-gq7m2", Revision: "5d45cdff87", Ready: true, Serving: true, Age: 31 * time.Second, Served: 1160},
		{Name: "naive-5d45cdff87-8vcpw", Revision: "5d45cdff87", Gone: true, Served: 1050},
	}
	s.Log = []LogLine{
		{At: 5 * time.Second, Text: "rollout triggered: restart (kubectl rollout restart)"},
		{At: 5100 * time.Millisecond, Text: "pod naive-7688d6b996-k8mzt created"},
		{At: 7 * time.Second, Text: "pod naive-7688d6b996-k8mzt ready"},
		{At: 8 * time.Second, Text: "pod naive-5d45cdff87-8vcpw deletion requested (grace 30s)"},
		{At: 9 * time.Second, Text: "outage: requests failing", Bad: true},
		{At: 10 * time.Second, Text: "outage over: 60 failed in 1s (connect_timeout 50, refused 10)", Bad: true},
		{At: 11 * time.Second, Text: "pod naive-5d45cdff87-9fffl deletion requested (grace 30s)"},
		{At: 12 * time.Second, Text: "outage: requests failing", Bad: true},
	}
	return s
}

func render(m Model, w, h int) string {
	next, _ := m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	return ansi.Strip(next.(Model).View().Content)
}

func withSnapshot(m Model, s Snapshot) Model {
	next, _ := m.Update(snapshotMsg(s))
	return next.(Model)
}

func TestGoldenRenders(t *testing.T) {
	m := withSnapshot(New(Options{}), naiveMidRollout())
	golden.Check(t, "rolling-80x24.txt", []byte(render(m, 80, 24)+"\n"))
	golden.Check(t, "rolling-140x30.txt", []byte(render(m, 140, 30)+"\n"))

	done, _ := m.Update(DoneMsg{Verdict: "FAIL", ExitCode: 1, Reasons: []string{"116 of 2860 requests failed, above the budget of 0"},
		Findings: []Finding{
			{Severity: "error", Title: "pods stopped accepting connections while traffic was still routed to them",
				Fix: "give the container a preStop hook that waits at least 3s (lifecycle.preStop.sleep.seconds: 3) so it keeps serving until endpoints have propagated"},
			{Severity: "error", Title: "no preStop hook: the app is told to stop while traffic is still routed to it", Fix: "lifecycle.preStop.sleep.seconds: 5", Static: true},
		}, Files: []string{"report: bin/demo/naive.json"}})
	golden.Check(t, "done-80x24.txt", []byte(render(done.(Model), 80, 24)+"\n"))
}

// Every size from tiny to huge: exactly the terminal's height (no scroll,
// no flicker from a moving last line) and no line wider than it.
func TestFitsTheTerminal(t *testing.T) {
	m := withSnapshot(New(Options{Color: true}), naiveMidRollout())
	for _, size := range [][2]int{{80, 24}, {40, 12}, {100, 40}, {200, 60}, {20, 5}} {
		w, h := size[0], size[1]
		next, _ := m.Update(tea.WindowSizeMsg{Width: w, Height: h})
		out := next.(Model).View().Content
		lines := strings.Split(out, "\n")
		if len(lines) != max(h, minHeight) {
			t.Errorf("%dx%d: %d lines", w, h, len(lines))
		}
		for i, l := range lines {
			if lw := lipgloss.Width(l); lw > max(w, minWidth) {
				t.Errorf("%dx%d: line %d is %d wide: %q", w, h, i, lw, ansi.Strip(l))
			}
		}
	}
}

// What matters is on screen at 80x24: failures, their classes, and which
// pods are terminating.
func TestShowsFailuresAndTerminatingPods(t *testing.T) {
	out := render(withSnapshot(New(Options{}), naiveMidRollout()), 80, 24)
	for _, want := range []string{"connect_timeout 102", "naive-5d45cdff87-9fffl", "▼", "outage: requests failing", "● ROLLING", "old pods 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("80x24 render lacks %q:\n%s", want, out)
		}
	}
	// The terminating pod's row says so.
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 7 && f[0] == "naive-5d45cdff87-9fffl" && (f[2] != "yes" || f[3] != "yes" || f[4] != "yes") {
			t.Errorf("terminating pod row (ready, serving, terminating): %q", l)
		}
	}
}

func TestNoColorHasNoColorCodes(t *testing.T) {
	out := withSnapshot(New(Options{Color: false}), naiveMidRollout()).View().Content
	if strings.Contains(out, "\x1b[3") || strings.Contains(out, "\x1b[9") || strings.Contains(out, "38;") {
		t.Errorf("colour codes without colour: %q", out[:min(400, len(out))])
	}
	colored := withSnapshot(New(Options{Color: true}), naiveMidRollout()).View().Content
	if colored == out {
		t.Error("colour on renders the same as colour off")
	}
}

func TestKeys(t *testing.T) {
	stopped := 0
	m := New(Options{Stop: func() { stopped++ }})
	m = withSnapshot(m, naiveMidRollout())
	press := func(m Model, k string) (Model, tea.Cmd) {
		var msg tea.KeyPressMsg
		switch k {
		case "tab":
			msg = tea.KeyPressMsg{Code: tea.KeyTab}
		case "ctrl+c":
			msg = tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
		case "up":
			msg = tea.KeyPressMsg{Code: tea.KeyUp}
		default:
			msg = tea.KeyPressMsg{Code: rune(k[0]), Text: k}
		}
		next, cmd := m.Update(msg)
		return next.(Model), cmd
	}
	if m.focus != panePods {
		t.Fatal("focus starts on pods")
	}
	m, _ = press(m, "tab")
	if m.focus != paneLog {
		t.Fatal("tab did not move the focus")
	}
	m, _ = press(m, "up")
	if m.scroll[paneLog] != 1 {
		t.Fatalf("up on the log scrolls back one line: %v", m.scroll)
	}
	m, _ = press(m, "?")
	if !m.showHelp || !strings.Contains(render(m, 80, 24), "stop (the report is still written)") {
		t.Fatal("? did not show the help")
	}
	m, _ = press(m, "?")

	// q before the end: stop the run, keep showing until it is done.
	m, cmd := press(m, "q")
	if !m.Stopping() || cmd == nil {
		t.Fatal("q did not ask the run to stop")
	}
	cmd()
	if stopped != 1 || !strings.Contains(render(m, 80, 24), "STOPPING") {
		t.Fatalf("stop called %d times", stopped)
	}
	m, cmd = press(m, "ctrl+c")
	if cmd != nil || stopped != 1 {
		t.Fatal("a second stop request must not stop twice")
	}
	// The run ends (interrupted): leave at once.
	next, cmd := m.Update(DoneMsg{Verdict: "INTERRUPTED", ExitCode: 130, Interrupted: true})
	if cmd == nil || !quits(cmd) {
		t.Fatal("an interrupted run must leave at once")
	}
	_ = next
}

func TestDoneWaitsForAKey(t *testing.T) {
	m := withSnapshot(New(Options{}), naiveMidRollout())
	next, cmd := m.Update(DoneMsg{Verdict: "PASS"})
	if quits(cmd) {
		t.Fatal("done without --exit-when-done must wait for a key")
	}
	m = next.(Model)
	if !strings.Contains(render(m, 80, 24), "verdict: PASS (exit 0)") {
		t.Fatalf("done screen:\n%s", render(m, 80, 24))
	}
	// A sample arriving after the end does not schedule another.
	if _, cmd := m.Update(snapshotMsg(naiveMidRollout())); cmd != nil {
		t.Fatal("sampling goes on after the end")
	}
	if _, cmd := m.Update(tea.KeyPressMsg{Code: tea.KeyEnter}); !quits(cmd) {
		t.Fatal("enter after the end must leave")
	}
	auto := New(Options{ExitWhenDone: true})
	if _, cmd := auto.Update(DoneMsg{Verdict: "PASS"}); !quits(cmd) {
		t.Fatal("--exit-when-done must leave at the end")
	}
}

// After the end, tab cycles from the verdict to the pods and events panes
// as they were when the run ended (the verdict kept on the footer), and
// back; arrows scroll the pane in focus there.
func TestEndScreenShowsThePanesOnTab(t *testing.T) {
	m := withSnapshot(New(Options{}), naiveMidRollout())
	next, _ := m.Update(DoneMsg{Verdict: "FAIL", ExitCode: 1, Reasons: []string{"116 of 2860 requests failed, above the budget of 0"}})
	m = next.(Model)
	tab := func(m Model) Model {
		next, cmd := m.Update(tea.KeyPressMsg{Code: tea.KeyTab})
		if quits(cmd) {
			t.Fatal("tab on the end screen left")
		}
		return next.(Model)
	}
	lastLine := func(out string) string { lines := strings.Split(out, "\n"); return lines[len(lines)-1] }
	if out := render(m, 80, 24); !strings.Contains(out, "verdict: FAIL (exit 1)") || strings.Contains(out, "naive-5d45cdff87-gq7m2") {
		t.Fatalf("end screen before tab:\n%s", out)
	}
	m = tab(m)
	out := render(m, 80, 24)
	if !strings.Contains(out, "naive-5d45cdff87-gq7m2") || !strings.Contains(out, "outage: requests failing") ||
		strings.Contains(out, "verdict: FAIL") || !strings.HasPrefix(lastLine(out), "FAIL (exit 1)") || !strings.Contains(lastLine(out), "tab: events") {
		t.Fatalf("tab on the end screen shows the panes, the verdict on the footer:\n%s", out)
	}
	m = tab(m)
	if m.focus != paneLog || !strings.Contains(lastLine(render(m, 80, 24)), "tab: the verdict") {
		t.Fatalf("second tab: focus %v, footer %q", m.focus, lastLine(render(m, 80, 24)))
	}
	next, _ = m.Update(tea.KeyPressMsg{Code: tea.KeyUp})
	if m = next.(Model); m.scroll[paneLog] != 1 || m.bodyScroll != 0 {
		t.Fatalf("up on the events pane after the end: scroll %v, body %d", m.scroll, m.bodyScroll)
	}
	m = tab(m)
	if out := render(m, 80, 24); !strings.Contains(out, "verdict: FAIL (exit 1)") {
		t.Fatalf("third tab: back to the verdict:\n%s", out)
	}
	if _, cmd := m.Update(tea.KeyPressMsg{Code: 'q', Text: "q"}); !quits(cmd) {
		t.Fatal("q on the end screen must leave")
	}
}

// Sampling is paced by the model: one sample in flight, the next a frame
// after the last one arrived.
func TestSamplingCadence(t *testing.T) {
	calls := 0
	m := New(Options{Sample: func() Snapshot { calls++; return Snapshot{Phase: fmt.Sprint(calls)} }})
	msg := m.Init()()
	if calls != 1 {
		t.Fatal("Init samples once")
	}
	next, cmd := m.Update(msg)
	if next.(Model).snap.Phase != "1" || cmd == nil || calls != 1 {
		t.Fatal("a snapshot schedules a tick, not a sample")
	}
	_, cmd = next.Update(tickMsg(time.Now()))
	cmd()
	if calls != 2 {
		t.Fatal("a tick samples")
	}
}

// quits runs cmd (and a sequence's parts) looking for tea.Quit.
func quits(cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	msg := cmd()
	if _, ok := msg.(tea.QuitMsg); ok {
		return true
	}
	// tea.Sequence and tea.Batch return unexported slices of commands.
	if v := reflect.ValueOf(msg); v.Kind() == reflect.Slice {
		for i := 0; i < v.Len(); i++ {
			if c, ok := v.Index(i).Interface().(tea.Cmd); ok && quits(c) {
				return true
			}
		}
	}
	return false
}

// probe has no rollout: the pod table lists the backends that answered.
func TestGoldenProbe(t *testing.T) {
	s := Snapshot{Command: "probe", Target: "http://127.0.0.1:8080/", Phase: "probing", Elapsed: 3 * time.Second,
		TargetRate: 500, AchievedRate: 499.7, Sent: 1500, OK: 1497, Failed: 3, Classes: []ClassCount{{"http_5xx", 3}},
		Seconds: []Second{{500, 500, 0}, {500, 497, 3}, {500, 500, 0}},
		Pods:    []Pod{{Name: "web-1", Served: 751}, {Name: "web-2", Served: 749}}}
	out := render(withSnapshot(New(Options{}), s), 80, 24)
	golden.Check(t, "probe-80x24.txt", []byte(out+"\n"))
	if !strings.Contains(out, "backends (2)") || strings.Contains(out, "revision") {
		t.Fatalf("probe render:\n%s", out)
	}
}

// A long run's snapshot carries only the chart's tail: the chart, marks
// included, draws the same whatever second the tail starts at.
func TestChartTailStartsAnywhere(t *testing.T) {
	base := naiveMidRollout()
	shifted := naiveMidRollout()
	shifted.SecondsFrom = 1000
	for i := range shifted.Marks {
		shifted.Marks[i].Second += 1000
	}
	for _, size := range [][2]int{{80, 24}, {140, 30}} {
		want := render(withSnapshot(New(Options{}), base), size[0], size[1])
		got := render(withSnapshot(New(Options{}), shifted), size[0], size[1])
		if got != want {
			t.Errorf("%dx%d: the chart moved with SecondsFrom:\n%s\nwant\n%s", size[0], size[1], got, want)
		}
	}
}

// Probing from the cluster, a line under the merged counters shows each
// prober: its node, its rate, its failures, and a lost one as lost.
func TestProbersLine(t *testing.T) {
	s := naiveMidRollout()
	s.Probers = []fleet.Status{{Pod: "p-0", Node: "lab-node-1", Rate: 100, Sent: 900, Failed: 3},
		{Pod: "p-1", Node: "lab-node-2", Rate: 100, Sent: 800, Lost: "stream gap"}}
	out := render(withSnapshot(New(Options{}), s), 120, 30)
	if !strings.Contains(out, "probers  lab-node-1 100/s 3 failed  lab-node-2 100/s LOST") {
		t.Fatalf("no probers line:\n%s", out)
	}
	if strings.Contains(render(withSnapshot(New(Options{}), naiveMidRollout()), 120, 30), "probers") {
		t.Fatal("a probers line when probing from here")
	}
}

func TestPathsLine(t *testing.T) {
	s := naiveMidRollout()
	s.Paths = []PathCount{{Name: "svc", Sent: 1200}, {Name: "edge", Sent: 1190, Failed: 41}}
	out := render(withSnapshot(New(Options{}), s), 120, 30)
	if !strings.Contains(out, "paths  svc 1200 sent ok  edge 1190 sent 41 failed") {
		t.Fatalf("no paths line:\n%s", out)
	}
	if strings.Contains(render(withSnapshot(New(Options{}), naiveMidRollout()), 120, 30), "paths  ") {
		t.Fatal("a paths line for a run of one target")
	}
}

// The sampler reads each path's own recorder.
func TestSamplerPaths(t *testing.T) {
	whole, a, b := prober.NewRecorder(0), prober.NewRecorder(0), prober.NewRecorder(0)
	for i := range 3 {
		res := prober.Result{Seq: uint64(i + 1), Class: prober.OK, Status: 200}
		a.Record(&res)
		whole.Record(&res)
	}
	bad := prober.Result{Seq: 1, Class: prober.Refused}
	b.Record(&bad)
	whole.Record(&bad)
	now := time.Now()
	s := NewSampler(Source{Command: "probe", Start: now, Recorder: whole, Now: func() time.Time { return now },
		Paths: []PathRecorder{{"svc", a}, {"edge", b}}})
	got := s.Sample().Paths
	want := []PathCount{{"svc", 3, 0}, {"edge", 1, 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("paths %+v, want %+v", got, want)
	}
}

// Without a backend header, no response names its pod: the pods pane says
// served is unknown, never 0.
func TestServedIsUnknownWithoutABackendHeader(t *testing.T) {
	s := naiveMidRollout()
	s.ServedUnknown = true
	out := render(withSnapshot(New(Options{}), s), 100, 30)
	var rows int
	for _, line := range strings.Split(out, "\n") {
		for _, p := range s.Pods {
			if strings.Contains(line, p.Name+" ") && strings.Contains(line, p.Revision) && !strings.Contains(line, "pod "+p.Name) {
				rows++
				if !strings.Contains(line, "unknown") {
					t.Errorf("row %q: want served unknown", line)
				}
			}
		}
	}
	if rows == 0 {
		t.Fatalf("no pod row found:\n%s", out)
	}
}
