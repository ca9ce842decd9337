package report_test

import (
	"os"
	"path/filepath"
	"reflect"
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
