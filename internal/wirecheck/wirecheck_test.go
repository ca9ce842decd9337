package wirecheck

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// A StatefulSet's replacement takes its predecessor's name and, in the
// lab, may take a freed address: each is told apart by its revision and
// by when it held the address.
func TestPodsAreNamedByNameAndRevision(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rep := &report.Report{
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "web-0", Revision: "r1", IP: "10.0.0.5"},
			{At: at(0), Kind: report.PodPresent, Pod: "web-1", Revision: "r1", IP: "10.0.0.6"},
			{At: at(5), Kind: report.PodCreated, Pod: "web-0", Revision: "r2", IP: "10.0.0.6"},
		},
		Pods: []report.PodTraffic{{Pod: "web-0", Revision: "r1"}, {Pod: "web-0#2", Revision: "r2"}},
	}
	podAt := PodAt(rep)
	addr := netip.MustParseAddrPort("10.0.0.6:8080")
	for _, c := range []struct {
		at   time.Time
		want string
	}{{at(1), "web-1@r1"}, {at(5), "web-0@r2"}, {at(9), "web-0@r2"}} {
		if got := podAt(addr, c.at); got != c.want {
			t.Errorf("10.0.0.6 at +%s: %q, want %q", c.at.Sub(t0), got, c.want)
		}
	}
	if got := podAt(netip.MustParseAddrPort("10.0.0.9:80"), at(1)); got != "" {
		t.Errorf("an address no pod held: %q", got)
	}
	ident := Idents(rep)
	if ident["web-0"] != "web-0@r1" || ident["web-0#2"] != "web-0@r2" {
		t.Errorf("idents %v", ident)
	}
}
