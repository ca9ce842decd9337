//go:build linux

package prober

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readDialICMP reads what the error queue of fd, a socket whose connect
// just failed, holds: the ICMP error that ended the connect, or none.
// v6 says fd is an IPv6 socket, which queues ICMPv6 errors only with
// IPV6_RECVERR set (armed says it was: see armDialICMP); nil when the
// queue cannot say. One recvmsg, on the failure path only; the socket's
// pending error (SO_ERROR) is separate and may be read before or after.
func readDialICMP(fd int, v6, armed bool) *DialICMP {
	if v6 && !armed {
		return nil
	}
	var data [64]byte // the quoted packet, unused
	var oob [128]byte
	_, oobn, _, _, err := unix.Recvmsg(fd, data[:], oob[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
	if err == unix.EAGAIN {
		return &DialICMP{V6: v6} // the queue is empty: no ICMP error came
	}
	if err != nil {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		if d, ok := parseDialICMP(m); ok {
			return &d
		}
	}
	return nil
}

// parseDialICMP reads one IP_RECVERR or IPV6_RECVERR control message: a
// sock_extended_err of ICMP origin followed by the offender's address.
func parseDialICMP(m unix.SocketControlMessage) (DialICMP, bool) {
	const eeSize = int(unsafe.Sizeof(unix.SockExtendedErr{}))
	v4 := m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR
	v6 := m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR
	if !v4 && !v6 || len(m.Data) < eeSize {
		return DialICMP{}, false
	}
	ee := (*unix.SockExtendedErr)(unsafe.Pointer(&m.Data[0]))
	if ee.Origin != unix.SO_EE_ORIGIN_ICMP && ee.Origin != unix.SO_EE_ORIGIN_ICMP6 {
		return DialICMP{}, false
	}
	d := DialICMP{Type: ee.Type, Code: ee.Code, V6: ee.Origin == unix.SO_EE_ORIGIN_ICMP6}
	off := m.Data[eeSize:]
	switch {
	case len(off) >= unix.SizeofSockaddrInet4 && (*unix.RawSockaddr)(unsafe.Pointer(&off[0])).Family == unix.AF_INET:
		d.From = netip.AddrFrom4((*unix.RawSockaddrInet4)(unsafe.Pointer(&off[0])).Addr)
	case len(off) >= unix.SizeofSockaddrInet6 && (*unix.RawSockaddr)(unsafe.Pointer(&off[0])).Family == unix.AF_INET6:
		d.From = netip.AddrFrom16((*unix.RawSockaddrInet6)(unsafe.Pointer(&off[0])).Addr).Unmap()
	default:
		return DialICMP{}, false // an ICMP error with no sender: nothing to tell apart
	}
	return d, true
}

// armDialICMP asks an IPv6 socket to queue the ICMPv6 error that may end
// its connect (IPv4 sockets queue it unasked). disarmDialICMP undoes it
// once connected: with IPV6_RECVERR set, Linux turns an ICMPv6 error on
// an established connection, which it otherwise only remembers for a
// retransmission timeout, into an error of the next read or write, and a
// real client's connection would not fail so.
func armDialICMP(fd int) bool {
	return syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, unix.IPV6_RECVERR, 1) == nil
}

func disarmDialICMP(fd int) {
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, unix.IPV6_RECVERR, 0)
}

// dupForICMP duplicates fd (close-on-exec) for keepForICMP; -1 when it
// cannot.
func dupForICMP(fd int) int {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return dup
}

func closeICMPFD(fd int) {
	if fd >= 0 {
		_ = syscall.Close(fd)
	}
}
