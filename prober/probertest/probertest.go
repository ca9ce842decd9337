// Package probertest helps tests of the prober's results and of what
// merges them: random results of every kind, and a comparison of two
// recorders in everything a report or a view reads.
package probertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/prober"
)

// RandomResults is a run's worth of varied results over a few seconds:
// every class, fresh and reused, several statuses and backends, slow
// connects, late starts, and requests that complete seconds after they
// began.
func RandomResults(rng *rand.Rand, n int) []prober.Result {
	classes := []prober.Class{prober.OK, prober.OK, prober.OK, prober.OK, prober.OK, prober.OK, prober.Refused, prober.ConnectTimeout,
		prober.Reset, prober.EOF, prober.EOFReused, prober.Timeout, prober.HTTP5xx, prober.Proxy5xx, prober.HTTPStatus, prober.Local}
	out := make([]prober.Result, n)
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
		res := prober.Result{Seq: uint64(i), Intended: intended, Start: intended + lag, End: intended + lag + service,
			Class: classes[rng.IntN(len(classes))], Fresh: rng.IntN(2) == 0, ConnReqs: uint32(rng.IntN(5)),
			Backend: fmt.Sprintf("pod-%d", rng.IntN(4))}
		if res.Fresh { // part of its service time went to opening its connection
			res.Connect = time.Duration(rng.Int64N(int64(service) + 1))
		}
		switch res.Class {
		case prober.OK:
			res.Status = []int{200, 200, 204, 304}[rng.IntN(4)]
			res.SlowConnect = rng.IntN(40) == 0
		case prober.HTTP5xx:
			res.Status = 503
		case prober.Proxy5xx:
			res.Backend, res.Status = "", 502
		case prober.HTTPStatus:
			res.Status = 404
		default:
			res.Backend, res.Err, res.Phase = "", errors.New("boom"), prober.PhaseDial
			res.Addr = &prober.ConnAddr{Local: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 1}), uint16(30000+i%30000)),
				Remote: netip.MustParseAddrPort("10.96.0.10:80")}
			if res.Class == prober.EOFReused {
				res.ServerClose = prober.CloseBeforeRequest
			}
		}
		if rng.IntN(200) == 0 {
			res.Canceled = true
		}
		out[i] = res
	}
	return out
}

// Compare fails t where the two recorders differ in anything a
// report or a view reads.
func Compare(t testing.TB, want, got *prober.Recorder) {
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
	wf, gf := want.Failures(), got.Failures()
	for _, fs := range [][]prober.Result{wf, gf} {
		for i := range fs {
			fs[i].Source = 0 // where it was measured is not what it was
		}
	}
	if !reflect.DeepEqual(wf, gf) {
		t.Fatalf("failures differ: %d kept, want %d", len(gf), len(wf))
	}
	wo, _ := want.OutagesFrom(0)
	gou, _ := got.OutagesFrom(0)
	if !reflect.DeepEqual(wo, gou) {
		t.Fatalf("outages differ:\nwant %+v\ngot  %+v", wo, gou)
	}
}
