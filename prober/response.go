package prober

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Errors the response reader returns besides the connection's own. They carry
// the framing fact the classifier needs; the connection's errors (reset,
// timeout) pass through unwrapped so errors.Is keeps working on them.
var (
	// errNoResponse: the connection closed cleanly before a single response byte.
	errNoResponse = errors.New("connection closed before any response byte")
	// errTruncated: the response ended early or its framing is broken.
	errTruncated = errors.New("response truncated")
)

// maxHeaderLine bounds one status, header or chunk-size line, its line end
// excluded. Responses with longer lines are treated as broken framing rather
// than buffered without limit.
const maxHeaderLine = 16 << 10

// response is what the prober keeps of an HTTP/1.1 response: enough to judge
// the status, frame the body, and decide whether the connection can be reused.
type response struct {
	status int
	// close: the server will close the connection after this response
	// (Connection: close, HTTP/1.0 without keep-alive, or a close-delimited body).
	close bool
	// backend is the value of the configured backend header, a copy in the
	// parser's scratch buffer: valid until the parser is reset.
	backend []byte
	// headers: the header section was read to its end (a failure after it
	// is in the body).
	headers bool
}

// parseState is where a respParser is within a response.
type parseState uint8

const (
	inStatusLine parseState = iota // a status line (the first, or after an interim 1xx)
	inHeaders                      // header lines, up to the empty one
	inBody                         // the rest of a Content-Length body
	inChunkSize                    // a chunk-size line
	inChunkData                    // the rest of a chunk's data
	inChunkEnd                     // the line end after a chunk's data
	inTrailers                     // trailer lines, up to the empty one
	inUntilClose                   // a close-delimited body: everything up to EOF
	parsed                         // the response is complete
)

// respParser frames one HTTP/1.1 response from bytes as they arrive, in
// pieces of any size: the event loop feeds it what each non-blocking read
// returned, readResponse what a bufio.Reader holds. It never reads past
// the response: what follows it in a feed is left unconsumed.
//
// Contract, the same for every way of splitting the stream (checked against
// the blocking parser it replaced by FuzzParserAgreesWithTheOracle):
// feed consumes bytes and says when the response is complete; a framing
// error (wrapping errTruncated) ends the response. When the stream ends
// first, end gives the outcome: errNoResponse before any byte, a
// truncation inside the response, nil for a body delimited by the close.
// Errors of the connection itself are the caller's to return unchanged.
type respParser struct {
	isHead        bool
	backendHeader string // lower case; "" when none is wanted
	scratch       []byte // the backend value's copy, reused across responses

	state parseState
	resp  response
	got   bool   // a response byte has arrived
	line  []byte // the start of a line whose end has not arrived yet

	minor         int   // HTTP/1.minor of the current status line
	contentLength int64 // -1: none given
	chunked       bool
	keepAlive10   bool  // Connection: keep-alive, meaningful for HTTP/1.0
	remaining     int64 // body or chunk bytes still to come
}

// reset readies p for a new response, keeping its buffers. (Field by
// field: the per-response cost shows in BenchmarkReadResponse.)
func (p *respParser) reset(isHead bool, backendHeader string) {
	p.isHead, p.backendHeader = isHead, backendHeader
	p.scratch, p.line = p.scratch[:0], p.line[:0]
	p.state, p.resp, p.got = inStatusLine, response{}, false
	p.minor, p.contentLength, p.chunked, p.keepAlive10, p.remaining = 0, -1, false, false, 0
}

// feed consumes the response's bytes from data. done: the response is
// complete, and data[n:] is not part of it. A non-nil err is a framing
// error; the response is over and unusable.
func (p *respParser) feed(data []byte) (n int, done bool, err error) {
	if len(data) > 0 {
		p.got = true
	}
	for n < len(data) {
		switch p.state {
		case inBody, inChunkData:
			take := int(min(p.remaining, int64(len(data)-n)))
			n += take
			p.remaining -= int64(take)
			if p.remaining > 0 {
				return n, false, nil
			}
			if p.state == inBody {
				p.state = parsed
				return n, true, nil
			}
			p.state = inChunkEnd
			continue
		case inUntilClose:
			return len(data), false, nil
		case parsed:
			return n, true, nil
		}
		rest := data[n:]
		var line []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 && len(p.line) == 0 && i < maxHeaderLine {
			// The common case: a whole line in this feed.
			n += i + 1
			if line, err = endLine(rest[:i]); err != nil {
				return n, false, err
			}
		} else {
			used, complete := 0, false
			line, used, complete, err = p.nextLine(rest)
			n += used
			if err != nil || !complete {
				return n, false, err
			}
		}
		if err := p.onLine(line); err != nil {
			return n, false, err
		}
		if p.state == parsed {
			return n, true, nil
		}
	}
	return n, p.state == parsed, nil
}

// endLine takes the CR off a line that ended with CR LF and refuses a
// bare CR anywhere else in it.
func endLine(line []byte) ([]byte, error) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if bytes.IndexByte(line, '\r') >= 0 {
		// A bare CR is invalid in HTTP/1.1 (RFC 9112 §2.2); accepting it
		// would let one header smuggle a line into another value.
		return nil, fmt.Errorf("%w: bare CR in %q", errTruncated, truncateForError(line))
	}
	return line, nil
}

// end is the outcome when the stream ended (EOF) before feed said done.
func (p *respParser) end() error {
	switch p.state {
	case inStatusLine:
		if !p.got {
			return errNoResponse
		}
		return closedIn("status line")
	case inHeaders:
		return closedIn("headers")
	case inUntilClose, parsed:
		return nil
	}
	return closedIn("body")
}

func closedIn(where string) error {
	return fmt.Errorf("%w: connection closed in the %s", errTruncated, where)
}

// nextLine takes the next line from data, joined to the part carried from
// earlier feeds: complete is false when data ended inside it (then all of
// data was taken and carried). The line has no CR LF (or bare LF); it is
// valid until the next feed.
func (p *respParser) nextLine(data []byte) (line []byte, used int, complete bool, err error) {
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		if len(p.line)+len(data) >= maxHeaderLine {
			return nil, len(data), false, fmt.Errorf("%w: line longer than %d bytes", errTruncated, maxHeaderLine)
		}
		p.line = append(p.line, data...)
		return nil, len(data), false, nil
	}
	if len(p.line)+i >= maxHeaderLine {
		return nil, i + 1, false, fmt.Errorf("%w: line longer than %d bytes", errTruncated, maxHeaderLine)
	}
	line = data[:i]
	if len(p.line) > 0 {
		p.line = append(p.line, line...)
		line = p.line
		p.line = p.line[:0]
	}
	line, err = endLine(line)
	if err != nil {
		return nil, i + 1, false, err
	}
	return line, i + 1, true, nil
}

// onLine advances the state machine by one complete line.
func (p *respParser) onLine(line []byte) error {
	switch p.state {
	case inStatusLine:
		status, minor, err := parseStatusLine(line)
		if err != nil {
			return err
		}
		p.resp = response{status: status, close: minor == 0}
		p.minor, p.contentLength, p.chunked, p.keepAlive10 = minor, -1, false, false
		p.state = inHeaders
	case inHeaders:
		if len(line) == 0 {
			p.endOfHeaders()
			return nil
		}
		return p.header(line)
	case inChunkSize:
		size, err := parseChunkSize(line)
		if err != nil {
			return err
		}
		if size == 0 {
			p.state = inTrailers
		} else {
			p.state, p.remaining = inChunkData, size
		}
	case inChunkEnd:
		if len(line) != 0 {
			return fmt.Errorf("%w: missing CRLF after chunk", errTruncated)
		}
		p.state = inChunkSize
	case inTrailers:
		if len(line) == 0 {
			p.state = parsed
		}
	}
	return nil
}

func (p *respParser) header(line []byte) error {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return fmt.Errorf("%w: malformed header line %q", errTruncated, truncateForError(line))
	}
	name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
	switch {
	case equalFoldASCII(name, "content-length"):
		n, ok := parseContentLength(value)
		if !ok || (p.contentLength >= 0 && p.contentLength != n) {
			return fmt.Errorf("%w: bad Content-Length %q", errTruncated, truncateForError(value))
		}
		p.contentLength = n
	case equalFoldASCII(name, "transfer-encoding"):
		// Only chunked is meaningful to a client; any other coding
		// (not sent by servers in practice) is framed by close.
		p.chunked = hasToken(value, "chunked")
	case equalFoldASCII(name, "connection"):
		if hasToken(value, "close") {
			p.resp.close = true
		}
		if hasToken(value, "keep-alive") {
			p.keepAlive10 = true
		}
	case p.backendHeader != "" && equalFoldASCII(name, p.backendHeader):
		// Copied now: the line lives in the caller's buffer only until
		// the next read.
		p.scratch = append(p.scratch[:0], value...)
		p.resp.backend = p.scratch
	}
	return nil
}

// endOfHeaders decides how the body is framed.
func (p *respParser) endOfHeaders() {
	p.resp.headers = true
	if p.minor == 0 && p.keepAlive10 {
		p.resp.close = false
	}
	status := p.resp.status
	switch {
	case status >= 100 && status < 200 && status != 101:
		// Interim response (100 Continue, 103 Early Hints): the final
		// one follows on the same stream.
		p.state = inStatusLine
	case p.isHead || status == 204 || status == 304 || (status >= 100 && status < 200):
		p.state = parsed
	case p.chunked:
		p.state = inChunkSize
	case p.contentLength == 0:
		p.state = parsed
	case p.contentLength > 0:
		p.state, p.remaining = inBody, p.contentLength
	default:
		// Close-delimited body: read to EOF; the connection is done.
		p.resp.close = true
		p.state = inUntilClose
	}
}

// readResponse reads one complete response (headers and body) from br,
// through a respParser. backendHeader, when non-empty, must be lower case;
// isHead says the request was HEAD (no body follows whatever the headers
// say).
//
// Error contract: errNoResponse when the stream ended before any byte;
// errTruncated (wrapped) when it ended mid-response or the framing is broken;
// any other error is the underlying reader's (ECONNRESET, a deadline...).
// got reports whether at least one response byte arrived. Nothing after the
// response is consumed from br.
//
// The backend value is copied into scratch (grown as needed), which
// resp.backend then aliases.
func readResponse(br *bufio.Reader, isHead bool, backendHeader string, scratch []byte) (resp response, got bool, err error) {
	p := respParser{scratch: scratch}
	p.reset(isHead, backendHeader)
	for {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				if errors.Is(err, io.EOF) {
					err = p.end()
				}
				return p.resp, p.got, err
			}
		}
		data, _ := br.Peek(br.Buffered())
		n, done, err := p.feed(data)
		_, _ = br.Discard(n)
		if err != nil || done {
			return p.resp, p.got, err
		}
	}
}

func parseStatusLine(line []byte) (status, minor int, err error) {
	// "HTTP/1.x SSS[ reason]"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return 0, 0, fmt.Errorf("%w: malformed status line %q", errTruncated, truncateForError(line))
	}
	switch line[7] {
	case '0':
		minor = 0
	case '1':
		minor = 1
	default:
		return 0, 0, fmt.Errorf("%w: unsupported version in %q", errTruncated, truncateForError(line))
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, 0, fmt.Errorf("%w: malformed status code in %q", errTruncated, truncateForError(line))
		}
		status = status*10 + int(c-'0')
	}
	if status < 100 {
		return 0, 0, fmt.Errorf("%w: status code %d out of range", errTruncated, status)
	}
	return status, minor, nil
}

func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// maxChunkSize bounds a single chunk; larger sizes are treated as garbage.
const maxChunkSize = 1 << 40

// parseChunkSize reads a chunk-size line (hex, extensions after ';').
func parseChunkSize(line []byte) (int64, error) {
	if semi := bytes.IndexByte(line, ';'); semi >= 0 {
		line = line[:semi]
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 || len(line) > 10 {
		return 0, fmt.Errorf("%w: bad chunk size %q", errTruncated, truncateForError(line))
	}
	var size int64
	for _, c := range line {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, fmt.Errorf("%w: bad chunk size %q", errTruncated, truncateForError(line))
		}
		size = size<<4 | int64(d)
	}
	if size > maxChunkSize {
		return 0, fmt.Errorf("%w: chunk size %d too large", errTruncated, size)
	}
	return size, nil
}

// equalFoldASCII compares b with the lower-case ASCII string s, ignoring case.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated header value contains token
// (lower case), ignoring case and surrounding space.
func hasToken(value []byte, token string) bool {
	for len(value) > 0 {
		var part []byte
		if comma := bytes.IndexByte(value, ','); comma >= 0 {
			part, value = value[:comma], value[comma+1:]
		} else {
			part, value = value, nil
		}
		if equalFoldASCII(bytes.TrimSpace(part), token) {
			return true
		}
	}
	return false
}

func truncateForError(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
