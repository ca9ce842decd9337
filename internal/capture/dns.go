package capture

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// DNSAnswer is one DNS response to an A question, as Wireshark's DNS
// dissector (tshark) decodes it.
type DNSAnswer struct {
	At    time.Time
	Name  string // the question's name, without the final dot
	Rcode int    // 0 NOERROR, 3 NXDOMAIN
	A     []netip.Addr
	// NegativeTTL is the SOA minimum of the authority section (how long a
	// "no such name" may be cached, RFC 2308); -1 when there is none.
	NegativeTTL int
}

// DNS stops the capture and decodes its responses to A questions.
func (c *Capture) DNS() []DNSAnswer {
	c.t.Helper()
	c.Stop()
	out, err := exec.Command("tshark", "-r", c.pcap, "-n", "-Y", "dns.flags.response == 1 && dns.qry.type == 1",
		"-T", "fields", "-E", "separator=|",
		"-e", "frame.time_epoch", "-e", "dns.qry.name", "-e", "dns.flags.rcode", "-e", "dns.a", "-e", "dns.soa.minimum_ttl").Output()
	if err != nil {
		c.t.Fatalf("tshark -r: %v", err)
	}
	answers, err := parseDNSFields(string(out))
	if err != nil {
		c.t.Fatal(err)
	}
	return answers
}

// parseDNSFields reads tshark's field lines (see DNS); a field with
// several values lists them with commas.
func parseDNSFields(out string) ([]DNSAnswer, error) {
	var answers []DNSAnswer
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 5 {
			return nil, fmt.Errorf("tshark dns line %q: want 5 fields", line)
		}
		at, err := epoch(f[0])
		if err != nil {
			return nil, err
		}
		rcode, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("tshark dns line %q: rcode: %w", line, err)
		}
		a := DNSAnswer{At: at, Name: strings.TrimSuffix(f[1], "."), Rcode: rcode, NegativeTTL: -1}
		for _, s := range splitNonEmpty(f[3]) {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("tshark dns line %q: %w", line, err)
			}
			a.A = append(a.A, ip)
		}
		if ttl := splitNonEmpty(f[4]); len(ttl) > 0 {
			if a.NegativeTTL, err = strconv.Atoi(ttl[0]); err != nil {
				return nil, fmt.Errorf("tshark dns line %q: SOA minimum: %w", line, err)
			}
		}
		answers = append(answers, a)
	}
	return answers, nil
}
