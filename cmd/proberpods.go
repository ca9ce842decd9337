package cmd

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rollprobe/rollprobe/fleet"
	"github.com/rollprobe/rollprobe/runner"
)

// proberPodFlags choose probing from prober pods in the cluster (run and
// probe --probers N).
type proberPodFlags struct {
	count        int
	image        string
	namespace    string
	startTimeout time.Duration
	conntrack    bool
	fs           *pflag.FlagSet // what bind bound: which flags were given
}

// maxProbers bounds --probers: the merge was measured to this scale.
const maxProbers = 100

func defaultProberPodFlags() proberPodFlags {
	return proberPodFlags{image: defaultProberImage(), startTimeout: time.Minute}
}

func (p *proberPodFlags) bind(f *pflag.FlagSet, namespaceDefault string) {
	p.fs = f
	f.IntVar(&p.count, "probers", 0, "probe from N prober pods in the cluster (spread over the nodes; --rate is their total) instead of from here; with several --target paths, N for each path, each path's --rate split among its own")
	f.StringVar(&p.image, "prober-image", p.image, "with --probers: the probers' image (this rollprobe's version)")
	f.StringVar(&p.namespace, "prober-namespace", "", "with --probers: where the prober pods go (default: "+namespaceDefault+")")
	f.DurationVar(&p.startTimeout, "prober-start-timeout", p.startTimeout, "with --probers: how long the prober pods may take to run (a bad image fails here, exit 2)")
}

// bindConntrack adds --probers-conntrack (run only: it is the run's
// analysis that uses what the probers find).
func (p *proberPodFlags) bindConntrack(f *pflag.FlagSet) {
	f.BoolVar(&p.conntrack, "probers-conntrack", false, "with --probers: run the probers on their node's network as root with NET_ADMIN, "+
		"to read conntrack for the pod each failed connection went to (certain attribution); needs a namespace with PodSecurity "+
		"level privileged (checked by a dry run before anything changes)")
}

func (p *proberPodFlags) validate() error {
	var errs []error
	if p.count < 0 || p.count > maxProbers {
		errs = append(errs, fmt.Errorf("--probers %d: want 0 (probe from here) to %d", p.count, maxProbers))
	}
	if p.conntrack && p.count == 0 {
		errs = append(errs, errors.New("--probers-conntrack: only with --probers N (probing from here reads this host's conntrack already when it can)"))
	}
	// Given without --probers they would be ignored: the run probes from
	// here, which a user who set them did not expect.
	for _, name := range []string{"prober-image", "prober-namespace", "prober-start-timeout"} {
		if p.count == 0 && p.fs != nil && p.fs.Changed(name) {
			errs = append(errs, fmt.Errorf("--%s: only with --probers N (without it rollprobe probes from here)", name))
		}
	}
	if p.count > 0 && (p.image == "" || p.startTimeout <= 0) {
		errs = append(errs, errors.New("--probers: --prober-image must be set and --prober-start-timeout positive"))
	}
	return errors.Join(errs...)
}

// config is the runner's configuration of the probers (nil without
// --probers); ns is the namespace they go to unless --prober-namespace.
func (p *proberPodFlags) config(kube kubernetes.Interface, restCfg *rest.Config, ns string) *runner.ProbersConfig {
	if p.count == 0 {
		return nil
	}
	if p.namespace != "" {
		ns = p.namespace
	}
	return &runner.ProbersConfig{Count: p.count, Image: p.image, Namespace: ns, StartTimeout: p.startTimeout, Conntrack: p.conntrack,
		Streams: fleet.KubeStreams{Kube: kube, Rest: restCfg, Namespace: ns}}
}

// defaultProberImage is the release image of this rollprobe's version
// (latest for a build that is not a release).
func defaultProberImage() string {
	v := version()
	if !strings.HasPrefix(v, "v") || strings.Contains(v, "-") {
		v = "latest"
	}
	return "rollprobe/rollprobe:" + v
}
