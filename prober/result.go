package prober

import (
	"fmt"
	"net/netip"
	"time"
)

// Result is one request attempt. Times are offsets from the run's start on
// the monotonic clock; Summary.Start anchors them to wall time.
type Result struct {
	Seq      uint64
	Intended time.Duration // when the pacer meant it to be sent
	Start    time.Duration // when the worker began it (dial or write)
	End      time.Duration // when it completed or failed
	Class    Class
	Phase    Phase // where it failed; PhaseNone when a response was read
	Status   int   // 0 when no response status was read
	Fresh    bool  // sent on a connection opened for it (grpc-go: the first call on one that came up while it waited)
	// SlowConnect: its connection took SlowConnectAfter or more to open,
	// so the first SYN went unanswered and was retransmitted (the initial
	// retransmission timeout is 1 s): the latency spike a user sees when a
	// SYN goes to a pod IP that no longer answers.
	SlowConnect bool
	// Connect, for a request sent on a connection opened for it, is how
	// long that took from Start (the TCP connect, the TLS handshake on
	// https, and for h2 the wait for a connection to open); 0 on a
	// connection that was open already, and with grpc-go as the client
	// (GRPCClientGo), which opens its connections out of sight.
	Connect  time.Duration
	ConnReqs uint32
	ConnAge  time.Duration // age of the connection when the request began
	Backend  string        // value of the backend header, if configured and present
	Err      error
	// Addr, for a failure, is its connection's local and remote address,
	// to find it in conntrack, a capture or server logs (the local port
	// even when the connect failed). nil for successes, which pay nothing
	// for it.
	Addr *ConnAddr
	// ServerClose, for eof and eof_reused, says whether the server's
	// kernel had acknowledged the request before the close.
	ServerClose ServerClose
	// TLSCause, for tls, says why the handshake failed.
	TLSCause TLSCause
	// H2Code, for an HTTP/2 stream the server reset or cut with a GOAWAY,
	// is the frame's error code (REFUSED_STREAM, NO_ERROR, ...); GoAway is
	// how the connection's GOAWAY came, when one did.
	H2Code string
	GoAway GoAwayKind
	// StreamEnd, for a call of grpc-go's sent and unanswered
	// (PhaseReadHeaders), is how it ended: report.StreamEndConnLost,
	// StreamEndReset or StreamEndUnprocessed; "" when grpc-go gave no
	// cause.
	StreamEnd string
	// GRPCStatus, for grpc_status, is the call's status code by name
	// (UNAVAILABLE, ...); Err holds its grpc-message.
	GRPCStatus string
	// HiddenRetries, with grpc-go as the client (GRPCClientGo), is how
	// many times grpc-go sent the call again on its own (transparent
	// retries: a stream refused or above a GOAWAY), and RetryDelay how much
	// later than the first attempt the last one began: what a real
	// client's caller never sees but waits for.
	HiddenRetries uint8
	RetryDelay    time.Duration
	// Source is where the result was measured: 0 for this process, i for
	// the i-th in-cluster prober (1-based) whose results were merged in.
	Source uint16
	// Canceled: cut short because the run was stopped (Ctrl-C); such an
	// attempt has no outcome and is counted apart, never as a failure.
	Canceled bool
	// Path is which of a Group's paths it was sent on (Group.Names).
	Path uint8
	// DialICMP, for a failed connect, is what its socket's error queue
	// held: the ICMP error that ended it, or none (From invalid: a
	// refusal was then a TCP reset). nil when the queue was not read (no
	// connect failed, or this host or socket cannot say).
	DialICMP *DialICMP
}

// DialICMP is the ICMP destination-unreachable error the kernel queued on
// a connecting socket when it ended the connect (Linux queues one received
// in SYN_SENT on the socket's error queue since 5.10; IPv4 always, IPv6
// with IPV6_RECVERR set). It tells who refused a connection: a host's
// reject rule (kube-proxy rejects a Service address it holds no endpoint
// for with an ICMP port unreachable) answers so, a TCP stack with no
// listener (a pod) with a reset, which queues nothing; both reach the
// caller as ECONNREFUSED.
type DialICMP struct {
	// From is the error's sender (SO_EE_OFFENDER); invalid when the queue
	// held no ICMP error.
	From netip.Addr
	// Type and Code are ICMP's (IPv4) or ICMPv6's (V6).
	Type, Code uint8
	V6         bool
}

// icmpTypeCode keys the common destination-unreachable errors' names.
type icmpTypeCode struct{ typ, code uint8 }

var (
	icmpNames = map[icmpTypeCode]string{{3, 0}: "net unreachable", {3, 1}: "host unreachable", {3, 3}: "port unreachable",
		{3, 9}: "net prohibited", {3, 10}: "host prohibited", {3, 13}: "administratively prohibited"}
	icmp6Names = map[icmpTypeCode]string{{1, 0}: "no route", {1, 1}: "administratively prohibited", {1, 3}: "address unreachable",
		{1, 4}: "port unreachable", {1, 6}: "reject route"}
)

// PortUnreachable reports a port unreachable: what a reject rule sends
// for a refused TCP SYN (ECONNREFUSED).
func (d DialICMP) PortUnreachable() bool {
	if d.V6 {
		return d.From.IsValid() && d.Type == 1 && d.Code == 4
	}
	return d.From.IsValid() && d.Type == 3 && d.Code == 3
}

// Name says what the error is in words ("port unreachable"), or its type
// and code when it has no common name; "" when none was queued.
func (d DialICMP) Name() string {
	if !d.From.IsValid() {
		return ""
	}
	names := icmpNames
	if d.V6 {
		names = icmp6Names
	}
	if n, ok := names[icmpTypeCode{d.Type, d.Code}]; ok {
		return n
	}
	family := "ICMP"
	if d.V6 {
		family = "ICMPv6"
	}
	return fmt.Sprintf("%s type %d code %d", family, d.Type, d.Code)
}

// SlowConnectAfter is the connect time from which a SYN must have been
// retransmitted: just under the 1 s initial retransmission timeout (RFC
// 6298; Linux TCP_TIMEOUT_INIT), so scheduling noise on a loaded prober does
// not hide one and no single-SYN connect reaches it on a working network.
const SlowConnectAfter = 950 * time.Millisecond

// ConnAddr is a connection's two ends. Local's IP is unspecified when the
// connect failed (the kernel picks the source IP while connecting); its
// port is the one the SYN left from.
type ConnAddr struct{ Local, Remote netip.AddrPort }

// Latency is the time from the intended send to completion: what a user
// arriving on schedule would have waited (corrected for coordinated omission).
func (r *Result) Latency() time.Duration { return r.End - r.Intended }

// ServiceTime is the time from the actual send to completion.
func (r *Result) ServiceTime() time.Duration { return r.End - r.Start }

// AfterWrite is the time from the request's write to completion: the
// service time without its connection's opening. Only what happens after
// the server has the request is in it: the server's own time, and a
// proxy's retries on another backend; not a slow handshake with the proxy.
// (On h2, a wait for a free stream on a connection already open is in it:
// the client's queue, not the server's.)
func (r *Result) AfterWrite() time.Duration { return r.End - r.Start - r.Connect }

// Lag is how late the request started against its intended time.
func (r *Result) Lag() time.Duration { return r.Start - r.Intended }

// HasResponse reports whether a complete response was read (any status).
func (r *Result) HasResponse() bool { return r.Phase == PhaseNone && r.Status != 0 }
