package capture

import (
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// tcpdump -nn -tt -r prints a SYN one way from one interface and another
// from "any" (interface and direction first); both must be read.
func TestSYNLine(t *testing.T) {
	for _, line := range []string{
		"1795353243.516670 IP 10.244.1.1.60070 > 10.244.1.2.8080: Flags [S], seq 3149900750, win 64240, length 0",
		"1795353243.516670 veth24d1e91a Out IP 10.244.1.1.60070 > 10.244.1.2.8080: Flags [S], seq 3149900750, win 64240, length 0",
		"1795353243.516670 eth0  In  IP 10.244.1.1.60070 > 10.244.1.2.8080: Flags [S], seq 1, length 0",
	} {
		m := synLine.FindStringSubmatch(line)
		if m == nil || m[3] != "10.244.1.1" || m[4] != "60070" || m[5] != "10.244.1.2" || m[6] != "8080" {
			t.Errorf("%q: %v", line, m)
		}
	}
	if synLine.MatchString("1795353243.516670 IP 10.244.1.2.8080 > 10.244.1.1.60070: Flags [S.], seq 1") {
		t.Error("a SYN-ACK is not a SYN")
	}
}

// tcpdump -S's segments: data with a sequence range, a bare ACK, a FIN
// acknowledging data, a reset without an acknowledgement.
func TestSegmentLine(t *testing.T) {
	for _, tc := range []struct {
		line               string
		flags              string
		seq, end, ack      uint32
		hasAck, fin, reset bool
	}{
		{"1795353243.516670 IP 127.0.0.1.41234 > 127.0.0.1.8080: Flags [P.], seq 1000:1078, ack 5000, win 512, length 78", "P.", 1000, 1078, 5000, true, false, false},
		{"1795353243.516670 IP 127.0.0.1.8080 > 127.0.0.1.41234: Flags [.], ack 1078, win 512, length 0", ".", 0, 0, 1078, true, false, false},
		{"1795353243.516670 lo In IP 127.0.0.1.8080 > 127.0.0.1.41234: Flags [F.], seq 5100, ack 1078, win 512, length 0", "F.", 5100, 5100, 1078, true, true, false},
		{"1795353243.516670 IP 127.0.0.1.8080 > 127.0.0.1.41234: Flags [R], seq 5101, win 0, length 0", "R", 5101, 5101, 0, false, false, true},
	} {
		s, ok := parseSegment(tc.line)
		if !ok || s.Flags != tc.flags || s.Seq != tc.seq || s.SeqEnd != tc.end || s.Ack != tc.ack || s.HasAck != tc.hasAck ||
			s.Has('F') != tc.fin || s.Has('R') != tc.reset {
			t.Errorf("%q: %+v (ok %v)", tc.line, s, ok)
		}
	}
}

// tshark's field lines (H2's -T fields, as it prints them from a capture
// on "any": a packet twice, its copy without HTTP/2 fields): every class
// the frames can tell, each from the frames that make it.
func TestParseH2Fields(t *testing.T) {
	const port = "30090"
	lines := []string{
		// Stream 0: answered by HEADERS END_STREAM (1), by DATA END_STREAM
		// (3), cancelled by the client (5: timeout), refused (7), reset
		// INTERNAL_ERROR (9), two requests in one packet both answered.
		"1795662132.244898000|0|53169|1|0|0|||||",
		"1795662132.244947000|0|53169|1|0|0|||||",
		"1795662132.245062000|0|30090|1|1|0|||||",
		"1795662132.245419000|0|53169|0|1|0|4,8|0,0|0x00,0x00||",
		"1795662132.245511000|0|53169|0|1|0|1|1|0x05||",
		"1795662132.245514000|0|53169|0|1|0|||||",
		"1795662132.246000000|0|30090|0|1|0|4,4,1|0,0,1|0x00,0x01,0x05||",
		"1795662132.247000000|0|53169|0|1|0|1,0|3,3|0x04,0x01||",
		"1795662132.248000000|0|30090|0|1|0|1,0|3,3|0x04,0x01||",
		"1795662132.249000000|0|53169|0|1|0|1,1,1|5,7,9|0x05,0x05,0x05||",
		"1795662132.250000000|0|30090|0|1|0|3,3|7,9|0x00,0x00||0x00000007,0x00000002",
		"1795662133.250000000|0|53169|0|1|0|3|5|0x00||0x00000008",
		"1795662133.251000000|0|53169|0|1|0|1,1|11,13|0x05,0x05||",
		"1795662133.252000000|0|30090|0|1|0|1,1|11,13|0x05,0x05||",
		// Stream 1: GOAWAY naming 3 after three requests; 1 answered, 3
		// cut by the close, 5 (sent after) unprocessed.
		"1795662132.260000000|1|40000|1|0|0|||||",
		"1795662132.260100000|1|30090|1|1|0|||||",
		"1795662132.261000000|1|40000|0|1|0|1,1,1|1,3,5|0x05,0x05,0x05||",
		"1795662132.262000000|1|30090|0|1|0|7,1|0,1|0x00,0x05|3|",
		"1795662132.263000000|1|30090|0|1|1|||||",
		// Stream 2: a request, then the connection closes: no GOAWAY.
		"1795662132.270000000|2|40001|1|0|0|||||",
		"1795662132.270100000|2|30090|1|1|0|||||",
		"1795662132.271000000|2|40001|0|1|0|1|1|0x05||",
		// Stream 3: refused (a reset answers the SYN); stream 4: never
		// answered (the SYN and its retransmission).
		"1795662132.280000000|3|40002|1|0|0|||||",
		"1795662132.280100000|3|30090|0|1|1|||||",
		"1795662132.290000000|4|40003|1|0|0|||||",
		"1795662133.290000000|4|40003|1|0|0|||||",
	}
	w, err := parseH2Fields(strings.Join(lines, "\n"), port)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		report.ClassOK: 5, report.ClassTimeout: 1, report.ClassRefusedStream: 1, report.ClassRSTStream: 1,
		report.ClassGoAwayCut: 1, report.ClassGoAwayUnprocessed: 1, report.ClassClosedNoGoAway: 1,
		report.ClassRefused: 1, report.ClassConnectTimeout: 1,
	}
	if got := w.Classes(); !maps.Equal(got, want) {
		t.Errorf("classes %v\nwant    %v", got, want)
	}
	// Since keeps what began at or after t: here streams 2 to 4.
	since := w.Since(time.Unix(1795662132, 270000000)).Classes()
	if want := map[string]uint64{report.ClassClosedNoGoAway: 1, report.ClassRefused: 1, report.ClassConnectTimeout: 1}; !maps.Equal(since, want) {
		t.Errorf("since: %v, want %v", since, want)
	}
	if _, err := parseH2Fields("1795662132.250000000|0|30090|0|1|0|3|7|0x00||", port); err == nil {
		t.Error("an RST_STREAM without its code parsed")
	}
}

// tshark's DNS fields as the lab's node capture gave them: a search-list
// miss with the SOA minimum, an answer with its address, a SERVFAIL.
func TestParseDNSFields(t *testing.T) {
	out := `1795686929.525028000|naive-sts-0.naive-sts-pods.default.svc.default.svc.cluster.local|3||5
1795686929.525796000|naive-sts-0.naive-sts-pods.default.svc.cluster.local|0|10.244.2.4|
1795686930.425547000|naive-sts-9.naive-sts-pods.default.svc|2||
`
	got, err := parseDNSFields(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Rcode != 3 || got[0].NegativeTTL != 5 || len(got[0].A) != 0 ||
		got[1].Name != "naive-sts-0.naive-sts-pods.default.svc.cluster.local" || got[1].Rcode != 0 || len(got[1].A) != 1 || got[1].A[0].String() != "10.244.2.4" || got[1].NegativeTTL != -1 ||
		got[2].Rcode != 2 || !got[1].At.Equal(time.Unix(1795686929, 525796000)) {
		t.Errorf("%+v", got)
	}
	if _, err := parseDNSFields("1|x|y||\n"); err == nil {
		t.Error("a bad rcode parsed")
	}
}

// tcpdump -v prints an ICMP unreachable over four lines: the outer
// header with the time, the ICMP line naming its sender, the quoted IP
// header, and the quoted SYN with its ports (a capture of kube-proxy's
// reject of a Service address, taken on a scratch namespace's loopback).
func TestUnreachableLines(t *testing.T) {
	text := `1795747040.560512 lo    In  IP (tos 0x0, ttl 64, id 23206, offset 0, flags [DF], proto TCP (6), length 60)
    10.96.0.1.50386 > 10.96.0.1.80: Flags [S], cksum 0x14f0 (incorrect -> 0x80f2), seq 2033665953, win 65495, length 0
1795747040.561586 lo    In  IP (tos 0xc0, ttl 64, id 18692, offset 0, flags [none], proto ICMP (1), length 88)
    10.244.1.1 > 10.244.1.1: ICMP 10.96.0.1 tcp port 80 unreachable, length 68
	IP (tos 0x0, ttl 64, id 23207, offset 0, flags [DF], proto TCP (6), length 60)
    10.244.1.1.50386 > 10.96.0.1.80: Flags [S], cksum 0x14f0 (incorrect -> 0x7cf1), seq 2033665953, win 65495, length 0
1795747041.000001 eth0  In  IP (tos 0xc0, ttl 64, id 18693, offset 0, flags [none], proto ICMP (1), length 88)
    10.100.0.11 > 10.244.1.1: ICMP 10.100.0.11 udp port 53 unreachable, length 68
	IP (tos 0x0, ttl 64, id 1, offset 0, flags [DF], proto UDP (17), length 60)
    10.244.1.1.5353 > 10.100.0.11.53: 1234+ A? x. (20)
`
	got := parseUnreachables(text)
	want := Unreachable{At: time.Unix(1795747040, 561586000), From: netip.MustParseAddr("10.244.1.1"),
		Src: netip.MustParseAddrPort("10.244.1.1:50386"), Dst: netip.MustParseAddrPort("10.96.0.1:80")}
	if len(got) != 1 || got[0] != want {
		t.Errorf("got %+v, want only %+v (the SYN itself and a UDP quote are not TCP unreachables)", got, want)
	}
}
