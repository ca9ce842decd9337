// Package testbin builds a package's binary for tests that run it as a
// user would (the CLI, the demo app), once per test binary.
package testbin

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// short: Main built no binary (-short).
var short bool

// Required skips t under -short, where Main built no binary: every test
// that runs the binary calls it first.
func Required(t testing.TB) {
	t.Helper()
	if short {
		t.Skip("short: unit tests only (this one runs the binary)")
	}
}

// Build compiles pkg (a path as go build takes it, relative to the test's
// package directory) into dir/name and returns the binary's path. The
// binary is static (CGO_ENABLED=0, -trimpath), as make build makes it: the
// lab runs it as a container image, which has no C library, and with the
// same flags its compiled packages are the ones make build (or, in CI, the
// release's linux/amd64 build) left in the build cache.
func Build(dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// Main is the TestMain of a package whose tests run a real binary: it
// builds pkg as name into a temporary directory, points *binary at it,
// runs the tests, removes the directory and exits with the tests' code.
// Under -short (unit tests only) it builds nothing: the tests that run the
// binary skip (Required), the package's unit tests still run.
func Main(m *testing.M, name, pkg string, binary *string) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		short = true
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "rollprobe-"+name+"-test")
	if err != nil {
		panic(err)
	}
	if *binary, err = Build(dir, name, pkg); err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
