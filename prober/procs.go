package prober

import (
	"math"
	"time"
)

// Per-P budgets for the open model, measured on loopback against nginx (2
// cores, see bench/RESULTS.md), each well below where one P starts to fall
// behind. The goroutine engine's P holds 10,000 kept-alive req/s with a
// p99.9 of ~4 ms and 5,000 new connections per second; at 30,000 req/s its
// schedule lag grows to ~200 ms. An event loop's P holds 50,000 kept-alive
// req/s with a p99 of 4 ms and 10,000 new connections with 3 ms; at
// 15,000 new connections its p99 passes 100 ms.
const (
	keepAlivePerProc = 12500.0
	freshPerProc     = 3000.0

	loopKeepAlivePerProc = 25000.0
	loopFreshPerProc     = 6000.0
)

// Procs is how many Ps (GOMAXPROCS) the prober needs for cfg: in the open
// model, enough for the rate by the budgets above; in the closed model
// (as fast as possible), every CPU. Fewer Ps cost less: an idle P makes
// the runtime wake a thread (futex) for every timer and network event, so
// at 10,000 req/s one P spends ~40% less CPU per request than two, with a
// shorter latency tail. Callers apply it with runtime.GOMAXPROCS unless
// the user set GOMAXPROCS.
func Procs(cfg Config, numCPU int) int {
	if cfg.Rate <= 0 {
		return max(1, numCPU)
	}
	f := cfg.Conn.FreshFraction
	perKeptAlive, perFresh := keepAlivePerProc, freshPerProc
	if engineFor(&cfg) == EngineLoops {
		perKeptAlive, perFresh = loopKeepAlivePerProc, loopFreshPerProc
	}
	need := cfg.Rate*(1-f)/perKeptAlive + cfg.Rate*f/perFresh
	return max(1, min(numCPU, int(math.Ceil(need))))
}

// workerCycle is the shortest time between two requests of one worker that
// the initial open-model pool plans for. A worker whose next request is due
// less than a millisecond after its last one finished sleeps for less than
// a millisecond, and such sleeps cost the Go runtime extra wake-ups:
// measured at 10,000 req/s on loopback (p50 0.65 ms), 10-13 workers cost
// 37 µs of CPU per request, 16 or more 21 µs (bench/RESULTS.md).
const workerCycle = 3 * time.Millisecond

// InitialWorkers is how many workers an open-model run starts with: the
// configured number, or enough for each to send at most one request per
// workerCycle at the target rate, whichever is more, within MaxWorkers.
// The pool still grows when every worker is busy inside a request.
func InitialWorkers(cfg Config) int {
	if cfg.Rate <= 0 {
		return cfg.Concurrency
	}
	planned := int(math.Ceil(cfg.Rate * workerCycle.Seconds()))
	return max(1, min(max(cfg.Workers, planned), cfg.MaxWorkers))
}
