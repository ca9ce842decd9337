package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// Argo Rollouts' controller (make lab-bins builds v1.10.1) runs on the hub
// as the control plane's components do, with the admin kubeconfig: the
// lab's Rollouts roll under the real controller, its canary steps and
// blue/green switches exactly as in a cluster that installs it.
const (
	compArgo = "rollouts-controller"
	// argoHealthURL answers 200 once the controller serves (its healthz
	// on the hub's loopback; the default 8080 is left to others).
	argoHealthPort  = 8085
	argoMetricsPort = 8095
	// ArgoNamespace is where the controller would look for its optional
	// configuration (argo-rollouts-config): none is made, so its defaults
	// hold.
	ArgoNamespace = "kube-system"
)

var argoHealthURL = fmt.Sprintf("http://127.0.0.1:%d/healthz", argoHealthPort)

// startArgo installs Argo Rollouts' CRDs (from the module the controller
// was built from) and starts its controller, waiting until it is healthy.
func (c Config) startArgo(ctx context.Context) error {
	c.logf("installing the Argo Rollouts CRDs")
	if err := c.kubectl(ctx, "", "apply", "--server-side", "-f", filepath.Join(c.BinDir, "argo-crds")); err != nil {
		return err
	}
	// kubectl wait fails, rather than waits, on a CRD the apiserver has
	// not given its first status yet (".status.conditions accessor
	// error"): asked again until it has one.
	var err error
	for range 50 {
		if err = c.kubectl(ctx, "", "wait", "--for=condition=Established", "crd/rollouts.argoproj.io", "--timeout=60s"); err == nil ||
			!strings.Contains(err.Error(), "accessor error") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	c.logf("starting %s", compArgo)
	argv := []string{filepath.Join(c.BinDir, "rollouts-controller"), "--kubeconfig=" + c.KubeconfigPath(),
		"--leader-elect=false", fmt.Sprintf("--healthzPort=%d", argoHealthPort), fmt.Sprintf("--metricsPort=%d", argoMetricsPort),
		"--loglevel=info"}
	if _, err := startDaemon(netns.LabNetNS, "", argv, []string{"POD_NAMESPACE=" + ArgoNamespace},
		c.path("logs", compArgo+".log"), c.path("pids", compArgo+".pid")); err != nil {
		return err
	}
	return waitHTTP(ctx, netns.LabNetNS, compArgo, argoHealthURL, "", "", 60*time.Second)
}
