package prober

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
)

// loopH2Refusal says why the loops cannot run cfg's multiplexed protocol
// ("" when they can), beyond what loopTarget says of the target.
func loopH2Refusal(cfg *Config) string {
	switch {
	case cfg.GRPCClient == GRPCClientGo:
		return "grpc-go as the client makes its own connections, which the goroutine engine drives"
	case cfg.Conn.FreshFraction > 0:
		return "new HTTP/2 connections per request run on the goroutine engine"
	}
	return ""
}

// h2Pool is the long-lived connections of an h2 run (Config.Connections).
// Worker i sends on connection i mod N, as h2load's clients each own one
// connection and its streams: the workers, and so the requests, spread
// evenly, and with --streams equal to the workers per connection none
// ever waits for another's stream. A worker whose connection is full
// tries the others once before it waits. A connection that takes no new
// streams (a GOAWAY came, it closed) is replaced by a new one for the
// next request that reaches its slot; its streams in flight end on the
// old one.
type h2Pool struct {
	slots []h2Slot
}

type h2Slot struct {
	mu sync.Mutex
	c  *h2conn
}

func newH2Pool(n int) *h2Pool { return &h2Pool{slots: make([]h2Slot, n)} }

// conn returns a usable connection of the pool, the worker's own or,
// after skip full ones, the next; it dials one for the slot when its own
// is gone. dialed says the request is the connection's first. While the
// slot's connection is being dialed (by another worker: a dial that gets
// no answer holds it for the connect timeout), any other usable
// connection serves, as in a client's pool; only when none does, the
// request waits for the slot, and if that wait outlasted its own connect
// timeout it fails without a dial of its own (the wire saw one attempt,
// the other request's).
func (pool *h2Pool) conn(w *worker, skip int, start time.Duration) (c *h2conn, dialed bool, phase Phase, err error) {
	n := len(pool.slots)
	s := &pool.slots[(w.id+skip)%n]
	if !s.mu.TryLock() {
		for i := 1; i < n; i++ {
			other := &pool.slots[(w.id+skip+i)%n]
			if !other.mu.TryLock() {
				continue
			}
			c := other.c
			other.mu.Unlock()
			if c != nil && c.usable() {
				return c, false, PhaseNone, nil
			}
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if s.c != nil && s.c.usable() {
		return s.c, false, PhaseNone, nil
	}
	cfg := &w.p.cfg
	if !time.Now().Before(w.p.start.Add(start + min(cfg.ConnectTimeout, cfg.Timeout))) {
		return nil, false, PhaseDial, errWaitedOnDial
	}
	c, phase, err = w.p.dialH2(w, start)
	if err != nil {
		return nil, true, phase, err
	}
	s.c = c
	return c, true, PhaseNone, nil
}

// errStreamsCappedTimeout: the request waited for a stream past its time
// with every connection at the prober's own --streams (class local).
var errStreamsCappedTimeout = errors.New("http2: every connection at --streams for the request's time")

// errWaitedOnDial: the request waited for its connection's dial, another
// request's, past its own connect timeout. A connect timeout (its class),
// on no connection of its own (not fresh).
var errWaitedOnDial = timeoutError{"http2: waited past the connect timeout for its connection's dial (another request's)"}

// close closes every connection (the run is over: nothing is in flight).
func (pool *h2Pool) close() {
	for i := range pool.slots {
		if c := pool.slots[i].c; c != nil {
			c.close()
		}
	}
}

// dialH2 opens an HTTP/2 connection: TCP (and TLS with ALPN h2) within the
// connect timeout, then the client preface.
func (p *Prober) dialH2(w *worker, start time.Duration) (*h2conn, Phase, error) {
	cfg := &p.cfg
	connectDeadline := p.start.Add(start + min(cfg.ConnectTimeout, cfg.Timeout))
	dialStart := p.Elapsed() // later than start when it waited for the slot
	raw, rw, phase, err := p.dialer.dial(p.running, connectDeadline, w.dialed)
	if err != nil {
		return nil, phase, err
	}
	if tc, ok := rw.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol != "h2" {
		_ = raw.Close()
		return nil, PhaseTLS, errNoH2
	}
	_ = raw.SetDeadline(time.Time{}) // the handshake's; the connection outlives any request
	c, err := startH2(raw, rw, p.Elapsed(), w.dialed.addr, p.backendHeader, cfg.Protocol == GRPC, cfg.ConnLog, dialStart)
	if err != nil {
		_ = raw.Close()
		return nil, PhaseWrite, err
	}
	c.capStreams = uint32(cfg.Streams)
	if testHookDialedH2 != nil {
		testHookDialedH2(c)
	}
	return c, PhaseNone, nil
}

// testHookDialedH2, when set by a test, runs on each new connection before
// its first stream.
var testHookDialedH2 func(*h2conn)

// newH2Request is cfg's request as HTTP/2 header fields (names in lower
// case, as HTTP/2 requires); the request ID's value is added per request.
func newH2Request(cfg *Config, userAgent string) h2Request {
	u := cfg.Target
	authority := u.Host
	if h := cfg.Header.Get("Host"); h != "" {
		authority = h
	}
	method, path, body := cfg.Method, u.RequestURI(), cfg.Body
	if cfg.Protocol == GRPC {
		// A unary call: POST to /package.Service/Method, one message with
		// its 5-byte prefix (not compressed, its length).
		method, path = "POST", "/"+cfg.GRPCMethod
		body = make([]byte, grpcPrefix, grpcPrefix+len(cfg.Body))
		binary.BigEndian.PutUint32(body[1:], uint32(len(cfg.Body)))
		body = append(body, cfg.Body...)
	}
	fields := []hpack.HeaderField{
		{Name: ":method", Value: method},
		{Name: ":scheme", Value: u.Scheme},
		{Name: ":authority", Value: authority},
		{Name: ":path", Value: path},
	}
	if cfg.Protocol == GRPC {
		fields = append(fields, hpack.HeaderField{Name: "content-type", Value: "application/grpc"},
			hpack.HeaderField{Name: "te", Value: "trailers"})
	}
	if cfg.Header.Get("User-Agent") == "" {
		fields = append(fields, hpack.HeaderField{Name: "user-agent", Value: userAgent})
	}
	for name, values := range cfg.Header {
		if strings.EqualFold(name, "Host") || strings.EqualFold(name, cfg.RequestIDHeader) ||
			(cfg.Protocol == GRPC && (strings.EqualFold(name, "Content-Type") || strings.EqualFold(name, "TE"))) {
			continue
		}
		for _, v := range values {
			fields = append(fields, hpack.HeaderField{Name: strings.ToLower(name), Value: v})
		}
	}
	if u.User != nil && cfg.Header.Get("Authorization") == "" {
		pass, _ := u.User.Password()
		fields = append(fields, hpack.HeaderField{Name: "authorization", Sensitive: true,
			Value: "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass))})
	}
	if cfg.Protocol != GRPC && (len(body) > 0 || method == "POST" || method == "PUT" || method == "PATCH") {
		fields = append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	}
	return h2Request{fields: fields, idName: strings.ToLower(cfg.RequestIDHeader), body: body}
}

// doH2 performs one attempt over HTTP/2 and fills res. It never retries: a
// stream that was sent ends in exactly one outcome, and so does one whose
// own write failed (phase write). Only when the connection was known to
// take no stream before the stream's bytes were written (it ended or got
// a GOAWAY between choosing it and writing, or sits at the server's stream
// limit or the prober's --streams) does the request go to another
// connection, within its own time; after
// h2RefusedDials new connections that each refused it, it fails.
func (w *worker) doH2(res *Result) {
	p := w.p
	cfg := &p.cfg
	fresh := cfg.Conn.FreshFraction >= 1 || (cfg.Conn.FreshFraction > 0 && w.rng.Float64() < cfg.Conn.FreshFraction)
	res.Start = p.Elapsed()
	deadline := p.start.Add(res.Start + cfg.Timeout)
	if w.h2st == nil {
		w.h2st, w.h2req = newH2Stream(), p.h2req
		w.timer = time.NewTimer(time.Hour)
		w.timer.Stop()
	}
	st, req := w.h2st, &w.h2req
	req.idValue = strconv.AppendUint(append(req.idValue[:0], p.template.idPrefix...), res.Seq, 10)

	var (
		c       *h2conn
		openErr error
		full    int // connections found full since the last wait
		refused int // new connections that took no stream
	)
	for {
		if err := p.running.Err(); err != nil {
			// Canceled (Ctrl-C) while it waited for a stream: nothing more
			// goes on the wire. Without this check the workers waiting at
			// --streams each sent a stream as a canceled one freed its
			// place, itself canceled at once: 140 streams after the cancel
			// in TestH2CancelCutsEveryStream.
			w.failH2(res, PhaseWrite, err)
			return
		}
		var (
			dialed bool
			phase  Phase
			err    error
		)
		if fresh {
			c, phase, err = p.dialH2(w, res.Start)
			dialed = true
		} else {
			c, dialed, phase, err = p.h2pool.conn(w, full, res.Start)
		}
		if dialed {
			res.Fresh = true
			res.SlowConnect = p.Elapsed()-res.Start >= SlowConnectAfter
		}
		if err != nil {
			w.failH2(res, phase, err)
			return
		}
		if dialed {
			res.Connect = p.Elapsed() - res.Start
		}
		if len(req.body) > 0 {
			if err := w.awaitSettings(c, deadline); err != nil {
				if fresh {
					c.close()
				}
				w.failH2(res, PhaseWrite, err)
				return
			}
		}
		st.reset()
		sent, err := c.open(st, req, deadline)
		if sent {
			openErr = err
			break
		}
		if fresh {
			c.close()
		}
		if dialed && errors.Is(err, errNotAccepting) {
			if refused++; refused == h2RefusedDials {
				c.refusal(st) // st never went on c: nothing to wait for
				openErr = err
				break
			}
		}
		if p.running.Err() != nil || !time.Now().Before(deadline) {
			switch {
			case errors.Is(err, errStreamsFull):
				err = timeoutError{"http2: every connection at the server's stream limit for the request's time"}
			case errors.Is(err, errStreamsCapped):
				// The prober's own cap held it, not the target: local, as
				// running out of workers or ports is.
				w.failH2(res, PhaseWrite, errStreamsCappedTimeout)
				if !res.Canceled {
					res.Class = Local
				}
				return
			}
			w.failH2(res, PhaseWrite, err)
			return
		}
		if errors.Is(err, errStreamsFull) || errors.Is(err, errStreamsCapped) {
			// Try each of the pool's connections once before waiting: one
			// of them may have a stream free.
			if full++; fresh || full >= len(p.h2pool.slots) {
				time.Sleep(time.Millisecond) // the connections' streams end within the request timeout
				full = 0
			}
		}
	}
	res.ConnReqs = st.connReqs
	res.ConnAge = max(0, res.Start-c.born)

	if refused < h2RefusedDials {
		w.await(st, c, deadline)
	}
	if fresh {
		c.close()
	}
	res.End = p.Elapsed()
	// A body some of which never left (its window stayed shut) failed
	// in its write, as one whose write failed.
	h2Outcome(res, st, cfg, c.grpc, c.addr, openErr != nil || len(st.bodyLeft) > 0, &w.backend)
}

// h2Outcome fills res from how stream st ended on its connection (at
// addr), for both engines. writeFailed: the stream's own write failed
// (phase write). backend holds the last backend value, kept while it
// repeats so that a run of equal values shares one string.
func h2Outcome(res *Result, st *h2stream, cfg *Config, grpc bool, addr ConnAddr, writeFailed bool, backend *string) {
	if st.hasBackend {
		if st.backend != *backend {
			*backend = st.backend
		}
		res.Backend = *backend
	}
	switch {
	case st.canceled:
		res.Canceled, res.Err = true, st.err
		res.Phase = PhaseReadHeaders
	case st.class == OK && st.err == nil:
		res.Status = st.status
		var b []byte
		if st.hasBackend {
			b = []byte{}
		}
		res.Class = statusClass(cfg, st.status, b)
		if res.Class != OK {
			res.Addr = &addr // a failed status is found in logs by its connection too
		}
		if grpc && res.Class == OK && st.grpcStatus != 0 {
			// The HTTP exchange succeeded; the call did not.
			res.Class, res.GRPCStatus = GRPCStatus, GRPCCodeName(st.grpcStatus)
			switch {
			case st.grpcStatus < 0:
				res.GRPCStatus, res.Err = GRPCCodeName(grpcInternal), errors.New("the response ended without a grpc-status")
			case st.grpcMessage != "":
				res.Err = errors.New(oneLine(st.grpcMessage))
			default:
				res.Err = errors.New("grpc-status " + strconv.Itoa(st.grpcStatus))
			}
			res.Phase = PhaseReadBody
			res.Addr = &addr
		}
		return
	default:
		res.Class, res.Err, res.H2Code, res.GoAway = st.class, st.err, st.code, st.goAway
		if st.headers {
			res.Status = st.status
		}
	}
	switch {
	case writeFailed:
		res.Phase = PhaseWrite
	case st.headers:
		res.Phase = PhaseReadBody
	default:
		res.Phase = PhaseReadHeaders
	}
	res.Addr = &addr
}

// await waits for st's outcome on c until deadline or the run's stop; a
// stream that outlives them is taken back and reset (timeout, canceled).
func (w *worker) await(st *h2stream, c *h2conn, deadline time.Time) {
	w.timer.Reset(time.Until(deadline))
	select {
	case <-st.done:
	case <-w.timer.C:
		if c.forget(st) {
			st.class, st.err = Timeout, timeoutError{"http2: no complete response within the request timeout"}
			if len(st.bodyLeft) > 0 {
				st.err = errBodyWindowTimeout
			}
		} else {
			<-st.done
		}
	case <-w.p.running.Done():
		if c.forget(st) {
			st.canceled, st.err = true, w.p.running.Err()
		} else {
			<-st.done
		}
	}
	w.timer.Stop()
}

// awaitSettings waits, for a stream with a body, until c's server has
// sent its SETTINGS (see errNoSettingsInTime) or c has ended (open then says
// it takes no stream): errNoSettingsInTime at the request's deadline, the
// run's error when it stops.
func (w *worker) awaitSettings(c *h2conn, deadline time.Time) error {
	select {
	case <-c.settings:
		return nil
	default:
	}
	w.timer.Reset(time.Until(deadline))
	defer w.timer.Stop()
	select {
	case <-c.settings:
	case <-c.readerDone:
	case <-w.timer.C:
		return errNoSettingsInTime
	case <-w.p.running.Done():
		return w.p.running.Err()
	}
	return nil
}

// failH2 records an attempt that never got a stream: the dial or the
// handshake failed, or no connection could take it.
func (w *worker) failH2(res *Result, phase Phase, err error) {
	res.End = w.p.Elapsed()
	res.Phase, res.Err = phase, err
	if res.Fresh {
		addr := w.dialed.addr
		res.Addr = &addr
		if phase == PhaseDial {
			res.DialICMP = w.dialed.icmp
		}
	}
	if w.p.running.Err() != nil {
		res.Canceled = true
		return
	}
	res.Class = classify(err, phase, false)
	if res.Class == TLS {
		res.TLSCause = tlsCause(err)
	}
}

// timeoutError is a timeout of the prober's own measuring (net.Error with
// Timeout true, so classify calls it timeout).
type timeoutError struct{ msg string }

func (e timeoutError) Error() string   { return e.msg }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

// h2RefusedDials is how many new connections one request may open that
// each stop taking streams (GOAWAY, close) before its first: then the
// request fails with what the last one said. A connection refused this way
// is usually a pod shutting down that still accepts, and the next dial may
// reach another; a server that refuses every connection must not be met
// with a dial storm for the request's whole time.
const h2RefusedDials = 3
