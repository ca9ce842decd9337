package prober

// The parser the prober used before the incremental one (response.go),
// kept unchanged as the oracle of FuzzParserAgreesWithTheOracle: a blocking
// reader over bufio, one response per call. Every behaviour the two must
// share is decided here first.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

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
func oracleReadResponse(br *bufio.Reader, isHead bool, backendHeader string, scratch []byte) (resp response, got bool, err error) {
	for {
		line, err := oracleReadLine(br)
		if err != nil {
			if len(line) == 0 && errors.Is(err, io.EOF) && !got {
				return resp, false, errNoResponse
			}
			return resp, got || len(line) > 0, oracleFramingErr("status line", err)
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
			line, err := oracleReadLine(br)
			if err != nil {
				return resp, true, oracleFramingErr("headers", err)
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
			err = oracleDiscardChunked(br)
		case contentLength >= 0:
			err = oracleDiscardN(br, contentLength)
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
func oracleReadLine(br *bufio.Reader) ([]byte, error) {
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
func oracleFramingErr(where string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: connection closed in the %s", errTruncated, where)
	}
	return err
}

func oracleDiscardN(br *bufio.Reader, n int64) error {
	for n > 0 {
		chunk := n
		if chunk > 1<<30 {
			chunk = 1 << 30
		}
		m, err := br.Discard(int(chunk))
		n -= int64(m)
		if err != nil {
			return oracleFramingErr("body", err)
		}
	}
	return nil
}

func oracleDiscardChunked(br *bufio.Reader) error {
	for {
		line, err := oracleReadLine(br)
		if err != nil {
			return oracleFramingErr("body", err)
		}
		if semi := bytes.IndexByte(line, ';'); semi >= 0 {
			line = line[:semi]
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || len(line) > 10 {
			return fmt.Errorf("%w: bad chunk size %q", errTruncated, truncateForError(line))
		}
		// Its own reading of the hex digits, not the parser's
		// parseChunkSize: an oracle that shared it would check itself.
		// ParseUint takes no sign and no 0x (base 16 given), as RFC 9112's
		// chunk-size = 1*HEXDIG.
		u, perr := strconv.ParseUint(string(line), 16, 64)
		if perr != nil {
			return fmt.Errorf("%w: bad chunk size %q", errTruncated, truncateForError(line))
		}
		size := int64(u) // at most 10 hex digits: fits
		if size > maxChunkSize {
			return fmt.Errorf("%w: chunk size %d too large", errTruncated, size)
		}
		if size == 0 {
			// Trailer section, ended by an empty line.
			for {
				line, err := oracleReadLine(br)
				if err != nil {
					return oracleFramingErr("body", err)
				}
				if len(line) == 0 {
					return nil
				}
			}
		}
		if err := oracleDiscardN(br, size); err != nil {
			return err
		}
		line, err = oracleReadLine(br)
		if err != nil {
			return oracleFramingErr("body", err)
		}
		if len(line) != 0 {
			return fmt.Errorf("%w: missing CRLF after chunk", errTruncated)
		}
	}
}
