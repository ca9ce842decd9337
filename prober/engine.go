package prober

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// growAfterLag: a request still unclaimed this long after its intended time
// means every worker was busy; the backlog check then adds workers (up to
// MaxWorkers). Scheduling jitter below this does not grow the pool.
const growAfterLag = time.Millisecond

// maxSleep bounds one sleep of an idle worker, and so how long a stopped
// run waits for idle workers to notice.
const maxSleep = 50 * time.Millisecond

// backlogEvery is how often Run checks for due requests no worker claimed;
// maxGrowStep bounds the workers added per check.
const (
	backlogEvery = 5 * time.Millisecond
	maxGrowStep  = 64
)

// sampleEvery is how often Run merges the workers' results (Recorder.Tick):
// how far live views lag the workers.
const sampleEvery = 100 * time.Millisecond

// Prober runs one probe. Build it with New, start it with Run; Snapshot and
// Recorder may be read concurrently while it runs.
type Prober struct {
	cfg       Config
	pacer     Pacer
	rec       *Recorder
	dialer    *dialer
	template  *requestTemplate
	runID     string
	userAgent string
	// backendHeader is cfg.BackendHeader in lower case, as the response
	// reader compares it.
	backendHeader string
	// reuseBlindly, for tests only, makes connections that are reused
	// without asking whether the server closed them (no close watcher, no
	// peek): the keep-alive race on purpose. Set once per connection, not
	// checked per request.
	reuseBlindly bool
	// bindPort, for tests only, is the source port the event loops bind
	// every new socket to (0: an ephemeral one): a test of the self-connect.
	bindPort uint16

	start time.Time
	// clock: the wall clock against the monotonic one through the run,
	// noted by Run's goroutine alone (Summary.Clock).
	clock report.WallClock
	// startAt, when set before Run, is the run's start instead of the
	// time Run begins: a Group's paths share one clock.
	startAt time.Time
	seq     atomic.Uint64
	workers atomic.Int64
	stopped atomic.Bool
	// scheduleEnded: a worker claimed a ticket past the pacer's schedule.
	scheduleEnded atomic.Bool

	watcher *closeWatcher // nil where unsupported: connections are peeked instead

	// h2pool is an h2 run's long-lived connections; h2req its request's
	// header fields, copied by each worker (nil, zero for HTTP/1.1).
	h2pool *h2Pool
	h2req  h2Request
	// grpcGo and grpcMD, with grpc-go as the client: its ClientConns and
	// the calls' metadata.
	grpcGo *grpcGoPool
	grpcMD map[string][]string

	// engine is the engine chosen for the run (New, then Run if the loops
	// cannot start); loops is the event-loop engine while it runs.
	engine Engine
	loops  *loopEngine
	// aborting: the run's context was canceled; the loops cut every
	// attempt in flight.
	aborting atomic.Bool

	stopReq  chan struct{} // closed by Stop
	stopOnce sync.Once

	// fault is the first panic recovered in one of the run's goroutines
	// (Summary.Fault); faultOnce guards it.
	fault     string
	faultOnce sync.Once
	// injectPanic makes one worker or loop panic once two requests have
	// completed (ROLLPROBE_TEST_PANIC=prober): how the tests prove a panic
	// ends in a marked report and exit 70, not Go's exit 2. Set in New and
	// only read afterwards (the hot path pays a plain load); injected
	// makes it happen once.
	injectPanic bool
	injected    atomic.Bool

	mu      sync.Mutex
	all     []*worker
	wg      sync.WaitGroup
	running context.Context
	started chan struct{}
}

// New validates cfg and prepares a prober. userAgent identifies the client.
func New(cfg Config, userAgent string) (*Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var id [4]byte
	_, _ = crand.Read(id[:])
	p := &Prober{
		cfg:           cfg,
		rec:           NewRecorder(cfg.KeepFailures),
		dialer:        newDialer(&cfg),
		runID:         hex.EncodeToString(id[:]),
		userAgent:     userAgent,
		backendHeader: strings.ToLower(cfg.BackendHeader),
		stopReq:       make(chan struct{}),
		started:       make(chan struct{}),
	}
	if cfg.Rate > 0 {
		p.pacer = ConstantPacer{Freq: cfg.Rate, Duration: cfg.Duration}
	}
	p.template = newRequestTemplate(&p.cfg, p.runID, userAgent)
	if cfg.Protocol.Multiplexed() {
		p.h2req = newH2Request(&p.cfg, userAgent)
		p.h2pool = newH2Pool(cfg.Connections)
	}
	if cfg.Protocol == GRPC && cfg.GRPCClient == GRPCClientGo {
		var err error
		if p.grpcGo, err = newGRPCGoPool(&p.cfg, p.dialer, userAgent, p.Elapsed); err != nil {
			return nil, fmt.Errorf("grpc-go: %w", err)
		}
		p.grpcMD = grpcMetadata(&p.cfg)
	}
	p.engine = engineFor(&p.cfg)
	p.injectPanic = os.Getenv(TestPanicEnv) == "prober"
	return p, nil
}

// TestPanicEnv names the environment variable that injects a panic, for
// tests of rollprobe's own failure (exit 70): "prober" in a worker or loop
// of the prober, "run" in the rollout flow once its report is built
// (package runner). Never set in use.
const TestPanicEnv = "ROLLPROBE_TEST_PANIC"

// recoverFault, deferred at the top of each of the run's goroutines,
// turns a panic into the run's fault: the first is kept with its stack,
// the run stops as if by Stop (the results so far are kept and reported),
// and Summary.Fault says what happened. Without it a panic in any
// goroutine ends the process with Go's exit 2, which a CI gate reads as
// "nothing was sent or changed", and no report.
func (p *Prober) recoverFault(where string) {
	if v := recover(); v != nil {
		p.faultOnce.Do(func() { p.fault = fmt.Sprintf("panic in %s: %v\n%s", where, v, debug.Stack()) })
		p.Stop()
	}
}

// checkInjectedPanic panics when the test knob asks for it.
func (p *Prober) checkInjectedPanic() {
	if p.rec.Totals().Sent() >= 2 && p.injected.CompareAndSwap(false, true) {
		panic("injected by " + TestPanicEnv)
	}
}

// engineFor is the engine a run of cfg uses: the one asked for, and for
// EngineAuto the loops where they can serve the target. (Run falls back to
// the goroutines if the loops cannot start.)
func engineFor(cfg *Config) Engine {
	if cfg.Engine == EngineGoroutines || (cfg.Protocol.Multiplexed() && loopH2Refusal(cfg) != "") {
		return EngineGoroutines
	}
	if _, why := loopTarget(cfg); why != "" {
		return EngineGoroutines
	}
	return EngineLoops
}

// Engine is the engine the run uses (known once Run has begun: the loops
// may fail to start, and an automatic choice then falls back).
func (p *Prober) Engine() Engine { return p.engine }

// RunID is the prefix of every request ID this prober sends ("<run>-<seq>").
func (p *Prober) RunID() string { return p.runID }

// Recorder gives access to the live results.
func (p *Prober) Recorder() *Recorder { return p.rec }

// Config returns the validated configuration.
func (p *Prober) Config() Config { return p.cfg }

// Started is closed once Run has begun; Start and Elapsed may be read from
// other goroutines only after it is.
func (p *Prober) Started() <-chan struct{} { return p.started }

// Start is the wall-clock time the run started.
func (p *Prober) Start() time.Time { return p.start }

// Elapsed is the time since the run started on the monotonic clock.
func (p *Prober) Elapsed() time.Duration { return time.Since(p.start) }

// Workers is the current number of workers: goroutines, or for the event
// loops the most requests they could have had in flight (see
// loopEngine.workers).
func (p *Prober) Workers() int {
	if p.loops != nil {
		return p.loops.workers()
	}
	return int(p.workers.Load())
}

// Summary is what a finished run hands to reporters.
type Summary struct {
	Start    time.Time
	Elapsed  time.Duration // from start to the last worker's exit, at least the send window
	Sending  time.Duration // from start to the end of the send window
	Target   float64       // requests per second asked for (0: closed model)
	Workers  int           // workers at the end (the high-water mark)
	Canceled bool          // stopped by the context, not by the duration
	Procs    int           // GOMAXPROCS at the end (the tuner's choice, when it chose)
	Engine   Engine        // the engine that ran (loops or goroutines)
	// Fault, when set, is a panic recovered in one of the run's goroutines
	// (with its stack): the run stopped there, and its results are
	// rollprobe's own failure, not the target's (exit 70).
	Fault string
	// Clock places the run's offsets (every Result's times) on the wall
	// clock as it read then, sampled every sampleEvery: see
	// report.WallClock.
	Clock report.WallClock
	// Dialled are the distinct addresses its connections were sent to,
	// in the order first seen (at most MaxDialled; DialledMore when there
	// were more): what a target's name resolved to, as dialled.
	Dialled     []netip.AddrPort
	DialledMore bool
}

// Run probes until the duration ends or ctx is cancelled, then waits for
// in-flight requests to finish (within their timeout) and returns. When ctx
// is cancelled, in-flight requests are cut and counted as canceled rather
// than as failures: the stop is ours, not the target's.
func (p *Prober) Run(ctx context.Context) (Summary, error) {
	if p.running != nil {
		return Summary{}, errors.New("prober: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.running = ctx
	p.start = p.startAt
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.clock = report.NewWallClock(p.start)
	close(p.started)
	defer p.dialer.holds.release()
	if p.engine == EngineLoops {
		// One loop per P, but no more loops than requests may be in flight:
		// MaxWorkers and Concurrency bound the whole run, and a loop holds
		// at least one.
		loops := runtime.GOMAXPROCS(0)
		if p.pacer == nil && p.cfg.TuneProcs > 1 {
			loops = p.cfg.TuneProcs
		}
		if p.pacer == nil {
			loops = min(loops, p.cfg.Concurrency)
		} else {
			loops = min(loops, p.cfg.MaxWorkers)
		}
		if p.cfg.Protocol.Multiplexed() {
			loops = min(loops, p.cfg.Connections) // each loop owns at least one
		}
		addr, _ := loopTarget(&p.cfg) // engineFor chose the loops: it can serve the target
		var err error
		if p.loops, err = startLoops(p, addr, loops); err != nil {
			if p.cfg.Engine == EngineLoops {
				return Summary{}, fmt.Errorf("prober: %w", err)
			}
			p.engine = EngineGoroutines // the automatic choice falls back
		} else {
			defer p.loops.release() // runs after every loop has exited (the wait below)
		}
	}
	if p.h2pool != nil {
		defer p.h2pool.close() // after the wait below: every worker has exited
	}
	if p.grpcGo != nil {
		defer p.grpcGo.close()
	}
	if p.engine == EngineGoroutines {
		if p.cfg.Conn.FreshFraction < 1 && p.h2pool == nil {
			p.watcher = newCloseWatcher()
			if p.watcher != nil {
				defer p.watcher.close()
			}
		}
		for range InitialWorkers(p.cfg) {
			p.spawn()
		}
	}

	// Stop at the end of the send window even when no worker is awake to
	// notice (all blocked on slow requests).
	var sendEnd time.Duration
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	var timer <-chan time.Time
	if p.cfg.Duration > 0 {
		t := time.NewTimer(p.cfg.Duration)
		defer t.Stop()
		timer = t.C
	}
	// The sample tick merges the workers' streams and folds finished
	// seconds into the series: live views and the report read only that.
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	// The backlog check grows the pool when requests are due that no
	// worker has claimed: every worker is busy (say, blocked on connect
	// timeouts to a vanished pod), so none is free to notice.
	var backlog <-chan time.Time
	if p.pacer != nil && p.loops == nil {
		bt := time.NewTicker(backlogEvery)
		defer bt.Stop()
		backlog = bt.C
	}
	var tuner *procTuner
	if p.pacer == nil && p.cfg.TuneProcs > 1 {
		setProcs := runtime.GOMAXPROCS
		if p.loops != nil {
			setProcs = p.loops.setProcs
		}
		tuner = newProcTuner(p.cfg.TuneProcs, setProcs, func() uint64 { return p.rec.Totals().Sent() })
		if p.loops != nil {
			tuner.shorter()
		}
	}
	canceled := false
	stopReq := p.stopReq
	var stoppedAt time.Duration
wait:
	for {
		select {
		case <-tick.C:
			p.clock.Note(p.start, time.Now())
			p.rec.Tick(p.Elapsed())
			if tuner != nil && !tuner.Done() {
				tuner.step(p.Elapsed())
			}
			if testHookTicked != nil {
				testHookTicked(done)
			}
		case <-backlog:
			p.growForBacklog()
		case <-done:
			sendEnd = p.Elapsed()
			if stoppedAt > 0 {
				sendEnd = stoppedAt // in-flight requests finishing are not sending time
			}
			// Workers and loops stop by themselves once ctx ends (they
			// check it before each request): they can all have exited
			// before this select saw ctx.Done, and a ready done then
			// wins half the time. The run was interrupted all the same.
			canceled = ctx.Err() != nil
			break wait
		case <-timer:
			// The send window is over; in-flight requests may finish.
			p.stopped.Store(true)
			p.wakeLoops()
			timer = nil
		case <-stopReq:
			// Stop: end the send window now, as the duration would.
			p.stopped.Store(true)
			p.wakeLoops()
			stopReq = nil
			stoppedAt = p.Elapsed()
		case <-ctx.Done():
			sendEnd = p.Elapsed()
			canceled = true
			p.stopped.Store(true)
			p.aborting.Store(true)
			p.abortInFlight()
			<-done
			break wait
		}
	}
	// The sending window is the intended one: it ends at the duration even
	// when in-flight requests complete after it, and reaches it when the
	// last request was due (and sent) before the end (--rate 2 --duration
	// 1s sends at 0 and 0.5 s: 2 requests in 1 s, not in 0.5).
	if p.cfg.Duration > 0 && !canceled && stoppedAt == 0 {
		sendEnd = p.cfg.Duration
	}
	p.rec.Tick(EndOfRun)
	p.clock.Note(p.start, time.Now())
	dialled, more := p.dialer.dialled.list()
	return Summary{
		Clock:       p.clock.Clone(),
		Fault:       p.fault, // final: every goroutine has exited (done)
		Start:       p.start,
		Elapsed:     max(p.Elapsed(), sendEnd),
		Sending:     sendEnd,
		Target:      p.cfg.Rate,
		Workers:     p.Workers(),
		Canceled:    canceled,
		Procs:       runtime.GOMAXPROCS(0),
		Engine:      p.engine,
		Dialled:     dialled,
		DialledMore: more,
	}, nil
}

// testHookTicked, when set, runs after each sample tick of Run with the
// channel that closes once every worker and loop has exited.
var testHookTicked func(done <-chan struct{})

// wakeLoops makes the event loops look at the run's state now.
func (p *Prober) wakeLoops() {
	if p.loops != nil {
		p.loops.wake()
	}
}

// Outcome is what Run returned.
type Outcome struct {
	Summary Summary
	Err     error
}

// Go runs Run in a goroutine of its own and returns once the run has begun
// (Start and Elapsed are then safe to read); the channel yields Run's
// outcome.
func (p *Prober) Go(ctx context.Context) <-chan Outcome {
	done := make(chan Outcome, 1)
	go func() {
		sum, err := p.Run(ctx)
		done <- Outcome{sum, err}
	}()
	<-p.Started() // closed as Run begins
	return done
}

// growForBacklog adds a worker for each request whose intended time has
// passed without a worker claiming it (idle workers claim tickets ahead of
// time, so an unclaimed due ticket means all are busy), when the workers are
// busy inside requests (not merely late to run), up to MaxWorkers and at
// most maxGrowStep at a time.
func (p *Prober) growForBacklog() {
	if p.stopped.Load() || p.scheduleEnded.Load() {
		return
	}
	due := Expected(p.pacer, p.Elapsed()-growAfterLag)
	claimed := p.seq.Load()
	if due <= claimed || !p.blockedInRequests() {
		return
	}
	for n := min(due-claimed, maxGrowStep); n > 0; n-- {
		if !p.spawn() {
			return
		}
	}
}

// blockedInRequests: every worker but at most one (between two requests) is
// inside a request. Only then does a late request mean the pool is too
// small: lateness alone also comes from CPU starvation (GC, a descheduled
// process), where more workers only add connections, memory and load.
// It reads each worker's own busy flag (a scan every backlogEvery) rather
// than a shared counter every request would write.
func (p *Prober) blockedInRequests() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	var busy int64
	now := time.Now().UnixNano()
	for _, w := range p.all {
		if w.busy.Load() && !handshakingBriefly(w.dialed.handshakeSince.Load(), now) {
			busy++
		}
	}
	return shouldGrow(int64(len(p.all)), busy)
}

func shouldGrow(workers, inFlight int64) bool { return workers-inFlight <= 1 }

// handshakeGrace is how long a worker may be in a TLS handshake and still
// count as about to be free. A handshake costs the client a few
// milliseconds of CPU; counted as blocked, the first handshakes of a run
// (and every new connection's) made the pool grow, each new connection
// one more handshake: 294 connections for a kept-alive https probe at
// 5,000/s where plain http opened 15, and 38% of the CPU in handshakes
// (docs/measuring.md). A handshake that lasts longer (a server that
// accepts and stalls) counts as blocked, so the pool still grows around it.
const handshakeGrace = 100 * time.Millisecond

// handshakingBriefly: a TLS handshake began at since (Unix nanoseconds, 0
// for none) and has lasted less than handshakeGrace at now.
func handshakingBriefly(since, now int64) bool {
	return since != 0 && time.Duration(now-since) < handshakeGrace
}

// Stop ends the send window now: no new request is started, requests in
// flight complete normally (within their timeout), and Run returns a run
// that was not interrupted. Safe to call more than once, from any goroutine.
func (p *Prober) Stop() { p.stopOnce.Do(func() { close(p.stopReq) }) }

// Stopping says whether the run no longer sends new requests, or soon
// will not: Stop was called (a recovered panic calls it too), the send
// window ended, or the run was cancelled.
func (p *Prober) Stopping() bool {
	select {
	case <-p.stopReq:
		return true
	default:
	}
	return p.stopped.Load() || p.aborting.Load()
}

func (p *Prober) spawn() bool {
	n := p.workers.Add(1)
	limit := int64(p.cfg.MaxWorkers)
	if p.pacer == nil {
		limit = int64(p.cfg.Concurrency)
	}
	if n > limit {
		p.workers.Add(-1)
		return false
	}
	w := &worker{p: p, dialed: p.dialer.newSlot(), id: int(n - 1)}
	w.rng = rand.New(rand.NewPCG(uint64(n), uint64(p.start.UnixNano())))
	p.mu.Lock()
	p.all = append(p.all, w)
	p.mu.Unlock()
	p.wg.Add(1)
	go w.loop()
	return true
}

// abortInFlight cuts every in-flight request by expiring its connection's
// deadline. Deadlines are safe to set from another goroutine.
func (p *Prober) abortInFlight() {
	p.wakeLoops() // the loops cut their own (they see aborting)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.all {
		if c := w.inflight.Load(); c != nil {
			_ = c.rw.SetDeadline(time.Unix(1, 0))
		}
	}
}

// next claims the next request. For the open model it waits until the
// request's intended time; ok is false when the run is over.
func (w *worker) next() (seq uint64, intended time.Duration, ok bool) {
	p := w.p
	if p.stopped.Load() || p.running.Err() != nil {
		// Canceled: Run sets stopped when it sees it, but a worker must
		// not claim requests meanwhile (each would be canceled at once:
		// thousands in TestH2CancelCutsEveryStream, whose workers wait on
		// no I/O).
		return 0, 0, false
	}
	seq = p.seq.Add(1) - 1
	now := p.Elapsed()
	if p.cfg.Duration > 0 && now >= p.cfg.Duration {
		p.stopped.Store(true)
		return 0, 0, false
	}
	if p.pacer == nil {
		return seq, now, true
	}
	intended, ok = p.pacer.Offset(seq)
	if !ok {
		// Past the end of the schedule. Other workers may still hold due
		// tickets, so the run goes on; only the backlog check must stop
		// adding workers (they could arrive after every worker exited).
		p.scheduleEnded.Store(true)
		return 0, 0, false
	}
	wait := intended - now
	// Plain sleeps (no timer channel, no select: cheaper per request), cut
	// into slices so that a stopped run is noticed within maxSleep.
	for wait > 0 {
		time.Sleep(min(wait, maxSleep))
		if p.stopped.Load() {
			return 0, 0, false
		}
		wait = intended - p.Elapsed()
	}
	return seq, intended, true
}

type worker struct {
	p        *Prober
	id       int // 0 for the first worker spawned, then 1, 2, ...
	c        *conn
	inflight atomic.Pointer[conn]
	busy     atomic.Bool // inside a request (dialing, writing, reading)
	rng      *rand.Rand
	buf      []byte
	scratch  []byte
	backend  string    // last backend value, reused while it repeats
	stream   *Stream   // this worker's results, merged by the recorder's tick
	dialed   *dialSlot // its dialer, and the addresses of its last dial
	// spare is the read buffer of the worker's last closed one-request
	// connection, for its next one: at thousands of fresh connections a
	// second a new 16 KiB buffer each was most of the prober's allocation.
	spare *bufio.Reader
	// h2st, h2req and timer are the worker's stream, request and request
	// timer on HTTP/2 (made at its first request, reused after).
	h2st  *h2stream
	h2req h2Request
	timer *time.Timer
}

func (w *worker) loop() {
	defer w.p.wg.Done()
	w.stream = w.p.rec.NewStream()
	defer w.stream.Close() // before Done: Run's final Tick merges all of it
	defer w.p.recoverFault("a prober worker")
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	var res Result
	for {
		seq, intended, ok := w.next()
		if !ok {
			return
		}
		if w.p.injectPanic {
			w.p.checkInjectedPanic()
		}
		res = Result{Seq: seq, Intended: intended}
		w.busy.Store(true)
		w.do(&res)
		w.busy.Store(false)
		w.stream.Add(&res)
	}
}

// do performs one attempt and fills res. It never retries.
func (w *worker) do(res *Result) {
	p := w.p
	cfg := &p.cfg
	if p.grpcGo != nil {
		w.doGRPCGo(res)
		return
	}
	if p.h2pool != nil {
		w.doH2(res)
		return
	}
	fresh := cfg.Conn.FreshFraction >= 1 || (cfg.Conn.FreshFraction > 0 && w.rng.Float64() < cfg.Conn.FreshFraction)

	res.Start = p.Elapsed()
	deadline := p.start.Add(res.Start + cfg.Timeout)
	// A fresh request gets a connection of its own and leaves the worker's
	// kept-alive one alone: with --conn mixed=F, a fraction F of requests
	// go on fresh connections and the rest on long-lived ones, instead of
	// each fresh request ending the kept-alive connection before it.
	var c *conn
	if !fresh && w.c != nil && !w.c.reusable(res.Start, res.Lag()) {
		// An idle connection the server closed is dropped here, before
		// anything is sent on it.
		w.c.close()
		w.c = nil
	}
	if fresh || w.c == nil {
		res.Fresh = true // counted as fresh whether or not the dial succeeds
		connectDeadline := p.start.Add(res.Start + min(cfg.ConnectTimeout, cfg.Timeout))
		raw, rw, phase, err := p.dialer.dial(p.running, connectDeadline, w.dialed)
		if err != nil {
			w.fail(res, phase, err, false, nil)
			return
		}
		connected := p.Elapsed()
		res.Connect = connected - res.Start
		res.SlowConnect = res.Connect >= SlowConnectAfter
		watcher := p.watcher
		if p.reuseBlindly {
			watcher = nil
		}
		var br *bufio.Reader
		if fresh {
			br, w.spare = w.spare, nil
		}
		c = newConn(raw, rw, connected, watcher, !fresh, br)
		if p.reuseBlindly {
			c.peek = nil // without watcher or peek, reusable never looks
		}
		c.addr, c.dialed, c.log = w.dialed.addr, res.Start, cfg.ConnLog
		if !fresh {
			w.c = c
		}
	} else {
		c = w.c
	}
	reused := c.served > 0
	res.ConnReqs = c.served
	res.ConnAge = res.Start - c.born
	if res.ConnAge < 0 {
		res.ConnAge = 0
	}

	w.inflight.Store(c)
	defer w.inflight.Store(nil)
	if p.running.Err() != nil {
		// Stopped between claiming the request and publishing the
		// connection: abortInFlight may have missed it.
		w.fail(res, PhaseWrite, p.running.Err(), reused, c)
		return
	}
	_ = c.rw.SetDeadline(deadline)
	w.buf = p.template.build(w.buf[:0], res.Seq, fresh)
	if _, err := c.rw.Write(w.buf); err != nil {
		w.fail(res, PhaseWrite, err, reused, c)
		return
	}
	resp, got, err := readResponse(c.br, p.template.isHead, p.backendHeader, w.scratch)
	res.End = p.Elapsed()
	if resp.backend != nil {
		w.scratch = resp.backend[:0]
		if string(resp.backend) != w.backend {
			w.backend = string(resp.backend)
		}
		res.Backend = w.backend
	}
	if err != nil {
		phase := PhaseReadHeaders
		if got && resp.headers {
			phase = PhaseReadBody
		}
		if got && resp.status != 0 {
			res.Status = resp.status
		}
		w.fail(res, phase, err, reused, c)
		return
	}
	res.Status = resp.status
	res.Class = statusClass(cfg, resp.status, resp.backend)
	if res.Class != OK {
		addr := c.addr // a failed status is found in logs by its connection too
		res.Addr = &addr
	}
	c.served++
	c.idleFrom = res.End
	if fresh || resp.close {
		w.retire(c, fresh)
	}
}

// fail records a failed attempt and drops the connection it was on.
func (w *worker) fail(res *Result, phase Phase, err error, reused bool, c *conn) {
	if res.End == 0 {
		res.End = w.p.Elapsed()
	}
	res.Phase = phase
	res.Err = err
	switch {
	case c != nil:
		addr := c.addr
		res.Addr = &addr
	case res.Fresh: // the dial failed: the port its SYN left from
		addr := w.dialed.addr
		res.Addr = &addr
		if phase == PhaseDial {
			res.DialICMP = w.dialed.icmp
		}
	}
	if w.p.running.Err() != nil {
		// Our own stop cut it short (abortInFlight, or the dial context).
		res.Canceled = true
	} else {
		res.Class = classify(err, phase, reused)
		if c != nil && (res.Class == EOF || res.Class == EOFReused) {
			res.ServerClose = serverCloseOf(c.raw)
		}
		if res.Class == TLS {
			res.TLSCause = tlsCause(err)
		}
	}
	if c != nil {
		if !res.Canceled && res.Class == Timeout {
			c.abort() // the peer went silent: see abort
		} else {
			c.close()
		}
		if c == w.c {
			w.c = nil
		}
	}
}

// retire closes the connection after a response that ends it. After a
// request sent with Connection: close, it first waits briefly for the
// server's FIN so that the server, not the prober, holds the TIME_WAIT
// state: at thousands of fresh connections a second the prober would
// otherwise run out of ephemeral ports (EADDRNOTAVAIL).
func (w *worker) retire(c *conn, waitForClose bool) {
	if c == w.c {
		w.c = nil
	}
	silent := false
	if waitForClose {
		_ = c.rw.SetReadDeadline(time.Now().Add(retireWait))
		var b [1]byte
		_, err := c.br.Read(b[:])
		silent = isTimeout(err)
	}
	if silent {
		c.abort() // no FIN: the server may be gone (see abort)
	} else {
		c.close()
	}
	if waitForClose { // a one-request connection: its buffer serves the next
		w.spare = c.br
	}
}

// retireWait bounds the wait for the server's FIN after Connection: close.
const retireWait = 100 * time.Millisecond
