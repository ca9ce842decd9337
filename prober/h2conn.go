package prober

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is one HTTP/2 connection the prober owns. Workers open streams on
// it, each writing its own HEADERS (under wmu, which also orders stream
// IDs on the wire); one reader goroutine reads every frame and ends each
// stream exactly once. Nothing here retries: a stream the connection could
// not carry ends in its class (goaway_unprocessed, refused_stream, ...) and
// the next request goes to another connection. That is the whole reason
// for this file: Go's HTTP/2 Transport replays GOAWAY'd and refused streams
// up to seven times, and grpc-go retries unprocessed streams even with
// retries disabled, so neither may sit on the request path.
//
// Lock order: wmu before mu. The reader takes wmu only without mu.
type h2conn struct {
	raw, rw net.Conn
	addr    ConnAddr
	born    time.Duration
	// dialed is when its dial began; log gets it when it ends (nil: not
	// asked for; see ConnLog).
	dialed time.Duration
	log    *ConnLog
	// grpc: responses end in trailers with grpc-status (GRPC).
	grpc bool

	wmu  sync.Mutex
	out  countingWriter // rw, counting what it took: bw writes here
	bw   *bufio.Writer
	fr   *http2.Framer     // writes under wmu; reads by the reader goroutine only
	henc *h2RequestEncoder // under wmu
	// headers reads the response header blocks (the reader goroutine's).
	headers *h2HeaderReader

	mu         sync.Mutex
	streams    map[uint32]*h2stream
	nextID     uint32
	maxStreams uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS
	// capStreams is the prober's own cap (Config.Streams; 0: none).
	capStreams uint32
	opened     uint32 // streams opened on it: the next one's ConnReqs
	responses  uint32 // streams that ended in a response (ConnLog)
	goAway     h2GoAway
	// ended is why the connection stopped carrying streams (the reader's
	// error, a write error, errClosedByUs); nil while it carries them.
	ended error
	// writeErr: a write failed because the server reset the connection;
	// it takes no new stream, and the reader reads what arrived before
	// the reset, then ends it with this error (see writeFailed).
	writeErr error
	// connUnacked counts DATA bytes received and not yet given back to
	// the connection's window.
	connUnacked uint32
	// flow is what the server's windows let the prober send: under wmu,
	// and under mu too where it reads or changes a stream's window or
	// body (a worker reads those once its stream has ended, which is
	// signalled under mu).
	flow   h2SendFlow
	chunks []h2Chunk // sendWaiting's, under wmu
	// settings is closed once the server's first SETTINGS are acked
	// (gotSettings: the reader's own record of it); streams with a body
	// wait for it (see errNoSettingsInTime).
	settings    chan struct{}
	gotSettings bool
	readerDone  chan struct{}
}

// h2GoAway is what the connection's GOAWAY frames said.
type h2GoAway struct {
	kind GoAwayKind
	last uint32 // the last one's last stream ID
	code http2.ErrCode
	// debug is the last one's debug data, as text, for the error.
	debug string
}

// h2stream is one request on an h2conn. A worker owns one and reuses it:
// it is in the connection's map from open until the reader ends it (then
// done receives exactly one value) or the worker takes it back (timeout,
// stop; then nothing is sent on done).
type h2stream struct {
	id   uint32
	done chan struct{}
	// Set by the reader before done is signalled.
	status  int
	headers bool // the response's headers arrived
	// connReqs is how many streams the connection carried before it.
	connReqs   uint32
	backend    string // the backend header's value, when configured and present
	hasBackend bool
	// grpcStatus is the response's grpc-status (-1 when none came) and
	// grpcMessage its grpc-message.
	grpcStatus  int
	grpcMessage string
	class       Class // the failure's class; OK when the stream ended in a response
	err         error
	code        string // RST_STREAM or GOAWAY error code
	goAway      GoAwayKind
	unacked     uint32 // DATA bytes not yet given back to the stream's window
	canceled    bool   // cut by the prober's own close
	// sendWindow is what the server's window lets the stream send, and
	// bodyLeft the part of its body not yet sent (h2SendFlow).
	sendWindow int64
	bodyLeft   []byte
	// writing: open is writing its HEADERS (under mu). A connection that
	// ends meanwhile leaves the stream to open (orphaned), which alone
	// knows whether any of it left.
	writing, orphaned bool
}

func newH2Stream() *h2stream { return &h2stream{done: make(chan struct{}, 1)} }

// reset readies st for a new request.
func (st *h2stream) reset() {
	st.id, st.status, st.headers, st.backend, st.hasBackend, st.class, st.err = 0, 0, false, "", false, OK, nil
	st.code, st.goAway, st.unacked, st.canceled = "", GoAwayNone, 0, false
	st.grpcStatus, st.grpcMessage = -1, ""
	st.sendWindow, st.bodyLeft = 0, nil
}

// Flow control: the prober reads everything at once, so its windows are
// large and given back in halves; a response body never waits on them.
const (
	h2StreamWindow = 4 << 20
	h2ConnWindow   = 1 << 30
	// h2AssumedStreams is the concurrency assumed before the server's
	// SETTINGS arrive (RFC 9113 §6.5.2 recommends servers allow at least
	// 100).
	h2AssumedStreams = 100
	// h2MaxHeaderList bounds a response's headers.
	h2MaxHeaderList = 1 << 20
	// h2ControlWriteTimeout bounds the writes that are no request's (acks,
	// window updates, resets): a server that stops reading for this long
	// has failed the connection.
	h2ControlWriteTimeout = 5 * time.Second
)

var (
	errNotAccepting = errors.New("http2: connection not accepting new streams")
	errStreamsFull  = errors.New("http2: connection at the server's stream limit")
	// errStreamsCapped: at the prober's own cap (Config.Streams).
	errStreamsCapped = errors.New("http2: connection at the prober's stream cap")
	errNoH2          = errors.New("the server did not agree to HTTP/2 (ALPN offered h2 only)")
	// errClosedByUs: the prober closed it (end of run, a one-request
	// connection, drained after a GOAWAY): the streams it cut have no
	// outcome.
	errClosedByUs = errors.New("http2: connection closed by the prober")
)

// startH2 writes the client preface and settings on a connected rw and
// starts the reader. Nothing waits for the server's settings: requests may
// follow at once (RFC 9113 §3.4).
func startH2(raw, rw net.Conn, born time.Duration, addr ConnAddr, backendHeader string, grpc bool, log *ConnLog, dialed time.Duration) (*h2conn, error) {
	c := &h2conn{
		raw: raw, rw: rw, addr: addr, born: born, grpc: grpc, log: log, dialed: dialed,
		streams:    make(map[uint32]*h2stream),
		nextID:     1,
		maxStreams: h2AssumedStreams,
		flow:       newH2SendFlow(),
		settings:   make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	c.out.w = rw
	c.bw = bufio.NewWriterSize(&c.out, 16<<10)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(rw, 32<<10))
	c.headers = newH2HeaderReader(backendHeader, h2MaxHeaderList)
	c.henc = newH2RequestEncoder()
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		return nil, err
	}
	err := c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h2MaxHeaderList},
	)
	if err == nil {
		err = c.fr.WriteWindowUpdate(0, h2ConnWindow-65535)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return nil, err
	}
	go c.read()
	return c, nil
}

// h2Request is what a stream sends: its header fields (the request ID's
// value appended per request) and body.
type h2Request struct {
	fields  []hpack.HeaderField
	idName  string
	idValue []byte
	body    []byte
}

// open sends req as a new stream st. errNotAccepting, errStreamsFull and
// errStreamsCapped mean nothing was sent (the caller may use another
// connection); any other error is the write's and st has ended with it
// (or will: wait on done).
func (c *h2conn) open(st *h2stream, req *h2Request, deadline time.Time) (sent bool, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	switch {
	case c.ended != nil || c.writeErr != nil || c.goAway.kind != GoAwayNone:
		c.mu.Unlock()
		return false, errNotAccepting
	case uint32(len(c.streams)) >= c.maxStreams:
		c.mu.Unlock()
		return false, errStreamsFull
	case c.capStreams > 0 && uint32(len(c.streams)) >= c.capStreams:
		c.mu.Unlock()
		return false, errStreamsCapped
	case c.nextID > 1<<31-1:
		c.mu.Unlock()
		return false, errNotAccepting
	}
	st.id, st.connReqs = c.nextID, c.opened
	st.writing, st.orphaned = true, false
	c.nextID += 2
	c.opened++
	c.streams[st.id] = st
	// The body's first frame, as far as the windows allow; the rest is
	// sent by the reader as the server's WINDOW_UPDATEs open them.
	c.flow.open(st, req.body)
	data, last := c.flow.next(st)
	if len(st.bodyLeft) > 0 {
		c.flow.wait(st, c.waitingOpen)
	}
	c.mu.Unlock()
	// first: where the stream's bytes begin in all the connection has
	// written (c.out.n counts what left; the buffer holds the rest).
	first := c.out.n + int64(c.bw.Buffered())
	if testHookOpening != nil {
		testHookOpening(c)
	}

	block := c.henc.block(req, req.idValue)
	// A server that stops reading must not hold every stream of the
	// connection behind this write past the request's time.
	_ = c.rw.SetWriteDeadline(deadline)
	err = c.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: st.id, BlockFragment: block, EndStream: len(req.body) == 0, EndHeaders: true,
	})
	if err == nil && data != nil {
		err = c.fr.WriteData(st.id, last, data)
	}
	if err == nil {
		// One write per stream. Streams opened together were tried in
		// one write (each worker yielding before its flush so that the
		// others woken by the same read wrote theirs first): 9 times
		// fewer writes (strace), and no change in CPU per request beyond
		// the noise (pinned A/B at h2load's maximum, 21.3 against 21.7
		// µs), so not worth holding a stream's bytes past open.
		err = c.bw.Flush()
	}
	// A failed write stays failed (bufio keeps its error), so what had
	// left by now is all of this stream that ever will.
	left := c.out.n
	c.mu.Lock()
	st.writing = false
	if err != nil && left <= first {
		// Not a byte of the stream left: it was never sent, exactly as
		// if the checks above had seen the connection end. A wire
		// referee sees no stream; the caller tries another connection.
		if !st.orphaned {
			delete(c.streams, st.id)
		}
		// The reader may have ended it meanwhile (a GOAWAY with a lower
		// last stream, seen while it was being written): that verdict is
		// about a stream the server never saw, and a value left on done
		// would meet the worker's next stream, whose own end could then
		// never be delivered (the reader, blocked on the full channel
		// under mu, stopped every worker: seen while streams were flushed
		// together, which made the window wide; see
		// TestH2EndedByTheReaderWhileUnsent). The reader signals only
		// under mu, and only while the stream is in the map: after this
		// nothing more comes.
		select {
		case <-st.done:
		default:
		}
		c.mu.Unlock()
		c.writeFailed(err)
		return false, errNotAccepting
	}
	if st.orphaned {
		// The connection ended while the stream was being written (the
		// reader saw the server close it), after some of it left.
		c.lost(st)
		st.done <- struct{}{}
	}
	c.mu.Unlock()
	if err != nil {
		c.writeFailed(err)
	}
	return true, err
}

// peerReset: a write failed because the server reset the connection.
func peerReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// writeFailed stops the connection after a write of it failed with err.
// When the server reset it (ECONNRESET, or EPIPE once the reset was
// reported), what the server sent before the reset is still in the
// socket's receive queue (Linux keeps it, and reads return it before the
// error): the reader reads it to the end, so that a stream the server
// answered is counted answered, not cut, whether the reader or a write
// met the reset first (CI of 4af5940 counted two grpc-go answers, there on
// the capture, closed_no_goaway that way). The reader then ends the
// connection with err. Any other write error (a deadline: the server
// stopped reading) ends it now.
func (c *h2conn) writeFailed(err error) {
	if !peerReset(err) {
		c.end(err)
		return
	}
	c.mu.Lock()
	first := c.ended == nil && c.writeErr == nil
	if first {
		c.writeErr = err
	}
	drained := first && len(c.streams) == 0
	c.mu.Unlock()
	switch {
	case drained:
		c.end(err)
	case first:
		// The queue ends at once, after a reset; the bound is for a
		// reader kept from it (then the streams left end with err).
		_ = c.rw.SetReadDeadline(time.Now().Add(h2ControlWriteTimeout))
	}
}

// testHookOpening, when set by a test, runs in open between taking the
// stream and writing it.
var testHookOpening func(*h2conn)

// countingWriter counts the bytes its writer took; used under wmu only.
type countingWriter struct {
	w io.Writer
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}

// forget takes st back from the connection if the reader has not ended it
// (a timeout, the run's stop) and says whether it did; if not, the reader
// has ended it or is about to, and done will receive.
func (c *h2conn) forget(st *h2stream) bool {
	c.mu.Lock()
	_, ok := c.streams[st.id]
	if ok {
		delete(c.streams, st.id)
	}
	c.mu.Unlock()
	if ok {
		c.wmu.Lock()
		_ = c.rw.SetWriteDeadline(time.Now().Add(h2ControlWriteTimeout))
		_ = c.fr.WriteRSTStream(st.id, http2.ErrCodeCancel)
		_ = c.bw.Flush()
		c.wmu.Unlock()
		c.closeIfDrained()
	}
	return ok
}

// usable: new streams may go on the connection.
func (c *h2conn) usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended == nil && c.writeErr == nil && c.goAway.kind == GoAwayNone
}

// close ends the connection from the prober's side; the streams it cuts
// have no outcome (canceled).
func (c *h2conn) close() {
	c.end(errClosedByUs)
	<-c.readerDone
}

// closeIfDrained closes a connection that takes no new streams and has
// none left: the server asked for it (GOAWAY) and it has served its last,
// or a write met its reset and the reader has ended every stream.
func (c *h2conn) closeIfDrained() {
	c.mu.Lock()
	drained := c.ended == nil && (c.goAway.kind != GoAwayNone || c.writeErr != nil) && len(c.streams) == 0
	c.mu.Unlock()
	if drained {
		c.end(errClosedByUs)
	}
}

// end stops the connection with err (the first error wins; after a write
// met the server's reset, that write's error, unless the prober closes
// it) and ends every stream still on it.
func (c *h2conn) end(err error) {
	c.mu.Lock()
	if c.writeErr != nil && !errors.Is(err, errClosedByUs) {
		err = c.writeErr
	}
	first := c.ended == nil
	if first {
		c.ended = err
		for id, st := range c.streams {
			delete(c.streams, id)
			if st.writing {
				st.orphaned = true // open ends it (see open)
				continue
			}
			c.lost(st)
			st.done <- struct{}{}
		}
	}
	responses := c.responses
	c.mu.Unlock()
	_ = c.raw.Close()
	if first {
		c.log.Note(c.addr, c.dialed, c.born, responses)
	}
}

// lost fills st's outcome for a connection that ended under it (mu held).
func (c *h2conn) lost(st *h2stream) { st.lostWith(c.ended, c.goAway) }

// lostWith fills st's outcome for a connection that ended with err under
// it, after what its GOAWAYs said (both engines).
func (st *h2stream) lostWith(ended error, goAway h2GoAway) {
	st.goAway = goAway.kind
	switch {
	case errors.Is(ended, errClosedByUs):
		st.canceled, st.err = true, ended
	case goAway.kind != GoAwayNone:
		// The server said it had this stream (its ID is at most the
		// GOAWAY's last), then the connection closed before the answer:
		// the request may or may not have been processed.
		st.class, st.code = GoAwayCut, goAway.code.String()
		st.err = fmt.Errorf("connection closed after %s before the stream's response: %w", goAway, ended)
	case errors.Is(ended, io.EOF), errors.Is(ended, io.ErrUnexpectedEOF):
		st.class = ClosedNoGoAway
		st.err = fmt.Errorf("connection closed without GOAWAY before the stream's response: %w", io.ErrUnexpectedEOF)
	default:
		st.class = classify(ended, PhaseReadHeaders, true)
		st.err = ended
	}
}

// refusal fills st's outcome for a stream the connection would not take
// before its first: the server's GOAWAY said no stream of it would be
// processed, or the connection ended as lost says.
func (c *h2conn) refusal(st *h2stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.connReqs = 0
	if c.goAway.kind != GoAwayNone {
		st.goAway, st.class, st.code = c.goAway.kind, GoAwayUnprocessed, c.goAway.code.String()
		st.err = fmt.Errorf("new connections stopped taking streams before their first: %s", c.goAway)
		return
	}
	c.lost(st)
}

func (g h2GoAway) String() string {
	s := "GOAWAY (last stream " + strconv.FormatUint(uint64(g.last), 10) + ", " + g.code.String()
	if g.debug != "" {
		s += ", " + strconv.Quote(g.debug)
	}
	return s + ")"
}

// read is the connection's reader goroutine: it reads every frame until
// the connection fails, answering the server's SETTINGS and PINGs and
// ending streams as their responses, resets and GOAWAYs arrive.
func (c *h2conn) read() {
	defer close(c.readerDone)
	for {
		f, err := c.fr.ReadFrame()
		var headers *h2Headers
		if hf, ok := f.(*http2.HeadersFrame); ok && err == nil {
			headers, err = c.headers.read(c.fr, hf)
		}
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// One stream's frame was malformed (its headers too big,
				// say): that stream fails, the connection goes on.
				c.endStream(se.StreamID, func(st *h2stream) {
					st.class, st.code, st.err = RSTStream, se.Code.String(), err
				})
				c.write(func() error { return c.fr.WriteRSTStream(se.StreamID, se.Code) })
				continue
			}
			c.end(err)
			return
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			c.onHeaders(headers)
		case *http2.DataFrame:
			c.onData(f)
		case *http2.RSTStreamFrame:
			c.endStream(f.StreamID, func(st *h2stream) { st.resetBy(f.ErrCode) })
		case *http2.GoAwayFrame:
			c.onGoAway(f)
		case *http2.WindowUpdateFrame:
			c.onWindowUpdate(f.StreamID, f.Increment)
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
				c.mu.Lock()
				c.maxStreams = v
				c.mu.Unlock()
			}
			c.write(func() error {
				// Under wmu, where open encodes and sends: no block is
				// half written with the old table, no body sent past the
				// old window.
				if v, ok := f.Value(http2.SettingHeaderTableSize); ok {
					c.henc.peerTableSize(v)
				}
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					c.mu.Lock()
					err := c.flow.settings(v, func(each func(*h2stream)) {
						for _, st := range c.streams {
							each(st)
						}
					})
					c.mu.Unlock()
					if err != nil {
						return err
					}
				}
				if err := c.fr.WriteSettingsAck(); err != nil {
					return err
				}
				return c.sendWaiting()
			})
			if !c.gotSettings {
				c.gotSettings = true
				close(c.settings)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				c.write(func() error { return c.fr.WritePing(true, data) })
			}
		}
	}
}

// write sends a frame of the reader's own (a settings or ping ack, a
// window update) under wmu. A failed write stops the connection (see
// writeFailed).
func (c *h2conn) write(frame func() error) {
	c.wmu.Lock()
	_ = c.rw.SetWriteDeadline(time.Now().Add(h2ControlWriteTimeout))
	err := frame()
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		c.writeFailed(err)
	}
}

// endStream ends stream id with what fill sets, if it is still open. A
// response that ends the stream before all of its body left closes the
// prober's side with RST_STREAM CANCEL (RFC 9113 §8.1): the rest is not
// sent.
func (c *h2conn) endStream(id uint32, fill func(*h2stream)) {
	c.mu.Lock()
	st, ok := c.streams[id]
	cancel := false
	if ok {
		delete(c.streams, id)
		fill(st)
		if st.headers && st.err == nil {
			c.responses++
		}
		cancel = len(st.bodyLeft) > 0 && st.class == OK
		st.done <- struct{}{}
	}
	c.mu.Unlock()
	if cancel {
		c.write(func() error { return c.fr.WriteRSTStream(id, http2.ErrCodeCancel) })
	}
	if ok {
		c.closeIfDrained()
	}
}

// onWindowUpdate opens the connection's window (id 0) or a stream's, and
// sends what the streams' bodies may now. Without a body waiting nothing
// is written.
func (c *h2conn) onWindowUpdate(id uint32, inc uint32) {
	c.wmu.Lock()
	c.mu.Lock()
	var st *h2stream
	if id != 0 {
		if st = c.streams[id]; st == nil {
			c.mu.Unlock()
			c.wmu.Unlock()
			return // a stream already ended
		}
	}
	streamErr, err := c.flow.update(st, inc)
	waiting := len(c.flow.waiting) > 0
	c.mu.Unlock()
	if err == nil && waiting {
		_ = c.rw.SetWriteDeadline(time.Now().Add(h2ControlWriteTimeout))
		if err = c.sendWaiting(); err == nil {
			err = c.bw.Flush()
		}
	}
	c.wmu.Unlock()
	switch {
	case err != nil:
		c.writeFailed(err) // a write's, or the connection's window overflowing (ended at once)
	case streamErr:
		serr := h2FlowStreamError(id)
		c.endStream(id, func(st *h2stream) {
			st.class, st.code, st.err = RSTStream, http2.ErrCodeFlowControl.String(), serr
		})
		c.write(func() error { return c.fr.WriteRSTStream(id, http2.ErrCodeFlowControl) })
	}
}

// sendWaiting writes (wmu held, not flushed) what the windows now allow of
// the bodies waiting on them. The frames are taken under mu and written
// after it: a write that blocks holds no stream's end.
func (c *h2conn) sendWaiting() error {
	c.mu.Lock()
	c.chunks = c.chunks[:0]
	c.flow.send(c.waitingOpen,
		func(id uint32, data []byte, last bool) {
			c.chunks = append(c.chunks, h2Chunk{id, data, last})
		})
	c.mu.Unlock()
	for i, ch := range c.chunks {
		if err := c.fr.WriteData(ch.id, ch.last, ch.data); err != nil {
			return err
		}
		c.chunks[i] = h2Chunk{}
	}
	return nil
}

// waitingOpen: w's stream is still on the connection (mu held).
func (c *h2conn) waitingOpen(w h2Waiting) bool { return c.streams[w.id] == w.st }

// h2Chunk is one DATA frame of a body, taken from the windows.
type h2Chunk struct {
	id   uint32
	data []byte
	last bool
}

func (c *h2conn) onHeaders(f *h2Headers) {
	c.mu.Lock()
	st, ok := c.streams[f.streamID]
	if !ok {
		c.mu.Unlock()
		return
	}
	informational, err := st.takeHeaders(f, c.grpc)
	c.mu.Unlock()
	switch {
	case err != nil:
		c.endStream(f.streamID, func(st *h2stream) {
			st.class, st.code, st.err = RSTStream, http2.ErrCodeProtocol.String(), err
		})
		c.write(func() error { return c.fr.WriteRSTStream(f.streamID, http2.ErrCodeProtocol) })
	case !informational && f.ended:
		c.endStream(f.streamID, func(*h2stream) {})
	}
}

// takeHeaders applies a response header block of st's (both engines):
// the first carries the status and the backend header; with grpc, the one
// that ends the stream carries the call's status. informational: a 1xx
// response (100 Continue, 103 Early Hints), the real one follows. An
// error: no valid :status, the stream fails (PROTOCOL_ERROR).
func (st *h2stream) takeHeaders(f *h2Headers, grpc bool) (informational bool, err error) {
	if !st.headers {
		status, err := strconv.Atoi(f.status)
		if err != nil || status < 100 || status > 999 {
			return false, fmt.Errorf("response headers without a valid :status (%q)", f.status)
		}
		if status < 200 && !f.ended {
			return true, nil
		}
		st.status, st.headers = status, true
		if f.hasBackend {
			st.backend, st.hasBackend = f.backend, true
		}
	}
	if grpc && f.ended {
		// The trailers (or a trailers-only response): the call's status.
		if f.grpcStatus >= 0 {
			st.grpcStatus = f.grpcStatus
		}
		if f.grpcMessage != "" {
			st.grpcMessage = grpcUnescape(f.grpcMessage)
		}
	}
	return false, nil
}

// resetBy fills st's outcome for the server's RST_STREAM.
func (st *h2stream) resetBy(code http2.ErrCode) {
	st.class = RSTStream
	if code == http2.ErrCodeRefusedStream {
		st.class = RefusedStream
	}
	st.code = code.String()
	st.err = fmt.Errorf("the server reset the stream (RST_STREAM %s)", code)
}

func (c *h2conn) onData(f *http2.DataFrame) {
	c.mu.Lock()
	connUpdate, streamUpdate := windowUpdates(f, &c.connUnacked, c.streams[f.StreamID])
	c.mu.Unlock()
	if connUpdate > 0 || streamUpdate > 0 {
		c.write(func() error {
			if connUpdate > 0 {
				if err := c.fr.WriteWindowUpdate(0, connUpdate); err != nil {
					return err
				}
			}
			if streamUpdate > 0 {
				return c.fr.WriteWindowUpdate(f.StreamID, streamUpdate)
			}
			return nil
		})
	}
	if f.StreamEnded() {
		c.endStream(f.StreamID, func(*h2stream) {})
	}
}

// windowUpdates counts a DATA frame against the connection's window and
// its stream's (st: nil when the stream is no longer open) and returns
// what to give back now (0: nothing), each window in halves (both
// engines).
func windowUpdates(f *http2.DataFrame, connUnacked *uint32, st *h2stream) (conn, stream uint32) {
	n := f.Length // flow control counts padding too
	*connUnacked += n
	if *connUnacked >= h2ConnWindow/2 {
		conn, *connUnacked = *connUnacked, 0
	}
	if st != nil && !f.StreamEnded() {
		st.unacked += n
		if st.unacked >= h2StreamWindow/2 {
			stream, st.unacked = st.unacked, 0
		}
	}
	return conn, stream
}

// onGoAway: the server takes no new streams on this connection. A first
// GOAWAY naming the largest stream ID (2^31-1) is the first half of a
// graceful shutdown (grpc-go's GracefulStop; RFC 9113 §6.8): nothing is
// refused yet, and the second, after a round trip, names the real last
// stream. Any other GOAWAY is single: the streams above its last were
// never processed and end now as goaway_unprocessed; the ones at or below
// it are answered or cut when the connection closes.
func (c *h2conn) onGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	c.goAway.note(f)
	for id, st := range c.streams {
		if id <= f.LastStreamID {
			continue
		}
		delete(c.streams, id)
		st.aboveGoAway(id, c.goAway)
		st.done <- struct{}{}
	}
	c.mu.Unlock()
	c.closeIfDrained()
}

// note takes in a GOAWAY frame: the kind (graceful when the first names
// the largest stream ID), its last stream, code and debug data.
func (g *h2GoAway) note(f *http2.GoAwayFrame) {
	g.kind = goAwayKindAfter(g.kind, f.LastStreamID)
	g.last, g.code = f.LastStreamID, f.ErrCode
	g.debug = string(f.DebugData())
}

// goAwayKindAfter is how a connection's GOAWAYs came, once one naming
// last stream ID arrives after those that made kind: the first decides,
// graceful when it names the largest ID (2^31-1), else single. The raw
// client's reader and the grpc-go client's frame watch both judge by it.
func goAwayKindAfter(kind GoAwayKind, last uint32) GoAwayKind {
	switch {
	case kind != GoAwayNone:
		return kind
	case last == 1<<31-1:
		return GoAwayGraceful
	}
	return GoAwaySingle
}

// aboveGoAway fills the outcome of stream id, above the last stream of
// the GOAWAY g: never processed.
func (st *h2stream) aboveGoAway(id uint32, g h2GoAway) {
	st.class, st.code, st.goAway = GoAwayUnprocessed, g.code.String(), g.kind
	st.err = fmt.Errorf("stream %d above the server's %s: never processed", id, g)
}

// grpcUnescape decodes grpc-message's percent-encoding (the gRPC over
// HTTP/2 spec); a malformed escape is kept as it is.
func grpcUnescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
