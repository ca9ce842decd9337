// Package wire is the line protocol of rollprobe's in-cluster probers: what
// a prober pod writes to stdout and the CLI reads back from the pod's log
// (pods/log), to merge every prober's results exactly (prober.Recorder's
// Export and Ingest).
//
// Contract (version 1):
//   - One protocol line per log line: Prefix, then a JSON object. Other
//     lines (a Go panic, anything on stderr, which the container log
//     interleaves) are not the protocol's and are passed over.
//   - Every protocol line carries seq, 1, 2, 3... without gaps. A reader
//     that sees a seq again (a log stream resumed from its start) skips
//     it; one that sees a seq skipped has lost lines: the merge can no
//     longer be exact, and the run is inconclusive.
//   - nat lines (a prober that read conntrack) come after the last
//     results and before end.
//   - hello comes first (the prober's name, node and version), started
//     once the prober's run begins (its wall clock's start), then results
//     (each result that is not OK, in full), aggregates (OK results by
//     second, with latency, service-time and after-write HDR
//     histograms in hdrhistogram-go's V2 compressed encoding; after-write
//     is optional: probers before it did not send it) and final marks (seconds
//     before it are final), and end last (the prober's summary; where its
//     connections were sent is optional too). pong
//     answers a ping from the CLI (clock offset estimation) at any time.
//   - Times of results and seconds are offsets from the prober's start,
//     which the CLI sets to the run's start (so every prober's offsets are
//     on one timeline); wall times are Unix nanoseconds on the prober's
//     clock.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/rollprobe/rollprobe/prober"
)

// Version is the protocol's version; Prefix names it on every line.
const (
	Version = 1
	Prefix  = "rp1 "
)

// Kind names a line's content.
type Kind string

const (
	KindHello   Kind = "hello"
	KindStarted Kind = "started"
	KindResult  Kind = "result"
	KindAgg     Kind = "agg"
	KindFinal   Kind = "final"
	KindPong    Kind = "pong"
	KindEnd     Kind = "end"
	KindNat     Kind = "nat"
)

// Line is one protocol line: its sequence number, its kind, and the one
// field of that kind.
type Line struct {
	Seq     uint64   `json:"seq"`
	Kind    Kind     `json:"k"`
	Hello   *Hello   `json:"hello,omitempty"`
	Started *Started `json:"started,omitempty"`
	Result  *Result  `json:"r,omitempty"`
	Agg     *Agg     `json:"a,omitempty"`
	Final   *Final   `json:"final,omitempty"`
	Pong    *Pong    `json:"pong,omitempty"`
	End     *End     `json:"end,omitempty"`
	Nat     *Nat     `json:"nat,omitempty"`
}

// Nat is what a prober's conntrack watch found (a prober on its node's
// network with CAP_NET_ADMIN: run --probers-conntrack): where its failed
// connections went after kube-proxy's rewrite, by the failures' seq. It
// comes after the last results and before end, in lines of at most
// NatChunk pairs; the last one (Last) carries the watch's status.
type Nat struct {
	Pods []NatPod `json:"pods,omitempty"`
	// Responses are the responses on the prober's connections, by where
	// conntrack saw each go and the second of the prober's run it was
	// dialled in (the merge moves them to the run's seconds).
	Responses []NatResponses `json:"responses,omitempty"`
	Last      bool           `json:"last,omitempty"`
	// The watch's status (natwatch.Status), on the last line.
	Watching   bool   `json:"watching,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Conns      int    `json:"conns,omitempty"`
	Lost       bool   `json:"lost,omitempty"`
	LostReason string `json:"lost_reason,omitempty"`
	// Unmapped counts the failures with a connection it did not find;
	// ResponsesUnmapped the responses on connections it did not find.
	Unmapped          int    `json:"unmapped,omitempty"`
	ResponsesUnmapped uint64 `json:"responses_unmapped,omitempty"`
	// StaleEntries counts the unanswered entries the watch found when it
	// began (natwatch.Table.Lingering; nil when they could not be listed,
	// StaleReason says why), StaleHeld how many of their ports the prober
	// kept from its connections.
	StaleEntries *int   `json:"stale_entries,omitempty"`
	StaleReason  string `json:"stale_reason,omitempty"`
	StaleHeld    int    `json:"stale_held,omitempty"`
	// MaxLagMS is the watch's longest time between two reads of the
	// kernel's events (natwatch.Status.MaxLag), when it watched.
	MaxLagMS *float64 `json:"max_lag_ms,omitempty"`
}

// NatResponses counts the responses on connections to one address after
// NAT, dialled in one second.
type NatResponses struct {
	Addr      string `json:"addr"`
	Second    int64  `json:"s"`
	Conns     uint64 `json:"conns"`
	Responses uint64 `json:"n"`
}

// NatPod is one failure's connection: its result's seq and the address
// (ip:port) the connection went to; or, NoEntry, that conntrack shows the
// connection left no entry (natwatch.Table.NoEntry: the prober's node's
// own rules stopped its SYN) and Addr is empty. Joined: the connection's
// SYN joined an earlier unanswered one's entry (natwatch.Table.Joined),
// whose address Addr is.
type NatPod struct {
	Seq     uint64 `json:"seq"`
	Addr    string `json:"addr,omitempty"`
	NoEntry bool   `json:"no_entry,omitempty"`
	Joined  bool   `json:"joined,omitempty"`
	// Prior: no address was found, and the connection's SYN most likely
	// followed the entry an earlier one from its port left, to this
	// address (natwatch.Table.Prior).
	Prior string `json:"prior,omitempty"`
	// Ambiguous: no address was found because the connection's window
	// held connections from its port that went to different places
	// (natwatch.Table.Ambiguous).
	Ambiguous bool `json:"ambiguous,omitempty"`
}

// NatChunk bounds the entries (pods or responses, one kind a line) in one
// nat line: a container runtime splits longer log lines (containerd at
// 16 KiB).
const NatChunk = 200

// Hello introduces a prober.
type Hello struct {
	Protocol int    `json:"protocol"`
	Prober   string `json:"prober"` // its pod's name
	Node     string `json:"node"`
	Version  string `json:"version"` // rollprobe's
	// WallNS is the prober's clock when it wrote the line.
	WallNS int64 `json:"wall_ns"`
}

// Started says when the prober's run began, on its own clock: the origin
// of every offset it writes.
type Started struct {
	WallNS int64 `json:"wall_ns"`
	// RunID is the prober's own run ID: its requests carry RunID-seq in
	// the request ID header.
	RunID string `json:"run_id"`
}

// Result is a prober.Result that was not OK, in full.
type Result struct {
	Seq         uint64 `json:"seq"`
	IntendedNS  int64  `json:"intended_ns"`
	StartNS     int64  `json:"start_ns"`
	EndNS       int64  `json:"end_ns"`
	Class       string `json:"class"`
	Phase       string `json:"phase,omitempty"`
	Status      int    `json:"status,omitempty"`
	Fresh       bool   `json:"fresh,omitempty"`
	SlowConnect bool   `json:"slow,omitempty"`
	ConnReqs    uint32 `json:"conn_reqs,omitempty"`
	ConnAgeNS   int64  `json:"conn_age_ns,omitempty"`
	ConnectNS   int64  `json:"connect_ns,omitempty"` // optional: probers before it did not send it
	Backend     string `json:"backend,omitempty"`
	Error       string `json:"error,omitempty"`
	Local       string `json:"local,omitempty"`
	Remote      string `json:"remote,omitempty"`
	ServerClose string `json:"server_close,omitempty"`
	TLSCause    string `json:"tls_cause,omitempty"`
	H2Code      string `json:"h2_code,omitempty"`
	GoAway      string `json:"goaway,omitempty"`
	StreamEnd   string `json:"stream_end,omitempty"` // optional: probers before it did not send it
	GRPCStatus  string `json:"grpc_status,omitempty"`
	Retries     uint8  `json:"retries,omitempty"`
	RetryNS     int64  `json:"retry_ns,omitempty"`
	Canceled    bool   `json:"canceled,omitempty"`
	// DialICMP is prober.Result.DialICMP; optional: probers before it
	// did not send it (not known then).
	DialICMP *DialICMP `json:"dial_icmp,omitempty"`
}

// DialICMP is a prober.DialICMP: From empty when the failed connect's
// error queue held no ICMP error.
type DialICMP struct {
	From string `json:"from,omitempty"`
	Type uint8  `json:"type,omitempty"`
	Code uint8  `json:"code,omitempty"`
	V6   bool   `json:"v6,omitempty"`
}

// Agg is a prober.Aggregate: one second's OK results, as deltas.
type Agg struct {
	Second   int64             `json:"s"`
	Sent     uint64            `json:"sent,omitempty"`
	Slow     uint64            `json:"slow,omitempty"`
	MaxLagNS int64             `json:"max_lag_ns,omitempty"`
	Fresh    uint64            `json:"fresh,omitempty"`
	Reused   uint64            `json:"reused,omitempty"`
	OK       uint64            `json:"ok,omitempty"`
	Status   map[int]uint64    `json:"status,omitempty"`
	Backends map[string]uint64 `json:"backends,omitempty"`
	Latency  string            `json:"latency,omitempty"` // HDR V2 compressed, base64 (hdrhistogram-go's Encode)
	Service  string            `json:"service,omitempty"`
	// AfterWrite: the successes' time from their request's write
	// (prober.Result.AfterWrite); only with the two above, and optional
	// (probers before it did not send it).
	AfterWrite string `json:"after_write,omitempty"`
	// Retried, Retries, RetrySumNS and RetryMaxNS: the hidden retries of
	// the second's successes (grpc-go as the client).
	Retried    uint64 `json:"retried,omitempty"`
	Retries    uint64 `json:"retries,omitempty"`
	RetrySumNS int64  `json:"retry_sum_ns,omitempty"`
	RetryMaxNS int64  `json:"retry_max_ns,omitempty"`
}

// Final says the prober's seconds before Before are final.
type Final struct {
	Before int64 `json:"before"`
}

// Pong answers the CLI's ping ID: when the prober read it, on its clock.
type Pong struct {
	ID     uint64 `json:"id"`
	WallNS int64  `json:"wall_ns"`
}

// End is the prober's summary, its last line.
type End struct {
	ElapsedNS int64   `json:"elapsed_ns"`
	SendingNS int64   `json:"sending_ns"`
	Target    float64 `json:"target"`
	Workers   int     `json:"workers"`
	Canceled  bool    `json:"canceled,omitempty"`
	// Engine is the prober's engine (prober.Engine); empty from probers
	// that predate it.
	Engine string `json:"engine,omitempty"`
	// Error is why the prober ended early, if it did.
	Error string `json:"error,omitempty"`
	// Dialled is where the prober's connections were sent (optional:
	// probers before it did not send it, and where they went is then
	// unknown).
	Dialled *Dialled `json:"dialled,omitempty"`
}

// Dialled is prober.Summary's Dialled and DialledMore: the distinct
// addresses (ip:port) a prober's connections were sent to, in the order
// first seen, at most prober.MaxDialled, and whether there were more.
// Present, with no address, from a prober that made no connection.
type Dialled struct {
	Addrs []string `json:"addrs,omitempty"`
	More  bool     `json:"more,omitempty"`
}

// FromDialled is a summary's Dialled and DialledMore as a line's field.
func FromDialled(addrs []netip.AddrPort, more bool) *Dialled {
	d := &Dialled{More: more}
	for _, a := range addrs {
		d.Addrs = append(d.Addrs, a.String())
	}
	return d
}

// AddrPorts is d's addresses, parsed; an error for one that is not
// ip:port, or for more than prober.MaxDialled.
func (d *Dialled) AddrPorts() ([]netip.AddrPort, error) {
	if len(d.Addrs) > prober.MaxDialled {
		return nil, fmt.Errorf("%d dialled addresses, at most %d", len(d.Addrs), prober.MaxDialled)
	}
	var out []netip.AddrPort
	for _, s := range d.Addrs {
		a, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, fmt.Errorf("dialled address: %w", err)
		}
		out = append(out, a)
	}
	return out, nil
}

// Encode renders l as one protocol line, newline included.
func Encode(l Line) ([]byte, error) {
	b, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(Prefix)+len(b)+1)
	out = append(out, Prefix...)
	out = append(out, b...)
	return append(out, '\n'), nil
}

// ErrNotProtocol marks a log line that is not a protocol line.
var ErrNotProtocol = errors.New("not a protocol line")

// maxLine bounds a protocol line: an aggregate's two histograms are a few
// KB compressed; anything near this is not ours.
const maxLine = 1 << 20

// Parse reads one log line (without its newline). A line without Prefix
// is ErrNotProtocol; a protocol line that does not validate is another
// error.
func Parse(line []byte) (Line, error) {
	line = bytes.TrimRight(line, "\r\n")
	rest, ok := bytes.CutPrefix(line, []byte(Prefix))
	if !ok {
		return Line{}, ErrNotProtocol
	}
	if len(rest) > maxLine {
		return Line{}, fmt.Errorf("protocol line of %d bytes: over %d", len(rest), maxLine)
	}
	var l Line
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Line{}, fmt.Errorf("protocol line: %w", err)
	}
	if dec.More() {
		return Line{}, errors.New("protocol line: data after the object")
	}
	return l, l.validate()
}

// validate checks that the line carries exactly its kind's field, and
// that the field's values are in range.
func (l Line) validate() error {
	if l.Seq == 0 {
		return errors.New("protocol line without seq")
	}
	set := 0
	for _, p := range []bool{l.Hello != nil, l.Started != nil, l.Result != nil, l.Agg != nil, l.Final != nil, l.Pong != nil, l.End != nil, l.Nat != nil} {
		if p {
			set++
		}
	}
	has := map[Kind]bool{KindHello: l.Hello != nil, KindStarted: l.Started != nil, KindResult: l.Result != nil,
		KindAgg: l.Agg != nil, KindFinal: l.Final != nil, KindPong: l.Pong != nil, KindEnd: l.End != nil, KindNat: l.Nat != nil}
	if present, known := has[l.Kind]; !known || !present || set != 1 {
		return fmt.Errorf("protocol line %d: kind %q with %d fields", l.Seq, l.Kind, set)
	}
	switch {
	case l.Hello != nil && l.Hello.Protocol != Version:
		return fmt.Errorf("protocol version %d: this rollprobe reads version %d (use the same rollprobe version for the CLI and the probers)", l.Hello.Protocol, Version)
	case l.Result != nil:
		_, err := l.Result.ToResult()
		return err
	case l.Agg != nil:
		_, err := l.Agg.ToAggregate()
		return err
	case l.Nat != nil && (len(l.Nat.Pods) > NatChunk || l.Nat.Conns < 0 || l.Nat.Unmapped < 0):
		return fmt.Errorf("protocol line %d: nat out of range", l.Seq)
	case l.End != nil && (l.End.ElapsedNS < 0 || l.End.SendingNS < 0 || l.End.Workers < 0 || !finite(l.End.Target)):
		return fmt.Errorf("protocol line %d: end out of range", l.Seq)
	case l.End != nil && l.End.Dialled != nil:
		if _, err := l.End.Dialled.AddrPorts(); err != nil {
			return fmt.Errorf("protocol line %d: %w", l.Seq, err)
		}
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// FromResult is res as a line's payload.
func FromResult(res *prober.Result) *Result {
	r := &Result{Seq: res.Seq, IntendedNS: int64(res.Intended), StartNS: int64(res.Start), EndNS: int64(res.End),
		Class: res.Class.String(), Phase: res.Phase.String(), Status: res.Status, Fresh: res.Fresh,
		SlowConnect: res.SlowConnect, ConnReqs: res.ConnReqs, ConnAgeNS: int64(res.ConnAge), ConnectNS: int64(res.Connect), Backend: res.Backend,
		ServerClose: res.ServerClose.String(), TLSCause: res.TLSCause.String(), Canceled: res.Canceled,
		H2Code: res.H2Code, GoAway: res.GoAway.String(), StreamEnd: res.StreamEnd, GRPCStatus: res.GRPCStatus, Retries: res.HiddenRetries, RetryNS: int64(res.RetryDelay)}
	if res.Err != nil {
		r.Error = res.Err.Error()
	}
	if a := res.Addr; a != nil {
		if a.Local.IsValid() {
			r.Local = a.Local.String()
		}
		if a.Remote.IsValid() {
			r.Remote = a.Remote.String()
		}
	}
	if d := res.DialICMP; d != nil {
		r.DialICMP = &DialICMP{Type: d.Type, Code: d.Code, V6: d.V6}
		if d.From.IsValid() {
			r.DialICMP.From = d.From.String()
		}
	}
	return r
}

// ToResult is the prober.Result the line carries. Its error, if any, is
// the error's text.
func (r *Result) ToResult() (prober.Result, error) {
	class, err := prober.ParseClass(r.Class)
	if err != nil {
		return prober.Result{}, err
	}
	phase, err := prober.ParsePhase(r.Phase)
	if err != nil {
		return prober.Result{}, err
	}
	closed, err := prober.ParseServerClose(r.ServerClose)
	if err != nil {
		return prober.Result{}, err
	}
	cause, err := prober.ParseTLSCause(r.TLSCause)
	if err != nil {
		return prober.Result{}, err
	}
	goAway, err := prober.ParseGoAwayKind(r.GoAway)
	if err != nil {
		return prober.Result{}, err
	}
	if r.IntendedNS < 0 || r.StartNS < r.IntendedNS || r.EndNS < r.StartNS || r.ConnAgeNS < 0 || r.ConnectNS < 0 || r.ConnectNS > r.EndNS-r.StartNS || r.Status < 0 || r.Status > 999 || r.RetryNS < 0 {
		return prober.Result{}, fmt.Errorf("result %d: times or status out of range", r.Seq)
	}
	res := prober.Result{Seq: r.Seq, Intended: time.Duration(r.IntendedNS), Start: time.Duration(r.StartNS), End: time.Duration(r.EndNS),
		Class: class, Phase: phase, Status: r.Status, Fresh: r.Fresh, SlowConnect: r.SlowConnect, ConnReqs: r.ConnReqs,
		ConnAge: time.Duration(r.ConnAgeNS), Connect: time.Duration(r.ConnectNS), Backend: r.Backend, ServerClose: closed, TLSCause: cause, Canceled: r.Canceled,
		H2Code: r.H2Code, GoAway: goAway, StreamEnd: r.StreamEnd, GRPCStatus: r.GRPCStatus, HiddenRetries: r.Retries, RetryDelay: time.Duration(r.RetryNS)}
	if r.Error != "" {
		res.Err = errors.New(r.Error)
	}
	if r.Local != "" || r.Remote != "" {
		var a prober.ConnAddr
		if r.Local != "" {
			if a.Local, err = netip.ParseAddrPort(r.Local); err != nil {
				return prober.Result{}, fmt.Errorf("result %d: %w", r.Seq, err)
			}
		}
		if r.Remote != "" {
			if a.Remote, err = netip.ParseAddrPort(r.Remote); err != nil {
				return prober.Result{}, fmt.Errorf("result %d: %w", r.Seq, err)
			}
		}
		res.Addr = &a
	}
	if d := r.DialICMP; d != nil {
		res.DialICMP = &prober.DialICMP{Type: d.Type, Code: d.Code, V6: d.V6}
		if d.From != "" {
			if res.DialICMP.From, err = netip.ParseAddr(d.From); err != nil {
				return prober.Result{}, fmt.Errorf("result %d: dial_icmp: %w", r.Seq, err)
			}
		}
	}
	return res, nil
}

// FromAggregate is a as a line's payload.
func FromAggregate(a *prober.Aggregate) (*Agg, error) {
	out := &Agg{Second: a.Second, Sent: a.Sent, Slow: a.Slow, MaxLagNS: int64(a.MaxLag), Fresh: a.Fresh, Reused: a.Reused,
		OK: a.OK, Status: a.Status, Backends: a.Backends,
		Retried: a.Retries.Calls, Retries: a.Retries.Attempts, RetrySumNS: int64(a.Retries.DelaySum), RetryMaxNS: int64(a.Retries.DelayMax)}
	if a.Latency != nil {
		for _, x := range []struct {
			h   *hdr.Histogram
			out *string
		}{{a.Latency, &out.Latency}, {a.Service, &out.Service}, {a.AfterWrite, &out.AfterWrite}} {
			if x.h == nil {
				continue
			}
			b, err := x.h.Encode(hdr.V2CompressedEncodingCookieBase)
			if err != nil {
				return nil, err
			}
			*x.out = string(b)
		}
	}
	return out, nil
}

// ToAggregate is the prober.Aggregate the line carries, its histograms
// decoded and checked to have the recorder's range and precision (only
// then does merging them stay exact).
func (a *Agg) ToAggregate() (prober.Aggregate, error) {
	if a.Second < 0 || a.MaxLagNS < 0 || a.RetrySumNS < 0 || a.RetryMaxNS < 0 {
		return prober.Aggregate{}, fmt.Errorf("aggregate of second %d out of range", a.Second)
	}
	out := prober.Aggregate{Second: a.Second, Sent: a.Sent, Slow: a.Slow, MaxLag: time.Duration(a.MaxLagNS), Fresh: a.Fresh,
		Reused: a.Reused, OK: a.OK, Status: a.Status, Backends: a.Backends,
		Retries: prober.HiddenRetries{Calls: a.Retried, Attempts: a.Retries, DelaySum: time.Duration(a.RetrySumNS), DelayMax: time.Duration(a.RetryMaxNS)}}
	for code := range a.Status {
		if code <= 0 || code > 999 {
			return prober.Aggregate{}, fmt.Errorf("aggregate of second %d: status %d", a.Second, code)
		}
	}
	if (a.Latency == "") != (a.Service == "") {
		return prober.Aggregate{}, fmt.Errorf("aggregate of second %d: one histogram of two", a.Second)
	}
	if a.Latency == "" {
		if a.AfterWrite != "" {
			return prober.Aggregate{}, fmt.Errorf("aggregate of second %d: an after-write histogram without the others", a.Second)
		}
		return out, nil
	}
	var err error
	if out.LatencyBuckets, err = decodeHistogram(a.Latency); err != nil {
		return prober.Aggregate{}, fmt.Errorf("aggregate of second %d: latency: %w", a.Second, err)
	}
	if out.ServiceBuckets, err = decodeHistogram(a.Service); err != nil {
		return prober.Aggregate{}, fmt.Errorf("aggregate of second %d: service time: %w", a.Second, err)
	}
	if a.AfterWrite != "" {
		if out.AfterWriteBuckets, err = decodeHistogram(a.AfterWrite); err != nil {
			return prober.Aggregate{}, fmt.Errorf("aggregate of second %d: time after the write: %w", a.Second, err)
		}
	}
	return out, nil
}

// decodeHistogram decodes an encoded histogram (sparse: nothing is
// allocated per bucket of the range) and checks that its shape is the
// recorder's: only then does merging it stay exact.
func decodeHistogram(enc string) (*hdr.PackedHistogram, error) {
	if len(enc) > maxLine {
		return nil, errors.New("histogram too long")
	}
	h, err := hdr.DecodePacked([]byte(enc))
	if err != nil {
		return nil, err
	}
	lowest, highest, digits := prober.HistogramShape()
	if h.LowestTrackableValue() != lowest || h.HighestTrackableValue() != highest || h.SignificantFigures() != digits {
		return nil, fmt.Errorf("histogram of range %d..%d at %d digits: the recorder's is %d..%d at %d",
			h.LowestTrackableValue(), h.HighestTrackableValue(), h.SignificantFigures(), lowest, highest, digits)
	}
	return h, nil
}
