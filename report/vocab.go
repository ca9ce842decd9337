package report

// The failure classes, in the order reports and summaries list them. The
// names are part of the contract (totals.by_class has every one as a key);
// the prober's Class enum takes its names from here.
const (
	ClassOK             = "ok"
	ClassRefused        = "refused"
	ClassConnectTimeout = "connect_timeout"
	ClassReset          = "reset"
	ClassEOF            = "eof"
	ClassEOFReused      = "eof_reused"
	ClassTruncated      = "truncated"
	ClassTimeout        = "timeout"
	ClassHTTP5xx        = "http_5xx"
	// ClassProxy5xx is a 5xx that a proxy in front of the app
	// generated (an ingress, a gateway, a sidecar): the response lacks the
	// backend header that the app puts on every response of its own.
	ClassProxy5xx   = "proxy_5xx"
	ClassHTTPStatus = "http_status"
	// HTTP/2: how a stream ends when its connection or the server ends it
	// instead of answering. goaway_unprocessed and refused_stream were
	// never processed by the server (safe to retry); goaway_cut was, or may
	// have been (outcome unknown).
	ClassGoAwayUnprocessed = "goaway_unprocessed" // above the last stream ID of the server's GOAWAY
	ClassGoAwayCut         = "goaway_cut"         // at or below it, and the connection closed before the answer
	ClassRefusedStream     = "refused_stream"     // RST_STREAM REFUSED_STREAM
	ClassRSTStream         = "rst_stream"         // RST_STREAM with another code (h2_code names it)
	ClassClosedNoGoAway    = "closed_no_goaway"   // the connection closed (FIN) with the stream open and no GOAWAY
	// ClassGRPCStatus is a gRPC call answered with a status other than OK
	// (grpc_status names it: UNAVAILABLE, DEADLINE_EXCEEDED, ...).
	ClassGRPCStatus = "grpc_status"
	ClassDNS        = "dns"
	ClassTLS        = "tls"
	ClassLocal      = "local"
)

// Values of an HTTP/2 failure's goaway: how the server's GOAWAY came.
const (
	GoAwaySingle   = "single"   // one GOAWAY naming the last stream (Go's http.Server.Shutdown)
	GoAwayGraceful = "graceful" // first 2^31-1, then the last stream after a round trip (grpc-go's GracefulStop)
)

// Values of a failure's stream_end: how a call of the grpc-go client that
// was sent and not answered (grpc_status in read_headers) ended.
const (
	// StreamEndConnLost: its connection ended under it (the server closed
	// or reset it, or grpc-go closed it on an error): cut with it.
	StreamEndConnLost = "conn_lost"
	// StreamEndReset: the server reset its stream (RST_STREAM, its code
	// in h2_code), the connection up.
	StreamEndReset = "reset"
	// StreamEndUnprocessed: above the last stream of the server's GOAWAY,
	// never processed, and grpc-go did not resend it (it resends such a
	// call once, transparently).
	StreamEndUnprocessed = "unprocessed"
)

// Values of config.grpc_client and paths[].grpc_client: who made a gRPC
// run's calls.
const (
	GRPCClientRaw = "raw"     // rollprobe's own streams: every attempt is a request of its own
	GRPCClientGo  = "grpc-go" // grpc-go itself: what it resent on its own is hidden_retries
	// GRPCClientBoth, on the run's config only: its paths were probed by
	// both side by side (--grpc-client both); paths[] says which is which.
	GRPCClientBoth = "both"
)

// Values of a failure's server_close: for eof and eof_reused, whether the
// server's kernel had acknowledged the request before the server closed.
const (
	CloseBeforeRequest = "before_request" // never acknowledged: the keep-alive race, nothing processed
	CloseAfterRequest  = "after_request"  // acknowledged, then closed unanswered: cut in flight
)

// Values of a tls failure's tls_cause: why the handshake failed.
const (
	TLSHandshakeTimeout = "handshake_timeout" // no handshake within the request's time
	TLSCertificate      = "certificate"       // the certificate did not verify (unknown authority, wrong name, expired)
	TLSAlert            = "alert"             // the server refused the handshake with an alert (no shared protocol or cipher, no certificate for the name)
	TLSNotTLS           = "not_tls"           // what came back was not TLS (an https URL to a plain-HTTP port)
	TLSConnection       = "connection"        // the connection was reset or closed during the handshake
	TLSALPN             = "alpn"              // the handshake completed but the server did not choose the protocol asked for (h2)
)

// ClassNames lists every outcome, ok first, local last.
var ClassNames = []string{ClassOK, ClassRefused, ClassConnectTimeout, ClassReset, ClassEOF, ClassEOFReused,
	ClassTruncated, ClassTimeout, ClassHTTP5xx, ClassProxy5xx, ClassHTTPStatus,
	ClassGoAwayUnprocessed, ClassGoAwayCut, ClassRefusedStream, ClassRSTStream, ClassClosedNoGoAway, ClassGRPCStatus,
	ClassDNS, ClassTLS, ClassLocal}

// FailureClassNames lists the classes that are failures (not ok), in
// report order. local is among them: it is counted apart from the target's
// failures, but it is listed with them.
func FailureClassNames() []string { return ClassNames[1:] }

// Severity ranks a finding.
type Severity string

const (
	SeverityInfo    Severity = "info"
	SeverityWarning Severity = "warning"
	SeverityError   Severity = "error"
)

var severityRank = map[Severity]int{SeverityInfo: 0, SeverityWarning: 1, SeverityError: 2}

// ParseSeverity accepts info, warning or error.
func ParseSeverity(s string) (Severity, bool) {
	_, ok := severityRank[Severity(s)]
	return Severity(s), ok
}

// AtLeast reports whether s is at or above min.
func (s Severity) AtLeast(min Severity) bool {
	m, ok := severityRank[min]
	return ok && severityRank[s] >= m
}

// Source says where a finding comes from.
type Source string

const (
	// SourceTraffic: what the run's traffic showed (the JSON omits it).
	SourceTraffic Source = ""
	// SourceDoctor: a static check of the configuration.
	SourceDoctor Source = "doctor"
)

// RolloutStatus is the state of the rollout section.
type RolloutStatus string

const (
	StatusNotStarted  RolloutStatus = "not_started"
	StatusInProgress  RolloutStatus = "in_progress"
	StatusComplete    RolloutStatus = "complete"
	StatusFailed      RolloutStatus = "failed"
	StatusTimedOut    RolloutStatus = "timed_out"
	StatusInterrupted RolloutStatus = "interrupted"
	// StatusNoChange: the trigger (a deploy command, --exec) ended without
	// changing the Deployment (its generation unchanged): no rollout
	// happened, and the verdict is the traffic's alone.
	StatusNoChange RolloutStatus = "no_change"
)

// Model is the load model of a probe.
type Model string

const (
	ModelOpen   Model = "open"   // paced: a fixed rate of intended send times
	ModelClosed Model = "closed" // workers back to back
)

// Failed reports whether the status ends the run as a failed rollout.
func (s RolloutStatus) Failed() bool { return s == StatusFailed || s == StatusTimedOut }

// DocsURL is where rollprobe's documentation (docs/ in its repository) is
// read online.
const DocsURL = "https://github.com/rollprobe/rollprobe/blob/main/docs/"

// FindingDoc is the page that explains finding id: what happened, the
// evidence, the fix (docs/findings/ID.md; a test keeps one per ID).
func FindingDoc(id string) string { return DocsURL + "findings/" + id + ".md" }
