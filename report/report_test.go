package report_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/internal/fixture"
	"github.com/rollprobe/rollprobe/report"
)

func TestWriteFileIsAtomicAndReadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	r := fixture.NaiveRun()
	if err := report.WriteFile(path, r); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the report (no temp files)", len(entries))
	}
	back, err := report.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Totals, r.Totals) || back.Verdict.ExitCode != r.Verdict.ExitCode || len(back.Findings) != len(r.Findings) ||
		back.Findings[2].Source != report.SourceDoctor || back.Rollout.Status != report.StatusComplete {
		t.Errorf("round trip changed the report:\n%+v\n%+v", back, r)
	}
	if err := report.WriteFile(filepath.Join(dir, "missing", "r.json"), r); err == nil {
		t.Error("writing into a missing directory must fail")
	}
	if err := os.WriteFile(path, []byte(`{"schema":"other/v9"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := report.ReadFile(path); err == nil {
		t.Error("ReadFile accepted a report of another schema")
	}
}

// The contract's class names are the prober's, in the same order, ok first.
func TestClassNames(t *testing.T) {
	if report.ClassNames[0] != report.ClassOK || report.FailureClassNames()[0] != report.ClassRefused ||
		report.ClassNames[len(report.ClassNames)-1] != report.ClassLocal {
		t.Fatalf("class order %v", report.ClassNames)
	}
}

func TestSeverityAndFailOn(t *testing.T) {
	for _, tc := range []struct {
		sev    report.Severity
		failOn string
		want   bool
	}{{"error", "error", true}, {"warning", "error", false}, {"warning", "warning", true}, {"error", "never", false}, {"info", "info", true}} {
		f, ok := report.ParseFailOn(tc.failOn)
		if !ok {
			t.Fatalf("fail-on %q rejected", tc.failOn)
		}
		if got := f.Fails(tc.sev); got != tc.want {
			t.Errorf("fail-on %s, severity %s: fails %v", tc.failOn, tc.sev, got)
		}
	}
	if _, ok := report.ParseFailOn("fatal"); ok {
		t.Error("fail-on fatal accepted")
	}
}

// A file that is not a report says what it is instead, in a user's words.
func TestReadFileSaysWhatTheFileIsNot(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content, want string }{
		{"empty", "\n", "the file is empty"},
		{"html", "<!doctype html>", "not JSON"},
		{"junit", `<?xml version="1.0"?><testsuites/>`, "not the --html page or the --junit file"},
		{"array", "[1, 2]", "JSON but not an object"},
		{"cut", `{"schema": "rollprobe.report/v1", "totals": {`, "not valid JSON at byte"},
		{"no schema", `{"sent": 3}`, `without a "schema" field`},
		{"schema not a string", `{"schema": 1}`, `its "schema" is a number, not a string`},
		{"schema null", `{"schema": null}`, `its "schema" is null, not a string`},
		{"another schema", `{"schema": "rollprobe.report/v2"}`, `schema "rollprobe.report/v2": this rollprobe reads "rollprobe.report/v1"`},
	} {
		path := filepath.Join(dir, tc.name+".json")
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := report.ReadFile(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want it to name the file and say %q", tc.name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "Go struct") || strings.Contains(err.Error(), "cannot unmarshal")) {
			t.Errorf("%s: error %v speaks Go's decoder, not a user's words", tc.name, err)
		}
	}
}
