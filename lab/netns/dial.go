//go:build linux

package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

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
		onOwnThread(func() {
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

// onOwnThread runs f in a new goroutine locked to an OS thread that is not
// the process's main thread, and lets that thread end when f returns, so f
// may change the thread's state (its namespace) without it leaking. The
// main thread must never move: Go parks it rather than ending it, and its
// namespace is the one /proc/PID/ns/net shows for the whole process (lab
// down would take this process for a lab process).
//
// It does not depend on scheduling luck: a goroutine that lands on the main
// thread keeps it locked while it starts the next one and waits for it, so
// the runtime must run that one on another thread.
func onOwnThread(f func()) {
	go runLocked(f, make(chan struct{}))
}

// runLocked locks the calling goroutine's thread; on the main thread it
// hands f to a goroutine that cannot run there, on any other it closes
// started and runs f, never unlocking.
func runLocked(f func(), started chan struct{}) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		handedOff := make(chan struct{})
		go runLocked(f, handedOff)
		<-handedOff // while this goroutine holds the main thread
		close(started)
		runtime.UnlockOSThread()
		return
	}
	close(started)
	f() // never unlocked: the thread ends with this goroutine
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
