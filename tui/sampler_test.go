package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

var start = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }

// record puts n results of class c (backend b) in second sec.
func record(rec *prober.Recorder, sec, n int, c prober.Class, b string) {
	for i := 0; i < n; i++ {
		t := time.Duration(sec)*time.Second + time.Duration(i)*time.Millisecond
		res := prober.Result{Intended: t, Start: t, End: t + time.Millisecond, Class: c, Backend: b}
		if c == prober.OK {
			res.Status = 200
		}
		rec.Record(&res)
	}
}

// A naive rollout in miniature: pod a (old) is deleted at +2s, requests
// fail in seconds 2 and 3, new pod n turned ready at +1.5s.
func TestSamplerFollowsTheRun(t *testing.T) {
	rec := prober.NewRecorder(100)
	tl := rollout.NewTimeline(nil)
	replicas := int32(1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "naive"}, Spec: appsv1.DeploymentSpec{Replicas: &replicas},
		Status: appsv1.DeploymentStatus{UpdatedReplicas: 1, ReadyReplicas: 2, AvailableReplicas: 2}}
	now := at(0)
	phase := "baseline"
	revision := "old"
	sink := NewLogSink()
	s := NewSampler(Source{Command: "run", Target: "http://x/", TargetRate: 10, Start: start, Recorder: rec, Timeline: tl,
		Workload: func() (rollout.Workload, bool) { return rollout.Workload{Deployment: dep}, true }, Phase: func() string { return phase }, Log: sink,
		Revisions: func() (string, string) { return "old", revision },
		Now:       func() time.Time { return now }})

	tl.Add(report.Event{At: at(0), Kind: report.PodPresent, Pod: "naive-old-a", Revision: "old", Ready: true})
	tl.Add(report.Event{At: at(0), Kind: report.EndpointAdded, Pod: "naive-old-a", Ready: true, Serving: true})
	record(rec, 0, 10, prober.OK, "naive-old-a")
	record(rec, 1, 10, prober.OK, "naive-old-a")
	snap := s.Sample()
	if snap.Sent != 20 || snap.Rollout.OldRevision != "old" || len(snap.Pods) != 1 || !snap.Pods[0].Serving || snap.Pods[0].Served != 20 {
		t.Fatalf("first frame: %+v", snap)
	}

	phase, revision = "rolling", "new"
	fmt.Fprintf(sink, "rollprobe: triggered: restart\nkubectl says ")
	tl.Add(report.Event{At: at(1000), Kind: report.PodCreated, Pod: "naive-new-n", Revision: "new"})
	tl.Add(report.Event{At: at(1500), Kind: report.PodReady, Pod: "naive-new-n", Revision: "new"})
	tl.Add(report.Event{At: at(2000), Kind: report.PodDeletionRequested, Pod: "naive-old-a", Revision: "old", Detail: "grace 30s"})
	tl.Add(report.Event{At: at(2010), Kind: report.EndpointTerminating, Pod: "naive-old-a", Serving: true, Terminating: true})
	record(rec, 2, 6, prober.Refused, "")
	record(rec, 2, 4, prober.OK, "naive-new-n")
	record(rec, 3, 3, prober.ConnectTimeout, "")
	record(rec, 3, 7, prober.OK, "naive-new-n")
	record(rec, 4, 10, prober.OK, "naive-new-n")
	record(rec, 5, 10, prober.OK, "naive-new-n")
	rec.Tick(6 * time.Second) // seconds 0-5 final
	now = at(6000)
	snap = s.Sample()

	if snap.Failed != 9 || len(snap.Classes) != 2 || snap.Classes[0].Class != "refused" {
		t.Errorf("counters: failed %d classes %+v", snap.Failed, snap.Classes)
	}
	if len(snap.Seconds) != 6 || snap.Seconds[2].Failed != 6 || snap.Seconds[3].Failed != 3 || snap.Seconds[4].Failed != 0 {
		t.Errorf("seconds %+v", snap.Seconds)
	}
	if len(snap.Marks) != 2 || snap.Marks[0] != (Mark{1, MarkReady}) || snap.Marks[1] != (Mark{2, MarkDeleted}) {
		t.Errorf("marks %+v", snap.Marks)
	}
	if snap.Rollout.NewRevision != "new" || snap.Rollout.OldPod != 1 {
		t.Errorf("rollout %+v", snap.Rollout)
	}
	// Terminating pods first, then the newest.
	if len(snap.Pods) != 2 || snap.Pods[0].Name != "naive-old-a" || !snap.Pods[0].Terminating || !snap.Pods[0].Serving ||
		snap.Pods[1].Name != "naive-new-n" || !snap.Pods[1].Ready || snap.Pods[1].Served != 31 {
		t.Errorf("pods %+v", snap.Pods)
	}
	log := logText(snap.Log)
	for _, want := range []string{"pod naive-new-n ready", "deletion requested (grace 30s)", "outage: requests failing",
		"outage over: 9 failed from +2.000s to +3.002s, 1.002s (connect_timeout 3, refused 6)", "rollprobe: triggered: restart",
		"pods changing around it: naive-old-a (deletion requested +2.000s); naive-new-n (ready +1.500s)"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "kubectl says") {
		t.Error("an incomplete line was logged")
	}
	if snap.AchievedRate <= 0 {
		t.Errorf("achieved rate %v", snap.AchievedRate)
	}

	// The pod goes; the next frame adds only what is new.
	killed := int32(report.SIGKILLExitCode)
	zero := int32(0)
	tl.Add(report.Event{At: at(6050), Kind: report.ContainerTerminated, Pod: "naive-old-a", Revision: "old", Container: "app", ExitCode: &killed, Reason: "Error"})
	tl.Add(report.Event{At: at(6060), Kind: report.ContainerTerminated, Pod: "naive-old-a", Revision: "old", Container: "proxy", Sidecar: true, ExitCode: &zero, Reason: "Completed"})
	tl.Add(report.Event{At: at(6100), Kind: report.PodGone, Pod: "naive-old-a", Revision: "old"})
	now = at(6200)
	again := s.Sample()
	for _, want := range []string{"pod naive-old-a: container app exited 137 Error", "pod naive-old-a: sidecar proxy exited 0 Completed"} {
		if log := logText(again.Log); !strings.Contains(log, want) {
			t.Errorf("log lacks the container's exit, named (%q):\n%s", want, log)
		}
	}
	if n := strings.Count(logText(again.Log), "outage over"); n != 1 {
		t.Errorf("the outage was logged %d times", n)
	}
	if !again.Pods[1].Gone || again.Rollout.OldPod != 0 {
		t.Errorf("after pod_gone: %+v %+v", again.Pods, again.Rollout)
	}

	// A rollout's end is "all old pods gone"; a drain's or a scale's, its
	// follow's own account (a scale-out removes no pod).
	tl.Add(report.Event{At: at(6300), Kind: report.AllOldPodsGone, Revision: "new"})
	tl.Add(report.Event{At: at(6400), Kind: report.AllOldPodsGone, Revision: "new", Detail: "the scale removed no pod"})
	now = at(6500)
	if log := logText(s.Sample().Log); strings.Count(log, "all old pods gone") != 1 || !strings.Contains(log, "the scale removed no pod") {
		t.Errorf("ends:\n%s", log)
	}
}

// A probe has no timeline: the backends named by responses are the pods.
func TestSamplerProbeBackends(t *testing.T) {
	rec := prober.NewRecorder(10)
	record(rec, 0, 5, prober.OK, "web-1")
	record(rec, 0, 3, prober.OK, "web-2")
	s := NewSampler(Source{Command: "probe", Start: start, Recorder: rec, Now: func() time.Time { return at(500) }})
	snap := s.Sample()
	if snap.Rollout != nil || len(snap.Pods) != 2 || snap.Pods[0].Served+snap.Pods[1].Served != 8 {
		t.Fatalf("%+v", snap)
	}
	// The open second is the live edge of the chart.
	if len(snap.Seconds) != 1 || snap.Seconds[0].Sent != 8 {
		t.Fatalf("seconds %+v", snap.Seconds)
	}
}

func logText(lines []LogLine) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

// Before the dashboard owns the terminal, lines go straight through; after
// it, only the lines not yet shown are printed.
func TestLogSinkPassThrough(t *testing.T) {
	var out strings.Builder
	sink := NewLogSink()
	sink.PassThrough(&out)
	fmt.Fprintln(sink, "preflight ok")
	sink.PassThrough(nil)
	fmt.Fprint(sink, "triggered\npartial")
	if out.String() != "preflight ok\n" {
		t.Fatalf("passed through %q", out.String())
	}
	if got := sink.Text(); got != "triggered\npartial\n" {
		t.Fatalf("text after the dashboard %q", got)
	}
}

// In a long run a frame copies only the new final rows and carries only
// the chart's tail, with the right absolute seconds; outages are still
// seen once each.
func TestSamplerLongRunCarriesTheTail(t *testing.T) {
	rec := prober.NewRecorder(10)
	const secs = 1200
	for sec := 0; sec < secs; sec++ {
		record(rec, sec, 1, prober.OK, "")
	}
	record(rec, 1100, 2, prober.Refused, "")
	rec.Tick(time.Duration(secs) * time.Second) // seconds up to 1198 final, 1199 open
	now := start.Add(time.Duration(secs) * time.Second)
	s := NewSampler(Source{Command: "probe", Start: start, Recorder: rec, Now: func() time.Time { return now }})
	snap := s.Sample()
	if len(snap.Seconds) != ChartSeconds || snap.SecondsFrom != secs-ChartSeconds {
		t.Fatalf("%d seconds from %d, want %d from %d", len(snap.Seconds), snap.SecondsFrom, ChartSeconds, secs-ChartSeconds)
	}
	if got := snap.Seconds[1100-snap.SecondsFrom]; got.Failed != 2 || got.Sent != 3 {
		t.Fatalf("second 1100: %+v", got)
	}
	if last := snap.Seconds[len(snap.Seconds)-1]; last.Sent != 1 { // the open second 1199
		t.Fatalf("last second %+v", last)
	}
	if n := strings.Count(logText(snap.Log), "outage: requests failing"); n != 1 {
		t.Fatalf("outage opened %d times:\n%s", n, logText(snap.Log))
	}

	// Later frames take only what is new.
	record(rec, secs, 4, prober.OK, "")
	rec.Tick(time.Duration(secs+2) * time.Second)
	now = start.Add(time.Duration(secs+2) * time.Second)
	snap = s.Sample()
	if len(snap.Seconds) != ChartSeconds || snap.SecondsFrom != secs+1-ChartSeconds || snap.Seconds[ChartSeconds-1].Sent != 4 {
		t.Fatalf("%d seconds from %d, last %+v", len(snap.Seconds), snap.SecondsFrom, snap.Seconds[len(snap.Seconds)-1])
	}
	if s.finalRows != secs+1 || len(s.tail) > 2*ChartSeconds {
		t.Fatalf("sampler consumed %d final seconds (want %d), holds %d", s.finalRows, secs+1, len(s.tail))
	}
	if n := strings.Count(logText(snap.Log), "outage"); n != 2 {
		t.Fatalf("want one outage opened and closed:\n%s", logText(snap.Log))
	}
}

// A stall of the view is logged once when seen and once when over, and the
// header says how long the API server has been silent.
func TestSamplerSaysAStall(t *testing.T) {
	rec := prober.NewRecorder(10)
	now, stalled := at(0), time.Duration(0)
	s := NewSampler(Source{Command: "run", Start: start, Recorder: rec, Now: func() time.Time { return now },
		ViewStalled: func(time.Time) time.Duration { return stalled }})
	s.Sample()
	now, stalled = at(6000), 3*time.Second
	snap := s.Sample()
	if snap.ViewStalled != 3*time.Second {
		t.Errorf("snapshot's stall %v", snap.ViewStalled)
	}
	if out := render(withSnapshot(New(Options{}), snap), 100, 24); !strings.Contains(out, "API silent 3s") {
		t.Errorf("the header does not say the stall:\n%s", out)
	}
	now, stalled = at(9000), 6*time.Second
	s.Sample()
	now, stalled = at(11000), 0
	snap = s.Sample()
	log := logText(snap.Log)
	if strings.Count(log, "stalled") != 1 || !strings.Contains(log, "no answer from the API server for 3.0s") || !strings.Contains(log, "live again after 8.0s") {
		t.Errorf("log:\n%s", log)
	}
}

// An outage's closing line lists the pod changes from changesLead before
// it to its end, and says so when there were none (a probe, which has no
// timeline, says nothing of pods: TestSamplerLongRunCarriesTheTail).
func TestSamplerListsPodChangesAroundAnOutage(t *testing.T) {
	outageAt := func(sec int, events ...report.Event) string {
		rec := prober.NewRecorder(100)
		tl := rollout.NewTimeline(nil)
		for _, e := range events {
			tl.Add(e)
		}
		record(rec, sec, 3, prober.Refused, "")
		rec.Tick(time.Duration(sec+10) * time.Second)
		s := NewSampler(Source{Command: "run", Start: start, Recorder: rec, Timeline: tl, Now: func() time.Time { return at((sec + 10) * 1000) }})
		return logText(s.Sample().Log)
	}
	code := int32(0)
	events := []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(1000), Kind: report.PodDeletionRequested, Pod: "a", Revision: "old"},
		{At: at(7500), Kind: report.PodDeletionRequested, Pod: "b", Revision: "old"},
		{At: at(8200), Kind: report.ContainerTerminated, Pod: "b", Revision: "old", ExitCode: &code},
		{At: at(20000), Kind: report.PodReady, Pod: "c", Revision: "new"},
	}
	log := outageAt(12, events...)
	if want := "pods changing around it: b (deletion requested +7.500s, exited 0 +8.200s)\n"; !strings.Contains(log, want) {
		t.Errorf("an outage at +12s: want %q (a's deletion 11s before it, c ready after it, not listed):\n%s", want, log)
	}
	if log := outageAt(40, events...); !strings.Contains(log, "no pod changed from 5s before it to its end") {
		t.Errorf("an outage at +40s, 20s after the last change:\n%s", log)
	}
}

// An outage is logged over only once no failure can still join it, the
// prober's lag behind its schedule counted; a failure that joins it all the
// same reopens it in the log, which then says it over again with the
// final numbers.
func TestSamplerOutageOverWaitsAndCorrects(t *testing.T) {
	rec := prober.NewRecorder(100)
	now := at(0)
	s := NewSampler(Source{Command: "probe", Start: start, Recorder: rec, RequestTimeout: time.Second, Now: func() time.Time { return now }})
	failAt := func(intended, lag, took time.Duration) {
		res := prober.Result{Intended: intended, Start: intended + lag, End: intended + lag + took, Class: prober.ConnectTimeout}
		rec.Record(&res)
	}
	sampleAt := func(ms int) string {
		rec.Tick(time.Duration(ms) * time.Millisecond)
		now = at(ms)
		return logText(s.Sample().Log)
	}
	// Sent 1.5 s behind its schedule: a failure intended within the gap
	// can be sent as late, so the outage is not over 3 s after it (gap 1 s
	// + lag 1.5 s + timeout 1 s + margin 0.5 s = 4 s).
	failAt(2*time.Second, 1500*time.Millisecond, time.Second)
	if log := sampleAt(5000); strings.Contains(log, "outage over") || !strings.Contains(log, "outage: requests failing") {
		t.Fatalf("3 s after the failure, the prober 1.5 s behind:\n%s", log)
	}
	if log := sampleAt(6100); !strings.Contains(log, "outage over: 1 failed from +2.000s to +2.000s") {
		t.Fatalf("4.1 s after it:\n%s", log)
	}
	// Beyond the bound as it stood: intended 0.5 s after it and sent 2 s
	// behind, more than the worst lag when it was logged over.
	failAt(2500*time.Millisecond, 2*time.Second, time.Second)
	log := sampleAt(6200)
	if !strings.Contains(log, "outage goes on: a failure completed late joined the one logged over at +2.000s") {
		t.Fatalf("a late failure joined the outage logged over:\n%s", log)
	}
	log = sampleAt(12000)
	if n := strings.Count(log, "outage: requests failing"); n != 1 {
		t.Errorf("the outage opened %d times in the log:\n%s", n, log)
	}
	if n := strings.Count(log, "outage over"); n != 2 || !strings.Contains(log, "outage over: 2 failed from +2.000s to +2.500s") {
		t.Errorf("want it over twice, the second with both failures:\n%s", log)
	}
}

// A late failure that bridges two outages already logged over merges
// them: one line says both go on, and one says the merged outage over.
func TestSamplerLogsAMergeOfOutagesOnce(t *testing.T) {
	rec := prober.NewRecorder(100)
	now := at(0)
	s := NewSampler(Source{Command: "probe", Start: start, Recorder: rec, RequestTimeout: time.Second, Now: func() time.Time { return now }})
	failAt := func(intended, lag time.Duration) {
		res := prober.Result{Intended: intended, Start: intended + lag, End: intended + lag + time.Second, Class: prober.ConnectTimeout}
		rec.Record(&res)
	}
	sampleAt := func(ms int) string {
		rec.Tick(time.Duration(ms) * time.Millisecond)
		now = at(ms)
		return logText(s.Sample().Log)
	}
	failAt(2*time.Second, 0)
	failAt(4*time.Second, 0)
	if log := sampleAt(8000); strings.Count(log, "outage over") != 2 {
		t.Fatalf("two outages 2 s apart, 4 s after the second:\n%s", log)
	}
	// Both were logged over in one frame; nothing has changed since.
	if log := sampleAt(8050); strings.Contains(log, "go on") || strings.Count(log, "outage over") != 2 {
		t.Fatalf("the next frame, no failure since:\n%s", log)
	}
	// Intended between them, within the gap of each, sent 5 s late.
	failAt(3*time.Second, 5*time.Second)
	log := sampleAt(9100)
	if n := strings.Count(log, "go on"); n != 1 || !strings.Contains(log, "outages go on: failures completed late joined the 2 logged over from +2.000s to +4.000s") {
		t.Fatalf("a late failure bridged both: %d lines say so, want 1:\n%s", n, log)
	}
	log = sampleAt(20000)
	if n := strings.Count(log, "go on"); n != 1 {
		t.Errorf("%d lines say the outages go on, want 1:\n%s", n, log)
	}
	if n := strings.Count(log, "outage: requests failing"); n != 2 {
		t.Errorf("%d outages opened in the log, want the 2 first seen:\n%s", n, log)
	}
	if !strings.Contains(log, "outage over: 3 failed from +2.000s to +4.000s") || strings.Count(log, "outage over") != 3 {
		t.Errorf("want the merged outage over once more, with all three failures:\n%s", log)
	}
}

// Failures seen after a gap, while the outage before is not over, may yet
// be one outage with it: a failure completed late can bridge the gap (the
// lab demo's naive run, where timeouts through the edge complete seconds
// after they are sent). Their start waits until the one before is over,
// so the log counts the report's outages.
func TestSamplerWaitsToLogAStartThatMayMerge(t *testing.T) {
	rec := prober.NewRecorder(100)
	now := at(0)
	s := NewSampler(Source{Command: "probe", Start: start, Recorder: rec, RequestTimeout: 3 * time.Second, Now: func() time.Time { return now }})
	failAt := func(intended, took time.Duration) {
		res := prober.Result{Intended: intended, Start: intended, End: intended + took, Class: prober.Timeout}
		rec.Record(&res)
	}
	sampleAt := func(ms int) string {
		rec.Tick(time.Duration(ms) * time.Millisecond)
		now = at(ms)
		return logText(s.Sample().Log)
	}
	failAt(2*time.Second, 100*time.Millisecond)
	failAt(4*time.Second, 100*time.Millisecond) // 2 s later: another window, for now
	if log := sampleAt(4500); strings.Count(log, "outage: requests failing") != 1 {
		t.Errorf("the first outage not over, the second's start logged:\n%s", log)
	}
	failAt(3*time.Second, 3*time.Second) // a timeout, completed at +6 s: one outage
	log := sampleAt(12000)
	if n := strings.Count(log, "outage: requests failing"); n != 1 || !strings.Contains(log, "outage over: 3 failed from +2.000s to +4.000s") {
		t.Errorf("one outage of 3 failures, %d starts logged:\n%s", n, log)
	}
}

// The run says "done" as its load stops; requests still in flight complete
// after it. Outages are closed at once only when every result is in.
func TestSamplerClosesOutagesWhenEveryResultIsIn(t *testing.T) {
	rec := prober.NewRecorder(100)
	now := at(3000)
	s := NewSampler(Source{Command: "probe", Start: start, Recorder: rec, RequestTimeout: 5 * time.Second,
		Phase: func() string { return "done" }, Now: func() time.Time { return now }})
	res := prober.Result{Intended: 2 * time.Second, Start: 2 * time.Second, End: 2100 * time.Millisecond, Class: prober.Refused}
	rec.Record(&res)
	rec.Tick(3 * time.Second)
	if log := logText(s.Sample().Log); strings.Contains(log, "outage over") {
		t.Fatalf("done, requests still in flight (the recorder not complete):\n%s", log)
	}
	late := prober.Result{Intended: 2500 * time.Millisecond, Start: 2500 * time.Millisecond, End: 7500 * time.Millisecond, Class: prober.Timeout}
	rec.Record(&late)
	rec.Tick(prober.EndOfRun)
	now = at(7600)
	if log := logText(s.Sample().Log); !strings.Contains(log, "outage over: 2 failed from +2.000s to +2.500s") {
		t.Fatalf("every result in:\n%s", log)
	}
}
