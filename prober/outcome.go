package prober

import (
	"fmt"

	"github.com/rollprobe/rollprobe/report"
)

// Class is the outcome of one request. Every attempt ends in exactly one
// class. Its names are the report's (report.ClassNames, the contract owns
// them); the enum's order is the contract's order.
type Class uint8

const (
	OK Class = iota
	Refused
	ConnectTimeout
	Reset
	EOF
	EOFReused
	Truncated
	Timeout
	HTTP5xx
	Proxy5xx
	HTTPStatus
	GoAwayUnprocessed
	GoAwayCut
	RefusedStream
	RSTStream
	ClosedNoGoAway
	GRPCStatus
	DNS
	TLS
	Local
	numClasses
)

// NumClasses is the number of outcomes, OK included; Class values are dense in
// [0, NumClasses) so counters can be arrays indexed by Class.
const NumClasses = int(numClasses)

var classNames = func() (names [numClasses]string) {
	if len(report.ClassNames) != int(numClasses) {
		panic("prober: the Class enum and report.ClassNames differ in length")
	}
	copy(names[:], report.ClassNames)
	return names
}()

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", c)
}

// Failed reports whether the class is a failure attributable to the target.
// Local errors are the prober's own fault: they are failures of the run (they
// make it inconclusive) but never of the target.
func (c Class) Failed() bool { return c != OK && c != Local }

// FailureClasses lists every class except OK, in report order.
func FailureClasses() []Class {
	out := make([]Class, 0, NumClasses-1)
	for c := Class(1); c < numClasses; c++ {
		out = append(out, c)
	}
	return out
}

// ParseClass is the inverse of Class.String.
func ParseClass(s string) (Class, error) {
	for c, n := range classNames {
		if n == s {
			return Class(c), nil
		}
	}
	return 0, fmt.Errorf("unknown outcome class %q", s)
}

// Phase is where in the request a failure happened.
type Phase uint8

const (
	PhaseNone Phase = iota // the request completed
	PhaseDNS
	PhaseDial
	PhaseTLS
	PhaseWrite
	PhaseReadHeaders
	PhaseReadBody
	numPhases
)

var phaseNames = [numPhases]string{"", "dns", "dial", "tls", "write", "read_headers", "read_body"}

func (p Phase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// ServerClose says, for a connection the server closed without answering
// (eof, eof_reused), whether the server's kernel had acknowledged the
// request first: the wire's own record of whether the server took it. It
// tells the keep-alive race (the server closed an idle connection as the
// request went out: nothing was processed, a retry is safe) from a cut in
// flight (the server had the request and closed without answering).
type ServerClose uint8

const (
	CloseUnknown       ServerClose = iota // not an eof, or the kernel cannot say (Linux before 4.19)
	CloseBeforeRequest                    // the request was never acknowledged
	CloseAfterRequest                     // acknowledged, then closed unanswered
)

func (s ServerClose) String() string {
	switch s {
	case CloseBeforeRequest:
		return report.CloseBeforeRequest
	case CloseAfterRequest:
		return report.CloseAfterRequest
	}
	return ""
}

// TLSCause says why a handshake failed (the class tls); TLSCauseNone for
// every other outcome.
type TLSCause uint8

const (
	TLSCauseNone TLSCause = iota
	TLSCauseHandshakeTimeout
	TLSCauseCertificate
	TLSCauseAlert
	TLSCauseNotTLS
	TLSCauseConnection
	TLSCauseALPN
)

var tlsCauseNames = [...]string{"", report.TLSHandshakeTimeout, report.TLSCertificate, report.TLSAlert, report.TLSNotTLS, report.TLSConnection, report.TLSALPN}

func (c TLSCause) String() string {
	if int(c) < len(tlsCauseNames) {
		return tlsCauseNames[c]
	}
	return ""
}

// ParseTLSCause is the inverse of TLSCause.String ("" is TLSCauseNone).
func ParseTLSCause(s string) (TLSCause, error) {
	for c, n := range tlsCauseNames {
		if n == s {
			return TLSCause(c), nil
		}
	}
	return 0, fmt.Errorf("unknown tls cause %q", s)
}

// ParsePhase is the inverse of Phase.String ("" is PhaseNone).
func ParsePhase(s string) (Phase, error) {
	for p, n := range phaseNames {
		if n == s {
			return Phase(p), nil
		}
	}
	return 0, fmt.Errorf("unknown phase %q", s)
}

// ParseServerClose is the inverse of ServerClose.String ("" is
// CloseUnknown).
func ParseServerClose(s string) (ServerClose, error) {
	for _, c := range []ServerClose{CloseUnknown, CloseBeforeRequest, CloseAfterRequest} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown server close %q", s)
}

// GoAwayKind is how an HTTP/2 server's GOAWAY came on a failed stream's
// connection (GoAwayNone: none came).
type GoAwayKind uint8

const (
	GoAwayNone GoAwayKind = iota
	// GoAwaySingle: one GOAWAY naming the last stream the server took;
	// streams in flight above it were never processed (Go's
	// http.Server.Shutdown).
	GoAwaySingle
	// GoAwayGraceful: a first GOAWAY with the largest stream ID, then the
	// real one after a round trip, so no stream in flight is left out
	// (grpc-go's GracefulStop).
	GoAwayGraceful
)

func (g GoAwayKind) String() string {
	switch g {
	case GoAwaySingle:
		return report.GoAwaySingle
	case GoAwayGraceful:
		return report.GoAwayGraceful
	}
	return ""
}

// ParseGoAwayKind is the inverse of GoAwayKind.String ("" is GoAwayNone).
func ParseGoAwayKind(s string) (GoAwayKind, error) {
	for _, g := range []GoAwayKind{GoAwayNone, GoAwaySingle, GoAwayGraceful} {
		if g.String() == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("unknown goaway %q", s)
}
