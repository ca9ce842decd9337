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
	for _, user := range []*url.Userinfo{nil, url.UserPassword("u", "p")} {
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
			id := []byte("run1-" + strconv.Itoa(i))
			got = got[:0]
			if _, err := dec.Write(e.block(r, id)); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if err := dec.Close(); err != nil {
				t.Fatal(err)
			}
			want := append(append([]hpack.HeaderField(nil), req.fields...),
				hpack.HeaderField{Name: "x-rollprobe-request", Value: string(id), Sensitive: true})
			if len(got) != len(want) {
				t.Fatalf("request %d: %v, want %v", i, got, want)
			}
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("request %d field %d: %v, want %v", i, j, got[j], want[j])
				}
			}
			if i > 0 && e.constant == nil {
				t.Fatalf("request %d: the fields' bytes were not kept", i)
			}
		}
		id := []byte("run1-123456")
		if n := testing.AllocsPerRun(100, func() { e.block(&req, id) }); n != 0 {
			t.Errorf("%.1f allocations per block", n)
		}
	}
}
