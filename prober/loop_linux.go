//go:build linux

package prober

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The event-loop engine ("loops").
//
// Each loop is one goroutine that owns a set of connections outright and
// drives them with non-blocking system calls on an epoll set of its own, as
// wrk does: it asks the kernel which sockets are ready (epoll_wait without
// waiting), reads and writes those, and starts the requests that are due.
// The goroutine engine instead parks a goroutine per connection in Go's
// netpoller: each read that comes before its answer costs an EAGAIN, a park
// and a wake-up, and each request a deadline timer (bench/PROFILE.md).
//
// A loop never blocks its thread: when nothing is ready it parks on Go's own
// netpoller, which watches the loop's epoll descriptor (readable when one of
// its sockets is ready), with the next thing the loop must do (a send, a
// deadline) as the read deadline. A thread blocked in epoll_wait(2) itself
// keeps Go's sysmon retaking and handing off its P: measured here at 3,000
// fresh connections a second, 4 context switches and 130 µs of system time
// per request, against 1.7 and 75 µs when parked. The reads, writes and
// polls on the hot path, which never block, are raw system calls
// (rawsys_linux.go): made as syscall.Read and the like, they let sysmon
// hand a busy loop's P from thread to thread.
//
// Contract:
//   - One loop owns each connection for its whole life; nothing else touches
//     its descriptor. Loops share only the prober (its stopped flag, the
//     closed model's sequence counter and slot pool) and the recorder, into
//     which each writes through its own Stream.
//   - Every socket is registered once, edge-triggered, for input, output and
//     the peer's close. Edge-triggered lets a loop read once per event: a
//     read that returns less than its buffer drained the socket, and more
//     data or a FIN raises a new event, so no read on the hot path ends in
//     EAGAIN. A FIN already received shows in the event (EPOLLRDHUP).
//   - Each attempt's outcome is what the goroutine engine records for the
//     same exchange: the same phases, the same errors (a net.OpError over the
//     same errno: the same classes and texts), the same evidence (addresses,
//     the server-close counters), no retry. The prober's tests run against
//     both engines.
//   - Open model: loop i of n sends the requests whose sequence number is i
//     modulo n, each at its intended time. A due request takes the idle
//     kept-alive connection idle longest once the loop has opened its share
//     of the planned pool (InitialWorkers), else opens one, up to its share
//     of MaxWorkers requests in flight; beyond that it waits and its lag
//     shows. A connection that goes idle while the loop holds more than
//     twice its recent peak in flight (and more than its plan) is closed.
//   - Closed model: Concurrency slots in one pool; each loop holds up to its
//     quota and sends back to back on each. The P tuner moves quotas between
//     loops; a loop over its quota gives slots back as their requests end.

const (
	loopReadSize  = 64 << 10 // one read's buffer, shared by a loop's connections
	loopMaxEvents = 256
	// loopReadsPerEvent bounds the reads one event gets before the loop
	// turns to its other sockets (a large body); it comes back to it
	// before waiting again.
	loopReadsPerEvent = 16
	// peakSeconds: idle kept-alive connections beyond twice the busiest
	// in-flight count of this many seconds are closed.
	peakSeconds = 10
)

// Event bits as epoll(7) names them (package syscall's EPOLLET is negative).
const (
	evIn    = uint32(syscall.EPOLLIN)
	evOut   = uint32(syscall.EPOLLOUT)
	evErr   = uint32(syscall.EPOLLERR)
	evHup   = uint32(syscall.EPOLLHUP)
	evRDHUP = uint32(epollRDHUP)
	evET    = uint32(1) << 31
)

// wakeToken is the epoll data of a loop's eventfd (connections use their slot).
const wakeToken = ^uint64(0)

// loopTarget says whether the event-loop engine can serve cfg's target and
// at which address; otherwise, why not.
func loopTarget(cfg *Config) (netip.AddrPort, string) {
	u := cfg.Target
	if u == nil {
		return netip.AddrPort{}, "no target"
	}
	if u.Scheme != "http" {
		return netip.AddrPort{}, "an https target needs Go's TLS, which the goroutine engine drives"
	}
	if cfg.ConnectTo != "" {
		// Validate checked it is an IP address and a port.
		ap, err := netip.ParseAddrPort(cfg.ConnectTo)
		if err != nil {
			return netip.AddrPort{}, "connect-to " + cfg.ConnectTo + " is not an IP address and port"
		}
		if ap.Addr().Zone() != "" {
			return netip.AddrPort{}, "a scoped IPv6 address"
		}
		return unmapped(ap), ""
	}
	ip, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return netip.AddrPort{}, "the target is a name, which the goroutine engine resolves for every new connection as a client would"
	}
	if ip.Zone() != "" {
		return netip.AddrPort{}, "a scoped IPv6 address"
	}
	port := 80
	if s := u.Port(); s != "" {
		port, _ = strconv.Atoi(s) // ParseTarget checked it
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), ""
}

type connState uint8

const (
	connFree       connState = iota // the slot holds no connection
	connConnecting                  // connect(2) in progress
	connWriting                     // the request partly written; the rest waits for room
	connReading                     // waiting for (the rest of) the response
	connIdle                        // kept alive between requests
	connLingering                   // after a one-request response: waiting for the server's FIN
	connH2                          // an established HTTP/2 connection (loopConn.h2)
)

// loopConn is one connection and the request on it.
type loopConn struct {
	fd    int
	slot  int32
	gen   uint32 // bumped when the slot's connection closes: events of an earlier one are ignored
	state connState
	// oneRequest: opened for one request, sent with Connection: close.
	oneRequest bool
	born       time.Duration // when it was established
	dialed     time.Duration // when its dial began (Config.ConnLog)
	served     uint32        // requests completed on it
	idleFrom   time.Duration // when its last response ended
	addr       ConnAddr
	localIP    bool // addr.Local has its IP (asked for on the failure path only)
	dials      int  // connect attempts for the current request (a self-connect is retried)
	// icmpArmed: the connecting IPv6 socket queues ICMPv6 errors
	// (armDialICMP), until it connects.
	icmpArmed bool
	// toItself: the connect reached its own socket (see maxSelfConnects):
	// refused by nobody, so its error queue says nothing.
	toItself bool

	res      Result
	deadline time.Duration // of the current phase: the connect, the request, or the linger
	parser   respParser
	out      []byte // request bytes still to write
	// h2 is the connection's HTTP/2 state in an h2 run (nil otherwise).
	h2 *loopH2
}

// loopEngine is the set of loops of one run.
type loopEngine struct {
	p      *Prober
	target netip.AddrPort
	family int
	loops  []*loop
	closed bool // the closed model (no pacer)
	h2     bool // HTTP/2 (or gRPC over it) on long-lived connections
	// freeSlots: the closed model's slots no loop holds.
	freeSlots atomic.Int64
}

// loop is one event loop; see the contract above.
type loop struct {
	e     *loopEngine
	p     *Prober
	index int

	// sa is the target as connect(2) takes it: the loop's own, since
	// syscall.Connect writes into it.
	sa     syscall.Sockaddr
	epfd   int
	epFile *os.File // epfd, registered with Go's netpoller to park on
	epoll  syscall.RawConn
	wakeFd int
	events []syscall.EpollEvent
	// pending: events fetched while parking, handled next.
	pending int
	parked  time.Time // the epoll file's read deadline now
	// polledAt is when the loop last asked epoll what is ready: an idle
	// connection is reused on that word only while it is recent.
	polledAt time.Duration

	conns  []*loopConn // by slot
	free   []int32     // free slots
	idle   idleQueue
	again  []idleEntry // connections not drained by loopReadsPerEvent reads
	stream *Stream
	rng    *rand.Rand

	readBuf []byte
	reqBuf  []byte
	backend string // the last backend value, reused while it repeats

	inflight  int // requests in flight
	kept      int // kept-alive connections open
	lingering int
	// nextDeadline is at or before the earliest deadline of a connection
	// (exact after an expire scan, early once that connection moved on).
	nextDeadline time.Duration
	workers      atomic.Int64

	// open model
	nextSeq       uint64
	nextAt        time.Duration
	nextFresh     bool
	scheduleEnded bool
	planned       int // this loop's share of the initial pool
	maxInflight   int // its share of MaxWorkers
	peaks         peakWindow
	waiting       waitReason    // why the next due request has not started
	growFrom      time.Duration // the current growth budget's start
	grown         int           // connections added beyond the plan since growFrom

	// closed model
	quota     atomic.Int64
	held      int // slots held
	idleSlots int // held slots with no request in flight

	// h2 (loop_h2_linux.go): the loop's connection slots, the requests
	// waiting for a stream (from h2head on), the next slot to try, the
	// connections with output to write this round, spare streams, and the
	// request's header fields.
	h2slots []*loopConn
	h2queue []*loopStream
	h2head  int
	h2next  int
	h2dirty []idleEntry
	h2free  []*loopStream
	h2req   h2Request
}

const never = time.Duration(1<<63 - 1)

// waitReason says why a due request of the open model waits.
type waitReason uint8

const (
	waitNone waitReason = iota
	waitConn            // for an idle connection, or growAfterLag to open one (or the growth budget)
	waitCap             // MaxWorkers in flight: for one to end
)

// startLoops makes the engine's loops and starts them: n loops (the Ps),
// sharing the run as the contract says.
func startLoops(p *Prober, target netip.AddrPort, n int) (*loopEngine, error) {
	e := &loopEngine{p: p, target: target, closed: p.pacer == nil, family: syscall.AF_INET6, h2: p.cfg.Protocol.Multiplexed()}
	p.dialer.dialled.add(target) // the loops dial nothing else
	if target.Addr().Is4() {
		e.family = syscall.AF_INET
	}
	n = max(1, n)
	for i := range n {
		l, err := newLoop(e, i)
		if err != nil {
			for _, l := range e.loops {
				l.release()
			}
			e.release()
			return nil, err
		}
		if e.h2 {
			l.h2slots = make([]*loopConn, max(1, share(p.cfg.Connections, n, i)))
			l.h2req = p.h2req
		}
		e.loops = append(e.loops, l)
	}
	cfg := &p.cfg
	if e.closed {
		e.freeSlots.Store(int64(cfg.Concurrency))
		procs := n
		if cfg.TuneProcs > 1 {
			procs = 1 // the tuner starts at one P and moves quotas as it adds Ps
		}
		e.setQuotas(procs)
	} else {
		planned, maxIn := InitialWorkers(*cfg), cfg.MaxWorkers
		for i, l := range e.loops {
			l.planned, l.maxInflight = share(planned, n, i), max(1, share(maxIn, n, i))
			l.workers.Store(int64(l.planned))
			l.nextSeq = uint64(i)
			var ok bool
			l.nextAt, ok = p.pacer.Offset(l.nextSeq)
			l.scheduleEnded = !ok
			l.nextFresh = l.rollFresh()
		}
	}
	for _, l := range e.loops {
		p.wg.Add(1)
		go l.run()
	}
	return e, nil
}

// share is part i of total split over n as evenly as whole numbers allow.
func share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

// setQuotas gives the closed model's slots to the first procs loops and
// wakes every loop to take or give back its part.
func (e *loopEngine) setQuotas(procs int) {
	procs = max(1, min(procs, len(e.loops)))
	for i, l := range e.loops {
		q := 0
		if i < procs {
			q = share(e.p.cfg.Concurrency, procs, i)
		}
		l.quota.Store(int64(q))
	}
	e.wake()
}

// setProcs is the P tuner's hand on the loop engine: GOMAXPROCS and the
// loops that hold slots change together.
func (e *loopEngine) setProcs(n int) int {
	old := runtime.GOMAXPROCS(n)
	e.setQuotas(n)
	return old
}

// wake makes every loop look at the run's state now (stopped, canceled,
// quotas) instead of at its next deadline.
func (e *loopEngine) wake() {
	one := [8]byte{1}
	for _, l := range e.loops {
		_, _ = unix.Write(l.wakeFd, one[:])
	}
}

// workers is the most requests the loops could have had in flight at once:
// in the open model each loop's planned pool or its peak, whichever is
// more; in the closed model the concurrency.
func (e *loopEngine) workers() int {
	if e.closed {
		return e.p.cfg.Concurrency
	}
	var n int64
	for _, l := range e.loops {
		n += l.workers.Load()
	}
	return int(n)
}

func newLoop(e *loopEngine, index int) (*loop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	l := &loop{e: e, p: e.p, index: index, epfd: epfd, wakeFd: -1,
		events: make([]syscall.EpollEvent, loopMaxEvents), readBuf: make([]byte, loopReadSize),
		nextDeadline: never}
	l.rng = rand.New(rand.NewPCG(uint64(index)+1, uint64(e.p.start.UnixNano())))
	if t := e.target; t.Addr().Is4() {
		l.sa = &syscall.SockaddrInet4{Port: int(t.Port()), Addr: t.Addr().As4()}
	} else {
		l.sa = &syscall.SockaddrInet6{Port: int(t.Port()), Addr: t.Addr().As16()}
	}
	fail := func(err error) (*loop, error) {
		l.release()
		l.closeWake()
		return nil, err
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		return fail(os.NewSyscallError("setnonblock", err))
	}
	l.wakeFd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fail(os.NewSyscallError("eventfd", err))
	}
	ev := syscall.EpollEvent{Events: evIn | evET}
	setToken(&ev, wakeToken)
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, l.wakeFd, &ev); err != nil {
		return fail(os.NewSyscallError("epoll_ctl", err))
	}
	l.epFile = os.NewFile(uintptr(epfd), "rollprobe-loop")
	if l.epoll, err = l.epFile.SyscallConn(); err != nil {
		return fail(err)
	}
	return l, nil
}

// release closes the loop's epoll set, as it exits. Its eventfd stays
// open until the engine's release: other goroutines (Run, the tuner, a
// loop giving slots back) may still wake it, and a closed descriptor's
// number could meanwhile belong to another loop's new socket.
func (l *loop) release() {
	if l.epFile != nil {
		_ = l.epFile.Close()
	} else if l.epfd >= 0 {
		_ = syscall.Close(l.epfd)
	}
}

// closeWake closes the loop's eventfd.
func (l *loop) closeWake() {
	if l.wakeFd >= 0 {
		_ = syscall.Close(l.wakeFd)
		l.wakeFd = -1
	}
}

// release closes what the loops shared with the rest of the run (their
// eventfds), once every loop has exited: Run calls it last.
func (e *loopEngine) release() {
	for _, l := range e.loops {
		l.closeWake()
	}
}

func setToken(ev *syscall.EpollEvent, t uint64) { *(*uint64)(unsafe.Pointer(&ev.Fd)) = t }
func token(ev *syscall.EpollEvent) uint64       { return *(*uint64)(unsafe.Pointer(&ev.Fd)) }

func (l *loop) run() {
	defer l.p.wg.Done()
	l.stream = l.p.rec.NewStream()
	defer l.stream.Close() // before Done: Run's final Tick merges all of it
	defer l.release()
	defer l.p.recoverFault("a prober event loop")
	for {
		if l.p.injectPanic {
			l.p.checkInjectedPanic()
		}
		if l.p.aborting.Load() {
			l.abort()
			return
		}
		n := l.poll()
		l.handle(l.events[:n])
		busy := n > 0 || len(l.again) > 0
		l.readAgain()
		now := l.p.Elapsed()
		if now >= l.nextDeadline {
			l.expire(now)
		}
		if l.e.h2 {
			l.h2Place() // streams ended: the queue's oldest may go
		}
		if l.e.closed {
			busy = l.startSlots() || busy
		} else {
			busy = l.startDue() || busy
		}
		if l.e.h2 {
			l.h2Flush()
			// A write that met the server's reset left its connection
			// to be read to its end (h2Write): no event may come for it.
			busy = busy || len(l.again) > 0
		}
		if l.finished() {
			l.closeAll()
			return
		}
		if !busy {
			l.park()
		} else {
			// A loop that never parks would keep one scheduling tick,
			// and Go's sysmon would take it for a goroutine hogging its
			// P. A yield per busy round (nothing else to run: ~0.1 µs)
			// says it is not stuck. Its system calls are raw
			// (rawsys_linux.go): to the runtime it runs, it is never
			// inside one.
			runtime.Gosched()
		}
	}
}

// poll returns the events fetched while parking, else asks for the ready
// ones without waiting.
func (l *loop) poll() int {
	if n := l.pending; n > 0 {
		l.pending = 0
		return n
	}
	l.polledAt = l.p.Elapsed()
	for {
		n, err := rawReadyEvents(l.epfd, l.events)
		if err == syscall.EINTR {
			continue
		}
		return max(n, 0)
	}
}

// park waits on Go's netpoller until a socket is ready, the loop is woken,
// or its next send or deadline is due.
func (l *loop) park() {
	wakeAt := l.nextDeadline
	if !l.e.closed && !l.scheduleEnded && !l.stopping() {
		switch l.waiting {
		case waitNone:
			wakeAt = min(wakeAt, l.nextAt)
		case waitConn: // a request ending wakes it sooner
			at := l.nextAt + growAfterLag
			if l.grown >= maxGrowStep {
				at = max(at, l.growFrom+backlogEvery)
			}
			wakeAt = min(wakeAt, at)
		case waitCap: // only a request ending (or a deadline) frees room
		}
	}
	var deadline time.Time
	if wakeAt != never {
		deadline = l.p.start.Add(wakeAt)
	}
	if !deadline.Equal(l.parked) {
		_ = l.epFile.SetReadDeadline(deadline)
		l.parked = deadline
	}
	_ = l.epoll.Read(l.pollParked) // a timeout is a wake-up like any other
}

// pollParked is the netpoller's callback: the events, or false to wait.
func (l *loop) pollParked(fd uintptr) bool {
	l.polledAt = l.p.Elapsed()
	n, err := rawReadyEvents(int(fd), l.events)
	if err == syscall.EINTR {
		return false
	}
	l.pending = max(n, 0)
	return n > 0
}

func (l *loop) handle(events []syscall.EpollEvent) {
	for i := range events {
		ev := &events[i]
		t := token(ev)
		if t == wakeToken {
			var b [8]byte
			_, _ = unix.Read(l.wakeFd, b[:])
			continue
		}
		slot, gen := int32(t), uint32(t>>32)
		if int(slot) >= len(l.conns) {
			continue
		}
		c := l.conns[slot]
		if c.gen != gen {
			continue // an earlier connection of this slot
		}
		l.event(c, ev.Events)
	}
}

// event handles what epoll reported for c.
func (l *loop) event(c *loopConn, ev uint32) {
	switch c.state {
	case connConnecting:
		if ev&(evOut|evErr|evHup) != 0 {
			l.connected(c)
		}
	case connWriting:
		if ev&(evOut|evErr|evHup) != 0 {
			l.writeRest(c)
		}
	case connReading:
		if ev&(evIn|evErr|evHup|evRDHUP) != 0 {
			l.read(c, ev&(evRDHUP|evHup) != 0)
		}
	case connIdle:
		// The server closed it, failed it or sent something unsolicited
		// (a 408, say): it cannot carry another request. An input event
		// alone may be stale, raised by the last segment of a response
		// already read with the one before: a peek tells.
		if l.p.reuseBlindly {
			return // the test knob: reuse it without looking
		}
		if ev&(evRDHUP|evHup|evErr) != 0 || (ev&evIn != 0 && !peekOpen(c.fd)) {
			l.closeConn(c)
		}
	case connLingering:
		if ev&(evIn|evRDHUP|evHup|evErr) != 0 {
			l.closeConn(c) // the FIN (or an error): done waiting
		}
	case connH2:
		gen := c.gen
		if ev&evOut != 0 {
			l.h2Write(c)
		}
		if c.gen == gen && ev&(evIn|evErr|evHup|evRDHUP) != 0 {
			l.h2Read(c, ev&(evRDHUP|evHup) != 0)
		}
	}
}

// --- starting requests ----------------------------------------------------

// stopping: no new request may start.
func (l *loop) stopping() bool {
	p := l.p
	if p.stopped.Load() || p.running.Err() != nil { // canceled: Run sets aborting soon
		return true
	}
	if p.cfg.Duration > 0 && p.Elapsed() >= p.cfg.Duration {
		p.stopped.Store(true)
		return true
	}
	return !l.e.closed && l.scheduleEnded
}

// finished: stopping, and nothing in flight or lingering.
func (l *loop) finished() bool {
	return l.inflight == 0 && l.lingering == 0 && l.stopping()
}

func (l *loop) rollFresh() bool {
	f := l.p.cfg.Conn.FreshFraction
	return f >= 1 || (f > 0 && l.rng.Float64() < f)
}

// startDue starts the open model's due requests; it reports whether any
// started.
//
// A kept-alive request beyond the planned pool takes an idle connection;
// with none idle it waits for one to come free, and only once it is
// growAfterLag late may it open one more, at most maxGrowStep every
// backlogEvery: the goroutine engine's growth rule. Without it a burst of
// due requests (a park ends on the runtime's 1 ms timer) opened a
// connection each while those in flight were about to free theirs:
// measured at 20,000 req/s, the pool ran to --max-workers in the first
// second and that second's p99 to 110 ms.
func (l *loop) startDue() bool {
	started := false
	l.waiting = waitNone
	for !l.scheduleEnded && !l.stopping() {
		now := l.p.Elapsed()
		if l.nextAt > now {
			break
		}
		if l.inflight >= l.maxInflight {
			l.waiting = waitCap
			break
		}
		fresh := l.nextFresh
		var c *loopConn
		if !fresh && !l.e.h2 && l.kept >= l.planned {
			c = l.reusable(now)
			if c == nil && now-l.nextAt >= growAfterLag && now-l.polledAt > growAfterLag {
				// Late, but the loop's word on its connections is old
				// too: it is behind (starved of CPU), and responses may
				// have come in. Look before growing.
				l.handle(l.events[:l.poll()])
				c = l.reusable(now)
			}
			if c == nil && (now-l.nextAt < growAfterLag || !l.mayGrow(now)) {
				l.waiting = waitConn
				break
			}
		}
		res := Result{Seq: l.nextSeq, Intended: l.nextAt, Start: now}
		l.nextSeq += uint64(len(l.e.loops))
		var ok bool
		l.nextAt, ok = l.p.pacer.Offset(l.nextSeq)
		l.scheduleEnded = !ok
		l.nextFresh = l.rollFresh()
		l.begin(res, fresh, c)
		started = true
	}
	return started
}

// mayGrow spends one of the maxGrowStep connections the open model may
// add beyond its plan every backlogEvery.
func (l *loop) mayGrow(now time.Duration) bool {
	if now-l.growFrom >= backlogEvery {
		l.growFrom, l.grown = now, 0
	}
	if l.grown >= maxGrowStep {
		return false
	}
	l.grown++
	return true
}

// startSlots runs the closed model's slots: it gives back what is over
// the loop's quota, takes what is under it, and sends a request on every
// free held slot (each once per round, so a failure that comes back at once
// cannot keep the loop from its sockets). It reports whether any started.
func (l *loop) startSlots() bool {
	quota := l.quota.Load()
	for l.idleSlots > 0 && int64(l.held) > quota {
		l.idleSlots--
		l.held--
		l.e.freeSlots.Add(1)
		l.e.wake() // a loop under its quota may take it
	}
	stopping := l.stopping()
	for !stopping && int64(l.held) < quota && l.takeSlot() {
		l.held++
		l.idleSlots++
	}
	started := false
	for n := l.idleSlots; n > 0 && !stopping; n-- {
		l.idleSlots--
		now := l.p.Elapsed()
		seq := l.p.seq.Add(1) - 1
		fresh := l.rollFresh()
		var c *loopConn
		if !fresh {
			c = l.reusable(now)
		}
		l.begin(Result{Seq: seq, Intended: now, Start: now}, fresh, c)
		started = true
	}
	return started
}

func (l *loop) takeSlot() bool {
	for {
		free := l.e.freeSlots.Load()
		if free <= 0 {
			return false
		}
		if l.e.freeSlots.CompareAndSwap(free, free-1) {
			return true
		}
	}
}

// begin starts res on c, an idle kept-alive connection, or when c is nil
// on a new one (for this request alone when fresh).
func (l *loop) begin(res Result, fresh bool, c *loopConn) {
	l.inflight++
	if !l.e.closed {
		l.peaks.note(res.Start, l.inflight)
		if w := int64(max(l.planned, l.inflight)); w > l.workers.Load() {
			l.workers.Store(w)
		}
	}
	if l.e.h2 {
		l.h2Begin(res)
		return
	}
	if c == nil {
		l.dial(res, fresh)
		return
	}
	c.res = res
	c.res.ConnReqs = c.served
	c.res.ConnAge = max(0, res.Start-c.born)
	c.deadline = res.Start + l.p.cfg.Timeout
	l.noteDeadline(c.deadline)
	l.send(c)
}

// reusable takes the idle connection idle longest that can carry another
// request. Events up to the last poll closed those the server closed; when
// that poll and the connection's last read are both older than lateAfter
// (a loop running late on a starved machine: a FIN may have come since), a
// non-blocking MSG_PEEK confirms it,
// so a request is never written into a connection the server already
// closed or reset (the goroutine engine's conn.reusable, for the same
// reason).
func (l *loop) reusable(now time.Duration) *loopConn {
	for {
		c := l.idle.pop()
		if c == nil || now-max(l.polledAt, c.idleFrom) <= lateAfter || l.p.reuseBlindly || peekOpen(c.fd) {
			return c
		}
		l.closeConn(c)
	}
}

// peekOpen: nothing is waiting on the idle socket fd, neither the peer's
// FIN, an error nor unsolicited data.
func peekOpen(fd int) bool {
	var b [1]byte
	for {
		_, _, err := syscall.Recvfrom(fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != syscall.EINTR {
			return err == syscall.EAGAIN
		}
	}
}

// --- connections --------------------------------------------------------------

// newConn takes a free slot for a connection on fd.
func (l *loop) newConn(fd int) *loopConn {
	var c *loopConn
	if n := len(l.free); n > 0 {
		c = l.conns[l.free[n-1]]
		l.free = l.free[:n-1]
	} else {
		c = &loopConn{slot: int32(len(l.conns))}
		l.conns = append(l.conns, c)
	}
	c.fd, c.served, c.dials, c.localIP, c.idleFrom = fd, 0, 0, false, 0
	c.out = c.out[:0]
	return c
}

// closeConn closes c and frees its slot. The kernel drops the socket from
// the epoll set as it closes.
func (l *loop) closeConn(c *loopConn) {
	switch c.state {
	case connFree:
		return
	case connLingering:
		l.lingering--
	}
	if !c.oneRequest {
		l.kept--
	}
	if c.h2 != nil {
		l.h2Leave(c)
	}
	l.p.cfg.ConnLog.Note(c.addr, c.dialed, c.born, c.served)
	_ = syscall.Close(c.fd)
	c.fd = -1
	c.state = connFree
	c.gen++
	l.free = append(l.free, c.slot)
}

// dial opens a connection for res and registers it. A failure of the
// socket or of connect(2) itself is recorded at once (then the connection
// is nil or already closed).
func (l *loop) dial(res Result, oneRequest bool) *loopConn {
	p, e := l.p, l.e
	res.Fresh = true // counted as fresh whether or not the dial succeeds
	fd, err := syscall.Socket(e.family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		addr := ConnAddr{Remote: e.target}
		res.Addr = &addr
		l.classify(&res, PhaseDial, l.dialError(os.NewSyscallError("socket", err)), false)
		l.record(&res)
		return nil
	}
	c := l.newConn(fd)
	c.oneRequest = oneRequest
	if !oneRequest {
		l.kept++
	}
	c.res, c.dialed = res, res.Start
	c.state = connConnecting
	c.deadline = res.Start + min(p.cfg.ConnectTimeout, p.cfg.Timeout)
	l.noteDeadline(c.deadline)
	l.connect(c)
	return c
}

// connect binds c's socket to an ephemeral port (so a connect that fails
// can still be found by its source port in a capture or in conntrack: see
// bindEphemeral) and starts connect(2).
func (l *loop) connect(c *loopConn) {
	e := l.e
	c.dials++
	c.addr = ConnAddr{Remote: e.target}
	c.icmpArmed = e.family == syscall.AF_INET6 && armDialICMP(c.fd)
	c.toItself = false
	unspecified := netip.IPv4Unspecified()
	var wildcard syscall.Sockaddr = &syscall.SockaddrInet4{Port: int(l.p.bindPort)}
	if e.family == syscall.AF_INET6 {
		unspecified, wildcard = netip.IPv6Unspecified(), &syscall.SockaddrInet6{Port: int(l.p.bindPort)}
	}
	if syscall.Bind(c.fd, wildcard) == nil {
		switch sa, _ := syscall.Getsockname(c.fd); sa := sa.(type) {
		case *syscall.SockaddrInet4:
			c.addr.Local = netip.AddrPortFrom(unspecified, uint16(sa.Port))
		case *syscall.SockaddrInet6:
			c.addr.Local = netip.AddrPortFrom(unspecified, uint16(sa.Port))
		}
	}
	err := syscall.Connect(c.fd, l.sa)
	for err == syscall.EINTR { // the connect goes on in the background
		err = syscall.EINPROGRESS
	}
	if err != nil && err != syscall.EINPROGRESS {
		l.fail(c, PhaseDial, l.dialError(os.NewSyscallError("connect", err)))
		return
	}
	ev := syscall.EpollEvent{Events: evIn | evOut | evRDHUP | evET}
	setToken(&ev, uint64(uint32(c.slot))|uint64(c.gen)<<32)
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		l.fail(c, PhaseDial, l.dialError(os.NewSyscallError("epoll_ctl", err)))
		return
	}
	// Registering reports a connect that already completed (loopback)
	// at the next poll.
}

func (l *loop) dialError(err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(l.e.target), Err: err}
}

func (l *loop) connError(op string, c *loopConn, err error) error {
	l.learnLocalIP(c)
	return &net.OpError{Op: op, Net: "tcp", Source: net.TCPAddrFromAddrPort(c.addr.Local),
		Addr: net.TCPAddrFromAddrPort(c.addr.Remote), Err: err}
}

// learnLocalIP completes an established connection's local address (the
// kernel chose the IP while connecting): asked on the failure path only.
func (l *loop) learnLocalIP(c *loopConn) {
	if c.localIP {
		return
	}
	c.localIP = true
	switch sa, _ := syscall.Getsockname(c.fd); sa := sa.(type) {
	case *syscall.SockaddrInet4:
		c.addr.Local = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *syscall.SockaddrInet6:
		c.addr.Local = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
}

// maxSelfConnects: a connect to a local port nothing listens on can reach
// its own socket when the kernel gave it that port as its source (TCP's
// simultaneous open); as net.Dialer does, it is closed and tried again.
const maxSelfConnects = 3

// connected completes c's connect and sends its request.
func (l *loop) connected(c *loopConn) {
	errno, err := syscall.GetsockoptInt(c.fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
	if err == nil && errno != 0 {
		err = syscall.Errno(errno)
	}
	if err != nil {
		l.fail(c, PhaseDial, l.dialError(os.NewSyscallError("connect", err)))
		return
	}
	if c.icmpArmed {
		disarmDialICMP(c.fd)
		c.icmpArmed = false
	}
	now := l.p.Elapsed()
	if c.addr.Local.Port() == c.addr.Remote.Port() && l.selfConnected(c) {
		if c.dials < maxSelfConnects {
			l.redial(c)
			return
		}
		c.toItself = true
		l.fail(c, PhaseDial, l.dialError(os.NewSyscallError("connect", syscall.ECONNREFUSED)))
		return
	}
	c.born = now
	c.res.Connect = now - c.res.Start
	c.res.SlowConnect = c.res.Connect >= SlowConnectAfter
	c.res.ConnReqs, c.res.ConnAge = 0, 0
	c.deadline = c.res.Start + l.p.cfg.Timeout
	l.noteDeadline(c.deadline)
	if c.h2 != nil {
		l.h2Connected(c)
		return
	}
	l.send(c)
}

func (l *loop) selfConnected(c *loopConn) bool {
	l.learnLocalIP(c)
	return c.addr.Local == c.addr.Remote
}

// redial replaces c's socket with a new one for the same request.
func (l *loop) redial(c *loopConn) {
	_ = syscall.Close(c.fd)
	c.gen++ // events of the old socket are ignored
	fd, err := syscall.Socket(l.e.family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		c.fd = -1 // closed above: closeConn's close of -1 is a no-op
		l.fail(c, PhaseDial, l.dialError(os.NewSyscallError("socket", err)))
		return
	}
	c.fd, c.localIP = fd, false
	l.connect(c)
}

// send writes c's request.
func (l *loop) send(c *loopConn) {
	p := l.p
	l.reqBuf = p.template.build(l.reqBuf[:0], c.res.Seq, c.oneRequest)
	c.parser.reset(p.template.isHead, p.backendHeader)
	n, err := writeFD(c.fd, l.reqBuf)
	if err != nil {
		l.fail(c, PhaseWrite, l.connError("write", c, os.NewSyscallError("write", err)))
		return
	}
	if n < len(l.reqBuf) {
		c.out = append(c.out[:0], l.reqBuf[n:]...)
		c.state = connWriting
		return
	}
	c.state = connReading
}

// writeRest writes what the socket had no room for; the response may
// already have begun, so it is read for at once.
func (l *loop) writeRest(c *loopConn) {
	n, err := writeFD(c.fd, c.out)
	if err != nil {
		l.fail(c, PhaseWrite, l.connError("write", c, os.NewSyscallError("write", err)))
		return
	}
	c.out = c.out[:copy(c.out, c.out[n:])]
	if len(c.out) > 0 {
		return
	}
	c.state = connReading
	l.read(c, false)
}

// writeFD writes what the socket takes now; EAGAIN is not an error.
func writeFD(fd int, b []byte) (int, error) {
	for {
		n, err := rawWrite(fd, b)
		switch err {
		case nil:
			return n, nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, nil
		}
		return 0, err
	}
}

// read takes what arrived for c's response. hup: the event said the peer
// closed (or hung up), so the stream ends after what is there.
func (l *loop) read(c *loopConn, hup bool) {
	for range loopReadsPerEvent {
		n, err := rawRead(c.fd, l.readBuf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return // a new event comes with more data or the FIN
		case err != nil:
			l.failRead(c, l.connError("read", c, os.NewSyscallError("read", err)))
			return
		case n == 0:
			if err := c.parser.end(); err != nil {
				l.failRead(c, err)
			} else {
				l.complete(c, false, true) // a close-delimited body
			}
			return
		}
		used, done, perr := c.parser.feed(l.readBuf[:n])
		if perr != nil {
			l.failRead(c, perr)
			return
		}
		if done {
			l.complete(c, used < n, hup)
			return
		}
		if n < len(l.readBuf) && !hup {
			return // drained: the rest raises a new event
		}
		// A full buffer, or the FIN is known to follow: read on.
	}
	l.again = append(l.again, idleEntry{c, c.gen})
}

// readAgain reads the connections that loopReadsPerEvent left undrained.
func (l *loop) readAgain() {
	if len(l.again) == 0 {
		return
	}
	batch := l.again
	l.again = nil
	for _, e := range batch {
		switch {
		case e.c.gen != e.gen:
		case e.c.state == connReading:
			l.read(e.c, true) // read until EAGAIN: no new event is coming for what is there
		case e.c.state == connH2:
			l.h2Read(e.c, true)
		}
	}
}

// failRead records a failure while reading the response, in the phase the
// parser had reached.
func (l *loop) failRead(c *loopConn, err error) {
	phase := PhaseReadHeaders
	if c.parser.got && c.parser.resp.headers {
		phase = PhaseReadBody
	}
	if c.parser.got && c.parser.resp.status != 0 {
		c.res.Status = c.parser.resp.status
	}
	l.fail(c, phase, err)
}

// complete records c's response. leftover: bytes arrived after it (the
// connection cannot be reused); closed: the server's FIN is in.
func (l *loop) complete(c *loopConn, leftover, closed bool) {
	p := l.p
	res := &c.res
	res.End = p.Elapsed()
	resp := &c.parser.resp
	if resp.backend != nil {
		if string(resp.backend) != l.backend {
			l.backend = string(resp.backend)
		}
		res.Backend = l.backend
	}
	res.Status = resp.status
	res.Class = statusClass(&p.cfg, resp.status, resp.backend)
	if res.Class != OK {
		// A failed status is found in logs by its connection too.
		l.learnLocalIP(c)
		addr := c.addr
		res.Addr = &addr
	}
	c.served++
	c.idleFrom = res.End
	l.stream.Add(res)
	l.requestEnded()
	switch {
	case c.oneRequest && !closed:
		// Wait for the server's FIN so that the server, not the prober,
		// holds TIME_WAIT (see retire).
		c.state = connLingering
		l.lingering++
		c.deadline = res.End + retireWait
		l.noteDeadline(c.deadline)
	case c.oneRequest || resp.close || leftover || closed:
		l.closeConn(c)
	case !l.e.closed && l.kept > l.planned && l.kept > 2*l.peaks.max(res.End):
		l.closeConn(c) // more idle connections than the recent peak needs
	default:
		c.state = connIdle
		c.deadline = never
		l.idle.push(c)
	}
}

// fail records a failed attempt on c, with its connection's addresses,
// and closes the connection.
func (l *loop) fail(c *loopConn, phase Phase, err error) {
	res := &c.res
	established := c.state != connConnecting
	if established {
		l.learnLocalIP(c)
	} else if phase == PhaseDial {
		c.addr.Local = boundAddr(c.fd, c.addr.Local) // the SYN's source, on the failure path only
	}
	addr := c.addr
	res.Addr = &addr
	l.classify(res, phase, err, res.ConnReqs > 0)
	if !res.Canceled && !established && phase == PhaseDial && !c.toItself {
		res.DialICMP = readDialICMP(c.fd, l.e.family == syscall.AF_INET6, c.icmpArmed)
	}
	if !res.Canceled && established && (res.Class == EOF || res.Class == EOFReused) {
		res.ServerClose = serverCloseOfFD(c.fd)
	}
	l.record(res)
	local := c.addr.Local
	if !res.Canceled && res.Class == Timeout {
		abortOnClose(c.fd) // the peer went silent: see conn.abort
	}
	l.closeConn(c)
	if phase == PhaseDial && !res.Canceled && res.Class == ConnectTimeout {
		l.p.dialer.holds.hold(local, time.Now()) // no answer: see portHold
	}
}

// classify fills in a failed attempt's outcome: canceled when our own stop
// cut it short, else its class.
func (l *loop) classify(res *Result, phase Phase, err error, reused bool) {
	if res.End == 0 {
		res.End = l.p.Elapsed()
	}
	res.Phase, res.Err = phase, err
	if l.p.aborting.Load() {
		res.Canceled = true
		return
	}
	res.Class = classify(err, phase, reused)
}

// record adds an attempt's result to the loop's stream.
func (l *loop) record(res *Result) {
	l.stream.Add(res)
	l.requestEnded()
}

// requestEnded: one request fewer in flight; in the closed model its slot
// is free for the next.
func (l *loop) requestEnded() {
	l.inflight--
	if l.e.closed {
		l.idleSlots++
	}
}

// --- deadlines ----------------------------------------------------------------

func (l *loop) noteDeadline(d time.Duration) {
	if d < l.nextDeadline {
		l.nextDeadline = d
	}
}

// expire fails the attempts whose deadline passed, ends lingering waits,
// and finds the next deadline.
func (l *loop) expire(now time.Duration) {
	next := never
	if l.e.h2 {
		next = l.h2ExpireQueue(now)
	}
	for _, c := range l.conns {
		switch c.state {
		case connFree, connIdle:
			continue
		case connH2:
			next = min(next, l.h2Expire(c, now))
			continue
		}
		if c.deadline > now {
			next = min(next, c.deadline)
			continue
		}
		switch c.state {
		case connConnecting:
			c.res.End = now
			l.fail(c, PhaseDial, l.dialError(os.ErrDeadlineExceeded))
		case connWriting:
			c.res.End = now
			l.fail(c, PhaseWrite, l.connError("write", c, os.ErrDeadlineExceeded))
		case connReading:
			c.res.End = now
			l.failRead(c, l.connError("read", c, os.ErrDeadlineExceeded))
		case connLingering:
			abortOnClose(c.fd) // no FIN: the server may be gone (see conn.abort)
			l.closeConn(c)
		}
	}
	l.nextDeadline = next
}

// abort ends the run at once (its context was canceled): every attempt in
// flight is recorded as canceled, every connection closed.
func (l *loop) abort() {
	err := l.p.running.Err()
	if err == nil {
		err = context.Canceled
	}
	for _, c := range l.conns {
		switch c.state {
		case connConnecting, connWriting, connReading:
			l.fail(c, c.phaseNow(), err)
		case connH2:
			l.h2Abort(c, err)
		}
	}
	if l.e.h2 {
		l.h2AbortQueue(err)
	}
	l.closeAll()
}

// phaseNow is where c's attempt stands.
func (c *loopConn) phaseNow() Phase {
	switch c.state {
	case connConnecting:
		return PhaseDial
	case connWriting:
		return PhaseWrite
	}
	if c.parser.got && c.parser.resp.headers {
		return PhaseReadBody
	}
	return PhaseReadHeaders
}

// abortOnClose makes fd's close send a reset rather than a FIN (see
// conn.abort).
func abortOnClose(fd int) {
	_ = syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
}

func (l *loop) closeAll() {
	for _, c := range l.conns {
		l.closeConn(c)
	}
}

// --- small parts -------------------------------------------------------------

// idleQueue holds idle kept-alive connections, oldest first. A connection
// closed while queued leaves a stale entry, skipped by its generation.
type idleQueue struct {
	entries []idleEntry
	head    int
}

type idleEntry struct {
	c   *loopConn
	gen uint32
}

func (q *idleQueue) push(c *loopConn) { q.entries = append(q.entries, idleEntry{c, c.gen}) }

func (q *idleQueue) pop() *loopConn {
	for q.head < len(q.entries) {
		e := q.entries[q.head]
		q.entries[q.head] = idleEntry{}
		q.head++
		if q.head == len(q.entries) || q.head > 1024 && q.head*2 > len(q.entries) {
			q.entries = q.entries[:copy(q.entries, q.entries[q.head:])]
			q.head = 0
		}
		if e.c.gen == e.gen && e.c.state == connIdle {
			return e.c
		}
	}
	return nil
}

// peakWindow keeps the most requests in flight in each of the last
// peakSeconds seconds.
type peakWindow struct {
	second int64
	peaks  [peakSeconds]int
}

func (w *peakWindow) advance(now time.Duration) int64 {
	s := int64(now / time.Second)
	for k := w.second + 1; k <= s && k <= w.second+peakSeconds; k++ {
		w.peaks[k%peakSeconds] = 0
	}
	if s > w.second {
		w.second = s
	}
	return s
}

func (w *peakWindow) note(now time.Duration, inflight int) {
	s := w.advance(now)
	if inflight > w.peaks[s%peakSeconds] {
		w.peaks[s%peakSeconds] = inflight
	}
}

func (w *peakWindow) max(now time.Duration) int {
	w.advance(now)
	m := 0
	for _, v := range w.peaks {
		m = max(m, v)
	}
	return m
}
