package prober

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// serverCloseOf reads, from the kernel's TCP counters of a connection the
// server closed before any response byte, whether every byte the prober
// sent on it was acknowledged. Acknowledged: the server's kernel had the
// request when the server closed (its FIN carries the acknowledgement).
// Not: the request reached a socket already closed (answered by a reset,
// which acknowledges nothing) or never arrived. One getsockopt, on the
// failure path only. The counters are the connection's whole life:
// earlier requests on it were acknowledged with their responses, so only
// the last request can be missing.
func serverCloseOf(raw net.Conn) ServerClose {
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return CloseUnknown
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return CloseUnknown
	}
	result := CloseUnknown
	if err := rc.Control(func(fd uintptr) { result = serverCloseOfFD(int(fd)) }); err != nil {
		return CloseUnknown
	}
	return result
}

// serverCloseOfFD is serverCloseOf on a socket descriptor.
func serverCloseOfFD(fd int) ServerClose {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return CloseUnknown
	}
	if info.Bytes_sent == 0 { // a kernel before 4.19 leaves the field zero
		return CloseUnknown
	}
	// bytes_acked may count the SYN as one byte; sent minus retransmitted
	// is every data byte once.
	if info.Bytes_acked >= info.Bytes_sent-info.Bytes_retrans {
		return CloseAfterRequest
	}
	return CloseBeforeRequest
}
