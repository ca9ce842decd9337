package faultserver

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// statusLine sends raw on a new connection to s and returns the first line
// of the answer.
func statusLine(t *testing.T, s *Server, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", raw, err)
	}
	return line
}

// A request line whose target is not a URL (what a TLS handshake's random
// bytes can look like) gets a 400 and a close, not a crashed test binary.
func TestUnparsableTargetIsRefusedNotFatal(t *testing.T) {
	s, err := Start("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if line := statusLine(t, s, "GET %zz HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(line, "HTTP/1.1 400 ") {
		t.Fatalf("status line %q", line)
	}
	// The server goes on serving.
	if line := statusLine(t, s, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(line, "HTTP/1.1 200 ") {
		t.Fatalf("after a bad request: status line %q", line)
	}
}
