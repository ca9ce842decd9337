package prober

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/faultserver"
)

// A group's recorder is its paths' recorders merged exactly: the same
// counts, rows and latencies as the paths add up to, each failure marked
// with the path it was sent on; and each path's counts are what the
// server received on that path.
func TestGroupMergesItsPathsExactly(t *testing.T) {
	srv := faultserver.New(t, "group")
	var paths []Path
	for _, p := range []struct{ name, path string }{{"healthy", "/ok"}, {"failing", "/status/503"}} {
		cfg := DefaultConfig()
		u, err := ParseTarget(srv.URL(p.path))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Target, cfg.Rate, cfg.Duration, cfg.Timeout = u, 200, 1500*time.Millisecond, 2*time.Second
		paths = append(paths, Path{Name: p.name, Config: cfg})
	}
	g, err := NewGroup(paths, "rollprobe-test")
	if err != nil {
		t.Fatal(err)
	}
	out := <-g.Go(context.Background())
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	sums := g.Summaries()
	if len(sums) != 2 || out.Summary.Start != g.Start() || sums[0].Start != sums[1].Start {
		t.Fatalf("the paths do not share the group's clock: %+v", sums)
	}
	// Both paths dialled the one server: the group's summary says it once.
	if d := out.Summary.Dialled; len(d) != 1 || d[0].String() != srv.Addr() || out.Summary.DialledMore {
		t.Errorf("the group dialled %v (more %v), want %s once", d, out.Summary.DialledMore, srv.Addr())
	}

	whole := g.Recorder().Snapshot()
	var parts []Snapshot
	targets := srv.Targets()
	for i, p := range g.Probers() {
		snap := p.Recorder().Snapshot()
		parts = append(parts, snap)
		if got, want := snap.Totals.Sent(), uint64(targets[paths[i].Config.Target.Path]); got != want || got == 0 {
			t.Errorf("path %s: recorded %d requests, the server answered %d", g.Names()[i], got, want)
		}
	}
	if parts[0].Totals.Failed() != 0 || parts[1].Totals.Classes[HTTP5xx] != parts[1].Totals.Sent() {
		t.Fatalf("paths measured the wrong things: healthy %v, failing %v", parts[0].Totals.Classes, parts[1].Totals.Classes)
	}
	for c := Class(0); int(c) < NumClasses; c++ {
		if got, want := whole.Totals.Classes[c], parts[0].Totals.Classes[c]+parts[1].Totals.Classes[c]; got != want {
			t.Errorf("class %s: the group counted %d, its paths %d", c, got, want)
		}
	}
	if got, want := whole.Totals.Status[503], parts[1].Totals.Status[503]; got != want {
		t.Errorf("503s: the group counted %d, the failing path %d", got, want)
	}
	if len(whole.Rows) != max(len(parts[0].Rows), len(parts[1].Rows)) {
		t.Fatalf("the group has %d seconds, its paths %d and %d", len(whole.Rows), len(parts[0].Rows), len(parts[1].Rows))
	}
	row := func(s Snapshot, i int) SecondRow {
		if i < len(s.Rows) {
			return s.Rows[i]
		}
		return SecondRow{}
	}
	for i, r := range whole.Rows {
		a, b := row(parts[0], i), row(parts[1], i)
		if r.Sent != a.Sent+b.Sent || r.OK() != a.OK()+b.OK() || r.Failed() != a.Failed()+b.Failed() {
			t.Errorf("second %d: the group has sent %d ok %d failed %d, its paths %d+%d, %d+%d, %d+%d",
				i, r.Sent, r.OK(), r.Failed(), a.Sent, b.Sent, a.OK(), b.OK(), a.Failed(), b.Failed())
		}
	}
	latency, _ := g.Recorder().Latencies()
	l0, _ := g.Probers()[0].Recorder().Latencies()
	l1, _ := g.Probers()[1].Recorder().Latencies()
	if latency.TotalCount() != l0.TotalCount()+l1.TotalCount() || latency.Max() != max(l0.Max(), l1.Max()) {
		t.Errorf("latency: the group has %d responses (max %d), its paths %d and %d", latency.TotalCount(), latency.Max(), l0.TotalCount(), l1.TotalCount())
	}
	fails := g.Recorder().Failures()
	if uint64(len(fails)) != parts[1].Totals.Failed() {
		t.Fatalf("the group kept %d failures, the failing path had %d", len(fails), parts[1].Totals.Failed())
	}
	for _, f := range fails {
		if f.Path != 1 || f.Status != 503 {
			t.Fatalf("a failure marked path %d, status %d: every one was the failing path's 503", f.Path, f.Status)
		}
	}
}

func TestGroupRefusesBadPaths(t *testing.T) {
	cfg := DefaultConfig()
	u, _ := ParseTarget("http://127.0.0.1:1/")
	cfg.Target, cfg.Rate, cfg.Duration = u, 10, time.Second
	for _, tc := range []struct {
		paths []Path
		want  string
	}{
		{[]Path{{"a", cfg}}, "2 to 8 paths"},
		{[]Path{{"a", cfg}, {"a", cfg}}, `two paths are named "a"`},
		{[]Path{{"a", cfg}, {"b", Config{}}}, "path b:"},
	} {
		if _, err := NewGroup(tc.paths, "t"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewGroup(%d paths): %v, want %q", len(tc.paths), err, tc.want)
		}
	}
}
