//go:build linux

package natwatch

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Conntrack's netlink attributes (linux/netfilter/nfnetlink_conntrack.h),
// the few this package reads.
const (
	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaTupleIP    = 1
	ctaTupleProto = 2
	ctaIPv4Src    = 1
	ctaIPv4Dst    = 2
	ctaIPv6Src    = 3
	ctaIPv6Dst    = 4
	ctaProtoNum   = 1
	ctaProtoSrc   = 2
	ctaProtoDst   = 3

	ctaStatus          = 3
	ctaProtoinfo       = 4
	ctaTimeout         = 7
	ctaProtoinfoTCP    = 1
	ctaProtoinfoTCPSt  = 1
	tcpConntrackSynSnt = 1      // TCP_CONNTRACK_SYN_SENT
	ipsSeenReply       = 1 << 1 // IPS_SEEN_REPLY

	nfnlSubsysCTNetlink = 1
	ipctnlMsgCTNew      = 0
	ipctnlMsgCTGet      = 1
	nfgenmsgLen         = 4
	nlaTypeMask         = 0x3fff // without NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

// tuple is one direction of a connection as conntrack records it.
type tuple struct {
	src, dst netip.AddrPort
	proto    uint8
}

// parseNew reads a conntrack NEW event's message (its type and its data
// after the netlink header): the original direction and the reply's. It
// reads only what it needs, without allocating: ti-mo/conntrack's full
// decoding was a third of the watch's cost (its own test checks this one
// against it on the kernel's messages).
func parseNew(typ uint16, data []byte) (orig, reply tuple, ok bool) {
	if typ>>8 != nfnlSubsysCTNetlink || typ&0xff != ipctnlMsgCTNew || len(data) < nfgenmsgLen {
		return tuple{}, tuple{}, false
	}
	var haveOrig, haveReply bool
	eachAttr(data[nfgenmsgLen:], func(t uint16, v []byte) {
		switch t {
		case ctaTupleOrig:
			orig, haveOrig = parseTuple(v)
		case ctaTupleReply:
			reply, haveReply = parseTuple(v)
		}
	})
	return orig, reply, haveOrig && haveReply
}

func parseTuple(b []byte) (tuple, bool) {
	var tp tuple
	var src, dst netip.Addr
	var sport, dport uint16
	var haveProto bool
	eachAttr(b, func(t uint16, v []byte) {
		switch t {
		case ctaTupleIP:
			eachAttr(v, func(t uint16, v []byte) {
				switch {
				case (t == ctaIPv4Src || t == ctaIPv4Dst) && len(v) == 4:
					a := netip.AddrFrom4([4]byte(v))
					if t == ctaIPv4Src {
						src = a
					} else {
						dst = a
					}
				case (t == ctaIPv6Src || t == ctaIPv6Dst) && len(v) == 16:
					a := netip.AddrFrom16([16]byte(v)).Unmap()
					if t == ctaIPv6Src {
						src = a
					} else {
						dst = a
					}
				}
			})
		case ctaTupleProto:
			eachAttr(v, func(t uint16, v []byte) {
				switch {
				case t == ctaProtoNum && len(v) == 1:
					tp.proto, haveProto = v[0], true
				case t == ctaProtoSrc && len(v) == 2:
					sport = binary.BigEndian.Uint16(v)
				case t == ctaProtoDst && len(v) == 2:
					dport = binary.BigEndian.Uint16(v)
				}
			})
		}
	})
	if !src.IsValid() || !dst.IsValid() || !haveProto {
		return tuple{}, false
	}
	tp.src, tp.dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	return tp, true
}

// eachAttr calls f for each well-formed netlink attribute in b (type
// without its flags, value), stopping at the first malformed one.
func eachAttr(b []byte, f func(t uint16, v []byte)) {
	for len(b) >= unix.SizeofNlAttr {
		l := int(binary.NativeEndian.Uint16(b))
		t := binary.NativeEndian.Uint16(b[2:])
		if l < unix.SizeofNlAttr || l > len(b) {
			return
		}
		f(t&nlaTypeMask, b[unix.SizeofNlAttr:l])
		next := (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if next > len(b) {
			return
		}
		b = b[next:]
	}
}

// parseEntry reads one entry of a conntrack table dump (a CT_NEW
// message): its two directions, TCP state (0 when not TCP), whether a
// reply was seen, and the seconds left before it expires.
func parseEntry(typ uint16, data []byte) (orig, reply tuple, state uint8, replied bool, timeout uint32, ok bool) {
	orig, reply, ok = parseNew(typ, data)
	if !ok {
		return
	}
	eachAttr(data[nfgenmsgLen:], func(t uint16, v []byte) {
		switch {
		case t == ctaStatus && len(v) == 4:
			replied = binary.BigEndian.Uint32(v)&ipsSeenReply != 0
		case t == ctaTimeout && len(v) == 4:
			timeout = binary.BigEndian.Uint32(v)
		case t == ctaProtoinfo:
			eachAttr(v, func(t uint16, v []byte) {
				if t == ctaProtoinfoTCP {
					eachAttr(v, func(t uint16, v []byte) {
						if t == ctaProtoinfoTCPSt && len(v) == 1 {
							state = v[0]
						}
					})
				}
			})
		}
	})
	return
}
