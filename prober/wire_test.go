package prober

import (
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/internal/faultserver"
)

// --conn mixed=0.5 sends half of the requests on fresh connections and
// half on kept-alive ones: the fresh ones never close the worker's
// kept-alive connection. The wire's SYNs are the referee for the fresh
// connections counted.
func TestMixedKeepsItsKeptAliveConnections(t *testing.T) {
	if err := capture.Available(); err != nil {
		t.Skip(err)
	}
	srv := faultserver.New(t, "pod-a")
	_, port, _ := strings.Cut(srv.Addr(), ":")
	wire := capture.Start(t, "", "lo", capture.SYNFilter+" and dst port "+port)
	_, snap := probe(t, srv.URL("/ok"), func(c *Config) {
		c.Rate, c.Duration, c.Conn = 200, 2*time.Second, ConnMode{FreshFraction: 0.5}
	})
	syns := wire.SYNs()
	tot := snap.Totals
	if uint64(len(syns)) != tot.Fresh {
		t.Fatalf("the wire saw %d SYNs, the report counts %d fresh connections", len(syns), tot.Fresh)
	}
	// 400 requests, half fresh: the kept-alive half reuses its
	// connections (each worker's first kept-alive request dials).
	if sent := tot.Sent(); tot.Classes[OK] != sent || tot.Reused < sent*2/5 {
		t.Fatalf("%d sent, %d fresh, %d reused: want about half reused (a fresh request must not close the kept-alive one)",
			sent, tot.Fresh, tot.Reused)
	}
}
