package faultserver

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// A request line whose target is not a URL (what a TLS handshake's random
// bytes can look like) gets a 400 and a close, not a crashed test binary.
func TestUnparsableTargetIsRefusedNotFatal(t *testing.T) {
	s, err := Start("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("GET %zz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 400 ") {
		t.Fatalf("status line %q, err %v", line, err)
	}
	// The server goes on serving.
	c2, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c2.Write([]byte("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c2).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200 ") {
		t.Fatalf("after a bad request: status line %q, err %v", line, err)
	}
}
