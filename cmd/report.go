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
		Short: "Render a saved report (text, markdown, html, json or openmetrics)",
		Long: `Render a saved report. -o html writes one self-contained page (the run on a
zoomable timeline: requests by class, latency, a lane per pod, outages linked
to their findings) that opens offline: rollprobe report show r.json -o html > r.html.
-o openmetrics writes the key numbers (requests by class, failures, outage
seconds, latency quantiles, how long the old pods took to go) for GitLab's
metrics report: rollprobe report show r.json -o openmetrics > metrics.txt`,
		Args: positional(1, 1, "one report file (the JSON --report wrote)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "markdown" && format != "html" && format != "json" && format != "openmetrics" {
				return exitcode.UsageError(fmt.Errorf("-o %q: want text, markdown, html, json or openmetrics", format))
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
			case "openmetrics":
				return render.OpenMetrics(g.stdout, rep)
			case "json":
				return report.Encode(g.stdout, rep)
			}
			return render.Text(g.stdout, rep)
		},
	}
	show.Flags().StringVarP(&format, "output", "o", format, "text, markdown, html, json or openmetrics (GitLab's metrics report)")
	cmd.AddCommand(show)
	return cmd
}
