package fleet

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/prober"
)

// BenchmarkMergeProberSecond is the CLI's cost to merge one second of one
// prober: what it writes at 1,000 req/s with 1% failures (one aggregate
// with its two histograms, ten results, a final mark). One op is one
// prober-second, so 100 probers cost 100 ops per second of run: the
// README's "how many probers one CLI merges" is 1e9 / (ns/op).
func BenchmarkMergeProberSecond(b *testing.B) {
	const perSecond, failEvery = 1000, 100
	seconds := 60
	var buf bytes.Buffer
	w := wire.NewWriter(&buf)
	rec := prober.NewRecorder(0)
	rec.EnableExport()
	for s := range seconds {
		for i := range perSecond {
			at := time.Duration(s)*time.Second + time.Duration(i)*time.Millisecond
			res := prober.Result{Seq: uint64(s*perSecond + i), Intended: at, Start: at + 50*time.Microsecond,
				End: at + time.Duration(900+i%400)*time.Microsecond, Class: prober.OK, Status: 200, Fresh: i%2 == 0, Backend: fmt.Sprint("pod-", i%3)}
			if i%failEvery == 0 {
				res.Class, res.Status, res.Phase = prober.Refused, 0, prober.PhaseDial
			}
			rec.Record(&res)
		}
		rec.Tick(time.Duration(s+2) * time.Second)
		x := rec.TakeExport()
		if err := w.WriteExport(x); err != nil {
			b.Fatal(err)
		}
		rec.ReleaseExport(x)
	}
	var lines [][]byte
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	b.ReportMetric(float64(len(buf.Bytes()))/float64(seconds), "log-bytes/prober-second")
	b.ResetTimer()
	for n := 0; n < b.N; {
		m := NewMerger(prober.NewRecorder(10000), []string{"p"})
		for _, l := range lines {
			if _, err := m.Feed(0, l); err != nil {
				b.Fatal(err)
			}
		}
		m.Finish()
		n += seconds
	}
	b.StopTimer()
}
