package cmd

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/report/exitcode"
)

// newFleetAgentCommand is what a prober pod runs (run --probers N): it is
// driven by the CLI over stdin and streams its results to stdout. Hidden:
// people do not run it.
func newFleetAgentCommand(g *globalOptions) *cobra.Command {
	cfg := fleet.AgentConfig{Name: os.Getenv("POD_NAME"), Node: os.Getenv("NODE_NAME"), Version: version(),
		MaxDuration: time.Hour, StartTimeout: 5 * time.Minute}
	cmd := &cobra.Command{
		Use:    "fleet-agent",
		Short:  "Run as an in-cluster prober (started by rollprobe run --probers)",
		Hidden: true,
		Args:   positional(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.MaxDuration <= 0 || cfg.StartTimeout <= 0 {
				return exitcode.UsageError(fmt.Errorf("--max-duration and --start-timeout must be positive"))
			}
			cmd.SilenceUsage = true
			return fleet.RunAgent(cmd.Context(), cfg, cmd.InOrStdin(), g.stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.RunID, "run-id", "", "the CLI's run ID and this prober's index (RUN.i), for the requests' User-Agent")
	f.StringVar(&cfg.Name, "name", cfg.Name, "this prober's name (its pod; default $POD_NAME)")
	f.StringVar(&cfg.Node, "node", cfg.Node, "the node it runs on (default $NODE_NAME)")
	f.DurationVar(&cfg.MaxDuration, "max-duration", cfg.MaxDuration, "end the run by then if the CLI never says stop")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "give up if the CLI never says start")
	f.BoolVar(&cfg.Conntrack, "conntrack", false, "read conntrack for where each failed connection went (on the node's network, with NET_ADMIN)")
	return cmd
}
