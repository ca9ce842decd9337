// Package prober is rollprobe's load engine: it sends HTTP/1.1, HTTP/2 or
// gRPC requests at a target on a fixed schedule (the open model: request n
// is due at n/rate, whatever happened before) or back to back (the closed
// model), and ends every attempt in exactly one Result with its class
// (classify.go), phase and evidence. It never retries: Go's net/http
// replays idempotent requests on a reused connection that closed, its
// HTTP/2 Transport resends GOAWAY'd and refused streams, grpc-go resends
// unprocessed streams, all hiding the drops this tool exists to count; so
// rollprobe speaks HTTP/1.1 (response.go) and HTTP/2 (h2conn.go: one
// stream per request on connections it owns) itself. The one exception is
// on purpose and counted: with GRPCClientGo, grpc-go makes the calls
// (grpcgo.go) so that its transparent retries are measured as what real
// clients hide.
//
// Two engines produce the same outcome for the same exchange:
//   - the event loops (loop_linux.go): one goroutine per P owning its
//     connections on an epoll set of its own, for http:// targets given by
//     IP address on Linux;
//   - the goroutines (engine.go, client.go): a worker per request in flight
//     on Go's net package, for https, names, HTTP/2 and gRPC, and other
//     systems.
//
// Results go to a Recorder (recorder.go, phaser.go) without a lock on the
// hot path; it owns the run's counts, HDR histograms, per-second rows,
// outage windows and the failures kept in full, and is what live views and
// the report read. Export and ingest (export.go) carry a recorder's content
// between processes, for in-cluster probers merged exactly.
//
// Invariants: one Result per attempt; a class never depends on the engine;
// the prober's own faults (EMFILE, EADDRNOTAVAIL, ...) are class local and
// never blamed on the target; latency counts from the intended send time.
// This package imports no Kubernetes, cobra or Bubble Tea package.
package prober
