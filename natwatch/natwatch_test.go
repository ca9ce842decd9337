package natwatch

import (
	"net/netip"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// A port carries several connections over a run: a fresh request's is the
// one created closest to its start (within a second), a kept-alive
// request's the last one created before it; another destination or
// another source address is another connection.
func TestLookup(t *testing.T) {
	tb := NewTable()
	svc := ap("10.96.0.10:80")
	tb.Add(Conn{Src: ap("10.0.0.1:40000"), Orig: svc, Dest: ap("10.244.1.5:8080"), At: t0})
	tb.Add(Conn{Src: ap("10.0.0.1:40000"), Orig: svc, Dest: ap("10.244.2.7:8080"), At: t0.Add(30 * time.Second)})
	tb.Add(Conn{Src: ap("10.0.0.1:40000"), Orig: ap("10.96.0.11:80"), Dest: ap("10.244.9.9:8080"), At: t0.Add(30 * time.Second)})
	for _, tc := range []struct {
		name  string
		src   netip.AddrPort
		start time.Time
		fresh bool
		want  string // "" for no match
	}{
		{"fresh, first", ap("10.0.0.1:40000"), t0.Add(-2 * time.Millisecond), true, "10.244.1.5:8080"},
		{"fresh, second", ap("10.0.0.1:40000"), t0.Add(30*time.Second + time.Millisecond), true, "10.244.2.7:8080"},
		{"fresh, none near", ap("10.0.0.1:40000"), t0.Add(10 * time.Second), true, ""},
		{"kept alive on the first", ap("10.0.0.1:40000"), t0.Add(20 * time.Second), false, "10.244.1.5:8080"},
		{"kept alive on the second", ap("10.0.0.1:40000"), t0.Add(50 * time.Second), false, "10.244.2.7:8080"},
		{"another source address", ap("10.0.0.2:40000"), t0, true, ""},
		{"another port", ap("10.0.0.1:40001"), t0, true, ""},
	} {
		c, ok := tb.Lookup(tc.src, svc, tc.start, tc.fresh)
		got := ""
		if ok {
			got = c.Dest.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if tb.Status().Conns != 3 {
		t.Errorf("status %+v", tb.Status())
	}
}
