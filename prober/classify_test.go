package prober

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

func opErr(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		phase  Phase
		reused bool
		want   Class
	}{
		{"refused", opErr("dial", syscall.ECONNREFUSED), PhaseDial, false, Refused},
		{"dial timeout", &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}, PhaseDial, false, ConnectTimeout},
		{"dial context deadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), PhaseDial, false, ConnectTimeout},
		{"host unreachable", opErr("dial", syscall.EHOSTUNREACH), PhaseDial, false, ConnectTimeout},
		{"reset on read", opErr("read", syscall.ECONNRESET), PhaseReadHeaders, true, Reset},
		{"broken pipe on write", opErr("write", syscall.EPIPE), PhaseWrite, true, Reset},
		{"eof fresh", errNoResponse, PhaseReadHeaders, false, EOF},
		{"eof reused", errNoResponse, PhaseReadHeaders, true, EOFReused},
		{"truncated body", fmt.Errorf("%w: short", errTruncated), PhaseReadBody, true, Truncated},
		{"read timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, PhaseReadHeaders, false, Timeout},
		{"retransmission timeout", opErr("read", syscall.ETIMEDOUT), PhaseReadBody, false, Timeout},
		{"dns", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "svc.invalid", IsNotFound: true}}, PhaseDial, false, DNS},
		{"tls certificate", x509.UnknownAuthorityError{}, PhaseTLS, false, TLS},
		{"tls handshake eof", io.EOF, PhaseTLS, false, TLS},
		{"too many open files", opErr("dial", syscall.EMFILE), PhaseDial, false, Local},
		{"no ephemeral port", opErr("dial", syscall.EADDRNOTAVAIL), PhaseDial, false, Local},
		{"no buffer space", opErr("write", syscall.ENOBUFS), PhaseWrite, true, Local},
		{"no epoll watch left", opErr("epoll_ctl", syscall.ENOSPC), PhaseDial, false, Local},
		{"local beats tls phase", opErr("dial", syscall.EMFILE), PhaseTLS, false, Local},
		{"unknown mid-exchange", errors.New("weird"), PhaseReadHeaders, true, Reset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.err, tt.phase, tt.reused); got != tt.want {
				t.Fatalf("classify(%v, %s, reused=%v) = %s, want %s", tt.err, tt.phase, tt.reused, got, tt.want)
			}
		})
	}
}

func TestClassNamesAreTheContract(t *testing.T) {
	want := []string{"ok", "refused", "connect_timeout", "reset", "eof", "eof_reused", "truncated",
		"timeout", "http_5xx", "proxy_5xx", "http_status",
		"goaway_unprocessed", "goaway_cut", "refused_stream", "rst_stream", "closed_no_goaway", "grpc_status",
		"dns", "tls", "local"}
	if NumClasses != len(want) {
		t.Fatalf("%d classes, want %d", NumClasses, len(want))
	}
	for i, name := range want {
		c, err := ParseClass(name)
		if err != nil || int(c) != i || c.String() != name {
			t.Errorf("class %d: ParseClass(%q) = %v, %v", i, name, c, err)
		}
	}
	if OK.Failed() || Local.Failed() || !Refused.Failed() {
		t.Error("Failed(): ok and local are not target failures, refused is")
	}
}
