package prober

import (
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"
)

// portHold keeps the source ports of unanswered connection attempts bound
// for a while, so that the kernel gives them to no other connection of this
// prober.
//
// Why: connection tracking keeps an unanswered SYN's entry, with its NAT
// decision (the pod a Service address was rewritten to), for 120 s
// (nf_conntrack_tcp_timeout_syn_sent), and kube-proxy does not clear TCP
// entries when an endpoint goes (kubernetes#101607). A later connection
// from the same source port to the same Service matches that entry, follows
// it to the vanished pod and times out: a failure caused by the prober's
// own port reuse, seconds after the rollout's real ones, which would
// stretch every measured window. One prober making hundreds of fresh
// connections a second reuses ports often enough for this to show in a
// single run (seen in the lab: 3 of 63 connect timeouts of one run).
//
// Unanswered is what the prober classes connect_timeout: its own connect
// deadline passed, or the kernel gave up first (EHOSTUNREACH when the
// neighbour of a vanished pod's address never answered ARP: conntrack had
// confirmed the SYN's entry before that lookup failed, so it waits in
// SYN_SENT all the same; a CI run had a port freed that way draw a later
// connection to a pod gone 5.6 s before).
//
// A bound, unconnected socket costs one file descriptor and no traffic.
type portHold struct {
	mu   sync.Mutex
	held []heldPort // oldest first
}

type heldPort struct {
	fd    int
	port  uint16
	until time.Time
}

const (
	// holdFor is how long conntrack keeps an unanswered SYN's entry.
	holdFor = 120 * time.Second
	// maxHeld bounds the file descriptors held; past it, the oldest hold
	// is given up.
	maxHeld = 1024
)

// hold binds a socket to local's port (on every address) until holdFor
// from now. Best effort: a port it cannot bind (another socket has it
// meanwhile) is simply not held.
func (h *portHold) hold(local netip.AddrPort, now time.Time) {
	h.holdUntil(local, now, now.Add(holdFor))
}

// holdUntil is hold until a given time; holds must be added in the order
// of their ends (expire takes them from the front).
func (h *portHold) holdUntil(local netip.AddrPort, now, until time.Time) {
	if h == nil || local.Port() == 0 {
		return
	}
	family, sa := syscall.AF_INET, syscall.Sockaddr(&syscall.SockaddrInet4{Port: int(local.Port())})
	if local.Addr().Is6() && !local.Addr().Is4In6() {
		family, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Port: int(local.Port())}
	}
	fd, err := streamSocket(family)
	if err != nil {
		return
	}
	if syscall.Bind(fd, sa) != nil {
		_ = syscall.Close(fd)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expire(now)
	if len(h.held) >= maxHeld {
		_ = syscall.Close(h.held[0].fd)
		h.held = h.held[1:]
	}
	h.held = append(h.held, heldPort{fd: fd, port: local.Port(), until: until})
}

// PortUntil is a source port to keep from new connections until a time:
// Addr's port, on every address of Addr's family.
type PortUntil struct {
	Addr  netip.AddrPort
	Until time.Time
}

// HoldPorts binds each port until its time, as the prober binds those of
// its own unanswered connects (portHold): for the entries a conntrack
// watch found lingering when it began (natwatch.Table.Lingering: an
// earlier process's unanswered connections, a previous run's), which a
// connection of this run from the same port to the same address would
// join, to a pod long gone. Best effort (a port another socket has bound
// cannot be): it returns how many it bound, and release, which gives them
// up. Ports whose time has passed are skipped; past maxHeld, the ones
// ending first are given up.
func HoldPorts(ports []PortUntil, now time.Time) (held int, release func()) {
	ps := slices.Clone(ports)
	slices.SortFunc(ps, func(a, b PortUntil) int { return a.Until.Compare(b.Until) })
	h := &portHold{}
	for _, p := range ps {
		if p.Until.After(now) {
			h.holdUntil(p.Addr, now, p.Until)
		}
	}
	return len(h.ports()), h.release
}

// expire closes the holds whose time is up; the caller holds mu.
func (h *portHold) expire(now time.Time) {
	n := 0
	for n < len(h.held) && !now.Before(h.held[n].until) {
		_ = syscall.Close(h.held[n].fd)
		n++
	}
	h.held = h.held[n:]
}

// ports returns the ports held now.
func (h *portHold) ports() []uint16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]uint16, len(h.held))
	for i, p := range h.held {
		out[i] = p.port
	}
	return out
}

// release gives every port up (at the end of a run).
func (h *portHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.held {
		_ = syscall.Close(p.fd)
	}
	h.held = nil
}
