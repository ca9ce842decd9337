package fleet

import (
	"bufio"
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/natwatch"
	"github.com/rollprobe/rollprobe/prober"
)

// An agent's conntrack findings travel as nat lines: each failure with a
// connection that the table holds gets its address, by seq, over as many
// lines as NatChunk needs, the last with the watch's status; failures
// without a connection (local errors, canceled) are not asked about. The
// merger gathers the lines into the prober's state.
func TestNatLinesCarryEachFailuresAddress(t *testing.T) {
	start := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	table := natwatch.NewTable()
	var results []prober.Result
	const n = 3 * wire.NatChunk // 540 found: three lines
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
	if lines != 3 || nat == nil || !nat.Last {
		t.Fatalf("%d lines (want 3), last %v", lines, nat != nil && nat.Last)
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
