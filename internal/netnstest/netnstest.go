//go:build linux

// Package netnstest gives a test a network namespace of its own whose
// ruleset makes the kernel track connections, as kube-proxy's does: where
// conntrack can be read without touching the host's.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Need skips t unless it can make such a namespace (root, Debian's
// nftables); it returns nft's path.
func Need(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace, CAP_NET_ADMIN)")
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("needs nft (Debian's nftables) to give the namespace a ruleset that uses conntrack")
	}
	return nft
}

// Run locks the calling goroutine to its thread, moves the thread into a
// new network namespace with loopback up and a ruleset that tracks
// connections, and runs f there. The thread is never unlocked: it ends
// with the goroutine, and the namespace with it (nothing else is in it).
// Only this thread is in the namespace: f must not dial from other
// goroutines, whose threads are in the host's.
func Run(nft string, f func() error) error {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return err
	}
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader("table inet netnstest {\n chain out {\n type filter hook output priority 0; ct state new accept\n }\n}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	return f()
}

// In runs f in a namespace of its own (Run) on a goroutine of its own,
// whose thread the namespace takes and keeps, and returns what f filled
// in; f's error fails t. The test's own goroutine stays in the host's
// namespace, so it may check what f left after the namespace is gone.
func In[R any](t testing.TB, nft string, f func(r *R) error) *R {
	t.Helper()
	type outcome struct {
		r   R
		err error
	}
	done := make(chan *outcome, 1)
	go func() {
		o := &outcome{}
		o.err = Run(nft, func() error { return f(&o.r) })
		done <- o
	}()
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	return &o.r
}
