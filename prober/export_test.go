package prober_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/prober/probertest"
)

// Property: split any set of results across k exporting recorders, each
// taking its exports at random moments, and ingest every export into one
// recorder: it holds exactly what one recorder given every result holds.
func TestExportMergeIsExact(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			results := probertest.RandomResults(rng, 2000+rng.IntN(3000))
			k := 1 + rng.IntN(6)

			single := prober.NewRecorder(1 << 20)
			for i := range results {
				single.Record(&results[i])
			}
			single.Tick(math.MaxInt64)

			sources := make([]*prober.Recorder, k)
			for i := range sources {
				sources[i] = prober.NewRecorder(1 << 20)
				sources[i].EnableExport()
			}
			merged := prober.NewRecorder(1 << 20)
			take := func(src *prober.Recorder) {
				x := src.TakeExport()
				merged.Ingest(x.Results)
				for _, a := range x.Aggregates {
					merged.IngestAggregate(a)
				}
				src.ReleaseExport(x)
			}
			for i := range results {
				src := sources[rng.IntN(k)]
				src.Record(&results[i])
				if rng.IntN(300) == 0 {
					take(src)
				}
			}
			for _, src := range sources {
				src.Tick(math.MaxInt64)
				take(src)
			}
			merged.FinaliseBefore(math.MaxInt64)

			probertest.Compare(t, single, merged)
		})
	}
}
