package prober

import (
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/internal/testenv"
)

// --conn mixed=0.5 sends half of the requests on fresh connections and
// half on kept-alive ones: the fresh ones never close the worker's
// kept-alive connection. The wire's SYNs are the referee for the fresh
// connections counted.
func TestMixedKeepsItsKeptAliveConnections(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		if err := capture.Available(); err != nil {
			testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "the wire referee: %v", err)
		}
		srv := faultserver.New(t, "pod-a")
		_, port, _ := strings.Cut(srv.Addr(), ":")
		wire := capture.Start(t, "", "lo", capture.SYNFilter+" and dst port "+port)
		p, snap := probe(t, srv.URL("/ok"), func(c *Config) {
			c.Rate, c.Duration, c.Conn = 200, 2*time.Second, ConnMode{FreshFraction: 0.5}
		})
		syns := wire.SYNs()
		tot := snap.Totals
		if uint64(len(syns)) != tot.Fresh {
			// What tells a referee that missed or repeated SYNs (a CI run
			// failed here with its message cut from the log) from a count
			// that is wrong: the kernel's drops, and SYNs sent again from
			// one port (a retransmission after a lost SYN, or a port used
			// twice).
			ports := map[uint16]int{}
			for _, s := range syns {
				ports[s.Src.Port()]++
			}
			again := 0
			for _, n := range ports {
				again += n - 1
			}
			t.Fatalf("the wire saw %d SYNs (from %d ports, %d sent again from a port; tcpdump dropped %d), the report counts %d fresh connections; %v",
				len(syns), len(ports), again, wire.Dropped(), tot.Fresh, tot.Classes)
		}
		// 400 requests, half fresh: the kept-alive half reuses its
		// connections (each worker's first kept-alive request dials).
		if sent := tot.Sent(); tot.Classes[OK] != sent || tot.Reused < sent*2/5 {
			t.Fatalf("%d sent, %d fresh, %d reused, %d workers at the end: want about half reused (a fresh request must not close the kept-alive one); %v",
				sent, tot.Fresh, tot.Reused, p.Workers(), tot.Classes)
		}
	})
}

// eof_reused tells the keep-alive race (the server closed the connection
// before the request reached it) from a cut in flight (it had the request
// and closed unanswered), and the wire agrees on every one: the server's
// FIN acknowledges the request's bytes after a cut, and not in the race.
func TestServerCloseAgreesWithTheWire(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		if err := capture.Available(); err != nil {
			testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "the wire referee: %v", err)
		}
		for _, tc := range []struct {
			path string
			want ServerClose // what every eof_reused must be
		}{
			{"/close-reused", CloseAfterRequest},
			// The server closes each connection right after its answer; the
			// prober reuses it 5 ms later without looking (reuseBlindly), so
			// the request meets a connection already closed.
			{"/answer-then-close", CloseBeforeRequest},
		} {
			t.Run(tc.path, func(t *testing.T) {
				srv := faultserver.New(t, "pod-a")
				_, port, _ := strings.Cut(srv.Addr(), ":")
				wire := capture.Start(t, "", "lo", "tcp port "+port)
				p, snap := probeBlindly(t, srv.URL(tc.path), func(c *Config) {
					// One worker, a request every 5 ms: a rate the capture keeps
					// up with, unlike a closed loop.
					c.Rate, c.Workers, c.MaxWorkers, c.Duration, c.Conn = 200, 1, 1, time.Second, ConnMode{FreshFraction: 0}
				})
				segs := wire.Segments()
				if n := wire.Dropped(); n > 0 {
					t.Fatalf("the capture dropped %d packets: the referee cannot judge", n)
				}
				tot := snap.Totals
				eofs := tot.Classes[EOF] + tot.Classes[EOFReused]
				if tot.Classes[EOFReused] == 0 {
					t.Fatalf("no eof_reused at all: %v", tot.Classes)
				}
				if tot.ClosedBeforeRequest+tot.ClosedAfterRequest != eofs {
					t.Fatalf("split %d before + %d after, of %d eof and eof_reused: the kernel places every one here",
						tot.ClosedBeforeRequest, tot.ClosedAfterRequest, eofs)
				}
				count := map[ServerClose]int{}
				for _, f := range p.Recorder().Failures() {
					if f.Class != EOFReused {
						continue
					}
					count[f.ServerClose]++
					if f.ServerClose != tc.want {
						t.Errorf("seq %d: %v, want %v", f.Seq, f.ServerClose, tc.want)
					}
					if onWire := wireClose(t, segs, f.Addr, p.Start().Add(f.Start)); onWire != f.ServerClose {
						t.Errorf("seq %d from %v: the prober says %v, the wire %v", f.Seq, f.Addr.Local, f.ServerClose, onWire)
					}
				}
				t.Logf("%s: %v; eof_reused kept, by server close: %v", tc.path, tot.Classes, count)
			})
		}
	})
}

// wireClose is the capture's verdict on the connection a failure was on:
// the one from the last SYN its local port sent before the failure began.
// After the request if the server acknowledged the client's last data (the
// request) with anything but a reset, before it if not.
func wireClose(t *testing.T, segs []capture.Segment, a *ConnAddr, began time.Time) ServerClose {
	t.Helper()
	if a == nil {
		t.Fatal("a failure on a connection without its addresses")
	}
	from := -1
	for i, s := range segs {
		if s.Src == a.Local && s.Dst == a.Remote && s.Flags == "S" && !s.At.After(began) {
			from = i
		}
	}
	if from < 0 {
		t.Fatalf("%v: no SYN before %v on the wire", a.Local, began)
	}
	var conn []capture.Segment
	for _, s := range segs[from:] {
		if s.Src == a.Local && s.Dst == a.Remote && s.Flags == "S" && len(conn) > 0 {
			break // the port's next connection
		}
		if (s.Src == a.Local && s.Dst == a.Remote) || (s.Src == a.Remote && s.Dst == a.Local) {
			conn = append(conn, s)
		}
	}
	var request *capture.Segment
	fin := false
	for i := range conn {
		s := &conn[i]
		if s.Src == a.Local && s.SeqEnd != s.Seq {
			request = s
		}
		fin = fin || (s.Src == a.Remote && s.Has('F'))
	}
	if request == nil || !fin {
		t.Fatalf("%v: the wire has no request or no FIN from the server on this connection: %+v", a.Local, conn)
	}
	for _, s := range conn {
		if s.Src == a.Remote && s.HasAck && !s.Has('R') && int32(s.Ack-request.SeqEnd) >= 0 {
			return CloseAfterRequest
		}
	}
	return CloseBeforeRequest
}

// probeBlindly is probe with reuseBlindly set.
func probeBlindly(t *testing.T, target string, mutate func(*Config)) (*Prober, Snapshot) {
	t.Helper()
	return runTestProber(t, target, mutate, func(p *Prober) { p.reuseBlindly = true })
}
