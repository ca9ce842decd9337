package prober

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/faultserver"
)

// captureSYNs runs tcpdump on loopback for the SYNs (without ACK) sent to
// port while f runs, and returns how many it saw: a referee for fresh
// connections that nobody here wrote. It needs root and tcpdump.
func captureSYNs(t *testing.T, port string, f func()) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a packet capture needs root")
	}
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Skip("tcpdump is not installed")
	}
	pcap := filepath.Join(t.TempDir(), "syn.pcap")
	dump := exec.Command("tcpdump", "-i", "lo", "-nn", "-U", "--immediate-mode", "-w", pcap,
		"tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn and dst port "+port)
	var stderr bytes.Buffer
	dump.Stderr = &stderr
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ { // tcpdump writes the file header once it listens
		if fi, err := os.Stat(pcap); err == nil && fi.Size() > 0 {
			break
		}
		if i == 100 {
			_ = dump.Process.Kill()
			t.Fatalf("tcpdump did not start: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	f()
	// tcpdump writes behind the traffic on a busy machine: stop it once
	// its file has not grown for half a second (10 s at most).
	last, still := int64(-1), 0
	for range 200 {
		fi, err := os.Stat(pcap)
		if err == nil && fi.Size() == last {
			if still++; still == 10 {
				break
			}
		} else if err == nil {
			last, still = fi.Size(), 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = dump.Process.Signal(syscall.SIGTERM)
	_ = dump.Wait()
	out, err := exec.Command("tcpdump", "-nn", "-r", pcap).Output()
	if err != nil {
		t.Fatalf("tcpdump -r: %v", err)
	}
	return strings.Count(string(out), "Flags [S]")
}

// --conn mixed=0.5 sends half of the requests on fresh connections and
// half on kept-alive ones: the fresh ones never close the worker's
// kept-alive connection. The wire's SYNs are the referee for the fresh
// connections counted.
func TestMixedKeepsItsKeptAliveConnections(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	_, port, _ := strings.Cut(srv.Addr(), ":")
	var snap Snapshot
	syns := captureSYNs(t, port, func() {
		_, snap = probe(t, srv.URL("/ok"), func(c *Config) {
			c.Rate, c.Duration, c.Conn = 200, 2*time.Second, ConnMode{FreshFraction: 0.5}
		})
	})
	tot := snap.Totals
	if uint64(syns) != tot.Fresh {
		t.Fatalf("the wire saw %d SYNs, the report counts %d fresh connections", syns, tot.Fresh)
	}
	// 400 requests, half fresh: the kept-alive half reuses its
	// connections (each worker's first kept-alive request dials).
	if sent := tot.Sent(); tot.Classes[OK] != sent || tot.Reused < sent*2/5 {
		t.Fatalf("%d sent, %d fresh, %d reused: want about half reused (a fresh request must not close the kept-alive one)",
			sent, tot.Fresh, tot.Reused)
	}
}
