package agent

import "testing"

// TestIPPoolRoundRobin: a released address is the last to be handed out
// again, and the pool uses every host number before failing.
func TestIPPoolRoundRobin(t *testing.T) {
	p, err := newIPPool("10.244.0.0/24", "10.244.0.1")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.get()
	b, _ := p.get()
	if a != "10.244.0.10" || b != "10.244.0.11" {
		t.Fatalf("first addresses %s %s", a, b)
	}
	p.put(a)
	c, _ := p.get()
	if c != "10.244.0.12" {
		t.Fatalf("after releasing %s got %s, want the next address, not the released one", a, c)
	}
	seen := map[string]bool{b: true, c: true}
	for {
		ip, err := p.get()
		if err != nil {
			break
		}
		if seen[ip] {
			t.Fatalf("%s handed out twice", ip)
		}
		seen[ip] = true
	}
	if len(seen) != lastHost-firstHost+1 {
		t.Fatalf("%d addresses handed out, want %d", len(seen), lastHost-firstHost+1)
	}
	if _, err := newIPPool("bogus", ""); err == nil {
		t.Fatal("bad CIDR accepted")
	}
}
