package prober

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"syscall"
)

// classify maps a failed attempt to its outcome class. phase is where the
// error surfaced; reused says the connection had carried a request before.
//
// The order matters: resource exhaustion on the prober's side is checked
// first so that it is never blamed on the target, and a clean close before
// any response byte is told apart by whether the connection was reused (the
// keep-alive race) or fresh.
func classify(err error, phase Phase, reused bool) Class {
	switch {
	case isLocalResourceError(err):
		return Local
	case phase == PhaseTLS:
		// Whatever broke the handshake (a bad certificate, garbage from a
		// plain-HTTP port, a reset or a stall), no request was sent.
		return TLS
	case errors.Is(err, errNoResponse):
		if reused {
			return EOFReused
		}
		return EOF
	case isDNSError(err):
		return DNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return Reset
	case isTimeout(err):
		if phase == PhaseDial {
			return ConnectTimeout
		}
		return Timeout
	case phase == PhaseDial:
		// EHOSTUNREACH, ENETUNREACH: nobody answered the connection attempt
		// (typically ARP for a vanished pod IP failed). The error text is kept.
		return ConnectTimeout
	case isTLSError(err):
		return TLS
	case errors.Is(err, errTruncated):
		return Truncated
	}
	// Anything else broke the exchange after the connection was up: the
	// connection went away under the request.
	return Reset
}

// statusClass is the outcome of a complete response with status: ok when
// expected, else http_5xx or http_status, or proxy_5xx for a 5xx that named
// no backend although the run expects every response of the app to
// (BackendHeader): a proxy between the prober and the app answered for a
// backend it could not reach. Any 5xx, not only 502/503/504: Traefik
// answers 500 when its upstream error is neither an EOF nor a network
// error (ComputeStatusCode in its pkg/proxy/httputil), as Go's Transport
// returns for a fresh upstream connection the dying pod closed before
// answering ("http: server closed idle connection").
func statusClass(cfg *Config, status int, backend []byte) Class {
	is5xx := status >= 500 && status <= 599
	switch {
	case cfg.ExpectStatus.Contains(status):
		return OK
	case is5xx && cfg.BackendHeader != "" && backend == nil:
		return Proxy5xx
	case is5xx:
		return HTTP5xx
	}
	return HTTPStatus
}

// isLocalResourceError reports errors caused by the prober's own host running
// out of something: descriptors, ephemeral ports, buffers, memory, epoll
// watches (ENOSPC from epoll_ctl: fs.epoll.max_user_watches), or time to
// start a connection (errDialStartedLate).
func isLocalResourceError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ENOSPC) ||
		errors.Is(err, errDialStartedLate)
}

func isDNSError(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr)
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tlsCause says why a handshake failed with err. The order matters: a
// deadline is a timeout whatever else the error wraps, and a certificate
// that did not verify makes Go's client send an alert of its own, which is
// not the server's refusal.
func tlsCause(err error) TLSCause {
	var (
		recordErr  tls.RecordHeaderError
		alertErr   tls.AlertError
		certErr    *tls.CertificateVerificationError
		unknownErr x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, errNoH2):
		return TLSCauseALPN
	case isTimeout(err):
		return TLSCauseHandshakeTimeout
	case errors.As(err, &certErr), errors.As(err, &unknownErr), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return TLSCauseCertificate
	case errors.As(err, &alertErr), isRemoteAlert(err):
		return TLSCauseAlert
	case errors.As(err, &recordErr):
		return TLSCauseNotTLS
	}
	return TLSCauseConnection
}

// isRemoteAlert: the peer sent a TLS alert. crypto/tls reports it as a
// *net.OpError whose Op is "remote error" around its unexported alert type
// (tls.AlertError is what it gives QUIC).
func isRemoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// isTLSError: err is TLS's own (a certificate that did not verify, an
// alert from the peer, bytes that are not TLS), wherever it surfaced.
func isTLSError(err error) bool {
	switch tlsCause(err) {
	case TLSCauseCertificate, TLSCauseAlert, TLSCauseNotTLS, TLSCauseALPN:
		return true
	}
	return false
}
