package capture

import (
	"io"
	"net"
	"os"
	"strconv"
	"testing"
)

// A capture of the headers alone still reads each segment's sequence
// numbers whole: the span its data segments cover is the bytes sent,
// though the capture kept none of them.
func TestHeadersKeepTheSequenceNumbers(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	c := StartHeaders(t, "", "lo", "tcp src port "+strconv.Itoa(port), 96)
	const size = 200_000
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		_, err = conn.Write(make([]byte, size))
		conn.Close()
		done <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, conn); err != nil || n != size {
		t.Fatalf("read %d bytes (%v), want %d", n, err, size)
	}
	conn.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The span the data segments cover, from the first's start to the
	// furthest end: a busy machine's loopback retransmits, and a sum would
	// count those twice (a CI run summed 214,848).
	var first uint32
	span, data := uint32(0), 0
	for _, s := range c.Segments() {
		if s.SeqEnd == s.Seq {
			continue
		}
		if data == 0 {
			first = s.Seq
		}
		data++
		span = max(span, s.SeqEnd-first)
	}
	if data == 0 || span != size {
		t.Fatalf("the headers of %d data segments from port %d span %d bytes, want %d", data, port, span, size)
	}
	if fi, err := os.Stat(c.pcap); err != nil || fi.Size() > size/4 {
		t.Fatalf("the capture file (%v) holds the payloads, not the headers alone", fi)
	}
}
