// Package hpackdec decodes HPACK header blocks (RFC 7541) without
// allocating once warm: fields are handed out as byte slices that live only
// for the call, and the dynamic table keeps its entries in buffers it
// reuses.
//
// It exists for the prober's hot path. golang.org/x/net/http2/hpack's
// Decoder allocates a string for every literal it reads, and its dynamic
// table keeps two maps that only an encoder needs: against nginx, which
// sends every response's date, server, type and length as literals with
// incremental indexing, decoding took 16% of an HTTP/2 probe's CPU.
//
// Its contract is x/net's Decoder's (v0.60.0), which the tests check it
// against on random blocks: the same fields, in order, the same table, an
// error exactly where that one errs (SetMaxStringLength, SetEmitEnabled and
// Close mean the same). The error values differ: every error here is the
// connection's COMPRESSION_ERROR, as in x/net's Framer.
package hpackdec

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/net/http2/hpack"
)

var (
	errStringLength   = errors.New("hpack: string too long") // longer than SetMaxStringLength allows
	errTruncated      = errors.New("hpack: truncated headers")
	errInvalid        = errors.New("hpack: invalid encoding")
	errVarintOverflow = errors.New("hpack: varint integer overflow")
	errUpdateLate     = errors.New("hpack: dynamic table size update MUST occur at the beginning of a header block")
	errUpdateTooLarge = errors.New("hpack: dynamic table size update too large")
	errNeedMore       = errors.New("hpack: need more data") // internal: the representation goes on in the next Write
)

// invalidIndexError: a representation refers to no table entry.
type invalidIndexError uint64

func (e invalidIndexError) Error() string {
	return fmt.Sprintf("hpack: invalid indexed representation index %d", uint64(e))
}

// entryOverhead is what RFC 7541 §4.1 adds to an entry's name and value.
const entryOverhead = 32

// entry is one dynamic table entry: its name then its value in buf.
type entry struct {
	buf     []byte
	nameLen int
}

func (e *entry) name() []byte  { return e.buf[:e.nameLen] }
func (e *entry) value() []byte { return e.buf[e.nameLen:] }
func (e *entry) size() uint32  { return uint32(len(e.buf)) + entryOverhead }

// Decoder decodes the header blocks of one connection, in order.
type Decoder struct {
	emit        func(name, value []byte, sensitive bool)
	emitEnabled bool
	firstField  bool // no representation of the current block parsed yet
	maxStrLen   int  // 0: none

	// The dynamic table: a ring of entries, oldest at head. It holds
	// allowedMaxSize/32 entries at most (each takes 32 bytes or more),
	// and the ring one more: the free slot an add writes into.
	ring            []entry
	head, count     int
	size, maxSize   uint32
	allowedMaxSize  uint32
	save            []byte // a representation cut at the end of a Write
	nameBuf, valBuf bytes.Buffer
	// Names and values have memos of their own: a literal's name, decoded
	// first, may be a memo's bytes when its value is decoded.
	nameMemo, valMemo huffMemo
}

// huffMemo remembers Huffman-coded strings and what they decoded to.
// Servers send the same literals in response after response: nginx its
// server, date (new once a second), type and length, each a literal with
// incremental indexing, Huffman-coded. Decoding them was the largest cost
// in user space of an h2 probe flat out against nginx after the system
// calls (x/net's huffmanDecode, 3.7% of the CPU: perf, 2026-11-28);
// comparing the coded bytes with the ones decoded before is a fraction of
// it. A string decodes the same every time, so a hit returns exactly what
// decoding would; a miss decodes as before. Only strings decoded without
// error are kept.
//
// A value whose name is in the static table has the slot of that name (a
// server's date and type do not evict each other, as they did in a slot
// chosen by a hash); other strings share a few slots chosen by a hash.
type huffMemo struct {
	slots [staticEntries + 1 + hashedSlots]memoSlot
}

type memoSlot struct {
	raw, decoded []byte
	kept         bool
}

const (
	staticEntries = 61 // RFC 7541 Appendix A (TestStaticTableAgreesWithXNet holds staticTable to it)
	hashedSlots   = 16
	// memoMaxRaw bounds what a slot keeps: 64 coded bytes and what they
	// decode to (102 bytes at most, Huffman's shortest code being 5 bits),
	// so a connection's memos hold under 26 KB whatever the server sends.
	// Values that long are rarely the same twice.
	memoMaxRaw = 64
)

// slot is raw's place in the memo: the static name's (nameIdx 1 to 61), or
// one chosen by a cheap hash of raw (a collision costs a decode, never a
// wrong answer: the bytes are compared).
func (m *huffMemo) slot(nameIdx uint64, raw []byte) *memoSlot {
	if nameIdx > 0 && nameIdx <= staticEntries {
		return &m.slots[nameIdx]
	}
	h := uint(len(raw))*31 + uint(raw[0])*7 + uint(raw[len(raw)-1]) + uint(raw[len(raw)/2])*3
	return &m.slots[staticEntries+1+h%hashedSlots]
}

// NewDecoder returns a decoder whose dynamic table starts at and may grow
// to maxTableSize (the SETTINGS_HEADER_TABLE_SIZE the connection
// advertised). emit gets every field while emitting is enabled; name and
// value are valid only during the call.
func NewDecoder(maxTableSize uint32, emit func(name, value []byte, sensitive bool)) *Decoder {
	return &Decoder{
		emit: emit, emitEnabled: true, firstField: true,
		ring:    make([]entry, maxTableSize/entryOverhead+1),
		maxSize: maxTableSize, allowedMaxSize: maxTableSize,
	}
}

// SetMaxStringLength bounds a name's or value's length (after Huffman
// decoding); longer is an error. 0: unbounded.
func (d *Decoder) SetMaxStringLength(n int) { d.maxStrLen = n }

// SetEmitEnabled turns emitting on or off; the table is kept either way.
// While off, literals that are not indexed are not decoded at all (as in
// x/net: their Huffman coding is not checked).
func (d *Decoder) SetEmitEnabled(v bool) { d.emitEnabled = v }

// TableSize is the dynamic table's size in RFC 7541's terms.
func (d *Decoder) TableSize() uint32 { return d.size }

// Close ends a header block: one cut in the middle of a representation is
// an error.
func (d *Decoder) Close() error {
	if len(d.save) > 0 {
		d.save = d.save[:0]
		return errTruncated
	}
	d.firstField = true
	return nil
}

// Write decodes the next fragment of the current header block.
func (d *Decoder) Write(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	buf := p
	if len(d.save) > 0 {
		d.save = append(d.save, p...)
		buf = d.save
	}
	for len(buf) > 0 {
		rest, err := d.parse(buf)
		if err == errNeedMore {
			// As x/net: a representation this long can only be an
			// overlong string, whatever follows.
			const varIntOverhead = 8
			if d.maxStrLen != 0 && int64(len(buf)) > 2*(int64(d.maxStrLen)+varIntOverhead) {
				d.save = d.save[:0]
				return errStringLength
			}
			d.save = append(d.save[:0], buf...) // buf may be d.save's tail: append moves it down
			return nil
		}
		d.firstField = false
		if err != nil {
			d.save = d.save[:0]
			return err
		}
		buf = rest
	}
	d.save = d.save[:0]
	return nil
}

// parse decodes the representation at the start of buf and returns what
// follows it; errNeedMore when buf ends inside it.
func (d *Decoder) parse(buf []byte) ([]byte, error) {
	b := buf[0]
	switch {
	case b&0x80 != 0: // §6.1 indexed
		idx, rest, err := readVarInt(7, buf)
		if err != nil {
			return nil, err
		}
		name, value, ok := d.at(idx)
		if !ok {
			return nil, invalidIndexError(idx)
		}
		return rest, d.callEmit(name, value, false)
	case b&0xc0 == 0x40: // §6.2.1 with incremental indexing
		return d.literal(buf, 6, true, false)
	case b&0xf0 == 0: // §6.2.2 without indexing
		return d.literal(buf, 4, false, false)
	case b&0xf0 == 0x10: // §6.2.3 never indexed
		return d.literal(buf, 4, false, true)
	case b&0xe0 == 0x20: // §6.3 dynamic table size update
		if !d.firstField && d.size > 0 {
			return nil, errUpdateLate
		}
		size, rest, err := readVarInt(5, buf)
		if err != nil {
			return nil, err
		}
		if size > uint64(d.allowedMaxSize) {
			return nil, errUpdateTooLarge
		}
		d.maxSize = uint32(size)
		d.evict()
		return rest, nil
	}
	return nil, errInvalid
}

func (d *Decoder) literal(buf []byte, n byte, indexed, sensitive bool) ([]byte, error) {
	nameIdx, p, err := readVarInt(n, buf)
	if err != nil {
		return nil, err
	}
	wantStr := d.emitEnabled || indexed
	var name []byte
	var rawName, rawValue []byte
	var nameHuff, valueHuff bool
	if nameIdx > 0 {
		var ok bool
		if name, _, ok = d.at(nameIdx); !ok {
			return nil, invalidIndexError(nameIdx)
		}
	} else if rawName, nameHuff, p, err = d.readString(p); err != nil {
		return nil, err
	}
	if rawValue, valueHuff, p, err = d.readString(p); err != nil {
		return nil, err
	}
	var value []byte
	if wantStr {
		if nameIdx == 0 {
			if name, err = d.decodeString(&d.nameBuf, &d.nameMemo, 0, rawName, nameHuff); err != nil {
				return nil, err
			}
		}
		if value, err = d.decodeString(&d.valBuf, &d.valMemo, nameIdx, rawValue, valueHuff); err != nil {
			return nil, err
		}
	}
	switch {
	case indexed && uint32(len(name)+len(value))+entryOverhead > d.maxSize:
		// Larger than the whole table: adding it empties the table and
		// keeps nothing (RFC 7541 §4.4). It is not copied into a slot,
		// whose buffer would then keep up to SetMaxStringLength bytes
		// for the connection's life. name may be an entry's: the
		// evicted entries' bytes stay as they are until the next add.
		d.head = (d.head + d.count) % len(d.ring)
		d.count, d.size = 0, 0
	case indexed:
		// name may be a live entry's; the slot written is free.
		e := &d.ring[(d.head+d.count)%len(d.ring)]
		e.buf = append(append(e.buf[:0], name...), value...)
		e.nameLen = len(name)
		d.count++
		d.size += e.size()
		d.evict()
		name, value = e.name(), e.value() // valid until the next add
	}
	return p, d.callEmit(name, value, sensitive)
}

func (d *Decoder) callEmit(name, value []byte, sensitive bool) error {
	if d.maxStrLen != 0 && (len(name) > d.maxStrLen || len(value) > d.maxStrLen) {
		return errStringLength
	}
	if d.emitEnabled {
		d.emit(name, value, sensitive)
	}
	return nil
}

// evict drops the oldest entries until the table fits its size.
func (d *Decoder) evict() {
	for d.size > d.maxSize && d.count > 0 {
		d.size -= d.ring[d.head].size()
		d.head = (d.head + 1) % len(d.ring)
		d.count--
	}
}

// at is entry i of the static then the dynamic table (newest first).
func (d *Decoder) at(i uint64) (name, value []byte, ok bool) {
	switch {
	case i == 0:
		return nil, nil, false
	case i <= uint64(len(staticTable)):
		return staticTable[i-1][0], staticTable[i-1][1], true
	case i-uint64(len(staticTable)) > uint64(d.count):
		return nil, nil, false
	}
	newest := d.head + d.count - 1
	e := &d.ring[(newest-int(i-uint64(len(staticTable))-1))%len(d.ring)]
	return e.name(), e.value(), true
}

// readString reads a string literal's length and bytes, not decoding
// them: a string that is not needed is never Huffman-decoded.
func (d *Decoder) readString(p []byte) (raw []byte, huff bool, rest []byte, err error) {
	if len(p) == 0 {
		return nil, false, nil, errNeedMore
	}
	huff = p[0]&0x80 != 0
	n, p, err := readVarInt(7, p)
	if err != nil {
		return nil, false, nil, err
	}
	if d.maxStrLen != 0 && n > uint64(d.maxStrLen) {
		return nil, false, nil, errStringLength
	}
	if uint64(len(p)) < n {
		return nil, false, nil, errNeedMore
	}
	return p[:n], huff, p[n:], nil
}

// decodeString is raw, Huffman-decoded if huff: valid until the next
// decode with the same buffer and memo. nameIdx: the index of the name
// whose value raw is (0: none, or raw is a name).
func (d *Decoder) decodeString(into *bytes.Buffer, memo *huffMemo, nameIdx uint64, raw []byte, huff bool) ([]byte, error) {
	if !huff {
		return raw, nil
	}
	var slot *memoSlot
	out, hit := []byte(nil), false
	if len(raw) > 0 && len(raw) <= memoMaxRaw {
		slot = memo.slot(nameIdx, raw)
		out, hit = slot.decoded, slot.kept && bytes.Equal(slot.raw, raw)
	}
	if !hit {
		into.Reset()
		if _, err := hpack.HuffmanDecode(into, raw); err != nil {
			return nil, err
		}
		out = into.Bytes()
		if slot != nil {
			slot.raw = append(slot.raw[:0], raw...)
			slot.decoded = append(slot.decoded[:0], out...)
			slot.kept = true
		}
	}
	if d.maxStrLen != 0 && len(out) > d.maxStrLen {
		return nil, errStringLength
	}
	return out, nil
}

// readVarInt reads an integer with an n-bit prefix (RFC 7541 §5.1) from
// the start of p. Its bounds are x/net's: more than 9 continuation bytes
// is an overflow.
func readVarInt(n byte, p []byte) (uint64, []byte, error) {
	if len(p) == 0 {
		return 0, nil, errNeedMore
	}
	mask := uint64(1)<<n - 1
	i := uint64(p[0]) & mask
	if i < mask {
		return i, p[1:], nil
	}
	var m uint
	for j := 1; j < len(p); j++ {
		b := p[j]
		i += uint64(b&0x7f) << m
		if b&0x80 == 0 {
			return i, p[j+1:], nil
		}
		m += 7
		if m >= 63 {
			return 0, nil, errVarintOverflow
		}
	}
	return 0, nil, errNeedMore
}

// Stateless reports whether decoding block would leave the dynamic table
// as it was: it holds only index references and literals not indexed
// (and parses whole). An encoder that wrote such a block for some fields
// writes the very same block for them again, as long as its own table
// does not change meanwhile.
func Stateless(block []byte) bool {
	for len(block) > 0 {
		b := block[0]
		var err error
		switch {
		case b&0x80 != 0:
			_, block, err = readVarInt(7, block)
		case b&0xe0 == 0: // without indexing (0000), never indexed (0001)
			var nameIdx uint64
			if nameIdx, block, err = readVarInt(4, block); err == nil && nameIdx == 0 {
				block, err = skipString(block)
			}
			if err == nil {
				block, err = skipString(block)
			}
		default: // indexing, or a table size update
			return false
		}
		if err != nil {
			return false
		}
	}
	return true
}

func skipString(p []byte) ([]byte, error) {
	n, p, err := readVarInt(7, p)
	if err != nil {
		return nil, err
	}
	if uint64(len(p)) < n {
		return nil, errNeedMore
	}
	return p[n:], nil
}
