package prober

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func read(raw string, isHead bool) (response, bool, string, error) {
	br := bufio.NewReaderSize(strings.NewReader(raw), readBufferSize)
	resp, got, err := readResponse(br, isHead, "x-pod-name", nil)
	rest, _ := io.ReadAll(br)
	return resp, got, string(rest), err
}

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		head    bool
		status  int
		close   bool
		backend string
		err     error // nil, errNoResponse or errTruncated
		rest    string
	}{
		{name: "content-length", raw: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Pod-Name: a\r\n\r\nabcNEXT", status: 200, backend: "a", rest: "NEXT"},
		{name: "header case and spaces", raw: "HTTP/1.1 200 OK\r\ncontent-LENGTH:   2  \r\nx-POD-name:  pod-7 \r\n\r\nhi", status: 200, backend: "pod-7"},
		{name: "bare LF", raw: "HTTP/1.1 204 No Content\nX-Pod-Name: b\n\n", status: 204, backend: "b"},
		{name: "chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT", status: 200, rest: "NEXT"},
		{name: "close-delimited", raw: "HTTP/1.1 200 OK\r\n\r\nbody until EOF", status: 200, close: true},
		{name: "connection close", raw: "HTTP/1.1 503 Busy\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", status: 503, close: true},
		{name: "http/1.0 closes", raw: "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", status: 200, close: true},
		{name: "http/1.0 keep-alive", raw: "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", status: 200},
		{name: "HEAD ignores length", raw: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nNEXT", head: true, status: 200, rest: "NEXT"},
		{name: "304 has no body", raw: "HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\nNEXT", status: 304, rest: "NEXT"},
		{name: "100 continue then final", raw: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx", status: 201},
		{name: "no status code reason", raw: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", status: 200},
		{name: "empty stream", raw: "", err: errNoResponse},
		{name: "eof in status line", raw: "HTTP/1.1 20", err: errTruncated},
		{name: "eof in headers", raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", err: errTruncated},
		{name: "short body", raw: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", err: errTruncated},
		{name: "bad chunk size", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", err: errTruncated},
		{name: "missing chunk CRLF", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n", err: errTruncated},
		{name: "eof in chunked body", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe", err: errTruncated},
		{name: "not http", raw: "SSH-2.0-OpenSSH\r\n", err: errTruncated},
		{name: "http/2 preface", raw: "HTTP/2 200\r\n\r\n", err: errTruncated},
		{name: "conflicting lengths", raw: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", err: errTruncated},
		{name: "negative length", raw: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: errTruncated},
		{name: "header without colon", raw: "HTTP/1.1 200 OK\r\nbroken\r\n\r\n", err: errTruncated},
		{name: "line too long", raw: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", readBufferSize) + "\r\n\r\n", err: errTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, _, rest, err := read(tt.raw, tt.head)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if resp.status != tt.status || resp.close != tt.close || string(resp.backend) != tt.backend {
				t.Fatalf("got status %d close %v backend %q, want %d %v %q", resp.status, resp.close, resp.backend, tt.status, tt.close, tt.backend)
			}
			if rest != tt.rest {
				t.Fatalf("left %q unread, want %q", rest, tt.rest)
			}
		})
	}
}

// TestReadResponsePassesConnectionErrors: an error from the connection (a
// reset) must come through unchanged so the classifier can see its errno.
func TestReadResponsePassesConnectionErrors(t *testing.T) {
	boom := errors.New("connection reset by peer")
	br := bufio.NewReader(io.MultiReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Le"), errReader{boom}))
	_, got, err := readResponse(br, false, "", nil)
	if !errors.Is(err, boom) || !got {
		t.Fatalf("err = %v got = %v, want the reader's error after bytes arrived", err, got)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// FuzzReadResponse checks the parser's contract on arbitrary input: it never
// panics or reads past what one response frames, and every error is one of
// the documented kinds.
func FuzzReadResponse(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.0 404 Not Found\r\n\r\nbody",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Pod-Name: a\r\nConnection: close\r\n\r\n",
		"",
	} {
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, isHead bool) {
		br := bufio.NewReaderSize(strings.NewReader(string(data)), readBufferSize)
		resp, got, err := readResponse(br, isHead, "x-pod-name", nil)
		if err != nil {
			if !errors.Is(err, errNoResponse) && !errors.Is(err, errTruncated) {
				t.Fatalf("undocumented error kind: %v", err)
			}
			if errors.Is(err, errNoResponse) && (got || len(data) != 0) {
				t.Fatalf("errNoResponse with %d input bytes (got=%v)", len(data), got)
			}
			return
		}
		if resp.status < 100 || resp.status > 999 {
			t.Fatalf("status %d out of range", resp.status)
		}
		if !got {
			t.Fatal("a response without any byte")
		}
		if resp.backend != nil && strings.ContainsAny(string(resp.backend), "\r\n") {
			t.Fatalf("backend value %q spans lines", resp.backend)
		}
	})
}

func ExampleParseStatusSet() {
	s, _ := ParseStatusSet("200-299,304")
	fmt.Println(s.Contains(204), s.Contains(304), s.Contains(404), s)
	// Output: true true false 200-299,304
}
