//go:build linux

package prober

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rollprobe/rollprobe/internal/netnstest"
	"github.com/rollprobe/rollprobe/internal/testenv"
)

// dialICMPChild marks the test binary's run in a namespace of its own
// (TestDialICMPTellsARejectFromAReset).
const dialICMPChild = "ROLLPROBE_DIALICMP_CHILD"

// Both engines read who refused each connection: a reject rule (nftables'
// reject, as kube-proxy's) answers a SYN with an ICMP port unreachable,
// which the failure carries with its sender; a port nothing listens on
// answers with a TCP reset, and the failure says the queue held nothing.
// IPv4 and IPv6 (which queues ICMPv6 errors only when asked). The rules
// are the referee: the test set which port rejects. The probers run in a
// child test process in a network namespace of its own (they dial from
// many threads, which a namespace of one thread would not hold), as root
// with nft; it skips otherwise.
func TestDialICMPTellsARejectFromAReset(t *testing.T) {
	if os.Getenv(dialICMPChild) == "" {
		nft := netnstest.Need(t)
		cmd := exec.Command(os.Args[0], "-test.run=^TestDialICMPTellsARejectFromAReset$", "-test.v")
		cmd.Env = append(os.Environ(), dialICMPChild+"="+nft)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestDialICMPTellsARejectFromAReset") {
			t.Fatalf("the namespace's run: %v\n%s", err, out)
		}
		t.Logf("the namespace's run:\n%s", out)
		return
	}
	nft := os.Getenv(dialICMPChild)
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
	}
	run("ip", "link", "set", "lo", "up")
	// A free port of each kind, found before the rule holds them; mixed
	// rejects on 127.0.0.1 only (and resets on 127.0.0.2). The sets syns
	// and syns6 record each SYN's source address and port and its
	// destination as it leaves: the referee of the addresses a failure is
	// put on.
	rejecting, resetting, mixed := freePort(t), freePort(t), freePort(t)
	run(nft, "add table inet dialicmp; add chain inet dialicmp in { type filter hook input priority 0 ; }; "+
		"add rule inet dialicmp in tcp dport "+strconv.Itoa(int(rejecting))+" reject; "+
		"add rule inet dialicmp in ip daddr 127.0.0.1 tcp dport "+strconv.Itoa(int(mixed))+" reject; "+
		"add set inet dialicmp syns { type ipv4_addr . inet_service . ipv4_addr ; flags dynamic ; size 65535 ; }; "+
		"add set inet dialicmp syns6 { type ipv6_addr . inet_service . ipv6_addr ; flags dynamic ; size 65535 ; }; "+
		"add chain inet dialicmp out { type filter hook output priority 0 ; }; "+
		"add rule inet dialicmp out meta nfproto ipv4 tcp flags & (syn | ack) == syn add @syns { ip saddr . tcp sport . ip daddr }; "+
		"add rule inet dialicmp out meta nfproto ipv6 tcp flags & (syn | ack) == syn add @syns6 { ip6 saddr . tcp sport . ip6 daddr }")
	time.Sleep(100 * time.Millisecond) // a margin for the new namespace's lo to settle; no assertion is timed
	forEachEngine(t, func(t *testing.T) {
		for _, host := range []string{"127.0.0.1", "::1"} {
			loop := netip.MustParseAddr(host)
			for _, port := range []uint16{rejecting, resetting} {
				target := netip.AddrPortFrom(loop, port)
				p, snap := runTestProber(t, "http://"+target.String()+"/", func(c *Config) {
					c.Rate, c.Duration = 40, 200*time.Millisecond
					fresh(c)
				}, nil)
				fails := p.Recorder().Failures()
				if len(fails) == 0 || uint64(len(fails)) != snap.Totals.Classes[Refused] {
					t.Fatalf("%s: %d failures, classes %v: want every attempt refused", target, len(fails), snap.Totals.Classes)
				}
				syns := sentSYNs(t, nft)
				for _, f := range fails {
					// A failed connect's local address is its SYN's source,
					// the IP the kernel chose included.
					if f.Addr == nil || !syns[sentSYN{f.Addr.Local, target.Addr()}] {
						t.Fatalf("%s: a refusal put on %+v: no SYN left from its local address (the SYNs: %v)", target, f.Addr, syns)
					}
					d := f.DialICMP
					switch {
					case d == nil:
						t.Fatalf("%s: a refusal without its error queue read", target)
					case port == resetting && d.From.IsValid():
						t.Fatalf("%s: a reset read as %s from %s", target, d.Name(), d.From)
					case port == rejecting && (!d.PortUnreachable() || d.From != loop || d.V6 != loop.Is6()):
						t.Fatalf("%s: the reject read as %+v (%q), want a port unreachable from %s", target, *d, d.Name(), loop)
					}
				}
			}
		}
	})
	t.Run("a name with two addresses", func(t *testing.T) {
		testenv.Timed(t)
		first, second := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1")
		for _, c := range []struct {
			port  uint16
			addrs []netip.Addr
			// icmpFrom: the reported attempt's queue holds a port
			// unreachable from it; invalid: a reset (the queue is empty).
			icmpFrom netip.Addr
		}{
			{rejecting, []netip.Addr{first, second}, first},
			{mixed, []netip.Addr{first, second}, netip.Addr{}},
			{mixed, []netip.Addr{second, first}, second},
		} {
			p, snap := runTestProber(t, "http://two.rollprobe.test:"+strconv.Itoa(int(c.port))+"/", func(cfg *Config) {
				cfg.Rate, cfg.Duration = 40, 200*time.Millisecond
				cfg.Engine = EngineGoroutines
				cfg.resolver = resolverOf(t, c.addrs...)
				fresh(cfg)
			}, nil)
			fails := p.Recorder().Failures()
			if len(fails) == 0 || uint64(len(fails)) != snap.Totals.Classes[Refused] {
				t.Fatalf("%v port %d: %d failures, classes %v: want every attempt refused", c.addrs, c.port, len(fails), snap.Totals.Classes)
			}
			syns := sentSYNs(t, nft)
			for _, f := range fails {
				// The dialer tries both addresses and returns the first's
				// error: the failure's addresses and queue must be its.
				want := netip.AddrPortFrom(c.addrs[0], c.port)
				if f.Addr == nil || f.Addr.Remote != want || !strings.Contains(f.Err.Error(), want.String()) {
					t.Fatalf("%v port %d: a failure put on %+v with the error %q, want %s's", c.addrs, c.port, f.Addr, f.Err, want)
				}
				if !syns[sentSYN{f.Addr.Local, want.Addr()}] {
					t.Fatalf("%v port %d: no SYN left %s for %s (the SYNs: %v)", c.addrs, c.port, f.Addr.Local, want.Addr(), syns)
				}
				d := f.DialICMP
				switch {
				case d == nil:
					t.Fatalf("%v port %d: a refusal without its error queue read", c.addrs, c.port)
				case c.icmpFrom.IsValid() && (!d.PortUnreachable() || d.From != c.icmpFrom):
					t.Fatalf("%v port %d: the reject read as %+v (%q), want a port unreachable from %s", c.addrs, c.port, *d, d.Name(), c.icmpFrom)
				case !c.icmpFrom.IsValid() && d.From.IsValid():
					t.Fatalf("%v port %d: a reset read as %s from %s", c.addrs, c.port, d.Name(), d.From)
				}
			}
		}
	})
}

// sentSYN is a SYN as TestDialICMPTellsARejectFromAReset's sets recorded
// it leaving: its source address and port, and its destination.
type sentSYN struct {
	src netip.AddrPort
	dst netip.Addr
}

func (s sentSYN) String() string { return s.src.String() + "->" + s.dst.String() }

// sentSYNs reads the sets syns and syns6 of that test's table.
func sentSYNs(t *testing.T, nft string) map[sentSYN]bool {
	t.Helper()
	syns := map[sentSYN]bool{}
	for _, set := range []string{"syns", "syns6"} {
		out, err := exec.Command(nft, "list", "set", "inet", "dialicmp", set).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list set %s: %v: %s", set, err, out)
		}
		for _, m := range regexp.MustCompile(`([0-9a-f.:]+) \. (\d+) \. ([0-9a-f.:]+)`).FindAllStringSubmatch(string(out), -1) {
			port, _ := strconv.ParseUint(m[2], 10, 16)
			syns[sentSYN{netip.AddrPortFrom(netip.MustParseAddr(m[1]), uint16(port)), netip.MustParseAddr(m[3])}] = true
		}
	}
	return syns
}

// freePort is a TCP port nothing listens on (any address).
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// The goroutine engine's dial leaves nothing of its reading behind: a
// connection it opened no longer queues ICMPv6 errors (with IPV6_RECVERR
// set, Linux would fail its next read on one, where a real client's
// connection would not), and no duplicate of a socket stays open, after
// connects and refusals, to an address and to a name with an IPv4 and an
// IPv6 address (dialled on two goroutines at once), and to a name with two
// IPv4 addresses, the first refusing (tried in turn): where such a dial
// connects, its addresses are the connection's.
func TestGoroutineDialLeavesNoTrace(t *testing.T) {
	const twoAddresses = "two.rollprobe.test" // 127.0.0.2, refusing, then 127.0.0.1
	for _, host := range []string{"127.0.0.1", "::1", "localhost", twoAddresses} {
		listenOn := host
		if host == twoAddresses {
			listenOn = "127.0.0.1"
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(listenOn, "0"))
		if err != nil {
			t.Skipf("no %s here: %v", host, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		before := openFDs(t)
		for _, listening := range []bool{true, false} {
			if !listening {
				ln.Close()
			}
			target, err := ParseTarget("http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/")
			if err != nil {
				t.Fatal(err)
			}
			cfg := &Config{Target: target}
			if host == twoAddresses {
				cfg.resolver = resolverOf(t, netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"))
			}
			d := newDialer(cfg)
			slot := d.newSlot()
			for range 20 {
				_, conn, _, err := d.dial(context.Background(), time.Now().Add(time.Second), slot)
				if listening != (err == nil) {
					t.Fatalf("%s (listening %v): %v", host, listening, err)
				}
				if err != nil {
					// The dialer returns its first attempt's error: the
					// slot's addresses and queue must be that attempt's.
					var op *net.OpError
					if !errors.As(err, &op) || !addrIs(op.Addr, slot.addr.Remote) || slot.addr.Local.Port() == 0 || slot.icmp == nil {
						t.Fatalf("%s: the slot says %+v (queue read: %v) for %v", host, slot.addr, slot.icmp != nil, err)
					}
					continue
				}
				if got, want := slot.addr, (ConnAddr{Local: conn.LocalAddr().(*net.TCPAddr).AddrPort(), Remote: conn.RemoteAddr().(*net.TCPAddr).AddrPort()}); got != want {
					t.Fatalf("%s: the slot says %+v, the connection %+v", host, got, want)
				}
				if a := conn.RemoteAddr().(*net.TCPAddr); a.IP.To4() == nil {
					rc, _ := conn.(*net.TCPConn).SyscallConn()
					var v int
					var gerr error
					_ = rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_IPV6, unix.IPV6_RECVERR) })
					if gerr != nil || v != 0 {
						t.Fatalf("%s: a connection to %s still queues ICMPv6 errors (IPV6_RECVERR %d, %v)", host, a, v, gerr)
					}
				}
				conn.Close()
			}
			d.holds.release()
		}
		if after := openFDs(t); after > before {
			t.Errorf("%s: %d file descriptors open after the dials, %d before", host, after, before)
		}
	}
}

// A connection attempt whose context is canceled belongs to a dial that
// has ended (a dual-stack name's losing racer, which the dialer cancels as
// it returns the winner, can reach the control hook after the worker's
// next dial began): the slot must not take it for the current dial's, and
// its socket must fail before connect(2), so that no SYN leaves from a
// port no dial records. One whose deadline passed is still the current
// dial's: Go connects before it checks the deadline.
func TestBindEphemeralLeavesOutAnEndedDialsAttempt(t *testing.T) {
	socket := func() (syscall.RawConn, func()) {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "attempt")
		rc, err := f.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		return rc, func() { f.Close() }
	}
	target, err := ParseTarget("http://127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	slot := newDialer(&Config{Target: target}).newSlot()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()
	for _, c := range []struct {
		name string
		ctx  context.Context
		kept bool
	}{
		{"live", context.Background(), true},
		{"past its deadline", expired, true},
		{"canceled", canceled, false},
	} {
		before := openFDs(t)
		rc, closeSocket := socket()
		slot.startDial()
		err := slot.bindEphemeral(c.ctx, "tcp4", "127.0.0.1:1", rc)
		if got := len(slot.attempts); c.kept != (err == nil) || got != map[bool]int{true: 1}[c.kept] {
			t.Errorf("%s: bindEphemeral returned %v, the slot keeps %d attempts", c.name, err, got)
		}
		if !c.kept && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: the error %v does not say the dial was canceled", c.name, err)
		}
		slot.endDial(nil)
		closeSocket()
		if after := openFDs(t); after != before {
			t.Errorf("%s: %d file descriptors open after the attempt, %d before", c.name, after, before)
		}
	}
}

// A failed dial whose error names none of its attempts (so no queue is
// read) still reports the source address its last attempt's SYN left
// from, not the unspecified IP it was bound to: a refused connect on
// loopback, whose source the kernel chose, is the referee.
func TestAFailedDialNamingNoAttemptKeepsItsSourceIP(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now: a connect is refused
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "attempt")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	target, err := ParseTarget("http://" + closed + "/")
	if err != nil {
		t.Fatal(err)
	}
	slot := newDialer(&Config{Target: target}).newSlot()
	slot.startDial()
	if err := slot.bindEphemeral(context.Background(), "tcp4", closed, rc); err != nil {
		t.Fatal(err)
	}
	defer slot.endDial(nil) // closes the attempt's duplicate fd should the test stop early; a no-op after the endDial below
	// Non-blocking, as Go connects: a blocking connect(2) that fails
	// disconnects the socket, which forgets its source IP.
	if err := syscall.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	remote := netip.MustParseAddrPort(closed)
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Addr: remote.Addr().As4(), Port: int(remote.Port())}); err != nil && !errors.Is(err, syscall.EINPROGRESS) {
		t.Fatalf("connect to %s: %v", closed, err)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if _, err := unix.Poll(fds, 5000); err != nil {
		t.Fatal(err)
	}
	if soErr, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil || syscall.Errno(soErr) != syscall.ECONNREFUSED {
		t.Fatalf("connect to %s: %v %v, want refused", closed, syscall.Errno(soErr), err)
	}
	bound := slot.attempts[0].addr.Local
	slot.endDial(errors.New("an error naming no address"))
	got := slot.addr.Local
	if got.Addr() != netip.MustParseAddr("127.0.0.1") || got.Port() != bound.Port() || bound.Port() == 0 {
		t.Errorf("local address %s after a refused connect bound to %s, want 127.0.0.1 and the bound port", got, bound)
	}
	if slot.icmp != nil {
		t.Errorf("an error naming no attempt read a queue: %+v", slot.icmp)
	}
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
