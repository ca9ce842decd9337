package cmd

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// The view's flags that will have no effect are named, but only where
// --ui was given: under auto the same command line serves a terminal and
// CI.
func TestUINotesNameFlagsWithoutEffect(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // substrings, one per note; none: no note
	}{
		{[]string{"--progress", "5s"}, nil},
		{[]string{"--ui", "auto", "--progress", "5s", "--exit-when-done"}, nil},
		{[]string{"--ui", "plain", "--progress", "5s"}, nil},
		{[]string{"--ui", "tui", "--exit-when-done"}, nil},
		{[]string{"--ui", "tui", "--progress", "5s"}, []string{"--progress has no effect with --ui tui"}},
		{[]string{"--ui", "none", "--progress", "5s", "--exit-when-done"},
			[]string{"--progress has no effect with --ui none", "--exit-when-done has no effect with --ui none"}},
		{[]string{"--ui", "plain", "--exit-when-done"}, []string{"--exit-when-done has no effect with --ui plain"}},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		var u uiFlags
		u.bind(fs)
		var progress time.Duration
		fs.DurationVar(&progress, "progress", time.Second, "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		got := u.notes()
		if len(got) != len(c.want) {
			t.Errorf("%v: notes %q, want %d", c.args, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%v: note %q, want it to say %q", c.args, got[i], w)
			}
		}
	}
}
