package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/report/render"
	"github.com/rollprobe/rollprobe/report/render/htmlreport"
)

func newReportCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "report", Short: "Work with saved reports"}
	format := "text"
	show := &cobra.Command{
		Use:   "show FILE",
		Short: "Render a saved report (text, markdown, html or json)",
		Long: `Render a saved report. -o html writes one self-contained page (the run on a
zoomable timeline: requests by class, latency, a lane per pod, outages linked
to their findings) that opens offline: rollprobe report show r.json -o html > r.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "markdown" && format != "html" && format != "json" {
				return exitcode.UsageError(fmt.Errorf("-o %q: want text, markdown, html or json", format))
			}
			rep, err := report.ReadFile(args[0])
			if err != nil {
				return exitcode.UsageError(err)
			}
			cmd.SilenceUsage = true
			switch format {
			case "markdown":
				return render.Markdown(g.stdout, rep)
			case "html":
				return htmlreport.Write(g.stdout, rep)
			case "json":
				return report.Encode(g.stdout, rep)
			}
			return render.Text(g.stdout, rep)
		},
	}
	show.Flags().StringVarP(&format, "output", "o", format, "text, markdown, html or json")
	cmd.AddCommand(show)
	return cmd
}
