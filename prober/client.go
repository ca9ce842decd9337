package prober

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// readBufferSize is the per-connection read buffer; one response's headers
// must fit in it.
const readBufferSize = 16 << 10

// conn is one client connection, owned by a single worker.
type conn struct {
	raw      net.Conn // the TCP connection, for liveness checks
	rw       net.Conn // raw, or the TLS connection over it
	br       *bufio.Reader
	born     time.Duration // run offset at which it was established
	dialed   time.Duration // run offset at which its dial began
	log      *ConnLog      // noted in when closed (nil: not asked for)
	addr     ConnAddr      // its two ends, for the failures on it
	served   uint32        // requests completed on it
	idleFrom time.Duration // run offset at which its last response ended

	// Liveness: with a closeWatcher, peerGone is set when the server closes
	// the connection; without one, peerClosed peeks at the socket.
	watcher    *closeWatcher
	watchToken uint64
	peerGone   atomic.Bool
	sys        syscall.RawConn
	peek       func(fd uintptr) bool
	peekBuf    [1]byte
	peekClosed bool
}

// newConn wraps an established connection, reading through br (reset to
// it) or, when br is nil, a new buffer. reusable connections are
// registered with the close watcher (when there is one).
func newConn(raw, rw net.Conn, born time.Duration, watcher *closeWatcher, reusable bool, br *bufio.Reader) *conn {
	if br == nil {
		br = bufio.NewReaderSize(rw, readBufferSize)
	} else {
		br.Reset(rw)
	}
	c := &conn{raw: raw, rw: rw, born: born, br: br}
	sc, ok := raw.(syscall.Conn)
	if !ok || !reusable {
		return c
	}
	sys, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	c.sys = sys
	c.peek = c.peekFn
	if watcher != nil {
		_ = sys.Control(func(fd uintptr) { c.watchToken = watcher.watch(int(fd), &c.peerGone) })
		if c.watchToken != 0 {
			c.watcher = watcher
		}
	}
	return c
}

func (c *conn) close() {
	c.log.Note(c.addr, c.dialed, c.born, c.served)
	if c.watcher != nil {
		c.watcher.unwatch(c.watchToken)
	}
	_ = c.rw.Close()
}

// abort closes the connection with a reset rather than a FIN (SO_LINGER
// 0): for a connection given up on while its peer was silent. A FIN to a
// peer that is gone orphans the socket, retransmitting, and leaves
// conntrack's entry half closed (FIN_WAIT, 120 s), a state a new SYN of
// the same tuple joins past kube-proxy's rules (kubernetes#101607): once
// the orphan dies, the port's next connection to the Service would follow
// the entry to the vanished pod. An entry our own reset closed is replaced
// by the next SYN of its tuple instead.
func (c *conn) abort() {
	if tc, ok := c.raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.close()
}

// idleCheckAfter: without a close watcher, a kept-alive connection idle for
// longer than this is peeked at before reuse (one recvfrom(2)). Closes that
// land within this window, or while the request is in flight, are the
// keep-alive race and are reported as eof_reused; no client can avoid those
// without retrying.
const idleCheckAfter = time.Millisecond

// lateAfter: a worker starting a request this late against its intended
// time is running on a starved machine, where the close watcher may not
// have run since the server's FIN arrived; reuse is then confirmed with a
// peek at the socket.
const lateAfter = time.Millisecond

// reusable reports whether c can carry another request: the server has not
// closed it (or sent something unsolicited) while it sat idle since idleFrom.
// On time, the close watcher's word is taken (no system call); running late
// (lag over lateAfter), or without a watcher after idleCheckAfter, a
// non-blocking MSG_PEEK confirms it, so a connection the server closed
// before the request is written is never used (measured here: under a load
// of 13 on 2 cores the FIN came 6-14 ms before such writes).
func (c *conn) reusable(now, lag time.Duration) bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.watcher != nil {
		if c.peerGone.Load() {
			return false
		}
		if lag <= lateAfter {
			return true
		}
	} else if c.peek == nil || now-c.idleFrom <= idleCheckAfter {
		return true
	}
	if c.peek == nil {
		return true
	}
	c.peekClosed = false
	if err := c.sys.Read(c.peek); err != nil {
		return false
	}
	return !c.peekClosed
}

// peekFn is a non-blocking MSG_PEEK; made once per connection so the check
// allocates nothing.
func (c *conn) peekFn(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	// n == 0 with no error is EOF; data (n > 0) on an idle connection is
	// unsolicited (a 408, say): either way the connection is not reusable.
	c.peekClosed = err == nil || (err != syscall.EAGAIN && err != syscall.EINTR)
	_ = n
	return true
}

// requestTemplate holds the bytes of a request around the per-request ID, so
// building a request is two appends and a number.
type requestTemplate struct {
	keepAlive []byte // request line and headers up to the ID header's value
	close     []byte // the same with Connection: close
	suffix    []byte // CRLF after the ID, end of headers, body
	idPrefix  string // run ID and dash
	isHead    bool
}

func newRequestTemplate(cfg *Config, runID, userAgent string) *requestTemplate {
	u := cfg.Target
	path := u.RequestURI()
	var head strings.Builder
	head.WriteString(cfg.Method + " " + path + " HTTP/1.1\r\n")
	host := u.Host
	if h := cfg.Header.Get("Host"); h != "" {
		host = h
	}
	head.WriteString("Host: " + host + "\r\n")
	if cfg.Header.Get("User-Agent") == "" {
		head.WriteString("User-Agent: " + userAgent + "\r\n")
	}
	for name, values := range cfg.Header {
		if strings.EqualFold(name, "Host") || strings.EqualFold(name, cfg.RequestIDHeader) {
			continue
		}
		for _, v := range values {
			head.WriteString(name + ": " + v + "\r\n")
		}
	}
	if u.User != nil && cfg.Header.Get("Authorization") == "" {
		// Credentials in the URL are sent as Basic auth, as curl does
		// (an explicit -H Authorization wins); they are shown nowhere.
		pass, _ := u.User.Password()
		head.WriteString("Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass)) + "\r\n")
	}
	if len(cfg.Body) > 0 || cfg.Method == "POST" || cfg.Method == "PUT" || cfg.Method == "PATCH" {
		head.WriteString("Content-Length: " + strconv.Itoa(len(cfg.Body)) + "\r\n")
	}
	base := head.String()
	idHeader := cfg.RequestIDHeader + ": "
	return &requestTemplate{
		keepAlive: []byte(base + idHeader),
		close:     []byte(base + "Connection: close\r\n" + idHeader),
		suffix:    append([]byte("\r\n\r\n"), cfg.Body...),
		idPrefix:  runID + "-",
		isHead:    cfg.Method == "HEAD",
	}
}

// build appends the request with sequence number seq to dst.
func (t *requestTemplate) build(dst []byte, seq uint64, closeConn bool) []byte {
	if closeConn {
		dst = append(dst, t.close...)
	} else {
		dst = append(dst, t.keepAlive...)
	}
	dst = append(dst, t.idPrefix...)
	dst = strconv.AppendUint(dst, seq, 10)
	return append(dst, t.suffix...)
}

// dialer opens connections to the target.
type dialer struct {
	address string // host:port
	tls     *tls.Config
	net     net.Dialer
	// holds keeps the ports of unanswered connects from being reused
	// while conntrack remembers where they went.
	holds portHold
	// dialled: where the connections were sent (Summary.Dialled).
	dialled *dialledSet
}

// dialSlot is a worker's own view of the dialer: a copy of the prober's
// net.Dialer whose control hook records each connection attempt here. One
// per worker, made once, so a dial allocates nothing to pass them (a
// context value would, on every fresh connection).
type dialSlot struct {
	// addr is the last dial's addresses: the connection's, or the failed
	// attempt's whose error the dial returned (endDial).
	addr ConnAddr
	net  net.Dialer
	// handshakeSince is when the TLS handshake in progress began (Unix
	// nanoseconds; 0 when none is): the pool's growth reads it (see
	// handshakingBriefly).
	handshakeSince atomic.Int64
	// dialled is the dialer's set; dialledSeen what this slot noted in it.
	dialled     *dialledSet
	dialledSeen []netip.AddrPort
	// mu guards attempts and dialing. attempts are the current dial's
	// connection attempts in the order begun: a name's dial tries its
	// addresses in turn (and an IPv4 and an IPv6 address on two goroutines
	// at once) and reports the first one's error, so the failure's
	// addresses and error queue must be that attempt's, not the last's.
	// dialing: a dial is under way (a socket the dialer makes after it
	// ended, a losing attempt of a dual-stack name, is neither kept nor
	// connected: see bindEphemeral). The slice is reused from dial to dial.
	mu       sync.Mutex
	attempts []dialAttempt
	dialing  bool
	// icmp is what the last failed dial's error queue held (Result.DialICMP).
	icmp *DialICMP
}

// dialAttempt is one connect of a dial: its addresses, and until it is
// read a duplicate of its socket's fd (so that the error queue can be read
// after a failed connect, when the dialer has closed the socket; -1 when
// none), armed when it is an IPv6 socket asked to queue ICMPv6 errors.
// Once a later attempt of the same family has begun this one has ended
// (the dialer tries one family's addresses in turn): its queue is read
// into queued and the duplicate closed, so that an unanswered socket does
// not go on sending SYNs while the next address is tried.
type dialAttempt struct {
	addr   ConnAddr
	fd     int
	armed  bool
	v6     bool
	read   bool // queued holds the queue's reading
	queued *DialICMP
}

// newSlot makes a worker's slot.
func (d *dialer) newSlot() *dialSlot {
	s := &dialSlot{net: d.net, dialled: d.dialled}
	s.net.ControlContext = s.bindEphemeral
	return s
}

// bindEphemeral binds the socket to an ephemeral port before connect(2)
// and records it with the resolved remote address, so that a connect that
// fails (refused, timed out) can still be found by its source port in a
// capture or in conntrack: without the bind the kernel picks the port
// inside connect(2) and it is gone with the socket. Two system calls per
// fresh connection (bind, getsockname); a failure here only loses the
// evidence, never the request.
//
// An attempt whose context is canceled belongs to a dial that has ended:
// the losing racer of a dual-stack name (the dialer cancels it as it
// returns the winner), which can reach here after this slot's next dial
// began. It is not kept, and its socket is closed before connect(2): a SYN
// from it would go out on a port no dial records. The check is made under
// mu, which endDial takes after the dialer returned (and so after the
// cancel): an attempt that sees its context live is in the current dial.
func (s *dialSlot) bindEphemeral(ctx context.Context, network, address string, c syscall.RawConn) error {
	var a dialAttempt
	a.fd, a.v6 = -1, network == "tcp6"
	a.addr.Remote, _ = netip.ParseAddrPort(address)
	_ = c.Control(func(fd uintptr) {
		var wildcard syscall.Sockaddr = &syscall.SockaddrInet4{}
		if a.v6 {
			wildcard = &syscall.SockaddrInet6{}
		}
		a.fd, a.armed = keepForICMP(int(fd), a.v6)
		if syscall.Bind(int(fd), wildcard) != nil {
			return
		}
		switch sa, _ := syscall.Getsockname(int(fd)); sa := sa.(type) {
		case *syscall.SockaddrInet4:
			a.addr.Local = netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(sa.Port))
		case *syscall.SockaddrInet6:
			a.addr.Local = netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(sa.Port))
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); !s.dialing || errors.Is(err, context.Canceled) {
		closeICMPFD(a.fd)
		if err == nil {
			err = context.Canceled // not dialing with a live context: not expected (the dialer cancels before it returns)
		}
		return fmt.Errorf("a connection attempt of a dial that has ended: %w", err)
	}
	s.noteDialled(a.addr.Remote)
	for i := range s.attempts {
		if p := &s.attempts[i]; p.v6 == a.v6 {
			p.readQueue()
		}
	}
	s.attempts = append(s.attempts, a)
	return nil
}

// boundAddr is known (a connecting socket's address as bound: the
// unspecified IP and its port) completed with the source IP the kernel
// chose when it sent the SYN, which the socket keeps after a refusal or a
// timeout: a failed connect's own address, the one its SYN carried, to
// find it in a capture or conntrack. known unchanged where the socket has
// none (the connect failed before sending: no route).
func boundAddr(fd int, known netip.AddrPort) netip.AddrPort {
	var ip netip.Addr
	var port int
	switch sa, _ := syscall.Getsockname(fd); sa := sa.(type) {
	case *syscall.SockaddrInet4:
		ip, port = netip.AddrFrom4(sa.Addr), sa.Port
	case *syscall.SockaddrInet6:
		ip, port = netip.AddrFrom16(sa.Addr).Unmap(), sa.Port
	}
	if !ip.IsValid() || ip.IsUnspecified() || port == 0 || (known.Port() != 0 && int(known.Port()) != port) {
		return known
	}
	return netip.AddrPortFrom(ip, uint16(port))
}

// keepForICMP duplicates the connecting socket's fd (and arms an IPv6 one
// to queue ICMPv6 errors): see dialAttempt. -1 when it cannot. Two system
// calls per fresh connection (dup, close) on top of the dial's, two more
// on IPv6 (arm, and disarm once connected); none per request.
func keepForICMP(fd int, v6 bool) (dup int, armed bool) {
	dup = dupForICMP(fd)
	if dup < 0 {
		return -1, false
	}
	if v6 {
		armDialICMP(fd) // disarmed once connected: see dial
	}
	return dup, v6
}

// readQueue reads an ended attempt's error queue and source address (see
// boundAddr) and closes its duplicate.
func (a *dialAttempt) readQueue() {
	if a.fd < 0 {
		return
	}
	a.addr.Local = boundAddr(a.fd, a.addr.Local)
	a.queued, a.read = readDialICMP(a.fd, a.v6, a.armed), true
	closeICMPFD(a.fd)
	a.fd = -1
}

// startDial opens the slot to its attempts for one dial.
func (s *dialSlot) startDial() {
	s.mu.Lock()
	s.dialing = true
	s.attempts = s.attempts[:0]
	s.mu.Unlock()
}

// endDial ends a dial's hold on its sockets and sets the slot's addresses
// and error queue: after a failed connect, those of the attempt whose
// error the dialer returned (the first whose address the error names);
// with no such attempt (an error of none of them), the last attempt's
// addresses (its source IP read as for the reported one) and no queue. A
// dial that connected leaves the addresses to the connection.
func (s *dialSlot) endDial(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = false
	var op *net.OpError
	failed := err != nil && errors.As(err, &op) && op.Op == "dial"
	var reported *dialAttempt
	for i := range s.attempts {
		a := &s.attempts[i]
		if failed && reported == nil && addrIs(op.Addr, a.addr.Remote) {
			reported = a
			a.readQueue()
		}
		if err != nil && a.fd >= 0 {
			a.addr.Local = boundAddr(a.fd, a.addr.Local) // the failure path only
		}
		closeICMPFD(a.fd)
		a.fd = -1
	}
	switch {
	case reported != nil:
		s.addr = reported.addr
		if reported.read {
			s.icmp = reported.queued
		}
	case len(s.attempts) > 0:
		s.addr = s.attempts[len(s.attempts)-1].addr
	}
}

// holdPorts holds the source ports of every attempt of the dial that just
// ended (see portHold): the dialer returns only the first attempt's error,
// so a later attempt that went unanswered too is not known as such, and a
// port held that need not be costs one file descriptor for holdFor.
func (s *dialSlot) holdPorts(h *portHold, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.attempts {
		h.hold(a.addr.Local, now)
	}
}

// disarmConn undoes armDialICMP on an IPv6 connection that connected:
// on the connection itself, as the socket kept may be another attempt's.
func disarmConn(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	if a, ok := tc.RemoteAddr().(*net.TCPAddr); !ok || a.IP.To4() != nil {
		return
	}
	if rc, err := tc.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { disarmDialICMP(int(fd)) })
	}
}

// addrIs reports whether a is the address ap.
func addrIs(a net.Addr, ap netip.AddrPort) bool {
	t, ok := a.(*net.TCPAddr)
	if !ok || !ap.IsValid() {
		return false
	}
	got := t.AddrPort()
	return unmapped(got) == unmapped(ap)
}

// errDialStartedLate: the connect deadline passed before the prober made
// the connection's socket. The prober's own lateness (a starved host), so
// class local, never the target's.
var errDialStartedLate = errors.New("the connect timeout ran out before the prober could start the connection: no connection was attempted")

// noConnectAttempt is the error of a dial that timed out before its
// socket existed (bindEphemeral never ran) though not in its lookup (that
// is a *net.DNSError already): no SYN left the host, so it
// is not connect_timeout, which says a connection attempt went
// unanswered. Go returns "dial tcp ADDR: i/o timeout" when the deadline
// passes between the name's lookup and the connect (a lookup that
// finished late, or a starved prober: a loaded lab's run had hundreds,
// which the timeline had put on terminating pods). For a target named by
// a host name that is dns: the name's resolution did not leave time to
// connect; for an address, local (errDialStartedLate).
func noConnectAttempt(address string, err error) error {
	host, _, _ := net.SplitHostPort(address)
	if _, perr := netip.ParseAddr(host); perr == nil {
		return fmt.Errorf("%w (%w)", errDialStartedLate, err)
	}
	return &net.DNSError{
		Err:       "resolved with no time left to connect: no connection was attempted (" + err.Error() + ")",
		Name:      host,
		IsTimeout: true,
		UnwrapErr: err,
	}
}

func newDialer(cfg *Config) *dialer {
	u := cfg.Target
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	d := &dialer{address: net.JoinHostPort(u.Hostname(), port), dialled: &dialledSet{}}
	if cfg.ConnectTo != "" {
		d.address = cfg.ConnectTo
	}
	// No TCP keepalive probes: they would only add traffic; the request
	// deadline bounds every wait.
	d.net.KeepAlive = -1
	d.net.Resolver = cfg.resolver
	if u.Scheme == "https" {
		d.tls = &tls.Config{
			ServerName:         u.Hostname(),
			InsecureSkipVerify: cfg.Insecure, //nolint:gosec // the user asked for it with --insecure
			NextProtos:         []string{"http/1.1"},
		}
		if cfg.Protocol.Multiplexed() {
			// h2 only (gRPC too: it is HTTP/2): a server that would fall
			// back to HTTP/1.1 fails the handshake's purpose, and says so
			// (tls_cause alpn).
			d.tls.NextProtos = []string{"h2"}
		}
		if len(cfg.CACert) > 0 {
			d.tls.RootCAs = x509.NewCertPool()
			d.tls.RootCAs.AppendCertsFromPEM(cfg.CACert) // Validate checked it holds one
		}
	}
	return d
}

// dial connects within deadline through the worker's slot and, for https,
// completes the handshake. The returned phase says which step failed. The
// slot receives the connection's addresses, as far as they are known,
// whether or not the dial succeeds.
func (d *dialer) dial(ctx context.Context, deadline time.Time, slot *dialSlot) (net.Conn, net.Conn, Phase, error) {
	slot.addr, slot.icmp = ConnAddr{}, nil
	dialCtx, cancel := context.WithDeadline(ctx, deadline)
	slot.startDial()
	raw, err := slot.net.DialContext(dialCtx, "tcp", d.address)
	cancel()
	slot.endDial(err)
	if err != nil {
		if ctx.Err() == nil && !slot.addr.Remote.IsValid() && isTimeout(err) && !isDNSError(err) {
			err = noConnectAttempt(d.address, err)
		}
		if ctx.Err() == nil && classify(err, PhaseDial, false) == ConnectTimeout {
			slot.holdPorts(&d.holds, time.Now()) // no answer: see portHold
		}
		return nil, nil, PhaseDial, err
	}
	disarmConn(raw)
	// The connection's own: of a name's several attempts, the one that
	// connected.
	if remote, ok := raw.RemoteAddr().(*net.TCPAddr); ok {
		ap := remote.AddrPort()
		slot.addr.Remote = unmapped(ap)
	}
	if local, ok := raw.LocalAddr().(*net.TCPAddr); ok {
		slot.addr.Local = local.AddrPort()
	}
	if d.tls == nil {
		return raw, raw, PhaseNone, nil
	}
	tc := tls.Client(raw, d.tls)
	_ = raw.SetDeadline(deadline)
	slot.handshakeSince.Store(time.Now().UnixNano())
	err = tc.Handshake()
	slot.handshakeSince.Store(0)
	if err != nil {
		_ = raw.Close()
		return nil, nil, PhaseTLS, err
	}
	return raw, tc, PhaseNone, nil
}
