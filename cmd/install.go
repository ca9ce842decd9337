package cmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rollprobe/rollprobe/report/exitcode"
)

// newInstallCommand copies the running binary into a directory: how an
// init container gets rollprobe out of the release image (which has no
// shell and no cp) into a volume another container runs it from (the
// Flagger load tester recipe in examples/).
func newInstallCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "install DIR",
		Short: "Copy this rollprobe binary into DIR (for init containers: the image has no shell)",
		Example: `  # an init container of another pod, with a shared emptyDir at /tools:
  args: ["install", "/tools"]`,
		Args: positional(1, 1, "one directory to copy the binary into"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return exitcode.UsageError(fmt.Errorf("install: %s is not a directory", dir))
			}
			cmd.SilenceUsage = true
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("install: find this binary: %w", err)
			}
			dst := filepath.Join(dir, "rollprobe")
			if err := copyExecutable(self, dst); err != nil {
				return fmt.Errorf("install: %w", err)
			}
			fmt.Fprintln(g.stdout, dst)
			return nil
		},
	}
}

// copyExecutable copies src to dst through a temporary file in dst's
// directory, so dst is never a half-written binary.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".rollprobe-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
