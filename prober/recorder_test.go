package prober

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// The phaser's flip waits for an update begun before it, not for one
// begun after it, through both phases.
func TestPhaserFlipWaitsForEarlierWriters(t *testing.T) {
	var p phaser
	p.init()
	for round := range 4 { // even, odd, even, odd
		v := p.enter()
		if (v < 0) != (round%2 == 1) {
			t.Fatalf("round %d: enter = %d, wrong phase", round, v)
		}
		flipped := make(chan struct{})
		go func() { p.flip(); close(flipped) }()
		select {
		case <-flipped:
			t.Fatalf("round %d: flip returned while a writer of its phase was inside", round)
		case <-time.After(20 * time.Millisecond):
		}
		p.exit(v)
		<-flipped
	}
	p.flip() // no writer inside: returns at once
}

func okResult(seq uint64, at time.Duration) Result {
	return Result{Seq: seq, Intended: at, Start: at, End: at + time.Millisecond, Class: OK, Status: 200}
}

// A stream's results reach the recorder on the tick, not before; a closed
// stream is merged and then forgotten.
func TestStreamMergesOnTick(t *testing.T) {
	rec := NewRecorder(10)
	s := rec.NewStream()
	for i := range 5 {
		res := okResult(uint64(i), time.Duration(i)*time.Millisecond)
		s.Add(&res)
	}
	if n := rec.Snapshot().Totals.Sent(); n != 0 {
		t.Fatalf("before the tick: %d results visible", n)
	}
	rec.Tick(time.Millisecond)
	if n := rec.Snapshot().Totals.Sent(); n != 5 {
		t.Fatalf("after the tick: %d, want 5", n)
	}
	res := okResult(5, 10*time.Millisecond)
	s.Add(&res)
	s.Close()
	rec.Tick(time.Hour)
	snap := rec.Snapshot()
	if snap.Totals.Sent() != 6 || len(snap.Rows) != 1 || snap.Rows[0].OK() != 6 {
		t.Fatalf("after the last tick: sent %d, rows %+v", snap.Totals.Sent(), snap.Rows)
	}
	if len(rec.streams) != 0 {
		t.Fatalf("a closed, merged stream is still registered: %d", len(rec.streams))
	}
	lat, _ := rec.Latencies()
	if lat.TotalCount() != 6 {
		t.Fatalf("latency histogram holds %d values", lat.TotalCount())
	}
}

// Workers recording concurrently with the ticks lose nothing and count
// nothing twice: every count, histogram and row adds up, and the failures
// kept are the earliest. Run under -race, this also checks the phaser's
// hand-over of the buffers.
func TestStreamsConcurrentWithTicksAreExact(t *testing.T) {
	const (
		workers   = 8
		perWorker = 20000
		keep      = 50
	)
	rec := NewRecorder(keep)
	stop := make(chan struct{})
	tickerDone := make(chan struct{})
	go func() {
		defer close(tickerDone)
		for now := time.Duration(0); ; now += 10 * time.Millisecond {
			select {
			case <-stop:
				return
			default:
				rec.Tick(now)
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := rec.NewStream()
			defer s.Close()
			for i := range perWorker {
				seq := uint64(w*perWorker + i)
				res := okResult(seq, time.Duration(i)*100*time.Microsecond) // 2 s per worker
				if i%100 == 0 {
					res.Class, res.Status, res.Phase = Refused, 0, PhaseDial
				}
				s.Add(&res)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-tickerDone
	rec.Tick(time.Hour)

	total := uint64(workers * perWorker)
	failed := uint64(workers * perWorker / 100)
	snap := rec.Snapshot()
	if snap.Totals.Sent() != total || snap.Totals.Classes[Refused] != failed {
		t.Fatalf("sent %d refused %d, want %d and %d", snap.Totals.Sent(), snap.Totals.Classes[Refused], total, failed)
	}
	var rowSent, rowOK uint64
	for _, r := range snap.Rows {
		rowSent += r.Sent
		rowOK += r.OK()
	}
	if rowSent != total || rowOK != total-failed {
		t.Fatalf("rows: sent %d ok %d, want %d and %d", rowSent, rowOK, total, total-failed)
	}
	lat, svc := rec.Latencies()
	if lat.TotalCount() != int64(total-failed) || svc.TotalCount() != int64(total-failed) {
		t.Fatalf("histograms hold %d and %d, want %d", lat.TotalCount(), svc.TotalCount(), total-failed)
	}
	fails := rec.Failures()
	if len(fails) != keep {
		t.Fatalf("kept %d failures, want %d", len(fails), keep)
	}
	if !slices.IsSortedFunc(fails, byIntended) {
		t.Fatal("kept failures are not in intended order")
	}
	if len(rec.streams) != 0 {
		t.Fatalf("%d streams still registered", len(rec.streams))
	}
}

// Recording never waits for readers: workers go on adding while a view
// holds the merged state's lock (a slow snapshot or report).
func TestAddDoesNotWaitForReaders(t *testing.T) {
	rec := NewRecorder(10)
	s := rec.NewStream()
	rec.mu.Lock()
	added := make(chan struct{})
	go func() {
		defer close(added)
		for i := range 1000 {
			res := okResult(uint64(i), time.Millisecond)
			s.Add(&res)
		}
	}()
	select {
	case <-added:
	case <-time.After(10 * time.Second):
		t.Fatal("Add blocked while a reader held the recorder's lock")
	}
	rec.mu.Unlock()
	rec.Tick(time.Hour)
	if n := rec.Snapshot().Totals.Sent(); n != 1000 {
		t.Fatalf("merged %d, want 1000", n)
	}
}

// A result merged after its second became final still counts; the row a
// snapshot already holds is not changed under it.
func TestLateResultForAFinalSecond(t *testing.T) {
	rec := NewRecorder(10)
	s := rec.NewStream()
	res := okResult(0, 100*time.Millisecond)
	res.Backend = "web-a"
	s.Add(&res)
	rec.Tick(2 * time.Second) // second 0 is final
	before := rec.Snapshot()
	late := res
	late.Seq, late.Backend = 1, "web-b"
	s.Add(&late)
	rec.Tick(3 * time.Second)
	after := rec.Snapshot()
	if after.Rows[0].OK() != 2 || after.Rows[0].Backends["web-b"] != 1 {
		t.Fatalf("late result not counted in its second: %+v", after.Rows[0])
	}
	if _, ok := before.Rows[0].Backends["web-b"]; ok || before.Rows[0].OK() != 1 {
		t.Fatalf("an earlier snapshot's row changed: %+v", before.Rows[0])
	}
}

// SnapshotFrom copies only the final rows from the given second on.
func TestSnapshotFrom(t *testing.T) {
	rec := NewRecorder(10)
	for sec := range 5 {
		res := okResult(uint64(sec), time.Duration(sec)*time.Second)
		rec.Record(&res)
	}
	rec.Tick(10 * time.Second)
	for _, tc := range []struct{ from, first, n int }{{0, 0, 5}, {3, 3, 2}, {5, 5, 0}, {9, 5, 0}, {-1, 0, 5}} {
		snap := rec.SnapshotFrom(tc.from)
		if snap.FirstRow != tc.first || len(snap.Rows) != tc.n || snap.Totals.Sent() != 5 {
			t.Errorf("from %d: first %d, %d rows, %d sent", tc.from, snap.FirstRow, len(snap.Rows), snap.Totals.Sent())
			continue
		}
		for i, r := range snap.Rows {
			if r.Second != int64(tc.first+i) || r.OK() != 1 {
				t.Errorf("from %d: row %d is %+v", tc.from, i, r)
			}
		}
	}
}

// Each second's quantiles are of the responses completed in it: latency
// from the intended send, service time from the actual one; a second's
// histograms are emptied before another second reuses them.
func TestSecondQuantilesFromIntendedAndActualSend(t *testing.T) {
	rec := NewRecorder(0)
	s := rec.NewStream()
	add := func(second int, lag, service time.Duration) {
		at := time.Duration(second) * time.Second
		res := Result{Intended: at, Start: at + lag, End: at + lag + service, Class: OK, Status: 200}
		s.Add(&res)
	}
	for range 100 {
		add(0, 300*time.Millisecond, 10*time.Millisecond) // a late prober: latency 310 ms, service 10 ms
	}
	rec.Tick(5 * time.Second) // second 0 final; its histograms go back to the spares
	for range 100 {
		add(6, 0, 40*time.Millisecond)
	}
	s.Close()
	rec.Tick(time.Hour)
	rows := rec.Snapshot().Rows
	near := func(got, want time.Duration) bool { return got > want*99/100 && got < want*101/100 }
	r0, r6 := rows[0], rows[6]
	if !near(r0.P50, 310*time.Millisecond) || !near(r0.P99, 310*time.Millisecond) ||
		!near(r0.ServiceP50, 10*time.Millisecond) || !near(r0.ServiceP99, 10*time.Millisecond) {
		t.Fatalf("second 0: latency p50 %v p99 %v, service p50 %v p99 %v; want 310ms and 10ms",
			r0.P50, r0.P99, r0.ServiceP50, r0.ServiceP99)
	}
	if !near(r6.P99, 40*time.Millisecond) || !near(r6.ServiceP99, 40*time.Millisecond) {
		t.Fatalf("second 6 (reused histograms): latency p99 %v, service p99 %v; want 40ms", r6.P99, r6.ServiceP99)
	}
}

// A second's success p99 counts the successes alone: slow 502s from a
// proxy raise the service p99 of the responses, not that of the successes,
// and a second with no success has none (0, not a figure).
func TestSecondSuccessQuantileLeavesFailuresOut(t *testing.T) {
	rec := NewRecorder(0)
	s := rec.NewStream()
	add := func(second int, service time.Duration, class Class, status int) {
		at := time.Duration(second) * time.Second
		res := Result{Intended: at, Start: at, End: at + service, Class: class, Status: status}
		s.Add(&res)
	}
	for range 90 {
		add(0, 5*time.Millisecond, OK, 200)
	}
	for range 10 {
		add(0, 300*time.Millisecond, HTTP5xx, 502)
	}
	for range 10 {
		add(4, 200*time.Millisecond, HTTP5xx, 504)
	}
	s.Close()
	rec.Tick(time.Hour)
	rows := rec.Snapshot().Rows
	if got := rows[0].ServiceP99; got < 290*time.Millisecond {
		t.Errorf("second 0: service p99 %v, want the 502s' 300ms", got)
	}
	if got := rows[0].OKServiceP99; got < 4900*time.Microsecond || got > 5100*time.Microsecond {
		t.Errorf("second 0: success p99 %v, want the successes' 5ms", got)
	}
	if got := rows[4].OKServiceP99; got != 0 {
		t.Errorf("second 4 (no success): success p99 %v, want 0", got)
	}
}
