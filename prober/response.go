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

// maxHeaderLine bounds one status or header line. Responses with longer lines
// are treated as broken framing rather than buffered without limit.
const maxHeaderLine = 16 << 10

// response is what the prober keeps of an HTTP/1.1 response: enough to judge
// the status, frame the body, and decide whether the connection can be reused.
type response struct {
	status int
	// close: the server will close the connection after this response
	// (Connection: close, HTTP/1.0 without keep-alive, or a close-delimited body).
	close bool
	// backend is the value of the configured backend header, valid only until
	// the next read from the reader; callers copy or intern it.
	backend []byte
	// headers: the header section was read to its end (a failure after it
	// is in the body).
	headers bool
}

// readResponse reads one complete response (headers and body) from br.
// backendHeader, when non-empty, must be lower case; isHead says the request
// was HEAD (no body follows whatever the headers say).
//
// Error contract: errNoResponse when the stream ended before any byte;
// errTruncated (wrapped) when it ended mid-response or the framing is broken;
// any other error is the underlying reader's (ECONNRESET, a deadline...).
// got reports whether at least one response byte arrived.
//
// The backend value is copied into scratch (grown as needed) so that reading
// the body cannot overwrite it; resp.backend aliases scratch.
func readResponse(br *bufio.Reader, isHead bool, backendHeader string, scratch []byte) (resp response, got bool, err error) {
	for {
		line, err := readLine(br)
		if err != nil {
			if len(line) == 0 && errors.Is(err, io.EOF) && !got {
				return resp, false, errNoResponse
			}
			return resp, got || len(line) > 0, framingErr("status line", err)
		}
		got = true
		status, minor, err := parseStatusLine(line)
		if err != nil {
			return resp, true, err
		}
		resp = response{status: status, close: minor == 0}
		var (
			contentLength int64 = -1
			chunked       bool
			keepAlive10   bool
		)
		for {
			line, err := readLine(br)
			if err != nil {
				return resp, true, framingErr("headers", err)
			}
			if len(line) == 0 {
				break
			}
			colon := bytes.IndexByte(line, ':')
			if colon <= 0 {
				return resp, true, fmt.Errorf("%w: malformed header line %q", errTruncated, truncateForError(line))
			}
			name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
			switch {
			case equalFoldASCII(name, "content-length"):
				n, ok := parseContentLength(value)
				if !ok || (contentLength >= 0 && contentLength != n) {
					return resp, true, fmt.Errorf("%w: bad Content-Length %q", errTruncated, truncateForError(value))
				}
				contentLength = n
			case equalFoldASCII(name, "transfer-encoding"):
				// Only chunked is meaningful to a client; any other coding
				// (not sent by servers in practice) is framed by close.
				chunked = hasToken(value, "chunked")
			case equalFoldASCII(name, "connection"):
				if hasToken(value, "close") {
					resp.close = true
				}
				if hasToken(value, "keep-alive") {
					keepAlive10 = true
				}
			case backendHeader != "" && equalFoldASCII(name, backendHeader):
				resp.backend = value
			}
		}
		resp.headers = true
		if minor == 0 && keepAlive10 {
			resp.close = false
		}
		if status >= 100 && status < 200 && status != 101 {
			// Interim response (100 Continue, 103 Early Hints): the final
			// one follows on the same stream.
			continue
		}
		if resp.backend != nil {
			// Body reads below may overwrite the buffer the value points into.
			resp.backend = append(scratch[:0], resp.backend...)
		}
		switch {
		case isHead || status == 204 || status == 304 || (status >= 100 && status < 200):
		case chunked:
			err = discardChunked(br)
		case contentLength >= 0:
			err = discardN(br, contentLength)
		default:
			// Close-delimited body: read to EOF; the connection is done.
			resp.close = true
			_, err = br.WriteTo(io.Discard)
		}
		return resp, true, err
	}
}

// readLine returns one line without its CRLF (or bare LF). The slice points
// into br's buffer and is valid until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull || (err == nil && len(line) > maxHeaderLine) {
		return line, fmt.Errorf("%w: line longer than %d bytes", errTruncated, br.Size())
	}
	if err != nil {
		return line, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if bytes.IndexByte(line, '\r') >= 0 {
		// A bare CR is invalid in HTTP/1.1 (RFC 9112 §2.2); accepting it
		// would let one header smuggle a line into another value.
		return line, fmt.Errorf("%w: bare CR in %q", errTruncated, truncateForError(line))
	}
	return line, nil
}

// framingErr turns a clean EOF in the middle of a response into errTruncated
// and passes connection errors through.
func framingErr(where string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: connection closed in the %s", errTruncated, where)
	}
	return err
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

func discardN(br *bufio.Reader, n int64) error {
	for n > 0 {
		chunk := n
		if chunk > 1<<30 {
			chunk = 1 << 30
		}
		m, err := br.Discard(int(chunk))
		n -= int64(m)
		if err != nil {
			return framingErr("body", err)
		}
	}
	return nil
}

// maxChunkSize bounds a single chunk; larger sizes are treated as garbage.
const maxChunkSize = 1 << 40

func discardChunked(br *bufio.Reader) error {
	for {
		line, err := readLine(br)
		if err != nil {
			return framingErr("body", err)
		}
		if semi := bytes.IndexByte(line, ';'); semi >= 0 {
			line = line[:semi]
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || len(line) > 10 {
			return fmt.Errorf("%w: bad chunk size %q", errTruncated, truncateForError(line))
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
				return fmt.Errorf("%w: bad chunk size %q", errTruncated, truncateForError(line))
			}
			size = size<<4 | int64(d)
		}
		if size > maxChunkSize {
			return fmt.Errorf("%w: chunk size %d too large", errTruncated, size)
		}
		if size == 0 {
			// Trailer section, ended by an empty line.
			for {
				line, err := readLine(br)
				if err != nil {
					return framingErr("body", err)
				}
				if len(line) == 0 {
					return nil
				}
			}
		}
		if err := discardN(br, size); err != nil {
			return err
		}
		line, err = readLine(br)
		if err != nil {
			return framingErr("body", err)
		}
		if len(line) != 0 {
			return fmt.Errorf("%w: missing CRLF after chunk", errTruncated)
		}
	}
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
