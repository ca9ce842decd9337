//go:build linux

package natwatch

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/netnstest"
)

// In a network namespace of its own whose ruleset uses conntrack (as
// kube-proxy's does: the kernel tracks connections only for a ruleset that
// asks), as root: the watch sees a connection that was answered and one
// that was refused, each with the address it went to (no NAT here: the
// one dialled). Without root or nft it skips, saying why; the lab's test
// checks the DNAT against tcpdump.
func TestWatchInANamespace(t *testing.T) {
	nft := netnstest.Need(t)
	type result struct {
		tb            *Table
		open, refused netip.AddrPort
		local         netip.AddrPort
		start         time.Time
	}
	r := netnstest.In(t, nft, func(r *result) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		go closeEach(ln)
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

// The distinction NoEntry draws, on the kernel: a SYN a rule of this host
// rejects (as kube-proxy rejects a Service address it holds no endpoint
// for) is refused and leaves no conntrack entry; a SYN refused by the
// host it reached (here a closed port: the stack's reset, as a pod's) is
// refused too, and leaves one. The rule rejects one source port's SYNs
// to a listening address, as kube-proxy's race refuses one SYN among
// many the host rewrites: the others' entries show the host tracks that
// address. Where no connection to an address was ever seen (another
// rejected port), a missing entry proves nothing, and NoEntry says no.
func TestNoEntryOnTheKernel(t *testing.T) {
	nft := netnstest.Need(t)
	type result struct {
		tb                             *Table
		rejected, closed, unseen       netip.AddrPort
		fromRej, fromClose, fromUnseen netip.AddrPort
		start, end                     time.Time
	}
	r := netnstest.In(t, nft, func(r *result) error {
		var err error
		for _, p := range []*netip.AddrPort{&r.rejected, &r.closed, &r.unseen, &r.fromRej, &r.fromClose, &r.fromUnseen} {
			if *p, err = freeLoopbackPort(); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", r.rejected.String())
		if err != nil {
			return err
		}
		defer ln.Close()
		rule := fmt.Sprintf("table inet noendpoint {\n chain out {\n type filter hook output priority 0; tcp sport %d tcp dport %d reject; tcp dport %d reject\n }\n}\n",
			r.fromRej.Port(), r.rejected.Port(), r.unseen.Port())
		cmd := exec.Command(nft, "-f", "-")
		cmd.Stdin = strings.NewReader(rule)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft: %v: %s", err, out)
		}
		var stop func()
		r.tb, stop = Watch([]uint16{r.rejected.Port(), r.closed.Port(), r.unseen.Port()})
		defer stop()
		r.start = time.Now()
		neighbour, err := net.DialTimeout("tcp", r.rejected.String(), time.Second)
		if err != nil {
			return fmt.Errorf("dial %s from another port: %w", r.rejected, err)
		}
		neighbour.Close()
		for _, d := range [][2]netip.AddrPort{{r.fromRej, r.rejected}, {r.fromClose, r.closed}, {r.fromUnseen, r.unseen}} {
			dialer := net.Dialer{Timeout: time.Second, LocalAddr: net.TCPAddrFromAddrPort(d[0])}
			_, err := dialer.Dial("tcp", d[1].String())
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("dial %s: %v, want refused", d[1], err)
			}
		}
		r.end = time.Now()
		for deadline := time.Now().Add(5 * time.Second); r.tb.Status().Conns < 2 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(3 * drainEvery) // a rejected SYN's event, were there one, is read by now
		return nil
	})
	st := r.tb.Status()
	if !st.Watching || st.Lost || st.Conns != 2 {
		t.Fatalf("status %+v: want two connections seen, the closed port's and the listening one's from another port", st)
	}
	if !r.tb.NoEntry(Attempt{Src: r.fromRej, Remote: r.rejected, Start: r.start, End: r.end, Fresh: true}) {
		t.Errorf("the SYN this host rejected: NoEntry false (ports seen %v)", r.tb.Ports())
	}
	if r.tb.NoEntry(Attempt{Src: r.fromClose, Remote: r.closed, Start: r.start, End: r.end, Fresh: true}) {
		t.Errorf("the SYN the closed port refused: NoEntry true, its entry unseen (ports seen %v)", r.tb.Ports())
	}
	if r.tb.NoEntry(Attempt{Src: r.fromUnseen, Remote: r.unseen, Start: r.start, End: r.end, Fresh: true}) {
		t.Errorf("the SYN to an address no connection was seen to: NoEntry true, from no evidence (ports seen %v)", r.tb.Ports())
	}
}

// The premise of Joined, on the kernel: a SYN that went unanswered leaves
// its entry in SYN_SENT, and a new connection from the same port to the
// same address joins it, without a NEW event, and goes where the first
// went, though the rule that rewrote the first now rewrites elsewhere (as
// kube-proxy's rules do once a pod is gone: kubernetes#101607). Here the
// first connection is rewritten to a port whose SYNs are dropped after
// conntrack confirmed the entry (an address whose pod is gone); then the
// rule points at a listening port, which a connection from another port
// reaches; the first port's second connection times out again: it went
// to the dropped port.
func TestJoinedOnTheKernel(t *testing.T) {
	nft := netnstest.Need(t)
	type result struct {
		tb, later          *Table // later: a watch begun after the first connection
		orig, sink, listen netip.AddrPort
		first, second      Attempt
	}
	r := netnstest.In(t, nft, func(r *result) error {
		var err error
		var from netip.AddrPort
		for _, p := range []*netip.AddrPort{&r.orig, &r.sink, &from} {
			if *p, err = freeLoopbackPort(); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		go closeEach(ln)
		r.listen = ap(ln.Addr().String())
		nftRun := func(rules string) error {
			cmd := exec.Command(nft, "-f", "-")
			cmd.Stdin = strings.NewReader(rules)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("nft: %v: %s", err, out)
			}
			return nil
		}
		if err := nftRun(fmt.Sprintf("table ip joined {\n chain nat {\n type nat hook output priority -100; tcp dport %d dnat to 127.0.0.1:%d\n }\n chain in {\n type filter hook input priority 0; tcp dport %d drop\n }\n}\n",
			r.orig.Port(), r.sink.Port(), r.sink.Port())); err != nil {
			return err
		}
		var stop func()
		r.tb, stop = Watch([]uint16{r.orig.Port()})
		defer stop()
		dial := func(from netip.AddrPort) (Attempt, error) {
			d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: net.TCPAddrFromAddrPort(from)}
			a := Attempt{Src: from, Remote: r.orig, Start: time.Now(), Fresh: true}
			c, err := d.Dial("tcp", r.orig.String())
			a.End = time.Now()
			if err == nil {
				c.Close()
			}
			var ne net.Error
			a.Unanswered = errors.As(err, &ne) && ne.Timeout()
			return a, err
		}
		if r.first, err = dial(from); !r.first.Unanswered {
			return fmt.Errorf("the first connection: %v, want a timeout (its SYN dropped)", err)
		}
		if err := nftRun(fmt.Sprintf("flush chain ip joined nat\nadd rule ip joined nat tcp dport %d dnat to 127.0.0.1:%d\n", r.orig.Port(), r.listen.Port())); err != nil {
			return err
		}
		// A second watch, as a second run's would, finds the first
		// connection's entry lingering.
		var stopLater func()
		r.later, stopLater = Watch([]uint16{r.orig.Port()})
		defer stopLater()
		if _, err := dial(netip.AddrPortFrom(from.Addr(), 0)); err != nil {
			return fmt.Errorf("from another port, after the rule changed: %w", err)
		}
		if r.second, err = dial(from); !r.second.Unanswered {
			return fmt.Errorf("the second connection from port %d: %v, want a timeout (the first's entry sends it to the dropped port)", from.Port(), err)
		}
		time.Sleep(3 * drainEvery)
		return nil
	})
	st := r.tb.Status()
	if !st.Watching || st.Lost || st.SynSentTimeout <= 0 {
		t.Fatalf("status %+v: want a lossless watch and the namespace's SYN_SENT timeout", st)
	}
	if st.Conns != 2 {
		t.Errorf("%d connections seen, want 2: the first, the other port's, and no event for the second", st.Conns)
	}
	if c, ok := r.tb.Find(r.first); !ok || c.Dest != r.sink {
		t.Errorf("the first connection: %+v %v, want rewritten to %v", c, ok, r.sink)
	}
	if c, ok := r.tb.Find(r.second); ok {
		t.Errorf("the second connection has an event of its own: %+v", c)
	}
	if c, ok := r.tb.Joined(r.second, []Attempt{r.first}); !ok || c.Dest != r.sink {
		t.Errorf("the second connection joined %+v (%v), want the first's entry, to %v", c, ok, r.sink)
	}

	// The watch begun later saw no event of the first connection: the
	// dump found its entry, unanswered, with its time left, and the second
	// connection is put on it alone.
	ls := r.later.Lingering()
	if st := r.later.Status(); st.LingeringReason != "" || len(ls) != 1 {
		t.Fatalf("lingering %+v (%s): want the first connection's entry alone", ls, st.LingeringReason)
	}
	if l := ls[0]; l.Src.Port() != r.first.Src.Port() || l.Orig != r.orig || l.Dest != r.sink || l.Until.Sub(l.At) < 100*time.Second {
		t.Errorf("lingering %+v: want from port %d to %v, rewritten to %v, about two minutes left", l, r.first.Src.Port(), r.orig, r.sink)
	}
	if c, ok := r.later.Joined(r.second, nil); !ok || c.Dest != r.sink {
		t.Errorf("the later watch: the second connection joined %+v (%v), want the lingering entry, to %v", c, ok, r.sink)
	}
}

// freeLoopbackPort is a loopback address nothing listens on now.
func freeLoopbackPort() (netip.AddrPort, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer ln.Close()
	return ap(ln.Addr().String()), nil
}

// closeEach accepts connections on ln and closes each, until ln closes.
func closeEach(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}
