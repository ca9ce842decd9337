//go:build linux

package natwatch

import (
	"context"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/prober"
)

// BenchmarkConntrackOverhead measures the prober's throughput (closed
// model, 32 workers, against a loopback server) with the conntrack watch
// on (with the prober's connection log, as rollprobe run keeps both) and
// off, for a new connection per request (an event per request:
// the watch's worst case) and for kept-alive connections (a control: a
// few events in all, so its ratio shows the machine's noise). Rounds
// alternate in ABBA order so noise and drift hit both. The namespace
// keeps conntrack's TIME_WAIT entries 1 s (120 s by default): a run opens
// more connections than the table holds, and a full table drops SYNs. Reported per mode: req/s of each, with/without,
// and the share of connections the watch saw (it must see them all, or it
// measured nothing). Besides the ratio of the sums, the median of each
// round's own ratio (its two arms ran back to back): a burst of the shared
// machine's load that hits one arm of one round moves the sums' ratio but
// not the median. The whole process must be in a network namespace whose
// ruleset tracks connections (a goroutine's dial runs on any thread):
//
//	make bench-conntrack
func BenchmarkConntrackOverhead(b *testing.B) {
	target, port := benchTarget(b)
	for _, mode := range []struct {
		name string
		conn prober.ConnMode
	}{{"conn=new", prober.ConnMode{FreshFraction: 1}}, {"conn=keepalive", prober.ConnMode{}}} {
		b.Run(mode.name, func(b *testing.B) {
			const rounds, each = 10, 1500 * time.Millisecond
			var without, with, seen, conns float64
			var ratios []float64 // each round's
			for range b.N {
				for r := range rounds {
					var pair [2]float64 // [without, with]
					// ABBA: neither arm always runs second.
					for _, watched := range [][2]bool{{false, true}, {true, false}}[r%2] {
						if !watched {
							rate, _, _ := probeFor(b, target, mode.conn, each, nil)
							without += rate
							pair[0] = rate
							continue
						}
						rate, n, tb := probeFor(b, target, mode.conn, each, []uint16{port})
						with += rate
						pair[1] = rate
						st := tb.Status()
						if st.Lost {
							b.Logf("events lost: %s", st.LostReason)
						}
						seen += float64(st.Conns)
						conns += float64(n)
					}
					ratios = append(ratios, pair[1]/pair[0])
				}
			}
			n := float64(rounds * b.N)
			b.ReportMetric(without/n, "req/s-without")
			b.ReportMetric(with/n, "req/s-with")
			b.ReportMetric(with/without, "ratio")
			b.ReportMetric(median(ratios), "ratio-median")
			b.ReportMetric(seen/conns, "seen-share")
			if seen == 0 {
				b.Fatal("the watch saw no connection: the namespace's ruleset does not track connections")
			}
		})
	}
}

// median is the middle of xs (the mean of the two middle ones when even).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// probeFor probes target for d, watching ports when given; it returns the
// throughput, the connections opened and the watch's table (nil unwatched).
func probeFor(b *testing.B, target *url.URL, conn prober.ConnMode, d time.Duration, ports []uint16) (float64, uint64, *Table) {
	b.Helper()
	cfg := prober.DefaultConfig()
	cfg.Target, cfg.Conn = target, conn
	cfg.Rate, cfg.Concurrency, cfg.Duration = 0, 32, d
	if ports != nil {
		cfg.ConnLog = &prober.ConnLog{} // as rollprobe run keeps it with the watch
	}
	p, err := prober.New(cfg, "bench")
	if err != nil {
		b.Fatal(err)
	}
	var tb *Table
	stop := func() {}
	if ports != nil {
		tb, stop = Watch(ports)
	}
	sum, _ := p.Run(context.Background())
	time.Sleep(100 * time.Millisecond) // the last events are read
	stop()
	return float64(p.Recorder().Snapshot().Totals.Sent()) / sum.Elapsed.Seconds(), p.Recorder().Snapshot().Totals.Fresh, tb
}

// BenchmarkConntrackCPUAtAGatesRate measures what the watch costs at a
// gate's kind of load rather than flat out: 2,000 requests a second, a
// new connection each (every request an event), for 3 s a round, ABBA as
// above. Reported: the process's CPU (user and system, the in-process
// server's included: the same in both arms) per request with the watch
// on and off, and the difference.
//
//	make bench-conntrack
func BenchmarkConntrackCPUAtAGatesRate(b *testing.B) {
	target, port := benchTarget(b)
	const rounds, each, rate = 6, 3 * time.Second, 2000
	var cpu, reqs [2]float64 // [off, on]
	for range b.N {
		for r := range rounds {
			for _, on := range [][2]bool{{false, true}, {true, false}}[r%2] {
				var ports []uint16
				if on {
					ports = []uint16{port}
				}
				before := cpuTime(b)
				n := pacedRun(b, target, rate, each, ports)
				i := map[bool]int{false: 0, true: 1}[on]
				cpu[i] += (cpuTime(b) - before).Seconds() * 1e6
				reqs[i] += float64(n)
			}
		}
	}
	off, on := cpu[0]/reqs[0], cpu[1]/reqs[1]
	b.ReportMetric(off, "cpu-us/req-without")
	b.ReportMetric(on, "cpu-us/req-with")
	b.ReportMetric(on/off, "ratio")
}

// pacedRun probes target at rate with a new connection per request for d,
// watching ports when given (the watch stopped before it returns); it
// returns the requests sent.
func pacedRun(b *testing.B, target *url.URL, rate float64, d time.Duration, ports []uint16) uint64 {
	b.Helper()
	cfg := prober.DefaultConfig()
	cfg.Target, cfg.Conn = target, prober.ConnMode{FreshFraction: 1}
	cfg.Rate, cfg.Duration = rate, d
	if ports != nil {
		cfg.ConnLog = &prober.ConnLog{} // as rollprobe run keeps it with the watch
	}
	p, err := prober.New(cfg, "bench")
	if err != nil {
		b.Fatal(err)
	}
	stop := func() {}
	if ports != nil {
		_, stop = Watch(ports)
	}
	_, _ = p.Run(context.Background())
	stop()
	return p.Recorder().Snapshot().Totals.Sent()
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchTarget skips outside make bench-conntrack's namespace, else starts
// the loopback server: its URL and port.
func benchTarget(b *testing.B) (*url.URL, uint16) {
	if os.Getenv("ROLLPROBE_BENCH_NETNS") == "" {
		b.Skip("run by make bench-conntrack: in a network namespace of its own whose ruleset tracks connections")
	}
	srv := faultserver.New(b, "bench")
	target, _ := url.Parse(srv.URL("/ok"))
	return target, uint16(netip.MustParseAddrPort(target.Host).Port())
}
