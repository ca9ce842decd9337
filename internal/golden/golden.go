// Package golden compares test output with files under testdata/; run the
// tests with -update to rewrite them after a deliberate change.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Check compares got with testdata/name (rewriting it with -update).
func Check(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from its golden file (rerun with -update after checking):\n%s", name, got)
	}
}

// Updating says whether the tests run with -update: other files a test
// keeps equal to the code (docs between markers) are rewritten too.
func Updating() bool { return *update }
