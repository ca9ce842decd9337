package fleet

import (
	"bufio"
	"bytes"
	"maps"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/natwatch"
	"github.com/rollprobe/rollprobe/prober"
)

// An agent's conntrack findings travel as nat lines: each failure with a
// connection that the table holds gets its address, by seq, over as many
// lines as NatChunk needs, then the last with the watch's status; failures
// without a connection (local errors, canceled) are not asked about. The
// merger gathers the lines into the prober's state.
func TestNatLinesCarryEachFailuresAddress(t *testing.T) {
	start := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	table := natwatch.NewTable()
	var results []prober.Result
	const n = 3 * wire.NatChunk // 540 found: three lines, and the last
	for i := range n {
		local := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(30000+i))
		r := prober.Result{Seq: uint64(i + 1), Class: prober.Refused, Fresh: true, Start: time.Duration(i) * time.Millisecond,
			Addr: &prober.ConnAddr{Local: local, Remote: svc}}
		results = append(results, r)
		if i%10 != 0 { // every tenth connection: conntrack never saw it
			table.Add(natwatch.Conn{Src: local, Orig: svc, Dest: netip.MustParseAddrPort("10.244.1.5:8080"), At: start.Add(r.Start)})
		}
	}
	results = append(results, prober.Result{Seq: n + 1, Class: prober.Local}, prober.Result{Seq: n + 2, Class: prober.Refused, Canceled: true,
		Addr: &prober.ConnAddr{Local: netip.MustParseAddrPort("10.0.0.1:40000"), Remote: svc}})
	track := &natTrack{table: table, stop: func() {}}
	track.keep(results[:100], start)
	track.keep(results[100:], start)
	var buf bytes.Buffer
	if err := track.write(wire.NewWriter(&buf)); err != nil {
		t.Fatal(err)
	}

	m := NewMerger(prober.NewRecorder(10), []string{"p0"})
	sc := bufio.NewScanner(&buf)
	lines := 0
	for sc.Scan() {
		l, err := m.Feed(0, sc.Bytes())
		if err != nil || l.Kind != wire.KindNat || len(l.Nat.Pods) > wire.NatChunk {
			t.Fatalf("line %d: %+v, %v", lines, l, err)
		}
		lines++
	}
	nat := m.State()[0].Nat
	if lines != 4 || nat == nil || !nat.Last {
		t.Fatalf("%d lines (want 4), last %v", lines, nat != nil && nat.Last)
	}
	mapped := map[uint64]string{}
	for _, p := range nat.Pods {
		mapped[p.Seq] = p.Addr
	}
	for i := range n {
		addr, ok := mapped[uint64(i+1)]
		if want := i%10 != 0; ok != want || (ok && addr != "10.244.1.5:8080") {
			t.Errorf("failure %d: %q %v, want found %v", i+1, addr, ok, want)
		}
	}
	if len(mapped) != n-(n+9)/10 {
		t.Errorf("%d mapped, want %d (the local error and the canceled one not asked about)", len(mapped), n-(n+9)/10)
	}
	// The table was never watching (built by hand): no unmapped count is
	// claimed for a watch that read nothing.
	if nat.Watching || nat.Unmapped != 0 {
		t.Errorf("status %+v", nat)
	}
}

// The responses on a prober's connections travel as nat lines too, by the
// address conntrack saw each connection go to and the second of the
// prober's run it was dialled in; the merger moves those seconds to the
// run's (the prober began 2 s after the run) and gathers every line's.
// Connections conntrack never saw are not put anywhere.
func TestNatLinesCarryTheResponsesByAddress(t *testing.T) {
	start := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	table := natwatch.NewTable()
	log := &prober.ConnLog{}
	pods := []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:8080"), netip.MustParseAddrPort("10.244.2.6:8080")}
	want := map[string]uint64{}
	var wantUnmapped uint64
	const conns = 2*wire.NatChunk + 50 // more entries than one line holds
	for i := range conns {
		local := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(30000+i))
		dialed := time.Duration(i) * 100 * time.Millisecond
		log.Note(prober.ConnAddr{Local: local, Remote: svc}, dialed, dialed+time.Millisecond, uint32(1+i%3))
		if i%7 == 0 {
			wantUnmapped += uint64(1 + i%3)
			continue
		}
		pod := pods[i%2]
		table.Add(natwatch.Conn{Src: local, Orig: svc, Dest: pod, At: start.Add(dialed + time.Millisecond)})
		want[pod.String()+"@"+strconv.Itoa(2+i/10)] += uint64(1 + i%3)
	}
	track := &natTrack{table: table, stop: func() {}, log: log, start: start}
	var buf bytes.Buffer
	if err := track.write(wire.NewWriter(&buf)); err != nil {
		t.Fatal(err)
	}
	m := NewMerger(prober.NewRecorder(10), []string{"p0"})
	m.Started(0, start.Add(2*time.Second), start)
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		if l, err := m.Feed(0, sc.Bytes()); err != nil || l.Kind != wire.KindNat || len(l.Nat.Responses) > wire.NatChunk || len(sc.Bytes()) > 16<<10 {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
	}
	nat := m.State()[0].Nat
	got := map[string]uint64{}
	for _, r := range nat.Responses {
		got[r.Addr+"@"+strconv.FormatInt(r.Second, 10)] += r.Responses
	}
	if !maps.Equal(got, want) {
		t.Errorf("responses by address and second: got %v, want %v", got, want)
	}
	// The table was never watching (built by hand): no unmapped count is
	// claimed for a watch that read nothing.
	if nat.ResponsesUnmapped != 0 || wantUnmapped == 0 {
		t.Errorf("responses unmapped %d with no watch", nat.ResponsesUnmapped)
	}
}

// With a watch that read throughout and lost nothing, a refused fresh
// connect conntrack has no event for travels as such (NoEntry: the node's
// own rules rejected its SYN); a connect timeout and a reset without an
// event stay unmapped; a refusal whose event came more than a second
// after its start, before the refusal, is mapped; and a connect timeout
// from a port whose earlier connect timed out, with no event of its own,
// travels with the address of the earlier one's entry its SYN joined
// (Joined); one after a refusal from its port, unmapped, with the address
// of the refused one's entry it most likely followed (Prior); a refusal
// whose window holds two events to two pods, unmapped, marked Ambiguous.
func TestNatLinesCarryNoEntry(t *testing.T) {
	start := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	table := natwatch.NewWatchedTable(start.Add(-time.Second))
	from := func(port uint16) *prober.ConnAddr {
		return &prober.ConnAddr{Local: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), port), Remote: svc}
	}
	table.Add(natwatch.Conn{Src: from(30001).Local, Orig: svc, Dest: netip.MustParseAddrPort("10.244.1.5:8080"), At: start})
	// 30005: a stalled machine sent the SYN 2 s after the request began;
	// the pod's refusal came at once. The event is its own.
	table.Add(natwatch.Conn{Src: from(30005).Local, Orig: svc, Dest: netip.MustParseAddrPort("10.244.2.78:8080"), At: start.Add(1990 * time.Millisecond)})
	table.Add(natwatch.Conn{Src: from(30006).Local, Orig: svc, Dest: netip.MustParseAddrPort("10.244.1.9:8080"), At: start.Add(2 * time.Millisecond)})
	// 30008: an earlier connection refused (not left in SYN_SENT); the
	// connect timeout after it made no entry: most likely it followed it.
	table.Add(natwatch.Conn{Src: from(30008).Local, Orig: svc, Dest: netip.MustParseAddrPort("10.244.2.7:8080"), At: start.Add(2 * time.Millisecond)})
	results := []prober.Result{
		{Seq: 6, Class: prober.ConnectTimeout, Fresh: true, Addr: from(30006), End: time.Second},
		{Seq: 7, Class: prober.ConnectTimeout, Fresh: true, Addr: from(30006), Start: 6 * time.Second, End: 7 * time.Second},
		{Seq: 9, Class: prober.Refused, Fresh: true, Addr: from(30008)},
		{Seq: 8, Class: prober.ConnectTimeout, Fresh: true, Addr: from(30008), Start: 6 * time.Second, End: 7 * time.Second},
		{Seq: 1, Class: prober.Refused, Fresh: true, Addr: from(30001)},
		{Seq: 2, Class: prober.Refused, Fresh: true, Addr: from(30002)},
		{Seq: 3, Class: prober.ConnectTimeout, Fresh: true, Addr: from(30003)},
		{Seq: 4, Class: prober.Reset, Fresh: true, Addr: from(30004)},
		{Seq: 5, Class: prober.Refused, Fresh: true, Addr: from(30005), End: 2 * time.Second},
	}
	// 30010: used again within the refusal's window, toward another pod.
	table.Add(natwatch.Conn{Src: from(30010).Local, Orig: svc, Dest: netip.MustParseAddrPort("10.244.1.5:8080"), At: start.Add(time.Millisecond)})
	table.Add(natwatch.Conn{Src: from(30010).Local, Orig: svc, Dest: netip.MustParseAddrPort("10.244.2.6:8080"), At: start.Add(3 * time.Millisecond)})
	results = append(results, prober.Result{Seq: 10, Class: prober.Refused, Fresh: true, Addr: from(30010)})
	table.AddLingering(natwatch.Lingering{Conn: natwatch.Conn{Src: from(30099).Local, Orig: svc, Dest: netip.MustParseAddrPort("10.244.9.9:8080")}, Until: start.Add(time.Minute)})
	track := &natTrack{table: table, stop: func() {}, staleHeld: 1}
	track.keep(results, start)
	var buf bytes.Buffer
	if err := track.write(wire.NewWriter(&buf)); err != nil {
		t.Fatal(err)
	}
	m := NewMerger(prober.NewRecorder(10), []string{"p0"})
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		if _, err := m.Feed(0, sc.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	nat := m.State()[0].Nat
	got := map[uint64]wire.NatPod{}
	for _, p := range nat.Pods {
		got[p.Seq] = p
	}
	want := map[uint64]wire.NatPod{1: {Seq: 1, Addr: "10.244.1.5:8080"}, 2: {Seq: 2, NoEntry: true}, 5: {Seq: 5, Addr: "10.244.2.78:8080"},
		6: {Seq: 6, Addr: "10.244.1.9:8080"}, 7: {Seq: 7, Addr: "10.244.1.9:8080", Joined: true}, 8: {Seq: 8, Prior: "10.244.2.7:8080"},
		9: {Seq: 9, Addr: "10.244.2.7:8080"}, 10: {Seq: 10, Ambiguous: true}}
	if !maps.Equal(got, want) || nat.Unmapped != 4 {
		t.Errorf("pods %+v, %d unmapped; want %+v and the timeout, the reset, the one after a refusal and the ambiguous one unmapped", got, nat.Unmapped, want)
	}
	if nat.MaxLagMS == nil {
		t.Error("the watch's lag was not sent")
	}
	if nat.StaleEntries == nil || *nat.StaleEntries != 1 || nat.StaleHeld != 1 {
		t.Errorf("stale entries %v, held %d: want the lingering one, held", nat.StaleEntries, nat.StaleHeld)
	}
}
