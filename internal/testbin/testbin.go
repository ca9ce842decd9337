// Package testbin builds a package's binary for tests that run it as a
// user would (the CLI, the demo app), once per test binary.
package testbin

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// Build compiles pkg (a path as go build takes it, relative to the test's
// package directory) into dir/name and returns the binary's path.
func Build(dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}
