package tui

import (
	"context"
	"io"
	"net/url"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/prober"
)

// BenchmarkDashboardOverhead measures the prober's keep-alive throughput
// (closed model, 32 workers, against a loopback server) with and without
// the dashboard attached: the sampler at 10 Hz and a real Bubble Tea
// program rendering every frame (to io.Discard, 80x24). Rounds alternate
// so machine noise hits both. Reported: req/s of each and with/without.
//
//	go test ./tui -run XXX -bench DashboardOverhead -benchtime 1x
func BenchmarkDashboardOverhead(b *testing.B) {
	srv := faultserver.New(b, "bench")
	const rounds, each = 3, 3 * time.Second
	var without, with float64
	for range b.N {
		for r := 0; r < rounds; r++ {
			without += probeFor(b, srv, each, false)
			with += probeFor(b, srv, each, true)
		}
	}
	n := float64(rounds * b.N)
	b.ReportMetric(without/n, "req/s-without")
	b.ReportMetric(with/n, "req/s-with")
	b.ReportMetric(with/without, "ratio")
}

func probeFor(b *testing.B, srv *faultserver.Server, d time.Duration, dashboard bool) float64 {
	b.Helper()
	cfg := prober.DefaultConfig()
	cfg.Target, _ = url.Parse(srv.URL("/ok"))
	cfg.Rate, cfg.Concurrency, cfg.Duration = 0, 32, d
	p, err := prober.New(cfg, "bench")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan prober.Summary, 1)
	go func() {
		sum, _ := p.Run(context.Background())
		done <- sum
	}()
	<-p.Started()
	var prog *tea.Program
	exited := make(chan struct{})
	if dashboard {
		s := NewSampler(Source{Command: "probe", Target: cfg.Target.String(), Start: p.Start(), Recorder: p.Recorder(),
			Phase: func() string { return "probing" }})
		prog = tea.NewProgram(New(Options{Sample: s.Sample, Color: true, ExitWhenDone: true}),
			tea.WithInput(nil), tea.WithOutput(io.Discard), tea.WithWindowSize(80, 24), tea.WithoutSignalHandler())
		go func() { _, _ = prog.Run(); close(exited) }()
	}
	sum := <-done
	if dashboard {
		prog.Send(DoneMsg{Verdict: "PASS"})
		<-exited
	}
	return float64(p.Recorder().Snapshot().Totals.Sent()) / sum.Elapsed.Seconds()
}
