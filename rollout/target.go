package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// Target is the workload under test and the Service in front of it.
type Target struct {
	Namespace string
	Workload  Workload
	Service   *corev1.Service
	// ServicePort is the Service port the run's traffic reaches
	// (ServicePortOf), 0 when it cannot be told: readiness is judged on it.
	ServicePort int32
}

// ErrNameTheService: the Service in front of the Deployment cannot be
// found from its selector alone; the caller must name it.
var ErrNameTheService = errors.New("name the service to probe")

// GetWorkload reads the workload ref names.
func GetWorkload(ctx context.Context, kube kubernetes.Interface, ref Ref) (Workload, error) {
	ctx, cancel := Bound(ctx)
	defer cancel()
	var w Workload
	var err error
	apps := kube.AppsV1()
	switch ref.Kind {
	case KindStatefulSet:
		w.StatefulSet, err = apps.StatefulSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	case KindDaemonSet:
		w.DaemonSet, err = apps.DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	case KindRollout:
		w.Rollout, err = getRollout(ctx, kube, ref)
	default:
		w.Deployment, err = apps.Deployments(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	}
	err = CallError(ctx, err)
	if apierrors.IsUnexpectedServerError(err) {
		// doctor's and run's first look at the workload: an answer (a 404,
		// say) whose body is not the API's Status (a proxy's page, a web
		// server at the kubeconfig's address) says nothing of the workload.
		return Workload{}, fmt.Errorf("get %s: %w: the server's answer is not the Kubernetes API's (is the kubeconfig's server an API server? this host may not reach the address it names)", ref, err)
	}
	if apierrors.IsNotFound(err) {
		if ref.Kind == KindRollout && !rolloutsServed(kube) {
			return Workload{}, fmt.Errorf("%s: %w", ref, ErrNoArgoRollouts)
		}
		return Workload{}, fmt.Errorf("%s not found", ref)
	}
	if err != nil {
		return Workload{}, fmt.Errorf("get %s: %w", ref, err)
	}
	return w, nil
}

// Resolve fetches the workload and its Service. With service empty, the
// Service is the one whose selector matches the workload's pod template,
// a headless one only when no other does; none or several is an error
// naming the candidates.
func Resolve(ctx context.Context, kube kubernetes.Interface, ref Ref, service string) (*Target, error) {
	w, err := GetWorkload(ctx, kube, ref)
	if err != nil {
		return nil, err
	}
	ctx, cancel := Bound(ctx)
	defer cancel()
	ns, deployment := ref.Namespace, ref.Name
	d := w.Template()
	t := &Target{Namespace: ns, Workload: w}
	if service == "" && w.Rollout != nil {
		// The Service the strategy names and Argo points at the serving
		// ReplicaSet: blue/green's active, a canary's stable.
		if names := ArgoServices(w.Rollout); len(names) > 0 {
			service = names[0]
		}
	}
	if service != "" {
		svc, err := kube.CoreV1().Services(ns).Get(ctx, service, metav1.GetOptions{})
		err = CallError(ctx, err)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("service %s/%s not found", ns, service)
		}
		if err != nil {
			return nil, fmt.Errorf("get service %s/%s: %w", ns, service, err)
		}
		if !selects(svc, d, w.Rollout != nil) {
			return nil, fmt.Errorf("service %s/%s does not select the pods of %s %s (selector %v, pod labels %v)",
				ns, service, ref.Kind.Lower(), deployment, svc.Spec.Selector, d.Labels)
		}
		t.Service = svc
		return t, nil
	}
	list, err := kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list services in %s: %w", ns, CallError(ctx, err))
	}
	var matches []corev1.Service
	for _, s := range list.Items {
		if selects(&s, d, w.Rollout != nil) {
			matches = append(matches, s)
		}
	}
	// A StatefulSet's governing Service is headless (one DNS name per
	// pod, no address of its own): what clients reach is the other one.
	if len(matches) > 1 {
		var addressed []corev1.Service
		for _, m := range matches {
			if m.Spec.ClusterIP != corev1.ClusterIPNone {
				addressed = append(addressed, m)
			}
		}
		if len(addressed) > 0 {
			matches = addressed
		}
	}
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("no service in %s selects the pods of %s %s: %w", ns, ref.Kind.Lower(), deployment, ErrNameTheService)
	case 1:
		t.Service = &matches[0]
		return t, nil
	}
	names := make([]string, len(matches))
	for i, s := range matches {
		names[i] = s.Name
	}
	sort.Strings(names)
	return nil, fmt.Errorf("several services select the pods of %s %s (%s): %w", ref.Kind.Lower(), deployment, strings.Join(names, ", "), ErrNameTheService)
}

// selects reports whether the Service's selector matches the pod
// template's labels (a Service without selector selects nothing here).
// argo: the pods are an Argo Rollout's, whose controller adds its
// ArgoPodHashLabel to the Services it steers; the template has no such
// label, so that key is left out of the match.
func selects(svc *corev1.Service, tmpl *corev1.PodTemplateSpec, argo bool) bool {
	sel := svc.Spec.Selector
	if argo {
		if _, ok := sel[ArgoPodHashLabel]; ok {
			sel = maps.Clone(sel)
			delete(sel, ArgoPodHashLabel)
		}
	}
	if len(sel) == 0 {
		return false
	}
	return labels.SelectorFromSet(sel).Matches(labels.Set(tmpl.Labels))
}

// ErrNoArgoRollouts: the cluster serves no Rollout resource.
var ErrNoArgoRollouts = errors.New("the cluster serves no argoproj.io/v1alpha1 rollouts: Argo Rollouts' CRDs are not installed")

// getRollout reads a Rollout through the dynamic client.
func getRollout(ctx context.Context, kube kubernetes.Interface, ref Ref) (*ArgoRollout, error) {
	ri, err := rollouts(kube, ref.Namespace)
	if err != nil {
		return nil, err
	}
	u, err := ri.Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	r, err := ArgoRolloutFrom(u)
	if err != nil || r.Spec.WorkloadRef == nil {
		return r, err
	}
	return r, resolveTemplateRef(ctx, kube, r)
}

// resolveTemplateRef reads the pod template of a Rollout that takes it from
// another object (spec.workloadRef), and its selector when the Rollout has
// none, as Argo Rollouts' controller resolves them (rollout/templateref.go,
// v1.10.1: an apps Deployment or ReplicaSet, or a PodTemplate; any other
// kind it refuses): what the doctor's checks and the Service's match read.
func resolveTemplateRef(ctx context.Context, kube kubernetes.Interface, r *ArgoRollout) error {
	ref := r.Spec.WorkloadRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return fmt.Errorf("rollout %s: workloadRef apiVersion %q: %w", r.Name, ref.APIVersion, err)
	}
	var tmpl corev1.PodTemplateSpec
	var sel *metav1.LabelSelector
	var gen int64
	var replicas int32
	switch {
	case gv.Group == "apps" && ref.Kind == "Deployment":
		var d *appsv1.Deployment
		if d, err = kube.AppsV1().Deployments(r.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			tmpl, sel, gen, replicas = d.Spec.Template, d.Spec.Selector, d.Generation, replicasOrOne(d.Spec.Replicas)
		}
	case gv.Group == "apps" && ref.Kind == "ReplicaSet":
		var rs *appsv1.ReplicaSet
		if rs, err = kube.AppsV1().ReplicaSets(r.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			tmpl, sel, gen, replicas = rs.Spec.Template, rs.Spec.Selector, rs.Generation, replicasOrOne(rs.Spec.Replicas)
		}
	case gv.Group == "" && ref.Kind == "PodTemplate":
		var pt *corev1.PodTemplate
		if pt, err = kube.CoreV1().PodTemplates(r.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			tmpl, gen = pt.Template, pt.Generation
		}
	default:
		return fmt.Errorf("rollout %s: its workloadRef is a %s of %q, which Argo Rollouts does not resolve (a Deployment or ReplicaSet of apps/v1, or a PodTemplate)",
			r.Name, ref.Kind, ref.APIVersion)
	}
	if err = CallError(ctx, err); apierrors.IsNotFound(err) {
		return fmt.Errorf("rollout %s: its workloadRef %s %s/%s not found", r.Name, strings.ToLower(ref.Kind), r.Namespace, ref.Name)
	} else if err != nil {
		return fmt.Errorf("rollout %s: get its workloadRef %s %s/%s: %w", r.Name, strings.ToLower(ref.Kind), r.Namespace, ref.Name, err)
	}
	r.Spec.Template = tmpl
	if r.Spec.Selector == nil {
		r.Spec.Selector = sel
	}
	r.RefGeneration, r.RefReplicas = gen, replicas
	return nil
}

// rolloutsServed says whether discovery lists the Rollout resource (true
// when discovery itself cannot be read: the NotFound is then the object's).
func rolloutsServed(kube kubernetes.Interface) bool { return Served(kube, RolloutsGVR) }

// Served: the apiserver serves resource gvr (discovery, which every
// authenticated user may read). An error other than not found counts as
// served: the call that follows then says what is wrong.
func Served(kube kubernetes.Interface, gvr schema.GroupVersionResource) bool {
	list, err := kube.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		return !apierrors.IsNotFound(err)
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true
		}
	}
	return false
}

// PodSelector is the workload's pod selector as a string for list/watch.
func PodSelector(w Workload) (string, error) {
	sel, err := metav1.LabelSelectorAsSelector(w.Selector())
	if err != nil {
		return "", fmt.Errorf("%s selector: %w", w.Ref(), err)
	}
	return sel.String(), nil
}

// ServerVersion reads the cluster's Kubernetes version, bounded by ctx; the
// zero Version when it cannot be read (the advice then names both forms).
func ServerVersion(ctx context.Context, kube kubernetes.Interface) advice.Version {
	ctx, cancel := Bound(ctx)
	defer cancel()
	var info version.Info
	if rc := kube.Discovery().RESTClient(); rc != nil && !reflect.ValueOf(rc).IsNil() {
		body, err := rc.Get().AbsPath("/version").Do(ctx).Raw()
		if err != nil || json.Unmarshal(body, &info) != nil {
			return advice.Version{}
		}
	} else { // fake clientsets have no REST client
		v, err := kube.Discovery().ServerVersion()
		if err != nil {
			return advice.Version{}
		}
		info = *v
	}
	return advice.ParseVersion(strings.TrimRight(info.Major, "+") + "." + info.Minor)
}

// DefaultCallTimeout bounds one Kubernetes API call (or one short sequence
// of them): a server that accepts connections and never answers must not
// hang a command. Watches are not calls: their bound is the run's.
const DefaultCallTimeout = 30 * time.Second

// callTimeout is the bound in force (SetCallTimeout).
var callTimeout atomic.Int64

// SetCallTimeout sets the bound of each API call for this process (the
// command's kube request timeout); 0 or less restores the default. Set it
// before any call.
func SetCallTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultCallTimeout
	}
	callTimeout.Store(int64(d))
}

// CallTimeout is the bound of each API call in force.
func CallTimeout() time.Duration {
	if d := callTimeout.Load(); d > 0 {
		return time.Duration(d)
	}
	return DefaultCallTimeout
}

// ErrNoAnswer is the cause of a call that got no answer within its bound:
// errors.Is finds it in what Bounded returns, for the command to say how
// to change the bound.
var ErrNoAnswer = errors.New("no answer from the Kubernetes API server")

// Bound gives ctx the call timeout unless it already ends sooner; its
// cause, when it ends, is ErrNoAnswer (CallError puts it in the error).
func Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	d := CallTimeout()
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("%w within %s, the bound of each API call", ErrNoAnswer, d))
}

// CallError is err from a call made with a context from Bound: when that
// bound ended it, the error says so (client-go's own says only "context
// deadline exceeded", which names neither the call's bound nor the
// server's silence), and errors.Is(err, ErrNoAnswer) holds.
func CallError(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	cause := context.Cause(ctx)
	switch {
	case !errors.Is(cause, ErrNoAnswer), errors.Is(err, ErrNoAnswer):
		return err
	case strings.Contains(err.Error(), cause.Error()): // net/http quotes the cause itself
		return noAnswer{err}
	}
	return fmt.Errorf("%w (%w)", cause, err)
}

// noAnswer is an error whose text already says the call got no answer.
type noAnswer struct{ error }

func (e noAnswer) Unwrap() error        { return e.error }
func (e noAnswer) Is(target error) bool { return target == ErrNoAnswer }

// EntryOf says how a target URL reaches svc: at its cluster IP and port
// (by address, or by the Service's own cluster DNS name, NAME.NS.svc or
// NAME.NS.svc.ZONE, which resolves to it), at a node's address and one of
// its node ports (nodeIPs maps node addresses to node names, as
// Watcher.NodeIPs gives them), or at a load balancer ingress IP of its
// status; nil when none matches (another name, an address of nothing the
// run saw: an ingress, a proxy). Shorter names (NAME, NAME.NS) are left
// unknown: what they resolve to depends on the resolver's search list,
// which differs between the CLI's host and a prober pod. A headless
// Service's name resolves to pod addresses, not a cluster IP: nil.
func EntryOf(svc *corev1.Service, target *url.URL, nodeIPs map[string]string) *report.Entry {
	if svc == nil || target == nil {
		return nil
	}
	host := target.Hostname()
	port := prober.URLPort(target)
	clusterIP := host == svc.Spec.ClusterIP || slices.Contains(svc.Spec.ClusterIPs, host) ||
		(clusterDNSName(svc, host) && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone)
	for _, sp := range svc.Spec.Ports {
		if int(sp.Port) == port && clusterIP {
			return &report.Entry{Via: report.ViaClusterIP, Port: sp.Port}
		}
		if sp.NodePort != 0 && int(sp.NodePort) == port {
			if node, ok := nodeIPs[host]; ok {
				return &report.Entry{Via: report.ViaNodePort, Node: node, Port: sp.NodePort}
			}
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if int(sp.Port) == port && ing.IP != "" && ing.IP == host {
				return &report.Entry{Via: report.ViaLoadBalancer, Port: sp.Port}
			}
		}
	}
	return nil
}

// clusterDNSName: host is svc's fully qualified cluster DNS name,
// NAME.NS.svc, or it followed by the cluster's zone.
func clusterDNSName(svc *corev1.Service, host string) bool {
	name := svc.Name + "." + svc.Namespace + ".svc"
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return svc.Name != "" && svc.Namespace != "" && (host == name || strings.HasPrefix(host, name+"."))
}
