package lab_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/report"
)

// stallFor is how long the API server is frozen: more than report.ViewStallBound
// with room, less than the controllers' leader-election renew deadline (10 s),
// so the lab's controllers keep their leases.
const stallFor = 8 * time.Second

// testViewStall freezes the lab's kube-apiserver (SIGSTOP) for stallFor
// in the middle of a naive rollout. The referee is the freeze itself: the
// test knows when it sent SIGSTOP and SIGCONT, and the report must show a
// stall of the view that spans them, on the timeline and in the text,
// Markdown and HTML outputs, with the failures begun in it counted and
// those named by conntrack left as they were.
func testViewStall(t *testing.T, ctx context.Context, c *lab.Client) {
	apiserver := componentPID(t, "kube-apiserver")
	ip := ensureSample(t, ctx, c, "naive")
	run := startRun(t, "naive", ip)
	run.waitFor(t, "triggered: restart")
	// The naive rollout deletes its first old pod about a second after the
	// trigger on this lab: freeze the view while pods go away.
	time.Sleep(1500 * time.Millisecond)
	stoppedAt, contAt := freeze(t, "kube-apiserver", stallFor, apiserver)
	r := run.wait(t)
	if r.exit != 0 && r.exit != 1 {
		t.Fatalf("exit %d\n%s", r.exit, r.out())
	}
	checkRunReport(t, r, "complete")
	rep := r.rep

	var st *report.ViewStall
	for i := range rep.ViewStalls {
		s := &rep.ViewStalls[i]
		// An answer already on its way when SIGSTOP landed can arrive just
		// after it (seen in CI: 0.35 ms after): 100 ms of slack.
		if !s.Start.After(stoppedAt.Add(100*time.Millisecond)) && !s.End.Before(contAt) {
			st = s
		}
		t.Logf("stall %+.2fs to %+.2fs (%.2fs): %d failures, %d widened", s.Start.Sub(rep.StartedAt).Seconds(), s.End.Sub(rep.StartedAt).Seconds(), s.DurationS, s.Failures, s.Widened)
	}
	if st == nil {
		t.Fatalf("no stall spans the freeze (SIGSTOP %+.2fs, SIGCONT %+.2fs): %+v", stoppedAt.Sub(rep.StartedAt).Seconds(), contAt.Sub(rep.StartedAt).Seconds(), rep.ViewStalls)
	}
	// The last answer before the freeze came at most a bound before it; the
	// first after it within a few seconds of SIGCONT (a thawed apiserver
	// answers the queued requests first).
	if stoppedAt.Sub(st.Start) > report.ViewStallBound || st.End.Sub(contAt) > 5*time.Second || st.Open {
		t.Errorf("stall %v to %v (open %v) for a freeze from %v to %v", st.Start, st.End, st.Open, stoppedAt, contAt)
	}
	var stalled, resumedEv bool
	for _, e := range rep.Timeline {
		stalled = stalled || (e.Kind == report.ViewStalled && e.At.Equal(st.Start))
		resumedEv = resumedEv || (e.Kind == report.ViewResumed && e.At.Equal(st.End))
	}
	if !stalled || !resumedEv {
		t.Errorf("timeline: view_stalled %v, view_resumed %v at the stall's bounds", stalled, resumedEv)
	}
	// Every failure begun in it is counted; conntrack's names are untouched.
	inside, widened := 0, 0
	for _, f := range rep.Failures {
		began := f.Start
		if began.Before(st.Start) || !began.Before(st.End) {
			continue
		}
		inside++
		if strings.Contains(f.Context, "stall of rollprobe's view") {
			widened++
			if f.Evidence != report.EvidenceTimeline {
				t.Errorf("failure %d named by %s has the stall's widened context", f.Seq, f.Evidence)
			}
		}
	}
	if rep.FailureInfo.Total == uint64(rep.FailureInfo.Kept) && (inside != st.Failures || widened != st.Widened) {
		t.Errorf("the stall counts %d failures, %d widened; the failures say %d, %d", st.Failures, st.Widened, inside, widened)
	}

	// Without conntrack the timeline alone names the stall's failures, with
	// the bound widened: each such failure's candidates must still hold the
	// pod conntrack saw its connection go to.
	inferred := *rep
	inferred.Failures = nil
	for _, f := range rep.Failures {
		f.PodAddr, f.LikelyPod, f.Confidence, f.Candidates, f.Evidence, f.Context = "", "", 0, nil, "", ""
		inferred.Failures = append(inferred.Failures, f)
	}
	x := analysis.Explain(&inferred)
	for i, f := range x.Failures {
		truth := rep.Failures[i]
		if truth.Evidence != report.EvidenceConntrack || f.Start.Before(st.Start) || !f.Start.Before(st.End) {
			continue
		}
		if f.LikelyPod != truth.LikelyPod && !slices.Contains(f.Candidates, truth.LikelyPod) {
			t.Errorf("failure %d in the stall: the widened timeline says %s %v, conntrack %s", f.Seq, f.LikelyPod, f.Candidates, truth.LikelyPod)
		}
	}
	for _, s := range x.ViewStalls {
		t.Logf("from the timeline alone: stall of %.2fs, %d failures, %d widened", s.DurationS, s.Failures, s.Widened)
		if s.Start.Equal(st.Start) && s.Failures != st.Failures {
			t.Errorf("the stall holds %d failures analysed again, %d in the report", s.Failures, st.Failures)
		}
	}

	if !strings.Contains(r.out(), "The view of the cluster stalled at") {
		t.Errorf("the text summary does not say the stall:\n%s", r.out())
	}
	md, err := exec.Command(filepath.Join(binDir, "rollprobe"), "report", "show", r.reportPath, "-o", "markdown").CombinedOutput()
	if err != nil || !strings.Contains(string(md), "The view of the cluster stalled at") {
		t.Errorf("markdown (%v) does not say the stall:\n%s", err, md)
	}
	page, err := os.ReadFile(r.htmlPath)
	if err != nil || !strings.Contains(string(page), `class="stall"`) || !strings.Contains(string(page), "stall-note") {
		t.Error("the HTML page does not draw the stall")
	}
	t.Logf("exit %d; %d failed of %d; %d in the stall, %d widened", r.exit, rep.Totals.Failed, rep.Totals.Sent, st.Failures, st.Widened)
}

// freeze stops the lab's components pids (name says which in messages)
// with SIGSTOP for d and lets them go on with SIGCONT, returning when the
// first SIGSTOP and the SIGCONTs were sent. Whatever fails, each one
// stopped runs again when the test ends.
func freeze(t *testing.T, name string, d time.Duration, pids ...int) (stoppedAt, contAt time.Time) {
	t.Helper()
	var stopped []int
	cont := func() {
		for _, pid := range stopped {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT to %s (pid %d): %v", name, pid, err)
			}
		}
		stopped = nil
	}
	t.Cleanup(cont)
	stoppedAt = time.Now()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP to %s (pid %d): %v", name, pid, err)
		}
		stopped = append(stopped, pid)
	}
	time.Sleep(d)
	contAt = time.Now()
	cont()
	return stoppedAt, contAt
}

// componentPID is the PID of the lab's live component name.
func componentPID(t *testing.T, name string) int {
	t.Helper()
	for _, comp := range lab.GetStatus(stateDir).Components {
		if comp.Name == name && comp.Alive {
			return comp.PID
		}
	}
	t.Fatalf("no live %s in the lab's status", name)
	return 0
}
