package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rollprobe/rollprobe/ci"
	"github.com/rollprobe/rollprobe/ci/output"
	"github.com/rollprobe/rollprobe/report"
)

func newReportCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "report", Short: "Work with saved reports"}
	format := "text"
	show := &cobra.Command{
		Use:   "show FILE",
		Short: "Render a saved report (text, markdown or json)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "markdown" && format != "json" {
				return ci.Usage(fmt.Errorf("-o %q: want text, markdown or json", format))
			}
			rep, err := report.ReadFile(args[0])
			if err != nil {
				return ci.Usage(err)
			}
			switch format {
			case "markdown":
				return output.WriteMarkdown(g.stdout, rep)
			case "json":
				return report.Encode(g.stdout, rep)
			}
			return report.WriteText(g.stdout, rep)
		},
	}
	show.Flags().StringVarP(&format, "output", "o", format, "text, markdown or json")
	cmd.AddCommand(show)
	return cmd
}
