package prober

import (
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

// resetAfterAnswer is a scripted server whose first connection holds its
// first stream until the test calls reset: then it answers that stream
// and resets the connection (SO_LINGER 0: an RST, no FIN). A PING goes
// ahead of the answer: when the stream arrives (pingOnArrival), else
// with the answer. Every other stream is answered at once. answered
// counts the streams it answered, the referee of the prober's ok.
type resetAfterAnswer struct {
	s        *scriptServer
	first    chan *scriptConn // the first connection, once its first stream is in
	pinged   chan struct{}    // closed once the PING on the stream's arrival is written
	answered atomic.Int64
	firstSet atomic.Bool
}

func newResetAfterAnswer(t *testing.T, pingOnArrival bool) *resetAfterAnswer {
	r := &resetAfterAnswer{first: make(chan *scriptConn, 1), pinged: make(chan struct{})}
	r.s = newScriptServer(t, func(sc *scriptConn, id uint32, n int) {
		if n == 0 && r.firstSet.CompareAndSwap(false, true) {
			// The connection is handed over before the PING goes: sent
			// first, the client could read it and write its ack before
			// a hook watching for the connection had it, and the stream
			// would wait, held, for its timeout (4 in 90 runs of the
			// loops' test, 2026-11-30). reset waits for the PING.
			r.first <- sc
			if pingOnArrival {
				sc.ping(7)
			}
			close(r.pinged)
			return
		}
		r.answered.Add(1)
		sc.answer(id)
	})
	return r
}

// reset does to the held stream sc what resetAfterAnswer says, once the
// PING on its arrival (if any) is written.
func (r *resetAfterAnswer) reset(t *testing.T, sc *scriptConn, ping bool) {
	select {
	case <-r.pinged:
	case <-time.After(10 * time.Second):
		t.Error("the PING on the held stream's arrival was never written")
		return
	}
	if ping {
		sc.ping(7)
	}
	r.answered.Add(1)
	sc.answer(1)
	if err := sc.c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Error(err)
	}
	sc.close()
}

// awaitReset waits (bounded) until the client's socket fd has met the
// server's RST: the kernel closed it (TCP_CLOSE), its receive queue kept.
func awaitReset(t *testing.T, fd int) {
	for range 5000 {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil && info.State == unix.BPF_TCP_CLOSE { // the kernel's TCP_CLOSE
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("the client's socket never saw the server's reset")
}

// checkAnsweredBeforeReset: the stream the server answered before its
// reset was counted ok, as every other it answered; nothing failed (the
// write that met the reset carried no stream that left).
func checkAnsweredBeforeReset(t *testing.T, r *resetAfterAnswer, snap Snapshot, acted bool) {
	t.Helper()
	tot := snap.Totals
	if !acted || tot.Sent() == 0 {
		t.Fatalf("the hook did not act or nothing was sent (%v)", tot.Classes)
	}
	if tot.Classes[OK] != tot.Sent() || tot.Classes[OK] != uint64(r.answered.Load()) {
		named := map[string]uint64{}
		for c, n := range tot.Classes {
			if n > 0 {
				named[Class(c).String()] = n
			}
		}
		t.Errorf("classes %v: want all ok, as the server answered each of its %d streams (one just before its reset)", named, r.answered.Load())
	}
	if conns := r.s.conns.Load(); conns < 2 {
		t.Errorf("%d connections: after the reset the requests should have gone to a new one", conns)
	}
}

// TestH2AnsweredThenResetWhileWriting: the server answers a stream and
// resets the connection while a worker writes the next stream, before the
// reader has read the answer (the reader is held behind the writer by the
// PING ahead of it, whose ack needs the write lock). The answer is in the
// socket's receive queue: the stream was answered and must be counted ok,
// not cut by the write's ECONNRESET. grpc-go's Stop did this in CI
// (4af5940): two answers on the capture counted closed_no_goaway.
func TestH2AnsweredThenResetWhileWriting(t *testing.T) {
	testenv.Timed(t)
	r := newResetAfterAnswer(t, false)
	var acted atomic.Bool
	testHookOpening = func(c *h2conn) {
		// The second stream of the first connection (its ID taken: 3,
		// the next 5), whose first is at the server (written under the
		// lock this open holds).
		if c.nextID != 5 || !acted.CompareAndSwap(false, true) {
			return
		}
		select {
		case sc := <-r.first:
			r.reset(t, sc, true)
		case <-time.After(10 * time.Second):
			t.Error("the first connection's first stream never reached the server")
			return
		}
		sys, err := c.raw.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Error(err)
			return
		}
		_ = sys.Control(func(fd uintptr) { awaitReset(t, int(fd)) })
	}
	t.Cleanup(func() { testHookOpening = nil })
	_, snap := scriptProbe(t, r.s, func(c *Config) { c.Concurrency, c.Engine = 2, EngineGoroutines })
	checkAnsweredBeforeReset(t, r, snap, acted.Load())
}

// TestLoopH2AnsweredThenResetWhileWriting: as for the goroutines, on the
// loops, one stream at a time: the server's PING on the stream's arrival
// makes the loop write its ack; before that write (the loop has read the
// PING, not what follows), the server answers the stream and resets. The
// write meets the reset with the answer unread: it is read, and counted
// ok. (When the server's SETTINGS reach the loop after the stream reached
// the server, the write that meets the reset is their ack's, the PING
// and the answer both unread: the same case.)
func TestLoopH2AnsweredThenResetWhileWriting(t *testing.T) {
	testenv.Timed(t)
	r := newResetAfterAnswer(t, true)
	var acted atomic.Bool
	testHookLoopH2Flush = func(fd int) {
		select {
		case sc := <-r.first: // the stream and its PING are in: this write is the ack's or later
			acted.Store(true)
			r.reset(t, sc, false)
			awaitReset(t, fd)
		default:
		}
	}
	t.Cleanup(func() { testHookLoopH2Flush = nil })
	p, snap := scriptProbe(t, r.s, func(c *Config) { c.Concurrency, c.Engine = 1, EngineLoops })
	checkEngine(t, p)
	checkAnsweredBeforeReset(t, r, snap, acted.Load())
}
