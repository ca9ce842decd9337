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

// BenchmarkRecord: recording one result (two run histograms, the per-second
// row, counters) from parallel workers.
func BenchmarkRecord(b *testing.B) {
	rec := NewRecorder(8, 100)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		res := Result{Class: OK, Status: 200, Backend: "web-a"}
		i := 0
		for pb.Next() {
			i++
			res.Intended = time.Duration(i) * 50 * time.Microsecond
			res.Start = res.Intended + 10*time.Microsecond
			res.End = res.Start + 300*time.Microsecond
			rec.Record(i, &res)
		}
	})
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
