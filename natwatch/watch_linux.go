//go:build linux

package natwatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// drainEvery is how often the event socket is read dry. Reading on a
// timer rather than waking for each event spares a prober opening
// thousands of connections a second as many wake-ups (it cost 19% of its
// throughput when read per event: make bench-conntrack); an event is
// then stamped up to this late, far inside Lookup's matchSlack.
const drainEvery = 10 * time.Millisecond

// Watch records the TCP connections to any of ports that conntrack sees
// created in this network namespace, until stop is called; stop returns
// once the table is final. It needs CAP_NET_ADMIN: without it (or off
// Linux) the table says why it watched nothing, and the run goes on.
func Watch(ports []uint16) (t *Table, stop func()) { return WatchWith(ports, Options{}) }

// WatchWith is Watch with options. When the kernel drops events (the
// socket's buffer overflowed: ENOBUFS), the loss is counted in the
// table's status and reading goes on: the connections made meanwhile have
// no mapping, later ones do.
func WatchWith(ports []uint16, o Options) (t *Table, stop func()) {
	if o.ReadBuffer <= 0 {
		o.ReadBuffer = DefaultReadBuffer
	}
	t = NewTable()
	// The socket is made on the calling thread: it reads that thread's
	// network namespace for as long as it lives.
	fd, err := listen(o.ReadBuffer)
	if err != nil {
		t.status.Reason = err.Error()
		return t, func() {}
	}
	t.status.Watching = true
	t.status.Since = time.Now()
	t.status.SynSentTimeout = synSentTimeout()
	// After subscribing: an entry made meanwhile is in the dump, its
	// event, or both.
	if lingering, err := dumpUnanswered(ports); err == nil {
		t.lingering = lingering
	} else {
		t.status.LingeringReason = err.Error()
	}
	want := map[uint16]bool{}
	for _, p := range ports {
		want[p] = true
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		b := newBatch()
		tick := time.NewTicker(drainEvery)
		defer tick.Stop()
		// An event that arrived just after a read found the socket dry is
		// stamped by the next: at most the time between their starts late.
		// The status is locked only when the longest lag grows.
		last, maxLag := t.status.Since, time.Duration(0)
		read := func() {
			now := time.Now()
			if lag := now.Sub(last); lag > maxLag {
				maxLag = lag
				t.setStatus(func(s *Status) { s.MaxLag = lag })
			}
			last = now
			t.drain(fd, b, want)
		}
		for {
			select {
			case <-tick.C:
				read()
			case <-quit:
				read() // what arrived before stop
				return
			}
		}
	}()
	var once sync.Once
	return t, func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// synSentTimeout reads the calling thread's network namespace's SYN_SENT
// timeout (/proc/sys/net is the reader's namespace's); 0 when unreadable.
func synSentTimeout() time.Duration {
	b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_syn_sent")
	if err != nil {
		return 0
	}
	s, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || s <= 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// dumpUnanswered lists the entries conntrack holds, in the calling
// thread's namespace, of TCP connections from one of this namespace's own
// addresses to one of ports that were never answered (SYN_SENT): an
// earlier process's connections (a previous run's), which a new
// connection from the same source port to the same address would join
// (Table.Joined). Each lives until the time its timeout gives. The kernel
// sends the whole table, every protocol and address, and the filter is
// here: once per watch, before any request, so a node's large table costs
// the run's start, never its requests.
func dumpUnanswered(ports []uint16) ([]Lingering, error) {
	want := map[uint16]bool{}
	for _, p := range ports {
		want[p] = true
	}
	local := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("conntrack dump: this namespace's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			local[p.Addr().Unmap()] = true
		}
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("conntrack dump: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("conntrack dump: %w", err)
	}
	// A dump request of every family: a netlink header, then nfgenmsg
	// (family AF_UNSPEC, version 0, resource id 0).
	req := make([]byte, unix.SizeofNlMsghdr+nfgenmsgLen)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], nfnlSubsysCTNetlink<<8|ipctnlMsgCTGet)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 1)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("conntrack dump: %w", err)
	}
	now := time.Now()
	var out []Lingering
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return nil, fmt.Errorf("conntrack dump: %w", err)
		}
		done := false
		var failed error
		eachMessage(buf[:n], func(typ uint16, data []byte) {
			switch typ {
			case unix.NLMSG_DONE:
				done = true
				return
			case unix.NLMSG_ERROR:
				if len(data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(data)); errno != 0 {
						failed = unix.Errno(-errno)
					}
				}
				done = true
				return
			}
			o, r, state, replied, timeout, ok := parseEntry(typ, data)
			if !ok || o.proto != unix.IPPROTO_TCP || !want[o.dst.Port()] || state != tcpConntrackSynSnt || replied || !local[o.src.Addr()] {
				return
			}
			out = append(out, Lingering{Conn: Conn{Src: o.src, Orig: o.dst, Dest: r.src, At: now}, Until: lingersUntil(now, timeout)})
		})
		if failed != nil {
			return nil, fmt.Errorf("conntrack dump: %w", failed)
		}
		if done {
			return out, nil
		}
	}
}

// listen opens a netlink socket subscribed to conntrack's NEW events, its
// receive buffer set to readBuffer (forced past the system's cap where
// permitted: it is CAP_NET_ADMIN's, which reading conntrack needs anyway).
func listen(readBuffer int) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, fmt.Errorf("conntrack: a netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("conntrack: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, unix.NFNLGRP_CONNTRACK_NEW); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("conntrack events: %w (reading them needs CAP_NET_ADMIN in the network namespace where kube-proxy rewrites the Service address)", err)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, readBuffer) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, readBuffer) // best effort: smaller is not wrong
	}
	return fd, nil
}

// batch is the receive side of a drain: recvmmsg(2) fills up to
// batchLen datagrams (one event each) per system call, where a recvfrom
// per event cost the prober 6% of its throughput at 19,000 new
// connections a second (make bench-conntrack).
type batch struct {
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	bufs [][]byte
}

const (
	batchLen = 64
	// datagramLen holds any NEW event (a few hundred bytes) with room; a
	// longer one is cut (MSG_TRUNC) and skipped.
	datagramLen = 4096
)

func newBatch() *batch {
	b := &batch{hdrs: make([]unix.Mmsghdr, batchLen), iovs: make([]unix.Iovec, batchLen), bufs: make([][]byte, batchLen)}
	for i := range b.hdrs {
		b.bufs[i] = make([]byte, datagramLen)
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(datagramLen)
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.SetIovlen(1)
	}
	return b
}

// recv reads up to batchLen datagrams without waiting: how many, or an
// errno (EAGAIN when none is waiting).
func (b *batch) recv(fd int) (int, error) {
	for i := range b.hdrs {
		b.hdrs[i].Len, b.hdrs[i].Hdr.Flags = 0, 0
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// drain reads every event waiting on fd.
func (t *Table) drain(fd int, b *batch, want map[uint16]bool) {
	for {
		n, err := b.recv(fd)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			// ENOBUFS: events were dropped; the socket reads on.
			t.lost(err)
			if !errors.Is(err, unix.ENOBUFS) {
				return
			}
			continue
		}
		at := time.Now()
		for i := range n {
			if b.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
				continue
			}
			eachMessage(b.bufs[i][:b.hdrs[i].Len], func(typ uint16, data []byte) {
				if c, ok := connOf(typ, data, want); ok {
					c.At = at
					t.Add(c)
				}
			})
		}
		if n < batchLen {
			return // read dry
		}
	}
}

// eachMessage calls f for each well-formed netlink message in b (its type
// and its data after the header).
func eachMessage(b []byte, f func(typ uint16, data []byte)) {
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(b))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return
		}
		f(binary.NativeEndian.Uint16(b[4:]), b[unix.SizeofNlMsghdr:l])
		next := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if next > len(b) {
			return
		}
		b = b[next:]
	}
}

// lost records that reading failed with err.
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

// connOf is the connection a NEW event's message records, if it is a TCP
// connection to one of the wanted ports.
func connOf(typ uint16, data []byte, want map[uint16]bool) (Conn, bool) {
	o, r, ok := parseNew(typ, data)
	if !ok || o.proto != unix.IPPROTO_TCP || !want[o.dst.Port()] {
		return Conn{}, false
	}
	// The reply comes from where the SYN really went.
	return Conn{Src: o.src, Orig: o.dst, Dest: r.src}, true
}
