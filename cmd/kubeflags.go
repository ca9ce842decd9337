package cmd

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/plugin/pkg/client/auth/oidc" // kubeconfigs with an oidc auth-provider, as kubectl reads them
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollprobe/rollprobe/internal/field"
	"github.com/rollprobe/rollprobe/rollout"
)

// kubeFlags are the flags that choose the cluster, the identity and the
// namespace: kubectl's own (clientcmd.BindOverrideFlags: --server,
// --token, --as, --as-group, --cluster, --user, --certificate-authority,
// --insecure-skip-tls-verify, --tls-server-name, ...), so CI jobs that
// authenticate with a token or impersonation work as with kubectl. The
// API request timeout is kubectl's --request-timeout where that name is
// free (doctor) and --kube-request-timeout where it is the prober's (run,
// probe).
type kubeFlags struct {
	kubeconfig          string
	overrides           clientcmd.ConfigOverrides
	deployment, service string
}

// bind binds the connection flags and the Deployment's.
func (k *kubeFlags) bind(f *pflag.FlagSet, timeoutFlag string) {
	k.bindConnection(f, timeoutFlag, "")
	f.StringVar(&k.deployment, "deployment", "", "the Deployment: [NAMESPACE/]NAME")
	f.StringVar(&k.service, "service", "", "the Service in front of the Deployment (default: the one selecting its pods)")
}

// bindConnection binds kubectl's connection flags; note prefixes their
// help (probe uses them only with --probers).
func (k *kubeFlags) bindConnection(f *pflag.FlagSet, timeoutFlag, note string) {
	f.StringVar(&k.kubeconfig, "kubeconfig", "", note+"kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.Timeout.LongName = timeoutFlag
	for _, fi := range []*clientcmd.FlagInfo{&names.Timeout, &names.CurrentContext, &names.ContextOverrideFlags.Namespace,
		&names.ContextOverrideFlags.ClusterName, &names.ContextOverrideFlags.AuthInfoName, &names.ClusterOverrideFlags.APIServer,
		&names.AuthOverrideFlags.Token, &names.AuthOverrideFlags.Impersonate, &names.AuthOverrideFlags.ImpersonateGroups} {
		fi.Description = note + fi.Description
	}
	clientcmd.BindOverrideFlags(&k.overrides, f, names)
}

// connection loads the kubeconfig with the flags' overrides: the client,
// its REST configuration and the namespace (-n or the context's).
func (k *kubeFlags) connection() (kubernetes.Interface, *rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.kubeconfig != "" {
		rules.ExplicitPath = k.kubeconfig
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
	restCfg, err := loader.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		// client-go's own message names KUBERNETES_MASTER, which nothing
		// here reads.
		return nil, nil, "", fmt.Errorf("no kubeconfig: pass --kubeconfig (or --server and --token), set KUBECONFIG, or create ~/.kube/config")
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	if restCfg.QPS == 0 {
		// client-go's default (5/s, bursts of 10) is shared by every call
		// of the client; run's revision clock alone lists 10 times a
		// second while a rollout is followed.
		restCfg.QPS, restCfg.Burst = 50, 100
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubernetes client: %w", err)
	}
	return kube, restCfg, ns, nil
}

// client loads the kubeconfig and resolves the Deployment's namespace and
// name (a NS/ prefix on --deployment wins over -n and the context's).
func (k *kubeFlags) client() (kube kubernetes.Interface, ns, name string, err error) {
	kube, _, ns, name, err = k.clientAndConfig()
	return kube, ns, name, err
}

// clientAndConfig is client with the REST configuration it was made from
// (attaching to pods needs it).
func (k *kubeFlags) clientAndConfig() (kube kubernetes.Interface, restCfg *rest.Config, ns, name string, err error) {
	if kube, restCfg, ns, err = k.connection(); err != nil {
		return nil, nil, "", "", err
	}
	if ns, name, err = rollout.ParseDeploymentRef(k.deployment, ns); err != nil {
		return nil, nil, "", "", field.Rename(err, map[string]string{"Deployment": "--deployment"})
	}
	return kube, restCfg, ns, name, nil
}
