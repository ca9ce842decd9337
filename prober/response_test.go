package prober

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

// chunkReader returns data in pieces whose sizes come from rng (1 to 64
// bytes), as TCP may deliver it.
type chunkReader struct {
	data []byte
	rng  *rand.Rand
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data), 1+r.rng.IntN(64))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// parsedResponse is everything a parser's caller can observe.
type parsedResponse struct {
	status      int
	close       bool
	headers     bool
	backend     string
	got         bool
	err         string
	noResponse  bool
	truncated   bool
	unconsumed  string
	backendSeen bool
}

func observe(resp response, got bool, err error, rest string) parsedResponse {
	o := parsedResponse{status: resp.status, close: resp.close, headers: resp.headers, backend: string(resp.backend),
		backendSeen: resp.backend != nil, got: got, unconsumed: rest}
	if err != nil {
		// After an error the connection is dropped: what is left unread
		// is nobody's.
		o.err, o.unconsumed = err.Error(), ""
		o.noResponse, o.truncated = errors.Is(err, errNoResponse), errors.Is(err, errTruncated)
	}
	return o
}

// feedInPieces drives a respParser directly, as the event loop does: each
// piece is what one read returned; the end of data is EOF.
func feedInPieces(data []byte, isHead bool, rng *rand.Rand) parsedResponse {
	var p respParser
	p.reset(isHead, "x-pod-name")
	off := 0
	for off < len(data) {
		piece := data[off:min(len(data), off+1+rng.IntN(64))]
		n, done, err := p.feed(piece)
		off += n
		if err != nil || done {
			return observe(p.resp, p.got, err, string(data[off:]))
		}
		if n != len(piece) {
			panic("feed left bytes of an incomplete response")
		}
	}
	return observe(p.resp, p.got, p.end(), "")
}

// FuzzParserAgreesWithTheOracle: however the stream is cut into reads,
// the incremental parser (directly, and behind readResponse) sees exactly
// what the blocking parser it replaced saw in one read: status, framing,
// backend, whether a byte arrived, the error (text and kind) and where the
// response ended.
func FuzzParserAgreesWithTheOracle(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Pod-Name: a\r\n\r\nabcNEXT",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT",
		"HTTP/1.0 404 Not Found\r\n\r\nbody",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\nNEXT",
		"HTTP/1.1 100 Continue\r\nX-Pod-Name: early\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Pod-Name: a\r\nConnection: close\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeaderLine-4) + "\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeaderLine) + "\r\n\r\n",
		"\n",
		"",
	} {
		f.Add([]byte(seed), false, uint64(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, isHead bool, seed uint64) {
		br := bufio.NewReaderSize(strings.NewReader(string(data)), readBufferSize)
		resp, got, err := oracleReadResponse(br, isHead, "x-pod-name", nil)
		rest, _ := io.ReadAll(br)
		want := observe(resp, got, err, string(rest))
		if len(data) > readBufferSize {
			// The oracle's backend value aliased its buffer, which moves
			// when a long response refills it: the new parser copies it.
			want.backend, want.backendSeen = "", false
		}
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		cr := bufio.NewReaderSize(&chunkReader{data: data, rng: rng}, readBufferSize)
		resp, got, err = readResponse(cr, isHead, "x-pod-name", nil)
		rest, _ = io.ReadAll(cr)
		for name, have := range map[string]parsedResponse{
			"readResponse": observe(resp, got, err, string(rest)),
			"feed":         feedInPieces(data, isHead, rng),
		} {
			if len(data) > readBufferSize {
				have.backend, have.backendSeen = "", false
			}
			if have != want {
				t.Fatalf("%s disagrees with the oracle on %.300q (%d bytes, head %v):\n have %.500v\n want %.500v", name, data, len(data), isHead, have, want)
			}
		}
	})
}

// A backend header seen before the rest of the header section arrives is
// still whole at the end: the old parser kept a slice into its buffer,
// which a refill for the following lines could move.
func TestBackendSurvivesARefill(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nX-Pod-Name: pod-a\r\n" + strings.Repeat("X-Filler: "+strings.Repeat("f", 100)+"\r\n", 200) + "Content-Length: 0\r\n\r\n"
	br := bufio.NewReaderSize(&chunkReader{data: []byte(raw), rng: rand.New(rand.NewPCG(1, 2))}, readBufferSize)
	resp, _, err := readResponse(br, false, "x-pod-name", nil)
	if err != nil || string(resp.backend) != "pod-a" {
		t.Fatalf("backend %q, err %v", resp.backend, err)
	}
}
