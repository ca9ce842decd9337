package tui

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	reportrender "github.com/rollprobe/rollprobe/report/render"
	"github.com/rollprobe/rollprobe/rollout"
)

// Source is what the sampler reads: the run's recorder, and for rollprobe
// run its timeline and workload. All of it is safe to read while the
// run goes on.
type Source struct {
	Command, Target string
	TargetRate      float64
	Start           time.Time
	Recorder        *prober.Recorder
	Timeline        *rollout.Timeline               // nil for probe
	Workload        func() (rollout.Workload, bool) // nil for probe
	// Revisions are the pod-template-hashes of the revision the run
	// started from and of the current one (the runner's rule); nil for
	// probe.
	Revisions func() (old, current string)
	Phase     func() string
	// ViewStalled is how long the view of the cluster has had no sign of
	// life, when longer than report.ViewStallBound (0 otherwise); nil for
	// probe.
	ViewStalled func(now time.Time) time.Duration
	// Probers is each in-cluster prober's status; nil when probing from
	// here.
	Probers func() []fleet.Status
	// Paths, when the run probes several, are each path's own recorder.
	Paths []PathRecorder
	Log   *LogSink // lines the run logged; may be nil
	Now   func() time.Time
	// BackendHeader is the header naming the pod that answered; without
	// one, what each pod served is not known.
	BackendHeader string
	// RequestTimeout is the prober's: how long after an outage's last
	// failure a request can still fail and join it.
	RequestTimeout time.Duration
}

// PathRecorder is one path of a run and its recorder.
type PathRecorder struct {
	Name     string
	Recorder *prober.Recorder
}

// ChartSeconds bounds the seconds a Snapshot carries: more than a chart
// shows on any terminal, and a frame's copy stays small in a long run.
const ChartSeconds = 512

// latencyEvery bounds how often the run-long latency histograms are merged
// (each is a copy of two histograms; the counters are cheap).
const latencyEvery = 500 * time.Millisecond

// Sampler turns the sources into Snapshots. It keeps what it has derived
// (pod states, marks, outages, the log) between calls; Sample must not be
// called concurrently.
type Sampler struct {
	src Source

	events int            // timeline events consumed
	pods   *analysis.Pods // the one fold of pod state over the timeline
	// frozen holds what an earlier pod of a shared name (a StatefulSet's)
	// had served when its successor appeared: responses count by name, and
	// the old pod was gone before the new one could take the name.
	frozen   map[string]uint64
	marks    []Mark
	log      []LogLine
	sinkSeen int

	finalRows int      // final seconds consumed
	tail      []Second // the last final seconds (at most 2*ChartSeconds)
	// Outage windows (the recorder's, by the report's definition): the
	// first closed ones are logged over (loggedOver: each as logged);
	// opened counts the windows whose start is logged.
	closed, opened int
	loggedOver     []report.Window

	latency   Quantiles
	latencyAt time.Time

	stalledSince time.Time // when the current stall began; zero while live
}

// NewSampler makes a sampler for src.
func NewSampler(src Source) *Sampler {
	if src.Now == nil {
		src.Now = time.Now
	}
	return &Sampler{src: src, pods: analysis.NewPods()}
}

// Sample reads the sources once and returns the frame's data.
func (s *Sampler) Sample() Snapshot {
	now := s.src.Now()
	// Only the rows not seen yet: a frame costs the same in a long run.
	snap := s.src.Recorder.SnapshotFrom(s.finalRows)
	out := Snapshot{Command: s.src.Command, Target: s.src.Target, TargetRate: s.src.TargetRate, Elapsed: now.Sub(s.src.Start),
		ServedUnknown: s.src.BackendHeader == ""}
	if s.src.Phase != nil {
		out.Phase = s.src.Phase()
	}
	if s.src.Probers != nil {
		out.Probers = s.src.Probers()
	}
	if s.src.ViewStalled != nil {
		out.ViewStalled = s.src.ViewStalled(now)
		s.logStall(now, out.ViewStalled)
	}
	for _, p := range s.src.Paths {
		t := p.Recorder.Totals()
		out.Paths = append(out.Paths, PathCount{Name: p.Name, Sent: t.Sent(), Failed: t.Failed()})
	}
	t := snap.Totals
	out.Sent, out.OK, out.Failed = t.Sent(), t.Classes[prober.OK], t.Failed()
	for _, c := range prober.FailureClasses() {
		if n := t.Classes[c]; n > 0 {
			out.Classes = append(out.Classes, ClassCount{c.String(), n})
		}
	}
	if secs := out.Elapsed.Seconds(); secs > 0.5 {
		// The run's average: per-second counts fill in late (a request is
		// counted when it completes, up to its timeout later), so a
		// short window would swing with every slow request.
		out.AchievedRate = float64(out.Sent) / secs
	}
	if now.Sub(s.latencyAt) >= latencyEvery || out.Phase == "done" {
		lat, _ := s.src.Recorder.Latencies()
		q := func(p float64) time.Duration { return time.Duration(lat.ValueAtQuantile(p)) * time.Microsecond }
		s.latency = Quantiles{P50: q(50), P90: q(90), P99: q(99), Max: time.Duration(lat.Max()) * time.Microsecond}
		s.latencyAt = now
	}
	out.Latency = s.latency

	for i := range snap.Rows {
		r := &snap.Rows[i]
		s.tail = append(s.tail, Second{Sent: r.Sent, OK: r.OK(), Failed: r.Failed()})
	}
	s.finalRows += len(snap.Rows)
	if len(s.tail) > 2*ChartSeconds {
		s.tail = append(s.tail[:0:0], s.tail[len(s.tail)-ChartSeconds:]...)
	}
	shown := s.tail[max(0, len(s.tail)-ChartSeconds):]
	out.SecondsFrom = s.finalRows - len(shown)
	out.Seconds = append(make([]Second, 0, len(shown)+2), shown...)
	if cur := snap.Current; cur.Second >= int64(s.finalRows) {
		for int64(out.SecondsFrom+len(out.Seconds)) < cur.Second {
			out.Seconds = append(out.Seconds, Second{})
		}
		out.Seconds = append(out.Seconds, Second{Sent: cur.Sent, OK: cur.OK(), Failed: cur.Failed()})
	}
	if extra := len(out.Seconds) - ChartSeconds; extra > 0 {
		out.Seconds = out.Seconds[extra:]
		out.SecondsFrom += extra
	}
	// The timeline first: a closing outage's line names the pod changes
	// around it.
	if s.src.Timeline != nil {
		for _, e := range s.src.Timeline.Since(s.events) {
			s.event(e)
			s.events++
		}
	}
	// "done" is said as the load stops; requests in flight then complete
	// for up to their timeout: outages are final once every one is in.
	s.outages(out.Elapsed, t.MaxLag, out.Phase == "done" && s.src.Recorder.Complete())
	if s.src.Log != nil {
		lines := s.src.Log.snapshot()
		for _, l := range lines[min(s.sinkSeen, len(lines)):] {
			s.log = append(s.log, LogLine{At: l.at.Sub(s.src.Start), Text: l.text})
		}
		s.sinkSeen = len(lines)
	}
	// Outages are seen a moment after the seconds they began in; keep the
	// log in time order.
	sort.SliceStable(s.log, func(i, j int) bool { return s.log[i].At < s.log[j].At })
	out.Marks = append([]Mark(nil), s.marks...)
	out.Log = append([]LogLine(nil), s.log...)
	out.Pods = s.podRows(now, t.Backends)
	if s.src.Workload != nil {
		if w, ok := s.src.Workload(); ok {
			out.Rollout = s.rollout(w)
		}
	}
	return out
}

// outages logs the recorder's outage windows, which are the report's: the
// start of each as it appears, and its end (with its count, classes and
// length, the numbers the summary will print) once no failure can still
// join it (closeAfter). Should one join all the same, the log says the
// outage goes on, and says it over again with the final numbers.
func (s *Sampler) outages(elapsed, maxLag time.Duration, final bool) {
	// A late failure changes the last window logged over, or bridges
	// several into one: every window logged over that is no longer as
	// logged goes on, and one line says so.
	reopened := 0
	for s.closed > 0 {
		ws, _ := s.src.Recorder.OutagesFrom(s.closed - 1)
		if was := s.loggedOver[s.closed-1]; len(ws) > 0 && ws[0].Start == was.Start && ws[0].End == was.End && ws[0].Count == was.Count {
			break
		}
		s.closed--
		reopened++
	}
	switch {
	case reopened == 1:
		s.log = append(s.log, LogLine{At: elapsed, Bad: true,
			Text: fmt.Sprintf("outage goes on: a failure completed late joined the one logged over at %+.3fs", s.loggedOver[s.closed].End.Seconds())})
	case reopened > 1:
		s.log = append(s.log, LogLine{At: elapsed, Bad: true,
			Text: fmt.Sprintf("outages go on: failures completed late joined the %d logged over from %+.3fs to %+.3fs", reopened,
				s.loggedOver[s.closed].End.Seconds(), s.loggedOver[s.closed+reopened-1].End.Seconds())})
	}
	s.loggedOver = s.loggedOver[:s.closed]
	ws, total := s.src.Recorder.OutagesFrom(s.closed)
	s.opened = min(s.opened, total) // windows a late failure bridged merge
	base := s.closed
	for k, w := range ws {
		i := base + k
		if i >= s.opened {
			s.log = append(s.log, LogLine{At: w.Start, Bad: true, Text: "outage: requests failing"})
			s.opened = i + 1
		}
		// Later windows wait, their starts too: until this one is over, a
		// late failure can still bridge the gap and merge them (the lab
		// demo's naive run logged a second start for its one outage when
		// they did not wait).
		if !final && elapsed-w.End <= s.closeAfter(maxLag) {
			break
		}
		var parts []string
		for c, n := range w.ByClass {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
		sort.Strings(parts)
		s.log = append(s.log, LogLine{At: max(w.End, elapsed), Bad: true,
			Text: fmt.Sprintf("outage over: %d failed from %+.3fs to %+.3fs, %.3fs (%s)", w.Count, w.Start.Seconds(), w.End.Seconds(),
				(w.End - w.Start).Seconds(), strings.Join(parts, ", "))})
		if s.src.Timeline != nil {
			s.log = append(s.log, LogLine{At: max(w.End, elapsed), Text: s.changesAround(w.Start, w.End)})
		}
		s.closed, s.loggedOver = i+1, append(s.loggedOver, w)
	}
}

// mergeMargin covers a result's way to the windows: the recorder merges
// the probers' results every 100 ms (prober.sampleEvery), and a frame
// samples a moment after.
const mergeMargin = 500 * time.Millisecond

// closeAfter is how long after an outage's last failure (its intended
// send time) a failure can still join it: one intended within
// report.OutageGap of it is sent as late as the prober runs behind its
// schedule (maxLag, the run's worst so far), fails up to the request
// timeout after that, and reaches the recorder within mergeMargin. A
// bound, not a certainty (the prober may fall further behind): a late
// join is logged as such.
func (s *Sampler) closeAfter(maxLag time.Duration) time.Duration {
	return report.OutageGap + maxLag + s.src.RequestTimeout + mergeMargin
}

// changesLead is how long before an outage a pod's change is listed with
// it: a deletion's failures follow it by the proxies' lag and the pod's
// own stop (seconds in the lab's naive runs).
const changesLead = 5 * time.Second

// changesShown bounds the pods one outage's line names.
const changesShown = 4

// changesAround says which pods changed from changesLead before start to
// end (offsets from the run's start, as rollprobe received the changes).
// It is a list of facts beside the outage, not an attribution: the report
// says which pod each failure hit and how sure that is.
func (s *Sampler) changesAround(start, end time.Duration) string {
	in := func(t *time.Time) bool {
		if t == nil {
			return false
		}
		d := t.Sub(s.src.Start)
		return d >= start-changesLead && d <= end
	}
	var pods []string
	for _, p := range s.pods.All() {
		var what []string
		add := func(t *time.Time, word string) {
			if in(t) {
				what = append(what, fmt.Sprintf("%s %+.3fs", word, t.Sub(s.src.Start).Seconds()))
			}
		}
		if !p.Present {
			add(p.ReadyAt, "ready")
		}
		add(p.DeletedAt, "deletion requested")
		if in(p.ExitAt) && p.ExitCode != nil {
			what = append(what, fmt.Sprintf("exited %d %+.3fs", *p.ExitCode, p.ExitAt.Sub(s.src.Start).Seconds()))
		}
		add(p.EndpointGoneAt, "endpoint removed")
		if len(what) > 0 {
			pods = append(pods, fmt.Sprintf("%s (%s)", p.Name, strings.Join(what, ", ")))
		}
	}
	if len(pods) == 0 {
		return fmt.Sprintf("  no pod changed from %.0fs before it to its end", changesLead.Seconds())
	}
	more := ""
	if len(pods) > changesShown {
		more = fmt.Sprintf("; %d more", len(pods)-changesShown)
		pods = pods[:changesShown]
	}
	return fmt.Sprintf("  pods changing around it: %s%s", strings.Join(pods, "; "), more)
}

// event folds a timeline event into the pod states (analysis.Pods), the
// marks and the log.
func (s *Sampler) event(e report.Event) {
	s.pods.Apply(e)
	at := e.At.Sub(s.src.Start)
	sec := int(max(0, at/time.Second))
	logf := func(bad bool, format string, args ...any) {
		s.log = append(s.log, LogLine{At: at, Text: fmt.Sprintf(format, args...), Bad: bad})
	}
	switch e.Kind {
	case report.PodCreated:
		logf(false, "pod %s created", e.Pod)
	case report.PodReady:
		s.marks = append(s.marks, Mark{sec, MarkReady})
		logf(false, "pod %s ready", e.Pod)
	case report.PodUnready:
		logf(false, "pod %s unready", e.Pod)
	case report.PodDeletionRequested:
		s.marks = append(s.marks, Mark{sec, MarkDeleted})
		logf(false, "pod %s deletion requested (%s)", e.Pod, e.Detail)
	case report.ContainerTerminated:
		code := int32(-1)
		if e.ExitCode != nil {
			code = *e.ExitCode
		}
		logf(e.Killed(), "pod %s: %s exited %d %s", e.Pod, report.ContainerNamed(e.Container, e.Sidecar), code, e.Reason)
	case report.PodGone:
		logf(false, "pod %s gone", e.Pod)
	case report.EndpointTerminating:
		logf(false, "endpoint %s terminating (ready=%v serving=%v)", e.Pod, e.Ready, e.Serving)
	case report.EndpointRemoved:
		logf(false, "endpoint %s removed", e.Pod)
	case report.RolloutTriggered:
		logf(false, "rollout triggered: %s", e.Detail)
	case report.RevisionCreated:
		logf(false, "new revision %s", e.Revision)
	case report.PodEvicted, report.EvictionRefused, report.EvictionOvertaken:
		logf(false, "%s", e.Detail)
	case report.EvictionFailed:
		logf(true, "%s", e.Detail)
	case report.RolloutComplete:
		logf(false, "rollout complete: %s", e.Detail)
	case report.RolloutFailed:
		logf(true, "rollout failed: %s", e.Detail)
	case report.AllOldPodsGone:
		if e.Detail != "" { // a drain's or a scale's own account
			logf(false, "%s", e.Detail)
			break
		}
		logf(false, "all old pods gone")
	case report.AbortedPodsGone:
		logf(false, "%s", e.Detail)
	case report.WatchError:
		logf(true, "%s", e.Detail)
	}
}

// logStall logs a stall of the view once when it is seen and once when it
// ends (stalled: Source.ViewStalled's answer).
func (s *Sampler) logStall(now time.Time, stalled time.Duration) {
	switch {
	case stalled > 0 && s.stalledSince.IsZero():
		s.stalledSince = now.Add(-stalled)
		s.log = append(s.log, LogLine{At: now.Sub(s.src.Start), Bad: true, Text: fmt.Sprintf("the view of the cluster stalled: no answer from the API server for %.1fs", stalled.Seconds())})
	case stalled == 0 && !s.stalledSince.IsZero():
		s.log = append(s.log, LogLine{At: now.Sub(s.src.Start), Text: fmt.Sprintf("the view of the cluster is live again after %.1fs", now.Sub(s.stalledSince).Seconds())})
		s.stalledSince = time.Time{}
	}
}

// servedBy is what p served of what its name served: all of it for a
// name one pod bore; with several, each earlier pod keeps what the name
// had served when it was succeeded (frozen), the last one the rest.
func (s *Sampler) servedBy(p *analysis.Pod, served map[string]uint64) uint64 {
	incs := s.pods.Incarnations(p.PodName)
	total := served[p.PodName]
	if len(incs) < 2 {
		return total
	}
	if s.frozen == nil {
		s.frozen = map[string]uint64{}
	}
	var before uint64
	for _, q := range incs[:len(incs)-1] {
		n, ok := s.frozen[q.Name]
		if !ok {
			n = total - min(before, total)
			s.frozen[q.Name] = n
		}
		if q == p {
			return n
		}
		before += n
	}
	return total - min(before, total)
}

// podRows lists the pods, newest first, gone ones last.
func (s *Sampler) podRows(now time.Time, served map[string]uint64) []Pod {
	var rows []Pod
	for _, p := range s.pods.All() {
		rows = append(rows, Pod{Name: p.Name, Revision: p.Revision, Ready: p.Ready, Serving: p.Serving,
			Terminating: p.Terminating, Gone: p.Gone, Age: now.Sub(p.FirstSeen), Served: s.servedBy(p, served)})
	}
	for name, n := range served {
		if s.pods.Served(name, now) == nil {
			rows = append(rows, Pod{Name: reportrender.Printable(name), Served: n}) // probe: the backends are the pods (named by the server)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Gone != rows[j].Gone {
			return !rows[i].Gone
		}
		if rows[i].Terminating != rows[j].Terminating {
			return rows[i].Terminating
		}
		if rows[i].Age != rows[j].Age {
			return rows[i].Age < rows[j].Age
		}
		return rows[i].Name < rows[j].Name
	})
	return rows
}

func (s *Sampler) rollout(w rollout.Workload) *Rollout {
	if w.IsZero() {
		return nil
	}
	ref := w.Ref()
	ro := &Rollout{Kind: ref.Kind.Lower(), Name: ref.Namespace + "/" + ref.Name}
	ro.Desired, ro.Updated, ro.Ready, ro.Available = w.Counts()
	if s.src.Revisions != nil {
		ro.OldRevision, ro.NewRevision = s.src.Revisions()
		if ro.NewRevision == ro.OldRevision {
			ro.NewRevision = "" // no new revision yet
		}
	}
	for _, p := range s.pods.All() {
		if ro.OldRevision != "" && p.Revision == ro.OldRevision && !p.Gone {
			ro.OldPod++
		}
	}
	return ro
}

// LogSink collects the lines a run logs (progress, the --exec command's
// output) while the dashboard owns the terminal. It is an io.Writer safe
// for concurrent use.
type LogSink struct {
	mu      sync.Mutex
	partial bytes.Buffer
	lines   []sinkLine
	now     func() time.Time
	through io.Writer // while set, lines are also written here at once
}

type sinkLine struct {
	at      time.Time
	text    string
	printed bool // already written through
}

// PassThrough writes every line also to w as it completes, until called
// with nil: before the dashboard takes the terminal (preflight), lines
// belong on stderr right away.
func (l *LogSink) PassThrough(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.through = w
}

// NewLogSink makes an empty sink.
func NewLogSink() *LogSink { return &LogSink{now: time.Now} }

func (l *LogSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial.Write(p)
	for {
		line, err := l.partial.ReadString('\n')
		if err != nil {
			// An incomplete line waits for the rest.
			rest := []byte(line)
			l.partial.Reset()
			l.partial.Write(rest)
			return len(p), nil
		}
		sl := sinkLine{at: l.now(), text: strings.TrimRight(line, "\r\n")}
		if l.through != nil {
			_, _ = io.WriteString(l.through, sl.text+"\n")
			sl.printed = true
		}
		l.lines = append(l.lines, sl)
	}
}

// snapshot returns every complete line so far.
func (l *LogSink) snapshot() []sinkLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sinkLine(nil), l.lines...)
}

// Text is every line not yet written through, for printing once the
// dashboard is gone.
func (l *LogSink) Text() string {
	var b strings.Builder
	for _, line := range l.snapshot() {
		if line.printed {
			continue
		}
		b.WriteString(line.text)
		b.WriteByte('\n')
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.partial.Len() > 0 {
		b.Write(l.partial.Bytes())
		b.WriteByte('\n')
	}
	return b.String()
}
