package cmd_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/internal/testbin"
	"github.com/rollprobe/rollprobe/internal/testenv"
	"github.com/rollprobe/rollprobe/internal/tmuxtest"
	"github.com/rollprobe/rollprobe/report"
)

// TestDashboardStopsOnQ runs probe with the dashboard in a tmux terminal,
// over HTTP/1.1 and over HTTP/2 (h2c, prior knowledge: the h2 engine's
// results feed the same view): it draws the live view, and q mid-run
// stops probing, writes the report marked interrupted and exits 130. (The
// lab's e2e test covers run's dashboard during a rollout.)
func TestDashboardStopsOnQ(t *testing.T) {
	testbin.Required(t)
	if !tmuxtest.Available() {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "needs tmux")
	}
	for _, protocol := range []string{"http1", "h2"} {
		t.Run(protocol, func(t *testing.T) {
			var url string
			if protocol == "h2" {
				url = h2cServer(t, "pod-a")
			} else {
				url = faultserver.New(t, "pod-a").URL("/ok")
			}
			dir := t.TempDir()
			reportPath, exitPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "exit")
			script := fmt.Sprintf("NO_COLOR=1 %s probe %s --protocol %s --ui tui --rate 100 --duration 60s --backend-header X-Pod-Name --report %s; echo $? > %s; sleep 30",
				binary, url, protocol, reportPath, exitPath)
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
			if err != nil || !rep.Interrupted || rep.Totals.Sent == 0 || rep.Totals.Failed != 0 || rep.Config.Protocol != protocol {
				t.Fatalf("report: %v %+v", err, rep)
			}
			// Back on the normal screen: the text summary, after the dashboard.
			if s := term.Screen(); !strings.Contains(s, "verdict: INTERRUPTED (exit 130)") {
				t.Fatalf("no summary after the dashboard:\n%s", s)
			}
		})
	}
}

// h2cServer serves HTTP/2 without TLS (prior knowledge) on loopback,
// naming itself in X-Pod-Name, until the test ends.
func h2cServer(t *testing.T, name string) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		w.Header().Set("X-Pod-Name", name)
		_, _ = w.Write([]byte("ok\n"))
	}))
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protocols
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/ok"
}

// TestDashboardEndScreenLosesNothing: when the dashboard shows the end of
// the run, its outputs already exist (it names only those), and the
// process ends on a closed terminal or SIGTERM while the end screen waits
// for a key. (Before, nothing was written until a key was pressed, and a
// dashboard whose terminal was gone ran on for hours, deaf to signals.)
func TestDashboardEndScreenLosesNothing(t *testing.T) {
	testbin.Required(t)
	if !tmuxtest.Available() {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "needs tmux")
	}
	for _, end := range []string{"terminal closed", "SIGTERM"} {
		t.Run(end, func(t *testing.T) {
			srv := faultserver.New(t, "pod-a")
			dir := t.TempDir()
			reportPath, junitPath, pidPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "j.xml"), filepath.Join(dir, "pid")
			script := fmt.Sprintf("echo $$ > %s; NO_COLOR=1 exec %s probe %s --ui tui --rate 50 --duration 1s --report %s --junit %s",
				pidPath, binary, srv.URL("/ok"), reportPath, junitPath)
			term := tmuxtest.Start(t, 200, 40, script)
			poll := func(what string, ok func() bool) {
				t.Helper()
				for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s; screen:\n%s", what, term.Screen())
					}
				}
			}
			pid := 0
			poll("no PID", func() bool {
				b, _ := os.ReadFile(pidPath)
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				return pid > 0
			})
			t.Cleanup(func() { // ours by PID, if it outlived the test
				if alive(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			poll("no end screen", func() bool {
				s := term.Screen()
				return strings.Contains(s, "verdict: PASS (exit 0)") && strings.Contains(s, "report: "+reportPath) && strings.Contains(s, "junit: "+junitPath)
			})
			// No key pressed: the files the screen names exist.
			if rep, err := report.ReadFile(reportPath); err != nil || rep.Totals.Sent == 0 || !rep.Verdict.Pass {
				t.Fatalf("the end screen names a report that is not there: %v", err)
			}
			if _, err := os.Stat(junitPath); err != nil {
				t.Fatalf("the end screen names a JUnit that is not there: %v", err)
			}
			if end == "SIGTERM" {
				if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			} else if err := term.Close(); err != nil { // tmux hangs up its panes: SIGHUP, the terminal gone
				t.Fatal(err)
			}
			poll("the dashboard outlived "+end, func() bool { return !alive(pid) })
		})
	}
}

// alive says whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}
