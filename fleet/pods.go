package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Labels on every prober pod: what it is, and which run made it (so a
// leftover can be found and removed by hand: kubectl delete pod -l ...).
const (
	LabelName = "app.kubernetes.io/name"
	LabelRun  = "rollprobe.io/run"
	// LabelPath is the index of the path a prober probes, on the pods of
	// a run that probes several side by side.
	LabelPath = "rollprobe.io/path"
	NameValue = "rollprobe-prober"
	// Container is the prober's container name.
	Container = "prober"
)

// PodSpec is how the prober pods are made.
type PodSpec struct {
	Namespace string
	Image     string
	RunID     string
	// Count is how many probers probe each path.
	Count int
	// Paths is how many paths are probed side by side (0 or 1: one
	// target): Count pods for each, pod i probing path i / Count.
	Paths int
	// MaxDuration bounds a prober's run if the CLI vanishes; the pod's
	// activeDeadlineSeconds (MaxDuration plus a margin) bounds the pod.
	MaxDuration time.Duration
	// StartTimeout bounds the wait for every pod to run (and each agent's
	// wait for the start).
	StartTimeout time.Duration
	// Conntrack puts the probers on their node's network, as root with
	// CAP_NET_ADMIN, to read conntrack there: where kube-proxy rewrote
	// each connection's Service address (run --probers-conntrack). It
	// needs a namespace whose policy admits such pods (PodSecurity
	// "privileged").
	Conntrack bool
}

// deadlineMargin is how long past MaxDuration a prober pod may live: its
// agent stops by itself at MaxDuration; the margin covers the start.
const deadlineMargin = 5 * time.Minute

// pod is the i-th prober pod of the run. It needs no ServiceAccount token
// (the agent talks to nobody but the target) and runs as an unprivileged
// user on a read-only root; probers spread over the nodes, one per node
// while there are nodes to spread over. With Conntrack it runs on the
// node's network as root with CAP_NET_ADMIN alone (Kubernetes gives added
// capabilities to root only), and resolves names through the cluster's
// DNS still.
func (s PodSpec) pod(i int) *corev1.Pod {
	p := s.basePod(i)
	if s.Conntrack {
		p.Spec.HostNetwork = true
		p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To(int64(0))}
		c := &p.Spec.Containers[0]
		c.SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		c.Args = append(c.Args, "--conntrack")
	}
	return p
}

// pods is how many prober pods the run has.
func (s PodSpec) pods() int { return s.Count * max(1, s.Paths) }

// pathOf is the index of the path pod i probes.
func (s PodSpec) pathOf(i int) int {
	if s.Paths < 2 || s.Count < 1 {
		return 0
	}
	return i / s.Count
}

func (s PodSpec) basePod(i int) *corev1.Pod {
	selector := map[string]string{LabelName: NameValue, LabelRun: s.RunID}
	if s.Paths > 1 {
		// Each path's probers spread over the nodes as one target's do.
		selector[LabelPath] = strconv.Itoa(s.pathOf(i))
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: fmt.Sprintf("rollprobe-%s-%d-", s.RunID, i),
			Namespace:    s.Namespace,
			Labels:       maps.Clone(selector),
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptr.To(int64((s.MaxDuration + deadlineMargin).Seconds())),
			TerminationGracePeriodSeconds: ptr.To(int64(10)),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
			}},
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532))},
			Containers: []corev1.Container{{
				Name:  Container,
				Image: s.Image,
				// A release's tag never changes; a node that has the image
				// (a lab, a pre-pulled node) need not reach a registry.
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args: []string{"fleet-agent", "--run-id", fmt.Sprintf("%s.%d", s.RunID, i+1),
					"--max-duration", s.MaxDuration.String(), "--start-timeout", s.StartTimeout.String()},
				Stdin: true, // the CLI's commands (attach): nothing secret goes into the spec
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// ErrProberStart is a prober pod that did not run within the start
// timeout (a bad image, no capacity): a usage error, nothing triggered.
var ErrProberStart = errors.New("prober pods did not start")

// Pod is a running prober pod.
type Pod struct {
	Name, Node string
}

// launch creates the prober pods and waits until every one runs. On any
// error it deletes what it created before returning.
func launch(ctx context.Context, kube kubernetes.Interface, s PodSpec) (pods []Pod, err error) {
	var created []string
	defer func() {
		if err != nil {
			deletePods(kube, s.Namespace, s.RunID)
		}
	}()
	if s.Conntrack {
		if err := admitted(ctx, kube, s); err != nil {
			return nil, err
		}
	}
	for i := range s.pods() {
		p, err := kube.CoreV1().Pods(s.Namespace).Create(ctx, s.pod(i), metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create prober pod: %w", err)
		}
		created = append(created, p.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, s.StartTimeout)
	defer cancel()
	running, err := waitRunning(ctx, kube, s, created)
	if err != nil {
		return nil, err
	}
	for _, name := range created {
		pods = append(pods, running[name])
	}
	return pods, nil
}

// ErrProberPolicy is a prober pod the cluster's admission refused (a
// PodSecurity level below privileged for a host-network pod): a usage
// error, nothing created.
var ErrProberPolicy = errors.New("the cluster's policy refuses the prober pods")

// admitted asks the API server, with a dry run, whether it would admit a
// prober pod: PodSecurity and any other admission webhook answer as for
// a real one, and nothing is created.
func admitted(ctx context.Context, kube kubernetes.Interface, s PodSpec) error {
	_, err := kube.CoreV1().Pods(s.Namespace).Create(ctx, s.pod(0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		return fmt.Errorf("%w in namespace %s: --probers-conntrack runs them on the node's network as root with NET_ADMIN, which only a "+
			"namespace with PodSecurity level privileged admits (kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged, "+
			"or --prober-namespace for one that has it); without --probers-conntrack the probers need no privilege: %w",
			ErrProberPolicy, s.Namespace, s.Namespace, err)
	}
	return fmt.Errorf("a dry run of a prober pod: %w", err)
}

// waitRunning watches the run's pods until every one of names runs, one
// fails, or ctx ends; the error names each pod that is not running and why.
func waitRunning(ctx context.Context, kube kubernetes.Interface, s PodSpec, names []string) (map[string]Pod, error) {
	sel := labels.SelectorFromSet(map[string]string{LabelName: NameValue, LabelRun: s.RunID}).String()
	list, err := kube.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list prober pods: %w", err)
	}
	last := map[string]*corev1.Pod{}
	for i := range list.Items {
		last[list.Items[i].Name] = &list.Items[i]
	}
	w, err := kube.CoreV1().Pods(s.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("watch prober pods: %w", err)
	}
	defer w.Stop()
	for {
		running := map[string]Pod{}
		for _, name := range names {
			p := last[name]
			if p == nil {
				continue
			}
			if why := failedToStart(p); why != "" {
				return nil, fmt.Errorf("%w: %s: %s", ErrProberStart, name, why)
			}
			if p.Status.Phase == corev1.PodRunning {
				running[name] = Pod{Name: name, Node: p.Spec.NodeName}
			}
		}
		if len(running) == len(names) {
			return running, nil
		}
		select {
		case <-ctx.Done():
			var waiting []string
			for _, name := range names {
				if _, ok := running[name]; !ok {
					waiting = append(waiting, name+" ("+pendingReason(last[name])+")")
				}
			}
			return nil, fmt.Errorf("%w within %v: %s", ErrProberStart, s.StartTimeout, strings.Join(waiting, ", "))
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("watch prober pods: closed")
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod {
				if ev.Type == watch.Deleted {
					return nil, fmt.Errorf("%w: %s was deleted", ErrProberStart, p.Name)
				}
				last[p.Name] = p
			}
		}
	}
}

// failedToStart is why a pod will not run (a pull that failed, a
// container that ended), or "" while it may still.
func failedToStart(p *corev1.Pod) string {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return fmt.Sprintf("phase %s %s", p.Status.Phase, p.Status.Reason)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError":
				return strings.TrimSpace(w.Reason + ": " + w.Message)
			}
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("container ended: %s (exit %d)", t.Reason, t.ExitCode)
		}
	}
	return ""
}

// pendingReason is what a pod is waiting for.
func pendingReason(p *corev1.Pod) string {
	if p == nil {
		return "not seen"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace("unschedulable: " + c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return strings.TrimSpace(w.Reason + " " + w.Message)
		}
	}
	return string(p.Status.Phase)
}

// deletePods removes every prober pod of the run, whatever the context:
// cleanup must also run after a Ctrl-C. It waits for nothing (the pods
// end within their grace period).
func deletePods(kube kubernetes.Interface, namespace, runID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sel := labels.SelectorFromSet(map[string]string{LabelName: NameValue, LabelRun: runID}).String()
	list, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list prober pods to delete: %w", err)
	}
	var errs []error
	for _, p := range list.Items {
		err := kube.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete prober pod %s: %w", p.Name, err))
		}
	}
	return errors.Join(errs...)
}
