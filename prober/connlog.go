package prober

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// ConnLog collects, for a run that asks for it (Config.ConnLog), one
// record per connection that carried at least one response: its two ends,
// when it was dialled and how many responses came on it. With conntrack's
// record of where each connection went (natwatch), that says which pod
// served every response, with no backend header. A connection is noted
// once, when it ends (every engine ends its connections by the end of the
// run), so the log is complete once the run's outcome is in.
//
// Notes come from the engines' hot paths, one per connection (18,000 a
// second flat out with a new connection per request), so the log keeps
// them in fixed chunks of records that hold no pointers: the garbage
// collector never scans them and nothing is copied as the log grows (a
// growing slice of ConnRecord, whose addresses hold pointers, was 1.2% of
// such a run's CPU: make bench-conntrack's profile). Memory grows with the
// connections, 64 bytes each: some 70 MB a minute at that rate;
// kept-alive runs hold a few hundred records.
type ConnLog struct {
	mu     sync.Mutex
	chunks [][]connRecord // each connLogChunk long but the last
	n      int
	zones  []string // IPv6 zones noted (link-local addresses), by index+1
}

const connLogChunk = 4096

// connRecord is a ConnRecord without pointers.
type connRecord struct {
	local, remote packedAddrPort
	dialed        time.Duration
	connected     time.Duration
	responses     uint32
}

// packedAddrPort is a netip.AddrPort without pointers: netip.Addr keeps
// its kind and zone behind one, so the zone is an index into the log's
// zones. natwatch's table packs its records the same way (packedAddr),
// without zones: conntrack's addresses carry none. The two are not shared
// yet; a change to one's layout should look at the other.
type packedAddrPort struct {
	ip   [16]byte
	port uint16
	kind uint8  // 0: invalid, 4: IPv4, 6: IPv6
	zone uint16 // 0: none, else ConnLog.zones[zone-1]
}

// pack packs a; l.mu must be held (a zone is added to l.zones).
func (l *ConnLog) pack(a netip.AddrPort) packedAddrPort {
	switch ip := a.Addr(); {
	case ip.Is4():
		return packedAddrPort{ip: ip.As16(), port: a.Port(), kind: 4}
	case ip.Is6():
		p := packedAddrPort{ip: ip.As16(), port: a.Port(), kind: 6}
		if z := ip.Zone(); z != "" {
			i := slices.Index(l.zones, z)
			if i < 0 {
				i = len(l.zones)
				l.zones = append(l.zones, z)
			}
			p.zone = uint16(i + 1)
		}
		return p
	}
	return packedAddrPort{port: a.Port()}
}

// unpack is pack's inverse; l.mu must be held.
func (l *ConnLog) unpack(p packedAddrPort) netip.AddrPort {
	var ip netip.Addr
	switch p.kind {
	case 4:
		ip = netip.AddrFrom16(p.ip).Unmap()
	case 6:
		ip = netip.AddrFrom16(p.ip)
		if p.zone > 0 {
			ip = ip.WithZone(l.zones[p.zone-1])
		}
	}
	return netip.AddrPortFrom(ip, p.port)
}

// ConnRecord is one connection of a ConnLog.
type ConnRecord struct {
	Addr ConnAddr
	// Dialed is the run offset (from Prober.Start) at which its dial
	// began: conntrack notes a connection at its SYN, from then on.
	Dialed time.Duration
	// Connected is the run offset at which it was established: its SYN
	// left by then (on a stalled machine, seconds after Dialed).
	Connected time.Duration
	// Responses is how many responses it carried (any status).
	Responses uint32
}

// Note records a connection that ended; a nil log, or a connection that
// carried nothing, records nothing.
func (l *ConnLog) Note(addr ConnAddr, dialed, connected time.Duration, responses uint32) {
	if l == nil || responses == 0 {
		return
	}
	l.mu.Lock()
	r := connRecord{local: l.pack(addr.Local), remote: l.pack(addr.Remote), dialed: dialed, connected: connected, responses: responses}
	if l.n%connLogChunk == 0 {
		l.chunks = append(l.chunks, make([]connRecord, 0, connLogChunk))
	}
	last := len(l.chunks) - 1
	l.chunks[last] = append(l.chunks[last], r)
	l.n++
	l.mu.Unlock()
}

// Conns returns the records so far (a copy), in the order noted.
func (l *ConnLog) Conns() []ConnRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ConnRecord, 0, l.n)
	for _, chunk := range l.chunks {
		for _, r := range chunk {
			out = append(out, ConnRecord{Addr: ConnAddr{Local: l.unpack(r.local), Remote: l.unpack(r.remote)}, Dialed: r.dialed, Connected: r.connected, Responses: r.responses})
		}
	}
	return out
}
