//go:build linux

package prober

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rollprobe/rollprobe/internal/netnstest"
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
	// A free port of each kind, found before the rule holds them.
	rejecting, resetting := freePort(t), freePort(t)
	run(nft, "add table inet dialicmp; add chain inet dialicmp in { type filter hook input priority 0 ; }; "+
		"add rule inet dialicmp in tcp dport "+strconv.Itoa(int(rejecting))+" reject")
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
				for _, f := range fails {
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
// IPv6 address (dialled on two goroutines at once).
func TestGoroutineDialLeavesNoTrace(t *testing.T) {
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	for _, host := range []string{"127.0.0.1", "::1", "localhost"} {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
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
		before := openFDs()
		for _, listening := range []bool{true, false} {
			if !listening {
				ln.Close()
			}
			target, err := ParseTarget("http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/")
			if err != nil {
				t.Fatal(err)
			}
			d := newDialer(&Config{Target: target})
			slot := d.newSlot()
			for range 20 {
				_, conn, _, err := d.dial(context.Background(), time.Now().Add(time.Second), slot)
				if listening != (err == nil) {
					t.Fatalf("%s (listening %v): %v", host, listening, err)
				}
				if err != nil {
					continue
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
		if after := openFDs(); after > before {
			t.Errorf("%s: %d file descriptors open after the dials, %d before", host, after, before)
		}
	}
}
