package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Encode writes r as indented JSON.
func Encode(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteFile writes r to path atomically: a temporary file in the same
// directory, synced, then renamed over path. A reader (or a CI step that
// uploads the artifact) never sees a half-written report.
func WriteFile(path string, r *Report) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".rollprobe-report-*.json")
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := Encode(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// ReadFile loads a report written by WriteFile, checking its schema.
func ReadFile(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("read report %s: %w", path, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("read report %s: schema %q, want %q", path, r.Schema, Schema)
	}
	return &r, nil
}
