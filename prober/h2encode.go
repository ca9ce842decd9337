package prober

import (
	"bytes"

	"golang.org/x/net/http2/hpack"

	"github.com/rollprobe/rollprobe/internal/hpackdec"
)

// h2RequestEncoder writes the request header blocks of one connection
// (both engines).
//
// A request's fields are the same every time but for its ID. Once the
// connection's HPACK encoder writes those fields as index references only
// (from the second request on: the first indexes them), writing them
// changes nothing, so the bytes are kept and reused: an encode of every
// field per request was 4% of an h2 probe's CPU. The ID goes after them as
// a literal never indexed, which no table keeps either.
type h2RequestEncoder struct {
	enc *hpack.Encoder
	buf bytes.Buffer
	// constant is the block of the fields at key, once it is stateless;
	// nil before. key: the request's fields, which every worker's copy of
	// the request shares.
	constant []byte
	key      *hpack.HeaderField
	idName   []byte // the ID's name, encoded as a string literal
}

func newH2RequestEncoder() *h2RequestEncoder {
	e := &h2RequestEncoder{}
	e.enc = hpack.NewEncoder(&e.buf)
	return e
}

// peerTableSize applies the server's SETTINGS_HEADER_TABLE_SIZE, the most
// its decoder keeps: the encoder's table shrinks to it (saying so at the
// start of the next block, RFC 7541 §4.2), and a server that keeps
// nothing (0) gets literals only. x/net's Transport does the same; without
// it a server advertising less than 4,096 would find references to entries
// it never kept, a COMPRESSION_ERROR on every connection. The kept block
// was written against the old table: it goes.
func (e *h2RequestEncoder) peerTableSize(v uint32) {
	e.enc.SetMaxDynamicTableSizeLimit(v)
	e.key, e.constant = nil, nil
}

// block is req's header block with idValue as its ID: valid until the next
// call.
func (e *h2RequestEncoder) block(req *h2Request, idValue []byte) []byte {
	e.buf.Reset()
	if len(req.fields) == 0 || e.key != &req.fields[0] {
		e.key, e.constant = nil, nil
		if len(req.fields) > 0 {
			e.key = &req.fields[0]
		}
		e.idName = appendHPACKString(e.idName[:0], req.idName)
	}
	if e.constant != nil {
		e.buf.Write(e.constant)
	} else {
		for i := range req.fields {
			_ = e.enc.WriteField(req.fields[i])
		}
		if hpackdec.Stateless(e.buf.Bytes()) {
			e.constant = bytes.Clone(e.buf.Bytes())
		}
	}
	// RFC 7541 §6.2.3: never indexed, a new name (so that no proxy on
	// the way indexes a value that is new every time).
	e.buf.WriteByte(0x10)
	e.buf.Write(e.idName)
	e.buf.Write(appendHPACKString(e.buf.AvailableBuffer(), string(idValue)))
	return e.buf.Bytes()
}

// appendHPACKString appends s as an HPACK string literal (RFC 7541 §5.2),
// Huffman-coded when that is shorter, as x/net's encoder writes it.
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
