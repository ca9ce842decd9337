package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/golden"
)

// schemaFields walks the schema's properties (following $refs into $defs)
// and returns every field path ("totals.by_class", "failures[].class") with
// its node.
func schemaFields(t *testing.T) (paths []string, nodes map[string]map[string]any) {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(schemaJSON, &root); err != nil {
		t.Fatal(err)
	}
	defs, _ := root["$defs"].(map[string]any)
	resolve := func(n map[string]any) map[string]any {
		if ref, ok := n["$ref"].(string); ok {
			if d, ok := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any); ok {
				return d
			}
		}
		return n
	}
	nodes = map[string]map[string]any{}
	var walk func(n map[string]any, prefix string)
	walk = func(n map[string]any, prefix string) {
		n = resolve(n)
		props, _ := n["properties"].(map[string]any)
		for name, p := range props {
			node, _ := p.(map[string]any)
			path := prefix + name
			paths = append(paths, path)
			nodes[path] = node
			walk(node, path+".")
		}
		if items, ok := n["items"].(map[string]any); ok && strings.HasSuffix(prefix, ".") {
			walk(items, strings.TrimSuffix(prefix, ".")+"[].")
		}
	}
	walk(root, "")
	slices.Sort(paths)
	return paths, nodes
}

// goFields lists the JSON field paths of a type the way schemaFields
// names them. Maps are values (their keys are data, not fields).
func goFields(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice {
		goFields(t.Elem(), strings.TrimSuffix(prefix, ".")+"[].", out)
		return
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Time{}) {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		*out = append(*out, prefix+name)
		goFields(f.Type, prefix+name+".", out)
	}
}

// The schema is the report's contract, and its descriptions are the field
// reference in docs/report.md: every field the code writes is in it, every
// field in it is one the code writes, and every one says what it means.
// The schema's rollout.change enum is the code's ChangeKinds, no more and
// no fewer: a consumer validating against the schema accepts every value
// the code writes.
func TestChangeKindsMatchSchema(t *testing.T) {
	_, nodes := schemaFields(t)
	var inSchema []string
	enum, _ := nodes["rollout.change"]["enum"].([]any)
	for _, v := range enum {
		inSchema = append(inSchema, fmt.Sprint(v))
	}
	var inGo []string
	for _, k := range []ChangeKind{ChangeRevision, ChangeDrain, ChangeScale} {
		inGo = append(inGo, string(k))
	}
	if !slices.Equal(inSchema, inGo) {
		t.Fatalf("rollout.change: the schema's enum %v, the code's kinds %v", inSchema, inGo)
	}
}

func TestSchemaDescribesEveryField(t *testing.T) {
	inSchema, nodes := schemaFields(t)
	var inGo []string
	goFields(reflect.TypeOf(Report{}), "", &inGo)
	slices.Sort(inGo)
	for _, p := range inGo {
		if _, ok := slices.BinarySearch(inSchema, p); !ok {
			t.Errorf("%s: written by the code, missing from report.schema.json", p)
		}
	}
	for _, p := range inSchema {
		if _, ok := slices.BinarySearch(inGo, p); !ok {
			t.Errorf("%s: in report.schema.json, written by no field of report.Report", p)
		}
		if d, _ := nodes[p]["description"].(string); strings.TrimSpace(d) == "" {
			t.Errorf("%s: no description in report.schema.json", p)
		}
	}
}

// orderedObject is a JSON object with its keys in the document's order
// (the field reference follows the schema's order, which is the report's).
type orderedObject struct {
	keys   []string
	values map[string]any // orderedObject, []any, or a scalar
}

func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := orderedObject{values: map[string]any{}}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k.(string))
			o.values[k.(string)] = v
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		var a []any
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

func (o orderedObject) object(key string) (orderedObject, bool) {
	v, ok := o.values[key].(orderedObject)
	return v, ok
}

func (o orderedObject) str(key string) string {
	s, _ := o.values[key].(string)
	return s
}

// fieldType says in a few words what a schema node holds (defs resolved:
// a $ref's own node, then its definition's).
func fieldType(n, defs orderedObject) string {
	ref := strings.TrimPrefix(n.str("$ref"), "#/$defs/")
	switch ref {
	case "allClasses":
		return "class → count"
	case "failureClass":
		return "class"
	case "quantiles":
		return "quantiles (ms)"
	case "":
	default:
		n, _ = defs.object(ref)
	}
	if enum, ok := n.values["enum"].([]any); ok {
		var names []string
		for _, v := range enum {
			switch v := v.(type) {
			case string:
				if v != "" {
					names = append(names, "`"+v+"`")
				}
			case json.Number, float64:
				names = append(names, fmt.Sprintf("`%v`", v))
			}
		}
		if len(names) > 4 {
			return "enum"
		}
		return strings.Join(names, " \\| ")
	}
	if c, ok := n.values["const"].(string); ok {
		return "`" + c + "`"
	}
	switch typ := n.str("type"); typ {
	case "string":
		if n.str("format") == "date-time" {
			return "time"
		}
		return "string"
	case "array":
		if items, ok := n.object("items"); ok {
			if t := fieldType(items, defs); t != "object" {
				return "array of " + t
			}
		}
		return "array of objects"
	case "object":
		if _, ok := n.object("properties"); ok {
			return "object"
		}
		return "map → count"
	default:
		return typ
	}
}

// fieldTable renders the schema as the field reference of docs/report.md:
// every field in the report's order; a definition used in several places
// (totals, prober, verdict for the run and for each path) is spelled out
// where it is first used.
func fieldTable(t *testing.T) string {
	t.Helper()
	root, err := decodeOrdered(json.NewDecoder(bytes.NewReader(schemaJSON)))
	if err != nil {
		t.Fatal(err)
	}
	schema := root.(orderedObject)
	defs, _ := schema.object("$defs")
	seen := map[string]bool{}
	// expand is the node whose fields follow a field's row: its own, or
	// its definition's the first time it is used.
	expand := func(n orderedObject) (orderedObject, bool) {
		ref := strings.TrimPrefix(n.str("$ref"), "#/$defs/")
		if ref == "" {
			return n, true
		}
		if seen[ref] || ref == "quantiles" {
			return orderedObject{}, false
		}
		seen[ref] = true
		d, ok := defs.object(ref)
		return d, ok
	}
	var b strings.Builder
	b.WriteString("| field | type | meaning |\n|---|---|---|\n")
	var walk func(n orderedObject, prefix string)
	walk = func(n orderedObject, prefix string) {
		props, _ := n.object("properties")
		for _, name := range props.keys {
			node := props.values[name].(orderedObject)
			path := prefix + name
			desc := node.str("description")
			if ref := node.str("$ref"); ref != "" && desc == "" {
				def, _ := defs.object(strings.TrimPrefix(ref, "#/$defs/"))
				desc = def.str("description")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", path, fieldType(node, defs), strings.ReplaceAll(desc, "|", `\|`))
			if inner, ok := expand(node); ok {
				walk(inner, path+".")
			}
			if items, ok := node.object("items"); ok {
				if inner, ok := expand(items); ok {
					walk(inner, path+"[].")
				}
			}
		}
	}
	walk(schema, "")
	return b.String()
}

// docs/report.md's field reference is the schema's descriptions, generated
// between markers (go test ./report -run TestDocsFieldTable -update
// rewrites it): a field added to the report cannot leave the docs behind.
func TestDocsFieldTable(t *testing.T) {
	const doc = "../docs/report.md"
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	begin, end := "<!-- fields -->\n", "<!-- /fields -->"
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s ... %s markers", doc, strings.TrimSpace(begin), end)
	}
	want := fieldTable(t)
	if got := text[i+len(begin) : j]; got != want {
		if golden.Updating() {
			if err := os.WriteFile(doc, []byte(text[:i+len(begin)]+want+text[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's field reference is not the schema's (rerun with -update):\n%s", doc, want)
	}
}
