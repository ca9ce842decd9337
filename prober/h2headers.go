package prober

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/net/http2"

	"github.com/rollprobe/rollprobe/internal/hpackdec"
)

// h2Headers is what a stream's outcome needs of one response header block
// (both engines): valid only until the connection's next block is read.
type h2Headers struct {
	streamID uint32
	ended    bool // END_STREAM: no DATA follows
	// status is the :status field's value ("" without one).
	status string
	// backend is the first value of the run's backend header.
	backend    string
	hasBackend bool
	// grpcStatus is the last grpc-status that is a number of 0 or more
	// (-1: none); grpcMessage the last grpc-message, still escaped.
	grpcStatus  int
	grpcMessage string
}

// h2HeaderReader reads a connection's response header blocks. It keeps
// exactly the contract of x/net's Framer with ReadMetaHeaders (v0.60.0's
// readMetaFrame; TestHeaderReaderAgreesWithXNet holds it to it on random
// frames): the same limits, the same connection and stream errors, the same
// fields seen. What differs is the cost: x/net builds a string for every
// field and a MetaHeadersFrame per block, and its HPACK table keeps an
// encoder's maps; this keeps only the fields a stream's outcome reads, and
// allocates nothing for a response like the last one (hpackdec).
type h2HeaderReader struct {
	dec           *hpackdec.Decoder
	backendHeader []byte
	maxList       uint32

	// The block being read.
	h                             h2Headers
	headersRemain, trailersRemain uint32
	sawRegular                    bool
	invalid                       error // a field x/net refuses: the stream fails
	// checkPseudos' verdict, as x/net's MetaHeadersFrame.checkPseudos
	// gives it on the fields kept: the first pseudo-header it refuses.
	pseudoErr  error
	pseudoSeen uint8 // a bit per name in h2PseudoNames

	lastBackend string // the last backend value: most responses repeat it
}

// h2PseudoNames are the pseudo-headers x/net knows: a request's, then a
// response's (the last).
var h2PseudoNames = [...]string{":method", ":path", ":scheme", ":authority", ":protocol", ":status"}

const h2StatusSeen = 1 << (len(h2PseudoNames) - 1) // pseudoSeen's bit for :status

func newH2HeaderReader(backendHeader string, maxList uint32) *h2HeaderReader {
	r := &h2HeaderReader{backendHeader: []byte(backendHeader), maxList: maxList}
	r.dec = hpackdec.NewDecoder(4096, r.field)
	r.dec.SetMaxStringLength(int(maxList))
	return r
}

// read reads the header block f begins, and the CONTINUATION frames that
// end it from fr (the framer must not have ReadMetaHeaders set). A
// http2.StreamError fails only f's stream; any other error is the
// connection's.
func (r *h2HeaderReader) read(fr *http2.Framer, f *http2.HeadersFrame) (*h2Headers, error) {
	r.h = h2Headers{streamID: f.StreamID, ended: f.StreamEnded(), grpcStatus: -1}
	r.headersRemain, r.trailersRemain = r.maxList, r.maxList
	r.sawRegular, r.invalid, r.pseudoErr = false, nil, nil
	r.pseudoSeen = 0
	r.dec.SetEmitEnabled(true)
	frag := f.HeaderBlockFragment()
	endHeaders := f.HeadersEnded()
	for {
		// x/net's bounds: a fragment more than twice what is left of the
		// list, or any after a refused field, ends the connection.
		if int64(len(frag)) > 2*(int64(r.headersRemain)+int64(r.trailersRemain)) || r.invalid != nil {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if err := r.dec.Write(frag); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if endHeaders {
			break
		}
		next, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		c := next.(*http2.ContinuationFrame) // the framer checks the order
		frag, endHeaders = c.HeaderBlockFragment(), c.HeadersEnded()
	}
	if err := r.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if r.invalid != nil {
		return nil, http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol, Cause: r.invalid}
	}
	if r.pseudoErr == nil && r.pseudoSeen&h2StatusSeen != 0 && r.pseudoSeen&^h2StatusSeen != 0 {
		r.pseudoErr = errors.New("mix of request and response pseudo headers")
	}
	if r.pseudoErr != nil {
		return nil, http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol, Cause: r.pseudoErr}
	}
	return &r.h, nil
}

// field is the decoder's emit: x/net's checks of a field, in its order,
// then what the stream needs of it.
func (r *h2HeaderReader) field(name, value []byte, _ bool) {
	if !validFieldValue(value) {
		r.invalid = fmt.Errorf("invalid header field value for %q", name)
	}
	pseudo := len(name) > 0 && name[0] == ':'
	if pseudo {
		if r.sawRegular {
			r.invalid = errors.New("pseudo header field after regular")
		}
	} else {
		r.sawRegular = true
		if !validWireFieldName(name) {
			r.invalid = fmt.Errorf("invalid header field name %q", name)
		}
	}
	if r.invalid != nil {
		r.dec.SetEmitEnabled(false)
		return
	}
	remain := &r.headersRemain
	size := uint32(len(name) + len(value) + 32)
	if string(name) == "trailer" {
		remain = &r.trailersRemain
		fields := bytes.Count(value, []byte(",")) + 1
		size = uint32(len(value)-fields+1) + uint32(fields)*32
	}
	if size > *remain {
		// Past SETTINGS_MAX_HEADER_LIST_SIZE: the rest is not read (the
		// block still is, for the table), as with x/net.
		r.dec.SetEmitEnabled(false)
		r.headersRemain, r.trailersRemain = 0, 0
		return
	}
	*remain -= size
	if pseudo {
		r.pseudo(name, value)
		return
	}
	switch {
	case !r.h.hasBackend && len(r.backendHeader) > 0 && bytes.Equal(name, r.backendHeader):
		if string(value) != r.lastBackend {
			r.lastBackend = string(value)
		}
		r.h.backend, r.h.hasBackend = r.lastBackend, true
	case string(name) == "grpc-status":
		if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 {
			r.h.grpcStatus = n
		}
	case string(name) == "grpc-message":
		r.h.grpcMessage = string(value)
	}
}

// pseudo takes a pseudo-header field: checkPseudos' verdict so far, and
// the first :status.
func (r *h2HeaderReader) pseudo(name, value []byte) {
	if r.pseudoErr != nil {
		return
	}
	i := 0
	for i < len(h2PseudoNames) && h2PseudoNames[i] != string(name) {
		i++
	}
	switch {
	case i == len(h2PseudoNames):
		r.pseudoErr = fmt.Errorf("invalid pseudo-header %q", name)
		return
	case r.pseudoSeen&(1<<i) != 0:
		r.pseudoErr = fmt.Errorf("duplicate pseudo-header %q", name)
		return
	}
	r.pseudoSeen |= 1 << i
	if 1<<i == h2StatusSeen {
		r.h.status = statusText(value)
	}
}

// statusText is value as a string, without allocating for common ones.
func statusText(value []byte) string {
	switch string(value) {
	case "200":
		return "200"
	case "204":
		return "204"
	case "404":
		return "404"
	case "500":
		return "500"
	case "502":
		return "502"
	case "503":
		return "503"
	case "504":
		return "504"
	}
	return string(value)
}

// validFieldValue is httpguts.ValidHeaderFieldValue on bytes: no control
// character but tab and space.
func validFieldValue(v []byte) bool {
	for _, b := range v {
		if (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// validWireFieldName is x/net's validWireHeaderFieldName on bytes: a
// token, in lower case.
func validWireFieldName(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, b := range v {
		if int(b) >= len(isTokenByte) || !isTokenByte[b] || ('A' <= b && b <= 'Z') {
			return false
		}
	}
	return true
}

// isTokenByte: RFC 9110's tchar.
var isTokenByte = func() (t [127]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
