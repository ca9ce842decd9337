package report

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

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

// ReadFile loads a report written by WriteFile. A file of another schema,
// or one that claims rollprobe.report/v1 but breaks it (a required field
// missing, a wrong type), is an error that says where: a report that does
// not hold its contract must not be read as if it did ("sent 0").
func ReadFile(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("read report %s: %w", path, err)
	}
	if head.Schema != Schema {
		return nil, fmt.Errorf("read report %s: schema %q, want %q", path, head.Schema, Schema)
	}
	if err := Validate(data); err != nil {
		return nil, fmt.Errorf("read report %s: %w", path, err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("read report %s: %w", path, err)
	}
	return &r, nil
}

//go:embed report.schema.json
var schemaJSON []byte

// SchemaJSON is the JSON Schema of rollprobe.report/v1.
func SchemaJSON() []byte { return append([]byte(nil), schemaJSON...) }

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("report.schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("report.schema.json")
})

// Validate checks a JSON document against the report's schema.
func Validate(data []byte) error {
	sch, err := compiled()
	if err != nil {
		return fmt.Errorf("report schema: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	if err := sch.Validate(doc); err != nil {
		return fmt.Errorf("not a valid %s report: %w", Schema, err)
	}
	return nil
}
