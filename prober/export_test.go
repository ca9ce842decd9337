package prober

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// randomResults is a run's worth of varied results over a few seconds:
// every class, fresh and reused, several statuses and backends, slow
// connects, late starts, and requests that complete seconds after they
// began.
func randomResults(rng *rand.Rand, n int) []Result {
	classes := []Class{OK, OK, OK, OK, OK, OK, Refused, ConnectTimeout, Reset, EOF, EOFReused, Timeout, HTTP5xx, HTTPStatus, Local}
	out := make([]Result, n)
	for i := range out {
		intended := time.Duration(rng.Int64N(int64(6 * time.Second)))
		lag := time.Duration(rng.Int64N(int64(3 * time.Millisecond)))
		if rng.IntN(50) == 0 {
			lag = time.Duration(rng.Int64N(int64(800 * time.Millisecond)))
		}
		service := time.Duration(rng.Int64N(int64(40*time.Millisecond))) + 50*time.Microsecond
		if rng.IntN(30) == 0 {
			service = time.Duration(rng.Int64N(int64(2500 * time.Millisecond)))
		}
		res := Result{Seq: uint64(i), Intended: intended, Start: intended + lag, End: intended + lag + service,
			Class: classes[rng.IntN(len(classes))], Fresh: rng.IntN(2) == 0, ConnReqs: uint32(rng.IntN(5)),
			Backend: fmt.Sprintf("pod-%d", rng.IntN(4))}
		switch res.Class {
		case OK:
			res.Status = []int{200, 200, 204, 304}[rng.IntN(4)]
			res.SlowConnect = rng.IntN(40) == 0
		case HTTP5xx:
			res.Status = 503
		case HTTPStatus:
			res.Status = 404
		default:
			res.Backend, res.Err, res.Phase = "", errors.New("boom"), PhaseDial
			if res.Class == EOFReused {
				res.ServerClose = CloseBeforeRequest
			}
		}
		if rng.IntN(200) == 0 {
			res.canceled = true
		}
		out[i] = res
	}
	return out
}

// Property: split any set of results across k exporting recorders, each
// taking its exports at random moments, and ingest every export into one
// recorder: it holds exactly what one recorder given every result holds.
func TestExportMergeIsExact(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			results := randomResults(rng, 2000+rng.IntN(3000))
			k := 1 + rng.IntN(6)

			single := NewRecorder(1 << 20)
			for i := range results {
				single.Record(&results[i])
			}
			single.Tick(math.MaxInt64)

			sources := make([]*Recorder, k)
			for i := range sources {
				sources[i] = NewRecorder(1 << 20)
				sources[i].EnableExport()
			}
			merged := NewRecorder(1 << 20)
			take := func(src *Recorder) {
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

			compareRecorders(t, single, merged)
		})
	}
}

// compareRecorders fails t where the two recorders differ in anything a
// report or a view reads.
func compareRecorders(t *testing.T, want, got *Recorder) {
	t.Helper()
	ws, gs := want.Snapshot(), got.Snapshot()
	if !reflect.DeepEqual(ws.Totals, gs.Totals) {
		t.Fatalf("totals differ:\nwant %+v\ngot  %+v", ws.Totals, gs.Totals)
	}
	if len(ws.Rows) != len(gs.Rows) {
		t.Fatalf("%d rows, want %d", len(gs.Rows), len(ws.Rows))
	}
	for i := range ws.Rows {
		if !reflect.DeepEqual(ws.Rows[i], gs.Rows[i]) {
			t.Fatalf("row %d differs:\nwant %+v\ngot  %+v", i, ws.Rows[i], gs.Rows[i])
		}
	}
	wl, wsv := want.Latencies()
	gl, gsv := got.Latencies()
	for _, pair := range [][2]interface {
		TotalCount() int64
		ValueAtQuantile(float64) int64
		Max() int64
		Min() int64
	}{{wl, gl}, {wsv, gsv}} {
		if pair[0].TotalCount() != pair[1].TotalCount() || pair[0].Max() != pair[1].Max() || pair[0].Min() != pair[1].Min() {
			t.Fatalf("histograms differ: count %d/%d", pair[0].TotalCount(), pair[1].TotalCount())
		}
		for _, q := range []float64{1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100} {
			if a, b := pair[0].ValueAtQuantile(q), pair[1].ValueAtQuantile(q); a != b {
				t.Fatalf("p%g: %d merged, %d in one recorder", q, b, a)
			}
		}
	}
	if wf, gf := want.Failures(), got.Failures(); !reflect.DeepEqual(wf, gf) {
		t.Fatalf("failures differ: %d kept, want %d", len(gf), len(wf))
	}
	wo, _ := want.OutagesFrom(0)
	gou, _ := got.OutagesFrom(0)
	if !reflect.DeepEqual(wo, gou) {
		t.Fatalf("outages differ:\nwant %+v\ngot  %+v", wo, gou)
	}
}
