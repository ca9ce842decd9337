// Package atomicfile writes files so that a reader (a CI step uploading an
// artifact, say) sees either the old file or the whole new one, never half.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Write calls write with a temporary file in path's directory, syncs it,
// gives it the mode of the file it replaces (0644 for a new one) and
// renames it over path. A symbolic link at path is written through: its
// target is replaced, the link stays. On any error path is left as it was
// and the temporary file is removed.
func Write(path string, write func(io.Writer) error) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
	}
	// The temporary file is named after its target, so a write cut short
	// by SIGKILL leaves a file the next write of the same path removes.
	prefix := ".rollprobe-" + filepath.Base(path) + "-"
	if stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), globEscape(prefix)+"*")); len(stale) > 0 {
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), prefix+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	err = write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// CheckWritable reports, without changing anything, why Write(path) would
// fail now: the directory is missing or not writable (a temporary file is
// created there and removed), or path is a directory. Commands call it
// before they send or change anything, so a bad output path is a usage
// error, not evidence thrown away at the end.
func CheckWritable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".rollprobe-check-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	name := tmp.Name()
	_ = tmp.Close()
	return os.Remove(name)
}

// globEscape quotes the glob metacharacters of a literal file name.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
