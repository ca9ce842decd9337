package report

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
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
	if err := checkHead(data); err != nil {
		return nil, fmt.Errorf("read report %s: %w", path, err)
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

// checkHead says, in a user's words, why data is not a report of this
// schema: empty, not JSON (the HTML or JUnit output given by mistake), not
// an object, no schema, or another one.
func checkHead(data []byte) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return errors.New("the file is empty, not a rollprobe report (the JSON that --report writes)")
	}
	if trimmed[0] != '{' {
		if !json.Valid(trimmed) {
			return errors.New("not JSON, so not a rollprobe report (the JSON that --report writes; not the --html page or the --junit file)")
		}
		return errors.New("JSON but not an object, so not a rollprobe report (the JSON that --report writes)")
	}
	var head struct {
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(trimmed, &head); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return fmt.Errorf("not valid JSON at byte %d (%w): a report cut short or edited?", syntax.Offset, err)
		}
		return fmt.Errorf("not a rollprobe report: %w", err)
	}
	if head.Schema == nil {
		return fmt.Errorf("JSON without a \"schema\" field, so not a rollprobe report (want %q)", Schema)
	}
	if kind := jsonKind(head.Schema); kind != "a string" {
		return fmt.Errorf("its \"schema\" is %s, not a string, so not a rollprobe report (want %q)", kind, Schema)
	}
	var schema string
	if err := json.Unmarshal(head.Schema, &schema); err != nil {
		return fmt.Errorf("not a rollprobe report: its \"schema\": %w", err)
	}
	if schema != Schema {
		return fmt.Errorf("schema %q: this rollprobe reads %q", schema, Schema)
	}
	return nil
}

// jsonKind names the kind of a JSON value in words: "a number", "null", ...
func jsonKind(v json.RawMessage) string {
	switch b := bytes.TrimSpace(v); {
	case len(b) == 0:
		return "empty"
	case b[0] == '{':
		return "an object"
	case b[0] == '[':
		return "an array"
	case b[0] == '"':
		return "a string"
	case b[0] == 't' || b[0] == 'f':
		return "a boolean"
	case b[0] == 'n':
		return "null"
	default:
		return "a number"
	}
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
