package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// Streams is how the CLI reaches a prober pod through the API server:
// attach to its container (stdin for the commands, stdout for the pongs
// that time them) and follow its log (the results, resumable).
type Streams interface {
	// Attach streams until ctx ends or the stream breaks.
	Attach(ctx context.Context, pod string, stdin io.Reader, stdout io.Writer) error
	// Logs follows the container's log from its start.
	Logs(ctx context.Context, pod string) (io.ReadCloser, error)
}

// Config is a fleet of probers.
type Config struct {
	Kube    kubernetes.Interface
	Streams Streams
	Pods    PodSpec
	// Probe is the whole run's load: Rate is split evenly across the
	// probers (Concurrency too, for the closed model).
	Probe prober.Config
	// Paths, when two or more, are probed side by side instead of Probe
	// (which is then the first path's configuration): Pods.Count probers
	// for each path, each at its share of that path's rate, all started
	// on one clock. The merged recorder has every path's results (their
	// Path set); PathRecorders each path's alone.
	Paths []prober.Path
	// RunID names the run (request IDs are RunID.i-seq).
	RunID string
	Logf  func(format string, args ...any)
}

// Tuning of the protocol's timing.
const (
	// pings per prober for its clock offset: the one with the shortest
	// round trip is the estimate.
	pings = 7
	// startLead is how far ahead the common start is set: every start
	// command must arrive before it.
	startLead = 500 * time.Millisecond
	// endWait bounds the wait for the probers' end lines after stop,
	// beyond the request timeout (in-flight requests finish first).
	endWait = 15 * time.Second
	// logResumes is how often a broken log stream is reopened.
	logResumes = 5
)

// Member is what the CLI knows of one prober.
type Member struct {
	Pod  string
	Node string
	// Path is the index of the path it probes (Config.Paths; 0 for one).
	Path int
	// ClockOffset is the prober's clock minus the CLI's, estimated from
	// the ping with the shortest round trip (RTT).
	ClockOffset time.Duration
	RTT         time.Duration
	Share       float64 // of the rate, req/s (0 for the closed model)
	// Started is when it began sending, on the CLI's clock.
	Started time.Time
	// Lost says why its results are incomplete ("" when they are not):
	// a broken stream, a gap, a prober that ended in error.
	Lost   string
	LostAt time.Time
}

// Fleet is a set of running prober pods the CLI drives.
type Fleet struct {
	cfg     Config
	rec     *prober.Recorder
	paths   []*prober.Recorder // each path's, when Config.Paths
	merger  *Merger
	members []*member
	start   time.Time // the run's start on the CLI's clock (T0)
	startMu sync.Mutex
	// clock is the CLI's wall clock against its monotonic one through
	// the run (guarded by startMu): the probers' offsets are on the CLI's
	// run clock (each moved by its start, measured on the CLI's clock),
	// and the timeline is the CLI's too, so its samples place both.
	clock report.WallClock
	// noteClock notes the wall clock now on c, a run begun at start
	// (nil: c.Note(start, time.Now()); tests set a clock that steps).
	noteClock func(c *report.WallClock, start time.Time)
	cancel    context.CancelFunc
	closed    sync.Once
	// canceled: the run was interrupted (Go's context); final once Go's
	// outcome is sent.
	canceled atomic.Bool
}

// member is one prober's connection.
type member struct {
	Member
	mu      sync.Mutex
	stdin   *io.PipeWriter
	pongs   chan wire.Pong
	started chan struct{} // closed on its started line
	ended   chan struct{} // closed on its end line or when its stream is lost
	endOnce sync.Once
	end     *wire.End
}

// Launch creates the prober pods, waits until they run, connects to each
// (attach, log), measures each clock's offset and sends the configuration.
// Nothing is sent to the target yet. On any error every pod is deleted.
func Launch(ctx context.Context, cfg Config) (_ *Fleet, err error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if len(cfg.Paths) == 1 {
		cfg.Probe, cfg.Paths = cfg.Paths[0].Config, nil
	}
	if len(cfg.Paths) > prober.MaxPaths {
		return nil, fmt.Errorf("fleet: %d paths, at most %d", len(cfg.Paths), prober.MaxPaths)
	}
	if len(cfg.Paths) > 0 {
		cfg.Probe = cfg.Paths[0].Config
	}
	cfg.Pods.RunID = cfg.RunID
	cfg.Pods.Paths = len(cfg.Paths)
	pods, err := launch(ctx, cfg.Kube, cfg.Pods)
	if err != nil {
		return nil, err
	}
	connCtx, cancel := context.WithCancel(context.Background()) // lives until Close, whatever ctx does
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	f := &Fleet{cfg: cfg, rec: prober.NewRecorder(cfg.Probe.KeepFailures), cancel: cancel}
	f.merger = NewMerger(f.rec, names)
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	loads := []prober.Config{cfg.Probe}
	pathOf := make([]int, len(pods))
	if len(cfg.Paths) > 0 {
		loads = nil
		for _, p := range cfg.Paths {
			loads = append(loads, p.Config)
			f.paths = append(f.paths, prober.NewRecorder(p.Config.KeepFailures))
		}
		for i := range pods {
			pathOf[i] = cfg.Pods.pathOf(i)
		}
		if err := f.merger.ByPath(pathOf, f.paths); err != nil {
			return nil, err
		}
	}
	shares := make([]prober.Config, len(loads))
	cmds := make([]string, len(loads))
	for p, c := range loads {
		shares[p] = share(c, len(pods)/len(loads))
		if cmds[p], err = wire.ConfigCommand(wire.FromConfig(shares[p])); err != nil {
			return nil, err
		}
	}
	for i, p := range pods {
		m := &member{Member: Member{Pod: p.Name, Node: p.Node, Path: pathOf[i], Share: shares[pathOf[i]].Rate}, pongs: make(chan wire.Pong, pings),
			started: make(chan struct{}), ended: make(chan struct{})}
		f.members = append(f.members, m)
		f.connect(connCtx, i, m)
	}
	for _, m := range f.members {
		if err := f.measureClock(ctx, m); err != nil {
			return nil, err
		}
		if err := m.send(cmds[m.Path]); err != nil {
			return nil, fmt.Errorf("prober %s: config: %w", m.Pod, err)
		}
		on := ""
		if len(cfg.Paths) > 0 {
			on = " (path " + cfg.Paths[m.Path].Name + ")"
		}
		cfg.Logf("prober %s on node %s%s: clock offset %v (round trip %v)", m.Pod, m.Node, on, m.ClockOffset.Round(time.Microsecond), m.RTT.Round(time.Microsecond))
	}
	return f, nil
}

// share is one of n probers' part of load c.
func share(c prober.Config, n int) prober.Config {
	c.Rate /= float64(n)
	if c.Rate == 0 {
		c.Concurrency = max(1, int(math.Ceil(float64(c.Concurrency)/float64(n))))
	}
	c.Duration = 0
	return c
}

// connect attaches to prober i and follows its log, for as long as ctx.
func (f *Fleet) connect(ctx context.Context, i int, m *member) {
	stdinR, stdinW := io.Pipe()
	m.stdin = stdinW
	outR, outW := io.Pipe()
	go func() {
		err := f.cfg.Streams.Attach(ctx, m.Pod, stdinR, outW)
		_ = outW.CloseWithError(err)
		_ = stdinR.CloseWithError(fmt.Errorf("attach ended: %v", err))
	}()
	go func() { // the attach's stdout: only the pongs, which time the clock
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			if l, err := wire.Parse(sc.Bytes()); err == nil && l.Kind == wire.KindPong {
				select {
				case m.pongs <- *l.Pong:
				default:
				}
			}
		}
	}()
	go f.follow(ctx, i, m)
}

// follow feeds prober i's log to the merger until its end line, reopening
// a broken stream (the merger skips what it has already read).
func (f *Fleet) follow(ctx context.Context, i int, m *member) {
	defer m.endOnce.Do(func() { close(m.ended) })
	for attempt := 0; ; attempt++ {
		err := f.followOnce(ctx, i, m)
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrStream) || attempt == logResumes {
			f.lose(m, err)
			return
		}
		f.cfg.Logf("prober %s: log stream broke (%v); reopening", m.Pod, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
}

// followOnce reads the log once; nil when the end line was read.
func (f *Fleet) followOnce(ctx context.Context, i int, m *member) error {
	rc, err := f.cfg.Streams.Logs(ctx, m.Pod)
	if err != nil {
		return err
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		l, err := f.merger.Feed(i, sc.Bytes())
		switch {
		case errors.Is(err, wire.ErrNotProtocol):
			f.cfg.Logf("prober %s: %s", m.Pod, sc.Text())
			continue
		case err != nil:
			return err
		}
		switch l.Kind {
		case wire.KindStarted:
			m.mu.Lock()
			m.Started = time.Unix(0, l.Started.WallNS).Add(-m.ClockOffset)
			m.mu.Unlock()
			f.merger.Started(i, m.Started, f.runStart())
			close(m.started)
		case wire.KindEnd:
			m.mu.Lock()
			m.end = l.End
			m.mu.Unlock()
			if l.End.Error != "" {
				f.lose(m, fmt.Errorf("the prober ended in error: %s", l.End.Error))
			}
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF // the stream ended before the end line
}

// lose marks a prober's results incomplete: the run cannot be exact.
func (f *Fleet) lose(m *member, err error) {
	m.mu.Lock()
	if m.Lost == "" {
		m.Lost, m.LostAt = err.Error(), time.Now()
	}
	m.mu.Unlock()
	f.cfg.Logf("prober %s: results incomplete: %v", m.Pod, err)
	m.endOnce.Do(func() { close(m.ended) })
}

// measureClock estimates m's clock offset from a few pings.
func (f *Fleet) measureClock(ctx context.Context, m *member) error {
	best := time.Duration(math.MaxInt64)
	for id := range uint64(pings) {
		sent := time.Now()
		if err := m.send(fmt.Sprintf("ping %d\n", id)); err != nil {
			return fmt.Errorf("prober %s: ping: %w", m.Pod, err)
		}
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Second):
				return fmt.Errorf("prober %s: no answer to a ping in 10s (attach to the pod failed?)", m.Pod)
			case p := <-m.pongs:
				if p.ID != id {
					continue // a late answer to an earlier ping
				}
				got := time.Now()
				if rtt := got.Sub(sent); rtt < best {
					best = rtt
					mid := sent.Add(rtt / 2)
					m.ClockOffset, m.RTT = time.Unix(0, p.WallNS).Sub(mid), rtt
				}
			}
			break
		}
	}
	return nil
}

func (m *member) send(s string) error {
	_, err := io.WriteString(m.stdin, s)
	return err
}

func (f *Fleet) runStart() time.Time {
	f.startMu.Lock()
	defer f.startMu.Unlock()
	return f.start
}

// Go starts every prober at one moment (each told it on its own clock)
// and returns once all are sending (or lost), like prober.Go; the channel
// gets the outcome once every prober has ended. Cancelling ctx stops them
// (an interruption).
func (f *Fleet) Go(ctx context.Context) <-chan prober.Outcome {
	start := time.Now().Add(startLead)
	f.startMu.Lock()
	f.start = start
	f.clock = report.NewWallClock(start)
	f.startMu.Unlock()
	sampled := make(chan struct{})
	go f.sampleClock(start, sampled)
	for _, m := range f.members {
		if err := m.send(fmt.Sprintf("start %d\n", start.Add(m.ClockOffset).UnixNano())); err != nil {
			f.lose(m, fmt.Errorf("start: %w", err))
		}
	}
	for _, m := range f.members {
		select {
		case <-m.started:
		case <-m.ended:
		case <-time.After(f.cfg.Pods.StartTimeout):
			f.lose(m, errors.New("no started line in time"))
		}
	}
	out := make(chan prober.Outcome, 1)
	go func() {
		stopped := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case <-ctx.Done():
				f.canceled.Store(true)
				f.Stop()
			case <-stopped:
			}
		}()
		for _, m := range f.members {
			<-m.ended
		}
		close(stopped)
		close(sampled)
		// The watcher may have seen ctx end as the last prober ended:
		// whether the run was interrupted is known once it has returned.
		<-watched
		f.merger.Finish()
		out <- prober.Outcome{Summary: f.summary(f.canceled.Load())}
	}()
	return out
}

// clockTick is how often the CLI samples its wall clock during a run, as
// a prober does (a step is placed within it).
const clockTick = 100 * time.Millisecond

// sampleClock notes the CLI's wall clock against its monotonic one every
// clockTick from start until done closes, and once more then.
func (f *Fleet) sampleClock(start time.Time, done <-chan struct{}) {
	tick := time.NewTicker(clockTick)
	defer tick.Stop()
	note := func() {
		f.startMu.Lock()
		if f.noteClock != nil {
			f.noteClock(&f.clock, start)
		} else {
			f.clock.Note(start, time.Now()) // before start: ignored
		}
		f.startMu.Unlock()
	}
	for {
		select {
		case <-tick.C:
			note()
		case <-done:
			note()
			return
		}
	}
}

// Stop tells every prober to end its send window; Go's outcome comes once
// their last results are in. A prober that does not end in time is lost.
func (f *Fleet) Stop() {
	for _, m := range f.members {
		_ = m.send("stop\n")
	}
	go func() {
		limit := time.After(f.cfg.Probe.Timeout + endWait)
		for _, m := range f.members {
			select {
			case <-m.ended:
			case <-limit:
				f.lose(m, errors.New("no end line after stop"))
			}
		}
	}()
}

// summary is the fleet's run as one prober's summary: from the common
// start to the last prober's end.
func (f *Fleet) summary(canceled bool) prober.Summary {
	if len(f.cfg.Paths) == 0 {
		return f.summaryOf(-1, f.cfg.Probe.Rate, canceled)
	}
	var rate float64
	for _, p := range f.cfg.Paths {
		rate += p.Config.Rate
	}
	return f.summaryOf(-1, rate, canceled)
}

// summaryOf is the summary of the probers of one path (all when path is
// -1), whose rate was target. Its Dialled is every prober's, when every
// one sent its own (none when one did not, or ended without saying: where
// its connections went is unknown, so the entry is read from the target).
func (f *Fleet) summaryOf(path int, target float64, canceled bool) prober.Summary {
	s := prober.Summary{Start: f.runStart(), Target: target, Canceled: canceled}
	f.startMu.Lock()
	if !f.clock.Start.IsZero() {
		s.Clock = f.clock.Clone()
	}
	f.startMu.Unlock()
	// Where the connections went is known when every prober said it.
	dialledKnown := true
	for _, m := range f.members {
		if path >= 0 && m.Path != path {
			continue
		}
		m.mu.Lock()
		e := m.end
		if e == nil || e.Dialled == nil {
			dialledKnown = false
		} else if addrs, err := e.Dialled.AddrPorts(); err == nil { // validated as the line was read
			s.Dialled, s.DialledMore = prober.UnionDialled(s.Dialled, s.DialledMore, addrs, e.Dialled.More)
		}
		if e != nil {
			shift := m.Started.Sub(s.Start)
			s.Elapsed = max(s.Elapsed, shift+time.Duration(e.ElapsedNS))
			s.Sending = max(s.Sending, shift+time.Duration(e.SendingNS))
			s.Workers += e.Workers
			if s.Engine == "" {
				s.Engine = prober.Engine(e.Engine) // one binary, one configuration: one engine
			}
			// A prober cut short (its pod deleted) is lost, not an
			// interruption of the run: only the CLI's own is.
		}
		m.mu.Unlock()
	}
	if !dialledKnown {
		s.Dialled, s.DialledMore = nil, false
	}
	return s
}

// Members copies what is known of each prober.
func (f *Fleet) Members() []Member {
	out := make([]Member, len(f.members))
	for i, m := range f.members {
		m.mu.Lock()
		out[i] = m.Member
		m.mu.Unlock()
	}
	return out
}

// Status is one prober's line in a live view.
type Status struct {
	Pod, Node    string
	Path         string  // the name of the path it probes ("" for one target)
	Rate         float64 // its share, req/s
	Sent, Failed uint64  // merged so far (failed: target failures)
	Lost         string
}

// Statuses is each prober's live line, in the order of Members.
func (f *Fleet) Statuses() []Status {
	members, sources := f.Members(), f.Sources()
	out := make([]Status, len(members))
	for i, m := range members {
		s := Status{Pod: m.Pod, Node: m.Node, Rate: m.Share, Sent: sources[i].Sent, Lost: m.Lost}
		if len(f.cfg.Paths) > 0 {
			s.Path = f.cfg.Paths[m.Path].Name
		}
		for c := prober.Class(1); int(c) < prober.NumClasses; c++ {
			if c.Failed() {
				s.Failed += sources[i].ByClass[c]
			}
		}
		out[i] = s
	}
	return out
}

// Sources is what the merger counted of each prober (its run ID, what it
// sent, by class), in the order of Members.
func (f *Fleet) Sources() []SourceState { return f.merger.State() }

// StartSpread is the time between the first and the last prober's start.
func (f *Fleet) StartSpread() time.Duration {
	var starts []time.Time
	for _, m := range f.Members() {
		if !m.Started.IsZero() {
			starts = append(starts, m.Started)
		}
	}
	if len(starts) < 2 {
		return 0
	}
	first := slices.MinFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	last := slices.MaxFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	return last.Sub(first)
}

// Recorder is the merged recorder: the run as one prober would have
// recorded it.
func (f *Fleet) Recorder() *prober.Recorder { return f.rec }

// Paths are the paths probed side by side (nil for one target), in the
// order of Config.Paths: Member.Path and Result.Path index them.
func (f *Fleet) Paths() []prober.Path { return f.cfg.Paths }

// PathRecorders are each path's merged recorder (nil for one target).
func (f *Fleet) PathRecorders() []*prober.Recorder { return f.paths }

// PathSummaries are each path's summary, as summary is the run's: from the
// common start to the last of its probers' end. Read them once Go's
// outcome is in.
func (f *Fleet) PathSummaries() []prober.Summary {
	var out []prober.Summary
	for i, p := range f.cfg.Paths {
		out = append(out, f.summaryOf(i, p.Config.Rate, f.canceled.Load()))
	}
	return out
}

// Start is the run's common start (zero before Go).
func (f *Fleet) Start() time.Time { return f.runStart() }

// Elapsed is the time since the common start.
func (f *Fleet) Elapsed() time.Duration { return time.Since(f.runStart()) }

// RunID is the run's ID.
func (f *Fleet) RunID() string { return f.cfg.RunID }

// Config is the whole run's load configuration.
func (f *Fleet) Config() prober.Config { return f.cfg.Probe }

// Close ends the connections and deletes every prober pod: after the run,
// on an error, on an interruption. Safe to call more than once.
func (f *Fleet) Close() error {
	var err error
	f.closed.Do(func() {
		for _, m := range f.members {
			_ = m.stdin.Close()
		}
		f.cancel()
		err = deletePods(f.cfg.Kube, f.cfg.Pods.Namespace, f.cfg.RunID)
	})
	return err
}
