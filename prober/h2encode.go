package prober

import (
	"bytes"
	"unsafe"

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
// field per request was 4% of an h2 probe's CPU. The ID goes after them:
// the connection's first ID is indexed, name and value, so that every
// later one is a literal never indexed whose name is a reference to that
// entry (RFC 7541 §6.2.3), which no table keeps. A new name every time
// cost the server ~10 bytes more a request to read and Huffman-decode:
// request header blocks of 25-27 bytes where h2load sends 5, and nginx's
// CPU a request 5-20% above its under h2load (bench/RESULTS-h2.md).
type h2RequestEncoder struct {
	enc *hpack.Encoder
	buf bytes.Buffer
	// constant is the block of the fields at key, once it is stateless;
	// nil before. key: the request's fields, which every worker's copy of
	// the request shares.
	constant []byte
	key      *hpack.HeaderField
	// idOffered: the ID field was written once for indexing (the encoder
	// indexes it if its table has room); from then on it is sensitive.
	idOffered bool
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
	e.key, e.constant, e.idOffered = nil, nil, false
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
	}
	// The fields' bytes are kept once they changed nothing in the table,
	// and nothing after them in the block did either: an insertion (the
	// ID offered for indexing) renumbers the entries they refer to.
	keep := false
	if e.constant != nil {
		e.buf.Write(e.constant)
	} else {
		for i := range req.fields {
			_ = e.enc.WriteField(req.fields[i])
		}
		keep = hpackdec.Stateless(e.buf.Bytes())
	}
	fieldsEnd := e.buf.Len()
	if !e.idOffered {
		// The first: offered for indexing, name and value.
		_ = e.enc.WriteField(hpack.HeaderField{Name: req.idName, Value: string(idValue)})
		e.idOffered, keep = true, false
	} else {
		// Never indexed (so that no proxy on the way indexes a value that
		// is new every time): the encoder writes it so, its name a
		// reference when its table has the name, and never adds it to
		// the table, so a view of idValue's bytes will do.
		_ = e.enc.WriteField(hpack.HeaderField{Name: req.idName, Value: unsafe.String(unsafe.SliceData(idValue), len(idValue)), Sensitive: true})
	}
	if keep {
		e.constant = bytes.Clone(e.buf.Bytes()[:fieldsEnd])
	}
	return e.buf.Bytes()
}
