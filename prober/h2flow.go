package prober

import (
	"errors"
	"fmt"

	"golang.org/x/net/http2"
)

// Send-side flow control (RFC 9113 §6.9), for both engines: a request's
// body goes out only as far as the server's windows allow (the
// connection's, shared by every stream, and the stream's own), and waits
// for its WINDOW_UPDATEs for the rest, within the request's time. A body
// sent past a window is the prober's protocol error, which a strict server
// answers by ending the connection (FLOW_CONTROL_ERROR): every stream on it
// would then fail, counted as the server's. The wait is the server's and
// is part of the request's latency; a window that never opens ends the
// request at its timeout, in phase write.

// h2InitialWindow is a window's size before the server's SETTINGS say
// otherwise (RFC 9113 §6.5.2); the connection's is only ever changed by
// WINDOW_UPDATE.
const h2InitialWindow = 65535

// h2MaxWindow is the largest a flow-control window may be (2^31-1).
const h2MaxWindow = 1<<31 - 1

// h2SendFlow is what one connection may still send: the connection's
// window and the server's SETTINGS_INITIAL_WINDOW_SIZE, which each new
// stream's window starts at. Streams whose body waits on a window are kept
// in arrival order and served in it as windows open. The engine's lock for
// its writes guards it (h2conn's wmu; a loop's own).
type h2SendFlow struct {
	conn    int64
	initial int64
	// waiting are the streams with a body left to send, oldest first. An
	// entry is still that stream's while the connection's map has the
	// stream under that ID (IDs are never reused on a connection), which
	// the engine checks before it touches the stream.
	waiting []h2Waiting
}

type h2Waiting struct {
	st *h2stream
	id uint32
}

func newH2SendFlow() h2SendFlow {
	return h2SendFlow{conn: h2InitialWindow, initial: h2InitialWindow}
}

var (
	// errNoSettingsInTime: the request's time ran out while every
	// connection that could take it waited for its server's SETTINGS.
	//
	// A stream with a body goes on a connection only once the server's
	// SETTINGS have come (and been acked): its initial window may be less
	// than HTTP/2's default, which the body could overrun before they
	// come, and nginx (with http2_body_preread_size under 64k) refuses
	// such a stream opened before the client acked them: REFUSED_STREAM
	// for every new connection's first streams, which a rollout's new
	// connections would count as failures. A stream without a body goes
	// at once (RFC 9113 §3.4). grpc-go's own client waits for the
	// server's SETTINGS before its first call too.
	errNoSettingsInTime = timeoutError{"http2: the server's SETTINGS did not come within the request's time (a stream with a body waits for them)"}
	errFlowOverflow     = errors.New("http2: the server's WINDOW_UPDATE took the connection's window past 2^31-1 (FLOW_CONTROL_ERROR)")
	// errBodyWindowTimeout: a stream's body waited on the server's
	// flow-control windows for the request's whole time.
	errBodyWindowTimeout = timeoutError{"http2: the request's body waited on the server's flow-control window for the request's time"}
)

// open gives st, a new stream on the connection sending body, its window
// and its body to send.
func (f *h2SendFlow) open(st *h2stream, body []byte) {
	st.sendWindow, st.bodyLeft = f.initial, body
}

// next is the next DATA frame of st's body that the windows allow (nil
// when none does now; last when it ends the body), counted against both.
func (f *h2SendFlow) next(st *h2stream) (data []byte, last bool) {
	n := min(int64(len(st.bodyLeft)), f.conn, st.sendWindow, h2MaxBody)
	if n <= 0 {
		return nil, false
	}
	data, st.bodyLeft = st.bodyLeft[:n], st.bodyLeft[n:]
	f.conn -= n
	st.sendWindow -= n
	if len(st.bodyLeft) == 0 {
		st.bodyLeft = nil
		return data, true
	}
	return data, false
}

// wait keeps st, whose body the windows hold, for when they open. open
// is send's: before the list would grow, the entries of streams that
// ended meanwhile (answered or reset before their body left), which only
// a window's opening clears otherwise, are dropped, so that a server
// that answers every stream with its window shut does not grow the list
// for the whole run.
func (f *h2SendFlow) wait(st *h2stream, open func(h2Waiting) bool) {
	if n := len(f.waiting); n > 0 && n == cap(f.waiting) {
		kept := f.waiting[:0]
		for _, w := range f.waiting {
			if open(w) {
				kept = append(kept, w)
			}
		}
		clear(f.waiting[len(kept):])
		f.waiting = kept
	}
	f.waiting = append(f.waiting, h2Waiting{st, st.id})
}

// settings applies the server's SETTINGS_INITIAL_WINDOW_SIZE v to every
// stream open on the connection (streams calls its argument with each of
// them): a window may go below zero (RFC 9113 §6.9.2). A value past 2^31-1
// is the server's connection error.
func (f *h2SendFlow) settings(v uint32, streams func(func(*h2stream))) error {
	if v > h2MaxWindow {
		return fmt.Errorf("http2: the server's SETTINGS_INITIAL_WINDOW_SIZE %d is past 2^31-1 (FLOW_CONTROL_ERROR)", v)
	}
	delta := int64(v) - f.initial
	f.initial = int64(v)
	if delta != 0 {
		streams(func(st *h2stream) { st.sendWindow += delta })
	}
	return nil
}

// update applies a WINDOW_UPDATE of the connection (st nil) or of st. A
// window taken past 2^31-1 is the server's error: the connection's
// (errFlowOverflow) or the stream's (streamErr).
func (f *h2SendFlow) update(st *h2stream, inc uint32) (streamErr bool, err error) {
	if st == nil {
		if f.conn += int64(inc); f.conn > h2MaxWindow {
			return false, errFlowOverflow
		}
		return false, nil
	}
	if st.sendWindow += int64(inc); st.sendWindow > h2MaxWindow {
		return true, nil
	}
	return false, nil
}

// send writes, in arrival order, what the windows now allow of every
// waiting stream's body (write writes one DATA frame), and keeps the ones
// still held. open says whether the entry's stream is still on the
// connection under its ID; others are dropped untouched.
func (f *h2SendFlow) send(open func(h2Waiting) bool, write func(id uint32, data []byte, last bool)) {
	kept := f.waiting[:0]
	for _, w := range f.waiting {
		if !open(w) {
			continue
		}
		for {
			data, last := f.next(w.st)
			if data == nil {
				break
			}
			write(w.id, data, last)
		}
		if len(w.st.bodyLeft) > 0 {
			kept = append(kept, w)
		}
	}
	clear(f.waiting[len(kept):])
	f.waiting = kept
}

// h2FlowStreamError is the stream error for a stream's window taken past
// 2^31-1 by the server's WINDOW_UPDATE.
func h2FlowStreamError(id uint32) error {
	return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl,
		Cause: errors.New("the server's WINDOW_UPDATE took the stream's window past 2^31-1")}
}
