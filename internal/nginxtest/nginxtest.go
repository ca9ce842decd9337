// Package nginxtest runs a real nginx (Debian's nginx-light) for tests: in
// the foreground, one worker, in a directory of its own (its
// configuration, pid file, logs and temporary files), ours by PID and
// ended when the test ends if the test did not stop it.
package nginxtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

// Bin is nginx on PATH; without one the test is skipped (failed under
// ROLLPROBE_REQUIRE_NGINX=1, as CI runs).
func Bin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_NGINX", "no nginx on PATH (apt-get install nginx-light)")
	}
	return bin
}

// Nginx is one nginx of a test.
type Nginx struct {
	Bin string
	// Dir holds nginx.conf, nginx.pid, error.log and what the test's own
	// configuration writes there (an access log, say).
	Dir string

	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
}

// New makes the directory of an nginx not started yet: a test's
// configuration can name files in it (Dir) before Start.
func New(t testing.TB, bin string) *Nginx {
	return &Nginx{Bin: bin, Dir: t.TempDir()}
}

// Options is what a test puts in nginx.conf.
type Options struct {
	// HTTP is the http block's directives beyond the temporary files'
	// paths: log formats, access_log, upstreams, servers.
	HTTP string
	// ErrorLog is error_log's level ("warn" when empty).
	ErrorLog string
	// WorkerConnections bounds the worker's connections (1024 when 0).
	WorkerConnections int
	// Prefix, when set, runs nginx under it: ip netns exec NS, which
	// becomes nginx itself (its PID is nginx's master's).
	Prefix []string
}

// Start writes nginx.conf and runs nginx, returning once its listening
// sockets are open (nginx writes its pid file after opening them). The
// test's end stops it if the test did not (SIGQUIT, then SIGKILL after
// 5 s).
func (n *Nginx) Start(t testing.TB, o Options) {
	t.Helper()
	if o.ErrorLog == "" {
		o.ErrorLog = "warn"
	}
	if o.WorkerConnections == 0 {
		o.WorkerConnections = 1024
	}
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log %[2]s;
events { worker_connections %[3]d; }
http {
  client_body_temp_path %[1]s;
  proxy_temp_path %[1]s;
  fastcgi_temp_path %[1]s;
  uwsgi_temp_path %[1]s;
  scgi_temp_path %[1]s;
%[4]s
}
`, n.Dir, o.ErrorLog, o.WorkerConnections, o.HTTP)
	if err := os.WriteFile(n.conf(), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, o.Prefix...), n.Bin, "-c", n.conf(), "-p", n.Dir)
	n.cmd = exec.Command(args[0], args[1:]...)
	n.out = &lockedBuffer{}
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	t.Cleanup(func() {
		select {
		case <-n.exited:
		default:
			_ = n.cmd.Process.Signal(syscall.SIGQUIT) // graceful: the master ends its workers
			select {
			case <-n.exited:
			case <-time.After(5 * time.Second):
				_ = n.cmd.Process.Kill()
				<-n.exited
			}
		}
	})
	for range 200 {
		if _, err := os.Stat(filepath.Join(n.Dir, "nginx.pid")); err == nil {
			return
		}
		select {
		case <-n.exited:
			t.Fatalf("nginx exited: %s%s", n.out, n.errorLog())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("nginx did not start within 10 s: %s%s", n.out, n.errorLog())
}

// SignalCommand is nginx -s sig for this nginx (stop: fast; quit:
// graceful, its workers finish and close the logs), for a test that sends
// it from another goroutine.
func (n *Nginx) SignalCommand(sig string) *exec.Cmd {
	return exec.Command(n.Bin, "-c", n.conf(), "-p", n.Dir, "-s", sig)
}

// Signal sends nginx -s sig and, for stop and quit, waits for its master
// to exit.
func (n *Nginx) Signal(t testing.TB, sig string) {
	t.Helper()
	if out, err := n.SignalCommand(sig).CombinedOutput(); err != nil {
		t.Fatalf("nginx -s %s: %v: %s", sig, err, out)
	}
	if sig != "stop" && sig != "quit" {
		return
	}
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("nginx did not exit within 10 s of -s %s", sig)
	}
}

func (n *Nginx) conf() string { return filepath.Join(n.Dir, "nginx.conf") }

func (n *Nginx) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.Dir, "error.log"))
	return strings.TrimSpace(string(b))
}

// lockedBuffer is nginx's output, written by the process's copier and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
