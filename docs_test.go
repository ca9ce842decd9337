package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every relative link in the README and the docs leads to a file that
// exists: pages move as the docs grow.
func TestDocsLinks(t *testing.T) {
	files := []string{"README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"}
	_ = filepath.WalkDir("docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links %s: %v", f, target, err)
			}
		}
	}
}
