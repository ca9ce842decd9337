package runner

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
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
