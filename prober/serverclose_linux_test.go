package prober

import (
	"io"
	"net"
	"testing"
	"time"
)

// The kernel's counters tell the two closes apart, deterministically: a
// server that closed before the request arrived never acknowledged it; a
// server that read it and closed had.
func TestServerCloseOf(t *testing.T) {
	for _, tc := range []struct {
		name        string
		readRequest bool // the server reads the request before closing
		want        ServerClose
	}{
		{"closed before the request (the keep-alive race)", false, CloseBeforeRequest},
		{"closed after reading it (cut in flight)", true, CloseAfterRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			request := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if tc.readRequest {
				if _, err := client.Write(request); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, len(request))
				if _, err := io.ReadFull(server, buf); err != nil {
					t.Fatal(err)
				}
				_ = server.Close()
			} else {
				_ = server.Close()
				// The FIN is in before the request goes out, as when an idle
				// connection's close and a request cross.
				waitReadable(t, client)
				if _, err := client.Write(request); err != nil {
					t.Fatal(err)
				}
			}
			_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := client.Read(make([]byte, 16)); n != 0 || err != io.EOF {
				t.Fatalf("read %d, %v; want EOF", n, err)
			}
			time.Sleep(20 * time.Millisecond) // the reset (or nothing) that follows: the answer must not change with it
			if got := serverCloseOf(client); got != tc.want {
				t.Fatalf("serverCloseOf = %v, want %v", got, tc.want)
			}
		})
	}
}

// waitReadable waits until the peer's FIN has arrived on c, without
// consuming it (a peek).
func waitReadable(t *testing.T, c net.Conn) {
	t.Helper()
	cn := &conn{raw: c, rw: c}
	for range 500 {
		rc, _ := c.(*net.TCPConn).SyscallConn()
		_ = rc.Control(func(fd uintptr) { cn.peekFn(fd) })
		if cn.peekClosed {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("the server's FIN never arrived")
}
