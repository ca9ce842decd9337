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
