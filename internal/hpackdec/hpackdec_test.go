package hpackdec

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

type field struct {
	name, value string
	sensitive   bool
}

func (f field) String() string { return fmt.Sprintf("%s: %q (%v)", f.name, f.value, f.sensitive) }

// pair runs this package's Decoder and x/net's side by side on the same
// input, each recording what it emitted.
type pair struct {
	ours      *Decoder
	ref       *hpack.Decoder
	got, want []field
	// stopAfter: emitting is turned off (in both) once this many fields
	// of a block were emitted (0: never).
	stopAfter int
}

func newPair(tableSize uint32, maxStr int) *pair {
	p := &pair{}
	p.ours = NewDecoder(tableSize, func(name, value []byte, sensitive bool) {
		p.got = append(p.got, field{string(name), string(value), sensitive})
		if p.stopAfter > 0 && len(p.got) >= p.stopAfter {
			p.ours.SetEmitEnabled(false)
		}
	})
	p.ref = hpack.NewDecoder(tableSize, func(f hpack.HeaderField) {
		p.want = append(p.want, field{f.Name, f.Value, f.Sensitive})
		if p.stopAfter > 0 && len(p.want) >= p.stopAfter {
			p.ref.SetEmitEnabled(false)
		}
	})
	p.ours.SetMaxStringLength(maxStr)
	p.ref.SetMaxStringLength(maxStr)
	return p
}

// block feeds one header block to both, in the given fragments, and fails
// the test where they differ. It reports whether both erred (the
// connection would end there).
func (p *pair) block(t *testing.T, frags [][]byte, stopAfter int) (failed bool) {
	t.Helper()
	p.got, p.want, p.stopAfter = p.got[:0], p.want[:0], stopAfter
	p.ours.SetEmitEnabled(true)
	p.ref.SetEmitEnabled(true)
	for i, frag := range frags {
		errOurs := p.ours.Write(frag)
		_, errRef := p.ref.Write(frag)
		p.compare(t, fmt.Sprintf("fragment %d of %d (% x)", i+1, len(frags), frag), errOurs, errRef)
		if errOurs != nil {
			return true
		}
	}
	errOurs, errRef := p.ours.Close(), p.ref.Close()
	p.compare(t, "Close", errOurs, errRef)
	return errOurs != nil
}

func (p *pair) compare(t *testing.T, where string, errOurs, errRef error) {
	t.Helper()
	if (errOurs == nil) != (errRef == nil) {
		t.Fatalf("%s: error %v, x/net's %v", where, errOurs, errRef)
	}
	if !fieldsEqual(p.got, p.want) {
		t.Fatalf("%s: emitted\n%v\nx/net emitted\n%v", where, p.got, p.want)
	}
}

func fieldsEqual(a, b []field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// table checks that both dynamic tables hold the same entries, reading
// each index in turn until both refuse it.
func (p *pair) table(t *testing.T) {
	t.Helper()
	for i := uint64(len(staticTable) + 1); ; i++ {
		rep := appendVarInt([]byte{0x80}, 7, i)
		if failed := p.block(t, [][]byte{rep}, 0); failed {
			_, _ = p.ours.Close(), p.ref.Close() // the probe's error ends no block
			return
		}
		if i > 4096 {
			t.Fatal("more entries than a 4096-byte table can hold")
		}
	}
}

func appendVarInt(dst []byte, n byte, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		dst[len(dst)-1] |= byte(i)
		return dst
	}
	dst[len(dst)-1] |= byte(k)
	i -= k
	for i >= 128 {
		dst = append(dst, byte(0x80|i&0x7f))
		i >>= 7
	}
	return append(dst, byte(i))
}

func dehex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "\n", "").Replace(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// RFC 7541's C.6: responses with Huffman coding in a 256-byte table, with
// evictions. The fields and the table's size after each are the RFC's.
func TestRFC7541ResponsesWithHuffman(t *testing.T) {
	var got []field
	d := NewDecoder(256, func(name, value []byte, sensitive bool) {
		got = append(got, field{string(name), string(value), sensitive})
	})
	steps := []struct {
		block string
		want  []field
		size  uint32
	}{
		{`4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
		  2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
			[]field{{":status", "302", false}, {"cache-control", "private", false},
				{"date", "Mon, 21 Oct 2013 20:13:21 GMT", false}, {"location", "https://www.example.com", false}},
			222},
		{`4883 640e ffc1 c0bf`,
			[]field{{":status", "307", false}, {"cache-control", "private", false},
				{"date", "Mon, 21 Oct 2013 20:13:21 GMT", false}, {"location", "https://www.example.com", false}},
			222},
		{`88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
		  77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
		  9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
			[]field{{":status", "200", false}, {"cache-control", "private", false},
				{"date", "Mon, 21 Oct 2013 20:13:22 GMT", false}, {"location", "https://www.example.com", false},
				{"content-encoding", "gzip", false},
				{"set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1", false}},
			215},
	}
	for i, s := range steps {
		got = got[:0]
		block := dehex(t, strings.ReplaceAll(s.block, "\t", ""))
		if err := d.Write(block); err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		if !fieldsEqual(got, s.want) {
			t.Fatalf("response %d: got\n%v\nwant\n%v", i+1, got, s.want)
		}
		if d.TableSize() != s.size {
			t.Fatalf("response %d: table size %d, the RFC says %d", i+1, d.TableSize(), s.size)
		}
	}
}

// Every static entry reads as x/net reads it.
func TestStaticTableAgreesWithXNet(t *testing.T) {
	if len(staticTable) != staticEntries {
		t.Fatalf("%d static entries, staticEntries says %d", len(staticTable), staticEntries)
	}
	p := newPair(4096, 0)
	for i := uint64(1); i <= uint64(len(staticTable))+1; i++ {
		p.block(t, [][]byte{appendVarInt([]byte{0x80}, 7, i)}, 0)
	}
}

// The decoders agree on random connections: blocks that x/net's encoder
// wrote (with dynamic table size changes, sensitive fields, long and
// non-ASCII values), cut into random fragments, some of them damaged, under
// random string bounds and with emitting turned off part way. After every
// block both tables must hold the same entries.
func TestAgreesWithXNetOnRandomBlocks(t *testing.T) {
	const connections = 400
	var damaged, erred, blocks, oversized int
	for c := range connections {
		rng := rand.New(rand.NewPCG(uint64(c), 26))
		tableSize := []uint32{4096, 256, 64, 0}[rng.IntN(4)]
		maxStr := []int{0, 0, 40, 300}[rng.IntN(4)]
		p := newPair(tableSize, maxStr)
		var encoded bytes.Buffer
		enc := hpack.NewEncoder(&encoded)
		enc.SetMaxDynamicTableSizeLimit(tableSize)
		for b := 0; b < 30; b++ {
			encoded.Reset()
			if rng.IntN(8) == 0 {
				enc.SetMaxDynamicTableSize(uint32(rng.IntN(int(tableSize) + 1)))
			}
			for range rng.IntN(12) {
				if err := enc.WriteField(randomField(rng)); err != nil {
					t.Fatal(err)
				}
			}
			block := append([]byte(nil), encoded.Bytes()...)
			if rng.IntN(15) == 0 {
				// An indexed literal larger than the table, which x/net's
				// encoder never writes and a peer may: it empties the table.
				v := strings.Repeat("b", int(tableSize)+rng.IntN(100))
				block = appendVarInt(append(append(append(block, 0x40, 2), "x-"...), 0), 7, uint64(len(v)))
				block = append(block, v...)
				oversized++
			}
			if rng.IntN(25) == 0 && len(block) > 0 {
				block = damage(rng, block)
				damaged++
			}
			stopAfter := 0
			if rng.IntN(5) == 0 {
				stopAfter = 1 + rng.IntN(4)
			}
			blocks++
			if p.block(t, fragments(rng, block), stopAfter) {
				erred++
				break // the connection ends with its first error
			}
			p.table(t)
		}
	}
	t.Logf("%d blocks on %d connections, %d damaged, %d with an entry larger than the table, %d connections ended by an error", blocks, connections, damaged, oversized, erred)
	if erred == 0 || damaged == 0 || oversized == 0 {
		t.Fatal("no error case was exercised: the generator is broken")
	}
}

var names = []string{
	":status", ":path", ":authority", "content-type", "date", "server", "x-backend",
	"grpc-status", "grpc-message", "set-cookie", "X-Upper", "bad name", "", "trailer",
}

func randomField(rng *rand.Rand) hpack.HeaderField {
	f := hpack.HeaderField{Name: names[rng.IntN(len(names))], Sensitive: rng.IntN(10) == 0}
	switch rng.IntN(12) {
	case 0:
		f.Value = ""
	case 1:
		f.Value = strings.Repeat("v", rng.IntN(600)) // past the bounds, some past the table
	case 2:
		b := make([]byte, rng.IntN(20))
		for i := range b {
			b[i] = byte(rng.IntN(256)) // non-ASCII, controls: Huffman's long codes
		}
		f.Value = string(b)
	default:
		f.Value = []string{"200", "ok", "Mon, 21 Oct 2013 20:13:21 GMT", "pod-a", "14"}[rng.IntN(5)]
	}
	return f
}

// damage changes a block as a broken peer might: a byte flipped, the end
// cut, garbage appended, or an index past the table.
func damage(rng *rand.Rand, b []byte) []byte {
	switch rng.IntN(4) {
	case 0:
		b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
	case 1:
		b = b[:rng.IntN(len(b))]
	case 2:
		b = append(b, byte(rng.IntN(256)), byte(rng.IntN(256)))
	default:
		b = appendVarInt(append(b, 0x80), 7, uint64(62+rng.IntN(200)))
	}
	return b
}

func fragments(rng *rand.Rand, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := 1 + rng.IntN(len(b))
		if rng.IntN(2) == 0 {
			n = len(b)
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	if len(out) == 0 {
		out = append(out, nil)
	}
	return out
}

// Decoding nginx's kind of response (every field a literal with
// incremental indexing, the table full and evicting) allocates nothing
// once warm.
func TestNoAllocationsWhenWarm(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops items on purpose; make test runs this test without it")
	}
	var buf bytes.Buffer
	var blocks [][]byte
	for i := range 50 {
		buf.Reset()
		enc := hpack.NewEncoder(&buf) // as nginx: literals only, each indexed
		for _, f := range []hpack.HeaderField{{Name: ":status", Value: "200"},
			{Name: "server", Value: "nginx"}, {Name: "date", Value: fmt.Sprintf("Fri, 27 Nov 2026 15:%02d:00 GMT", i)},
			{Name: "content-type", Value: "text/plain"}, {Name: "content-length", Value: "3"}} {
			_ = enc.WriteField(f)
		}
		blocks = append(blocks, append([]byte(nil), buf.Bytes()...))
	}
	n := 0
	d := NewDecoder(4096, func(name, value []byte, sensitive bool) { n++ })
	i := 0
	next := func() {
		if err := d.Write(blocks[i%len(blocks)]); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for range 200 {
		next()
	}
	if allocs := testing.AllocsPerRun(1000, next); allocs != 0 {
		t.Fatalf("%.1f allocations per block", allocs)
	}
	if n == 0 {
		t.Fatal("nothing emitted")
	}
}

// An indexed literal larger than the whole table empties it and is kept
// nowhere: no slot's buffer grows to hold it for the connection's life.
func TestOversizedEntryIsNotKept(t *testing.T) {
	var got []field
	d := NewDecoder(256, func(name, value []byte, sensitive bool) {
		got = append(got, field{string(name), string(value), sensitive})
	})
	big := strings.Repeat("v", 10000)
	block := []byte{0x40, 5}
	block = append(block, "x-big"...)
	block = appendVarInt(append(block, 0), 7, uint64(len(big)))
	block = append(block, big...)
	small := append([]byte{0x40, 3}, "x-s\x01v"...) // indexed first, then evicted by the big one
	for _, b := range [][]byte{small, block} {
		if err := d.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[1].name != "x-big" || got[1].value != big {
		t.Fatalf("emitted %d fields, the last %q", len(got), got[len(got)-1].name)
	}
	if d.TableSize() != 0 || d.count != 0 {
		t.Fatalf("table size %d with %d entries after an entry larger than it", d.TableSize(), d.count)
	}
	for i := range d.ring {
		if c := cap(d.ring[i].buf); c > 256 {
			t.Fatalf("slot %d keeps %d bytes", i, c)
		}
	}
}

// nginxBlocks are n response header blocks as nginx writes them for
// bench/lib.sh's `return 200 "ok\n"` (a capture of it showed these
// fields): every field a literal with incremental indexing, Huffman coded
// where shorter, the date a new one every dateEvery blocks.
func nginxBlocks(n, dateEvery int) [][]byte {
	var buf bytes.Buffer
	blocks := make([][]byte, 0, n)
	for i := range n {
		buf.Reset()
		enc := hpack.NewEncoder(&buf) // a fresh encoder: literals only, each indexed
		for _, f := range []hpack.HeaderField{{Name: ":status", Value: "200"},
			{Name: "server", Value: "nginx/1.22.1"},
			{Name: "date", Value: fmt.Sprintf("Sat, 28 Nov 2026 13:%02d:%02d GMT", i/dateEvery/60%60, i/dateEvery%60)},
			{Name: "content-type", Value: "text/plain"}, {Name: "content-length", Value: "3"}} {
			_ = enc.WriteField(f)
		}
		blocks = append(blocks, append([]byte(nil), buf.Bytes()...))
	}
	return blocks
}

// BenchmarkDecodeNginxResponses: what decoding costs the h2 prober per
// response against nginx (make bench-h2's server).
func BenchmarkDecodeNginxResponses(b *testing.B) {
	blocks := nginxBlocks(1000, 100)
	d := NewDecoder(4096, func(name, value []byte, sensitive bool) {})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := d.Write(blocks[i%len(blocks)]); err != nil {
			b.Fatal(err)
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// The Huffman memo answers exactly as decoding would: the same few coded
// strings again and again, as names and values, in slots they share (16
// by a hash, so many collide, and the static names', which many values
// compete for), some longer than a slot keeps, some with bad padding (an
// error every time, never kept), with and without a length bound, agree
// with x/net's decoder block by block.
func TestHuffmanMemoAgreesWithXNet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 28))
	coded := func(n int) []byte {
		s := make([]byte, n)
		for j := range s {
			s[j] = "abcdefghijklmnopqrstuvwxyz-0123456789:/ ,"[rng.IntN(41)]
			if rng.IntN(30) == 0 {
				s[j] = byte(rng.IntN(256))
			}
		}
		return hpack.AppendHuffmanString(nil, string(s))
	}
	var short, long, bad [][]byte // Huffman-coded strings
	for range 40 {
		short = append(short, coded(1+rng.IntN(20)))
	}
	for range 6 {
		long = append(long, coded(memoMaxRaw+rng.IntN(40))) // longer than a slot keeps
	}
	for range 4 {
		bad = append(bad, append(coded(1+rng.IntN(20)), 0x00)) // padding of zeros: invalid
	}
	pick := func() []byte {
		switch r := rng.IntN(100); {
		case r < 2:
			return bad[rng.IntN(len(bad))]
		case r < 7:
			return long[rng.IntN(len(long))]
		}
		return short[rng.IntN(len(short))]
	}
	pickName := func() uint64 { // 0: a literal name
		if rng.IntN(2) == 0 {
			return 0
		}
		return uint64(1 + rng.IntN(staticEntries))
	}
	huffString := func(dst, coded []byte) []byte {
		dst = appendVarInt(append(dst, 0x80), 7, uint64(len(coded))) // H: Huffman-coded
		return append(dst, coded...)
	}
	var hits, errs, blocks int
	for c := range 300 {
		p := newPair(4096, []int{0, 0, 30}[c%3])
		for range 40 {
			var block []byte
			name, value := pick(), pick()
			nameIdx := pickName()
			if s := p.ours.valMemo.slot(nameIdx, value); s.kept && bytes.Equal(s.raw, value) {
				hits++ // the block's first value will be answered from the memo
			}
			for k := range 1 + rng.IntN(6) {
				if k > 0 {
					name, value = pick(), pick()
					nameIdx = pickName()
				}
				// Without indexing: a literal name (0), or the static
				// table's, whose slot its values share.
				block = appendVarInt(append(block, 0x00), 4, nameIdx)
				if nameIdx == 0 {
					block = huffString(block, name)
				}
				block = huffString(block, value)
			}
			blocks++
			if p.block(t, [][]byte{block}, 0) {
				errs++
				break
			}
		}
	}
	t.Logf("%d blocks, %d ended by an error, %d answered first from the memo", blocks, errs, hits)
	if errs == 0 || hits < 100 || blocks < 1000 {
		t.Fatal("the generator is broken: no error case, too few hits or blocks")
	}
}
