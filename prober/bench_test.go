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

// BenchmarkStreamAdd: what recording a result costs a worker. The reader's
// side of a tick (taking the buffer; merging is BenchmarkMerge) runs every
// 1,000 results, in line, so the buffer is reused as in a run.
func BenchmarkStreamAdd(b *testing.B) {
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
			buf := s.take()
			*buf = (*buf)[:0]
		}
	}
}

// BenchmarkMerge: what the tick spends per result merged (two run
// histograms, the per-second rows and their histogram, counters): work
// taken off the workers.
func BenchmarkMerge(b *testing.B) {
	rec := NewRecorder(100)
	s := rec.NewStream()
	res := Result{Class: OK, Status: 200, Backend: "web-a"}
	const perTick = 1000
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		res.Intended = time.Duration(i) * 50 * time.Microsecond
		res.Start = res.Intended + 10*time.Microsecond
		res.End = res.Start + 300*time.Microsecond
		s.Add(&res)
		if i%perTick == perTick-1 {
			rec.Tick(res.End)
		}
	}
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
