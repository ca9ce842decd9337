//go:build linux

package netnstest

import (
	"fmt"
	"os"
	"testing"
)

// Run's namespaces never become the process's: after many runs, each in a
// namespace of its own, /proc/self/ns/net (the main thread's, which
// /proc/net reads) is still the one the process started in. A main thread
// left in one made /proc/net/netstat read that namespace's counters for
// the rest of the process.
func TestRunLeavesTheProcessNamespaceAlone(t *testing.T) {
	nft := Need(t)
	host := netnsOf(t, "/proc/self/ns/net")
	for i := range 50 {
		err := Run(nft, func() error {
			in, err := os.Readlink("/proc/thread-self/ns/net")
			if err != nil {
				return err
			}
			if in == host {
				return fmt.Errorf("run %d: f ran in the host's namespace %s", i, in)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if now := netnsOf(t, "/proc/self/ns/net"); now != host {
			t.Fatalf("after run %d the process's namespace is %s, not %s", i, now, host)
		}
	}
}

func netnsOf(t *testing.T, link string) string {
	t.Helper()
	ns, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
