package main

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// h2Preface opens every HTTP/2 connection with prior knowledge (h2c).
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// splitListener hands each accepted connection to one of two listeners by
// its first bytes: the HTTP/2 preface to h2 (grpc-go's own server in
// --grpc mode, so its Stop and GracefulStop are what clients meet), the
// rest (HTTP/1.1: the kubelet's readiness checks, the lab's own GETs) to
// http1. One port serves both, as a real gRPC service's pod with an HTTP
// health endpoint does.
type splitListener struct {
	ln         net.Listener
	h2, http1  *chanListener
	closeOnce  sync.Once
	sniffLimit time.Duration
}

func newSplitListener(ln net.Listener) *splitListener {
	s := &splitListener{ln: ln, h2: newChanListener(ln.Addr()), http1: newChanListener(ln.Addr()), sniffLimit: 10 * time.Second}
	go s.accept()
	return s
}

func (s *splitListener) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.close()
			return
		}
		go s.route(c)
	}
}

// route reads until the connection's first bytes tell the two apart: the
// whole preface, or a byte that differs from it (an HTTP/1.1 request line
// does at once, however short the request).
func (s *splitListener) route(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.sniffLimit))
	head := make([]byte, 0, len(h2Preface))
	var err error
	for len(head) < len(h2Preface) && bytes.HasPrefix(h2Preface, head) && err == nil {
		var n int
		n, err = c.Read(head[len(head):cap(head)])
		head = head[:len(head)+n]
	}
	_ = c.SetReadDeadline(time.Time{})
	conn := &prefixedConn{Conn: c, prefix: head}
	switch {
	case bytes.Equal(head, h2Preface):
		s.h2.deliver(conn)
	case len(head) == 0 || (err != nil && bytes.HasPrefix(h2Preface, head)):
		_ = c.Close() // closed (or silent) before saying which
	default:
		s.http1.deliver(conn)
	}
}

// close closes the real listener (nothing new is accepted: new connects
// are refused) and both halves.
func (s *splitListener) close() {
	s.closeOnce.Do(func() {
		_ = s.ln.Close()
		s.h2.Close()
		s.http1.Close()
	})
}

// chanListener is a net.Listener fed connections by splitListener.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

var _ net.Listener = (*chanListener)(nil)

// prefixedConn is a connection whose first bytes were already read.
type prefixedConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
