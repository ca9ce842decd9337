// Package faultserver is an HTTP/1.1 server for tests that fails on demand,
// in exactly the ways rollprobe classifies, and counts what it did so tests
// can compare the prober's counts with the server's own.
//
// The request path picks the behaviour:
//
//	/ok                 200 with a small body
//	/status/NNN         status NNN
//	/proxy-status/NNN   status NNN without X-Pod-Name, as a proxy in front of
//	                    the app answers when it cannot reach it
//	/reset              read the request, then reset the connection (SO_LINGER 0)
//	/close              read the request, then close without answering
//	/close-reused       answer the first request on a connection; close without
//	                    answering when a later request arrives on it
//	/answer-then-close  answer 200 (keep-alive), then close the connection at
//	                    once: the client's next request on it meets a closed
//	                    connection (the keep-alive race, on purpose)
//	/short              promise 100 body bytes, send 10, close
//	/cut-headers        send the status line and half a header line, close
//	/badchunk           chunked body with a malformed chunk size
//	/stall?ms=N         wait N ms, then answer 200
//	/slow-first?ms=N    stall N ms on the server's first request only, then 200
//
// Every other response carries X-Pod-Name with the server's name.
package faultserver

import (
	"bufio"
	"io"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Counts is what the server did.
type Counts struct {
	Conns     int64 // connections accepted
	Requests  int64 // complete requests read
	Answered  int64 // complete responses written
	Reset     int64 // connections reset after a request
	Closed    int64 // connections closed after reading a request, unanswered
	Truncated int64 // responses cut short on purpose
	// MaxInFlight is the most requests the server held at once (read,
	// not yet answered or dropped): a bound on the client's concurrency.
	MaxInFlight int64
}

// Server is a running fault server. Close it when done.
type Server struct {
	Name string
	ln   net.Listener
	addr string

	conns, requests, answered, reset, closed, truncated atomic.Int64
	inFlight, maxInFlight                               atomic.Int64
	firstStall                                          atomic.Bool

	mu      sync.Mutex
	open    map[net.Conn]struct{}
	peers   []netip.AddrPort // every client address accepted, in order
	auths   map[string]int   // Authorization header values received, with counts
	targets map[string]int   // request targets (path and query) received, with counts
	wg      sync.WaitGroup
}

// Start listens on a loopback port and serves until Close.
func Start(name string) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{Name: name, ln: ln, addr: ln.Addr().String(), open: map[net.Conn]struct{}{}, auths: map[string]int{}, targets: map[string]int{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// TB is the part of testing.TB New needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// New starts a server for a test (or benchmark) and closes it when the
// test ends, in the style of httptest.NewServer.
func New(t TB, name string) *Server {
	t.Helper()
	s, err := Start(name)
	if err != nil {
		t.Fatalf("faultserver: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return s.addr }

// URL returns http://addr + path.
func (s *Server) URL(path string) string { return "http://" + s.addr + path }

// Counts returns what the server has done so far.
func (s *Server) Counts() Counts {
	return Counts{
		Conns: s.conns.Load(), Requests: s.requests.Load(), Answered: s.answered.Load(),
		Reset: s.reset.Load(), Closed: s.closed.Load(), Truncated: s.truncated.Load(),
		MaxInFlight: s.maxInFlight.Load(),
	}
}

// Targets returns how many requests asked for each request target (the
// path and query as sent).
func (s *Server) Targets() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.targets)
}

// Authorizations returns how many requests carried each Authorization
// header value.
func (s *Server) Authorizations() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.auths)
}

// Peers returns the client address of every connection accepted so far:
// the server's own record of which source ports reached it.
func (s *Server) Peers() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]netip.AddrPort(nil), s.peers...)
}

// StopListening closes the listener: new connections are refused from now on
// while established ones keep being served.
func (s *Server) StopListening() { _ = s.ln.Close() }

// Close stops listening, cuts every connection and waits for the handlers.
func (s *Server) Close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.open {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.conns.Add(1)
		s.mu.Lock()
		s.open[c] = struct{}{}
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			s.peers = append(s.peers, a.AddrPort())
		}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *Server) forget(c net.Conn) {
	s.mu.Lock()
	delete(s.open, c)
	s.mu.Unlock()
	_ = c.Close()
}

func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer s.forget(c)
	br := bufio.NewReader(c)
	bw := bufio.NewWriter(c)
	// held: a request of this connection is in flight. It ends before
	// its answer is flushed or its connection closed, so the client can
	// never see it end while the server still counts it.
	held := false
	release := func() {
		if held {
			s.inFlight.Add(-1)
			held = false
		}
	}
	defer release() // before forget closes the connection
	for served := 0; ; served++ {
		target, closeAfter, auth, err := readRequest(br)
		if err != nil {
			return
		}
		s.requests.Add(1)
		held = true
		for n := s.inFlight.Add(1); ; {
			m := s.maxInFlight.Load()
			if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		s.mu.Lock()
		if auth != "" {
			s.auths[auth]++
		}
		s.targets[target]++
		s.mu.Unlock()
		u, err := url.Parse(target)
		if err != nil {
			// Not HTTP (a TLS ClientHello, say, whose random bytes can
			// split into three fields): answer as a server would, and close.
			_, _ = bw.WriteString("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			release()
			_ = bw.Flush()
			return
		}
		path := u.Path
		ms, _ := strconv.Atoi(u.Query().Get("ms"))
		status := 200
		switch {
		case path == "/reset":
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			s.reset.Add(1)
			return
		case path == "/close":
			s.closed.Add(1)
			return
		case path == "/close-reused" && served > 0:
			s.closed.Add(1)
			return
		case path == "/cut-headers":
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Len")
			release()
			_ = bw.Flush()
			s.truncated.Add(1)
			return
		case path == "/short":
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Pod-Name: " + s.Name + "\r\n\r\n0123456789")
			release()
			_ = bw.Flush()
			s.truncated.Add(1)
			return
		case path == "/badchunk":
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Pod-Name: " + s.Name + "\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
			release()
			_ = bw.Flush()
			s.truncated.Add(1)
			return
		case path == "/stall":
			time.Sleep(time.Duration(ms) * time.Millisecond)
		case path == "/slow-first":
			if s.firstStall.CompareAndSwap(false, true) {
				time.Sleep(time.Duration(ms) * time.Millisecond)
			}
		case strings.HasPrefix(path, "/status/"):
			status, _ = strconv.Atoi(strings.TrimPrefix(path, "/status/"))
		case strings.HasPrefix(path, "/proxy-status/"):
			status, _ = strconv.Atoi(strings.TrimPrefix(path, "/proxy-status/"))
		}
		body := "ok\n"
		_, _ = bw.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + statusText(status) + "\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
		if !strings.HasPrefix(path, "/proxy-status/") {
			_, _ = bw.WriteString("X-Pod-Name: " + s.Name + "\r\n")
		}
		if closeAfter {
			_, _ = bw.WriteString("Connection: close\r\n")
		}
		_, _ = bw.WriteString("\r\n" + body)
		release()
		if err := bw.Flush(); err != nil {
			return
		}
		s.answered.Add(1)
		if path == "/answer-then-close" {
			return
		}
		if closeAfter {
			return
		}
	}
}

func statusText(code int) string {
	switch {
	case code >= 500:
		return "Server Error"
	case code >= 400:
		return "Client Error"
	}
	return "OK"
}

// readRequest reads one request, discarding its headers and body. It
// returns the request target and whether the client asked to close.
func readRequest(br *bufio.Reader) (target string, closeConn bool, auth string, err error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", false, "", err
	}
	parts := strings.Fields(line)
	if len(parts) != 3 {
		return "", false, "", io.ErrUnexpectedEOF
	}
	var length int
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			return "", false, "", err
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		name, value, _ := strings.Cut(h, ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			length, _ = strconv.Atoi(value)
		case "connection":
			closeConn = strings.EqualFold(value, "close")
		case "authorization":
			auth = value
		}
	}
	if length > 0 {
		if _, err := br.Discard(length); err != nil {
			return "", false, "", err
		}
	}
	return parts[1], closeConn, auth, nil
}
