package cmd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
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
// bound on each API call is --kube-request-timeout in every command
// (--request-timeout is the prober's request timeout; doctor keeps it as a
// deprecated spelling).
type kubeFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
	// workloads are --deployment, --statefulset and --daemonset, by kind:
	// one is given.
	workloads map[rollout.Kind]*string
	service   string
	// requestTimeout bounds each API call (0: rollout.DefaultCallTimeout);
	// a duration like every other timeout (clientcmd binds it as a string).
	requestTimeout time.Duration
	// names are the connection flags bound, for probe to refuse them
	// without --probers.
	names []string
	fs    *pflag.FlagSet
	// deprecated is the old spelling of the API call bound ("" if none).
	deprecated string
}

// bind binds the connection flags and the workload's.
func (k *kubeFlags) bind(f *pflag.FlagSet) {
	k.bindConnection(f, "")
	k.workloads = map[rollout.Kind]*string{}
	for _, kind := range rollout.WorkloadKinds {
		what := string(kind)
		if kind == rollout.KindRollout {
			what = "Argo Rollout (argoproj.io/v1alpha1)"
		}
		k.workloads[kind] = f.String(kind.Lower(), "", fmt.Sprintf("the %s: [NAMESPACE/]NAME (one of --%s)", what, strings.Join(workloadFlags(), ", --")))
	}
	f.StringVar(&k.service, "service", "", "the Service in front of the workload (default: the one selecting its pods)")
}

// workloadFlags are the flags naming a workload, by kind.
func workloadFlags() []string {
	var out []string
	for _, kind := range rollout.WorkloadKinds {
		out = append(out, kind.Lower())
	}
	return out
}

// errNoWorkload: none of the workload flags was given.
var errNoWorkload = fmt.Errorf("one of --%s is required", strings.Join(workloadFlags(), ", --"))

// workload is the workload flag given: its kind and value; ok false when
// none was.
func (k *kubeFlags) workload() (kind rollout.Kind, ref string, ok bool) {
	for _, kind := range rollout.WorkloadKinds {
		if v := k.workloads[kind]; v != nil && *v != "" {
			return kind, *v, true
		}
	}
	return "", "", false
}

// bindConnection binds kubectl's connection flags and the API call bound
// (--kube-request-timeout); note prefixes the help of every one of them
// (probe uses them only with --probers).
func (k *kubeFlags) bindConnection(f *pflag.FlagSet, note string) {
	before := map[string]bool{}
	f.VisitAll(func(fl *pflag.Flag) { before[fl.Name] = true })
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.DurationVar(&k.requestTimeout, "kube-request-timeout", 0, fmt.Sprintf("bound on each Kubernetes API call (default %s)", rollout.DefaultCallTimeout))
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.Timeout.LongName = "" // bound above, as a duration
	clientcmd.BindOverrideFlags(&k.overrides, f, names)
	k.fs = f
	f.VisitAll(func(fl *pflag.Flag) {
		if !before[fl.Name] {
			fl.Usage = note + fl.Usage
			k.names = append(k.names, fl.Name)
		}
	})
}

// deprecatedTimeout keeps name working as the API call bound, hidden
// (doctor's kubectl-style --request-timeout is the prober's request
// timeout in run and probe); warnDeprecated says so when it is used.
func (k *kubeFlags) deprecatedTimeout(f *pflag.FlagSet, name string) {
	f.DurationVar(&k.requestTimeout, name, 0, "bound on each Kubernetes API call")
	_ = f.MarkHidden(name)
	k.deprecated = name
}

// warnDeprecated tells, on w, that the deprecated spelling was used. (Not
// pflag's MarkDeprecated: cobra prints its message on stdout, into -o
// json's document.)
func (k *kubeFlags) warnDeprecated(w io.Writer) {
	if k.deprecated != "" && k.fs.Changed(k.deprecated) {
		fmt.Fprintf(w, "rollprobe: --%s is deprecated here: use --kube-request-timeout (--request-timeout is the request timeout of run and probe)\n", k.deprecated)
	}
}

// setOutsideProbers names the connection flags given on the command line:
// probe without --probers talks to no cluster, and must say so rather
// than ignore them.
func (k *kubeFlags) setOutsideProbers() []string {
	var set []string
	for _, n := range k.names {
		if k.fs != nil && k.fs.Changed(n) {
			set = append(set, "--"+n)
		}
	}
	return set
}

// validate checks what needs no cluster: one workload flag at most, its
// form, and that it and -n do not name two namespaces. (A missing one is
// the command's to report: errNoWorkload.)
func (k *kubeFlags) validate() error {
	var given []string
	for _, kind := range rollout.WorkloadKinds {
		if v := k.workloads[kind]; v != nil && *v != "" {
			given = append(given, "--"+kind.Lower())
		}
	}
	if len(given) > 1 {
		return fmt.Errorf("%s: give one workload", strings.Join(given, " and "))
	}
	kind, value, ok := k.workload()
	if !ok {
		return nil
	}
	ref, err := rollout.ParseRef(kind, value, "")
	if err != nil {
		return field.Rename(err, map[string]string{string(kind): "--" + kind.Lower()})
	}
	if other := k.overrides.Context.Namespace; ref.Namespace != "" && other != "" && other != ref.Namespace {
		return fmt.Errorf("--%s %s and --namespace %s name two namespaces: give one", kind.Lower(), value, other)
	}
	return nil
}

// connection loads the kubeconfig with the flags' overrides: the client,
// its REST configuration and the namespace (-n or the context's).
func (k *kubeFlags) connection() (kubernetes.Interface, *rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.kubeconfig != "" {
		if _, err := os.Stat(k.kubeconfig); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is in the message already
			}
			return nil, nil, "", fmt.Errorf("--kubeconfig %s: %w", k.kubeconfig, err)
		}
		rules.ExplicitPath = k.kubeconfig
	}
	if k.requestTimeout < 0 {
		return nil, nil, "", fmt.Errorf("--kube-request-timeout %s: must not be negative", k.requestTimeout)
	}
	// The bound applies to each call through its context
	// (rollout.Bound), not to the HTTP client: a client timeout would also
	// cut the watches and the probers' attach streams, which live as long
	// as the run, and it raced the context, so that a call with no answer
	// sometimes said only "Client.Timeout exceeded".
	rollout.SetCallTimeout(k.requestTimeout)
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
	restCfg, err := loader.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		// client-go's own message names KUBERNETES_MASTER, which nothing
		// here reads; and it skips KUBECONFIG's files that do not exist
		// without a word.
		if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" && k.kubeconfig == "" {
			var missing []string
			for _, p := range filepath.SplitList(env) {
				if _, err := os.Stat(p); err != nil {
					missing = append(missing, p)
				}
			}
			switch {
			case len(missing) == 1 && missing[0] == env:
				return nil, nil, "", fmt.Errorf("no kubeconfig: KUBECONFIG=%s: no such file; pass --kubeconfig (or --server and --token)", env)
			case len(missing) > 0:
				return nil, nil, "", fmt.Errorf("no kubeconfig: KUBECONFIG=%s: no such file: %s; pass --kubeconfig (or --server and --token)", env, strings.Join(missing, ", "))
			}
			return nil, nil, "", fmt.Errorf("no kubeconfig: KUBECONFIG=%s names no cluster; pass --kubeconfig (or --server and --token)", env)
		}
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
	// An Argo Rollout is read through the dynamic client, carried along.
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	return rollout.WithDynamic(kube, dyn), restCfg, ns, nil
}

// client loads the kubeconfig and resolves the workload's namespace and
// name (a NS/ prefix on its flag wins over -n and the context's).
func (k *kubeFlags) client() (kube kubernetes.Interface, ref rollout.Ref, err error) {
	kube, _, ref, err = k.clientAndConfig()
	return kube, ref, err
}

// clientAndConfig is client with the REST configuration it was made from
// (attaching to pods needs it).
func (k *kubeFlags) clientAndConfig() (kube kubernetes.Interface, restCfg *rest.Config, ref rollout.Ref, err error) {
	var ns string
	if kube, restCfg, ns, err = k.connection(); err != nil {
		return nil, nil, rollout.Ref{}, err
	}
	kind, value, ok := k.workload()
	if !ok {
		return nil, nil, rollout.Ref{}, errNoWorkload
	}
	if ref, err = rollout.ParseRef(kind, value, ns); err != nil {
		return nil, nil, rollout.Ref{}, field.Rename(err, map[string]string{string(kind): "--" + kind.Lower()})
	}
	return kube, restCfg, ref, nil
}
