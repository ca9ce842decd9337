package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The import rules ARCHITECTURE.md states: the contract is a leaf, the
// domain never sees cobra or Bubble Tea, and prober and analysis never see
// Kubernetes. Checked on the packages' whole dependency sets.
func TestImportRules(t *testing.T) {
	const mod = "github.com/rollprobe/rollprobe/"
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "./"+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	forbid := func(pkg string, why string, bad func(dep string) bool) {
		for _, d := range deps(pkg) {
			if bad(d) && d != mod+pkg {
				t.Errorf("%s imports %s: %s", pkg, d, why)
			}
		}
	}
	ui := func(d string) bool {
		return strings.Contains(d, "spf13/cobra") || strings.Contains(d, "bubbletea") || strings.Contains(d, "charm.land/")
	}
	for _, pkg := range []string{"report", "prober", "fleet", "rollout", "analysis", "doctor", "runner", "ci", "advice", "natwatch", "edgelog"} {
		forbid(pkg, "domain packages and faces other than tui never import cobra or Bubble Tea", ui)
	}
	forbid("tui", "the dashboard knows no flags", func(d string) bool { return strings.Contains(d, "spf13/cobra") })
	for _, pkg := range []string{"report", "prober", "analysis", "report/render", "edgelog"} {
		forbid(pkg, "no Kubernetes below the domain's client-go packages", func(d string) bool { return strings.HasPrefix(d, "k8s.io/") })
	}
	forbid("report", "the contract is a leaf", func(d string) bool {
		return strings.HasPrefix(d, mod) && d != mod+"report/exitcode" && d != mod+"internal/atomicfile"
	})
}
