//go:build linux

package runner

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rollprobe/rollprobe/internal/netnstest"
	"github.com/rollprobe/rollprobe/natwatch"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/render"
)

// With the event socket's buffer made tiny, a burst of refused
// connections makes the kernel drop conntrack events (ENOBUFS). The
// report must then count exactly what it lacks: the dialler knows every
// connection it made, so the failures mapped are the connections
// conntrack delivered and the rest are unmapped, none guessed; the loss is
// said in the text; and reading goes on, so a connection made
// after the burst is mapped again. In a network namespace of its own, as
// root with nft (the ruleset makes the kernel track connections, as
// kube-proxy's does); it skips otherwise.
func TestLostConntrackEventsAreCountedNotGuessed(t *testing.T) {
	nft := netnstest.Need(t)
	type result struct {
		rep       *report.Report
		ct        *report.Conntrack
		dialled   int
		afterLoss []report.Failure
		err       error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		r.err = netnstest.Run(nft, func() error {
			gone, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			refused := netip.MustParseAddrPort(gone.Addr().String())
			gone.Close()
			tb, stop := natwatch.WatchWith([]uint16{refused.Port()}, natwatch.Options{ReadBuffer: 16 << 10})
			if st := tb.Status(); !st.Watching {
				stop()
				return fmt.Errorf("not watched: %s", st.Reason)
			}
			r.rep = &report.Report{}
			// Each dial from a port of its own, so each failure names its
			// connection; bounded: at most 15 bursts of 3,000.
			next := uint16(10000)
			// Dialled from this thread: it alone is in the namespace.
			burst := func(n int, gap time.Duration) []report.Failure {
				var out []report.Failure
				for range n {
					time.Sleep(gap)
					local := netip.AddrPortFrom(refused.Addr(), next)
					next++
					start := time.Now()
					if err := dialFrom(local, refused); err == nil {
						continue
					}
					out = append(out, report.Failure{Class: report.ClassRefused, Fresh: true, Start: start, LocalAddr: local.String(), RemoteAddr: refused.String()})
				}
				return out
			}
			for round := 0; round < 15 && !tb.Status().Lost; round++ {
				r.rep.Failures = append(r.rep.Failures, burst(3000, 0)...)
			}
			// Reading goes on: connections made calmly after the loss.
			time.Sleep(200 * time.Millisecond)
			r.afterLoss = burst(10, 5*time.Millisecond) // a few events at a time: no loss
			r.rep.Failures = append(r.rep.Failures, r.afterLoss...)
			time.Sleep(200 * time.Millisecond) // their events are read
			stop()
			r.dialled = len(r.rep.Failures)
			r.ct = mapConnections(r.rep, tb, newDials(r.rep.Failures, nil, report.WallClock{}))
			return nil
		})
		res <- r
	}()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	ct := r.ct
	t.Logf("dialled %d, conntrack delivered %d, mapped %d, unmapped %d: %s", r.dialled, ct.Connections, ct.FailuresMapped, ct.FailuresUnmapped, ct.LostReason)
	if !ct.Lost {
		t.Fatalf("no event was lost with a tiny buffer over %d connections: the test cannot judge the count", r.dialled)
	}
	if ct.FailuresMapped != ct.Connections || ct.FailuresUnmapped != r.dialled-ct.Connections || ct.FailuresUnmapped == 0 {
		t.Errorf("dialled %d, conntrack delivered %d: the report maps %d and leaves %d unmapped", r.dialled, ct.Connections, ct.FailuresMapped, ct.FailuresUnmapped)
	}
	for _, f := range r.rep.Failures {
		if f.PodAddr != "" && f.PodAddr != f.RemoteAddr {
			t.Fatalf("failure from %s mapped to %s, dialled %s (no NAT here)", f.LocalAddr, f.PodAddr, f.RemoteAddr)
		}
	}
	for _, f := range r.afterLoss {
		for _, g := range r.rep.Failures {
			if g.LocalAddr == f.LocalAddr && g.PodAddr == "" {
				t.Errorf("a connection after the loss (%s) has no mapping: no listener took over", f.LocalAddr)
			}
		}
	}
	r.rep.Conntrack = ct
	var text bytes.Buffer
	if err := render.Text(&text, r.rep); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d of %d failed connections found there", ct.FailuresMapped, r.dialled); !strings.Contains(text.String(), want) || !strings.Contains(text.String(), "events lost: the kernel dropped conntrack events") {
		t.Errorf("the text does not say %q and the loss:\n%s", want, text.String())
	}
}

// dialFrom connects from local to remote with plain system calls, on the
// calling thread (a goroutine's dial could run on a thread in another
// network namespace).
func dialFrom(local, remote netip.AddrPort) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(local.Port()), Addr: local.Addr().As4()}); err != nil {
		return err
	}
	return unix.Connect(fd, &unix.SockaddrInet4{Port: int(remote.Port()), Addr: remote.Addr().As4()})
}
