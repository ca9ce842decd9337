package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/natwatch"
	"github.com/rollprobe/rollprobe/prober"
)

// The agent is the prober pod's side: it waits for the CLI's word on
// stdin, probes, and streams its results to stdout.
//
// Commands, one per line on stdin (the CLI attaches to the container):
//
//	ping ID       answer pong ID with this clock's time (offset estimation)
//	config JSON   the prober's configuration (wire.ProberConfig): sent here,
//	              not in the pod's spec, so no header value or credential
//	              is stored in the cluster
//	start WALLNS  begin the run at that time on this clock (after config)
//	stop          end the send window; finish, write end, exit
//
// Stdin closing is not a stop: an attach stream can break and be made
// again. MaxDuration bounds the run whatever happens to the CLI, and the
// pod's activeDeadlineSeconds bounds the pod.

// AgentConfig is what a prober pod runs with; the probing itself comes
// with the config command.
type AgentConfig struct {
	// RunID is the CLI's run and this prober's index (RUN.i): it goes in
	// the User-Agent of every request, so a server's logs tell which run
	// and which prober sent it.
	RunID   string
	Name    string // the pod's name
	Node    string // the node it runs on
	Version string // rollprobe's
	// MaxDuration ends the run if no stop came by then (the CLI was
	// killed): the run's own timeout and a margin.
	MaxDuration time.Duration
	// StartTimeout ends the agent if no start came by then.
	StartTimeout time.Duration
	// Conntrack: read this network namespace's conntrack events for
	// where each failed connection went (a prober on its node's network
	// with CAP_NET_ADMIN), and say it in nat lines before end.
	Conntrack bool
	// Now is the pod's clock (time.Now when nil): every wall time the
	// agent writes or reads is on it. Tests skew it.
	Now func() time.Time
}

func (cfg *AgentConfig) now() time.Time {
	if cfg.Now != nil {
		return cfg.Now()
	}
	return time.Now()
}

// exportEvery is how often the agent takes the recorder's export: the
// merged view lags the probers by about this much more than a local one.
const exportEvery = 250 * time.Millisecond

// RunAgent runs one prober: reads commands from in, writes the protocol to
// out. It returns when the run has ended and its end line is written, or
// with the error that stopped it (also written as the end line's error
// when it can be).
func RunAgent(ctx context.Context, cfg AgentConfig, in io.Reader, out io.Writer) error {
	w := wire.NewWriter(out)
	if err := w.Write(wire.Line{Kind: wire.KindHello, Hello: &wire.Hello{Protocol: wire.Version, Prober: cfg.Name,
		Node: cfg.Node, Version: cfg.Version, WallNS: cfg.now().UnixNano()}}); err != nil {
		return err
	}
	cmds := make(chan command, 16)
	go readCommands(in, w, cmds, cfg.now)

	startBy := time.NewTimer(cfg.StartTimeout)
	defer startBy.Stop()
	var at time.Time
	var pcfg *prober.Config
wait:
	for {
		select {
		case <-ctx.Done():
			return endWith(w, prober.Summary{}, ctx.Err())
		case <-startBy.C:
			return endWith(w, prober.Summary{}, fmt.Errorf("no start within %v", cfg.StartTimeout))
		case c := <-cmds:
			switch c.name {
			case "config":
				if c.err != nil {
					return endWith(w, prober.Summary{}, c.err)
				}
				got, err := c.config.Config()
				if err != nil {
					return endWith(w, prober.Summary{}, fmt.Errorf("config: %w", err))
				}
				pcfg = &got
			case "start":
				if pcfg == nil {
					return endWith(w, prober.Summary{}, errors.New("start before config"))
				}
				at = c.at
				break wait
			case "stop":
				return endWith(w, prober.Summary{}, nil)
			}
		}
	}

	var conns *prober.ConnLog
	if cfg.Conntrack {
		conns = &prober.ConnLog{} // what each pod served, with the watch below
		pcfg.ConnLog = conns
	}
	p, err := prober.New(*pcfg, fmt.Sprintf("rollprobe/%s (prober %s of run %s)", cfg.Version, cfg.Name, cfg.RunID))
	if err != nil {
		return endWith(w, prober.Summary{}, err)
	}
	p.Recorder().EnableExport()
	if d := at.Sub(cfg.now()); d > 0 {
		time.Sleep(d)
	}
	var nat *natTrack
	if cfg.Conntrack {
		nat = watchNat(pcfg.DialedPort(), conns)
		defer nat.stop()
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := p.Go(runCtx)
	<-p.Started()
	if nat != nil {
		nat.start = p.Start()
	}
	started := p.Start().Add(time.Until(cfg.now())) // on the pod's clock
	if err := w.Write(wire.Line{Kind: wire.KindStarted, Started: &wire.Started{WallNS: started.UnixNano(), RunID: p.RunID()}}); err != nil {
		cancel()
		<-done
		return err
	}
	limit := time.NewTimer(cfg.MaxDuration)
	defer limit.Stop()
	tick := time.NewTicker(exportEvery)
	defer tick.Stop()
	export := func() error {
		x := p.Recorder().TakeExport()
		defer p.Recorder().ReleaseExport(x)
		nat.keep(x.Results, p.Start())
		return w.WriteExport(x)
	}
	for {
		select {
		case o := <-done:
			// The engine has stopped and made its last tick: everything
			// is final.
			if err := export(); err != nil {
				return err
			}
			if err := nat.write(w); err != nil {
				return err
			}
			if o.Err == nil && ctx.Err() != nil {
				// Terminated (the pod deleted, a node drained) before the
				// CLI's stop: the results end early, and the CLI must know.
				o.Err = errors.New("the prober was terminated before the run ended (its pod deleted?)")
			}
			return endWith(w, o.Summary, o.Err)
		case <-tick.C:
			if err := export(); err != nil {
				cancel()
				<-done
				return err
			}
		case <-limit.C:
			p.Stop()
		case c := <-cmds:
			if c.name == "stop" {
				p.Stop()
			}
		}
	}
}

// endWith writes the end line: the summary, and err if the run failed.
func endWith(w *wire.Writer, s prober.Summary, err error) error {
	end := &wire.End{ElapsedNS: int64(s.Elapsed), SendingNS: int64(s.Sending), Target: s.Target, Workers: s.Workers, Canceled: s.Canceled, Engine: string(s.Engine),
		Dialled: wire.FromDialled(s.Dialled, s.DialledMore)}
	if err != nil {
		end.Error = err.Error()
	}
	if werr := w.Write(wire.Line{Kind: wire.KindEnd, End: end}); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

type command struct {
	name   string
	at     time.Time
	config wire.ProberConfig
	err    error // a command that could not be read
}

// readCommands parses stdin; ping is answered here at once (the time of
// reading is what the offset estimate needs), the rest is passed on.
// Unknown lines are ignored: a newer CLI may say more.
func readCommands(in io.Reader, w *wire.Writer, out chan<- command, clock func() time.Time) {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20) // a config with a body
	for sc.Scan() {
		now := clock()
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "config":
			c, err := wire.ParseConfigCommand(strings.TrimSpace(strings.TrimPrefix(line, "config")))
			out <- command{name: "config", config: c, err: err}
		case "ping":
			if len(fields) == 2 {
				if id, err := strconv.ParseUint(fields[1], 10, 64); err == nil {
					_ = w.Write(wire.Line{Kind: wire.KindPong, Pong: &wire.Pong{ID: id, WallNS: now.UnixNano()}})
				}
			}
		case "start":
			if len(fields) == 2 {
				if ns, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
					out <- command{name: "start", at: time.Unix(0, ns)}
				}
			}
		case "stop":
			out <- command{name: "stop"}
		}
	}
}

// natTrack is an agent's conntrack watch and the failed connections it is
// to find there. A nil *natTrack watches nothing.
type natTrack struct {
	table *natwatch.Table
	stop  func()
	conns []failedConn
	// log is the prober's connection log and start its start: the
	// responses are counted by where their connections went.
	log   *prober.ConnLog
	start time.Time
	// staleHeld: how many of the lingering entries' ports were held.
	staleHeld int
}

// failedConn is a failure's connection, as natwatch.Attempt holds it.
type failedConn struct {
	seq           uint64
	local, remote netip.AddrPort
	start, end    time.Time
	fresh         bool
	// refused: a fresh connection's connect was refused: one the node's
	// own rules may have rejected (natwatch.Table.NoEntry).
	refused bool
	// unanswered: a fresh connection's connect timed out: its entry stays
	// in SYN_SENT, where the port's next SYN joins it (natwatch.Table.Joined).
	unanswered bool
}

func watchNat(port uint16, log *prober.ConnLog) *natTrack {
	t, stopWatch := natwatch.Watch([]uint16{port})
	// A previous run's unanswered entries: their ports are kept from this
	// prober's connections (prober.HoldLingering).
	var ports []prober.PortUntil
	for _, l := range t.Lingering() {
		ports = append(ports, prober.PortUntil{Addr: l.Src, Until: l.Until})
	}
	held, release := prober.HoldPorts(ports, time.Now())
	var once sync.Once
	stop := func() { once.Do(func() { stopWatch(); release() }) }
	return &natTrack{table: t, stop: stop, log: log, staleHeld: held}
}

// keep notes the failures among results that had a connection (start is
// the prober's, the origin of their times).
func (n *natTrack) keep(results []prober.Result, start time.Time) {
	if n == nil {
		return
	}
	for _, r := range results {
		if r.Addr == nil || r.Canceled || r.Class == prober.Local || r.Addr.Local.Port() == 0 {
			continue
		}
		n.conns = append(n.conns, failedConn{seq: r.Seq, local: r.Addr.Local, remote: r.Addr.Remote, start: start.Add(r.Start), end: start.Add(r.End), fresh: r.Fresh,
			refused: r.Fresh && r.Class == prober.Refused, unanswered: r.Fresh && r.Class == prober.ConnectTimeout})
	}
}

// write stops the watch and writes what it found: each failed
// connection's address after the rewrite and the responses by where their
// connections went (NatChunk entries of one kind to a line), and the
// watch's status on the last.
func (n *natTrack) write(w *wire.Writer) error {
	if n == nil {
		return nil
	}
	n.stop()
	st := n.table.Status()
	last := &wire.Nat{Last: true, Watching: st.Watching, Reason: st.Reason, Conns: st.Conns, Lost: st.Lost, LostReason: st.LostReason,
		StaleReason: st.LingeringReason, StaleHeld: n.staleHeld}
	if st.Watching && st.LingeringReason == "" {
		k := len(n.table.Lingering())
		last.StaleEntries = &k
	}
	if st.Watching {
		lag := float64(st.MaxLag.Microseconds()) / 1000
		last.MaxLagMS = &lag
	}
	var logged []prober.ConnRecord
	if n.log != nil {
		logged = n.log.Conns()
	}
	dials := natwatch.Dials{}
	for _, c := range n.conns {
		if c.fresh {
			dials.Add(c.local.Port(), c.start)
		}
	}
	for _, c := range logged {
		dials.Add(c.Addr.Local.Port(), n.start.Add(c.Dialed))
	}
	dials.Sort()
	var pods []wire.NatPod
	attempts := make([]natwatch.Attempt, len(n.conns))
	unanswered := natwatch.UnansweredByPort{}
	for i, c := range n.conns {
		attempts[i] = natwatch.Attempt{Src: c.local, Remote: c.remote, Start: c.start, End: c.end, Fresh: c.fresh, Next: dials.Next(c.local.Port(), c.start), Unanswered: c.unanswered}
		unanswered.AddUnanswered(attempts[i])
	}
	for i, c := range n.conns {
		a := attempts[i]
		switch got, ok := n.table.Find(a); {
		case ok:
			pods = append(pods, wire.NatPod{Seq: c.seq, Addr: got.Dest.String()})
		case c.refused && n.table.NoEntry(a):
			pods = append(pods, wire.NatPod{Seq: c.seq, NoEntry: true})
		default:
			if got, ok := n.table.Joined(a, unanswered[a.Src.Port()]); ok {
				pods = append(pods, wire.NatPod{Seq: c.seq, Addr: got.Dest.String(), Joined: true})
				continue
			}
			switch got, ok := n.table.Prior(a); {
			case c.fresh && n.table.Ambiguous(a):
				pods = append(pods, wire.NatPod{Seq: c.seq, Ambiguous: true})
			case ok && (c.refused || c.unanswered):
				pods = append(pods, wire.NatPod{Seq: c.seq, Prior: got.Dest.String()})
			}
			if st.Watching {
				last.Unmapped++
			}
		}
	}
	var responses []wire.NatResponses
	if n.log != nil {
		var unmapped uint64
		responses, unmapped = n.responses(logged, dials)
		if st.Watching {
			last.ResponsesUnmapped = unmapped
		}
	}
	for len(pods) > 0 {
		k := min(len(pods), wire.NatChunk)
		if err := w.Write(wire.Line{Kind: wire.KindNat, Nat: &wire.Nat{Pods: pods[:k]}}); err != nil {
			return err
		}
		pods = pods[k:]
	}
	for len(responses) > 0 {
		k := min(len(responses), wire.NatChunk)
		if err := w.Write(wire.Line{Kind: wire.KindNat, Nat: &wire.Nat{Responses: responses[:k]}}); err != nil {
			return err
		}
		responses = responses[k:]
	}
	return w.Write(wire.Line{Kind: wire.KindNat, Nat: last})
}

// responses counts the logged connections' responses by the address
// conntrack saw each go to and the second of the prober's run it was
// dialled in; unmapped, those on connections it did not find.
func (n *natTrack) responses(logged []prober.ConnRecord, dials natwatch.Dials) (out []wire.NatResponses, unmapped uint64) {
	carried := make([]natwatch.Carried, len(logged))
	for i, c := range logged {
		carried[i] = natwatch.Carried{Local: c.Addr.Local, Remote: c.Addr.Remote, Dialed: n.start.Add(c.Dialed), Connected: n.start.Add(c.Connected), Responses: uint64(c.Responses)}
	}
	// The prober's start plus the offset: the CLI places the agent's
	// seconds on the run's from that start, and samples its own clock.
	second := func(t time.Time) int64 { return int64(math.Floor(t.Sub(n.start).Seconds())) }
	served, unmapped := n.table.Serve(carried, dials, second)
	for _, s := range served {
		out = append(out, wire.NatResponses{Addr: s.Dest.String(), Second: s.Second, Conns: s.Conns, Responses: s.Responses})
	}
	return out, unmapped
}
