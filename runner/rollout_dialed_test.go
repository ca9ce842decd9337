package runner

import (
	"testing"

	"github.com/rollprobe/rollprobe/prober"
)

// The entry of a run with --connect-to is judged by the address connected
// to, not by the name in the URL (which no Service address matches).
func TestDialedURL(t *testing.T) {
	u, err := prober.ParseTarget("https://shop.example.com/cart")
	if err != nil {
		t.Fatal(err)
	}
	cfg := prober.Config{Target: u}
	if got := dialedURL(cfg); got != u {
		t.Fatalf("without --connect-to: %v, want the target itself", got)
	}
	cfg.ConnectTo = "10.100.0.11:30443"
	got := dialedURL(cfg)
	if got.Host != "10.100.0.11:30443" || got.Hostname() != "10.100.0.11" || got.Port() != "30443" || got.Scheme != "https" || got.Path != "/cart" {
		t.Fatalf("with --connect-to: %v", got)
	}
	if u.Host != "shop.example.com" {
		t.Fatalf("the target was changed: %v", u)
	}
}
