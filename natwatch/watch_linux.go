//go:build linux

package natwatch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"
)

// Watch records the TCP connections to any of ports that conntrack sees
// created in this network namespace, until stop is called; stop returns
// once the table is final. It needs CAP_NET_ADMIN: without it (or off
// Linux) the table says why it watched nothing, and the run goes on.
func Watch(ports []uint16) (t *Table, stop func()) { return WatchWith(ports, Options{}) }

// WatchWith is Watch with options. When the kernel drops events (the
// socket's buffer overflowed: ENOBUFS ends the listener), the loss is
// counted in the table's status and a new listener takes over: the
// connections made meanwhile have no mapping, later ones do.
func WatchWith(ports []uint16, o Options) (t *Table, stop func()) {
	if o.ReadBuffer <= 0 {
		o.ReadBuffer = DefaultReadBuffer
	}
	t = NewTable()
	// A listener made again after a loss must read the caller's network
	// namespace, which only the calling thread may be in (a test's
	// unshared thread); in a process wholly in one namespace, as rollprobe
	// runs, any thread's is the same.
	ns, nsErr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if nsErr != nil {
		ns = -1
	}
	closeNS := func() {
		if ns >= 0 {
			_ = unix.Close(ns)
		}
	}
	l, err := listen(-1, o.ReadBuffer)
	if err != nil {
		closeNS()
		t.status.Reason = err.Error()
		return t, func() {}
	}
	t.status.Watching = true
	want := map[uint16]bool{}
	for _, p := range ports {
		want[p] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer closeNS()
		for {
			select {
			case ev := <-l.events:
				if conn, ok := connOf(ev, want); ok {
					t.Add(conn)
				}
			case err := <-l.errs:
				// The listener's worker has stopped: nothing more is read
				// from its socket.
				t.lost(err)
				l.close()
				if l, err = listen(ns, o.ReadBuffer); err != nil {
					t.setStatus(func(s *Status) {
						s.LostReason += fmt.Sprintf("; listening again failed (%v): no later connection has a mapping", err)
					})
					<-ctx.Done()
					return
				}
			case <-ctx.Done():
				l.close()
				return
			}
		}
	}()
	return t, func() {
		cancel()
		<-done
	}
}

// listener is one conntrack event socket and its worker's channels.
type listener struct {
	conn   *conntrack.Conn
	events chan conntrack.Event
	errs   chan error
}

// listen opens a listener in the network namespace ns (an open
// /proc/.../ns/net; the calling thread's when -1 or when entering ns is not
// permitted: that takes CAP_SYS_ADMIN).
func listen(ns, readBuffer int) (*listener, error) {
	var c *conntrack.Conn
	err := errors.New("no namespace")
	if ns >= 0 {
		c, err = conntrack.Dial(&netlink.Config{NetNS: ns})
	}
	if err != nil {
		c, err = conntrack.Dial(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("conntrack: %w (reading it needs CAP_NET_ADMIN in the network namespace where kube-proxy rewrites the Service address)", err)
	}
	_ = c.SetReadBuffer(readBuffer) // best effort: the default is smaller, not wrong
	l := &listener{conn: c, events: make(chan conntrack.Event, 1024)}
	if l.errs, err = c.Listen(l.events, 1, []netfilter.NetlinkGroup{netfilter.GroupCTNew}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("conntrack events: %w", err)
	}
	return l, nil
}

// close closes the socket, receiving meanwhile: Close waits for the
// worker, which may be blocked sending an event or an error.
func (l *listener) close() {
	closed := make(chan struct{})
	go func() { _ = l.conn.Close(); close(closed) }()
	for {
		select {
		case <-l.events:
		case <-l.errs:
		case <-closed:
			return
		}
	}
}

// lost records that the listener stopped on err.
func (t *Table) lost(err error) {
	t.setStatus(func(s *Status) {
		s.Lost = true
		s.Losses++
		switch {
		case errors.Is(err, unix.ENOBUFS):
			s.LostReason = fmt.Sprintf("the kernel dropped conntrack events %s (ENOBUFS: the socket's buffer overflowed); the connections made then have no mapping", times(s.Losses))
		default:
			s.LostReason = fmt.Sprintf("reading conntrack events failed %s (last: %v); the connections made then have no mapping", times(s.Losses), err)
		}
	})
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// connOf is the connection a NEW event records, if it is a TCP connection
// to one of the wanted ports.
func connOf(ev conntrack.Event, want map[uint16]bool) (Conn, bool) {
	f := ev.Flow
	if ev.Type != conntrack.EventNew || f == nil || f.TupleOrig.Proto.Protocol != unix.IPPROTO_TCP || !want[f.TupleOrig.Proto.DestinationPort] {
		return Conn{}, false
	}
	o, r := f.TupleOrig, f.TupleReply
	return Conn{
		Src:  netip.AddrPortFrom(o.IP.SourceAddress.Unmap(), o.Proto.SourcePort),
		Orig: netip.AddrPortFrom(o.IP.DestinationAddress.Unmap(), o.Proto.DestinationPort),
		// The reply comes from where the SYN really went.
		Dest: netip.AddrPortFrom(r.IP.SourceAddress.Unmap(), r.Proto.SourcePort),
		At:   time.Now(),
	}, true
}
