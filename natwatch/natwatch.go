// Package natwatch asks the kernel where each of the prober's connections
// really went. A Service address is rewritten (DNAT) to one pod's address
// by kube-proxy on the host that sends the SYN; conntrack holds that choice
// for every connection, a refused or unanswered SYN included. Where
// rollprobe probes from such a host (a node, a host-network pod, the lab's
// nodes), a conntrack event listener records, per connection, the address
// after the rewrite: which pod a failure hit becomes a fact, not an
// inference.
//
// The listener runs on its own goroutine and only reads; the prober's hot
// path is untouched. What it cannot see it says (Status): not Linux, no
// CAP_NET_ADMIN, events lost when the socket's buffer overflowed (ENOBUFS).
package natwatch

import (
	"cmp"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultReadBuffer is the event socket's receive buffer: a NEW event is
// about 200 bytes, so 8 MiB holds some 40,000 connections between reads.
const DefaultReadBuffer = 8 << 20

// Options tune a watch; the zero value is the default.
type Options struct {
	// ReadBuffer is the event socket's receive buffer in bytes
	// (DefaultReadBuffer when 0). The kernel drops events that do not fit
	// (ENOBUFS); tests make it tiny to make it do so.
	ReadBuffer int
}

// Conn is one connection as conntrack saw it created: from the prober's
// address to Orig, rewritten to Dest (the pod), noted At (local receive
// time of the event).
type Conn struct {
	Src  netip.AddrPort
	Orig netip.AddrPort // the address the prober dialled
	Dest netip.AddrPort // where it went after NAT; Orig when not rewritten
	At   time.Time
}

// Status says what the watch saw and could not see.
type Status struct {
	// Watching: conntrack events were read; Reason says why not otherwise.
	Watching bool
	Reason   string
	// Conns is how many connections to the watched ports were seen
	// (counted from the table).
	Conns int
	// Lost: the kernel dropped events (the socket's buffer overflowed):
	// some connections have no mapping. LostReason says what happened.
	Lost       bool
	LostReason string
	// Losses counts the reads that failed, ENOBUFS (events dropped) among
	// them; reading goes on after each.
	Losses int
	// Since is when the watch began reading; MaxLag the longest time
	// between two reads of the socket (an event is stamped at most that
	// late): what NoEntry needs to rule a connection's event out.
	Since  time.Time
	MaxLag time.Duration
	// SynSentTimeout is how long the kernel keeps an unanswered SYN's
	// entry after its last SYN (net.netfilter.nf_conntrack_tcp_timeout_syn_sent
	// in the watched namespace, read when the watch began); 0 when it could
	// not be read. Joined needs it.
	SynSentTimeout time.Duration
	// LingeringReason says why the entries left before the watch began
	// could not be listed (Table.Lingering); empty when they were.
	LingeringReason string
}

// Lingering is an entry conntrack held when the watch began, of a
// connection from this host to a watched port that was never answered:
// an earlier process's, which lives until Until (at least: a SYN that
// joins it renews it) and sends a new connection of its tuple to Dest.
type Lingering struct {
	Conn
	Until time.Time
}

// lingersUntil is when an entry the dump found at now with timeout
// seconds left expires, at the latest: the kernel gives the whole seconds
// left, rounded down (ctnetlink_dump_timeout: nf_ct_expires / HZ), so the
// entry can live up to a second past now+timeout. Holding its port only
// that long left a second in which a new connection could draw the port
// and join the entry (seen in a warm rehearsal of d284dfe: one SYN of the
// lab's second late-ready run went to a pod the first run had deleted,
// with every one of the 112 stale entries' ports held).
func lingersUntil(now time.Time, timeout uint32) time.Time {
	return now.Add(time.Duration(timeout+1) * time.Second)
}

// Table holds the connections seen. Safe for concurrent use.
//
// The watch adds one per event, thousands a second on a busy prober, on
// the prober's own cores: each is appended to chunks of records that hold
// no pointers (the garbage collector never scans them; a new chunk every
// recordChunk connections is the only allocation, and nothing is copied
// as the table grows). They are indexed by source port (a
// port is used again once its connection is closed, so each port keeps
// every connection, in order) only when first asked: lookups come after
// the run, or for a failure now and then.
type Table struct {
	mu      sync.Mutex
	base    time.Time           // records' times are offsets from it
	chunks  [][]record          // each recordChunk long but the last
	n       int                 // records in chunks
	byPort  map[uint16][]int32  // indexes of the first indexed records, by source port
	dialled map[packedAddr]bool // the indexed records' Orig addresses
	indexed int
	status  Status
	// lingering: the unanswered entries the watch found when it began.
	lingering []Lingering
}

// Lingering lists the unanswered entries of connections from this host to
// the watched ports that conntrack held when the watch began: their
// source ports are best kept from new connections until Until.
func (t *Table) Lingering() []Lingering {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.lingering)
}

// AddLingering records an entry found when the watch began (the watch
// does; for callers' tests).
func (t *Table) AddLingering(l Lingering) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lingering = append(t.lingering, l)
}

const recordChunk = 4096

// at is the i-th record; t.mu must be held.
func (t *Table) at(i int) *record { return &t.chunks[i/recordChunk][i%recordChunk] }

// record is a Conn without pointers.
type record struct {
	src, orig, dest packedAddr
	at              time.Duration // since Table.base
}

type packedAddr struct {
	ip   [16]byte
	port uint16
	v4   bool
}

func pack(a netip.AddrPort) packedAddr {
	return packedAddr{ip: a.Addr().As16(), port: a.Port(), v4: a.Addr().Is4()}
}

func (p packedAddr) addrPort() netip.AddrPort {
	ip := netip.AddrFrom16(p.ip)
	if p.v4 {
		ip = ip.Unmap()
	}
	return netip.AddrPortFrom(ip, p.port)
}

func (t *Table) conn(r *record) Conn {
	return Conn{Src: r.src.addrPort(), Orig: r.orig.addrPort(), Dest: r.dest.addrPort(), At: t.base.Add(r.at)}
}

// NewTable makes an empty table.
func NewTable() *Table {
	return &Table{base: time.Now(), byPort: map[uint16][]int32{}, dialled: map[packedAddr]bool{}}
}

// NewWatchedTable makes an empty table as a watch begun at since fills
// it, losing nothing and reading on time, in a namespace with the
// kernel's default SYN_SENT timeout: for callers' tests (NoEntry and
// Joined judge by it).
func NewWatchedTable(since time.Time) *Table {
	t := NewTable()
	t.status = Status{Watching: true, Since: since, SynSentTimeout: DefaultSynSentTimeout}
	return t
}

// DefaultSynSentTimeout is the kernel's default
// nf_conntrack_tcp_timeout_syn_sent.
const DefaultSynSentTimeout = 120 * time.Second

// Add records a connection seen.
func (t *Table) Add(c Conn) {
	r := record{src: pack(c.Src), orig: pack(c.Orig), dest: pack(c.Dest), at: c.At.Sub(t.base)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n%recordChunk == 0 {
		t.chunks = append(t.chunks, make([]record, 0, recordChunk))
	}
	last := len(t.chunks) - 1
	t.chunks[last] = append(t.chunks[last], r)
	t.n++
}

// port lists the indexes of the records from port, in the order seen;
// t.mu must be held.
func (t *Table) port(port uint16) []int32 {
	for ; t.indexed < t.n; t.indexed++ {
		r := t.at(t.indexed)
		t.byPort[r.src.port] = append(t.byPort[r.src.port], int32(t.indexed))
		t.dialled[r.orig] = true
	}
	return t.byPort[port]
}

func (t *Table) setStatus(f func(*Status)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(&t.status)
}

// Status is what the watch saw so far.
func (t *Table) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.status
	st.Conns = t.n
	return st
}

// matchSlack is how long after a fresh connection's SYN its event may be
// received: an event is delivered within milliseconds of the SYN and read
// on a short timer; the second covers a stalled reader.
const matchSlack = time.Second

// earlySlack is how much earlier than a request's start its connection's
// event may be received: none can be, as the SYN follows the start; the
// slack covers the two clocks' reading order. An event older than that is
// a previous connection's on the same port.
const earlySlack = 5 * time.Millisecond

// Attempt is one request's connection as the prober saw it: what Find and
// NoEntry are asked about.
type Attempt struct {
	// Src is the prober's local address (its address may be unspecified:
	// then the port alone is matched); Remote the address it dialled.
	Src, Remote netip.AddrPort
	// Start is when the request began: a fresh one's dial, so its SYN
	// left at or after it.
	Start time.Time
	// End is when the request ended (zero: Start). A fresh connection's
	// SYN left by then: a refusal answers it, a connection carries the
	// request after it. On a stalled machine the SYN can leave seconds
	// after Start (a CI run had refusals whose SYNs left 2 s after it), so
	// the event is looked for up to End+matchSlack: the port was the
	// request's own from its dial to End, so no other connection of ours
	// used it in between.
	End time.Time
	// Fresh: the request opened its connection; otherwise it was sent on
	// a kept-alive one.
	Fresh bool
	// Next is when the next connection from Src's port was dialled (zero
	// when none is known): for a fresh request, an event received from
	// then on cannot be its connection's alone.
	Next time.Time
	// Unanswered: a fresh connect that got neither a SYN-ACK nor a reset
	// (the prober's connect_timeout: its deadline, or EHOSTUNREACH when
	// the neighbour never answered): its entry stays in SYN_SENT (Joined).
	Unanswered bool
}

// lastSYN is the latest a fresh attempt's SYN can have left.
func (a Attempt) lastSYN() time.Time {
	if a.End.After(a.Start) {
		return a.End
	}
	return a.Start
}

// Lookup finds the connection of a fresh (or kept-alive) request from
// src to remote begun at start, knowing nothing else of it: Find with
// neither End nor Next (the tests' shorthand; callers that know a
// request's end and the port's next dial use Find).
func (t *Table) Lookup(src, remote netip.AddrPort, start time.Time, fresh bool) (Conn, bool) {
	return t.Find(Attempt{Src: src, Remote: remote, Start: start, Fresh: fresh})
}

// Find finds the connection of a request. Fresh: the request opened its
// connection, so the connection is one whose event was received from
// Start (less earlySlack) to matchSlack after its SYN's latest time (End),
// and before Next; otherwise (a kept-alive connection) the last one seen
// before Start. ok false when none matches, and, for a fresh request, when
// two connections in that window went to different pods: a port used
// again within it (a refused connection frees its port at once, and
// another process may take it) leaves the events' order as the only
// tie-break, and events read in one batch share one receive time (a port
// used again within a read leaves both connections unmapped). Such a
// request falls back to inference rather than be named for certain and
// wrongly.
func (t *Table) Find(a Attempt) (Conn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.find(a)
}

// Ambiguous reports whether Find found no connection for a fresh request
// because its window held two from its port to its address that went to
// different places (a port used again within it), not because it held
// none.
func (t *Table) Ambiguous(a Attempt) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _, ambiguous := t.match(a)
	return ambiguous
}

// find is Find; t.mu must be held.
func (t *Table) find(a Attempt) (Conn, bool) {
	best, found, ambiguous := t.match(a)
	if ambiguous {
		return Conn{}, false
	}
	return best, found
}

// match is Find's search: the first connection in a's window (the last
// before Start for a kept-alive one), and whether a fresh one's window
// held others that went elsewhere. t.mu must be held.
func (t *Table) match(a Attempt) (best Conn, found, ambiguous bool) {
	from, until := a.Start.Add(-earlySlack), a.lastSYN().Add(matchSlack)
	for _, i := range t.port(a.Src.Port()) {
		c := t.conn(t.at(int(i)))
		if c.Orig != a.Remote || (a.Src.Addr().IsValid() && !a.Src.Addr().IsUnspecified() && c.Src.Addr() != a.Src.Addr()) {
			continue
		}
		if a.Fresh {
			if c.At.Before(from) || c.At.After(until) || (!a.Next.IsZero() && !c.At.Before(a.Next)) {
				continue
			}
			if found && c.Dest != best.Dest {
				ambiguous = true
			}
			if !found {
				best, found = c, true
			}
			continue
		}
		if !c.At.After(a.Start) && (!found || c.At.After(best.At)) {
			best, found = c, true
		}
	}
	return best, found, ambiguous
}

// NoEntry reports whether the table shows for certain that a fresh
// connection (a) left no conntrack entry: its SYN was refused or dropped
// by this host's own rules before any rewrite to a pod (conntrack confirms
// an entry, and sends its event, only once the packet has passed them;
// kube-proxy rejects a Service address it holds no endpoint for, and drops
// one with no local endpoint under a Local traffic policy). Certain only
// when the watch read from before Start on, lost no event, and never
// lagged long enough for an event to be stamped past matchSlack after its
// SYN: then no event from the port to Remote stamped within
// [Start-earlySlack, End+matchSlack] (the SYN left by End: Attempt.End)
// means none was sent; and only when no earlier connection of the same
// tuple has an entry that may still live (staleEntryLife), which the SYN
// would have joined without an event. And only when the table holds some
// connection to Remote: proof that this host's conntrack sees the SYNs to
// it at all. Where the address is rewritten on another host (a node port
// probed from outside the cluster) or nothing here makes the kernel track
// connections, no SYN leaves an event, and a missing one says nothing (a
// warm CI run had rollprobe say "refused by the probing host's own rules"
// for a node's refusal, with 0 connections seen). Any event in that span
// counts against, Next notwithstanding. Entries left by another process
// before the watch began cannot be seen: callers ask only for refusals (a
// stale unanswered SYN's entry leads to a timeout).
func (t *Table) NoEntry(a Attempt) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.status
	if !st.Watching || st.Lost || st.Since.IsZero() || a.Start.Before(st.Since) || st.MaxLag >= matchSlack-earlySlack {
		return false
	}
	fromPort := t.port(a.Src.Port()) // indexes every record: dialled is complete
	if !t.dialled[pack(a.Remote)] {
		return false
	}
	from, until := a.Start.Add(-staleEntryLife), a.lastSYN().Add(matchSlack)
	for _, i := range fromPort {
		c := t.conn(t.at(int(i)))
		if c.Orig != a.Remote {
			continue
		}
		// An event up to its SYN's latest time may be its own; an earlier
		// one from the same port to the same address may be an entry still
		// alive (an unanswered SYN's lives staleEntryLife), which a new SYN
		// of the same tuple joins without a new event, rewritten as before.
		if !c.At.Before(from) && !c.At.After(until) {
			return false
		}
	}
	return true
}

// Joined finds the entry a fresh connection's SYN joined when it left no
// event of its own: an earlier connection of the same tuple (this port
// and address) that went unanswered left its entry in SYN_SENT, where it
// lives SynSentTimeout after its last SYN, and kube-proxy does not clear
// it (kubernetes#101607); conntrack matches a new SYN of that tuple to it
// before any rule is consulted, so the SYN goes where the first one went,
// without a NEW event, however the rules changed since: to a pod gone
// long before, a CI run showed (a connect timeout 5.6 s after the pod's
// deletion, its SYN to the pod's address on the capture).
//
// earlier holds the attempts from the same port before a (any order;
// others are ignored). Certain only when the watch read from before the
// earlier connection on, lost nothing and never lagged past matchSlack,
// and the namespace's SYN_SENT timeout is known: then no event in a's own
// window means its SYN joined a live entry or was stopped before
// conntrack confirmed one; the latest event of the tuple before it is an
// unanswered attempt's, found for that attempt alone (Find); and a's SYN
// left within the timeout of that attempt's first SYN, so the entry was
// alive, and a lookup finds it before any rule can stop the SYN. With no
// event of the tuple since the watch began, the entry is one the watch
// found lingering when it began (Lingering: a previous run's), alive when
// a's SYN left.
func (t *Table) Joined(a Attempt, earlier []Attempt) (Conn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.status
	if st.SynSentTimeout <= 0 {
		return Conn{}, false
	}
	last, found, own := t.latestBefore(a)
	if own || !found {
		return Conn{}, false
	}
	if last.lingering {
		// No connection of the tuple since the watch began: an entry left
		// before it, alive when the SYN left, is the one it joined.
		return last.Conn, a.lastSYN().Before(last.until)
	}
	for _, p := range earlier {
		if !p.Fresh || !p.Unanswered || p.Remote != a.Remote || p.Src.Port() != a.Src.Port() || !p.Start.Before(a.Start) || p.Start.Before(st.Since) {
			continue
		}
		if own, ok := t.find(p); !ok || own.Dest != last.Dest || !own.At.Equal(last.At) {
			continue
		}
		if a.lastSYN().Before(p.Start.Add(st.SynSentTimeout)) {
			return last.Conn, true
		}
	}
	return Conn{}, false
}

// UnansweredByPort holds the unanswered attempts by source port: what Joined is
// given as a port's earlier ones.
type UnansweredByPort map[uint16][]Attempt

// AddUnanswered notes a if it is a fresh connect that went unanswered.
func (b UnansweredByPort) AddUnanswered(a Attempt) {
	if a.Fresh && a.Unanswered && a.Src.Port() != 0 {
		b[a.Src.Port()] = append(b[a.Src.Port()], a)
	}
}

// prior is the latest entry of a tuple before an attempt: a connection's
// event, or an entry found lingering when the watch began (until: its
// end).
type prior struct {
	Conn
	lingering bool
	until     time.Time
}

// latestBefore finds, for a fresh attempt, the latest entry of its tuple
// made before its window (own: an event in its window, which is Find's to
// judge; then found is false). Only where the watch read from before the
// attempt, lost nothing and never lagged past matchSlack: then no event in
// the window means its SYN made no entry of its own. An event older than
// staleEntryLife is no entry that can still live, save an established
// connection's, which holds its port; t.mu must be held.
func (t *Table) latestBefore(a Attempt) (last prior, found, own bool) {
	st := t.status
	if !a.Fresh || !st.Watching || st.Lost || st.Since.IsZero() || a.Start.Before(st.Since) || st.MaxLag >= matchSlack-earlySlack {
		return prior{}, false, false
	}
	from, until := a.Start.Add(-earlySlack), a.lastSYN().Add(matchSlack)
	for _, i := range t.port(a.Src.Port()) {
		c := t.conn(t.at(int(i)))
		if c.Orig != a.Remote || (a.Src.Addr().IsValid() && !a.Src.Addr().IsUnspecified() && c.Src.Addr() != a.Src.Addr()) {
			continue
		}
		if !c.At.Before(from) {
			if !c.At.After(until) {
				return prior{}, false, true
			}
			continue
		}
		if !found || c.At.After(last.At) {
			last, found = prior{Conn: c}, true
		}
	}
	if found {
		if last.At.Before(a.Start.Add(-staleEntryLife)) {
			return prior{}, false, false
		}
		return last, true, false
	}
	for _, l := range t.lingering {
		if l.Src.Port() == a.Src.Port() && l.Orig == a.Remote && (!a.Src.Addr().IsValid() || a.Src.Addr().IsUnspecified() || l.Src.Addr() == a.Src.Addr()) &&
			a.lastSYN().Before(l.Until) {
			return prior{Conn: l.Conn, lingering: true, until: l.Until}, true, false
		}
	}
	return prior{}, false, false
}

// Prior finds, for a fresh connection whose SYN left no conntrack event
// of its own (the watch read throughout, lost nothing, never lagged), the
// latest entry of its tuple made before it, within the life such an entry
// can have (staleEntryLife), or found lingering when the watch began: the
// entry its SYN most likely joined, going where that connection went.
// Not certain (Joined says when it is): a SYN a rule of this host dropped
// before conntrack confirmed an entry leaves no event either, and whether
// the earlier entry still lived depends on how its connection ended.
func (t *Table) Prior(a Attempt) (Conn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, found, _ := t.latestBefore(a)
	return last.Conn, found
}

// staleEntryLife is how long before a request an earlier connection's
// entry with its tuple may live on: an unanswered SYN's (the kernel's
// nf_conntrack_tcp_timeout_syn_sent, 120 s by default, kube-proxy does
// not clear it: kubernetes#101607), with a second of slack. A CI run had
// two connect timeouts, with no NEW event, whose SYNs went to a pod.
const staleEntryLife = 121 * time.Second

// Ports lists the source ports seen, sorted (for tests and debugging).
func (t *Table) Ports() []uint16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.port(0) // indexes every record
	out := make([]uint16, 0, len(t.byPort))
	for p := range t.byPort {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Dials holds when the run's connections were dialled, by local port: a
// port is used again once its connection is closed, and the next dial from
// it bounds where an earlier connection's event can be (Find). Add
// every dial, then Sort once before Next.
type Dials map[uint16][]time.Time

// Add notes a dial from port at t (port 0: none was bound; ignored).
func (d Dials) Add(port uint16, t time.Time) {
	if port != 0 {
		d[port] = append(d[port], t)
	}
}

// Sort orders each port's dials.
func (d Dials) Sort() {
	for _, ts := range d {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	}
}

// Next is the first dial from port after t; zero when none is known.
func (d Dials) Next(port uint16, t time.Time) time.Time {
	ts := d[port]
	i := sort.Search(len(ts), func(i int) bool { return ts[i].After(t) })
	if i == len(ts) {
		return time.Time{}
	}
	return ts[i]
}

// Carried is a connection that carried responses, as the prober logged
// it: its addresses, when it was dialled and established (zero: not
// known), how many responses it carried.
type Carried struct {
	Local, Remote     netip.AddrPort
	Dialed, Connected time.Time
	Responses         uint64
}

// Served is what the connections dialled in one second carried to one
// address after the rewrite.
type Served struct {
	Dest netip.AddrPort
	// Second is whole seconds from the epoch given to Serve (0 for a
	// connection dialled before it).
	Second    int64
	Conns     uint64
	Responses uint64
}

// Serve counts carried connections' responses by the address conntrack
// saw each go to and the second it was dialled in (second: the run's
// second a wall time falls in; one before the run counts in the first),
// each connection found as a fresh request's is (Find, its window ended
// by the next dial from its port in dials); in order of second, then
// address as text. unmapped is the responses of the connections it did
// not find.
func (t *Table) Serve(carried []Carried, dials Dials, second func(time.Time) int64) (out []Served, unmapped uint64) {
	type key struct {
		dest   netip.AddrPort
		second int64
	}
	at := map[key]int{}
	for _, c := range carried {
		got, ok := t.Find(Attempt{Src: c.Local, Remote: c.Remote, Start: c.Dialed, End: c.Connected, Fresh: true, Next: dials.Next(c.Local.Port(), c.Dialed)})
		if !ok {
			unmapped += c.Responses
			continue
		}
		k := key{got.Dest, max(0, second(c.Dialed))}
		i, seen := at[k]
		if !seen {
			i = len(out)
			at[k] = i
			out = append(out, Served{Dest: k.dest, Second: k.second})
		}
		out[i].Conns++
		out[i].Responses += c.Responses
	}
	slices.SortFunc(out, func(a, b Served) int {
		if a.Second != b.Second {
			return cmp.Compare(a.Second, b.Second)
		}
		return strings.Compare(a.Dest.String(), b.Dest.String())
	})
	return out, unmapped
}
