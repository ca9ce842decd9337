//go:build linux

package prober

import (
	"io"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/net/http2"
)

// HTTP/2 (and gRPC over it) on the event loops.
//
// A loop of an h2 run owns its share of the run's long-lived connections
// (Config.Connections split over the loops, each in a slot) and drives
// every stream on them itself: a request's HEADERS go into its
// connection's output, which is written once per round with every other
// frame of the round (the streams opened together leave in one write), and
// the frames that come in are parsed out of the loop's read buffer, each
// stream's outcome recorded where its end is read. No goroutine per
// connection, no hand-off: on the goroutine engine a request is a worker
// waking, a write, and the reader goroutine waking it back (bench/RESULTS-h2.md).
//
// Contract, beside the loops' own:
//   - The outcomes are the goroutine engine's (h2conn): the same classes,
//     codes, phases, GOAWAY kinds and evidence, from the same functions
//     (takeHeaders, resetBy, aboveGoAway, lostWith, h2Outcome). The
//     prober's h2 and gRPC tests run against both engines.
//   - Nothing is retried. A stream none of whose bytes left (the write
//     failed, or the connection ended first) was never sent: it goes back
//     to the front of the loop's queue for another connection, as h2conn's
//     open hands such a stream back, at most h2RefusedDials times. Every
//     stream that left ends exactly once.
//   - A request that finds no connection with a stream free waits in the
//     loop's queue (it has started: its time runs). A slot with no
//     connection is dialed for the first request that finds none free,
//     which the dial's failure fails (its own fresh connection, as on the
//     goroutine engine); a connection that takes no new streams (a GOAWAY,
//     its stream IDs spent) leaves its slot at once, its streams in flight
//     go on to their end there, and the slot is dialed again.
//   - Only long-lived connections (Config.Conn.FreshFraction 0) and
//     cleartext (h2c with prior knowledge): loopTarget and loopH2Refusal
//     say why not otherwise.

// loopH2 is an HTTP/2 connection's state on a loop (loopConn.h2).
type loopH2 struct {
	slot    int // its slot among the loop's connections (loop.h2slots); -1 once it left it
	fr      *http2.Framer
	headers *h2HeaderReader
	in      frameReader
	henc    *h2RequestEncoder
	out     outBuffer // frames written, not yet taken by the socket
	// sent counts the bytes the socket took: a stream whose first byte is
	// at or past it has not left.
	sent    int64
	pending []byte // the start of a frame, waiting for the rest
	dirty   bool   // in loop.h2dirty: out has bytes to write this round
	streams map[uint32]*loopStream
	nextID  uint32
	// maxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS,
	// capStreams the prober's own cap (Config.Streams; 0: none).
	maxStreams, capStreams uint32
	opened                 uint32 // streams opened on it: the next one's ConnReqs
	goAway                 h2GoAway
	connUnacked            uint32
	// flow is what the server's windows let the streams' bodies send.
	flow h2SendFlow
	// holdBodies: requests carry a body, and none goes on the connection
	// before the server's SETTINGS (gotSettings: they came); see
	// errNoSettingsInTime.
	holdBodies, gotSettings bool
	// ending: h2End is ending it (nothing more is written).
	ending bool
	// writeErr: a write met the server's reset; nothing more is written,
	// the reads take what arrived before it, then h2End ends the
	// connection with this error (h2conn.writeFailed says why).
	writeErr error
}

// loopStream is one request of an h2 run on a loop: queued, then a stream.
type loopStream struct {
	h2stream
	res      Result
	deadline time.Duration // the request's: its Start plus the timeout
	// connectDeadline bounds its wait in the queue while a slot is being
	// dialed: its Start plus the connect timeout (at most the timeout).
	connectDeadline time.Duration
	// first and end are where its frames begin and end in all the
	// connection has written (loopH2.out's count).
	first, end int64
	// handedBack counts the connections it went to and never left on.
	handedBack int
	// writeFailed: its connection ended before all of it left (phase
	// write, as when the goroutine engine's write of it fails).
	writeFailed bool
}

// outBuffer is a connection's output: the framer writes into it.
type outBuffer struct {
	b     []byte
	total int64 // bytes ever written into it
}

func (o *outBuffer) Write(p []byte) (int, error) {
	o.b = append(o.b, p...)
	o.total += int64(len(p))
	return len(p), nil
}

// frameReader hands the framer one whole frame (or header block) at a
// time: the loop gives it only what wholeFrame found complete, so a read
// never has to wait.
type frameReader struct{ b []byte }

func (r *frameReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// Frame layout (RFC 9113 §4.1) as wholeFrame reads it.
const (
	h2FrameHeaderLen  = 9
	h2MaxReadFrame    = 16 << 10 // the prober never raises SETTINGS_MAX_FRAME_SIZE
	h2TypeHeaders     = 0x1
	h2TypePushPromise = 0x5
	h2TypeContinue    = 0x9
	h2FlagEndHeaders  = 0x4
)

// wholeFrame is the length of the frame at the start of b when all of it
// is there, and for HEADERS (or PUSH_PROMISE) without END_HEADERS of the
// whole header block with its CONTINUATION frames (the framer reads them
// as one); 0 while some is missing. A frame longer than the framer takes
// counts as its header alone: the framer then fails the connection
// without waiting for a payload it would refuse.
func wholeFrame(b []byte) int {
	n := 0
	for {
		if len(b)-n < h2FrameHeaderLen {
			return 0
		}
		length := int(b[n])<<16 | int(b[n+1])<<8 | int(b[n+2])
		typ, flags := b[n+3], b[n+4]
		if length > h2MaxReadFrame {
			return n + h2FrameHeaderLen
		}
		if len(b)-n-h2FrameHeaderLen < length {
			return 0
		}
		first := n == 0
		n += h2FrameHeaderLen + length
		switch {
		case first && typ != h2TypeHeaders && typ != h2TypePushPromise:
			return n
		case !first && typ != h2TypeContinue:
			// Not a CONTINUATION where one must be: the framer reports
			// the protocol error when it reads past the block's start.
			return n
		case flags&h2FlagEndHeaders != 0:
			return n
		}
	}
}

// h2Begin starts an h2 request: queued, then placed on a stream as soon
// as a connection has one free.
func (l *loop) h2Begin(res Result) {
	ls := l.newStream()
	ls.res = res
	cfg := &l.p.cfg
	ls.deadline = res.Start + cfg.Timeout
	ls.connectDeadline = res.Start + min(cfg.ConnectTimeout, cfg.Timeout)
	l.noteDeadline(ls.connectDeadline)
	l.h2queue = append(l.h2queue, ls)
	l.h2Place()
}

func (l *loop) newStream() *loopStream {
	if n := len(l.h2free); n > 0 {
		ls := l.h2free[n-1]
		l.h2free = l.h2free[:n-1]
		return ls
	}
	return &loopStream{}
}

func (l *loop) freeStream(ls *loopStream) {
	*ls = loopStream{}
	l.h2free = append(l.h2free, ls)
}

// h2Place puts the queued requests, oldest first, on the loop's
// connections, round robin over its slots as the goroutine engine's
// workers spread over theirs: a request takes the next slot whose
// connection has a stream free, or dials the next empty slot (its
// connection then carries it first); a slot being dialed or full is
// skipped. When every slot is, the rest wait.
func (l *loop) h2Place() {
	for len(l.h2queue) > l.h2head {
		ls := l.h2queue[l.h2head]
		n := len(l.h2slots)
		placed := false
		for i := range n {
			k := (l.h2next + i) % n
			c := l.h2slots[k]
			switch {
			case c == nil:
				l.h2next = k + 1
				l.h2pop()
				l.h2Dial(k, ls)
			case c.state == connH2 && c.h2.room():
				l.h2next = k + 1
				l.h2pop()
				l.h2Open(c, ls)
			default:
				continue
			}
			placed = true
			break
		}
		if !placed {
			return
		}
	}
}

func (l *loop) h2pop() {
	l.h2queue[l.h2head] = nil
	l.h2head++
	if l.h2head == len(l.h2queue) {
		l.h2queue, l.h2head = l.h2queue[:0], 0
	}
}

// room: a new stream may go on the connection now.
func (h *loopH2) room() bool {
	n := uint32(len(h.streams))
	return h.goAway.kind == GoAwayNone && n < h.maxStreams && (h.capStreams == 0 || n < h.capStreams) &&
		(h.gotSettings || !h.holdBodies)
}

// h2Dial opens a connection for slot, for the request ls, whose stream
// goes first on it (or which the dial's failure fails).
func (l *loop) h2Dial(slot int, ls *loopStream) {
	res := ls.res
	l.freeStream(ls)
	c := l.dial(res, false)
	if c == nil || c.state == connFree {
		return // failed at once, and recorded
	}
	if c.h2 == nil {
		c.h2 = &loopH2{}
	}
	c.h2.slot = slot
	l.h2slots[slot] = c
}

// h2Connected starts HTTP/2 on c, just connected: the preface, the
// prober's settings and window, and the dialing request's stream, all in
// the round's one write (nothing waits for the server's settings: RFC
// 9113 §3.4).
func (l *loop) h2Connected(c *loopConn) {
	h := c.h2
	slot := h.slot
	out := h.out.b[:0]
	pending, streams := h.pending[:0], h.streams
	if streams == nil {
		streams = make(map[uint32]*loopStream)
	}
	clear(streams) // empty already: a connection closes only with none left
	flow := newH2SendFlow()
	flow.waiting = h.flow.waiting[:0]
	*h = loopH2{slot: slot, out: outBuffer{b: out}, pending: pending, streams: streams,
		nextID: 1, maxStreams: h2AssumedStreams, capStreams: uint32(l.p.cfg.Streams), flow: flow,
		holdBodies: len(l.h2req.body) > 0}
	h.fr = http2.NewFramer(&h.out, &h.in)
	h.fr.SetReuseFrames() // a frame is done with before the next is read
	h.headers = newH2HeaderReader(l.p.backendHeader, h2MaxHeaderList)
	h.henc = newH2RequestEncoder()
	_, _ = h.out.Write([]byte(http2.ClientPreface))
	_ = h.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h2MaxHeaderList},
	)
	_ = h.fr.WriteWindowUpdate(0, h2ConnWindow-65535)
	// Without TCP_NODELAY a stream written while an earlier write is
	// unacknowledged waits for that ACK (Nagle), and the server's delayed
	// ACK holds it up to 40 ms: measured here, 3,000 gRPC calls a second
	// against 22,000 on the goroutine engine (Go's net sets it).
	_ = syscall.SetsockoptInt(c.fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	l.learnLocalIP(c) // failures carry it; one getsockname per connection
	c.state = connH2
	c.deadline = never // its streams keep their own
	ls := l.newStream()
	ls.res = c.res
	ls.deadline = c.res.Start + l.p.cfg.Timeout
	if h.holdBodies {
		// Its stream waits for the server's SETTINGS, at the queue's
		// front (it started before any request waiting there): the
		// connection takes it first once they come, unless another
		// connection has a stream free sooner.
		ls.connectDeadline = ls.deadline
		l.noteDeadline(ls.deadline)
		l.h2Dirty(c) // the preface and settings go now: the server answers them
		l.h2Requeue(ls)
		return
	}
	l.h2Open(c, ls)
}

// h2Open sends ls as a new stream on c (which has room).
func (l *loop) h2Open(c *loopConn, ls *loopStream) {
	h := c.h2
	ls.reset()
	ls.id, ls.connReqs = h.nextID, h.opened
	h.nextID += 2
	h.opened++
	h.streams[ls.id] = ls
	ls.res.ConnReqs = ls.connReqs
	ls.res.ConnAge = max(0, ls.res.Start-c.born)
	ls.first = h.out.total

	req := &l.h2req
	req.idValue = strconv.AppendUint(append(req.idValue[:0], l.p.template.idPrefix...), ls.res.Seq, 10)
	block := h.henc.block(req, req.idValue)
	_ = h.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: ls.id, BlockFragment: block, EndStream: len(req.body) == 0, EndHeaders: true,
	})
	// The body as far as the windows allow; the rest goes as the
	// server's WINDOW_UPDATEs open them (h2SendWaiting).
	h.flow.open(&ls.h2stream, req.body)
	if data, last := h.flow.next(&ls.h2stream); data != nil {
		_ = h.fr.WriteData(ls.id, last, data)
	}
	if len(ls.bodyLeft) > 0 {
		h.flow.wait(&ls.h2stream, h.waitingOpen)
	}
	ls.end = h.out.total
	l.noteDeadline(ls.deadline)
	l.h2Dirty(c)
	if h.nextID > 1<<31-1 {
		l.h2Leave(c) // its stream IDs are spent: the slot gets a new one
	}
}

// h2Dirty marks c's output to be written at the end of the round.
func (l *loop) h2Dirty(c *loopConn) {
	if !c.h2.dirty {
		c.h2.dirty = true
		l.h2dirty = append(l.h2dirty, idleEntry{c, c.gen})
	}
}

// h2Flush writes the round's output of every connection that has some.
func (l *loop) h2Flush() {
	for _, e := range l.h2dirty {
		if e.c.gen == e.gen && e.c.state == connH2 {
			e.c.h2.dirty = false
			if testHookLoopH2Flush != nil {
				testHookLoopH2Flush(e.c.fd)
			}
			l.h2Write(e.c)
		}
	}
	clear(l.h2dirty)
	l.h2dirty = l.h2dirty[:0]
}

// testHookLoopH2Flush, when set by a test, runs before each connection's
// write of a round, with its socket.
var testHookLoopH2Flush func(fd int)

// h2Write writes what c's socket takes now; the rest waits for room (an
// output event).
func (l *loop) h2Write(c *loopConn) {
	h := c.h2
	if len(h.out.b) == 0 || h.writeErr != nil {
		return
	}
	n, err := writeFD(c.fd, h.out.b)
	if err != nil {
		err = l.connError("write", c, os.NewSyscallError("write", err))
		if !peerReset(err) {
			l.h2End(c, err)
			return
		}
		// Read to the end of the receive queue first (the next round's
		// readAgain): a stream answered there was answered.
		h.writeErr = err
		l.h2Leave(c)
		l.again = append(l.again, idleEntry{c, c.gen})
		return
	}
	h.sent += int64(n)
	h.out.b = h.out.b[:copy(h.out.b, h.out.b[n:])]
}

// h2Read takes what arrived on c. hup: the event said the peer closed,
// so it reads to the end.
func (l *loop) h2Read(c *loopConn, hup bool) {
	gen := c.gen
	for range loopReadsPerEvent {
		n, err := rawRead(c.fd, l.readBuf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if c.h2.writeErr != nil {
				l.h2End(c, c.h2.writeErr) // read to the end; the rest never comes
			}
			return
		case err != nil:
			l.h2End(c, l.connError("read", c, os.NewSyscallError("read", err)))
			return
		case n == 0:
			end := io.EOF
			if len(c.h2.pending) > 0 {
				end = io.ErrUnexpectedEOF // in the middle of a frame
			}
			l.h2End(c, end)
			return
		}
		l.h2Frames(c, l.readBuf[:n])
		if c.gen != gen || c.state != connH2 {
			return // the frames ended it
		}
		if n < len(l.readBuf) && !hup {
			return
		}
	}
	l.again = append(l.again, idleEntry{c, c.gen})
}

// h2Frames handles the whole frames in what was read (after what was left
// from the last read); the start of a frame waits for its rest.
func (l *loop) h2Frames(c *loopConn, data []byte) {
	h := c.h2
	gen := c.gen
	if len(h.pending) > 0 {
		h.pending = append(h.pending, data...)
		data = h.pending
	}
	for {
		n := wholeFrame(data)
		if n == 0 {
			break
		}
		h.in.b = data[:n]
		data = data[n:]
		f, err := h.fr.ReadFrame()
		var headers *h2Headers
		if hf, ok := f.(*http2.HeadersFrame); ok && err == nil {
			headers, err = h.headers.read(h.fr, hf)
		}
		if err != nil {
			if se, ok := err.(http2.StreamError); ok {
				// One stream's frame was malformed (its headers too big,
				// say): that stream fails, the connection goes on.
				if ls := h.streams[se.StreamID]; ls != nil {
					ls.class, ls.code, ls.err = RSTStream, se.Code.String(), err
					l.h2EndStream(c, ls)
				}
				_ = h.fr.WriteRSTStream(se.StreamID, se.Code)
				l.h2Dirty(c)
			} else {
				l.h2End(c, err)
			}
		} else {
			l.h2Frame(c, f, headers)
		}
		if c.gen != gen || c.state != connH2 {
			return // closed (the frame ended it, or its last stream after a GOAWAY)
		}
	}
	// What is left is the start of a frame (data may be pending itself:
	// append moves it down, overlapping or not).
	h.pending = append(h.pending[:0], data...)
}

// h2Frame handles one frame from the server; headers is its block when f
// is a HEADERS frame.
func (l *loop) h2Frame(c *loopConn, f http2.Frame, headers *h2Headers) {
	h := c.h2
	switch f := f.(type) {
	case *http2.HeadersFrame:
		ls := h.streams[headers.streamID]
		if ls == nil {
			return
		}
		informational, err := ls.takeHeaders(headers, l.p.cfg.Protocol == GRPC)
		switch {
		case err != nil:
			ls.class, ls.code, ls.err = RSTStream, http2.ErrCodeProtocol.String(), err
			_ = h.fr.WriteRSTStream(headers.streamID, http2.ErrCodeProtocol)
			l.h2Dirty(c)
			l.h2EndStream(c, ls)
		case !informational && headers.ended:
			l.h2EndStream(c, ls)
		}
	case *http2.DataFrame:
		ls := h.streams[f.StreamID]
		var st *h2stream
		if ls != nil {
			st = &ls.h2stream
		}
		connUpdate, streamUpdate := windowUpdates(f, &h.connUnacked, st)
		if connUpdate > 0 {
			_ = h.fr.WriteWindowUpdate(0, connUpdate)
		}
		if streamUpdate > 0 {
			_ = h.fr.WriteWindowUpdate(f.StreamID, streamUpdate)
		}
		if connUpdate > 0 || streamUpdate > 0 {
			l.h2Dirty(c)
		}
		if ls != nil && f.StreamEnded() {
			l.h2EndStream(c, ls)
		}
	case *http2.RSTStreamFrame:
		if ls := h.streams[f.StreamID]; ls != nil {
			ls.resetBy(f.ErrCode)
			l.h2EndStream(c, ls)
		}
	case *http2.WindowUpdateFrame:
		var st *h2stream
		ls := h.streams[f.StreamID]
		if f.StreamID != 0 {
			if ls == nil {
				return // a stream already ended
			}
			st = &ls.h2stream
		}
		streamErr, err := h.flow.update(st, f.Increment)
		switch {
		case err != nil:
			l.h2End(c, err)
			return
		case streamErr:
			ls.class, ls.code, ls.err = RSTStream, http2.ErrCodeFlowControl.String(), h2FlowStreamError(f.StreamID)
			_ = h.fr.WriteRSTStream(f.StreamID, http2.ErrCodeFlowControl)
			l.h2Dirty(c)
			l.h2EndStream(c, ls)
			if c.state != connH2 {
				return
			}
		}
		l.h2SendWaiting(c)
	case *http2.GoAwayFrame:
		h.goAway.note(f)
		l.h2Leave(c)
		for id, ls := range h.streams {
			if id > f.LastStreamID {
				ls.aboveGoAway(id, h.goAway)
				l.h2EndStream(c, ls)
			}
		}
		l.h2CloseIfDrained(c)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}
		h.gotSettings = true // the round's h2Place may now put bodies on it
		if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
			h.maxStreams = v
		}
		if v, ok := f.Value(http2.SettingHeaderTableSize); ok {
			h.henc.peerTableSize(v)
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			err := h.flow.settings(v, func(each func(*h2stream)) {
				for _, ls := range h.streams {
					each(&ls.h2stream)
				}
			})
			if err != nil {
				l.h2End(c, err)
				return
			}
		}
		_ = h.fr.WriteSettingsAck()
		l.h2Dirty(c)
		l.h2SendWaiting(c)
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = h.fr.WritePing(true, f.Data)
			l.h2Dirty(c)
		}
	}
}

// h2SendWaiting writes what the windows now allow of the bodies waiting
// on them.
func (l *loop) h2SendWaiting(c *loopConn) {
	h := c.h2
	if len(h.flow.waiting) == 0 {
		return
	}
	h.flow.send(h.waitingOpen, func(id uint32, data []byte, last bool) {
		_ = h.fr.WriteData(id, last, data)
		h.streams[id].end = h.out.total
		l.h2Dirty(c)
	})
}

// waitingOpen: w's stream is still on the connection.
func (h *loopH2) waitingOpen(w h2Waiting) bool {
	ls := h.streams[w.id]
	return ls != nil && &ls.h2stream == w.st
}

// h2Leave takes c out of its slot: it takes no new streams, and the
// slot's next request dials a new connection. Its streams go on.
func (l *loop) h2Leave(c *loopConn) {
	if h := c.h2; h.slot >= 0 {
		if l.h2slots[h.slot] == c {
			l.h2slots[h.slot] = nil
		}
		h.slot = -1
	}
}

// h2CloseIfDrained closes a connection that left its slot and has no
// stream left: the server asked for it (GOAWAY) and it served its last.
func (l *loop) h2CloseIfDrained(c *loopConn) {
	if c.state == connH2 && !c.h2.ending && c.h2.slot < 0 && len(c.h2.streams) == 0 {
		l.h2Write(c) // acks, a reset: best effort
		if c.state == connH2 {
			l.closeConn(c)
		}
	}
}

// h2EndStream records the end of ls on c, filled in by the caller.
func (l *loop) h2EndStream(c *loopConn, ls *loopStream) {
	h := c.h2
	delete(h.streams, ls.id)
	if ls.headers && ls.err == nil && !ls.canceled {
		c.served++ // the connection's responses (ConnLog)
	}
	if len(ls.bodyLeft) > 0 && ls.class == OK && !ls.canceled && !h.ending {
		// Answered before all of its body left: the prober's side closes
		// (RFC 9113 §8.1), the rest is not sent.
		_ = h.fr.WriteRSTStream(ls.id, http2.ErrCodeCancel)
		l.h2Dirty(c)
	}
	ls.res.End = l.p.Elapsed()
	// A body some of which never left (its window stayed shut) failed in
	// its write, as one whose write failed.
	h2Outcome(&ls.res, &ls.h2stream, &l.p.cfg, l.p.cfg.Protocol == GRPC, c.addr, ls.writeFailed || len(ls.bodyLeft) > 0, &l.backend)
	if l.p.aborting.Load() && !ls.res.Canceled && ls.res.Class != OK {
		ls.res.Canceled = true // cut by our own stop: no outcome
	}
	l.record(&ls.res)
	l.freeStream(ls)
	if h.slot < 0 {
		l.h2CloseIfDrained(c)
	}
}

// h2End ends c with err: each stream none of whose bytes left goes back
// to the queue for another connection (see the contract), every other
// ends as lostWith says; then the connection closes.
func (l *loop) h2End(c *loopConn, err error) {
	h := c.h2
	if h.writeErr != nil {
		err = h.writeErr // the connection's first failure (see writeErr)
	}
	h.ending = true
	l.h2Leave(c)
	var back []*loopStream
	for id, ls := range h.streams {
		ls.writeFailed = h.sent < ls.end
		if ls.first >= h.sent && !l.p.aborting.Load() {
			if ls.handedBack++; ls.handedBack < h2RefusedDials {
				delete(h.streams, id)
				back = append(back, ls)
				continue
			}
			// As the goroutine engine's refusal: a GOAWAY said no new
			// stream would be processed; else the connection's end.
			if h.goAway.kind != GoAwayNone {
				ls.aboveGoAway(ls.id, h.goAway)
				l.h2EndStream(c, ls)
				continue
			}
		}
		ls.lostWith(err, h.goAway)
		l.h2EndStream(c, ls)
	}
	l.closeConn(c)
	if len(back) > 0 {
		// To the queue's front, oldest first: they started before any
		// request still waiting.
		for _, ls := range back {
			ls.reset()
			ls.writeFailed = false
		}
		sortStreamsBySeq(back)
		l.h2Requeue(back...)
	}
}

// h2Requeue puts front, in its order, at the queue's front: requests that
// started before any still waiting there.
func (l *loop) h2Requeue(front ...*loopStream) {
	q := append(front, l.h2queue[l.h2head:]...)
	clear(l.h2queue)
	l.h2queue, l.h2head = q, 0
}

func sortStreamsBySeq(s []*loopStream) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].res.Seq < s[j-1].res.Seq; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// h2Expire fails c's streams whose time is up (each reset on the wire,
// RST_STREAM CANCEL, as the goroutine engine does) and returns the next
// deadline among the rest.
func (l *loop) h2Expire(c *loopConn, now time.Duration) time.Duration {
	h := c.h2
	next := never
	for id, ls := range h.streams {
		if ls.deadline > now {
			next = min(next, ls.deadline)
			continue
		}
		_ = h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		l.h2Dirty(c)
		ls.class, ls.err = Timeout, timeoutError{"http2: no complete response within the request timeout"}
		if len(ls.bodyLeft) > 0 {
			ls.err = errBodyWindowTimeout
		}
		l.h2EndStream(c, ls)
		if c.state != connH2 {
			break
		}
	}
	return next
}

// h2ExpireQueue fails the queued requests whose time ran out before any
// connection had a stream for them, and returns the next deadline among
// the rest. One that waited past its connect timeout while a slot was
// being dialed (another request's dial, whose SYN may get no answer)
// fails as the goroutine engine's does when it waits for its slot's dial:
// a connect timeout, on no connection of its own (errWaitedOnDial). Else
// at its timeout: every connection was at the server's stream limit, or
// at the prober's own --streams (local).
func (l *loop) h2ExpireQueue(now time.Duration) time.Duration {
	next := never
	dialing := l.h2Dialing()
	kept := l.h2queue[:l.h2head]
	for _, ls := range l.h2queue[l.h2head:] {
		var phase Phase
		var err error
		switch {
		case dialing && ls.connectDeadline <= now:
			phase, err = PhaseDial, errWaitedOnDial
		case ls.deadline <= now:
			phase, err = PhaseWrite, errNoStreamInTime
			if l.h2AwaitingSettings() {
				err = errNoSettingsInTime
			}
		default:
			if ls.connectDeadline > now { // a dial may begin before it
				next = min(next, ls.connectDeadline)
			} else {
				next = min(next, ls.deadline)
			}
			kept = append(kept, ls)
			continue
		}
		res := &ls.res
		res.End = now
		capped := err == errNoStreamInTime && l.h2Capped()
		if capped {
			err = errStreamsCappedTimeout
		}
		l.classify(res, phase, err, false)
		if capped && !res.Canceled {
			// The prober's own cap held it, not the target: local, as
			// running out of workers or ports is.
			res.Class = Local
		}
		l.record(res)
		l.freeStream(ls)
	}
	clear(l.h2queue[len(kept):])
	l.h2queue = kept
	if l.h2head == len(l.h2queue) {
		l.h2queue, l.h2head = l.h2queue[:0], 0
	}
	return next
}

// h2Dialing: one of the loop's slots is being dialed.
func (l *loop) h2Dialing() bool {
	for _, c := range l.h2slots {
		if c != nil && c.state == connConnecting {
			return true
		}
	}
	return false
}

// h2AwaitingSettings: a connection of the loop's slots holds its streams
// with bodies for the server's SETTINGS.
func (l *loop) h2AwaitingSettings() bool {
	for _, c := range l.h2slots {
		if c != nil && c.state == connH2 && c.h2.holdBodies && !c.h2.gotSettings {
			return true
		}
	}
	return false
}

// h2Capped: every connection of the loop's slots is established and at
// the prober's own --streams, not the server's limit.
func (l *loop) h2Capped() bool {
	for _, c := range l.h2slots {
		if c == nil || c.state != connH2 {
			return false
		}
		h := c.h2
		if h.capStreams == 0 || uint32(len(h.streams)) < h.capStreams || h.capStreams > h.maxStreams {
			return false
		}
	}
	return len(l.h2slots) > 0
}

var (
	errNoStreamInTime = timeoutError{"http2: no connection had a stream free for the request's time (every one at the server's stream limit, or being dialed)"}
)

// h2Abort cuts c's streams: the run was canceled, they have no outcome.
func (l *loop) h2Abort(c *loopConn, err error) {
	for _, ls := range c.h2.streams {
		ls.canceled, ls.err = true, err
		l.h2EndStream(c, ls)
	}
}

// h2AbortQueue cuts the queued requests: no outcome.
func (l *loop) h2AbortQueue(err error) {
	for _, ls := range l.h2queue[l.h2head:] {
		ls.res.End = l.p.Elapsed()
		l.classify(&ls.res, PhaseWrite, err, false)
		l.record(&ls.res)
		l.freeStream(ls)
	}
	clear(l.h2queue)
	l.h2queue, l.h2head = l.h2queue[:0], 0
}
