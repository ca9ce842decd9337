//go:build linux

// Package netnstest gives a test a network namespace of its own whose
// ruleset makes the kernel track connections, as kube-proxy's does: where
// conntrack can be read without touching the host's.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/internal/ownthread"
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

// Run runs f on an OS thread of its own (never the process's main thread:
// see ownthread) moved into a new network namespace with loopback up and a
// ruleset that tracks connections, and returns f's error. The thread ends
// when f returns, and the namespace with it (nothing else is in it). Only
// that thread is in the namespace: f must not dial from other goroutines,
// whose threads are in the host's.
func Run(nft string, f func() error) error {
	errc := make(chan error, 1)
	ownthread.Go(func() { errc <- inNewNamespace(nft, f) })
	return <-errc
}

// inNewNamespace moves the calling thread, which must be locked and
// discarded afterwards, into a new namespace made as Run says, and runs f.
func inNewNamespace(nft string, f func() error) error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("unshare a network namespace: %w", err)
	}
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader("table inet netnstest {\n chain out {\n type filter hook output priority 0; ct state new accept\n }\n}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %w: %s", err, out)
	}
	return f()
}

// In runs f in a namespace of its own (Run) and returns what f filled in;
// f's error fails t. The test's own goroutine stays in the host's
// namespace, so it may check what f left after the namespace is gone.
func In[R any](t testing.TB, nft string, f func(r *R) error) *R {
	t.Helper()
	var r R
	if err := Run(nft, func() error { return f(&r) }); err != nil {
		t.Fatal(err)
	}
	return &r
}
