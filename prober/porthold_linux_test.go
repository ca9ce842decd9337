//go:build linux

package prober

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/netnstest"
)

// A connect whose SYN found no neighbour (a vanished pod's address: ARP
// unanswered) fails with EHOSTUNREACH before the connect timeout, and is
// classed connect_timeout like one: conntrack confirmed the SYN's entry
// before the neighbour lookup failed, so the entry waits in SYN_SENT and
// the port must be held as a timed-out one's is. Before this, only a
// timeout held its port: a CI run's wire test had a later connection from
// such a port follow the old entry to a pod gone 5.6 s before.
//
// In a network namespace of its own (root, nft and ip: skipped without),
// on a veth whose peer answers no ARP, with the neighbour's probes cut to
// 50 ms.
func TestUnreachableConnectHoldsItsPort(t *testing.T) {
	nft := netnstest.Need(t)
	netnstest.In(t, nft, func(*struct{}) error {
		for _, args := range [][]string{
			{"link", "add", "rpho0", "type", "veth", "peer", "name", "rpho1"},
			{"addr", "add", "10.99.0.1/24", "dev", "rpho0"},
			{"link", "set", "rpho0", "up"},
			{"link", "set", "rpho1", "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v: %s", args, err, out)
			}
		}
		for k, v := range map[string]string{"mcast_solicit": "1", "ucast_solicit": "1", "app_solicit": "0", "retrans_time_ms": "50"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/neigh/rpho0/"+k, []byte(v), 0o644); err != nil {
				return err
			}
		}
		target, err := ParseTarget("http://10.99.0.5:80/")
		if err != nil {
			return err
		}
		d := newDialer(&Config{Target: target})
		defer d.holds.release()
		slot := d.newSlot()
		_, _, phase, err := d.dial(context.Background(), time.Now().Add(2*time.Second), slot)
		if !errors.Is(err, syscall.EHOSTUNREACH) {
			return fmt.Errorf("dial: %v, want EHOSTUNREACH (the neighbour unanswered)", err)
		}
		if c := classify(err, phase, false); c != ConnectTimeout {
			return fmt.Errorf("classed %s, want connect_timeout", c)
		}
		port := slot.addr.Local.Port()
		if port == 0 {
			return errors.New("the failed dial's source port is not known")
		}
		held := d.holds.ports()
		if len(held) != 1 || held[0] != port {
			return fmt.Errorf("held %v, want the unreachable dial's port %d", held, port)
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(port)}); !errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("binding held port %d: %v, want EADDRINUSE", port, err)
		}
		return nil
	})
}
