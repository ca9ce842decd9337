package natwatch

import (
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// A port carries several connections over a run: a fresh request's is the
// one created closest to its start (within a second), a kept-alive
// request's the last one created before it; another destination or
// another source address is another connection.
func TestLookup(t *testing.T) {
	tb := NewTable()
	svc := ap("10.96.0.10:80")
	tb.Add(Conn{Src: ap("10.0.0.1:40000"), Orig: svc, Dest: ap("10.244.1.5:8080"), At: t0})
	tb.Add(Conn{Src: ap("10.0.0.1:40000"), Orig: svc, Dest: ap("10.244.2.7:8080"), At: t0.Add(30 * time.Second)})
	tb.Add(Conn{Src: ap("10.0.0.1:40000"), Orig: ap("10.96.0.11:80"), Dest: ap("10.244.9.9:8080"), At: t0.Add(30 * time.Second)})
	for _, tc := range []struct {
		name  string
		src   netip.AddrPort
		start time.Time
		fresh bool
		want  string // "" for no match
	}{
		{"fresh, first", ap("10.0.0.1:40000"), t0.Add(-2 * time.Millisecond), true, "10.244.1.5:8080"},
		{"fresh, second", ap("10.0.0.1:40000"), t0.Add(30*time.Second + time.Millisecond), true, "10.244.2.7:8080"},
		{"fresh, none near", ap("10.0.0.1:40000"), t0.Add(10 * time.Second), true, ""},
		{"kept alive on the first", ap("10.0.0.1:40000"), t0.Add(20 * time.Second), false, "10.244.1.5:8080"},
		{"kept alive on the second", ap("10.0.0.1:40000"), t0.Add(50 * time.Second), false, "10.244.2.7:8080"},
		{"another source address", ap("10.0.0.2:40000"), t0, true, ""},
		{"another port", ap("10.0.0.1:40001"), t0, true, ""},
	} {
		c, ok := tb.Lookup(tc.src, svc, tc.start, tc.fresh)
		got := ""
		if ok {
			got = c.Dest.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if tb.Status().Conns != 3 {
		t.Errorf("status %+v", tb.Status())
	}
}

// A port used again within a request's window: a refused connection
// frees its port at once, and the kernel may hand it to the next connect
// to the same Service. Events read in one batch share one receive time,
// and a previous connection's event read late looks as near as the
// request's own: when the two went to different pods the request has no
// certain mapping (it falls back to inference); to the same pod, it has.
// An event received before the request started is never its own.
// Ambiguous tells the two unmapped cases apart: the window held
// connections to different pods, or none.
func TestLookupRefusesAPortUsedTwiceInItsWindow(t *testing.T) {
	svc := ap("10.96.0.10:80")
	src := ap("10.0.0.1:40000")
	start := t0.Add(time.Second)
	for _, tc := range []struct {
		name      string
		conns     []Conn
		want      string
		ambiguous bool
	}{
		{"an earlier connection's event, read before the start", []Conn{
			{Src: src, Orig: svc, Dest: ap("10.244.1.5:8080"), At: start.Add(-300 * time.Millisecond)},
			{Src: src, Orig: svc, Dest: ap("10.244.2.7:8080"), At: start.Add(40 * time.Millisecond)},
		}, "10.244.2.7:8080", false},
		{"only an earlier connection's event: not the request's", []Conn{
			{Src: src, Orig: svc, Dest: ap("10.244.1.5:8080"), At: start.Add(-3 * time.Millisecond).Add(-earlySlack)},
		}, "", false},
		{"two in one batch, to different pods", []Conn{
			{Src: src, Orig: svc, Dest: ap("10.244.1.5:8080"), At: start.Add(8 * time.Millisecond)},
			{Src: src, Orig: svc, Dest: ap("10.244.2.7:8080"), At: start.Add(8 * time.Millisecond)},
		}, "", true},
		{"an earlier one read late, then the request's, different pods", []Conn{
			{Src: src, Orig: svc, Dest: ap("10.244.1.5:8080"), At: start.Add(time.Millisecond)},
			{Src: src, Orig: svc, Dest: ap("10.244.2.7:8080"), At: start.Add(12 * time.Millisecond)},
		}, "", true},
		{"two in the window, to the same pod", []Conn{
			{Src: src, Orig: svc, Dest: ap("10.244.1.5:8080"), At: start.Add(2 * time.Millisecond)},
			{Src: src, Orig: svc, Dest: ap("10.244.1.5:8080"), At: start.Add(9 * time.Millisecond)},
		}, "10.244.1.5:8080", false},
	} {
		tb := NewTable()
		for _, c := range tc.conns {
			tb.Add(c)
		}
		got := ""
		if c, ok := tb.Lookup(src, svc, start, true); ok {
			got = c.Dest.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if a := tb.Ambiguous(Attempt{Src: src, Remote: svc, Start: start, Fresh: true}); a != tc.ambiguous {
			t.Errorf("%s: Ambiguous %t, want %t", tc.name, a, tc.ambiguous)
		}
	}
}

// Knowing when the port's next connection was dialled ends a fresh
// request's window there: a later connection's event no longer makes its
// own ambiguous; one read in the same batch as its own (one receive time,
// at or after the next dial) still leaves it unmapped, never misnamed.
func TestFindUntilTheNextDial(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	ap := netip.MustParseAddrPort
	svc, src := ap("10.96.0.10:80"), ap("10.0.0.1:40000")
	start := t0.Add(time.Second)
	mine, theirs := ap("10.244.1.5:8080"), ap("10.244.2.7:8080")
	for _, tc := range []struct {
		name      string
		theirsAt  time.Duration // the next connection's event, from start
		nextDial  time.Duration // its dial, from start (0: not known)
		want, alt string        // what Find and Lookup give
	}{
		{"the next connection 400 ms later", 405 * time.Millisecond, 400 * time.Millisecond, mine.String(), ""},
		{"unknown next dial", 405 * time.Millisecond, 0, "", ""},
		{"the next connection's event in the same read", 6 * time.Millisecond, 4 * time.Millisecond, "", ""},
	} {
		tb := NewTable()
		at := start.Add(6 * time.Millisecond)
		tb.Add(Conn{Src: src, Orig: svc, Dest: mine, At: at})
		tb.Add(Conn{Src: src, Orig: svc, Dest: theirs, At: start.Add(tc.theirsAt)})
		var next time.Time
		if tc.nextDial > 0 {
			next = start.Add(tc.nextDial)
		}
		got, alt := "", ""
		if c, ok := tb.Find(Attempt{Src: src, Remote: svc, Start: start, Fresh: true, Next: next}); ok {
			got = c.Dest.String()
		}
		if c, ok := tb.Lookup(src, svc, start, true); ok {
			alt = c.Dest.String()
		}
		if got != tc.want || alt != tc.alt {
			t.Errorf("%s: Find %q, Lookup %q; want %q and %q", tc.name, got, alt, tc.want, tc.alt)
		}
	}
}

// On a stalled machine a fresh connection's SYN can leave seconds after
// the request began (a CI run's refusals, stamped as begun at +5.34 s, were
// reset by an old pod at +7.33 s): its event is its own up to a second
// after the request ended, as the port was the request's until then; not
// when the next dial from the port came first, nor, knowing no end, past
// a second after the start.
func TestFindASYNSentLate(t *testing.T) {
	svc, src := ap("10.96.0.10:80"), ap("10.0.0.1:40000")
	pod := ap("10.244.2.78:8080")
	for _, tc := range []struct {
		name      string
		eventAt   time.Duration // from t0
		end, next time.Duration // from t0; 0: not known
		want      string
	}{
		{"refused 2 s after its start, the event just before", 1990 * time.Millisecond, 2 * time.Second, 0, pod.String()},
		{"the event read 800 ms after the refusal", 2800 * time.Millisecond, 2 * time.Second, 0, pod.String()},
		{"the event over a second after the refusal", 3100 * time.Millisecond, 2 * time.Second, 0, ""},
		{"the port's next dial before the event", 1990 * time.Millisecond, 2 * time.Second, 1500 * time.Millisecond, ""},
		{"no end known", 1990 * time.Millisecond, 0, 0, ""},
	} {
		tb := NewTable()
		tb.Add(Conn{Src: src, Orig: svc, Dest: pod, At: t0.Add(tc.eventAt)})
		a := Attempt{Src: src, Remote: svc, Start: t0, Fresh: true}
		if tc.end > 0 {
			a.End = t0.Add(tc.end)
		}
		if tc.next > 0 {
			a.Next = t0.Add(tc.next)
		}
		got := ""
		if c, ok := tb.Find(a); ok {
			got = c.Dest.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Serve counts each carried connection's responses under the address its
// event names and the second it was dialled in (before the epoch: second
// 0), sums one address's second, orders by second then address as text,
// and counts as unmapped the responses of a connection with no event; a
// connection established late finds its late event.
func TestServe(t *testing.T) {
	svc := ap("10.96.0.10:80")
	epoch := t0.Add(10 * time.Second)
	tb := NewTable()
	dials := Dials{}
	var carried []Carried
	conn := func(port uint16, dialed time.Time, dest string, responses uint64) {
		src := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), port)
		if dest != "" {
			tb.Add(Conn{Src: src, Orig: svc, Dest: ap(dest), At: dialed.Add(time.Millisecond)})
		}
		dials.Add(port, dialed)
		carried = append(carried, Carried{Local: src, Remote: svc, Dialed: dialed, Responses: responses})
	}
	conn(40001, epoch.Add(1500*time.Millisecond), "10.244.1.9:8080", 3)
	conn(40002, epoch.Add(1100*time.Millisecond), "10.244.1.10:8080", 5)
	conn(40003, epoch.Add(1900*time.Millisecond), "10.244.1.9:8080", 4)
	conn(40004, epoch.Add(-200*time.Millisecond), "10.244.1.9:8080", 1)
	conn(40005, epoch.Add(300*time.Millisecond), "", 7) // no event: unmapped
	// A stalled machine: connected 2 s after its dial, its event 1.95 s
	// after it; counted in the second it was dialled in.
	late := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), 40006)
	lateDial := epoch.Add(2100 * time.Millisecond)
	tb.Add(Conn{Src: late, Orig: svc, Dest: ap("10.244.1.10:8080"), At: lateDial.Add(1950 * time.Millisecond)})
	dials.Add(late.Port(), lateDial)
	carried = append(carried, Carried{Local: late, Remote: svc, Dialed: lateDial, Connected: lateDial.Add(2 * time.Second), Responses: 6})
	dials.Sort()
	got, unmapped := tb.Serve(carried, dials, func(t time.Time) int64 { return int64(math.Floor(t.Sub(epoch).Seconds())) })
	want := []Served{
		{Dest: ap("10.244.1.9:8080"), Second: 0, Conns: 1, Responses: 1},
		{Dest: ap("10.244.1.10:8080"), Second: 1, Conns: 1, Responses: 5},
		{Dest: ap("10.244.1.9:8080"), Second: 1, Conns: 2, Responses: 7},
		{Dest: ap("10.244.1.10:8080"), Second: 2, Conns: 1, Responses: 6},
	}
	if !slices.Equal(got, want) || unmapped != 7 {
		t.Errorf("served %+v, unmapped %d; want %+v, 7", got, unmapped, want)
	}
}

// NoEntry rules a connection's event out only where the watch could not
// have missed it: read from before the request, nothing lost, never
// lagging a second; then any event from the request's port to the same
// address near its start (its own, or another connection's it could be
// mistaken for) says there was one.
func TestNoEntry(t *testing.T) {
	svc := ap("10.96.0.10:80")
	live := Status{Watching: true, Since: t0.Add(-time.Minute), MaxLag: 30 * time.Millisecond}
	near := Conn{Src: ap("10.0.0.1:40000"), Orig: svc, Dest: ap("10.244.1.5:8080"), At: t0.Add(400 * time.Millisecond)}
	// neighbour: another port's connection to the same address, the
	// evidence that this host's conntrack sees SYNs to it.
	neighbour := Conn{Src: ap("10.0.0.1:40001"), Orig: svc, Dest: ap("10.244.1.6:8080"), At: t0.Add(300 * time.Millisecond)}
	for _, tc := range []struct {
		name string
		tb   *Table
		src  netip.AddrPort
		want bool
		end  time.Duration // when the request ended, from t0 (0: at t0)
	}{
		{"no event from its port, others' to the address", tableWith(live, neighbour), ap("0.0.0.0:40000"), true, 0},
		{"no event to the address at all (rewritten elsewhere, or untracked here)", tableWith(live), ap("0.0.0.0:40000"), false, 0},
		{"an event near its start", tableWith(live, neighbour, near), ap("0.0.0.0:40000"), false, 0},
		{"an event just before its start, within the clocks' slack", tableWith(live, neighbour, Conn{Src: near.Src, Orig: svc, Dest: near.Dest, At: t0.Add(-time.Millisecond)}), ap("0.0.0.0:40000"), false, 0},
		{"an event a minute before (a previous connection's entry may live: its SYN unanswered)", tableWith(live, neighbour, Conn{Src: near.Src, Orig: svc, Dest: near.Dest, At: t0.Add(-time.Minute)}), ap("0.0.0.0:40000"), false, 0},
		{"an event long before (no entry of it can live)", tableWith(Status{Watching: true, Since: t0.Add(-time.Hour)}, neighbour, Conn{Src: near.Src, Orig: svc, Dest: near.Dest, At: t0.Add(-3 * time.Minute)}), ap("0.0.0.0:40000"), true, 0},
		{"an event after the window (a later connection)", tableWith(live, neighbour, Conn{Src: near.Src, Orig: svc, Dest: near.Dest, At: t0.Add(2 * time.Second)}), ap("0.0.0.0:40000"), true, 0},
		{"an event to another address", tableWith(live, neighbour, Conn{Src: near.Src, Orig: ap("10.96.0.11:80"), Dest: near.Dest, At: near.At}), ap("0.0.0.0:40000"), true, 0},
		{"only events to other addresses", tableWith(live, Conn{Src: near.Src, Orig: ap("10.96.0.11:80"), Dest: near.Dest, At: near.At}), ap("0.0.0.0:40000"), false, 0},
		{"events lost", tableWith(Status{Watching: true, Since: live.Since, Lost: true}, neighbour), ap("0.0.0.0:40000"), false, 0},
		{"not watching", tableWith(Status{Reason: "no CAP_NET_ADMIN"}, neighbour), ap("0.0.0.0:40000"), false, 0},
		{"the watch began after the request", tableWith(Status{Watching: true, Since: t0.Add(time.Millisecond)}, neighbour), ap("0.0.0.0:40000"), false, 0},
		{"the reader stalled a second", tableWith(Status{Watching: true, Since: live.Since, MaxLag: 1200 * time.Millisecond}, neighbour), ap("0.0.0.0:40000"), false, 0},
		// A stalled machine sent the SYN 2 s after the request began; the
		// refusal came at once: the event is its own.
		{"an event after start+1 s, before the refusal came", tableWith(live, neighbour, Conn{Src: near.Src, Orig: svc, Dest: near.Dest, At: t0.Add(2010 * time.Millisecond)}), ap("0.0.0.0:40000"), false, 2 * time.Second},
		{"an event within a second after the refusal", tableWith(live, neighbour, Conn{Src: near.Src, Orig: svc, Dest: near.Dest, At: t0.Add(2900 * time.Millisecond)}), ap("0.0.0.0:40000"), false, 2 * time.Second},
		{"an event over a second after the refusal", tableWith(live, neighbour, Conn{Src: near.Src, Orig: svc, Dest: near.Dest, At: t0.Add(3100 * time.Millisecond)}), ap("0.0.0.0:40000"), true, 2 * time.Second},
	} {
		if got := tc.tb.NoEntry(Attempt{Src: tc.src, Remote: svc, Start: t0, End: t0.Add(tc.end), Fresh: true}); got != tc.want {
			t.Errorf("%s: NoEntry %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The table keeps connections without pointers: what it gives back is
// what it was given, IPv4, IPv6 and IPv4-mapped IPv6 alike, and the
// ports indexed after an Add, interleaved with lookups, are all there.
func TestTableKeepsWhatItWasGiven(t *testing.T) {
	tb := NewTable()
	given := []Conn{
		{Src: ap("10.0.0.1:40000"), Orig: ap("10.96.0.10:80"), Dest: ap("10.244.1.5:8080"), At: t0},
		{Src: ap("[fd00::1]:40001"), Orig: ap("[fd00:96::10]:80"), Dest: ap("[fd00:244::5]:8080"), At: t0.Add(time.Millisecond)},
		{Src: ap("[::ffff:10.0.0.1]:40002"), Orig: ap("[::ffff:10.96.0.10]:80"), Dest: ap("[::ffff:10.244.1.5]:8080"), At: t0.Add(2 * time.Millisecond)},
	}
	for i, c := range given {
		tb.Add(c)
		got, ok := tb.Lookup(c.Src, c.Orig, c.At, true)
		if !ok || got.Src != c.Src || got.Orig != c.Orig || got.Dest != c.Dest || !got.At.Equal(c.At) {
			t.Errorf("connection %d: got %+v (found %v), want %+v", i, got, ok, c)
		}
	}
	if st := tb.Status(); st.Conns != len(given) {
		t.Errorf("status counts %d connections, want %d", st.Conns, len(given))
	}
	if got := tb.Ports(); !slices.Equal(got, []uint16{40000, 40001, 40002}) {
		t.Errorf("ports %v", got)
	}
}

// TestTableAcrossChunks: more connections than two of the table's
// chunks hold, looked up both before and after the index by port is
// built, each found with what it was given (its pod, its time).
func TestTableAcrossChunks(t *testing.T) {
	tb := NewTable()
	const n = 2*recordChunk + 100
	conn := func(i int) Conn {
		pod := netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)})
		src := ap("10.0.0.1:0")
		if i%3 == 1 {
			src = ap("[fd00::1]:0")
		}
		return Conn{Src: netip.AddrPortFrom(src.Addr(), uint16(10000+i)), Orig: ap("10.96.0.10:80"),
			Dest: netip.AddrPortFrom(pod, 8080), At: t0.Add(time.Duration(i) * time.Millisecond)}
	}
	check := func(i int) {
		t.Helper()
		c := conn(i)
		got, ok := tb.Lookup(c.Src, c.Orig, c.At, true)
		if !ok || got.Src != c.Src || got.Dest != c.Dest || !got.At.Equal(c.At) {
			t.Fatalf("connection %d: got %+v (found %v), want %+v", i, got, ok, c)
		}
	}
	for i := range recordChunk + 1 {
		tb.Add(conn(i))
	}
	check(0)
	check(recordChunk) // the first of the second chunk; the index is built now
	for i := recordChunk + 1; i < n; i++ {
		tb.Add(conn(i)) // after the index: each must join it
	}
	for i := range n {
		check(i)
	}
	if st := tb.Status(); st.Conns != n {
		t.Errorf("status counts %d connections, want %d", st.Conns, n)
	}
	if got := len(tb.Ports()); got != n {
		t.Errorf("%d ports, want %d", got, n)
	}
}

// BenchmarkTableAdd is the watch's cost per event in the table: a new
// connection each, from ports in the ephemeral range.
func BenchmarkTableAdd(b *testing.B) {
	tb := NewTable()
	c := Conn{Src: ap("10.0.0.1:0"), Orig: ap("10.96.0.10:80"), Dest: ap("10.244.1.5:8080"), At: t0}
	b.ReportAllocs()
	for i := range b.N {
		c.Src = netip.AddrPortFrom(c.Src.Addr(), uint16(32768+i%28232))
		tb.Add(c)
	}
}

// Joined names the entry a SYN without an event of its own joined only
// when that entry is an unanswered earlier connection's of the same
// tuple, the latest event of the tuple, and certainly alive; or, with no
// event of the tuple since the watch began, one the watch found lingering
// then, alive when the SYN left.
func TestJoined(t *testing.T) {
	svc, src := ap("10.96.0.10:80"), ap("0.0.0.0:40000")
	gone, other := ap("10.244.1.5:8080"), ap("10.244.2.6:8080")
	live := Status{Watching: true, Since: t0.Add(-time.Minute), MaxLag: 30 * time.Millisecond, SynSentTimeout: DefaultSynSentTimeout}
	first := Attempt{Src: src, Remote: svc, Start: t0, End: t0.Add(time.Second), Fresh: true, Unanswered: true}
	itsEvent := Conn{Src: ap("10.0.0.1:40000"), Orig: svc, Dest: gone, At: t0.Add(2 * time.Millisecond)}
	at := func(d time.Duration) Attempt {
		return Attempt{Src: src, Remote: svc, Start: t0.Add(d), End: t0.Add(d + time.Second), Fresh: true, Unanswered: true}
	}
	answered := first
	answered.Unanswered = false
	lingering := func(tb *Table, l Lingering) *Table {
		tb.AddLingering(l)
		return tb
	}
	for _, tc := range []struct {
		name    string
		tb      *Table
		a       Attempt
		earlier []Attempt
		want    netip.AddrPort // zero: not joined
	}{
		{"an unanswered connection's entry, 6 s before", tableWith(live, itsEvent), at(6 * time.Second), []Attempt{first}, gone},
		{"the same, through a second unanswered one that joined it too", tableWith(live, itsEvent), at(9 * time.Second), []Attempt{at(6 * time.Second), first}, gone},
		{"its own event", tableWith(live, itsEvent, Conn{Src: itsEvent.Src, Orig: svc, Dest: other, At: t0.Add(6 * time.Second)}), at(6 * time.Second), []Attempt{first}, netip.AddrPort{}},
		{"the earlier one was answered (its entry is not left in SYN_SENT)", tableWith(live, itsEvent), at(6 * time.Second), []Attempt{answered}, netip.AddrPort{}},
		{"no earlier attempt known from the port", tableWith(live, itsEvent), at(6 * time.Second), nil, netip.AddrPort{}},
		{"the earlier one to another address", tableWith(live, itsEvent), at(6 * time.Second), []Attempt{{Src: src, Remote: ap("10.96.0.11:80"), Start: t0, Fresh: true, Unanswered: true}}, netip.AddrPort{}},
		{"a later connection of the tuple made a newer entry", tableWith(live, itsEvent, Conn{Src: itsEvent.Src, Orig: svc, Dest: other, At: t0.Add(3 * time.Second)}), at(6 * time.Second), []Attempt{first}, netip.AddrPort{}},
		{"past the SYN_SENT timeout", tableWith(live, itsEvent), at(120 * time.Second), []Attempt{first}, netip.AddrPort{}},
		{"a shorter timeout in the namespace", tableWith(Status{Watching: true, Since: live.Since, SynSentTimeout: 5 * time.Second}, itsEvent), at(6 * time.Second), []Attempt{first}, netip.AddrPort{}},
		{"the timeout not known", tableWith(Status{Watching: true, Since: live.Since}, itsEvent), at(6 * time.Second), []Attempt{first}, netip.AddrPort{}},
		{"events lost", tableWith(Status{Watching: true, Since: live.Since, Lost: true, SynSentTimeout: DefaultSynSentTimeout}, itsEvent), at(6 * time.Second), []Attempt{first}, netip.AddrPort{}},
		{"the reader stalled a second", tableWith(Status{Watching: true, Since: live.Since, MaxLag: 1200 * time.Millisecond, SynSentTimeout: DefaultSynSentTimeout}, itsEvent), at(6 * time.Second), []Attempt{first}, netip.AddrPort{}},
		{"the watch began after the earlier one", tableWith(Status{Watching: true, Since: t0.Add(time.Millisecond), SynSentTimeout: DefaultSynSentTimeout}, itsEvent), at(6 * time.Second), []Attempt{first}, netip.AddrPort{}},
		{"the earlier one's window holds two events to two pods", tableWith(live, itsEvent, Conn{Src: itsEvent.Src, Orig: svc, Dest: other, At: t0.Add(time.Millisecond)}), at(6 * time.Second), []Attempt{first}, netip.AddrPort{}},
		// Entries found when the watch began (a previous run's).
		{"an entry lingering from before the watch", lingering(tableWith(live), Lingering{Conn: itsEvent, Until: t0.Add(50 * time.Second)}), at(6 * time.Second), nil, gone},
		{"a lingering entry, expired by then", lingering(tableWith(live), Lingering{Conn: itsEvent, Until: t0.Add(6 * time.Second)}), at(6 * time.Second), nil, netip.AddrPort{}},
		{"a lingering entry another address's", lingering(tableWith(live), Lingering{Conn: Conn{Src: itsEvent.Src, Orig: ap("10.96.0.11:80"), Dest: gone}, Until: t0.Add(50 * time.Second)}), at(6 * time.Second), nil, netip.AddrPort{}},
		{"a lingering entry another host address's", lingering(tableWith(live), Lingering{Conn: itsEvent, Until: t0.Add(50 * time.Second)}), Attempt{Src: ap("10.0.0.2:40000"), Remote: svc, Start: t0.Add(6 * time.Second), Fresh: true}, nil, netip.AddrPort{}},
		{"a lingering entry replaced since: a connection of the tuple made a new one", lingering(tableWith(live, Conn{Src: itsEvent.Src, Orig: svc, Dest: other, At: t0.Add(3 * time.Second)}), Lingering{Conn: itsEvent, Until: t0.Add(50 * time.Second)}), at(6 * time.Second), nil, netip.AddrPort{}},
	} {
		c, ok := tc.tb.Joined(tc.a, tc.earlier)
		switch {
		case tc.want.IsValid() && (!ok || c.Dest != tc.want):
			t.Errorf("%s: joined %v (%v), want %v", tc.name, c.Dest, ok, tc.want)
		case !tc.want.IsValid() && ok:
			t.Errorf("%s: joined %v, want none", tc.name, c.Dest)
		}
		if _, ok := tc.tb.Find(tc.a); ok && tc.want.IsValid() {
			t.Errorf("%s: Find maps it too", tc.name)
		}
	}
}

// Prior names the latest entry of a fresh connection's tuple before it
// when its SYN made none of its own, whatever that earlier connection's
// fate: the entry it most likely followed. Nothing when the connection
// had its own event, the earlier one is older than any entry can live,
// or the watch could have missed an event.
func TestPrior(t *testing.T) {
	svc, src := ap("10.96.0.10:80"), ap("0.0.0.0:40000")
	gone := ap("10.244.1.5:8080")
	live := Status{Watching: true, Since: t0.Add(-time.Minute), MaxLag: 30 * time.Millisecond}
	earlier := Conn{Src: ap("10.0.0.1:40000"), Orig: svc, Dest: gone, At: t0}
	a := Attempt{Src: src, Remote: svc, Start: t0.Add(6 * time.Second), End: t0.Add(7 * time.Second), Fresh: true}
	withLingering := tableWith(live)
	withLingering.AddLingering(Lingering{Conn: earlier, Until: t0.Add(time.Minute)})
	for _, tc := range []struct {
		name string
		tb   *Table
		a    Attempt
		want bool
	}{
		{"an earlier connection's entry, 6 s before", tableWith(live, earlier), a, true},
		{"its own event", tableWith(live, earlier, Conn{Src: earlier.Src, Orig: svc, Dest: gone, At: t0.Add(6 * time.Second)}), a, false},
		{"an earlier entry older than any can live", tableWith(Status{Watching: true, Since: t0.Add(-time.Hour)}, Conn{Src: earlier.Src, Orig: svc, Dest: gone, At: t0.Add(-2 * time.Minute)}), a, false},
		{"an entry found lingering when the watch began", withLingering, a, true},
		{"events lost", tableWith(Status{Watching: true, Since: live.Since, Lost: true}, earlier), a, false},
		{"the watch began after it", tableWith(Status{Watching: true, Since: t0.Add(7 * time.Second)}, earlier), a, false},
		{"a kept-alive request", tableWith(live, earlier), Attempt{Src: src, Remote: svc, Start: a.Start, Fresh: false}, false},
	} {
		c, ok := tc.tb.Prior(tc.a)
		if ok != tc.want || (ok && c.Dest != gone) {
			t.Errorf("%s: prior %v (%v), want found %v", tc.name, c.Dest, ok, tc.want)
		}
	}
}

// tableWith is a table with a watch's status st that saw conns.
func tableWith(st Status, conns ...Conn) *Table {
	tb := NewTable()
	tb.status = st
	for _, c := range conns {
		tb.Add(c)
	}
	return tb
}

// The dump says an entry's time left in whole seconds, rounded down (the
// kernel's ctnetlink_dump_timeout); the port must be held until the entry
// is gone, whatever the fraction the kernel left out.
func TestLingersUntilCoversTheDumpsRounding(t *testing.T) {
	for left := 37 * time.Second; left < 39*time.Second; left += 100 * time.Millisecond {
		reported := uint32(left / time.Second) // what the kernel says
		if until := lingersUntil(t0, reported); until.Before(t0.Add(left)) {
			t.Errorf("%s left, the dump says %d s: held until %s, %s before the entry expires", left, reported, until.Sub(t0), t0.Add(left).Sub(until))
		}
	}
}
