package prober

import (
	"net"
	"net/netip"
	"net/url"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// idleConnOn makes a loop holding one idle kept-alive connection: the
// client side of a loopback pair, whose server side the test controls.
func idleConnOn(t *testing.T) (*loop, *loopConn, net.Conn) {
	t.Helper()
	client, server := tcpPair(t)
	sc, err := client.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	_ = sc.Control(func(f uintptr) { fd, err = syscall.Dup(int(f)) })
	if err != nil {
		t.Fatal(err)
	}
	l := &loop{p: &Prober{}}
	c := l.newConn(fd)
	c.state = connIdle
	l.kept++
	l.idle.push(c)
	t.Cleanup(func() { l.closeAll() })
	return l, c, server
}

// A loop running late does not reuse an idle connection on the word of
// an old poll: the server's FIN may have come since. On time, it takes
// the poll's word (no system call); late, a peek finds the FIN first.
func TestLateLoopConfirmsReuse(t *testing.T) {
	l, c, server := idleConnOn(t)
	server.Close() // the FIN, which no poll has seen
	time.Sleep(50 * time.Millisecond)
	l.polledAt = time.Second
	if got := l.reusable(time.Second); got != c {
		t.Fatal("on time, reuse should rest on the last poll alone")
	}
	l.idle.push(c)
	if got := l.reusable(time.Second + 5*time.Millisecond); got != nil {
		t.Fatal("running late, a connection the server closed was taken for reuse")
	}
	if c.state != connFree || l.kept != 0 {
		t.Fatalf("the closed connection was not closed: state %d, kept %d", c.state, l.kept)
	}
}

// A late peek at an idle connection that is still open finds it reusable.
func TestLateLoopReusesAnOpenConnection(t *testing.T) {
	l, c, _ := idleConnOn(t)
	if got := l.reusable(time.Second); got != c {
		t.Fatal("an open idle connection was not reused after a late peek")
	}
}

// The idle queue gives the connection idle longest first and skips one
// closed (or reused) since it was queued.
func TestIdleQueueOldestFirst(t *testing.T) {
	l := &loop{p: &Prober{}}
	var cs []*loopConn
	for range 3 {
		c := l.newConn(-1)
		c.state = connIdle
		l.kept++
		l.idle.push(c)
		cs = append(cs, c)
	}
	l.closeConn(cs[0])
	if got := l.idle.pop(); got != cs[1] {
		t.Fatalf("popped slot %d, want the oldest open one (slot %d)", got.slot, cs[1].slot)
	}
	reused := l.newConn(-1) // takes cs[0]'s slot: its queue entry is stale
	reused.state = connIdle
	if got := l.idle.pop(); got != cs[2] {
		t.Fatalf("popped slot %d, want slot %d", got.slot, cs[2].slot)
	}
	if got := l.idle.pop(); got != nil {
		t.Fatalf("popped slot %d from an empty queue", got.slot)
	}
}

// The peak window keeps the busiest in-flight count of the last ten
// seconds, and forgets older ones.
func TestPeakWindow(t *testing.T) {
	var w peakWindow
	w.note(500*time.Millisecond, 7)
	w.note(1200*time.Millisecond, 3)
	if m := w.max(2 * time.Second); m != 7 {
		t.Fatalf("max %d, want 7", m)
	}
	if m := w.max(10*time.Second + 600*time.Millisecond); m != 3 {
		t.Fatalf("after 10 s: max %d, want 3 (the peak at 0.5 s is forgotten)", m)
	}
	if m := w.max(time.Minute); m != 0 {
		t.Fatalf("after a minute: max %d, want 0", m)
	}
}

// Which targets the loops serve, and why not the others.
func TestLoopTarget(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // the address, or "" when the goroutines serve it
	}{
		{"http://127.0.0.1:8080/x", "127.0.0.1:8080"},
		{"http://10.96.0.10/", "10.96.0.10:80"},
		{"http://[::1]:81/", "[::1]:81"},
		{"http://[::ffff:10.0.0.1]:80/", "10.0.0.1:80"},
		{"https://127.0.0.1/", ""},
		{"http://localhost:8080/", ""},
		{"http://[fe80::1%25eth0]:80/", ""},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		addr, why := loopTarget(&Config{Target: u})
		got := ""
		if why == "" {
			got = addr.String()
		}
		if got != tc.want || (got == "") == (why == "") {
			t.Errorf("%s: %q (%s), want %q", tc.url, got, why, tc.want)
		}
	}
}

// A connect to a local port nothing listens on, from that same port,
// reaches its own socket (TCP's simultaneous open). The loops must see it
// and report a refusal, never read their own request back as a response.
func TestLoopsTellASelfConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close() // nothing listens there now
	_, snap := runTestProber(t, "http://"+target.String()+"/", func(c *Config) {
		c.Rate, c.Duration, c.Conn, c.Engine = 20, 300*time.Millisecond, ConnMode{FreshFraction: 1}, EngineLoops
	}, func(p *Prober) { p.bindPort = target.Port() })
	tot := snap.Totals
	if tot.Sent() == 0 || tot.Classes[Refused] != tot.Sent() {
		t.Fatalf("classes %v of %d sent: want every attempt refused", tot.Classes, tot.Sent())
	}
}

// The closed model's P tuner moves slots between loops while requests are
// in flight: never more in flight than the concurrency, none lost or sent
// twice, and one loop for each P the tuner may try.
func TestTunerMovesSlotsBetweenLoops(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0)) // the tuner sets it for the whole process
	srv := startServer(t)
	// Requests held 20 ms: when a quota moves, the slots the first loop
	// still holds are certainly in flight while the second takes its own.
	p, snap := probe(t, srv.URL("/stall?ms=20"), func(c *Config) {
		c.Rate, c.Concurrency, c.TuneProcs, c.Duration, c.Engine = 0, 8, 2, 2500*time.Millisecond, EngineLoops
	})
	srv.Close()
	got := srv.Counts()
	sent := snap.Totals.Sent()
	if sent < 100 || snap.Totals.Classes[OK] != sent {
		t.Fatalf("sent %d, classes %v", sent, snap.Totals.Classes)
	}
	if uint64(got.Requests) != sent || uint64(got.Answered) != sent {
		t.Fatalf("the server read %d and answered %d of the %d the prober sent", got.Requests, got.Answered, sent)
	}
	if got.MaxInFlight > 8 {
		t.Fatalf("the server held %d requests at once: more than the concurrency of 8", got.MaxInFlight)
	}
	if n := len(p.loops.loops); n != 2 {
		t.Fatalf("%d loops, want one per P the tuner may try (2)", n)
	}
}

// An event on an idle connection closes it only for what it says: a FIN,
// a hang-up or an error at once; input only if something is there (an
// edge-triggered set can report input a read already took); output never.
func TestIdleConnectionEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events uint32
		server func(net.Conn)
		closed bool
	}{
		{"stale input: nothing there", evIn, nil, false},
		{"output only", evOut, nil, false},
		{"unsolicited bytes", evIn, func(s net.Conn) { _, _ = s.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n")) }, true},
		{"the server's FIN", evIn | evRDHUP, func(s net.Conn) { s.Close() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c, server := idleConnOn(t)
			if tc.server != nil {
				tc.server(server)
				time.Sleep(20 * time.Millisecond) // on loopback, delivered long before
			}
			l.event(c, tc.events)
			if closed := c.state == connFree; closed != tc.closed {
				t.Fatalf("closed %v, want %v", closed, tc.closed)
			}
		})
	}
}

// The event loops hold the source port of every connect they class
// connect_timeout (see portHold): their own deadline, and the kernel's
// EHOSTUNREACH when a vanished pod's neighbour never answered; a refused
// connect holds nothing (its entry is closed, and the port's next SYN
// makes a new one).
func TestLoopHoldsTheUnansweredConnectsPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		held bool
	}{
		{"its own deadline", opErr("dial", syscall.ETIMEDOUT), true},
		{"no neighbour", opErr("connect", syscall.EHOSTUNREACH), true},
		{"refused", opErr("connect", syscall.ECONNREFUSED), false},
	} {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		port := uint16(sa.(*syscall.SockaddrInet4).Port)
		p := &Prober{dialer: &dialer{}, start: time.Now()}
		l := &loop{e: &loopEngine{p: p}, p: p, stream: NewRecorder(10).NewStream()}
		c := l.newConn(fd)
		c.state, c.oneRequest = connConnecting, true
		c.addr = ConnAddr{Local: netip.AddrPortFrom(netip.IPv4Unspecified(), port), Remote: netip.MustParseAddrPort("10.96.0.10:80")}
		l.inflight = 1
		l.fail(c, PhaseDial, tc.err)
		held := p.dialer.holds.ports()
		if got := len(held) == 1 && held[0] == port; got != tc.held {
			t.Errorf("%s: held %v, want port %d held %v", tc.name, held, port, tc.held)
		}
		p.dialer.holds.release()
	}
}
