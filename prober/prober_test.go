package prober

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/internal/testenv"
)

// probe runs a short bounded probe against target and returns the totals.
func probe(t *testing.T, target string, mutate func(*Config)) (*Prober, Snapshot) {
	t.Helper()
	return runTestProber(t, target, mutate, nil)
}

// runTestProber makes a prober for target (the tests' defaults, then
// mutate), lets prepare set what tests may set, runs it to the end, and
// returns it with its snapshot.
func runTestProber(t *testing.T, target string, mutate func(*Config), prepare func(*Prober)) (*Prober, Snapshot) {
	t.Helper()
	cfg := DefaultConfig()
	u, err := ParseTarget(target)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Target = u
	cfg.Rate = 200
	cfg.Duration = 500 * time.Millisecond
	cfg.Timeout = 2 * time.Second
	cfg.BackendHeader = "X-Pod-Name"
	cfg.Engine = engineOf(t)
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New(cfg, "rollprobe-test")
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(p)
	}
	if _, err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkEngine(t, p)
	return p, p.Recorder().Snapshot()
}

// forEachEngine runs body once per engine, as subtests named after it;
// the probers the body makes (probe, withEngine) take the engine from
// the test's name.
func forEachEngine(t *testing.T, body func(t *testing.T)) {
	testenv.Timed(t)
	for _, e := range []Engine{EngineLoops, EngineGoroutines} {
		t.Run(string(e), body)
	}
}

// engineOf is the engine a test's name asks for (forEachEngine), else
// the automatic choice.
func engineOf(t *testing.T) Engine {
	for _, part := range strings.Split(t.Name(), "/") {
		if e := Engine(part); e == EngineLoops || e == EngineGoroutines {
			return e
		}
	}
	return EngineAuto
}

// withEngine is cfg with the engine the test asks for.
func withEngine(t *testing.T, cfg Config) Config {
	cfg.Engine = engineOf(t)
	return cfg
}

// checkEngine fails a test whose prober ran on another engine than the
// one it asked for.
func checkEngine(t *testing.T, p *Prober) {
	t.Helper()
	if want := p.Config().Engine; want != EngineAuto && p.Engine() != want {
		t.Fatalf("ran on the %s engine, asked for %s", p.Engine(), want)
	}
}

func keepalive(c *Config) { c.Conn = ConnMode{FreshFraction: 0} }
func fresh(c *Config)     { c.Conn = ConnMode{FreshFraction: 1} }

// TestClassesMatchServerCounts drives the real engine against a server that
// fails on purpose and checks that every class the prober reports equals
// what the server itself did: nothing retried, nothing lost, nothing
// misattributed.
func TestClassesMatchServerCounts(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		tests := []struct {
			name  string
			path  string
			mode  func(*Config)
			class Class
			// server is the server-side count that must equal the class count.
			server func(faultserver.Counts) int64
		}{
			{"ok keepalive", "/ok", keepalive, OK, func(c faultserver.Counts) int64 { return c.Answered }},
			{"ok fresh", "/ok", fresh, OK, func(c faultserver.Counts) int64 { return c.Answered }},
			{"5xx", "/status/503", keepalive, HTTP5xx, func(c faultserver.Counts) int64 { return c.Answered }},
			{"5xx from a proxy", "/proxy-status/502", keepalive, Proxy5xx, func(c faultserver.Counts) int64 { return c.Answered }},
			{"unexpected status", "/status/404", keepalive, HTTPStatus, func(c faultserver.Counts) int64 { return c.Answered }},
			{"reset", "/reset", fresh, Reset, func(c faultserver.Counts) int64 { return c.Reset }},
			{"close before response, fresh", "/close", fresh, EOF, func(c faultserver.Counts) int64 { return c.Closed }},
			{"short body", "/short", fresh, Truncated, func(c faultserver.Counts) int64 { return c.Truncated }},
			{"broken chunking", "/badchunk", keepalive, Truncated, func(c faultserver.Counts) int64 { return c.Truncated }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv := faultserver.New(t, "pod-a")
				_, snap := probe(t, srv.URL(tt.path), tt.mode)
				srv.Close()
				got := srv.Counts()
				sent := snap.Totals.Sent()
				if sent < 50 {
					t.Fatalf("sent %d requests, want about 100", sent)
				}
				if n := snap.Totals.Classes[tt.class]; n != sent {
					t.Errorf("%s = %d of %d sent; by class %v", tt.class, n, sent, snap.Totals.Classes)
				}
				if want := tt.server(got); uint64(want) != sent {
					t.Errorf("server count %d != prober's %d (server %+v)", want, sent, got)
				}
				if uint64(got.Requests) != sent {
					t.Errorf("server read %d requests, prober sent %d: a retry or a lost request", got.Requests, sent)
				}
			})
		}
	})
}

// TestConnectTo: every connection goes to the given address while the
// target's name stays in the Host header and, over TLS, in the server name
// the certificate is verified for (httptest's certificate is for
// example.com): both engines for http, the goroutines for https. The
// server's own record of each request's Host is the referee; the name is
// never resolved.
func TestConnectTo(t *testing.T) {
	var hosts sync.Map
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := hosts.LoadOrStore(r.Host, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		w.Header().Set("X-Pod-Name", "edge")
	})
	count := func(host string) int64 {
		if n, ok := hosts.Load(host); ok {
			return n.(*atomic.Int64).Load()
		}
		return 0
	}
	plain := httptest.NewServer(handler)
	defer plain.Close()
	addr := plain.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	forEachEngine(t, func(t *testing.T) {
		before := count("edge.invalid:" + port)
		_, snap := probe(t, "http://edge.invalid:"+port+"/", func(c *Config) { c.ConnectTo, c.Rate, c.Duration = addr, 50, 200*time.Millisecond })
		if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[OK] != sent || uint64(count("edge.invalid:"+port)-before) != sent {
			t.Fatalf("ok %d of %d; the server saw Host edge.invalid:%s %d times (%v)", snap.Totals.Classes[OK], sent, port, count("edge.invalid:"+port)-before, snap.Totals.Classes)
		}
	})
	tlsSrv := httptest.NewTLSServer(handler)
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer tlsSrv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	tlsAddr := tlsSrv.Listener.Addr().String()
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	_, snap := probe(t, "https://example.com:"+tlsPort+"/", func(c *Config) {
		c.ConnectTo, c.CACert, c.Rate, c.Duration = tlsAddr, ca, 50, 200*time.Millisecond
	})
	if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[OK] != sent || uint64(count("example.com:"+tlsPort)) != sent {
		t.Fatalf("https: ok %d of %d, Host example.com seen %d times (%v)", snap.Totals.Classes[OK], sent, count("example.com:"+tlsPort), snap.Totals.Classes)
	}
	// A name the certificate does not carry fails verification: the name
	// given, not the address connected to, is what is verified.
	_, snap = probe(t, "https://other.invalid:"+tlsPort+"/", func(c *Config) {
		c.ConnectTo, c.CACert, c.Rate, c.Duration = tlsAddr, ca, 50, 200*time.Millisecond
	})
	if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[TLS] != sent {
		t.Fatalf("https to a name the certificate lacks: tls %d of %d (%v)", snap.Totals.Classes[TLS], sent, snap.Totals.Classes)
	}
}

// TestProxy5xxNeedsTheBackendHeader: a 5xx without the backend header is
// the proxy's only when the run expects the header on every response of
// the app; without --backend-header it stays http_5xx, and so does a 5xx
// that names the app. A 500 counts: Traefik sends one for a lost upstream
// (the lab's naive rollout through the edge showed it). A 4xx without the
// header stays http_status.
func TestProxy5xxNeedsTheBackendHeader(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	for _, tt := range []struct {
		path          string
		backendHeader string
		want          Class
	}{
		{"/proxy-status/503", "", HTTP5xx},
		{"/proxy-status/504", "X-Pod-Name", Proxy5xx},
		{"/proxy-status/500", "X-Pod-Name", Proxy5xx},
		{"/proxy-status/500", "", HTTP5xx},
		{"/status/502", "X-Pod-Name", HTTP5xx},
		{"/status/500", "X-Pod-Name", HTTP5xx},
		{"/proxy-status/404", "X-Pod-Name", HTTPStatus},
	} {
		_, snap := probe(t, srv.URL(tt.path), func(c *Config) {
			c.Rate, c.Duration, c.BackendHeader = 50, 200*time.Millisecond, tt.backendHeader
		})
		if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[tt.want] != sent {
			t.Errorf("%s with backend header %q: %s = %d of %d (%v)", tt.path, tt.backendHeader, tt.want, snap.Totals.Classes[tt.want], sent, snap.Totals.Classes)
		}
	}
}

// TestNoSilentRetryOnReusedConnection is the keep-alive race: the server
// closes a kept-alive connection when the next request arrives. net/http
// would replay such a request; the prober must report it as eof_reused and
// the server must see exactly as many requests as the prober sent.
func TestNoSilentRetryOnReusedConnection(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		srv := faultserver.New(t, "pod-a")
		_, snap := probe(t, srv.URL("/close-reused"), keepalive)
		srv.Close()
		got := srv.Counts()
		sent := snap.Totals.Sent()
		if uint64(got.Requests) != sent {
			t.Fatalf("server saw %d requests, prober sent %d", got.Requests, sent)
		}
		if snap.Totals.Classes[EOFReused] == 0 || snap.Totals.Classes[EOFReused] != uint64(got.Closed) {
			t.Fatalf("eof_reused = %d, server closed %d reused connections (classes %v)",
				snap.Totals.Classes[EOFReused], got.Closed, snap.Totals.Classes)
		}
		if snap.Totals.Classes[OK] != uint64(got.Answered) {
			t.Fatalf("ok = %d, server answered %d", snap.Totals.Classes[OK], got.Answered)
		}
	})
}

func TestRefusedWhenNothingListens(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		srv := faultserver.New(t, "pod-a")
		srv.StopListening()
		defer srv.Close()
		_, snap := probe(t, srv.URL("/ok"), fresh)
		if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[Refused] != sent {
			t.Fatalf("refused = %d of %d", snap.Totals.Classes[Refused], sent)
		}
		if c := srv.Counts(); c.Requests != 0 {
			t.Fatalf("server read %d requests through a closed listener", c.Requests)
		}
	})
}

func TestTimeoutWhenServerStalls(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		srv := faultserver.New(t, "pod-a")
		_, snap := probe(t, srv.URL("/stall?ms=3000"), func(c *Config) {
			c.Rate, c.Duration, c.Timeout = 20, 300*time.Millisecond, 200*time.Millisecond
		})
		if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[Timeout] != sent {
			t.Fatalf("timeout = %d of %d (%v)", snap.Totals.Classes[Timeout], sent, snap.Totals.Classes)
		}
	})
}

// unansweringAddr is a listener whose accept queue is full (it never
// accepts), so the kernel drops further SYNs: connection attempts to it get
// no answer.
func unansweringAddr(t *testing.T) *net.TCPAddr {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}
	for i := 0; i < 4; i++ { // fill the accept queue
		c, err := net.DialTimeout("tcp", addr.String(), 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	return addr
}

// TestConnectTimeout: connection attempts that get no answer.
func TestConnectTimeout(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		addr := unansweringAddr(t)
		_, snap := probe(t, "http://"+addr.String()+"/", func(c *Config) {
			fresh(c)
			c.Rate, c.Duration, c.ConnectTimeout = 20, 200*time.Millisecond, 100*time.Millisecond
		})
		sent := snap.Totals.Sent()
		if sent == 0 || snap.Totals.Classes[ConnectTimeout] != sent {
			t.Fatalf("connect_timeout = %d of %d (%v)", snap.Totals.Classes[ConnectTimeout], sent, snap.Totals.Classes)
		}
	})
}

func TestTLS(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Pod-Name", "tls-pod")
	}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer ts.Close()
	// Self-signed certificate, not trusted: a TLS failure, every time.
	_, snap := probe(t, ts.URL, func(c *Config) { c.Rate, c.Duration = 50, 200*time.Millisecond })
	if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[TLS] != sent {
		t.Fatalf("tls = %d of %d (%v)", snap.Totals.Classes[TLS], sent, snap.Totals.Classes)
	}
	// Trusted on request: every request succeeds and names its backend.
	_, snap = probe(t, ts.URL, func(c *Config) { c.Rate, c.Duration, c.Insecure = 50, 200*time.Millisecond, true })
	if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[OK] != sent || snap.Totals.Backends["tls-pod"] != sent {
		t.Fatalf("ok = %d of %d, backends %v", snap.Totals.Classes[OK], sent, snap.Totals.Backends)
	}
	// Trusted through its CA (--cacert): every request succeeds, verified.
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	_, snap = probe(t, ts.URL, func(c *Config) { c.Rate, c.Duration, c.CACert = 50, 200*time.Millisecond, caPEM })
	if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[OK] != sent {
		t.Fatalf("with its CA: ok = %d of %d (%v)", snap.Totals.Classes[OK], sent, snap.Totals.Classes)
	}
	// Another CA: the certificate does not chain to it.
	otherPEM := selfSignedCA(t)
	_, snap = probe(t, ts.URL, func(c *Config) { c.Rate, c.Duration, c.CACert = 50, 200*time.Millisecond, otherPEM })
	if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[TLS] != sent {
		t.Fatalf("with another CA: tls = %d of %d (%v)", snap.Totals.Classes[TLS], sent, snap.Totals.Classes)
	}
	// Plain HTTP server behind an https URL: the handshake reads garbage.
	srv := faultserver.New(t, "pod-a")
	_, snap = probe(t, "https://"+srv.Addr()+"/ok", func(c *Config) { c.Rate, c.Duration = 50, 200*time.Millisecond })
	if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[TLS] != sent {
		t.Fatalf("tls against plain HTTP = %d of %d (%v)", snap.Totals.Classes[TLS], sent, snap.Totals.Classes)
	}
}

// slowHandshakeListener holds each connection's first read (the
// ClientHello, under a TLS listener) for delay: a handshake that takes at
// least that long, after which the server answers at once.
type slowHandshakeListener struct {
	net.Listener
	delay time.Duration
}

func (l slowHandshakeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowFirstRead{Conn: c, delay: l.delay}, nil
}

type slowFirstRead struct {
	net.Conn
	delay time.Duration
	once  sync.Once
}

func (c *slowFirstRead) Read(b []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.delay) })
	return c.Conn.Read(b)
}

// A success's time from its request's write leaves its connection's
// opening out: against a server whose every handshake takes at least
// 300 ms, each second's success p99 from the write is at least that much
// below its service time's, over HTTP/1.1 and h2 (ALPN). Not a timing
// bound: each success's service time is its opening plus its time from the
// write, so the quantiles keep the gap (to the histograms' 3 digits).
func TestAfterWriteLeavesTheHandshakeOut(t *testing.T) {
	const delay = 300 * time.Millisecond
	for _, protocol := range []Protocol{HTTP1, H2} {
		t.Run(string(protocol), func(t *testing.T) {
			ts := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			ts.EnableHTTP2 = protocol == H2
			ts.Listener = slowHandshakeListener{ts.Listener, delay}
			ts.StartTLS()
			ts.Config.ErrorLog = log.New(io.Discard, "", 0)
			defer ts.Close()
			_, snap := probe(t, ts.URL, func(c *Config) {
				c.Rate, c.Duration, c.Insecure, c.Protocol, c.Conn = 20, 500*time.Millisecond, true, protocol, ConnMode{FreshFraction: 1}
				c.BackendHeader = ""
			})
			if ok := snap.Totals.Classes[OK]; ok == 0 || ok != snap.Totals.Sent() {
				t.Fatalf("ok %d of %d (%v)", ok, snap.Totals.Sent(), snap.Totals.Classes)
			}
			rows := 0
			for _, row := range snap.Rows {
				if row.Classes[OK] == 0 {
					continue
				}
				rows++
				if gap := row.OKServiceP99 - row.OKAfterWriteP99; row.OKAfterWriteP99 <= 0 || gap < delay*999/1000 {
					t.Errorf("second %d: success p99 %v from the send, %v from the write: want the write's at least %v less",
						row.Second, row.OKServiceP99, row.OKAfterWriteP99, delay)
				}
			}
			if rows == 0 {
				t.Fatalf("no second with a success: %+v", snap.Rows)
			}
		})
	}
}

// acceptEach listens on loopback until the test ends and hands each
// connection to handle on a goroutine of its own; handlers, when not nil,
// counts each one before it starts (so a Wait on it sees them all).
func acceptEach(t *testing.T, handlers *sync.WaitGroup, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if handlers != nil {
				handlers.Add(1)
			}
			go func() {
				if handlers != nil {
					defer handlers.Done()
				}
				handle(c)
			}()
		}
	}()
	return ln
}

// TestTLSCause: each way a handshake fails, made by a real server, is named
// by its cause.
func TestTLSCause(t *testing.T) {
	serve := func(t *testing.T, handle func(net.Conn)) string {
		return "https://" + acceptEach(t, nil, handle).Addr().String() + "/"
	}
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.EnableHTTP2 = false
	ts.StartTLS()
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer ts.Close()
	// No cipher suite the prober offers (TLS 1.2, a CBC-SHA256 suite Go's
	// client leaves out): the server refuses with a handshake_failure alert.
	noSuite := httptest.NewUnstartedServer(http.NotFoundHandler())
	noSuite.TLS = &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA256}}
	noSuite.StartTLS()
	noSuite.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer noSuite.Close()
	// net/http answers a ClientHello with a plain 400: not a TLS record.
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	for _, tt := range []struct {
		name   string
		target func(t *testing.T) string
		want   TLSCause
	}{
		{"untrusted certificate", func(*testing.T) string { return ts.URL }, TLSCauseCertificate},
		{"the server's alert", func(*testing.T) string { return noSuite.URL }, TLSCauseAlert},
		{"a plain-HTTP port", func(*testing.T) string { return "https://" + plain.Listener.Addr().String() + "/" }, TLSCauseNotTLS},
		{"closed during the handshake", func(t *testing.T) string {
			return serve(t, func(c net.Conn) { c.Close() })
		}, TLSCauseConnection},
		{"no handshake in time", func(t *testing.T) string {
			return serve(t, func(c net.Conn) { time.Sleep(2 * time.Second); c.Close() })
		}, TLSCauseHandshakeTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			target := tt.target(t)
			p, snap := probe(t, target, func(c *Config) {
				c.Rate, c.Duration, c.Timeout, c.ConnectTimeout = 20, 200*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
			})
			if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[TLS] != sent {
				t.Fatalf("tls %d of %d (%v)", snap.Totals.Classes[TLS], sent, snap.Totals.Classes)
			}
			for _, f := range p.Recorder().Failures() {
				if f.TLSCause != tt.want {
					t.Fatalf("seq %d: cause %q, want %q (%v)", f.Seq, f.TLSCause, tt.want, f.Err)
				}
			}
		})
	}
}

// A failure carries its connection's two ends. The server's own
// record of the client ports it accepted is the referee for a connection
// that got through; for a refused connect the port is the one bound before
// connect(2), and the remote is the address dialed.
func TestFailuresRecordTheirAddresses(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		srv := faultserver.New(t, "pod-a")
		p, _ := probe(t, srv.URL("/reset"), fresh)
		fails := p.Recorder().Failures()
		peers := map[netip.AddrPort]bool{}
		for _, a := range srv.Peers() {
			peers[a] = true
		}
		if len(fails) == 0 {
			t.Fatal("no failures from /reset")
		}
		for _, f := range fails {
			if f.Addr == nil || !peers[f.Addr.Local] || f.Addr.Remote.String() != srv.Addr() {
				t.Fatalf("failure %v: addresses %+v; the server accepted %d clients", f.Class, f.Addr, len(peers))
			}
		}

		// A failed status too: found in the server's log by its connection.
		for _, opt := range []func(*Config){fresh, keepalive} {
			p, _ = probe(t, srv.URL("/status/503"), opt)
			peers = map[netip.AddrPort]bool{}
			for _, a := range srv.Peers() {
				peers[a] = true
			}
			fails = p.Recorder().Failures()
			if len(fails) == 0 {
				t.Fatal("no failures from /status/503")
			}
			for _, f := range fails {
				if f.Class != HTTP5xx || f.Addr == nil || !peers[f.Addr.Local] || f.Addr.Remote.String() != srv.Addr() {
					t.Fatalf("failure %v: addresses %+v; the server accepted %d clients", f.Class, f.Addr, len(peers))
				}
			}
		}

		srv.StopListening()
		p, _ = probe(t, srv.URL("/ok"), fresh)
		ports := map[uint16]bool{}
		for _, f := range p.Recorder().Failures() {
			if f.Class != Refused || f.Addr == nil || f.Addr.Local.Port() == 0 || f.Addr.Remote.String() != srv.Addr() {
				t.Fatalf("refused failure without its addresses: %v %+v", f.Class, f.Addr)
			}
			// Refused by the loopback's TCP stack: a reset, read as such
			// (the queue read, empty).
			if runtime.GOOS == "linux" && (f.DialICMP == nil || f.DialICMP.From.IsValid()) {
				t.Fatalf("a reset's error queue: %+v", f.DialICMP)
			}
			ports[f.Addr.Local.Port()] = true
		}
		if len(ports) < 2 {
			t.Fatalf("every refused connect reported the same local port: %v", ports)
		}

		// A failure on a reused connection carries that connection's ends,
		// which the server accepted.
		srv2 := faultserver.New(t, "pod-b")
		p, _ = probe(t, srv2.URL("/close-reused"), keepalive)
		peers2 := map[netip.AddrPort]bool{}
		for _, a := range srv2.Peers() {
			peers2[a] = true
		}
		reused := 0
		for _, f := range p.Recorder().Failures() {
			if f.Fresh {
				continue
			}
			reused++
			if f.Addr == nil || !peers2[f.Addr.Local] || f.Addr.Remote.String() != srv2.Addr() {
				t.Fatalf("a failure on a reused connection without its addresses: %+v", f.Addr)
			}
		}
		if reused == 0 {
			t.Fatal("no failure on a reused connection")
		}
	})
}

// listenDrops is the kernel's count of SYNs dropped by full accept queues
// in the network namespace of the thread that reads it, which is where the
// test's sockets are (TcpExt ListenDrops). Not /proc/net/netstat: that is
// the main thread's namespace, which a test that parks the main thread in
// a namespace of its own would change for the rest of the process.
func listenDrops(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/thread-self/net/netstat")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) {
			continue
		}
		for j, n := range names {
			if n == "ListenDrops" {
				v, err := strconv.ParseInt(values[j], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatal("no TcpExt ListenDrops in /proc/net/netstat")
	return 0
}

// A connect whose first SYN is dropped succeeds on the retransmission, about
// a second later, and is counted as a slow connect. The kernel is the
// referee: a listener whose accept queue is full drops SYNs, and the
// client retransmits after its initial timeout (1 s).
func TestSlowConnectAfterARetransmittedSYN(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Listen(fd, 0); err != nil { // an accept queue of one
			t.Fatal(err)
		}
		ln, err := net.FileListener(os.NewFile(uintptr(fd), "listener"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		// Fill the accept queue: from now on the listener drops SYNs.
		var fillers []net.Conn
		for range 2 {
			c, err := net.DialTimeout("tcp", ln.Addr().String(), 200*time.Millisecond)
			if err == nil {
				fillers = append(fillers, c)
			}
		}
		if len(fillers) == 0 {
			t.Fatal("could not fill the accept queue")
		}
		// Drain the queue once the kernel has dropped a SYN (its
		// ListenDrops counter moved: the prober's first SYN), well before
		// the retransmission at 1 s, then answer every request. Waiting on
		// the event, not a fixed 300 ms: a busy machine may send later.
		drops := listenDrops(t)
		go func() {
			for deadline := time.Now().Add(5 * time.Second); listenDrops(t) == drops && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					buf := make([]byte, 4096)
					if n, _ := c.Read(buf); n > 0 {
						_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
					}
				}()
			}
		}()
		defer func() {
			for _, c := range fillers {
				c.Close()
			}
		}()
		_, snap := probe(t, "http://"+ln.Addr().String()+"/", func(c *Config) {
			c.Rate, c.Duration, c.Conn = 1, 500*time.Millisecond, ConnMode{FreshFraction: 1}
			c.BackendHeader = ""
		})
		if snap.Totals.Classes[OK] != 1 || snap.Totals.SlowConnects != 1 {
			t.Fatalf("ok %d, slow connects %d (classes %v); want the one request ok after a retransmitted SYN",
				snap.Totals.Classes[OK], snap.Totals.SlowConnects, snap.Totals.Classes)
		}
		if row := snap.Rows[0]; row.SlowConnects != 1 {
			t.Fatalf("second 0: slow connects %d", row.SlowConnects)
		}
		// The wait for the retransmission is the connection's opening: the
		// time from the write leaves it out (to the histograms' 3 digits).
		for _, row := range snap.Rows {
			if row.Classes[OK] > 0 && row.OKServiceP99-row.OKAfterWriteP99 < SlowConnectAfter*999/1000 {
				t.Fatalf("second %d: success p99 %v from the send, %v from the write", row.Second, row.OKServiceP99, row.OKAfterWriteP99)
			}
		}
	})
}

// Where a failure happened is told by what was read: headers cut mid-line
// fail in read_headers (with the status already read), a body cut short in
// read_body.
func TestPhaseOfACutResponse(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		srv := faultserver.New(t, "pod-a")
		for _, tc := range []struct {
			path  string
			phase Phase
		}{{"/cut-headers", PhaseReadHeaders}, {"/short", PhaseReadBody}} {
			p, _ := probe(t, srv.URL(tc.path), func(c *Config) { c.Rate, c.Duration, c.Conn = 10, 300*time.Millisecond, ConnMode{FreshFraction: 1} })
			fails := p.Recorder().Failures()
			if len(fails) == 0 {
				t.Fatalf("%s: no failures", tc.path)
			}
			for _, f := range fails {
				if f.Class != Truncated || f.Phase != tc.phase || f.Status != 200 {
					t.Fatalf("%s: %v in %v, status %d; want truncated in %v with status 200", tc.path, f.Class, f.Phase, f.Status, tc.phase)
				}
			}
		}
	})
}

// selfSignedCA is a fresh CA certificate (PEM) that signed nothing.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
