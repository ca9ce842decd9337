package runner

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/natwatch"
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
	ct := mapConnections(rep, nat)
	if rep.Failures[0].PodAddr != "10.244.1.5:8080" || rep.Failures[1].PodAddr != "10.244.2.6:8080" || rep.Failures[2].PodAddr != "" || rep.Failures[3].PodAddr != "" {
		t.Errorf("pod addresses %q %q %q %q", rep.Failures[0].PodAddr, rep.Failures[1].PodAddr, rep.Failures[2].PodAddr, rep.Failures[3].PodAddr)
	}
	if ct.FailuresMapped != 2 || ct.FailuresUnmapped != 1 {
		t.Errorf("conntrack %+v: want 2 mapped, 1 unmapped (the dns failure had no connection)", ct)
	}
}
