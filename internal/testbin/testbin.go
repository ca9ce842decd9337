// Package testbin builds a package's binary for tests that run it as a
// user would (the CLI, the demo app), once per test binary.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build compiles pkg (a path as go build takes it, relative to the test's
// package directory) into dir/name and returns the binary's path. The
// binary is static (CGO_ENABLED=0), as make build makes it: the lab runs it
// as a container image, which has no C library.
func Build(dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}
