package prober

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// The blocks decode (by x/net's decoder, which keeps its table across
// them as a server does) to the request's fields and its ID, request after
// request; from the second on they come from the kept bytes, with no
// allocation; a request with a sensitive field keeps them too.
func TestRequestEncoderBlocksDecode(t *testing.T) {
	for _, tc := range []struct {
		user *url.Userinfo
		// settingsAfter: the server's SETTINGS_HEADER_TABLE_SIZE (4,096,
		// as Go's server sends it) comes after this many blocks, -1 never.
		settingsAfter int
	}{{nil, -1}, {url.UserPassword("u", "p"), -1}, {nil, 1}, {nil, 2}} {
		user := tc.user
		u := &url.URL{Scheme: "http", Host: "10.0.0.1:8080", Path: "/ready", User: user}
		cfg := &Config{Target: u, Method: "GET", Header: http.Header{"X-Team": {"sre"}}, RequestIDHeader: "X-Rollprobe-Request"}
		req := newH2Request(cfg, "rollprobe/test")
		copyOfReq := req // a worker's copy shares the fields
		e := newH2RequestEncoder()
		var got []hpack.HeaderField
		dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f) })
		for i := range 5 {
			r := &req
			if i%2 == 1 {
				r = &copyOfReq
			}
			if i == tc.settingsAfter {
				e.peerTableSize(4096)
			}
			id := []byte("run1-" + strconv.Itoa(i))
			got = got[:0]
			if _, err := dec.Write(e.block(r, id)); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if err := dec.Close(); err != nil {
				t.Fatal(err)
			}
			// The first ID is indexed, the rest never: their name is a
			// reference to the first's entry, the newest (index 62). The
			// server's SETTINGS have the next one offered again.
			offered := i == 0 || i == tc.settingsAfter
			want := append(append([]hpack.HeaderField(nil), req.fields...),
				hpack.HeaderField{Name: "x-rollprobe-request", Value: string(id), Sensitive: !offered})
			if len(got) != len(want) {
				t.Fatalf("request %d: %v, want %v", i, got, want)
			}
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("request %d field %d: %v, want %v", i, j, got[j], want[j])
				}
			}
			if kept := e.constant != nil; kept != (i > 0 && !offered) {
				t.Fatalf("request %d: the fields' bytes kept %v", i, kept)
			}
			if !offered && e.constant != nil {
				idField := appendHPACKString(appendHPACKInt(nil, 0x10, 4, 62), string(id))
				if b := e.block(r, id); len(b) != len(e.constant)+len(idField) || string(b[len(e.constant):]) != string(idField) {
					t.Fatalf("request %d: the ID is written %x, want %x (an indexed name)", i, b[len(e.constant):], idField)
				}
			}
		}
		id := []byte("run1-123456")
		if n := testing.AllocsPerRun(100, func() { e.block(&req, id) }); n != 0 {
			t.Errorf("%.1f allocations per block", n)
		}
	}
}

// appendHPACKString appends s as an HPACK string literal (RFC 7541 §5.2),
// Huffman-coded when that is shorter, as x/net's encoder writes it: the
// bytes the tests expect of the encoder.
func appendHPACKString(dst []byte, s string) []byte {
	n := hpack.HuffmanEncodeLength(s)
	if n < uint64(len(s)) {
		dst = appendHPACKInt(dst, 0x80, 7, n)
		return hpack.AppendHuffmanString(dst, s)
	}
	dst = appendHPACKInt(dst, 0, 7, uint64(len(s)))
	return append(dst, s...)
}

// appendHPACKInt appends i with an n-bit prefix after the bits in first
// (RFC 7541 §5.1).
func appendHPACKInt(dst []byte, first byte, n uint, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		return append(dst, first|byte(i))
	}
	dst = append(dst, first|byte(k))
	for i -= k; i >= 0x80; i >>= 7 {
		dst = append(dst, byte(i&0x7f|0x80))
	}
	return append(dst, byte(i))
}
