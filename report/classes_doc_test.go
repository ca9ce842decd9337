package report_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// docs/report.md's failure-class table has one row per failure class, in
// the report's order, and no other: a class added to the code without its
// meaning and example in the docs fails here.
func TestDocsClassTable(t *testing.T) {
	data, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## Failure classes\n")
	if !ok {
		t.Fatal("docs/report.md has no \"## Failure classes\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\|")
	var got []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		got = append(got, m[1])
	}
	if want := report.FailureClassNames(); !slices.Equal(got, want) {
		t.Errorf("the class table's rows are\n  %v\nthe code's failure classes\n  %v", got, want)
	}
}
