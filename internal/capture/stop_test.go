package capture

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// captureUDP starts a capture of datagrams to a UDP socket of ours on
// loopback and returns a function sending n of them.
func captureUDP(t *testing.T) (*Capture, func(n int)) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	port := sink.LocalAddr().(*net.UDPAddr).Port
	c := Start(t, "", "lo", "udp dst port "+strconv.Itoa(port))
	send := func(n int) {
		conn, err := net.DialUDP("udp", nil, sink.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		payload := make([]byte, 100)
		for range n {
			if _, err := conn.Write(payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	return c, send
}

// captured counts the packets in the capture's file.
func captured(t *testing.T, c *Capture) int {
	t.Helper()
	out, err := exec.Command("tcpdump", "-nn", "-r", c.pcap).Output()
	if err != nil {
		t.Fatalf("tcpdump -r: %v", err)
	}
	return strings.Count(string(out), "\n")
}

// A referee that misses packets while the machine keeps it off the CPU
// cannot judge: a burst sent while tcpdump is stopped is all captured.
// (With --immediate-mode libpcap's ring held 511 packets on lo, 128 on
// "any": this captured 511.)
func TestCaptureKeepsABurstWhileStopped(t *testing.T) {
	c, send := captureUDP(t)
	const burst = 20000
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// A stopped tcpdump holds SIGTERM pending: continued before the
	// capture's own cleanup ends it (cleanups run last first), whatever
	// the test's outcome.
	t.Cleanup(func() { _ = c.cmd.Process.Signal(syscall.SIGCONT) })
	send(burst)
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if n := c.Dropped(); n != 0 {
		t.Errorf("tcpdump dropped %d packets", n)
	}
	if n := captured(t, c); n != burst {
		t.Errorf("captured %d datagrams, sent %d", n, burst)
	}
}

// Packets sent just before Stop are in the file: the kernel's ring holds
// them up to a second before tcpdump sees them, and ending tcpdump then
// loses them uncounted.
func TestCaptureStopKeepsTheLastPackets(t *testing.T) {
	c, send := captureUDP(t)
	send(10)
	c.Stop()
	if n := captured(t, c); n != 10 {
		t.Errorf("captured %d datagrams, sent 10", n)
	}
}
