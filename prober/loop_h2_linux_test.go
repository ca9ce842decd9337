package prober

import (
	"bytes"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/net/http2"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

// TestWholeFrame: the loops hand the framer a frame only when all of it
// is there, and a header block only with all its CONTINUATION frames.
func TestWholeFrame(t *testing.T) {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	frame := func(write func() error) []byte {
		b.Reset()
		if err := write(); err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(b.Bytes())
	}
	ping := frame(func() error { return fr.WritePing(false, [8]byte{1}) })
	data := frame(func() error { return fr.WriteData(1, true, []byte("hello")) })
	headersOpen := frame(func() error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x88}, EndHeaders: false})
	})
	cont := frame(func() error { return fr.WriteContinuation(1, false, []byte{0x88}) })
	contEnd := frame(func() error { return fr.WriteContinuation(1, true, []byte{0x88}) })
	huge := []byte{0x01, 0x00, 0x00, 0x0, 0x0, 0, 0, 0, 1} // DATA of 65,536 bytes, more than the framer reads
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	for _, tc := range []struct {
		name string
		b    []byte
		want int
	}{
		{"empty", nil, 0},
		{"part of a header", ping[:5], 0},
		{"header without its payload", ping[:9], 0},
		{"part of a payload", data[:len(data)-1], 0},
		{"one frame", ping, len(ping)},
		{"one frame and the start of the next", cat(ping, data[:3]), len(ping)},
		{"two frames: the first", cat(data, ping), len(data)},
		{"headers waiting for their continuation", headersOpen, 0},
		{"headers and a continuation not the last", cat(headersOpen, cont), 0},
		{"headers, continuations, the last", cat(headersOpen, cont, contEnd, ping), len(headersOpen) + len(cont) + len(contEnd)},
		{"headers, the last continuation in part", cat(headersOpen, contEnd[:len(contEnd)-1]), 0},
		{"headers then not a continuation", cat(headersOpen, ping), len(headersOpen) + len(ping)},
		{"a frame too large: its header alone", huge, 9},
	} {
		if got := wholeFrame(tc.b); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestH2FramesInPieces: a server that writes every byte on its own, so the
// responses come in pieces of frames; every request is still ok, as many
// as the server answered (each engine).
func TestH2FramesInPieces(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		var answered atomic.Int64
		s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
			answered.Add(1)
			if n%2 == 0 {
				sc.answerGRPC(id) // headers, data and trailers: three frames to assemble
				return
			}
			sc.answer(id)
		})
		s.dribble = true
		_, snap := scriptProbe(t, s, nil)
		sent := snap.Totals.Sent()
		if sent == 0 || snap.Totals.Classes[OK] != sent || uint64(answered.Load()) != sent {
			t.Fatalf("sent %d, ok %d, the server answered %d (%v)", sent, snap.Totals.Classes[OK], answered.Load(), snap.Totals.Classes)
		}
	})
}

// TestLoopH2WriteFailedBeforeTheStreamLeft: the loops' write of a
// connection's round fails with nothing of it gone (the socket's sending
// side shut under it). The streams in that write were never sent: they go
// to another connection, not counted as cut; the server's count of
// streams is the referee, as in TestH2WriteFailedBeforeTheStreamLeft for
// the goroutines.
func TestLoopH2WriteFailedBeforeTheStreamLeft(t *testing.T) {
	testenv.Timed(t)
	var streams atomic.Int64
	s := newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
		streams.Add(1)
		sc.answer(id)
	})
	var flushes, shut atomic.Int64
	testHookLoopH2Flush = func(fd int) {
		if flushes.Add(1) == 5 {
			if err := syscall.Shutdown(fd, syscall.SHUT_WR); err == nil {
				shut.Add(1)
			}
		}
	}
	t.Cleanup(func() { testHookLoopH2Flush = nil })
	p, snap := scriptProbe(t, s, func(c *Config) { c.Engine, c.Concurrency = EngineLoops, 1 })
	checkEngine(t, p)
	checkNeverSentHandedBack(t, snap, shut.Load() == 1, streams.Load(), "the streams whose write failed were never sent")
	if conns := s.conns.Load(); conns < 2 {
		t.Errorf("%d connections: the streams should have gone to a new one", conns)
	}
}
