package cmd_test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rollprobe/rollprobe/report"
)

// --grpc-client both probes one gRPC target as two paths side by side:
// rollprobe's own streams (raw) and grpc-go's client, whose hidden
// retries are reported (zero here: nothing refused) where raw's are not
// measured at all; the run's totals follow the first path (raw).
func TestGRPCClientsSideBySide(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	path := filepath.Join(t.TempDir(), "r.json")
	r := run(t, "probe", "http://"+ln.Addr().String(), "--protocol", "grpc", "--grpc-client", "both", "--rate", "50",
		"--duration", "600ms", "--progress", "0", "--report", path)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Paths) != 2 || rep.Paths[0].Name != "raw" || rep.Paths[1].Name != "grpc-go" ||
		rep.Paths[0].GRPCClient != "raw" || rep.Paths[1].GRPCClient != "grpc-go" || rep.Config.Protocol != "grpc" {
		t.Fatalf("paths %+v, config %+v", rep.Paths, rep.Config)
	}
	raw, goClient := rep.Paths[0].Totals, rep.Paths[1].Totals
	if raw.HiddenRetries != nil || goClient.HiddenRetries == nil || *goClient.HiddenRetries != (report.HiddenRetries{}) {
		t.Errorf("hidden retries: raw %+v (want absent), grpc-go %+v (want measured, none)", raw.HiddenRetries, goClient.HiddenRetries)
	}
	// The run says who made its calls: both, not its first path's raw;
	// what grpc-go resent is measured over the run (here: nothing).
	if rep.Config.GRPCClient != "both" || rep.Totals.HiddenRetries == nil || *rep.Totals.HiddenRetries != *goClient.HiddenRetries {
		t.Errorf("the run's client %q, hidden retries %+v: want both, the grpc-go path's", rep.Config.GRPCClient, rep.Totals.HiddenRetries)
	}
	if raw.OK == 0 || raw.OK != raw.Sent || goClient.OK != goClient.Sent {
		t.Errorf("raw %d of %d ok, grpc-go %d of %d", raw.OK, raw.Sent, goClient.OK, goClient.Sent)
	}
}
