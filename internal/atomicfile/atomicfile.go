// Package atomicfile writes files so that a reader (a CI step uploading an
// artifact, say) sees either the old file or the whole new one, never half.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write calls write with a temporary file in path's directory, syncs it,
// makes it world-readable (0644) and renames it over path. On any error path
// is left as it was and the temporary file is removed.
func Write(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".rollprobe-*")
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
		err = os.Chmod(tmp.Name(), 0o644)
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
