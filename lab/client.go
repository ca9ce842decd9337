package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// Client talks to the lab's apiserver from outside the lab's namespaces.
type Client struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Config  *rest.Config
}

// NewClient builds an admin client whose connections are made inside the
// hub namespace (the control-plane host).
func NewClient(stateDir string) (*Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", Config{StateDir: stateDir}.KubeconfigPath())
	if err != nil {
		return nil, fmt.Errorf("lab kubeconfig: %w (is the lab up?)", err)
	}
	cfg.Dial = netns.DialContextIn(netns.LabNetNS)
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{Kube: kube, Dynamic: dyn, Config: cfg}, nil
}

// waitNodesReady waits until every named node is Ready and schedulable
// (the node-lifecycle controller has removed the not-ready taint).
func (c *Client) waitNodesReady(ctx context.Context, names []string, limit time.Duration) error {
	waiting := names
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		waiting = nil
		for _, name := range names {
			n, err := c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !nodeSchedulable(n) {
				waiting = append(waiting, name)
			}
		}
		return len(waiting) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready: %v: %w (see their kubelet logs)", waiting, err)
	}
	return nil
}

func nodeSchedulable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (c *Client) waitServiceAccount(ctx context.Context, limit time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		_, err := c.Kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// customKinds are the kinds outside client-go's scheme that lab apply
// handles (through the dynamic client): the Gateway API's routes,
// Traefik's own routes, weighted services, middlewares and transports,
// and Argo Rollouts' Rollouts and AnalysisTemplates.
var customKinds = map[schema.GroupVersionKind]string{
	{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}: "httproutes",
	{Group: "traefik.io", Version: "v1alpha1", Kind: "IngressRoute"}:       "ingressroutes",
	{Group: "traefik.io", Version: "v1alpha1", Kind: "TraefikService"}:     "traefikservices",
	{Group: "traefik.io", Version: "v1alpha1", Kind: "Middleware"}:         "middlewares",
	{Group: "traefik.io", Version: "v1alpha1", Kind: "ServersTransport"}:   "serverstransports",
	{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"}:           "rollouts",
	{Group: "argoproj.io", Version: "v1alpha1", Kind: "AnalysisTemplate"}:  "analysistemplates",
}

// Apply creates or updates every Deployment, StatefulSet, DaemonSet,
// Service, PodDisruptionBudget, Ingress and customKinds object in the YAML
// stream (the samples' kinds) in namespace ns unless the object names its
// own.
// It returns the names of what it applied ("deployment/naive", ...).
func (c *Client) Apply(ctx context.Context, r io.Reader, ns string) ([]string, error) {
	objs, err := decodeManifests(r)
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, obj := range objs {
		meta, ok := obj.(metav1.Object)
		if !ok {
			return applied, fmt.Errorf("lab apply: %T has no metadata", obj)
		}
		if meta.GetNamespace() == "" {
			meta.SetNamespace(ns)
		}
		var kind string
		switch o := obj.(type) {
		case *appsv1.Deployment:
			kind = "deployment"
			api := c.Kube.AppsV1().Deployments(o.Namespace)
			err = upsert(ctx, o, api.Get, api.Create, api.Update, nil)
		case *appsv1.StatefulSet:
			kind = "statefulset"
			api := c.Kube.AppsV1().StatefulSets(o.Namespace)
			err = upsert(ctx, o, api.Get, api.Create, api.Update, nil)
		case *appsv1.DaemonSet:
			kind = "daemonset"
			api := c.Kube.AppsV1().DaemonSets(o.Namespace)
			err = upsert(ctx, o, api.Get, api.Create, api.Update, nil)
		case *corev1.Service:
			kind = "service"
			api := c.Kube.CoreV1().Services(o.Namespace)
			// A Service's ClusterIP is immutable: keep the one it has.
			keepIP := func(cur, o *corev1.Service) {
				o.Spec.ClusterIP, o.Spec.ClusterIPs = cur.Spec.ClusterIP, cur.Spec.ClusterIPs
			}
			err = upsert(ctx, o, api.Get, api.Create, api.Update, keepIP)
		case *policyv1.PodDisruptionBudget:
			kind = "poddisruptionbudget"
			api := c.Kube.PolicyV1().PodDisruptionBudgets(o.Namespace)
			err = upsert(ctx, o, api.Get, api.Create, api.Update, nil)
		case *networkingv1.Ingress:
			kind = "ingress"
			api := c.Kube.NetworkingV1().Ingresses(o.Namespace)
			err = upsert(ctx, o, api.Get, api.Create, api.Update, nil)
		case *unstructured.Unstructured:
			kind = strings.ToLower(o.GetKind())
			api := c.Dynamic.Resource(o.GroupVersionKind().GroupVersion().WithResource(customKinds[o.GroupVersionKind()])).Namespace(o.GetNamespace())
			get := func(ctx context.Context, name string, opts metav1.GetOptions) (*unstructured.Unstructured, error) {
				return api.Get(ctx, name, opts)
			}
			create := func(ctx context.Context, u *unstructured.Unstructured, opts metav1.CreateOptions) (*unstructured.Unstructured, error) {
				return api.Create(ctx, u, opts)
			}
			update := func(ctx context.Context, u *unstructured.Unstructured, opts metav1.UpdateOptions) (*unstructured.Unstructured, error) {
				return api.Update(ctx, u, opts)
			}
			err = upsert(ctx, o, get, create, update, nil)
		default:
			return applied, fmt.Errorf("lab apply handles Deployments, StatefulSets, DaemonSets, Services, PodDisruptionBudgets, Ingresses, HTTPRoutes, Traefik's IngressRoutes, TraefikServices, Middlewares and ServersTransports, and Argo Rollouts and AnalysisTemplates, not %T (for anything else: rollprobe lab exec -- kubectl apply -f FILE)", obj)
		}
		if err != nil {
			return applied, fmt.Errorf("%s %s: %w", kind, meta.GetName(), err)
		}
		applied = append(applied, kind+"/"+meta.GetName())
	}
	return applied, nil
}

// upsert creates obj, or updates the existing object of its name (with its
// resourceVersion, after carry copies what the server owns from it). A
// controller that writes the object between the read and the update makes
// the update conflict (the disruption controller updating a
// PodDisruptionBudget's status while the pods it counts go, as the lab's
// test met re-applying a sample whose Deployment it had just deleted): the
// object is read again and the update tried again, up to
// retry.DefaultRetry's 5 times.
func upsert[T metav1.Object](ctx context.Context, obj T,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	carry func(cur, obj T),
) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := get(ctx, obj.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = create(ctx, obj, metav1.CreateOptions{})
		case err == nil:
			obj.SetResourceVersion(cur.GetResourceVersion())
			if carry != nil {
				carry(cur, obj)
			}
			_, err = update(ctx, obj, metav1.UpdateOptions{})
		}
		return err
	})
}

// decodeManifests parses a multi-document YAML stream into typed objects.
func decodeManifests(r io.Reader) ([]runtime.Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	decode := scheme.Codecs.UniversalDeserializer().Decode
	var objs []runtime.Object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		j, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		if _, ok := customKinds[u.GroupVersionKind()]; ok {
			objs = append(objs, u)
			continue
		}
		obj, _, err := decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		objs = append(objs, obj)
	}
}

// ApplyFile applies a manifest file.
func (c *Client) ApplyFile(ctx context.Context, path, ns string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return c.Apply(ctx, f, ns)
}
