package prober

import (
	"bufio"
	"bytes"
	"testing"
	"time"
)

// BenchmarkReadResponse: parsing a typical small response with a backend header.
func BenchmarkReadResponse(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Sat, 21 Nov 2026 09:00:00 GMT\r\n" +
		"Content-Type: text/plain\r\nContent-Length: 17\r\nConnection: keep-alive\r\nX-Pod-Name: web-7d9f8-abcde\r\n\r\nhello from web-7\n")
	r := bytes.NewReader(raw)
	br := bufio.NewReaderSize(r, readBufferSize)
	var scratch []byte
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(raw)
		br.Reset(r)
		resp, _, err := readResponse(br, false, "x-pod-name", scratch)
		if err != nil || resp.status != 200 {
			b.Fatal(err)
		}
		scratch = resp.backend[:0]
	}
}

// recordEvery calls tick after every 1,000 results added to a stream, each
// a 300 µs response to a request due every 50 µs.
func recordEvery(b *testing.B, tick func(rec *Recorder, s *Stream, now time.Duration)) {
	rec := NewRecorder(100)
	s := rec.NewStream()
	res := Result{Class: OK, Status: 200, Backend: "web-a"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		res.Intended = time.Duration(i) * 50 * time.Microsecond
		res.Start = res.Intended + 10*time.Microsecond
		res.End = res.Start + 300*time.Microsecond
		s.Add(&res)
		if i%1000 == 999 {
			tick(rec, s, res.End)
		}
	}
}

// BenchmarkStreamAdd: what recording a result costs a worker. Only the
// reader's side of a tick that hands the buffer back runs (in line), so the
// buffer is reused as in a run; merging is BenchmarkMerge.
func BenchmarkStreamAdd(b *testing.B) {
	recordEvery(b, func(_ *Recorder, s *Stream, _ time.Duration) {
		buf := s.take()
		*buf = (*buf)[:0]
	})
}

// BenchmarkMerge: what the tick spends per result merged (two run
// histograms, the per-second rows and their histogram, counters), work
// taken off the workers, plus the Add.
func BenchmarkMerge(b *testing.B) {
	recordEvery(b, func(rec *Recorder, _ *Stream, now time.Duration) { rec.Tick(now) })
}

func BenchmarkBuildRequest(b *testing.B) {
	c := DefaultConfig()
	c.Target, _ = ParseTarget("http://svc.ns:8080/healthz")
	tpl := newRequestTemplate(&c, "feedc0de", "rollprobe/bench")
	var buf []byte
	b.ReportAllocs()
	for i := uint64(0); b.Loop(); i++ {
		buf = tpl.build(buf[:0], i, false)
	}
}
