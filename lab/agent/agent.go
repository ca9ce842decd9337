// Package agent is the lab's node agent: the part of a kubelet that matters
// for rollouts. It registers the lab's node, binds pending pods to it (the
// lab has no scheduler), runs each container as a process in the pod's own
// network namespace, runs probes, reports status, and terminates pods
// exactly as the kubelet does (preStop within the grace period, SIGTERM, the
// rest of the grace period but at least 2 s, SIGKILL).
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Config is what the agent needs.
type Config struct {
	Node     string
	NodeIP   string
	PodCIDR  string
	StateDir string
	// Images maps an image repository to the binary that runs as it.
	Images map[string]string
	Log    *slog.Logger
}

// Agent runs pods on the lab's node.
type Agent struct {
	cfg  Config
	kube kubernetes.Interface
	ips  *ipPool

	mu   sync.Mutex
	pods map[types.UID]*podRunner
}

// New makes an agent.
func New(cfg Config, kube kubernetes.Interface) (*Agent, error) {
	pool, err := newIPPool(cfg.PodCIDR, cfg.NodeIP)
	if err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, kube: kube, ips: pool, pods: map[types.UID]*podRunner{}}, nil
}

// Run registers the node and serves pods until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.registerNode(ctx); err != nil {
		return err
	}
	go a.heartbeat(ctx)

	factory := informers.NewSharedInformerFactory(a.kube, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	_, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.sync(ctx, obj) },
		UpdateFunc: func(_, obj any) { a.sync(ctx, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				a.mu.Lock()
				r := a.pods[pod.UID]
				a.mu.Unlock()
				if r != nil {
					// Deleted from under us (force delete): stop at once.
					r.update(pod, true)
				}
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	// Leave running pods alone: lab down ends them by PID and namespace.
	return nil
}

func (a *Agent) sync(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	log := a.cfg.Log.With("pod", pod.Namespace+"/"+pod.Name)
	if pod.Spec.NodeName == "" {
		if pod.DeletionTimestamp == nil {
			a.bind(ctx, pod, log)
		}
		return
	}
	if pod.Spec.NodeName != a.cfg.Node {
		return
	}
	a.mu.Lock()
	r := a.pods[pod.UID]
	if r == nil && pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		r = newPodRunner(a, pod, log)
		a.pods[pod.UID] = r
		a.mu.Unlock()
		go func() {
			r.run(ctx)
			a.mu.Lock()
			delete(a.pods, pod.UID)
			a.mu.Unlock()
		}()
		return
	}
	a.mu.Unlock()
	if r != nil {
		r.update(pod, false)
		return
	}
	if pod.DeletionTimestamp != nil {
		// A pod we do not run (never started, or from before a restart).
		_ = a.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
	}
}

func (a *Agent) bind(ctx context.Context, pod *corev1.Pod, log *slog.Logger) {
	err := a.kube.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: a.cfg.Node},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsConflict(err) {
		log.Warn("bind failed", "err", err)
	}
}

func (a *Agent) registerNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: a.cfg.Node, Labels: map[string]string{
			"kubernetes.io/hostname": a.cfg.Node, "kubernetes.io/os": "linux",
		}},
		Spec: corev1.NodeSpec{PodCIDR: a.cfg.PodCIDR, PodCIDRs: []string{a.cfg.PodCIDR}},
	}
	api := a.kube.CoreV1().Nodes()
	cur, err := api.Get(ctx, a.cfg.Node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if cur, err = api.Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("register node: %w", err)
		}
	case err != nil:
		return fmt.Errorf("register node: %w", err)
	}
	return a.updateNodeStatus(ctx, cur)
}

func (a *Agent) updateNodeStatus(ctx context.Context, node *corev1.Node) error {
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("200"),
	}
	transition := now
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			transition = c.LastTransitionTime
		}
	}
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: a.cfg.NodeIP},
		{Type: corev1.NodeHostName, Address: a.cfg.Node},
	}
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "rollprobe lab node agent is posting ready status", LastHeartbeatTime: now, LastTransitionTime: transition,
	}}
	node.Status.NodeInfo.KubeletVersion = "v1.36.3-rollprobe-lab"
	_, err := a.kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	return nil
}

// heartbeat renews the node's Lease and Ready condition every 10 s, as the
// kubelet does.
func (a *Agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		a.renewLease(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if node, err := a.kube.CoreV1().Nodes().Get(ctx, a.cfg.Node, metav1.GetOptions{}); err == nil {
			if err := a.updateNodeStatus(ctx, node); err != nil {
				a.cfg.Log.Warn("node status", "err", err)
			}
		}
	}
}

func (a *Agent) renewLease(ctx context.Context) {
	api := a.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := api.Get(ctx, a.cfg.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.cfg.Node, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(a.cfg.Node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now,
			},
		}, metav1.CreateOptions{})
	} else if err == nil {
		lease.Spec.RenewTime = &now
		_, err = api.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil && ctx.Err() == nil {
		a.cfg.Log.Warn("lease", "err", err)
	}
}

// ipPool hands out pod addresses from the node's pod CIDR round-robin, as
// the host-local IPAM plugin does: an address just released is the last to
// be reused, so a new pod does not inherit a vanished pod's address while
// neighbour caches and connections still remember it.
type ipPool struct {
	mu   sync.Mutex
	base net.IP
	used map[int]bool
	last int
}

func newIPPool(cidr, nodeIP string) (*ipPool, error) {
	ipAddr, ipNet, err := net.ParseCIDR(cidr)
	if err != nil || ipAddr.To4() == nil {
		return nil, fmt.Errorf("pod CIDR %q: want an IPv4 /24", cidr)
	}
	p := &ipPool{base: ipNet.IP.To4(), used: map[int]bool{}}
	if n := net.ParseIP(nodeIP).To4(); n != nil {
		p.used[int(n[3])] = true
	}
	return p, nil
}

// Host numbers handed to pods.
const firstHost, lastHost = 10, 254

// get returns the next free address after the last one handed out.
func (p *ipPool) get() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last < firstHost {
		p.last = firstHost - 1
	}
	for n := 0; n <= lastHost-firstHost; n++ {
		i := firstHost + (p.last-firstHost+1+n)%(lastHost-firstHost+1)
		if !p.used[i] {
			p.used[i], p.last = true, i
			return net.IPv4(p.base[0], p.base[1], p.base[2], byte(i)).String(), nil
		}
	}
	return "", fmt.Errorf("pod CIDR exhausted")
}

func (p *ipPool) put(addr string) {
	if ip := net.ParseIP(addr).To4(); ip != nil {
		p.mu.Lock()
		delete(p.used, int(ip[3]))
		p.mu.Unlock()
	}
}
