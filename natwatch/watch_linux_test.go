//go:build linux

package natwatch

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// In a network namespace of its own whose ruleset uses conntrack (as
// kube-proxy's does: the kernel tracks connections only for a ruleset that
// asks), as root: the watch sees a connection that was answered and one
// that was refused, each with the address it went to (no NAT here: the
// one dialled). Without root or nft it skips, saying why; the lab's test
// checks the DNAT against tcpdump.
func TestWatchInANamespace(t *testing.T) {
	nft := needNamespace(t)
	type result struct {
		tb            *Table
		open, refused netip.AddrPort
		local         netip.AddrPort
		start         time.Time
		err           error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		r.err = inNamespace(nft, func() error {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			gone, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			r.open, r.refused = ap(ln.Addr().String()), ap(gone.Addr().String())
			gone.Close()
			var stop func()
			r.tb, stop = Watch([]uint16{r.open.Port(), r.refused.Port()})
			defer stop()
			if st := r.tb.Status(); !st.Watching {
				return fmt.Errorf("not watched: %s", st.Reason)
			}
			r.start = time.Now()
			c, err := net.DialTimeout("tcp", r.open.String(), time.Second)
			if err != nil {
				return err
			}
			r.local = ap(c.LocalAddr().String())
			c.Close()
			if _, err := net.DialTimeout("tcp", r.refused.String(), time.Second); err == nil {
				return fmt.Errorf("%s answered", r.refused)
			}
			for deadline := time.Now().Add(5 * time.Second); r.tb.Status().Conns < 2 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			return nil
		})
		res <- r
	}()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if c, ok := r.tb.Lookup(r.local, r.open, r.start, true); !ok || c.Dest != r.open {
		t.Errorf("the answered connection: %+v %v (ports seen %v)", c, ok, r.tb.Ports())
	}
	refusedSeen := false
	for _, p := range r.tb.Ports() {
		if c, ok := r.tb.Lookup(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p), r.refused, r.start, true); ok && c.Dest == r.refused {
			refusedSeen = true
		}
	}
	if !refusedSeen {
		t.Errorf("the refused SYN's connection was not seen (status %+v)", r.tb.Status())
	}
}

// needNamespace skips unless this can make a network namespace whose
// ruleset tracks connections; it returns nft's path.
func needNamespace(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace, CAP_NET_ADMIN)")
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("needs nft (Debian's nftables) to give the namespace a ruleset that uses conntrack")
	}
	return nft
}

// inNamespace locks the calling goroutine to its thread, moves the thread
// into a new network namespace with loopback up and a ruleset that makes
// the kernel track connections (as kube-proxy's does), and runs f there.
// The thread is never unlocked: it ends with the goroutine. Only this
// thread is in the namespace: f must not dial from other goroutines.
func inNamespace(nft string, f func() error) error {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return err
	}
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader("table inet natwatch_test {\n chain out {\n type filter hook output priority 0; ct state new accept\n }\n}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	return f()
}
