//go:build linux

package natwatch

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/rollprobe/rollprobe/internal/netnstest"
)

// parseNew reads the kernel's own NEW events as ti-mo/conntrack's full
// decoder does (the referee: nobody here wrote it), for IPv4 and IPv6,
// answered and refused, TCP and UDP.
func TestParseNewAgreesWithTiMo(t *testing.T) {
	nft := netnstest.Need(t)
	type msg struct {
		typ  uint16
		data []byte
	}
	res := make(chan []msg, 1)
	errc := make(chan error, 1)
	go func() {
		var got []msg
		errc <- netnstest.Run(nft, func() error {
			fd, err := listen(DefaultReadBuffer)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			for _, network := range []string{"tcp4", "tcp6"} {
				host := map[string]string{"tcp4": "127.0.0.1", "tcp6": "[::1]"}[network]
				ln, err := net.Listen(network, host+":0")
				if err != nil {
					return err
				}
				c, err := net.DialTimeout(network, ln.Addr().String(), time.Second)
				if err != nil {
					return err
				}
				c.Close()
				ln.Close()
				_, _ = net.DialTimeout(network, ln.Addr().String(), time.Second) // refused now
			}
			if c, err := net.Dial("udp4", "127.0.0.1:9"); err == nil {
				_, _ = c.Write([]byte("x"))
				c.Close()
			}
			time.Sleep(50 * time.Millisecond)
			buf := make([]byte, 64<<10)
			for {
				n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
				if errors.Is(err, unix.EAGAIN) {
					break
				}
				if err != nil {
					return err
				}
				msgs, err := syscall.ParseNetlinkMessage(buf[:n])
				if err != nil {
					return err
				}
				for _, m := range msgs {
					got = append(got, msg{m.Header.Type, append([]byte(nil), m.Data...)})
				}
			}
			return nil
		})
		res <- got
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	msgs := <-res
	if len(msgs) < 5 {
		t.Fatalf("%d events read, want at least 5 (4 TCP, 1 UDP)", len(msgs))
	}
	families := map[bool]int{}
	for i, m := range msgs {
		var ev conntrack.Event
		if err := ev.Unmarshal(netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(m.typ)}, Data: m.data}); err != nil {
			t.Fatalf("message %d: ti-mo cannot decode it: %v", i, err)
		}
		o, r, ok := parseNew(m.typ, m.data)
		if !ok {
			t.Fatalf("message %d (%s): not parsed", i, flowString(ev))
		}
		f := ev.Flow
		want := func(tp conntrack.Tuple) tuple {
			return tuple{src: netip.AddrPortFrom(tp.IP.SourceAddress.Unmap(), tp.Proto.SourcePort),
				dst: netip.AddrPortFrom(tp.IP.DestinationAddress.Unmap(), tp.Proto.DestinationPort), proto: tp.Proto.Protocol}
		}
		if o != want(f.TupleOrig) || r != want(f.TupleReply) {
			t.Errorf("message %d: parsed %+v / %+v, ti-mo %s", i, o, r, flowString(ev))
		}
		families[o.src.Addr().Is4()]++
	}
	if families[true] == 0 || families[false] == 0 {
		t.Errorf("events by IPv4: %v; want both families", families)
	}
}

func flowString(ev conntrack.Event) string {
	if ev.Flow == nil {
		return fmt.Sprintf("%v (no flow)", ev.Type)
	}
	return fmt.Sprintf("%v %v -> %v", ev.Type, ev.Flow.TupleOrig, ev.Flow.TupleReply)
}

// Whatever the bytes, parseNew does not panic, and says ok only with both
// directions' addresses.
func FuzzParseNew(f *testing.F) {
	f.Add(uint16(nfnlSubsysCTNetlink<<8), []byte{2, 0, 0, 0, 8, 0, 1, 0x80, 4, 0, 1, 0})
	f.Add(uint16(0), []byte{})
	f.Fuzz(func(t *testing.T, typ uint16, data []byte) {
		o, r, ok := parseNew(typ, data)
		if ok && (!o.src.IsValid() || !o.dst.IsValid() || !r.src.IsValid() || !r.dst.IsValid()) {
			t.Errorf("ok with an invalid address: %+v %+v", o, r)
		}
	})
}
