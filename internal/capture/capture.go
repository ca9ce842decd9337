// Package capture runs tcpdump for tests: a packet capture is the referee
// nobody here wrote, for counts (fresh connections = SYNs seen) and for
// where each connection went. It needs root and Debian's tcpdump.
package capture

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SYNFilter selects the client's connection attempts (SYN without ACK),
// retransmissions included.
const SYNFilter = "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn"

// Available says why a capture cannot run here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("a packet capture needs root")
	}
	if _, err := exec.LookPath("tcpdump"); err != nil {
		return errors.New("tcpdump is not installed (apt-get install tcpdump)")
	}
	return nil
}

// Capture is a running tcpdump, ours by PID.
type Capture struct {
	t      testing.TB
	cmd    *exec.Cmd
	pcap   string
	stderr bytes.Buffer
}

// Start captures on iface what filter selects, inside network namespace
// netns ("" for this one), and returns once tcpdump is listening. The
// capture is stopped by PID when the test ends, whatever its outcome.
//
// Not --immediate-mode: it makes libpcap use TPACKET_V2, whose ring has
// one fixed slot per packet sized for the snapshot length: 128 slots in
// the 64 MiB asked for here, so a busy machine that keeps tcpdump off the
// CPU for a few milliseconds of the lab's traffic drops packets (a CI run
// lost 98 of an h2 test's). TPACKET_V3 packs packets into blocks (hundreds
// of thousands fit) and hands a block over when it is full or a second
// after it opened (tcpdump's timeout): Stop waits that second out.
func Start(t testing.TB, netns, iface, filter string) *Capture {
	t.Helper()
	return StartHeaders(t, netns, iface, filter, 0)
}

// StartHeaders is Start keeping only the first snaplen bytes of each
// packet (0: all of it): enough for the headers, whose sequence numbers
// and lengths Segments reads, at a fraction of the cost when the
// payloads are many and large (a busy lab's TLS traffic).
func StartHeaders(t testing.TB, netns, iface, filter string, snaplen int) *Capture {
	t.Helper()
	c := &Capture{t: t, pcap: filepath.Join(t.TempDir(), "capture.pcap")}
	argv := []string{"tcpdump", "-i", iface, "-nn", "-U", "-B", "65536", "-w", c.pcap}
	if snaplen > 0 {
		argv = append(argv, "-s", strconv.Itoa(snaplen))
	}
	argv = append(argv, filter)
	if netns != "" { // ip netns exec execs tcpdump: the PID stays tcpdump's
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	c.cmd = exec.Command(argv[0], argv[1:]...)
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: kill ends the file before it is kept.
	t.Cleanup(func() { c.keepIfFailed(t) })
	t.Cleanup(c.kill)
	for i := 0; ; i++ { // tcpdump writes the file header once it listens
		if fi, err := os.Stat(c.pcap); err == nil && fi.Size() > 0 {
			return c
		}
		if i == 100 {
			t.Fatalf("tcpdump did not start: %s", c.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// blockTimeout is how long libpcap's kernel ring may hold a captured
// packet before handing it to tcpdump (tcpdump's 1 s read timeout),
// with room for tcpdump to be scheduled on a busy machine.
const blockTimeout = 1500 * time.Millisecond

// Stop ends the capture once its file has stopped growing for longer than
// the ring may hold a packet (20 s at most): a packet still in the ring
// when tcpdump ends is lost without being counted as dropped. It may be
// called more than once.
func (c *Capture) Stop() {
	const tick = 50 * time.Millisecond
	last, still := int64(-1), 0
	for range 400 {
		if c.cmd.ProcessState != nil {
			return
		}
		fi, err := os.Stat(c.pcap)
		if err == nil && fi.Size() == last {
			if still++; time.Duration(still)*tick >= blockTimeout {
				break
			}
		} else if err == nil {
			last, still = fi.Size(), 0
		}
		time.Sleep(tick)
	}
	c.kill()
}

// KeepDirEnv names the environment variable that, when set to a directory,
// keeps the capture of every failed test there: a referee's disagreement
// that shows once in many runs is explained from its packets, not guessed.
const KeepDirEnv = "ROLLPROBE_KEEP_CAPTURES"

// keepIfFailed copies the capture into $ROLLPROBE_KEEP_CAPTURES when the
// test failed, named after the test.
func (c *Capture) keepIfFailed(t testing.TB) {
	dir := os.Getenv(KeepDirEnv)
	if dir == "" || !t.Failed() {
		return
	}
	name := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), "_")
	dst := filepath.Join(dir, fmt.Sprintf("%s-%d.pcap", name, time.Now().UnixNano()))
	data, err := os.ReadFile(c.pcap)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(dst, data, 0o644)
	}
	if err != nil {
		t.Logf("keeping the capture: %v", err)
		return
	}
	t.Logf("capture kept: %s", dst)
}

// kill stops tcpdump (SIGTERM, by PID) and reaps it, once.
func (c *Capture) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		_ = c.cmd.Wait()
	}
}

// SYN is one captured connection attempt.
type SYN struct {
	At       time.Time // the capture's clock, the same as the prober's here
	Src, Dst netip.AddrPort
}

// synLine matches tcpdump's line for a SYN; a capture on "any" puts the
// interface and direction ("veth1 Out") before "IP".
var synLine = regexp.MustCompile(`^([0-9]+)\.([0-9]+) (?:\S+\s+(?:In|Out|M|P|B)\s+)?IP ([0-9.]+)\.([0-9]+) > ([0-9.]+)\.([0-9]+): Flags \[S\]`)

// SYNs stops the capture and returns every SYN in it, in capture order.
func (c *Capture) SYNs() []SYN {
	c.t.Helper()
	c.Stop()
	out, err := exec.Command("tcpdump", "-nn", "-tt", "-r", c.pcap).Output()
	if err != nil {
		c.t.Fatalf("tcpdump -r: %v", err)
	}
	var syns []SYN
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := synLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		sec, _ := strconv.ParseInt(m[1], 10, 64)
		usec, _ := strconv.ParseInt(m[2], 10, 64)
		src, err1 := addrPort(m[3], m[4])
		dst, err2 := addrPort(m[5], m[6])
		if err1 != nil || err2 != nil {
			continue
		}
		syns = append(syns, SYN{At: time.Unix(sec, usec*1000), Src: src, Dst: dst})
	}
	return syns
}

func addrPort(ip, port string) (netip.AddrPort, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// Segment is one captured TCP segment, with absolute sequence numbers.
type Segment struct {
	At       time.Time
	Src, Dst netip.AddrPort
	Flags    string // tcpdump's: "S", "S.", ".", "P.", "F.", "R", "R." ...
	Seq      uint32 // first sequence number (its only one without data)
	SeqEnd   uint32 // one past the last data byte (Seq when no data)
	Ack      uint32
	HasAck   bool
}

// Has reports whether the segment carries flag (one of "SFRP.").
func (s Segment) Has(flag byte) bool {
	for i := 0; i < len(s.Flags); i++ {
		if s.Flags[i] == flag {
			return true
		}
	}
	return false
}

// segLine matches tcpdump -S's line for a TCP segment.
var segLine = regexp.MustCompile(`^([0-9]+)\.([0-9]+) (?:\S+\s+(?:In|Out|M|P|B)\s+)?IP ([0-9.]+)\.([0-9]+) > ([0-9.]+)\.([0-9]+): Flags \[([^\]]*)\](?:, seq ([0-9]+)(?::([0-9]+))?)?(?:, ack ([0-9]+))?`)

// Segments stops the capture and returns every TCP segment in it, in
// capture order, with absolute sequence numbers.
func (c *Capture) Segments() []Segment {
	c.t.Helper()
	c.Stop()
	out, err := exec.Command("tcpdump", "-nn", "-tt", "-S", "-r", c.pcap).Output()
	if err != nil {
		c.t.Fatalf("tcpdump -r: %v", err)
	}
	var segs []Segment
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if s, ok := parseSegment(sc.Text()); ok {
			segs = append(segs, s)
		}
	}
	return segs
}

func parseSegment(line string) (Segment, bool) {
	m := segLine.FindStringSubmatch(line)
	if m == nil {
		return Segment{}, false
	}
	sec, _ := strconv.ParseInt(m[1], 10, 64)
	usec, _ := strconv.ParseInt(m[2], 10, 64)
	src, err1 := addrPort(m[3], m[4])
	dst, err2 := addrPort(m[5], m[6])
	if err1 != nil || err2 != nil {
		return Segment{}, false
	}
	s := Segment{At: time.Unix(sec, usec*1000), Src: src, Dst: dst, Flags: m[7]}
	if m[8] != "" {
		v, _ := strconv.ParseUint(m[8], 10, 32)
		s.Seq, s.SeqEnd = uint32(v), uint32(v)
		if m[9] != "" {
			e, _ := strconv.ParseUint(m[9], 10, 32)
			s.SeqEnd = uint32(e)
		}
	}
	if m[10] != "" {
		v, _ := strconv.ParseUint(m[10], 10, 32)
		s.Ack, s.HasAck = uint32(v), true
	}
	return s, true
}

// Unreachable is a captured ICMP destination unreachable for a TCP SYN:
// who sent it (From) and the SYN it quotes (Src to Dst, as it left: a
// Service address kube-proxy rejected is quoted before any rewrite).
type Unreachable struct {
	At       time.Time
	From     netip.Addr
	Src, Dst netip.AddrPort
}

// icmpHead, icmpLine and quotedSYN match tcpdump -v's lines for an ICMP
// unreachable: the outer header's line (the time), the ICMP line, and,
// after the quoted packet's IP header line, its TCP line.
var (
	icmpHead  = regexp.MustCompile(`^([0-9]+)\.([0-9]+) `)
	icmpLine  = regexp.MustCompile(`^\s+([0-9.]+) > [0-9.]+: ICMP .* unreachable`)
	quotedSYN = regexp.MustCompile(`^\s+([0-9.]+)\.([0-9]+) > ([0-9.]+)\.([0-9]+): Flags \[S\]`)
)

// Unreachables stops the capture and returns every ICMP unreachable in
// it that quotes a TCP SYN, in capture order.
func (c *Capture) Unreachables() []Unreachable {
	c.t.Helper()
	c.Stop()
	out, err := exec.Command("tcpdump", "-nn", "-tt", "-v", "-r", c.pcap).Output()
	if err != nil {
		c.t.Fatalf("tcpdump -r: %v", err)
	}
	return parseUnreachables(string(out))
}

func parseUnreachables(text string) []Unreachable {
	var out []Unreachable
	var at time.Time
	var from netip.Addr
	for _, line := range strings.Split(text, "\n") {
		if m := icmpHead.FindStringSubmatch(line); m != nil {
			sec, _ := strconv.ParseInt(m[1], 10, 64)
			usec, _ := strconv.ParseInt(m[2], 10, 64)
			at, from = time.Unix(sec, usec*1000), netip.Addr{}
			continue
		}
		if m := icmpLine.FindStringSubmatch(line); m != nil {
			from, _ = netip.ParseAddr(m[1])
			continue
		}
		if m := quotedSYN.FindStringSubmatch(line); m != nil && from.IsValid() {
			src, err1 := addrPort(m[1], m[2])
			dst, err2 := addrPort(m[3], m[4])
			if err1 == nil && err2 == nil {
				out = append(out, Unreachable{At: at, From: from, Src: src, Dst: dst})
			}
			from = netip.Addr{}
		}
	}
	return out
}

var droppedLine = regexp.MustCompile(`([0-9]+) packets? dropped by kernel`)

// Dropped stops the capture and returns how many packets the kernel
// dropped before tcpdump read them (a referee that missed packets cannot
// judge): tcpdump's own count, printed when it ends.
func (c *Capture) Dropped() int {
	c.Stop()
	m := droppedLine.FindStringSubmatch(c.stderr.String())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Text stops the capture and returns tcpdump's lines for it (-nn -tt), the
// last `last` of them when there are more.
func (c *Capture) Text(last int) string {
	c.Stop()
	out, err := exec.Command("tcpdump", "-nn", "-tt", "-r", c.pcap).Output()
	if err != nil {
		return "tcpdump -r: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > last {
		lines = append([]string{fmt.Sprintf("(%d earlier lines left out)", len(lines)-last)}, lines[len(lines)-last:]...)
	}
	return strings.Join(lines, "\n")
}
