package prober

import (
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
	Fresh    bool  // sent on a connection opened for it
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
