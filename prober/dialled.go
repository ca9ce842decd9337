package prober

import (
	"net/netip"
	"slices"
	"sync"
)

// MaxDialled bounds the distinct addresses a prober keeps of where its
// connections were sent: a name behind a few addresses is told apart;
// past the bound the list says it is incomplete.
const MaxDialled = 8

// dialledSet is the distinct addresses a prober's connections were sent
// to (after its name's resolution, or --connect-to): what the target, as
// dialled, reached. Each worker checks its own short list first
// (dialSlot.noteDialled), so the lock is taken once per worker and
// address, not once per connection.
type dialledSet struct {
	mu    sync.Mutex
	addrs []netip.AddrPort
	more  bool // more than MaxDialled
}

// add notes a (nothing on a nil set: a dialer made by hand, in a test).
func (s *dialledSet) add(a netip.AddrPort) {
	if s == nil || !a.IsValid() {
		return
	}
	a = unmapped(a)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs, s.more = appendDialled(s.addrs, s.more, a)
}

// appendDialled adds a to list unless it holds it, or says more when the
// list is full: the one rule of a dialled list, noted or merged.
func appendDialled(list []netip.AddrPort, more bool, a netip.AddrPort) ([]netip.AddrPort, bool) {
	switch {
	case slices.Contains(list, a):
	case len(list) < MaxDialled:
		list = append(list, a)
	default:
		more = true
	}
	return list, more
}

// list is what was noted, in the order first seen, and whether there were
// more than it holds.
func (s *dialledSet) list() ([]netip.AddrPort, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.addrs), s.more
}

// noteDialled notes a, once per worker and address (up to one past the
// bound, so that the set learns it has more).
func (s *dialSlot) noteDialled(a netip.AddrPort) {
	if slices.Contains(s.dialledSeen, a) || len(s.dialledSeen) > MaxDialled {
		return
	}
	s.dialledSeen = append(s.dialledSeen, a)
	s.dialled.add(a)
}

// UnionDialled is the addresses of a and b (each with whether it was
// incomplete), in the order first seen and within MaxDialled: where the
// connections of several probers, or several paths, were sent.
func UnionDialled(a []netip.AddrPort, aMore bool, b []netip.AddrPort, bMore bool) ([]netip.AddrPort, bool) {
	out, more := slices.Clone(a), aMore || bMore
	for _, x := range b {
		out, more = appendDialled(out, more, x)
	}
	return out, more
}
