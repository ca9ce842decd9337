// Package tmuxtest runs a command in a detached tmux terminal of a given
// size, for tests that drive the dashboard as a user would: read the
// screen, press keys. Each terminal has a tmux server of its own (its own
// socket), ended by its PID, socket file removed, when the test ends.
package tmuxtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Available reports whether tmux is installed. Callers decide whether its
// absence skips or fails (CI installs it).
func Available() bool {
	_, err := exec.LookPath("tmux")
	return err == nil
}

// Term is one terminal running one command.
type Term struct {
	sock     string
	pid      int    // the tmux server's
	sockPath string // its socket file, which it leaves behind when killed
}

const session = "t"

var seq atomic.Int64

// Start runs script (with sh -c) in a w×h terminal. The test's cleanup
// ends the tmux server, and with it the script, by PID.
func Start(t testing.TB, w, h int, script string) *Term {
	t.Helper()
	x := &Term{sock: fmt.Sprintf("rollprobe-test-%d-%d", os.Getpid(), seq.Add(1))}
	if out, err := x.tmux("new-session", "-d", "-s", session, "-x", strconv.Itoa(w), "-y", strconv.Itoa(h), "sh", "-c", script); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	out, err := x.tmux("display-message", "-p", "-t", session, "#{pid} #{socket_path}")
	if pid, path, ok := strings.Cut(strings.TrimSpace(out), " "); err == nil && ok {
		x.sockPath = path
		x.pid, err = strconv.Atoi(pid)
	}
	if err != nil || x.pid <= 0 {
		_, _ = x.tmux("kill-server") // the only way left to end it
		t.Fatalf("tmux server PID: %v %q", err, out)
	}
	t.Cleanup(func() {
		if err := x.Close(); err != nil {
			t.Error(err)
		}
	})
	return x
}

func (x *Term) tmux(args ...string) (string, error) {
	out, err := exec.Command("tmux", append([]string{"-L", x.sock}, args...)...).CombinedOutput()
	return string(out), err
}

// Screen is what the terminal shows now, one line per row.
func (x *Term) Screen() string {
	out, _ := x.tmux("capture-pane", "-p", "-t", session)
	return out
}

// Keys types keys (tmux key names: "q", "C-c", "Tab").
func (x *Term) Keys(keys ...string) error {
	if out, err := x.tmux(append([]string{"send-keys", "-t", session}, keys...)...); err != nil {
		return fmt.Errorf("tmux send-keys %v: %w %s", keys, err, out)
	}
	return nil
}

// PID is the tmux server's process ID.
func (x *Term) PID() int { return x.pid }

// Close ends the tmux server (SIGTERM; it hangs up its panes' processes),
// waits for the process to be gone (SIGKILL after 5 s) and removes its
// socket file.
func (x *Term) Close() error {
	if x.pid <= 0 {
		return nil
	}
	pid := x.pid
	x.pid = 0
	defer os.Remove(x.sockPath)
	if err := syscall.Kill(pid, syscall.SIGTERM); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return fmt.Errorf("tmux server %d ignored SIGTERM for 5s; killed", pid)
}
