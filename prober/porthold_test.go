package prober

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"
)

// bindable reports whether a new socket can bind port on every address:
// what the kernel checks before handing the port to a connection.
func bindable(t *testing.T, port uint16) bool {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(port)})
	if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatal(err)
	}
	return err == nil
}

// An unanswered connect's source port stays bound by the prober (the
// kernel refuses it to anyone else) for conntrack's 120 s, then is freed;
// a canceled dial holds nothing.
func TestUnansweredConnectHoldsItsPort(t *testing.T) {
	addr := unansweringAddr(t)
	target, err := ParseTarget("http://" + addr.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	d := newDialer(&Config{Target: target})
	defer d.holds.release()
	slot := d.newSlot()
	var ports []uint16
	for range 3 {
		if _, _, _, err := d.dial(context.Background(), time.Now().Add(50*time.Millisecond), slot); err == nil {
			t.Fatal("a dial to a full accept queue was answered")
		}
		ports = append(ports, slot.addr.Local.Port())
	}
	if held := d.holds.ports(); !slices.Equal(held, ports) {
		t.Fatalf("held %v, want the unanswered dials' ports %v", held, ports)
	}
	for _, p := range ports {
		if bindable(t, p) {
			t.Errorf("port %d is free to bind while held", p)
		}
	}

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, _, _ = d.dial(canceled, time.Now().Add(50*time.Millisecond), slot)
	if n := len(d.holds.ports()); n != 3 {
		t.Fatalf("a canceled dial changed the holds: %d held", n)
	}

	// The next hold after holdFor frees the earlier ones.
	d.holds.hold(netip.AddrPortFrom(netip.IPv4Unspecified(), ports[0]+1), time.Now().Add(holdFor))
	for _, p := range ports {
		if !bindable(t, p) {
			t.Errorf("port %d still held after %s", p, holdFor)
		}
	}
	d.holds.release()
	if len(d.holds.ports()) != 0 {
		t.Fatal("release left holds")
	}
}

// HoldPorts keeps the ports of entries an earlier process left (a
// previous run's unanswered connects) from this run's connections until
// their time, skips one whose time has passed, and gives them up on
// release.
func TestHoldPortsKeepsAnEarlierRunsPorts(t *testing.T) {
	free := func() uint16 {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{}); err != nil {
			t.Fatal(err)
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		return uint16(sa.(*syscall.SockaddrInet4).Port)
	}
	now := time.Now()
	live, expired := free(), free()
	entry := func(port uint16, until time.Time) PortUntil {
		return PortUntil{Addr: netip.AddrPortFrom(netip.MustParseAddr("10.244.1.1"), port), Until: until}
	}
	held, release := HoldPorts([]PortUntil{entry(live, now.Add(time.Minute)), entry(expired, now.Add(-time.Second))}, now)
	if held != 1 {
		t.Errorf("held %d ports, want 1 (the other's time has passed)", held)
	}
	if bindable(t, live) {
		t.Errorf("port %d is free to bind while held", live)
	}
	if !bindable(t, expired) {
		t.Errorf("port %d, whose entry had expired, was held", expired)
	}
	release()
	if !bindable(t, live) {
		t.Errorf("port %d still held after release", live)
	}
}

// A dial whose connect deadline passes before its socket exists sent no
// SYN: never connect_timeout (which the timeline may put on a pod), but
// dns for a target named by a host name (its lookup left no time) and
// local for an address (the prober started too late), and it holds no
// port.
func TestDialOutOfTimeBeforeItsSocketIsNoConnectTimeout(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   Class
	}{
		{"http://127.0.0.1:9/", Local},
		{"http://localhost:9/", DNS},
	} {
		target, err := ParseTarget(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		d := newDialer(&Config{Target: target})
		slot := d.newSlot()
		_, _, phase, err := d.dial(context.Background(), time.Now().Add(-time.Millisecond), slot)
		if err == nil {
			t.Fatalf("%s: a dial past its deadline connected", tc.target)
		}
		if got := classify(err, phase, false); got != tc.want || slot.addr.Remote.IsValid() {
			t.Errorf("%s: class %s, remote %v (%v): want %s with no address", tc.target, got, slot.addr.Remote, err, tc.want)
		}
		if held := d.holds.ports(); len(held) != 0 {
			t.Errorf("%s: ports held %v for a dial that sent nothing", tc.target, held)
		}
		d.holds.release()
	}
}
