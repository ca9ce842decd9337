package prober

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

// The set keeps each address once, in the order first seen, up to
// MaxDialled, and says when there were more; a slot notes an address it
// has noted before without the set's lock.
func TestDialledSet(t *testing.T) {
	s := &dialledSet{}
	slot := &dialSlot{dialled: s}
	for i := range MaxDialled + 2 {
		a := netip.MustParseAddrPort(fmt.Sprintf("10.0.0.%d:80", i+1))
		slot.noteDialled(a)
		slot.noteDialled(a)
	}
	s.add(netip.MustParseAddrPort("[::ffff:10.0.0.1]:80")) // the same, mapped
	got, more := s.list()
	if len(got) != MaxDialled || !more || got[0] != netip.MustParseAddrPort("10.0.0.1:80") || got[MaxDialled-1] != netip.MustParseAddrPort(fmt.Sprintf("10.0.0.%d:80", MaxDialled)) {
		t.Errorf("%v more=%v: want the first %d, once each, and more", got, more, MaxDialled)
	}
	var none *dialledSet
	none.add(got[0])
	if l, m := none.list(); l != nil || m {
		t.Errorf("a nil set listed %v %v", l, m)
	}
}

// A run's summary says where its connections went: the address given, on
// either engine; the address --connect-to names, the name never resolved;
// and what a name resolved to, as dialled.
func TestSummaryDialled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	run := func(t *testing.T, target string, engine Engine, mutate func(*Config)) Summary {
		t.Helper()
		cfg := DefaultConfig()
		u, err := ParseTarget(target)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Target, cfg.Rate, cfg.Duration, cfg.Engine = u, 50, 200*time.Millisecond, engine
		if mutate != nil {
			mutate(&cfg)
		}
		p, err := New(cfg, "rollprobe-test")
		if err != nil {
			t.Fatal(err)
		}
		sum, err := p.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	for _, e := range []Engine{EngineLoops, EngineGoroutines} {
		if sum := run(t, srv.URL+"/", e, nil); len(sum.Dialled) != 1 || sum.Dialled[0] != addr || sum.DialledMore {
			t.Errorf("%s: dialled %v (more %v), want %v", e, sum.Dialled, sum.DialledMore, addr)
		}
	}
	port := fmt.Sprint(addr.Port())
	sum := run(t, "http://edge.invalid:"+port+"/", EngineGoroutines, func(c *Config) { c.ConnectTo = addr.String() })
	if len(sum.Dialled) != 1 || sum.Dialled[0] != addr {
		t.Errorf("--connect-to: dialled %v, want %v", sum.Dialled, addr)
	}
	sum = run(t, "http://localhost:"+port+"/", EngineGoroutines, nil)
	found := false
	for _, a := range sum.Dialled {
		found = found || a == addr
		if !a.Addr().IsLoopback() || a.Port() != addr.Port() {
			t.Errorf("localhost dialled %v: not a loopback address at port %s", a, port)
		}
	}
	if !found {
		t.Errorf("localhost: dialled %v, want %v among them", sum.Dialled, addr)
	}
}

// A union keeps each address once, in the order first seen, within
// MaxDialled, and is incomplete when either side was or it overflowed.
func TestUnionDialled(t *testing.T) {
	addrs := func(from, to int) []netip.AddrPort {
		var out []netip.AddrPort
		for i := from; i <= to; i++ {
			out = append(out, netip.MustParseAddrPort(fmt.Sprintf("10.0.0.%d:80", i)))
		}
		return out
	}
	a := addrs(1, 3)
	got, more := UnionDialled(a, false, addrs(2, 4), false)
	if fmt.Sprint(got) != fmt.Sprint(addrs(1, 4)) || more {
		t.Errorf("1-3 and 2-4: %v more=%v, want 1-4, complete", got, more)
	}
	if len(a) != 3 {
		t.Errorf("the union changed its first list: %v", a)
	}
	if _, more := UnionDialled(a, false, nil, true); !more {
		t.Error("an incomplete side made a complete union")
	}
	got, more = UnionDialled(addrs(1, 5), false, addrs(6, 9), false)
	if len(got) != MaxDialled || !more || got[MaxDialled-1] != addrs(8, 8)[0] {
		t.Errorf("nine addresses: %v more=%v, want the first %d and more", got, more, MaxDialled)
	}
	if got, more = UnionDialled(nil, false, nil, false); got != nil || more {
		t.Errorf("two empty lists: %v more=%v", got, more)
	}
}
