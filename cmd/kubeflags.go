package cmd

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollprobe/rollprobe/internal/field"
	"github.com/rollprobe/rollprobe/rollout"
)

// kubeFlags are the kubeconfig flags shared by the commands that talk to a
// cluster, as kubectl spells them.
type kubeFlags struct {
	kubeconfig, context, namespace string
	deployment, service            string
}

func (k *kubeFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&k.context, "context", "", "kubeconfig context")
	f.StringVarP(&k.namespace, "namespace", "n", "", "namespace (default: the context's)")
	f.StringVar(&k.deployment, "deployment", "", "the Deployment: [NAMESPACE/]NAME")
	f.StringVar(&k.service, "service", "", "the Service in front of the Deployment (default: the one selecting its pods)")
}

// bindConnection binds only the flags that choose the cluster and the
// namespace (probe --probers needs no Deployment).
func (k *kubeFlags) bindConnection(f *pflag.FlagSet) {
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "with --probers: kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&k.context, "context", "", "with --probers: kubeconfig context")
	f.StringVarP(&k.namespace, "namespace", "n", "", "with --probers: namespace (default: the context's)")
}

// connection loads the kubeconfig: the client, its REST configuration and
// the namespace (-n or the context's).
func (k *kubeFlags) connection() (kubernetes.Interface, *rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.kubeconfig != "" {
		rules.ExplicitPath = k.kubeconfig
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	restCfg, err := loader.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, nil, "", fmt.Errorf("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or create ~/.kube/config")
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns := k.namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return nil, nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
		}
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
