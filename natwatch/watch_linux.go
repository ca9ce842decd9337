//go:build linux

package natwatch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"
)

// readBuffer is the event socket's receive buffer: a NEW event is about
// 200 bytes, so 8 MiB holds some 40,000 connections between reads.
const readBuffer = 8 << 20

// Watch records the TCP connections to any of ports that conntrack sees
// created in this network namespace, until stop is called; stop returns
// once the table is final. It needs CAP_NET_ADMIN: without it (or off
// Linux) the table says why it watched nothing, and the run goes on.
func Watch(ports []uint16) (t *Table, stop func()) {
	t = NewTable()
	c, err := conntrack.Dial(nil)
	if err != nil {
		t.status.Reason = fmt.Sprintf("conntrack: %v (reading it needs CAP_NET_ADMIN in the network namespace where kube-proxy rewrites the Service address)", err)
		return t, func() {}
	}
	_ = c.SetReadBuffer(readBuffer) // best effort: the default is smaller, not wrong
	events := make(chan conntrack.Event, 1024)
	errs, err := c.Listen(events, 1, []netfilter.NetlinkGroup{netfilter.GroupCTNew})
	if err != nil {
		_ = c.Close()
		t.status.Reason = fmt.Sprintf("conntrack events: %v", err)
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
		closed := make(chan struct{})
		go func() {
			<-ctx.Done()
			_ = c.Close() // waits for the worker, which may be sending: keep receiving
			close(closed)
		}()
		for {
			select {
			case ev := <-events:
				if conn, ok := connOf(ev, want); ok {
					t.Add(conn)
				}
			case err := <-errs:
				// The worker has stopped: nothing more is read.
				reason := err.Error()
				if errors.Is(err, unix.ENOBUFS) {
					reason = "the kernel dropped conntrack events (ENOBUFS: the socket's buffer overflowed); later connections have no mapping"
				}
				t.setStatus(func(s *Status) { s.Lost, s.LostReason = true, reason })
			case <-closed:
				return
			}
		}
	}()
	return t, func() {
		cancel()
		<-done
	}
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
