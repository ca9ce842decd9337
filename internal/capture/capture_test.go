package capture

import "testing"

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
