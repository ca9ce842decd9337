package prober

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

// TestConnLogAgreesWithTheServer holds the connection log to the server's
// own count of the requests it answered on each client port: every
// response the prober counted is on one logged connection, on the port
// the server saw it come from, and nothing else is logged. Every engine
// and connection mode, HTTP/1.1 and HTTP/2; some answers are 503s (a
// response is a response, whatever its status).
func TestConnLogAgreesWithTheServer(t *testing.T) {
	testenv.Timed(t)
	for _, tc := range []struct {
		name string
		conn ConnMode
		h2   bool
	}{
		{"loops/new", ConnMode{FreshFraction: 1}, false},
		{"loops/keepalive", ConnMode{}, false},
		{"loops/mixed", ConnMode{FreshFraction: 0.5}, false},
		{"goroutines/new", ConnMode{FreshFraction: 1}, false},
		{"goroutines/keepalive", ConnMode{}, false},
		{"goroutines/mixed", ConnMode{FreshFraction: 0.5}, false},
		{"h2/new", ConnMode{FreshFraction: 1}, true},
		{"loops/h2/keepalive", ConnMode{}, true},
		{"goroutines/h2/keepalive", ConnMode{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			byPort := map[uint16]uint32{}
			var n atomic.Int64
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				addr, err := netip.ParseAddrPort(r.RemoteAddr)
				if err != nil {
					t.Errorf("remote address %q: %v", r.RemoteAddr, err)
				}
				mu.Lock()
				byPort[addr.Port()]++
				mu.Unlock()
				if n.Add(1)%7 == 0 {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			})}
			var protocols http.Protocols
			protocols.SetHTTP1(true)
			protocols.SetUnencryptedHTTP2(true)
			srv.Protocols = &protocols
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			log := &ConnLog{}
			p, snap := probe(t, "http://"+ln.Addr().String()+"/", func(c *Config) {
				if tc.h2 {
					h2(c)
				}
				c.Conn, c.ConnLog, c.Concurrency, c.Rate = tc.conn, log, 4, 0
			})
			checkEngine(t, p)
			// The prober's own stop may cut requests the server answered:
			// those are canceled, neither counted nor logged.
			var logged, responses uint64
			got := map[uint16]uint32{}
			for _, rec := range log.Conns() {
				if rec.Responses == 0 || rec.Addr.Local.Port() == 0 || !rec.Addr.Remote.IsValid() {
					t.Errorf("record %+v: want a connection with both ends and a response", rec)
				}
				if rec.Dialed < 0 || rec.Dialed > p.Elapsed() {
					t.Errorf("record %+v: dialed outside the run", rec)
				}
				if rec.Connected < rec.Dialed || rec.Connected > p.Elapsed() {
					t.Errorf("record %+v: established before its dial or after the run", rec)
				}
				got[rec.Addr.Local.Port()] += rec.Responses
				logged += uint64(rec.Responses)
			}
			for code, k := range snap.Totals.Status {
				if code != 0 {
					responses += k
				}
			}
			if logged == 0 || logged != responses {
				t.Errorf("the log holds %d responses, the prober counted %d (%v)", logged, responses, snap.Totals.Classes)
			}
			mu.Lock()
			defer mu.Unlock()
			for port, k := range got {
				if byPort[port] < k {
					t.Errorf("port %d: logged %d responses, the server answered %d from it", port, k, byPort[port])
				}
			}
			var answered uint64
			for _, k := range byPort {
				answered += uint64(k)
			}
			if canceled := snap.Totals.Canceled; answered < logged || answered-logged > canceled {
				t.Errorf("the server answered %d, the log holds %d: more apart than the %d requests the stop canceled", answered, logged, canceled)
			}
		})
	}
}

// TestConnLogKeepsWhatItWasGiven holds the log's packed records to what
// was noted: every address kind (IPv4, IPv6, a zoned link-local address,
// none), across several chunks, in the order noted; connections that
// carried nothing are left out.
func TestConnLogKeepsWhatItWasGiven(t *testing.T) {
	addrs := []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.7:80"),
		netip.MustParseAddrPort("[2001:db8::1]:443"),
		netip.MustParseAddrPort("[fe80::1%eth0]:8080"),
		netip.MustParseAddrPort("[fe80::2%lab-br0]:8080"),
		netip.MustParseAddrPort("[::ffff:10.0.0.9]:80"), // a mapped address stays IPv6
		netip.AddrPortFrom(netip.IPv4Unspecified(), 40000),
		{},
	}
	var log ConnLog
	var want []ConnRecord
	for i := range 3*connLogChunk + 17 {
		rec := ConnRecord{
			Addr:      ConnAddr{Local: addrs[i%len(addrs)], Remote: addrs[(i/len(addrs))%len(addrs)]},
			Dialed:    time.Duration(i) * time.Microsecond,
			Connected: time.Duration(i)*time.Microsecond + time.Duration(i%3)*time.Millisecond,
			Responses: uint32(i % 5),
		}
		log.Note(rec.Addr, rec.Dialed, rec.Connected, rec.Responses)
		if rec.Responses > 0 {
			want = append(want, rec)
		}
	}
	got := log.Conns()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	var nilLog *ConnLog
	nilLog.Note(ConnAddr{Local: addrs[0]}, 0, 0, 1) // a run that asked for no log
}
