package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/testbin"
)

var binary string

func TestMain(m *testing.M) { testbin.Main(m, "demoapp", ".", &binary) }

type app struct {
	cmd  *exec.Cmd
	addr string
	done chan error
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func start(t *testing.T, args ...string) *app {
	t.Helper()
	a := &app{addr: freeAddr(t), done: make(chan error, 1)}
	a.cmd = exec.Command(binary, append([]string{"--listen", a.addr, "--name", "pod-x"}, args...)...)
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() { _ = a.cmd.Process.Kill(); <-a.done })
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", a.addr); err == nil {
			c.Close()
			return a
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("demoapp did not listen")
	return nil
}

func (a *app) exited(within time.Duration) bool {
	select {
	case err := <-a.done:
		a.done <- err
		return true
	case <-time.After(within):
		return false
	}
}

// keptAlive opens a connection and completes one request on it.
func keptAlive(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Pod-Name") != "pod-x" {
		t.Fatalf("X-Pod-Name %q", resp.Header.Get("X-Pod-Name"))
	}
	return c, br
}

func TestImmediateExitsOnSIGTERM(t *testing.T) {
	testbin.Required(t)
	a := start(t, "--shutdown", "immediate")
	a.cmd.Process.Signal(syscall.SIGTERM)
	if !a.exited(2 * time.Second) {
		t.Fatal("still running after SIGTERM")
	}
	if _, err := net.Dial("tcp", a.addr); err == nil {
		t.Fatal("still accepting connections")
	}
}

func TestCloseCutsKeptAliveConnections(t *testing.T) {
	testbin.Required(t)
	a := start(t, "--shutdown", "close")
	c, br := keptAlive(t, a.addr)
	defer c.Close()
	a.cmd.Process.Signal(syscall.SIGTERM)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("kept-alive connection still open after Close")
	}
	if !a.exited(2 * time.Second) {
		t.Fatal("still running")
	}
}

func TestDrainKeepsServingWithConnectionClose(t *testing.T) {
	testbin.Required(t)
	a := start(t, "--shutdown", "drain=1s", "--unready-on-term")
	a.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(100 * time.Millisecond)
	resp, err := http.Get("http://" + a.addr + "/")
	if err != nil {
		t.Fatalf("not serving during the drain: %v", err)
	}
	resp.Body.Close()
	if !resp.Close {
		t.Error("responses during the drain must carry Connection: close")
	}
	ready, err := http.Get("http://" + a.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	ready.Body.Close()
	if ready.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d during the drain, want 503", ready.StatusCode)
	}
	if !a.exited(5 * time.Second) {
		t.Fatal("still running after the drain")
	}
}

func TestIgnoreSurvivesSIGTERM(t *testing.T) {
	testbin.Required(t)
	a := start(t, "--shutdown", "ignore")
	a.cmd.Process.Signal(syscall.SIGTERM)
	if a.exited(500 * time.Millisecond) {
		t.Fatal("exited on SIGTERM")
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	if !a.exited(2 * time.Second) {
		t.Fatal("survived SIGKILL")
	}
}

func TestReadyDelay(t *testing.T) {
	testbin.Required(t)
	a := start(t, "--ready-delay", "1h")
	resp, err := http.Get("http://" + a.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d before the ready delay, want 503", resp.StatusCode)
	}
	stats, err := http.Get("http://" + a.addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(stats.Body)
	stats.Body.Close()
	if !strings.Contains(string(b), "name=pod-x") {
		t.Fatalf("/stats: %s", b)
	}
}

func TestBadShutdownMode(t *testing.T) {
	for _, bad := range []string{"sometimes", "drain=", "drain=-1s"} {
		if _, _, err := parseShutdown(bad); err == nil {
			t.Errorf("parseShutdown(%q) accepted", bad)
		}
	}
}

// /unready fails the readiness endpoint for a while and nothing else: the
// pod goes on serving, as one whose probe timed out once under load.
func TestUnreadyFailsReadinessOnly(t *testing.T) {
	testbin.Required(t)
	a := start(t)
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get("http://" + a.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz %d before", got)
	}
	for _, bad := range []string{"/unready", "/unready?for=x", "/unready?for=-1s", "/unready?for=2m"} {
		if got := status(bad); got != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, got)
		}
	}
	if got := status("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz %d after refused requests", got)
	}
	if got := status("/unready?for=1m"); got != http.StatusOK {
		t.Fatalf("/unready: %d", got)
	}
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d while unready, want 503", got)
	}
	if got := status("/"); got != http.StatusOK {
		t.Errorf("/ %d while unready, want 200: it still serves", got)
	}
	// for=0s ends a spell at once.
	if got := status("/unready?for=0s"); got != http.StatusOK {
		t.Fatalf("/unready?for=0s: %d", got)
	}
	if got := status("/readyz"); got != http.StatusOK {
		t.Errorf("/readyz %d after for=0s, want 200", got)
	}
	// A short spell ends by itself (polled, bounded: no timing asserted).
	status("/unready?for=10ms")
	for i := 0; status("/readyz") != http.StatusOK; i++ {
		if i == 500 {
			t.Fatal("/readyz still failing 5 s after a 10ms spell")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// --upstream makes a proxy in front of an app: / goes through with the
// app's own X-Pod-Name (once), the proxy's /readyz stays its own, and with
// the app gone the proxy answers 502 itself.
func TestUpstreamProxiesToTheApp(t *testing.T) {
	testbin.Required(t)
	backend := start(t)
	proxy := start(t, "--upstream", "http://"+backend.addr, "--name", "proxy-z")
	resp, err := http.Get("http://" + proxy.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := resp.Header.Values("X-Pod-Name"); resp.StatusCode != 200 || len(got) != 1 || got[0] != "pod-x" || string(body) != "hello from pod-x\n" {
		t.Fatalf("through the proxy: %s, X-Pod-Name %q, body %q", resp.Status, got, body)
	}
	if resp, err := http.Get("http://" + proxy.addr + "/readyz"); err != nil || resp.Header.Get("X-Pod-Name") != "proxy-z" {
		t.Fatalf("/readyz: %v %v", resp, err)
	}
	_ = backend.cmd.Process.Kill()
	backend.exited(2 * time.Second)
	if resp, err := http.Get("http://" + proxy.addr + "/"); err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("with the app gone: %v %v, want 502", resp, err)
	}
}

func TestBadUpstream(t *testing.T) {
	testbin.Required(t)
	out, err := exec.Command(binary, "--listen", freeAddr(t), "--upstream", "127.0.0.1:9090").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "want http://HOST:PORT") {
		t.Fatalf("err %v, output %s", err, out)
	}
}
