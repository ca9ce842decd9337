package cmd_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/internal/tmuxtest"
	"github.com/rollprobe/rollprobe/report"
)

// TestDashboardStopsOnQ runs probe with the dashboard in a tmux terminal:
// it draws the live view, and q mid-run stops probing, writes the report
// marked interrupted and exits 130. (The lab's e2e test covers run's
// dashboard during a rollout.)
func TestDashboardStopsOnQ(t *testing.T) {
	if !tmuxtest.Available() {
		if os.Getenv("CI") != "" {
			t.Fatal("CI installs tmux (.ci/run): the dashboard test must not skip there")
		}
		t.Skip("needs tmux")
	}
	srv := faultserver.New(t, "pod-a")
	dir := t.TempDir()
	reportPath, exitPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "exit")
	script := fmt.Sprintf("NO_COLOR=1 %s probe %s --ui tui --rate 100 --duration 60s --backend-header X-Pod-Name --report %s; echo $? > %s; sleep 30",
		binary, srv.URL("/ok"), reportPath, exitPath)
	term := tmuxtest.Start(t, 80, 24, script)

	poll := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s; screen:\n%s", what, term.Screen())
			}
		}
	}
	poll("no live view", func() bool {
		s := term.Screen()
		return strings.Contains(s, "● PROBING") && strings.Contains(s, "backends (1)") && strings.Contains(s, "pod-a")
	})
	if err := term.Keys("q"); err != nil {
		t.Fatal(err)
	}
	var code string
	poll("no exit after q", func() bool {
		b, err := os.ReadFile(exitPath)
		code = strings.TrimSpace(string(b))
		return err == nil && code != ""
	})
	if code != "130" {
		t.Fatalf("exit %s after q mid-run, want 130", code)
	}
	rep, err := report.ReadFile(reportPath)
	if err != nil || !rep.Interrupted || rep.Totals.Sent == 0 || rep.Totals.Failed != 0 {
		t.Fatalf("report: %v %+v", err, rep)
	}
	// Back on the normal screen: the text summary, after the dashboard.
	if s := term.Screen(); !strings.Contains(s, "verdict: INTERRUPTED (exit 130)") {
		t.Fatalf("no summary after the dashboard:\n%s", s)
	}
}
