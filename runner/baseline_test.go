package runner

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/prober"
)

// The probers' baseline is judged again while its last requests may still
// be without an outcome: a failure that arrives after the baseline, within
// the settle, refuses it (the first failure at once); a healthy one is
// judged once more at the settle's end; a run that ends while it waits
// says so and judges nothing.
func TestAwaitBaseline(t *testing.T) {
	unhealthy := errors.New("not healthy")
	var log bytes.Buffer
	calls := 0
	f := &follower{cfg: &RolloutConfig{Log: &log}, baselineSettle: time.Hour,
		baselineCheck: func() error {
			calls++
			if calls == 3 { // the third look sees the first failure merged
				return unhealthy
			}
			return nil
		}}
	if ended, err := f.awaitBaseline(context.Background()); ended || !errors.Is(err, unhealthy) || calls != 3 {
		t.Errorf("ended %v, err %v after %d checks: want the failure the third check saw", ended, err, calls)
	}
	if !strings.Contains(log.String(), "judged once its requests have their outcomes (up to 1h0m0s)") {
		t.Errorf("log %q: want the wait said", log.String())
	}

	calls = 0
	f.baselineSettle, f.baselineCheck = 0, func() error { calls++; return nil }
	if ended, err := f.awaitBaseline(context.Background()); ended || err != nil || calls != 1 {
		t.Errorf("no settle: ended %v, err %v after %d checks: want one check, passed", ended, err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	f.baselineSettle = time.Hour
	if ended, err := f.awaitBaseline(ctx); !ended || err != nil || calls != 1 {
		t.Errorf("run ended: ended %v, err %v after %d checks: want ended, nothing judged", ended, err, calls)
	}
}

// A refused baseline says what it counted and over how long (the
// baseline, and the wait for its last requests), and which prober on
// which node saw the first failure.
func TestBaselineHealthySaysTheWindowAndTheProber(t *testing.T) {
	rec := prober.NewRecorder(10)
	for i, class := range []prober.Class{prober.OK, prober.ConnectTimeout, prober.OK} {
		rec.Record(&prober.Result{Seq: uint64(i + 1), Class: class, Source: uint16(i + 1), End: time.Duration(i+1) * 100 * time.Millisecond})
	}
	members := []fleet.Member{{Pod: "prober-a", Node: "node-1"}, {Pod: "prober-b", Node: "node-2"}}
	target, err := prober.ParseTarget("http://10.96.0.10/")
	if err != nil {
		t.Fatal(err)
	}
	err = baselineHealthy(rec, prober.Config{Target: target}, members, 7040*time.Millisecond)
	want := "2 of 3 requests the probers sent in their first 7s succeeded (the baseline, and while its last requests ended): first failure connect_timeout (prober prober-b on node node-2)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant it to say %q", err, want)
	}
	healthy := prober.NewRecorder(10)
	healthy.Record(&prober.Result{Seq: 1, Class: prober.OK, Source: 1})
	if err := baselineHealthy(healthy, prober.Config{Target: target}, members, time.Second); err != nil {
		t.Errorf("every request ok: %v", err)
	}
}
