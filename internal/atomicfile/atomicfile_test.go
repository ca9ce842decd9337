package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "first"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error { io.WriteString(w, "half"); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the writer's error", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "first" {
		t.Fatalf("a failed write changed the file: %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d entries: temporary file left behind", len(entries))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if err := Write(filepath.Join(dir, "missing", "x"), func(io.Writer) error { return nil }); err == nil {
		t.Fatal("writing into a missing directory must fail")
	}
}

func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	if err := CheckWritable(filepath.Join(dir, "r.json")); err != nil {
		t.Fatalf("a writable directory: %v", err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing", "r.json"), dir} {
		if err := CheckWritable(bad); err == nil {
			t.Errorf("CheckWritable(%s) accepted", bad)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the check left %d files behind", len(entries))
	}
}

// An existing file keeps its mode; a symbolic link is written through.
func TestWriteKeepsModeAndLinks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(p, text string) {
		t.Helper()
		if err := Write(p, func(w io.Writer) error { _, err := io.WriteString(w, text); return err }); err != nil {
			t.Fatal(err)
		}
	}
	write(path, "new")
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old file's 0600", fi.Mode().Perm())
	}
	link := filepath.Join(dir, "latest.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	write(link, "through")
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "through" {
		t.Errorf("the link's target holds %q", b)
	}
	fresh := filepath.Join(dir, "fresh.json")
	write(fresh, "x")
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o644 {
		t.Errorf("a new file's mode %v, want 0644", fi.Mode().Perm())
	}
}

// A temporary file left by a write that was killed is removed by the next
// write of the same path; another path's is left alone.
func TestWriteRemovesStaleTemporaries(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".rollprobe-report.json-123456")
	other := filepath.Join(dir, ".rollprobe-junit.xml-654321")
	for _, f := range []string{stale, other} {
		if err := os.WriteFile(f, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Write(filepath.Join(dir, "report.json"), func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale temporary file is still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another target's temporary file was removed: %v", err)
	}
}
