package ci

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/prober"
)

// Source is what the progress printer reads: a running prober.
type Source interface {
	Recorder() *prober.Recorder
	Elapsed() time.Duration
	// Probers is each in-cluster prober's status (nil when probing from
	// here): a line each under the merged one.
	Probers() []fleet.Status
}

// StartProgress prints one plain line every interval to w until the returned
// stop function is called: what CI logs and pipes get instead of a live UI.
func StartProgress(w io.Writer, every time.Duration, src Source) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			if v := recover(); v != nil { // the run goes on; its lines stop
				fmt.Fprintf(w, "rollprobe: progress lines stopped by an internal error: %v\n", v)
			}
		}()
		t := time.NewTicker(every)
		defer t.Stop()
		var lastSent uint64
		var lastAt time.Duration
		for {
			select {
			case <-done:
				return
			case <-t.C:
				totals := src.Recorder().Totals()
				now := src.Elapsed()
				sent := totals.Sent()
				rate := 0.0
				if dt := now - lastAt; dt > 0 {
					rate = float64(sent-lastSent) / dt.Seconds()
				}
				lastSent, lastAt = sent, now
				fmt.Fprintln(w, ProgressLine(now, totals, rate))
				for _, p := range src.Probers() {
					fmt.Fprintln(w, ProberLine(p))
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// ProberLine formats one in-cluster prober's progress line.
func ProberLine(p fleet.Status) string {
	on := p.Node
	if p.Path != "" {
		on += " for path " + p.Path
	}
	line := fmt.Sprintf("           prober %s on %s: %g req/s, completed %d, failed %d", p.Pod, on, p.Rate, p.Sent, p.Failed)
	if p.Lost != "" {
		line += ", LOST: " + p.Lost
	}
	return line
}

// ProgressLine formats one progress line.
func ProgressLine(elapsed time.Duration, t prober.Totals, rate float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%6.1fs] completed %d  ok %d  failed %d", elapsed.Seconds(), t.Sent(), t.Classes[prober.OK], t.Failed())
	for _, c := range prober.FailureClasses() {
		if n := t.Classes[c]; n > 0 {
			fmt.Fprintf(&b, "  %s %d", c, n)
		}
	}
	fmt.Fprintf(&b, "  %.0f req/s", rate)
	return b.String()
}
