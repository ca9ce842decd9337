// Package testenv decides what a test does when the machine lacks what it
// needs (root, the lab's binaries, Chromium, nginx, a release snapshot): skip it, or fail it
// where a skip would hide a regression (CI sets the REQUIRE variables).
// Every skip is also written to the file ROLLPROBE_LAB_SKIPPED names, so
// make test can say it loudly at the end: go test prints nothing of a
// passing package.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// SkipOrFail skips t, or fails it when the environment variable require is
// "1" (ROLLPROBE_REQUIRE_LAB, ROLLPROBE_REQUIRE_BROWSER,
// ROLLPROBE_REQUIRE_NGINX, ROLLPROBE_REQUIRE_RELEASE, ROLLPROBE_REQUIRE_TOOLS), saying why.
func SkipOrFail(t testing.TB, require, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if os.Getenv(require) == "1" {
		t.Fatalf("%s (%s=1: this must run here)", why, require)
	}
	if path := os.Getenv("ROLLPROBE_LAB_SKIPPED"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintf(f, "%s: %s\n", t.Name(), why)
			_ = f.Close()
		}
	}
	t.Skip(why)
}

// Timed skips t under -short (make test-short: unit tests only): t sends
// real traffic for a while, or waits on a clock, and belongs to make test.
func Timed(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("short: unit tests only (this one sends traffic for a while)")
	}
}
