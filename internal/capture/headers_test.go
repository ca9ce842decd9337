package capture

import (
	"io"
	"net"
	"strconv"
	"testing"
)

// A capture of the headers alone still reads each segment's sequence
// numbers whole: the bytes a connection carried, summed over its data
// segments, are the bytes sent, though the capture kept none of them.
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
	carried := 0
	for _, s := range c.Segments() {
		carried += int(s.SeqEnd - s.Seq)
	}
	if carried != size {
		t.Fatalf("the headers say %d bytes went from port %d, want %d", carried, port, size)
	}
}
