package tmuxtest

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

// A terminal shows its command's output, takes keys, and Close leaves no
// tmux server behind.
func TestTermShowsTakesKeysAndEnds(t *testing.T) {
	if !Available() {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "needs tmux")
	}
	x := Start(t, 40, 10, "echo ready; read line; echo got $line; sleep 30")
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(x.Screen(), want); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q on screen:\n%s", want, x.Screen())
			}
		}
	}
	waitFor("ready")
	if err := x.Keys("hello", "Enter"); err != nil {
		t.Fatal(err)
	}
	waitFor("got hello")
	pid, sock := x.PID(), x.sockPath
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("socket %q: %v", sock, err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("tmux server %d still there after Close: %v", pid, err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket %q left behind: %v", sock, err)
	}
}
