package prober

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/internal/testenv"
)

// TestH2ClassesAgreeWithTheWire stops Go's own HTTP/2 server in the middle
// of a probe, the two ways Go programs stop, and holds every count of the
// prober to a capture decoded by Wireshark's HTTP/2 dissector (tshark):
// each response on the wire is an ok, each stream the client opened above
// the server's GOAWAY and never answered a goaway_unprocessed, each one at
// or below it a goaway_cut, each one on a connection closed without a
// GOAWAY a closed_no_goaway (or reset, when the close was a TCP reset),
// each SYN the server's host reset a refused.
func TestH2ClassesAgreeWithTheWire(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		needWire(t)
		for _, tc := range []struct {
			name string
			stop func(*http.Server)
		}{
			{"shutdown", func(s *http.Server) { _ = s.Shutdown(context.Background()) }},
			{"close", func(s *http.Server) { _ = s.Close() }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				port := ln.Addr().(*net.TCPAddr).Port
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					time.Sleep(5 * time.Millisecond) // streams in flight when it stops
					w.Header().Set("X-Pod-Name", "pod-a")
				})}
				var protocols http.Protocols
				protocols.SetUnencryptedHTTP2(true)
				srv.Protocols = &protocols
				// Closed whatever happens below (Close closes ln too, served or not).
				t.Cleanup(func() { _ = srv.Close(); _ = ln.Close() })
				wire := capture.Start(t, "", "lo", "tcp port "+strconv.Itoa(port))
				go func() { _ = srv.Serve(ln) }()
				time.AfterFunc(400*time.Millisecond, func() { tc.stop(srv) })
				p, snap := probe(t, "http://"+ln.Addr().String()+"/", func(c *Config) {
					h2(c)
					c.Rate, c.Duration, c.Connections, c.Timeout = 1000, time.Second, 4, time.Second
				})
				frames := wire.H2(port)
				for _, hc := range frames.Conns {
					if len(hc.GoAways) > 1 {
						t.Errorf("a connection got %d GOAWAYs from http.Server: want one (single)", len(hc.GoAways))
					}
				}
				want := agreeWithTheWire(t, snap, p.Recorder().Failures(), frames)
				if tc.name == "shutdown" && want["goaway_unprocessed"]+want["goaway_cut"] == 0 {
					t.Logf("no stream was in flight at the GOAWAY this time (the counts still agree)")
				}
				for _, f := range p.Recorder().Failures() {
					if (f.Class == GoAwayUnprocessed || f.Class == GoAwayCut) && f.GoAway != GoAwaySingle {
						t.Errorf("seq %d %s: goaway %q, want single", f.Seq, f.Class, f.GoAway)
					}
				}
			})
		}
	})
}

// agreeWithTheWire fails unless the prober's class counts are what the
// decoded frames show (capture.H2Wire.Classes), closed_no_goaway and reset
// compared as their sum, and returns the wire's.
func agreeWithTheWire(t *testing.T, snap Snapshot, failures []Result, frames capture.H2Wire) map[string]uint64 {
	t.Helper()
	want := frames.Classes()
	got := snap.Totals.Classes
	got[ClosedNoGoAway] += got[Reset]
	got[Reset] = 0
	// A stream whose own write failed (phase write) may never have reached
	// the wire: logged, not taken out, until a capture shows that is why
	// the prober once counted one closed_no_goaway more than the frames
	// (CI of 1b6e68f and of 023cafd; not reproduced here). CI of 4af5940
	// counted two more, neither in phase write: answers read too late, a
	// write having met the server's reset first (now read: see
	// TestH2AnsweredThenResetWhileWriting), likely those too.
	for _, f := range failures {
		if f.Phase == PhaseWrite && (f.Class == ClosedNoGoAway || f.Class == Reset) {
			t.Logf("seq %d %s: its own write failed (%v)", f.Seq, f.Class, f.Err)
		}
	}
	for c := range NumClasses {
		if got[c] != want[Class(c).String()] {
			t.Errorf("%s: prober %d, wire %d", Class(c), got[c], want[Class(c).String()])
		}
	}
	t.Logf("wire: %v", want)
	return want
}

// needWire skips (or, where CI requires the tools, fails) a test that
// needs a capture decoded by tshark.
func needWire(t *testing.T) {
	t.Helper()
	if err := capture.Available(); err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "the wire referee: %v", err)
	}
	if err := capture.TsharkAvailable(); err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "the frame referee: %v", err)
	}
}
