package prober

import (
	"runtime"
	"testing"
)

func TestProcs(t *testing.T) {
	for _, tc := range []struct {
		rate, fresh float64
		cpus        int
		engine      Engine
		want        int
	}{
		{200, 0.5, 8, EngineGoroutines, 1},  // run's default
		{10000, 0, 2, EngineGoroutines, 1},  // the CPU benchmark's rate
		{20000, 0, 2, EngineGoroutines, 2},  // more than one P's budget
		{2000, 1, 4, EngineGoroutines, 1},   // new connections
		{9000, 1, 4, EngineGoroutines, 3},   // 9,000 new connections a second
		{100000, 0, 4, EngineGoroutines, 4}, // never more than the CPUs
		{0, 0, 6, EngineGoroutines, 6},      // closed model: every CPU
		{0.5, 0, 0, EngineGoroutines, 1},    // at least one
		// The event loops' P holds more.
		{20000, 0, 2, EngineLoops, 1},
		{30000, 0, 4, EngineLoops, 2},
		{9000, 1, 4, EngineLoops, 2},
		{5000, 1, 4, EngineLoops, 1},
		{0, 0, 6, EngineLoops, 6},
		// Auto: the loops for an IP over http (the address below), the
		// goroutines for a name.
		{20000, 0, 2, EngineAuto, 1},
	} {
		if tc.engine != EngineGoroutines && runtime.GOOS != "linux" {
			continue // no event loops here
		}
		target := "http://127.0.0.1:8080/"
		if tc.engine == EngineGoroutines {
			target = "http://svc.ns:8080/"
		}
		u, err := ParseTarget(target)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Target: u, Rate: tc.rate, Conn: ConnMode{FreshFraction: tc.fresh}, Engine: tc.engine}
		if got := Procs(cfg, tc.cpus); got != tc.want {
			t.Errorf("%s engine, rate %g fresh %g on %d CPUs: %d Ps, want %d", tc.engine, tc.rate, tc.fresh, tc.cpus, got, tc.want)
		}
	}
}

func TestInitialWorkers(t *testing.T) {
	for _, tc := range []struct {
		rate                     float64
		workers, max, conc, want int
	}{
		{200, 10, 2000, 0, 10},   // run's default: the configured pool
		{10000, 10, 2000, 0, 30}, // one request per 3 ms each
		{20000, 50, 2000, 0, 60},
		{20000, 80, 2000, 0, 80},  // more asked: more
		{100000, 10, 100, 0, 100}, // never past the cap
		{0, 10, 2000, 32, 32},     // closed model: the concurrency
	} {
		cfg := Config{Rate: tc.rate, Workers: tc.workers, MaxWorkers: tc.max, Concurrency: tc.conc}
		if got := InitialWorkers(cfg); got != tc.want {
			t.Errorf("%+v: %d workers, want %d", tc, got, tc.want)
		}
	}
}
