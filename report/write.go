package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/rollprobe/rollprobe/internal/atomicfile"
)

// Encode writes r as indented JSON.
func Encode(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteFile writes r to path atomically (internal/atomicfile): a reader, or
// a CI step that uploads the artifact, never sees a half-written report.
func WriteFile(path string, r *Report) error {
	if err := atomicfile.Write(path, func(w io.Writer) error { return Encode(w, r) }); err != nil {
		return fmt.Errorf("report: %w", err)
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
