//go:build linux

package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/rollprobe/rollprobe/internal/ownthread"
	"golang.org/x/sys/unix"
)

// DialContextIn returns a dial function whose sockets are created inside
// network namespace ns, so that code running outside the lab (lab up, tests)
// can reach the apiserver and ClusterIPs, which exist only in there.
//
// A socket belongs to the namespace of the thread that created it, so each
// dial runs on a fresh OS thread that joins ns and is discarded afterwards
// (a goroutine that exits while locked ends its thread): no other goroutine
// ever runs in the lab's namespace by accident.
func DialContextIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			conn net.Conn
			err  error
		}
		done := make(chan result, 1)
		ownthread.Go(func() {
			if err := enter(ns); err != nil {
				done <- result{nil, err}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			done <- result{c, err}
		})
		r := <-done
		return r.conn, r.err
	}
}

// enter moves the calling thread into the named namespace.
func enter(ns string) error {
	f, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		return fmt.Errorf("network namespace %s: %w (is the lab up?)", ns, err)
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	return nil
}
