package cmd

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rollprobe/rollprobe/internal/golden"
	"github.com/rollprobe/rollprobe/report/exitcode"
)

// flagTable is a command's flags as a Markdown table, in the order of
// their names, hidden and deprecated ones left out: what the docs show
// between <!-- flags:CMD --> and <!-- /flags:CMD -->.
func flagTable(c *cobra.Command) string {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		name := "`--" + f.Name
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		typ, usage := pflag.UnquoteUsage(f)
		if typ != "" {
			name += " " + typ
		}
		name += "`"
		def := f.DefValue
		switch {
		case def == "" || def == "[]" || def == "false" || (def == "0" && typ != "int" && typ != "float"):
			def = ""
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, def, strings.ReplaceAll(usage, "|", `\|`))
	})
	return b.String()
}

// The flag tables in the docs are the commands' own flags, generated
// between markers (go test ./cmd -run TestDocsFlagTables -update rewrites
// them): a flag added, renamed or reworded cannot leave the docs behind.
func TestDocsFlagTables(t *testing.T) {
	root := NewRootCommand(io.Discard, io.Discard)
	for _, tc := range []struct{ doc, cmd string }{{"../docs/run.md", "run"}, {"../docs/probe.md", "probe"}, {"../docs/doctor.md", "doctor"}} {
		c, _, err := root.Find([]string{tc.cmd})
		if err != nil {
			t.Fatal(err)
		}
		c.InitDefaultHelpFlag()
		data, err := os.ReadFile(tc.doc)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(data)
		begin, end := "<!-- flags:"+tc.cmd+" -->\n", "<!-- /flags:"+tc.cmd+" -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Fatalf("%s has no %s ... %s markers", tc.doc, strings.TrimSpace(begin), end)
		}
		want := flagTable(c)
		if got := doc[i+len(begin) : j]; got != want {
			if golden.Updating() {
				if err := os.WriteFile(tc.doc, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("%s's flag table is not %s's flags (rerun with -update):\n%s", tc.doc, tc.cmd, want)
		}
	}
}

// docs/exit-codes.md names every exit code the program can return, and
// each code's meaning as exitcode says it.
func TestDocsExitCodes(t *testing.T) {
	data, err := os.ReadFile("../docs/exit-codes.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range exitcode.All {
		if !strings.Contains(string(data), fmt.Sprintf("\n| %d | ", int(c))) {
			t.Errorf("docs/exit-codes.md has no row for %d (%s)", int(c), c)
		}
	}
}
