package prober

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The byte checks are httpguts' and x/net's on every byte.
func TestFieldChecksAgreeWithHTTPGuts(t *testing.T) {
	for b := range 256 {
		v := []byte{'a', byte(b), 'z'}
		if got, want := validFieldValue(v), httpguts.ValidHeaderFieldValue(string(v)); got != want {
			t.Errorf("value byte %#x: %v, httpguts says %v", b, got, want)
		}
		// x/net's validWireHeaderFieldName (unexported), as it reads a
		// name: by rune.
		want := true
		for _, r := range string([]byte{byte(b)}) {
			want = want && httpguts.IsTokenRune(r) && !('A' <= r && r <= 'Z')
		}
		if got := validWireFieldName([]byte{byte(b)}); got != want {
			t.Errorf("name byte %#x: %v, x/net says %v", b, got, want)
		}
	}
	if validWireFieldName(nil) {
		t.Error("an empty name is valid")
	}
}

// headerView is what a stream's outcome reads of a block, from either
// reader, or the error the block gave.
func viewOf(h *h2Headers) string {
	return fmt.Sprintf("headers stream=%d ended=%v status=%q backend=%q/%v grpc=%d/%q",
		h.streamID, h.ended, h.status, h.backend, h.hasBackend, h.grpcStatus, h.grpcMessage)
}

func errView(err error) string {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("stream error %d %v: %v", se.StreamID, se.Code, se.Cause)
	case errors.As(err, &ce):
		return fmt.Sprintf("connection error %v", http2.ErrCode(ce))
	}
	return "error " + err.Error()
}

// xnetView is the same view of x/net's MetaHeadersFrame, read as
// takeHeaders read it before h2HeaderReader replaced it.
func xnetView(f *http2.MetaHeadersFrame, backendHeader string) string {
	h := h2Headers{streamID: f.StreamID, ended: f.StreamEnded(), status: f.PseudoValue("status"), grpcStatus: -1}
	for _, hf := range f.RegularFields() {
		switch {
		case hf.Name == backendHeader && !h.hasBackend:
			h.backend, h.hasBackend = hf.Value, true
		case hf.Name == "grpc-status":
			if n, err := strconv.Atoi(hf.Value); err == nil && n >= 0 {
				h.grpcStatus = n
			}
		case hf.Name == "grpc-message":
			h.grpcMessage = hf.Value
		}
	}
	return viewOf(&h)
}

// readAll reads every frame of wire with x/net's meta-header framer
// (ours false) or with h2HeaderReader (ours true) and lists what each
// block gave, going on after stream errors as both engines do.
func readAll(wire []byte, maxList uint32, backendHeader string, ours bool) []string {
	fr := http2.NewFramer(nil, bytes.NewReader(wire))
	var r *h2HeaderReader
	if ours {
		r = newH2HeaderReader(backendHeader, maxList)
	} else {
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.MaxHeaderListSize = maxList
	}
	var out []string
	for {
		f, err := fr.ReadFrame()
		var view string
		if err == nil {
			switch f := f.(type) {
			case *http2.HeadersFrame:
				var h *h2Headers
				if h, err = r.read(fr, f); err == nil {
					view = viewOf(h)
				}
			case *http2.MetaHeadersFrame:
				view = xnetView(f, backendHeader)
			default:
				view = "frame " + f.Header().Type.String()
			}
		}
		if err != nil {
			view = errView(err)
		}
		out = append(out, view)
		var se http2.StreamError
		if err != nil && !errors.As(err, &se) {
			return out // the connection ends (io.EOF at the end of wire)
		}
	}
}

// h2HeaderReader sees what x/net's Framer with ReadMetaHeaders sees, on
// random connections: blocks of valid and refused fields (pseudo-headers
// out of order, unknown or repeated; names in upper case or not tokens;
// values with controls; lists past the size bound), cut into HEADERS and
// CONTINUATION frames, some damaged, some interrupted by another frame.
func TestHeaderReaderAgreesWithXNet(t *testing.T) {
	const connections = 500
	counts := map[string]int{}
	for c := range connections {
		rng := rand.New(rand.NewPCG(uint64(c), 27))
		maxList := []uint32{h2MaxHeaderList, h2MaxHeaderList, 300, 120}[rng.IntN(4)]
		var wire, block bytes.Buffer
		fw := http2.NewFramer(&wire, nil)
		enc := hpack.NewEncoder(&block)
		for b := range 12 {
			block.Reset()
			for _, f := range randomResponse(rng) {
				_ = enc.WriteField(f)
			}
			frag := block.Bytes()
			if rng.IntN(20) == 0 && len(frag) > 0 {
				frag[rng.IntN(len(frag))] ^= byte(1 + rng.IntN(255))
			}
			id := uint32(2*b + 1)
			writeBlock(rng, fw, id, frag)
			if rng.IntN(4) == 0 {
				_ = fw.WriteData(id, true, []byte("ok"))
			}
		}
		want := readAll(wire.Bytes(), maxList, "x-backend", false)
		got := readAll(wire.Bytes(), maxList, "x-backend", true)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("connection %d (max list %d):\nours:\n%s\nx/net:\n%s", c, maxList,
				strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for _, v := range got {
			w := strings.Fields(v)
			kind := w[0]
			if kind == "stream" || kind == "connection" {
				kind += " error " + w[len(w)-1] // the code, or the cause's last word
				if kind[0] == 's' {
					kind = "stream error"
				}
			}
			counts[kind]++
		}
	}
	t.Logf("outcomes: %v", counts)
	for _, k := range []string{"headers", "stream error", "connection error"} {
		found := false
		for v := range counts {
			found = found || strings.HasPrefix(v, k)
		}
		if !found {
			t.Errorf("no %q outcome: the generator does not reach it", k)
		}
	}
}

// writeBlock writes a header block as one HEADERS frame or cut into
// CONTINUATIONs, sometimes with another frame where a CONTINUATION must be.
func writeBlock(rng *rand.Rand, fw *http2.Framer, id uint32, frag []byte) {
	cut := len(frag)
	if len(frag) > 1 && rng.IntN(3) == 0 {
		cut = 1 + rng.IntN(len(frag)-1)
	}
	_ = fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag[:cut],
		EndStream: rng.IntN(2) == 0, EndHeaders: cut == len(frag)})
	for rest := frag[cut:]; len(rest) > 0; {
		n := 1 + rng.IntN(len(rest))
		if rng.IntN(30) == 0 {
			_ = fw.WritePing(false, [8]byte{})
		}
		_ = fw.WriteContinuation(id, n == len(rest), rest[:n])
		rest = rest[n:]
	}
}

func randomResponse(rng *rand.Rand) []hpack.HeaderField {
	var fs []hpack.HeaderField
	if rng.IntN(10) != 0 {
		fs = append(fs, hpack.HeaderField{Name: ":status", Value: []string{"200", "103", "503", "abc", "+200", ""}[rng.IntN(6)]})
	}
	for range rng.IntN(7) {
		f := hpack.HeaderField{Sensitive: rng.IntN(8) == 0}
		switch rng.IntN(14) {
		case 0:
			f.Name = []string{":status", ":path", ":weird", ":method"}[rng.IntN(4)]
			f.Value = "x"
		case 1:
			f.Name = []string{"X-Backend", "bad name", "", "caf\xc3\xa9"}[rng.IntN(4)]
			f.Value = "v"
		case 2:
			f.Name, f.Value = "x-note", "a\x01b"
		case 3:
			f.Name, f.Value = "trailer", strings.Repeat("x-t, ", rng.IntN(30))
		case 4:
			f.Name, f.Value = "x-pad", strings.Repeat("p", rng.IntN(200))
		case 5, 6:
			f.Name, f.Value = "grpc-status", []string{"0", "14", "-1", "x"}[rng.IntN(4)]
		case 7:
			f.Name, f.Value = "grpc-message", []string{"", "drain", "bad%20thing"}[rng.IntN(3)]
		default:
			f.Name, f.Value = []string{"x-backend", "server", "date", "content-type"}[rng.IntN(4)], fmt.Sprintf("pod-%d", rng.IntN(3))
		}
		fs = append(fs, f)
	}
	return fs
}
