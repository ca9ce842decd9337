package fleet

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/prober/probertest"
)

// streams splits results across k exporting recorders, as k probers would
// measure them, and returns each prober's log: hello, started, exports
// taken at random moments, end. Results come in order of completion, as
// they do to a recorder, and every recorder (single included, when given)
// ticks at the same moments: the seconds a tick makes final are the same
// everywhere.
func streams(t *testing.T, rng *rand.Rand, results []prober.Result, k int, single *prober.Recorder) [][][]byte {
	t.Helper()
	bufs := make([]bytes.Buffer, k)
	writers := make([]*wire.Writer, k)
	recs := make([]*prober.Recorder, k)
	for i := range k {
		writers[i] = wire.NewWriter(&bufs[i])
		recs[i] = prober.NewRecorder(1 << 20)
		recs[i].EnableExport()
		must(t, writers[i].Write(wire.Line{Kind: wire.KindHello, Hello: &wire.Hello{Protocol: wire.Version, Prober: fmt.Sprint("p", i), Node: "n"}}))
		must(t, writers[i].Write(wire.Line{Kind: wire.KindStarted, Started: &wire.Started{WallNS: 1}}))
	}
	take := func(i int) {
		x := recs[i].TakeExport()
		must(t, writers[i].WriteExport(x))
		recs[i].ReleaseExport(x)
	}
	slices.SortStableFunc(results, func(a, b prober.Result) int { return cmp.Compare(a.End, b.End) })
	for j := range results {
		i := rng.IntN(k)
		recs[i].Record(&results[j])
		if single != nil {
			single.Record(&results[j])
		}
		if rng.IntN(200) == 0 { // a tick: some seconds final, as a running prober's are
			for i := range k {
				recs[i].Tick(results[j].End)
				take(i)
			}
			if single != nil {
				single.Tick(results[j].End)
			}
		}
	}
	if single != nil {
		single.Tick(math.MaxInt64)
	}
	out := make([][][]byte, k)
	for i := range k {
		recs[i].Tick(math.MaxInt64)
		take(i)
		must(t, writers[i].Write(wire.Line{Kind: wire.KindEnd, End: &wire.End{ElapsedNS: 1}}))
		sc := bufio.NewScanner(&bufs[i])
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			out[i] = append(out[i], append([]byte(nil), sc.Bytes()...))
		}
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Property: whatever the split across probers and however their log lines
// interleave — with stray lines in between and streams resumed from their
// start — the merged recorder equals one recorder given every result.
func TestMergeThroughTheWireIsExact(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			results := probertest.RandomResults(rng, 1000+rng.IntN(1500))
			k := 1 + rng.IntN(5)

			single := prober.NewRecorder(1 << 20)
			logs := streams(t, rng, results, k, single)
			names := make([]string, k)
			for i := range names {
				names[i] = fmt.Sprint("p", i)
			}
			merged := prober.NewRecorder(1 << 20)
			m := NewMerger(merged, names)
			runStart := time.Unix(100, 0)
			next := make([]int, k)
			for i := range k {
				m.Started(i, runStart, runStart)
			}
			for done := 0; done < k; {
				i := rng.IntN(k)
				if next[i] == len(logs[i]) {
					continue
				}
				if rng.IntN(500) == 0 { // the log stream broke and was reopened from its start
					for _, line := range logs[i][:next[i]] {
						if _, err := m.Feed(i, line); err != nil {
							t.Fatalf("re-read line: %v", err)
						}
					}
				}
				if rng.IntN(100) == 0 {
					if _, err := m.Feed(i, []byte("I1122 some runtime message")); !errors.Is(err, wire.ErrNotProtocol) {
						t.Fatalf("a stray line: %v", err)
					}
				}
				if _, err := m.Feed(i, logs[i][next[i]]); err != nil {
					t.Fatal(err)
				}
				if next[i]++; next[i] == len(logs[i]) {
					done++
				}
			}
			for i, s := range m.State() {
				if s.End == nil || s.Err != nil || s.Lines != uint64(len(logs[i])) {
					t.Fatalf("prober %d: %+v, %d lines written", i, s, len(logs[i]))
				}
			}
			probertest.Compare(t, single, merged)
		})
	}
}

// A line lost in the middle of a stream is a gap: the prober's stream is
// refused from there on, and says so.
func TestMergeRefusesAGap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	logs := streams(t, rng, probertest.RandomResults(rng, 500), 1, nil)
	m := NewMerger(prober.NewRecorder(100), []string{"p0"})
	for _, line := range logs[0][:3] {
		must(t, func() error { _, err := m.Feed(0, line); return err }())
	}
	_, err := m.Feed(0, logs[0][4])
	if !errors.Is(err, ErrStream) || !errors.Is(err, wire.ErrGap) {
		t.Fatalf("feeding line 5 after 3: %v", err)
	}
	if _, err := m.Feed(0, logs[0][3]); !errors.Is(err, ErrStream) {
		t.Fatalf("after a gap, the stream stays refused: %v", err)
	}
	if st := m.State()[0]; st.Err == nil {
		t.Fatal("the state does not name the broken stream")
	}
}

// A prober that started later than the run has its results moved onto the
// run's timeline by the difference.
func TestMergeShiftsALateProber(t *testing.T) {
	r := prober.Result{Intended: time.Second, Start: time.Second, End: 1100 * time.Millisecond, Class: prober.Refused, Phase: prober.PhaseDial}
	var buf bytes.Buffer
	w := wire.NewWriter(&buf)
	must(t, w.Write(wire.Line{Kind: wire.KindResult, Result: wire.FromResult(&r)}))
	rec := prober.NewRecorder(10)
	m := NewMerger(rec, []string{"p0"})
	runStart := time.Unix(100, 0)
	m.Started(0, runStart.Add(2*time.Second), runStart)
	if _, err := m.Feed(0, bytes.TrimSpace(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	f := rec.Failures()
	if len(f) != 1 || f[0].Intended != 3*time.Second || f[0].Source != 1 {
		t.Fatalf("failures %+v", f)
	}
}
