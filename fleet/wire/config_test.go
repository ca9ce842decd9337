package wire

import (
	"testing"

	"github.com/rollprobe/rollprobe/prober"
)

// What a prober pod runs is what the CLI was asked for: the protocol and
// the h2 pool too.
func TestProberConfigRoundTrip(t *testing.T) {
	cfg := prober.DefaultConfig()
	cfg.Target, _ = prober.ParseTarget("https://web.example")
	cfg.Protocol, cfg.Connections, cfg.Insecure, cfg.GRPCMethod, cfg.GRPCClient = prober.GRPC, 3, true, "lab.Echo/Say", prober.GRPCClientGo
	cmd, err := ConfigCommand(FromConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := ParseConfigCommand(cmd[len("config ") : len(cmd)-1])
	if err != nil {
		t.Fatal(err)
	}
	got, err := pc.Config()
	if err != nil {
		t.Fatal(err)
	}
	if got.Protocol != prober.GRPC || got.Connections != 3 || !got.Insecure || got.Target.String() != cfg.Target.String() || got.GRPCMethod != "lab.Echo/Say" || got.GRPCClient != prober.GRPCClientGo {
		t.Fatalf("got protocol %q, connections %d, insecure %v, target %s, method %q", got.Protocol, got.Connections, got.Insecure, got.Target, got.GRPCMethod)
	}
	// A CLI from before the protocol was sent: HTTP/1.1.
	pc.Protocol, pc.Connections = "", 0
	if got, err = pc.Config(); err != nil || got.Protocol != prober.HTTP1 || got.Connections != prober.DefaultConnections {
		t.Fatalf("without a protocol: %q, %d, %v", got.Protocol, got.Connections, err)
	}
}
