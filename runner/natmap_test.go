package runner

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/fleet/wire"
	"net/netip"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/natwatch"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// Each failure with a connection gets the pod address conntrack recorded
// for it (a fresh one by its start, a kept-alive one by the last
// connection of its port before it); one without a connection (dns) is not
// counted; one conntrack never saw is counted unmapped.
func TestMapConnections(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	nat := natwatch.NewTable()
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	nat.Add(natwatch.Conn{Src: netip.MustParseAddrPort("10.0.0.1:40000"), Orig: svc, Dest: netip.MustParseAddrPort("10.244.1.5:8080"), At: t0.Add(2 * time.Millisecond)})
	nat.Add(natwatch.Conn{Src: netip.MustParseAddrPort("10.0.0.1:40001"), Orig: svc, Dest: netip.MustParseAddrPort("10.244.2.6:8080"), At: t0})
	rep := &report.Report{Failures: []report.Failure{
		{Class: report.ClassRefused, Fresh: true, Start: t0, LocalAddr: "0.0.0.0:40000", RemoteAddr: svc.String()},
		{Class: report.ClassEOFReused, Fresh: false, Start: t0.Add(5 * time.Second), LocalAddr: "10.0.0.1:40001", RemoteAddr: svc.String()},
		{Class: report.ClassRefused, Fresh: true, Start: t0, LocalAddr: "0.0.0.0:40999", RemoteAddr: svc.String()},
		{Class: report.ClassDNS, Fresh: true, Start: t0},
	}}
	ct := mapConnections(rep, nat, newDials(rep.Failures, nil, report.WallClock{}))
	if rep.Failures[0].PodAddr != "10.244.1.5:8080" || rep.Failures[1].PodAddr != "10.244.2.6:8080" || rep.Failures[2].PodAddr != "" || rep.Failures[3].PodAddr != "" {
		t.Errorf("pod addresses %q %q %q %q", rep.Failures[0].PodAddr, rep.Failures[1].PodAddr, rep.Failures[2].PodAddr, rep.Failures[3].PodAddr)
	}
	if ct.FailuresMapped != 2 || ct.FailuresUnmapped != 1 || ct.FailuresNoEntry != 0 || rep.Failures[2].NoConntrackEntry {
		t.Errorf("conntrack %+v: want 2 mapped, 1 unmapped (the dns failure had no connection), none said to have no entry by a table not watched", ct)
	}
}

// A watch that read throughout and lost nothing, with no event for a
// fresh connection that was refused: the probing host's own rules
// rejected its SYN, no pod was reached (NoConntrackEntry). A connect
// timeout without an event stays unmapped (its SYN may have joined an
// unanswered one's entry that outlived the watch's view), as do a failure
// after the connect (a reset) and a refusal within a second of an event
// from its port to the Service.
func TestMapConnectionsNoEntry(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	nat := natwatch.NewWatchedTable(t0.Add(-time.Minute))
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	nat.Add(natwatch.Conn{Src: netip.MustParseAddrPort("10.0.0.1:40000"), Orig: svc, Dest: netip.MustParseAddrPort("10.244.1.5:8080"), At: t0.Add(2 * time.Millisecond)})
	// Port 40002: two events in the refusal's window, to two pods.
	nat.Add(natwatch.Conn{Src: netip.MustParseAddrPort("10.0.0.1:40002"), Orig: svc, Dest: netip.MustParseAddrPort("10.244.1.5:8080"), At: t0.Add(time.Millisecond)})
	nat.Add(natwatch.Conn{Src: netip.MustParseAddrPort("10.0.0.1:40002"), Orig: svc, Dest: netip.MustParseAddrPort("10.244.2.6:8080"), At: t0.Add(time.Millisecond)})
	nat.Add(natwatch.Conn{Src: netip.MustParseAddrPort("10.0.0.1:40003"), Orig: svc, Dest: netip.MustParseAddrPort("10.244.2.78:8080"), At: t0.Add(1990 * time.Millisecond)})
	rep := &report.Report{Failures: []report.Failure{
		{Class: report.ClassRefused, Fresh: true, Start: t0, LocalAddr: "0.0.0.0:40000", RemoteAddr: svc.String()},
		{Class: report.ClassRefused, Fresh: true, Start: t0, LocalAddr: "0.0.0.0:40999", RemoteAddr: svc.String()},
		{Class: report.ClassConnectTimeout, Fresh: true, Start: t0, LocalAddr: "0.0.0.0:40998", RemoteAddr: svc.String()},
		{Class: report.ClassReset, Fresh: true, Start: t0, LocalAddr: "10.0.0.1:40997", RemoteAddr: svc.String()},
		{Class: report.ClassRefused, Fresh: true, Start: t0, LocalAddr: "0.0.0.0:40002", RemoteAddr: svc.String()},
		// A stalled machine: the SYN left 2 s after the start, a pod
		// refused it; its event names the pod.
		{Class: report.ClassRefused, Fresh: true, Start: t0, End: t0.Add(2 * time.Second), LocalAddr: "0.0.0.0:40003", RemoteAddr: svc.String()},
	}}
	ct := mapConnections(rep, nat, newDials(rep.Failures, nil, report.WallClock{}))
	var noEntry []bool
	for _, f := range rep.Failures {
		noEntry = append(noEntry, f.NoConntrackEntry)
	}
	if !slices.Equal(noEntry, []bool{false, true, false, false, false, false}) || rep.Failures[1].PodAddr != "" {
		t.Errorf("no entry %v, want the refusal without events only", noEntry)
	}
	if got := rep.Failures[5].PodAddr; got != "10.244.2.78:8080" {
		t.Errorf("the refusal whose SYN left late: pod %q, want 10.244.2.78:8080", got)
	}
	if ct.FailuresMapped != 2 || ct.FailuresNoEntry != 1 || ct.FailuresUnmapped != 3 {
		t.Errorf("conntrack %+v: want 2 mapped, 1 with no entry, 3 unmapped", ct)
	}
	// Why: port 40002's refusal had two events in its window; the other
	// two, none.
	if ct.FailuresAmbiguous != 1 || ct.FailuresFollowed != 0 || ct.EventLagMaxMS == nil {
		t.Errorf("conntrack %+v: want 1 of the unmapped ambiguous, none followed, the watch's lag known", ct)
	}
}

// A connect timeout from a port whose earlier connect to the same address
// timed out, with no event of its own, went where the earlier one went:
// its SYN joined that one's entry (natwatch.Table.Joined). Mapped, and
// said so; one after a refusal from its port (whose entry is not left in
// SYN_SENT) stays unmapped, and so does the merge of in-cluster probers'
// findings keep the mark.
func TestMapConnectionsJoined(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	nat := natwatch.NewWatchedTable(t0.Add(-time.Minute))
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	gone := netip.MustParseAddrPort("10.244.1.5:8080")
	nat.Add(natwatch.Conn{Src: netip.MustParseAddrPort("10.0.0.1:40000"), Orig: svc, Dest: gone, At: t0.Add(2 * time.Millisecond)})
	nat.Add(natwatch.Conn{Src: netip.MustParseAddrPort("10.0.0.1:40001"), Orig: svc, Dest: gone, At: t0.Add(2 * time.Millisecond)})
	rep := &report.Report{Failures: []report.Failure{
		{Class: report.ClassConnectTimeout, Fresh: true, Start: t0, End: t0.Add(time.Second), LocalAddr: "0.0.0.0:40000", RemoteAddr: svc.String()},
		{Class: report.ClassConnectTimeout, Fresh: true, Start: t0.Add(6 * time.Second), End: t0.Add(7 * time.Second), LocalAddr: "0.0.0.0:40000", RemoteAddr: svc.String()},
		{Class: report.ClassRefused, Fresh: true, Start: t0, End: t0.Add(time.Millisecond), LocalAddr: "0.0.0.0:40001", RemoteAddr: svc.String()},
		{Class: report.ClassConnectTimeout, Fresh: true, Start: t0.Add(6 * time.Second), End: t0.Add(7 * time.Second), LocalAddr: "0.0.0.0:40001", RemoteAddr: svc.String()},
	}}
	ct := mapConnections(rep, nat, newDials(rep.Failures, nil, report.WallClock{}))
	var got []string
	for _, f := range rep.Failures {
		got = append(got, fmt.Sprintf("%s %v %s", f.PodAddr, f.JoinedConntrackEntry, f.PriorPodAddr))
	}
	// The last: not joined for certain (its port's earlier connection was
	// refused, and a refused entry is not left in SYN_SENT), but that
	// entry is the one it most likely followed.
	want := []string{gone.String() + " false ", gone.String() + " true ", gone.String() + " false ", " false " + gone.String()}
	if !slices.Equal(got, want) {
		t.Errorf("pod addresses %q, want %q", got, want)
	}
	if ct.FailuresMapped != 3 || ct.FailuresJoined != 1 || ct.FailuresUnmapped != 1 || ct.FailuresFollowed != 1 || ct.FailuresAmbiguous != 0 {
		t.Errorf("conntrack %+v: want 3 mapped (1 joined), 1 unmapped (followed)", ct)
	}

	if ct.StaleEntries == nil || *ct.StaleEntries != 0 {
		t.Errorf("stale entries %v: the watch listed none, want 0 (known)", ct.StaleEntries)
	}

	merged := &report.Report{Failures: []report.Failure{{Seq: 2, Prober: "p1", LocalAddr: "10.0.0.1:40000", RemoteAddr: svc.String()}}}
	two, one := 2, 1
	ct = mapProberConnections(merged, []fleet.SourceState{
		{Name: "p1", Nat: &wire.Nat{Last: true, Watching: true, Conns: 1, Pods: []wire.NatPod{{Seq: 2, Addr: gone.String(), Joined: true}}, StaleEntries: &two, StaleHeld: 2}},
		{Name: "p2", Nat: &wire.Nat{Last: true, Watching: true, StaleEntries: &one, StaleHeld: 1}}})
	if f := merged.Failures[0]; f.PodAddr != gone.String() || !f.JoinedConntrackEntry || ct.FailuresJoined != 1 {
		t.Errorf("merged: %+v, conntrack %+v", f, ct)
	}
	if ct.StaleEntries == nil || *ct.StaleEntries != 3 || ct.StalePortsHeld != 3 || ct.StaleEntriesReason != "" {
		t.Errorf("merged stale entries %v held %d (%q): want the probers' summed, 3 and 3", ct.StaleEntries, ct.StalePortsHeld, ct.StaleEntriesReason)
	}
	// One prober could not list them: no count for the run, and why.
	ct = mapProberConnections(merged, []fleet.SourceState{
		{Name: "p1", Nat: &wire.Nat{Last: true, Watching: true, StaleEntries: &two}},
		{Name: "p2", Nat: &wire.Nat{Last: true, Watching: true, StaleReason: "conntrack dump: operation not permitted"}}})
	if ct.StaleEntries != nil || ct.StaleEntriesReason != "p2: conntrack dump: operation not permitted" {
		t.Errorf("stale entries %v (%q): want unknown, p2's reason", ct.StaleEntries, ct.StaleEntriesReason)
	}
	prior := &report.Report{Failures: []report.Failure{{Seq: 3, Prober: "p1", LocalAddr: "10.0.0.1:40001", RemoteAddr: svc.String()}}}
	ct = mapProberConnections(prior, []fleet.SourceState{{Name: "p1", Nat: &wire.Nat{Last: true, Watching: true, Pods: []wire.NatPod{{Seq: 3, Prior: gone.String()}}}}})
	if f := prior.Failures[0]; f.PodAddr != "" || f.PriorPodAddr != gone.String() || ct.FailuresUnmapped != 1 || ct.FailuresFollowed != 1 || ct.FailuresMapped != 0 {
		t.Errorf("merged prior: %+v, conntrack %+v: want unmapped, the prior address kept", f, ct)
	}
}

// In-cluster probers' findings come by prober and seq: a failure gets the
// address its own prober found for that seq (two probers number their
// requests alike), a prober that read nothing or sent no findings leaves
// its failures unmapped and says why, and a loss is said with the prober's
// name.
func TestMapProberConnections(t *testing.T) {
	rep := &report.Report{Failures: []report.Failure{
		{Seq: 7, Prober: "p1", LocalAddr: "10.0.0.1:40000", RemoteAddr: "10.96.0.10:80"},
		{Seq: 7, Prober: "p2", LocalAddr: "10.0.0.2:40000", RemoteAddr: "10.96.0.10:80"},
		{Seq: 8, Prober: "p2", LocalAddr: "10.0.0.2:40001", RemoteAddr: "10.96.0.10:80"},
		{Seq: 3, Prober: "p3", LocalAddr: "10.0.0.3:40000", RemoteAddr: "10.96.0.10:80"},
		{Seq: 4, Prober: "p4", LocalAddr: "10.0.0.4:40000", RemoteAddr: "10.96.0.10:80"},
		{Seq: 9, Prober: "p1", Class: report.ClassDNS},
		{Seq: 2, Prober: "p5", Class: report.ClassRefused, Fresh: true, LocalAddr: "0.0.0.0:40000", RemoteAddr: "10.96.0.10:80"},
	}}
	lag1, lag2 := 12.5, 30.0
	sources := []fleet.SourceState{
		{Name: "p1", Nat: &wire.Nat{Last: true, Watching: true, MaxLagMS: &lag1, Conns: 10, Pods: []wire.NatPod{{Seq: 7, Addr: "10.244.1.5:8080"}},
			Responses:         []wire.NatResponses{{Addr: "10.244.1.5:8080", Second: 3, Conns: 2, Responses: 40}, {Addr: "10.244.2.6:8080", Second: 3, Conns: 1, Responses: 5}},
			ResponsesUnmapped: 2}},
		{Name: "p2", Nat: &wire.Nat{Last: true, Watching: true, MaxLagMS: &lag2, Conns: 5, Lost: true, LostReason: "ENOBUFS once",
			Pods:              []wire.NatPod{{Seq: 7, Addr: "10.244.2.6:8080"}, {Seq: 8, Ambiguous: true}},
			Responses:         []wire.NatResponses{{Addr: "10.244.1.5:8080", Second: 3, Conns: 1, Responses: 7}, {Addr: "10.244.1.5:8080", Second: 1, Conns: 1, Responses: 1}},
			ResponsesUnmapped: 3}},
		{Name: "p3", Nat: &wire.Nat{Last: true, Reason: "no CAP_NET_ADMIN"}},
		{Name: "p5", Nat: &wire.Nat{Last: true, Watching: true, MaxLagMS: &lag1, Conns: 1, Pods: []wire.NatPod{{Seq: 2, NoEntry: true}}}},
		{Name: "p4"},
	}
	ct := mapProberConnections(rep, sources)
	got := []string{rep.Failures[0].PodAddr, rep.Failures[1].PodAddr, rep.Failures[2].PodAddr, rep.Failures[3].PodAddr, rep.Failures[4].PodAddr}
	if !slices.Equal(got, []string{"10.244.1.5:8080", "10.244.2.6:8080", "", "", ""}) {
		t.Errorf("pod addresses %q", got)
	}
	if f := rep.Failures[6]; !f.NoConntrackEntry || f.PodAddr != "" {
		t.Errorf("p5's refusal its conntrack had no entry for: %+v", f)
	}
	if !ct.Watching || ct.Connections != 16 || ct.FailuresMapped != 2 || ct.FailuresUnmapped != 3 || ct.FailuresNoEntry != 1 || ct.FailuresAmbiguous != 1 {
		t.Errorf("conntrack %+v", ct)
	}
	if ct.EventLagMaxMS == nil || *ct.EventLagMaxMS != lag2 {
		t.Errorf("event lag %v: want the longest of the watching probers', %v", ct.EventLagMaxMS, lag2)
	}
	wantResponses := []report.ConntrackResponses{
		{Addr: "10.244.1.5:8080", T: 1, Connections: 1, Responses: 1},
		{Addr: "10.244.1.5:8080", T: 3, Connections: 3, Responses: 47},
		{Addr: "10.244.2.6:8080", T: 3, Connections: 1, Responses: 5},
	}
	if !slices.Equal(ct.Responses, wantResponses) || ct.ResponsesUnmapped != 5 {
		t.Errorf("responses %+v, unmapped %d; want the probers' summed: %+v, 5", ct.Responses, ct.ResponsesUnmapped, wantResponses)
	}
	if !strings.Contains(ct.Reason, "p3: no CAP_NET_ADMIN") || !strings.Contains(ct.Reason, "p4: sent no conntrack findings") || !ct.Lost || ct.LostReason != "p2: ENOBUFS once" {
		t.Errorf("reasons %q, lost %v %q", ct.Reason, ct.Lost, ct.LostReason)
	}
	// A watching prober that did not say its lag: the run's is unknown.
	sources[3].Nat.MaxLagMS = nil
	if ct := mapProberConnections(rep, sources); ct.EventLagMaxMS != nil {
		t.Errorf("event lag %v with p5's unknown: want unknown", *ct.EventLagMaxMS)
	}
}

// Each logged connection's responses count for the address conntrack saw
// it go to, in the second of the run it was dialled in (the run's clock
// starts with the prober); a connection conntrack has no event
// for (or only one long before its dial: an earlier connection on the
// port) counts its responses unmapped. A port used again within the
// second toward another pod is told apart by the next dial from it.
func TestMapResponses(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	proberStart := t0.Add(-300 * time.Millisecond)
	nat := natwatch.NewTable()
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	podA, podB := netip.MustParseAddrPort("10.244.1.5:8080"), netip.MustParseAddrPort("10.244.2.6:8080")
	from := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), port) }
	nat.Add(natwatch.Conn{Src: from(40000), Orig: svc, Dest: podA, At: t0.Add(1 * time.Millisecond)})
	nat.Add(natwatch.Conn{Src: from(40001), Orig: svc, Dest: podA, At: t0.Add(400 * time.Millisecond)})
	nat.Add(natwatch.Conn{Src: from(40002), Orig: svc, Dest: podB, At: t0.Add(2500 * time.Millisecond)})
	nat.Add(natwatch.Conn{Src: from(40003), Orig: svc, Dest: podB, At: t0})
	// Port 40005 used again 400 ms later, toward the other pod.
	nat.Add(natwatch.Conn{Src: from(40005), Orig: svc, Dest: podA, At: t0.Add(3002 * time.Millisecond)})
	nat.Add(natwatch.Conn{Src: from(40005), Orig: svc, Dest: podB, At: t0.Add(3403 * time.Millisecond)})
	local := func(port uint16) prober.ConnAddr {
		return prober.ConnAddr{Local: netip.AddrPortFrom(netip.IPv4Unspecified(), port), Remote: svc}
	}
	records := []prober.ConnRecord{
		{Addr: local(40000), Dialed: 300 * time.Millisecond, Responses: 10},
		{Addr: local(40001), Dialed: 699 * time.Millisecond, Responses: 1},
		{Addr: local(40002), Dialed: 2799 * time.Millisecond, Responses: 5},
		{Addr: local(40003), Dialed: 5300 * time.Millisecond, Responses: 7}, // its event is 5 s older
		{Addr: local(40009), Dialed: time.Second, Responses: 2},             // no event
		{Addr: local(40005), Dialed: 3300 * time.Millisecond, Responses: 3},
		{Addr: local(40005), Dialed: 3700 * time.Millisecond, Responses: 2},
	}
	ct := &report.Conntrack{Watching: true}
	mapResponses(ct, nat, records, newDials(nil, records, report.WallClock{Start: proberStart}), report.WallClock{Start: proberStart})
	want := []report.ConntrackResponses{
		{Addr: podA.String(), T: 0, Connections: 2, Responses: 11},
		{Addr: podB.String(), T: 2, Connections: 1, Responses: 5},
		{Addr: podA.String(), T: 3, Connections: 1, Responses: 3},
		{Addr: podB.String(), T: 3, Connections: 1, Responses: 2},
	}
	if !slices.Equal(ct.Responses, want) || ct.ResponsesUnmapped != 9 {
		t.Errorf("responses %+v, unmapped %d; want %+v and 9", ct.Responses, ct.ResponsesUnmapped, want)
	}
}
