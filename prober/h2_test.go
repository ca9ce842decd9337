package prober

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

// h2 asks for HTTP/2; the engine is the test's (forEachEngine), else the
// automatic choice.
func h2(c *Config) { c.Protocol = H2 }

// TestH2AgainstGoServer probes Go's own HTTP/2 server, cleartext (prior
// knowledge, on each engine) and over TLS (ALPN, the goroutines): every
// request is answered on HTTP/2, the pool holds as many connections as
// asked, and the backend header is read from the response's fields. The
// automatic choice runs h2c on the loops.
func TestH2AgainstGoServer(t *testing.T) {
	testenv.Timed(t)
	for _, name := range []string{"h2c", "h2c/loops", "h2c/goroutines", "tls"} {
		tlsOn := name == "tls"
		t.Run(name, func(t *testing.T) {
			var requests, h2Requests, conns atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if r.ProtoMajor == 2 {
					h2Requests.Add(1)
				}
				if r.Header.Get("X-Request-Id") == "" {
					w.WriteHeader(400)
					return
				}
				w.Header().Set("X-Pod-Name", "pod-a")
				_, _ = io.WriteString(w, "ok")
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			var protocols http.Protocols
			protocols.SetHTTP1(true)
			if tlsOn {
				protocols.SetHTTP2(true)
				srv.EnableHTTP2 = true
			} else {
				protocols.SetUnencryptedHTTP2(true)
			}
			srv.Config.Protocols = &protocols
			if tlsOn {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			p, snap := probe(t, srv.URL, func(c *Config) {
				h2(c)
				c.Connections = 3
				c.Insecure = tlsOn
			})
			sent := snap.Totals.Sent()
			if sent == 0 || snap.Totals.Classes[OK] != sent {
				t.Fatalf("sent %d, ok %d, classes %v: want every request ok", sent, snap.Totals.Classes[OK], snap.Totals.Classes)
			}
			if got := uint64(h2Requests.Load()); got != sent || uint64(requests.Load()) != sent {
				t.Errorf("the server had %d requests, %d on HTTP/2; the prober sent %d", requests.Load(), got, sent)
			}
			if n := conns.Load(); n != 3 {
				t.Errorf("the server saw %d connections, want the pool's 3", n)
			}
			if got := snap.Totals.Backends["pod-a"]; got != sent {
				t.Errorf("backend pod-a counted %d times, want %d", got, sent)
			}
			want := EngineLoops
			if tlsOn || engineOf(t) == EngineGoroutines {
				want = EngineGoroutines
			}
			if p.Engine() != want {
				t.Errorf("ran on %s, want %s", p.Engine(), want)
			}
		})
	}
}

// TestH2RefusesWhatItCannotSpeak: the loops speak h2c on long-lived
// connections only, an h2 body must fit one frame, and HTTP/1.1's
// connection headers are refused before anything is sent.
func TestH2RefusesWhatItCannotSpeak(t *testing.T) {
	base := DefaultConfig()
	base.Target, _ = ParseTarget("http://127.0.0.1:1/")
	base.Protocol = H2
	for name, mutate := range map[string]func(*Config){
		"loops, new connections": func(c *Config) { c.Engine, c.Conn.FreshFraction = EngineLoops, 0.5 },
		"loops, grpc-go": func(c *Config) {
			c.Engine, c.Protocol, c.GRPCClient, c.Target = EngineLoops, GRPC, GRPCClientGo, mustTarget("http://127.0.0.1:1")
		},
		"loops, tls":  func(c *Config) { c.Engine, c.Target = EngineLoops, mustTarget("https://127.0.0.1:1/") },
		"big body":    func(c *Config) { c.Body = make([]byte, h2MaxBody+1) },
		"upgrade":     func(c *Config) { c.Header.Set("Upgrade", "websocket") },
		"te":          func(c *Config) { c.Header.Set("TE", "gzip") },
		"connections": func(c *Config) { c.Connections = 0 },
	} {
		cfg := base
		cfg.Header = base.Header.Clone()
		mutate(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := base
	ok.Header = http.Header{"Te": {"trailers"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("TE: trailers refused: %v", err)
	}
	loops := base
	loops.Engine = EngineLoops
	if err := loops.Validate(); err != nil && runtime.GOOS == "linux" {
		t.Errorf("h2c on the loops refused: %v", err)
	}
}

func mustTarget(s string) *url.URL {
	u, err := ParseTarget(s)
	if err != nil {
		panic(err)
	}
	return u
}

// scriptServer is an HTTP/2 server written frame by frame, so each test
// decides what happens to every stream and counts what it did: the
// prober's classes must equal those counts.
type scriptServer struct {
	ln net.Listener
	// onStream decides the fate of each new stream (its ID, and how many
	// streams the connection had before it).
	onStream func(sc *scriptConn, id uint32, n int)
	// settings are sent in the server's first SETTINGS frame.
	settings []http2.Setting
	// onConnect, when set, runs once the server's SETTINGS are written.
	onConnect func(sc *scriptConn)
	// dribble: every byte the server writes goes in a write of its own,
	// so the client reads frames in pieces.
	dribble bool
	// onData, when set, runs for each DATA frame the client sends, after
	// the server has counted it against its windows.
	onData   func(sc *scriptConn, f *http2.DataFrame)
	start    sync.Once // URL starts the accepting goroutine
	wg       sync.WaitGroup
	canceled atomic.Int64 // RST_STREAM CANCEL received
	conns    atomic.Int64 // connections that sent the client preface
	// noSettings: the server never sends its SETTINGS.
	noSettings bool
	// tls, when set, is the certificate the server speaks TLS with (ALPN
	// h2): its URL is https.
	tls *tls.Certificate
	// bodyBeforeAck counts streams opened with a body (HEADERS without
	// END_STREAM) before the client acked the server's SETTINGS: nginx
	// refuses them when its initial window is under HTTP/2's default.
	bodyBeforeAck atomic.Int64
	// overrun counts DATA frames that went past a window the server gave
	// (RFC 9113 §6.9.1: a strict server ends the connection with
	// FLOW_CONTROL_ERROR; this one counts them and goes on).
	overrun atomic.Int64
}

type scriptConn struct {
	c    net.Conn
	mu   sync.Mutex
	fr   *http2.Framer
	bw   *bufio.Writer
	henc *hpack.Encoder
	hbuf []byte
	// pingAck, when set, runs when the client acks the server's PING.
	pingAck func()
	closed  bool
	// The windows the client may send into, as the server gave them
	// (under mu): the connection's, each stream's, and what a new
	// stream's starts at (HTTP/2's default until the client acks the
	// server's SETTINGS, then what they said).
	connWindow, streamInitial int64
	windows                   map[uint32]int64
}

// windowUpdate gives the client inc more bytes to send on the connection
// (id 0) or stream id.
func (sc *scriptConn) windowUpdate(id, inc uint32) {
	sc.mu.Lock()
	if id == 0 {
		sc.connWindow += int64(inc)
	} else {
		sc.windows[id] += int64(inc)
	}
	sc.mu.Unlock()
	sc.do(func() error { return sc.fr.WriteWindowUpdate(id, inc) })
}

// received counts a DATA frame of the client's against the windows and
// says whether it went past one.
func (sc *scriptConn) received(f *http2.DataFrame) (overrun bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := int64(f.Length)
	sc.connWindow -= n
	sc.windows[f.StreamID] -= n
	return sc.connWindow < 0 || sc.windows[f.StreamID] < 0
}

func newScriptServer(t *testing.T, onStream func(sc *scriptConn, id uint32, n int), settings ...http2.Setting) *scriptServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptServer{ln: ln, onStream: onStream, settings: settings}
	t.Cleanup(func() { _ = ln.Close(); s.start.Do(func() {}); s.wg.Wait() })
	return s
}

// URL is the server's address. It starts accepting at the first call: what
// a test set on the server before (onConnect, dribble) every connection's
// goroutine sees.
func (s *scriptServer) URL() string {
	s.start.Do(func() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				c, err := s.ln.Accept()
				if err != nil {
					return
				}
				s.wg.Add(1)
				go func() { defer s.wg.Done(); s.serve(c) }()
			}
		}()
	})
	if s.tls != nil {
		return "https://" + s.ln.Addr().String() + "/"
	}
	return "http://" + s.ln.Addr().String() + "/"
}

func (s *scriptServer) serve(c net.Conn) {
	defer c.Close()
	if s.tls != nil {
		c = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*s.tls}, NextProtos: []string{"h2"}})
		defer c.Close()
	}
	br := bufio.NewReader(c)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	sc := &scriptConn{c: c, bw: bufio.NewWriter(c), connWindow: 65535, streamInitial: 65535, windows: map[uint32]int64{}}
	if s.dribble {
		sc.bw = bufio.NewWriter(byteWriter{c})
	}
	sc.fr = http2.NewFramer(sc.bw, br)
	sc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	sc.henc = hpack.NewEncoder((*sliceWriter)(&sc.hbuf))
	s.conns.Add(1)
	if !s.noSettings {
		sc.do(func() error { return sc.fr.WriteSettings(s.settings...) })
	}
	acked := false
	if s.onConnect != nil {
		s.onConnect(sc)
	}
	n := 0
	for {
		f, err := sc.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				sc.do(sc.fr.WriteSettingsAck)
				break
			}
			acked = true
			// The client has our SETTINGS: from here the decoder keeps
			// only what they said (RFC 7540 §6.5.3; until the ack it
			// keeps HPACK's default). Its table shrinks at once, as a
			// strict server's does: a client still referring to an entry
			// beyond it ends the connection (COMPRESSION_ERROR).
			for _, st := range s.settings {
				switch st.ID {
				case http2.SettingHeaderTableSize:
					sc.fr.ReadMetaHeaders.SetAllowedMaxDynamicTableSize(st.Val)
					sc.fr.ReadMetaHeaders.SetMaxDynamicTableSize(st.Val)
				case http2.SettingInitialWindowSize:
					// From the ack on, the client's streams have the
					// window the settings said (RFC 9113 §6.9.2): the
					// open ones change by the difference.
					sc.mu.Lock()
					delta := int64(st.Val) - sc.streamInitial
					sc.streamInitial = int64(st.Val)
					for id := range sc.windows {
						sc.windows[id] += delta
					}
					sc.mu.Unlock()
				}
			}
		case *http2.PingFrame:
			if f.IsAck() && sc.pingAck != nil {
				sc.pingAck()
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode == http2.ErrCodeCancel {
				s.canceled.Add(1)
			}
		case *http2.MetaHeadersFrame:
			if !acked && !f.StreamEnded() {
				s.bodyBeforeAck.Add(1)
			}
			sc.mu.Lock()
			sc.windows[f.StreamID] = sc.streamInitial
			sc.mu.Unlock()
			s.onStream(sc, f.StreamID, n)
			n++
		case *http2.DataFrame:
			if sc.received(f) {
				s.overrun.Add(1)
			}
			if s.onData != nil {
				s.onData(sc, f)
			}
		}
	}
}

// byteWriter writes one byte per write (scriptServer.dribble).
type byteWriter struct{ w io.Writer }

func (b byteWriter) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := b.w.Write(p[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(p), nil
}

type sliceWriter []byte

func (w *sliceWriter) Write(p []byte) (int, error) { *w = append(*w, p...); return len(p), nil }

// do writes frames under the connection's lock; after close it does nothing.
func (sc *scriptConn) do(write func() error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.closed {
		return
	}
	_ = write()
	_ = sc.bw.Flush()
}

func (sc *scriptConn) answer(id uint32) {
	sc.do(func() error {
		sc.hbuf = sc.hbuf[:0]
		_ = sc.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		_ = sc.henc.WriteField(hpack.HeaderField{Name: "x-pod-name", Value: "scripted"})
		return sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: sc.hbuf, EndStream: true, EndHeaders: true})
	})
}

// answerHTTP answers as a proxy does that is not speaking gRPC: the
// status (none when empty) and a text body, as Traefik's 502.
func (sc *scriptConn) answerHTTP(id uint32, status string) {
	sc.do(func() error {
		sc.hbuf = sc.hbuf[:0]
		if status != "" {
			_ = sc.henc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
		}
		_ = sc.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "text/plain; charset=utf-8"})
		if err := sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: sc.hbuf, EndHeaders: true}); err != nil {
			return err
		}
		return sc.fr.WriteData(id, true, []byte("Bad Gateway"))
	})
}

// answerGRPC answers a gRPC call: headers, an empty message, OK trailers.
func (sc *scriptConn) answerGRPC(id uint32) {
	sc.do(func() error {
		sc.hbuf = sc.hbuf[:0]
		_ = sc.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		_ = sc.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
		_ = sc.henc.WriteField(hpack.HeaderField{Name: "x-pod-name", Value: "scripted"})
		if err := sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: sc.hbuf, EndHeaders: true}); err != nil {
			return err
		}
		if err := sc.fr.WriteData(id, false, []byte{0, 0, 0, 0, 0}); err != nil {
			return err
		}
		sc.hbuf = sc.hbuf[:0]
		_ = sc.henc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
		return sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: sc.hbuf, EndStream: true, EndHeaders: true})
	})
}

func (sc *scriptConn) reset(id uint32, code http2.ErrCode) {
	sc.do(func() error { return sc.fr.WriteRSTStream(id, code) })
}

// ping sends a PING whose data begins with b.
func (sc *scriptConn) ping(b byte) {
	sc.do(func() error { return sc.fr.WritePing(false, [8]byte{b}) })
}

func (sc *scriptConn) goAway(last uint32) {
	sc.do(func() error { return sc.fr.WriteGoAway(last, http2.ErrCodeNo, nil) })
}

func (sc *scriptConn) close() {
	sc.mu.Lock()
	sc.closed = true
	sc.mu.Unlock()
	_ = sc.c.Close()
}

// scriptProbe runs a closed-model h2 probe of s: four streams in flight
// on one connection, for a bounded time.
func scriptProbe(t *testing.T, s *scriptServer, mutate func(*Config)) (*Prober, Snapshot) {
	t.Helper()
	return probe(t, s.URL(), func(c *Config) {
		h2(c)
		c.Rate, c.Concurrency, c.Connections = 0, 4, 1
		c.Duration = 300 * time.Millisecond
		c.Timeout = time.Second
		if mutate != nil {
			mutate(c)
		}
	})
}

// checkCounts fails unless the prober's count of each class is the
// server's count of what it did.
func checkCounts(t *testing.T, snap Snapshot, want map[Class]int64) {
	t.Helper()
	var total uint64
	for c, n := range want {
		if got := snap.Totals.Classes[c]; got != uint64(n) {
			t.Errorf("%s: prober counted %d, server did %d (all: %v)", c, got, n, snap.Totals.Classes)
		}
		total += uint64(n)
	}
	if snap.Totals.Sent() != total {
		t.Errorf("sent %d, the server's counts add up to %d (all: %v)", snap.Totals.Sent(), total, snap.Totals.Classes)
	}
	if total == 0 {
		t.Error("nothing was sent")
	}
}

// TestH2PeerHeaderTableSize: a server whose SETTINGS_HEADER_TABLE_SIZE
// is less than HPACK's default 4,096 (0: it keeps no entry; 60: too small
// for the request's fields) decodes every request. The server's counts
// are the referee: each stream it decoded it answered, and a block it
// could not decode would end the connection with its streams unanswered.
func TestH2PeerHeaderTableSize(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		for _, size := range []uint32{0, 60} {
			t.Run(fmt.Sprint(size), func(t *testing.T) {
				var answered atomic.Int64
				s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
					answered.Add(1)
					sc.answer(id)
				}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: size})
				_, snap := scriptProbe(t, s, nil)
				checkCounts(t, snap, map[Class]int64{OK: answered.Load()})
				if c := s.conns.Load(); c != 1 {
					t.Errorf("%d connections: want 1 (one that failed is replaced)", c)
				}
				if answered.Load() < 10 {
					t.Errorf("%d streams answered: too few to have reused the request's block", answered.Load())
				}
			})
		}
	})
}

func TestH2ResetStreams(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		for _, tc := range []struct {
			code  http2.ErrCode
			class Class
		}{{http2.ErrCodeRefusedStream, RefusedStream}, {http2.ErrCodeInternal, RSTStream}} {
			t.Run(tc.class.String(), func(t *testing.T) {
				var answered, reset atomic.Int64
				s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
					if n%3 == 2 {
						reset.Add(1)
						sc.reset(id, tc.code)
						return
					}
					answered.Add(1)
					sc.answer(id)
				})
				p, snap := scriptProbe(t, s, nil)
				checkCounts(t, snap, map[Class]int64{OK: answered.Load(), tc.class: reset.Load()})
				for _, f := range p.Recorder().Failures() {
					if f.H2Code != tc.code.String() || f.GoAway != GoAwayNone || f.Phase != PhaseReadHeaders {
						t.Fatalf("failure %+v: want code %s, no goaway, phase read_headers", f, tc.code)
					}
				}
			})
		}
	})
}

// TestH2GoAway: how a connection's end meets the streams in flight on it.
// The server answers ten streams on each connection, then holds the next
// ones and ends the connection one of four ways.
func TestH2GoAway(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		type counts struct{ answered, above, cut atomic.Int64 }
		for _, tc := range []struct {
			name string
			// end ends a connection whose streams up to held are unanswered
			// (held: the newest stream the server has).
			end  func(sc *scriptConn, c *counts, held []uint32)
			want func(c *counts) map[Class]int64
			kind GoAwayKind
		}{
			{
				// One GOAWAY naming the newest stream the server has, those
				// answered, then a close after the client has had time to stop:
				// whatever the client sent after the GOAWAY left was never
				// processed.
				name: "single", kind: GoAwaySingle,
				end: func(sc *scriptConn, c *counts, held []uint32) {
					// Counted before the GOAWAY is written, as every count
					// here is before what it counts: the prober's run may
					// end, and the test read the counts, as soon as it has
					// read the frame.
					c.above.Add(1)
					sc.goAway(held[len(held)-2])
					for _, id := range held[:len(held)-1] {
						c.answered.Add(1)
						sc.answer(id)
					}
					time.Sleep(50 * time.Millisecond)
					sc.close()
				},
				want: func(c *counts) map[Class]int64 {
					return map[Class]int64{OK: c.answered.Load(), GoAwayUnprocessed: c.above.Load()}
				},
			},
			{
				// A GOAWAY that covers every held stream, then a close without
				// answering them: cut after the server had them.
				name: "cut", kind: GoAwaySingle,
				end: func(sc *scriptConn, c *counts, held []uint32) {
					c.cut.Add(int64(len(held)))
					sc.goAway(held[len(held)-1])
					time.Sleep(20 * time.Millisecond)
					sc.close()
				},
				want: func(c *counts) map[Class]int64 {
					return map[Class]int64{OK: c.answered.Load(), GoAwayCut: c.cut.Load()}
				},
			},
			{
				// No GOAWAY at all: the connection just closes.
				name: "closed", kind: GoAwayNone,
				end: func(sc *scriptConn, c *counts, held []uint32) {
					c.cut.Add(int64(len(held)))
					sc.close()
				},
				want: func(c *counts) map[Class]int64 {
					return map[Class]int64{OK: c.answered.Load(), ClosedNoGoAway: c.cut.Load()}
				},
			},
			{
				// grpc-go's GracefulStop: GOAWAY 2^31-1, a PING, and on its ack
				// the real GOAWAY; every stream held is answered: no failure.
				name: "graceful", kind: GoAwayGraceful,
				end: func(sc *scriptConn, c *counts, held []uint32) {
					sc.pingAck = func() {
						sc.goAway(held[len(held)-1])
						for _, id := range held {
							c.answered.Add(1)
							sc.answer(id)
						}
						go func() { time.Sleep(20 * time.Millisecond); sc.close() }()
					}
					sc.goAway(1<<31 - 1)
					sc.ping(1)
				},
				want: func(c *counts) map[Class]int64 { return map[Class]int64{OK: c.answered.Load()} },
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var c counts
				var mu sync.Mutex
				held := map[*scriptConn][]uint32{}
				ended := map[*scriptConn]bool{} // its held streams were ended or answered
				s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
					switch {
					case n < 10:
						c.answered.Add(1)
						sc.answer(id)
					case n < 13:
						mu.Lock()
						held[sc] = append(held[sc], id)
						ids := held[sc]
						done := ended[sc]
						ended[sc] = done || n == 12
						mu.Unlock()
						switch {
						case done: // its tail was answered (below): so is this one
							c.answered.Add(1)
							sc.answer(id)
						case n == 12:
							tc.end(sc, &c, ids)
						case n == 10:
							// The run's end may come before the connection's
							// third held stream: a cold CI run once left two
							// held to their timeout, which no variant expects.
							// Answered after a while, they count as answered.
							time.AfterFunc(heldTail, func() {
								mu.Lock()
								ids, done := held[sc], ended[sc]
								ended[sc] = true
								mu.Unlock()
								if done {
									return
								}
								for _, id := range ids {
									c.answered.Add(1)
									sc.answer(id)
								}
							})
						}
					default:
						// Sent after the connection's end began: above any
						// GOAWAY (never answered).
						if tc.name == "closed" {
							c.cut.Add(1)
						} else {
							c.above.Add(1)
						}
					}
				}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 3})
				p, snap := scriptProbe(t, s, func(c *Config) { c.Concurrency = 3 })
				checkCounts(t, snap, tc.want(&c))
				failures := p.Recorder().Failures()
				if len(failures) > 0 {
					t.Logf("%d failures, the first: %s: %v", len(failures), failures[0].Class, failures[0].Err)
				}
				for _, f := range failures {
					if f.GoAway != tc.kind || f.Addr == nil {
						t.Fatalf("failure %+v: want goaway %q and its connection's address", f, tc.kind)
					}
				}
			})
		}
	})
}

// heldTail: how long TestH2GoAway's server holds a connection's first
// held streams for the third that ends the connection: far beyond the
// gap between streams (the workers send at once), well within the
// request timeout (1 s).
const heldTail = 300 * time.Millisecond

// TestH2Timeout: a stream without an answer is a timeout, and the prober
// cancels it on the wire (RST_STREAM CANCEL) rather than leave it open.
func TestH2Timeout(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		var held atomic.Int64
		s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
			if n == 5 {
				held.Add(1)
				return
			}
			sc.answer(id)
		})
		_, snap := scriptProbe(t, s, func(c *Config) { c.Timeout = 100 * time.Millisecond })
		if got := snap.Totals.Classes[Timeout]; got != 1 || held.Load() != 1 {
			t.Fatalf("timeouts %d, held %d: want 1 of each (all %v)", got, held.Load(), snap.Totals.Classes)
		}
		deadline := time.Now().Add(2 * time.Second)
		for s.canceled.Load() != 1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if s.canceled.Load() != 1 {
			t.Errorf("the server saw %d RST_STREAM CANCEL, want 1", s.canceled.Load())
		}
	})
}

// TestH2NeedsALPN: an https server that completes the handshake without
// choosing h2 (no ALPN at all) fails every request as tls, cause alpn;
// one that refuses h2 with an alert is the alert's.
func TestH2NeedsALPN(t *testing.T) {
	testenv.Timed(t)
	noALPN := httptest.NewUnstartedServer(http.NotFoundHandler())
	noALPN.StartTLS()
	noALPN.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer noALPN.Close()
	noALPN.TLS.NextProtos = nil // httptest set http/1.1; a listener without ALPN chooses nothing
	http1Only := httptest.NewUnstartedServer(http.NotFoundHandler())
	http1Only.EnableHTTP2 = false
	http1Only.StartTLS()
	http1Only.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer http1Only.Close()
	for _, tt := range []struct {
		name, url string
		want      TLSCause
	}{{"no ALPN", noALPN.URL, TLSCauseALPN}, {"http/1.1 only", http1Only.URL, TLSCauseAlert}} {
		t.Run(tt.name, func(t *testing.T) {
			p, snap := probe(t, tt.url, func(c *Config) {
				h2(c)
				c.Insecure, c.Rate, c.Duration = true, 20, 200*time.Millisecond
			})
			if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[TLS] != sent {
				t.Fatalf("tls %d of %d (%v)", snap.Totals.Classes[TLS], sent, snap.Totals.Classes)
			}
			for _, f := range p.Recorder().Failures() {
				if f.TLSCause != tt.want {
					t.Fatalf("seq %d: cause %q, want %q (%v)", f.Seq, f.TLSCause, tt.want, f.Err)
				}
			}
		})
	}
}

// --streams caps the streams in flight on a connection, as h2load's -m:
// the server, which counts the streams it holds at once, never sees more.
func TestH2StreamsCap(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		for _, tc := range []struct{ cap, want int }{{2, 2}, {0, 6}} {
			t.Run(strconv.Itoa(tc.cap), func(t *testing.T) {
				var mu sync.Mutex
				open, most := map[*scriptConn]int{}, 0
				s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
					mu.Lock()
					open[sc]++
					most = max(most, open[sc])
					mu.Unlock()
					time.AfterFunc(20*time.Millisecond, func() {
						mu.Lock()
						open[sc]--
						mu.Unlock()
						sc.answer(id)
					})
				})
				_, snap := scriptProbe(t, s, func(c *Config) { c.Concurrency, c.Streams = 6, tc.cap })
				mu.Lock()
				defer mu.Unlock()
				if most != tc.want || snap.Totals.Classes[OK] != snap.Totals.Sent() || snap.Totals.Sent() == 0 {
					t.Errorf("the server held %d streams at once, want %d (%v)", most, tc.want, snap.Totals.Classes)
				}
			})
		}
	})
}

// TestH2GoAwayOnEveryConnection: a server that sends GOAWAY on each new
// connection before any stream (a process shutting down that still
// accepts) refuses every request; the prober must record that, not redial
// for the request's whole time (a dial storm against the very server it
// is judging). On the loops a new connection's first stream leaves with
// the preface, so the GOAWAY always comes after it (the hook below is the
// goroutine engine's): there the class and the bound on dials are what
// the test holds.
func TestH2GoAwayOnEveryConnection(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) { sc.answer(id) })
		s.onConnect = func(sc *scriptConn) { sc.goAway(0) }
		// The GOAWAY reaches the prober before its first stream, as it does
		// when the server's frames beat the request's write; without the wait
		// the request's write almost always wins the race.
		testHookDialedH2 = func(c *h2conn) {
			for i := 0; i < 200 && c.usable(); i++ {
				time.Sleep(5 * time.Millisecond)
			}
		}
		t.Cleanup(func() { testHookDialedH2 = nil })
		_, snap := scriptProbe(t, s, func(c *Config) { c.Concurrency, c.Timeout = 2, 5*time.Second })
		sent := snap.Totals.Sent()
		if sent == 0 || snap.Totals.Classes[OK] != 0 {
			t.Fatalf("classes %v: want every request refused", snap.Totals.Classes)
		}
		if got := snap.Totals.Classes[GoAwayUnprocessed]; got != sent {
			t.Errorf("classes %v: want all %d goaway_unprocessed (the server took none)", snap.Totals.Classes, sent)
		}
		if conns := s.conns.Load(); conns > int64(h2RefusedDials)*int64(sent) {
			t.Errorf("%d connections for %d requests: more than %d dials a request", conns, sent, h2RefusedDials)
		}
	})
}

// TestH2EndedWhileOpening: the connection ends (the reader saw the server
// close it and closed the socket) after open has taken a stream and before
// its HEADERS are written. Not a byte of that stream reaches the wire, so
// no referee can see it: it must go to another connection as a stream the
// check saw ended does, not be counted closed_no_goaway (a CI run counted
// one more closed_no_goaway than the capture held, 7 to 6, this way).
func TestH2EndedWhileOpening(t *testing.T) {
	testenv.Timed(t)
	var streams atomic.Int64
	s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
		streams.Add(1)
		sc.answer(id)
	})
	var ended atomic.Bool
	testHookOpening = func(c *h2conn) {
		if ended.CompareAndSwap(false, true) {
			c.end(io.EOF)
		}
	}
	t.Cleanup(func() { testHookOpening = nil })
	_, snap := scriptProbe(t, s, func(c *Config) { c.Concurrency, c.Engine = 1, EngineGoroutines })
	checkNeverSentHandedBack(t, snap, ended.Load(), streams.Load(), "the ended connection's stream was never sent")
	if conns := s.conns.Load(); conns < 2 {
		t.Errorf("%d connections: the request should have gone to a new one", conns)
	}
}

// checkNeverSentHandedBack: the hook ran and requests were sent, every
// one ok (the stream the hook kept from leaving went to another
// connection, not counted as cut: why says which), and the server saw
// exactly as many streams as the prober counted requests.
func checkNeverSentHandedBack(t *testing.T, snap Snapshot, hooked bool, serverStreams int64, why string) {
	t.Helper()
	sent := snap.Totals.Sent()
	if !hooked || sent == 0 {
		t.Fatalf("the hook did not run or nothing was sent (%v)", snap.Totals.Classes)
	}
	if snap.Totals.Classes[OK] != sent {
		t.Errorf("classes %v: want all %d ok (%s)", snap.Totals.Classes, sent, why)
	}
	if uint64(serverStreams) != sent {
		t.Errorf("the server saw %d streams, the prober counted %d requests", serverStreams, sent)
	}
}

// TestH2WriteFailedBeforeTheStreamLeft: the socket is closed under a
// stream open is about to write, so the write fails with none of the
// stream's bytes gone, whether the reader or the write sees it first.
// As for a connection ended before the write: the stream goes to another
// connection, not counted as cut; the server's count of streams is the
// referee.
func TestH2WriteFailedBeforeTheStreamLeft(t *testing.T) {
	testenv.Timed(t)
	var streams atomic.Int64
	s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
		streams.Add(1)
		sc.answer(id)
	})
	var closed atomic.Bool
	testHookOpening = func(c *h2conn) {
		if closed.CompareAndSwap(false, true) {
			_ = c.raw.Close()
		}
	}
	t.Cleanup(func() { testHookOpening = nil })
	_, snap := scriptProbe(t, s, func(c *Config) { c.Concurrency, c.Engine = 1, EngineGoroutines })
	checkNeverSentHandedBack(t, snap, closed.Load(), streams.Load(), "the stream whose write failed was never sent")
}

// TestH2EndedByTheReaderWhileUnsent: the reader ends a stream while open
// writes it (as a GOAWAY with a lower last stream does), then the write
// fails with none of it gone. The stream was never sent: it goes to
// another connection, and the reader's verdict must not stay on the
// worker's channel, where it met the worker's next stream and blocked the
// reader that ended that one (every worker stopped: nginx answering each
// stream with GOAWAY did it). The bound on the run is a hang detector.
func TestH2EndedByTheReaderWhileUnsent(t *testing.T) {
	testenv.Timed(t)
	var streams atomic.Int64
	s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
		streams.Add(1)
		sc.answer(id)
	})
	var hooked atomic.Int64
	testHookOpening = func(c *h2conn) {
		if hooked.Add(1)%7 != 3 {
			return
		}
		c.mu.Lock()
		for id, st := range c.streams {
			if st.writing {
				delete(c.streams, id)
				st.class, st.err = GoAwayUnprocessed, errors.New("ended by the test's reader")
				st.done <- struct{}{}
			}
		}
		c.mu.Unlock()
		_ = c.raw.Close()
	}
	t.Cleanup(func() { testHookOpening = nil })
	done := make(chan Snapshot, 1)
	go func() {
		_, snap := scriptProbe(t, s, func(c *Config) { c.Concurrency, c.Engine = 1, EngineGoroutines })
		done <- snap
	}()
	var snap Snapshot
	select {
	case snap = <-done:
	case <-time.After(time.Minute):
		// Not t.Fatal, nor a panic: the cleanups (which the testing
		// package runs first) wait for the hung run. Every goroutine's
		// stack is the evidence.
		buf := make([]byte, 4<<20)
		fmt.Fprintf(os.Stderr, "--- FAIL: %s: the run did not end: a stream's end was never delivered\n%s", t.Name(), buf[:runtime.Stack(buf, true)])
		os.Exit(1)
	}
	checkNeverSentHandedBack(t, snap, hooked.Load() >= 3, streams.Load(), "the streams the reader ended unsent were never sent")
}

// TestH2CancelCutsEveryStream: a canceled run (Ctrl-C) cuts the streams
// in flight and the requests waiting for one (every connection at
// --streams): each is canceled, none an outcome, on each engine.
func TestH2CancelCutsEveryStream(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		var held atomic.Int64
		s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) { held.Add(1) }) // never answered
		cfg := DefaultConfig()
		cfg.Target, _ = ParseTarget(s.URL())
		cfg.Protocol, cfg.Rate, cfg.Concurrency, cfg.Connections, cfg.Streams = H2, 0, 10, 1, 2
		cfg.Duration, cfg.Timeout = 10*time.Second, 5*time.Second
		p, err := New(withEngine(t, cfg), "rollprobe-test")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for held.Load() < 2 {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // the other eight wait for a stream
			cancel()
		}()
		sum, err := p.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkEngine(t, p)
		snap := p.Recorder().Snapshot()
		if !sum.Canceled || snap.Totals.Canceled != 10 || snap.Totals.Sent() != 0 {
			t.Errorf("canceled=%v, %d cut, classes %v: want the 2 streams and the 8 waiting cut, no outcome", sum.Canceled, snap.Totals.Canceled, snap.Totals.Classes)
		}
		if held.Load() != 2 {
			t.Errorf("the server got %d streams, want --streams' 2", held.Load())
		}
	})
}

// bodyProbe probes s on one connection with a POST of a body of n bytes.
func bodyProbe(t *testing.T, s *scriptServer, n, concurrency int, timeout time.Duration) (*Prober, Snapshot) {
	t.Helper()
	body := make([]byte, n)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	return scriptProbe(t, s, func(c *Config) {
		c.Method, c.Body = "POST", body
		c.Concurrency = concurrency
		c.Timeout = timeout
	})
}

// TestH2BodyFlowControl: a request's body goes out only as far as the
// server's windows allow (RFC 9113 §6.9.1), the rest as its WINDOW_UPDATEs
// open them. The referee is the server's own count of the bytes each
// window took: a frame past one is counted (a strict server would end the
// connection, and every stream on it would fail as the server's).
func TestH2BodyFlowControl(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		// A stream's window of 100 bytes, a body of 1,000: ten frames at
		// least, each sent once the server has read the one before and
		// given its bytes back. The server answers each body it read whole.
		t.Run("a stream's window smaller than the body", func(t *testing.T) {
			var answered, frames atomic.Int64
			s := newScriptServer(t, func(*scriptConn, uint32, int) {},
				http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
			s.onData = func(sc *scriptConn, f *http2.DataFrame) {
				frames.Add(1)
				if n := f.Length; n > 0 {
					sc.windowUpdate(0, n)
					if !f.StreamEnded() {
						sc.windowUpdate(f.StreamID, n)
					}
				}
				if f.StreamEnded() {
					answered.Add(1)
					sc.answer(f.StreamID)
				}
			}
			_, snap := bodyProbe(t, s, 1000, 4, time.Second)
			checkCounts(t, snap, map[Class]int64{OK: answered.Load()})
			if n := s.overrun.Load(); n != 0 {
				t.Errorf("%d DATA frames went past the server's windows", n)
			}
			// The allowance of four whole bodies in one frame each dates
			// from before a body waited for the server's SETTINGS
			// (TestH2BodiesWaitForSettings); since, every body goes in
			// frames of the 100-byte window.
			if f, a := frames.Load(), answered.Load(); f < 10*(a-4) || a < 10 {
				t.Errorf("%d DATA frames for %d bodies of 1,000 bytes in windows of 100", f, a)
			}
		})
		// Eight bodies of 16,384 bytes in flight: 131,072 bytes against
		// the connection's window of 65,535, which the server gives back
		// only a moment after it has taken each whole body (as a server
		// whose application reads it). The streams' own windows are
		// wide: the connection's alone holds them.
		t.Run("the connection's window, shared by the streams", func(t *testing.T) {
			var answered atomic.Int64
			var mu sync.Mutex
			got := map[*scriptConn]map[uint32]uint32{}
			s := newScriptServer(t, func(*scriptConn, uint32, int) {})
			s.onData = func(sc *scriptConn, f *http2.DataFrame) {
				mu.Lock()
				if got[sc] == nil {
					got[sc] = map[uint32]uint32{}
				}
				got[sc][f.StreamID] += f.Length
				n := got[sc][f.StreamID]
				mu.Unlock()
				if f.StreamEnded() {
					s.wg.Add(1)
					time.AfterFunc(5*time.Millisecond, func() {
						defer s.wg.Done()
						sc.windowUpdate(0, n)
						answered.Add(1)
						sc.answer(f.StreamID)
					})
				}
			}
			_, snap := bodyProbe(t, s, h2MaxBody, 8, time.Second)
			checkCounts(t, snap, map[Class]int64{OK: answered.Load()})
			if n := s.overrun.Load(); n != 0 {
				t.Errorf("%d DATA frames went past the server's windows", n)
			}
			if answered.Load() < 8 {
				t.Errorf("%d bodies answered: too few to have filled the connection's window", answered.Load())
			}
		})
		// A window of 0 that never opens: the streams wait for their
		// whole time, then end as timeouts in their write, said as the
		// window's, each reset on the wire. (whole counts bodies that
		// went under HTTP/2's default window before the client had the
		// settings: none since a body waits for them.)
		t.Run("a window that never opens", func(t *testing.T) {
			var heads, whole atomic.Int64
			s := newScriptServer(t, func(*scriptConn, uint32, int) { heads.Add(1) },
				http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			s.onData = func(sc *scriptConn, f *http2.DataFrame) {
				if f.StreamEnded() {
					whole.Add(1)
				}
			}
			p, snap := bodyProbe(t, s, 100, 4, 100*time.Millisecond)
			checkCounts(t, snap, map[Class]int64{Timeout: heads.Load()})
			if n := s.overrun.Load(); n != 0 {
				t.Errorf("%d DATA frames went past the server's windows", n)
			}
			var window int64
			for _, f := range p.Recorder().Failures() {
				switch {
				case f.Err == errBodyWindowTimeout && f.Phase == PhaseWrite:
					window++
				case f.Err == errBodyWindowTimeout:
					t.Errorf("a body held by the window failed in phase %s, want write", f.Phase)
				}
			}
			if want := heads.Load() - whole.Load(); window != want || want < 4 {
				t.Errorf("%d timeouts said the window held the body; the server got %d streams, %d bodies whole", window, heads.Load(), whole.Load())
			}
			deadline := time.Now().Add(2 * time.Second)
			for s.canceled.Load() != heads.Load() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if s.canceled.Load() != heads.Load() {
				t.Errorf("the server saw %d RST_STREAM CANCEL for %d streams", s.canceled.Load(), heads.Load())
			}
		})
		// The server answers each stream at its headers, its window shut:
		// the prober closes its side with RST_STREAM CANCEL rather than
		// leave the stream open for a body nobody reads.
		t.Run("answered before the body left", func(t *testing.T) {
			var answered, whole atomic.Int64
			s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
				answered.Add(1)
				sc.answer(id)
			}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			s.onData = func(sc *scriptConn, f *http2.DataFrame) {
				if f.StreamEnded() {
					whole.Add(1)
				}
			}
			_, snap := bodyProbe(t, s, 100, 4, time.Second)
			checkCounts(t, snap, map[Class]int64{OK: answered.Load()})
			want := answered.Load() - whole.Load()
			deadline := time.Now().Add(2 * time.Second)
			for s.canceled.Load() != want && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if s.canceled.Load() != want || want < 4 {
				t.Errorf("the server saw %d RST_STREAM CANCEL; it answered %d streams, %d of them with the body whole", s.canceled.Load(), answered.Load(), whole.Load())
			}
		})
	})
}

// TestH2BodiesWaitForSettings: a stream with a body goes on a connection
// only once its server's SETTINGS have come and been acked (nginx with a
// small http2_body_preread_size refuses one opened before: REFUSED_STREAM
// on every new connection's first streams); a server that never sends
// them holds such requests to their timeout, said as the settings', with
// nothing sent, while requests without a body go at once (RFC 9113 §3.4).
func TestH2BodiesWaitForSettings(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		t.Run("after the ack", func(t *testing.T) {
			var answered atomic.Int64
			s := newScriptServer(t, func(*scriptConn, uint32, int) {})
			s.onData = func(sc *scriptConn, f *http2.DataFrame) {
				if f.StreamEnded() {
					answered.Add(1)
					sc.answer(f.StreamID)
				}
			}
			_, snap := scriptProbe(t, s, func(c *Config) {
				c.Method, c.Body = "POST", []byte("hello")
				c.Concurrency, c.Connections = 8, 4
			})
			checkCounts(t, snap, map[Class]int64{OK: answered.Load()})
			if n := s.bodyBeforeAck.Load(); n != 0 {
				t.Errorf("%d streams with a body opened before the client acked the server's SETTINGS (%d connections)", n, s.conns.Load())
			}
		})
		t.Run("no settings", func(t *testing.T) {
			var heads atomic.Int64
			s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
				heads.Add(1)
				sc.answer(id)
			})
			s.noSettings = true
			p, snap := scriptProbe(t, s, func(c *Config) {
				c.Method, c.Body = "POST", []byte("hello")
				c.Timeout = 100 * time.Millisecond
			})
			if heads.Load() != 0 {
				t.Errorf("the server got %d streams before its SETTINGS", heads.Load())
			}
			if snap.Totals.Classes[Timeout] == 0 || snap.Totals.Classes[Timeout] != snap.Totals.Sent() {
				t.Errorf("classes %v: want every request a timeout", snap.Totals.Classes)
			}
			for _, f := range p.Recorder().Failures() {
				if f.Err != errNoSettingsInTime || f.Phase != PhaseWrite {
					t.Fatalf("failure %s in phase %s: %v; want the settings' timeout in phase write", f.Class, f.Phase, f.Err)
				}
			}
			// Without a body the same server is answered at once.
			_, snap = scriptProbe(t, s, nil)
			checkCounts(t, snap, map[Class]int64{OK: heads.Load()})
		})
	})
}

// A failed status over HTTP/2 carries its connection's two ends, as one
// over HTTP/1.1 does: the server's record of its clients is the referee.
func TestH2FailedStatusRecordsItsConnection(t *testing.T) {
	testenv.Timed(t)
	for _, name := range []string{"h2c/loops", "h2c/goroutines"} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			peers := map[string]bool{}
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Pod-Name", "pod-a")
				w.WriteHeader(503)
			}))
			srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
				if s == http.StateNew {
					mu.Lock()
					peers[c.RemoteAddr().String()] = true
					mu.Unlock()
				}
			}
			var protocols http.Protocols
			protocols.SetUnencryptedHTTP2(true)
			srv.Config.Protocols = &protocols
			srv.Start()
			defer srv.Close()
			p, snap := probe(t, srv.URL, func(c *Config) { h2(c); c.Connections = 2 })
			if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[HTTP5xx] != sent {
				t.Fatalf("sent %d, classes %v: want every request http_5xx", sent, snap.Totals.Classes)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, f := range p.Recorder().Failures() {
				if f.Addr == nil || !peers[f.Addr.Local.String()] || f.Addr.Remote.String() != srv.Listener.Addr().String() {
					t.Fatalf("failure %v: addresses %+v; the server's clients %v", f.Class, f.Addr, peers)
				}
			}
		})
	}
}
