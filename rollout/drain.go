package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/report"
)

// Drain is kubectl drain NODE --ignore-daemonsets --delete-emptydir-data
// as the trigger: cordon the node, then evict every pod on it through the
// Eviction API, which honours PodDisruptionBudgets. An eviction a budget
// refuses (429) is tried again every EvictionRetry, as kubectl does, until
// it is allowed or the run ends. DaemonSet pods and mirror pods stay (as
// with --ignore-daemonsets); a pod no controller would replace stops the
// drain before anything changes (kubectl wants --force for it: rollprobe
// does not delete what nothing brings back).
//
// The workload the run names is the one whose pods and Service are
// watched and probed; the drain evicts every pod of the node, whatever
// owns it. The node stays cordoned unless Uncordon.
type Drain struct {
	Node     string
	Uncordon bool
	// Record, when set, receives an event for each eviction accepted,
	// refused, failed or overtaken by another hand (the runner sets its
	// timeline's).
	Record func(report.Event)
}

// EvictionRetry is how long a drain waits before it asks again for an
// eviction a PodDisruptionBudget refused (kubectl drain's 5 s).
var EvictionRetry = 5 * time.Second

// MirrorPodAnnotation marks a static pod's mirror: the kubelet owns it.
const MirrorPodAnnotation = corev1.MirrorPodAnnotationKey

func (d Drain) Describe() string {
	return fmt.Sprintf("drain node %s (kubectl drain --ignore-daemonsets --delete-emptydir-data)", d.Node)
}

// Verbs: a drain writes no workload.
func (Drain) Verbs() []string { return nil }

// ClusterPermissions are what a drain needs beyond the namespace: read and
// cordon the node, list its pods in every namespace, evict them.
func (Drain) ClusterPermissions() []Permission {
	return []Permission{
		{Verb: "get", Resource: "nodes"}, {Verb: "patch", Resource: "nodes"},
		{Verb: "list", Resource: "pods"},
		{Verb: "create", Resource: "pods", Subresource: "eviction"},
	}
}

// Prepare checks, changing nothing, that the node exists and that every pod
// a drain would evict has a controller to replace it.
func (d Drain) Prepare(ctx context.Context, kube kubernetes.Interface) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	if _, err := kube.CoreV1().Nodes().Get(ctx, d.Node, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("--drain: node %s not found", d.Node)
		}
		return fmt.Errorf("--drain: get node %s: %w", d.Node, CallError(ctx, err))
	}
	pods, err := d.podsToEvict(ctx, kube)
	if err != nil {
		return err
	}
	var unmanaged []string
	for _, p := range pods {
		if metav1.GetControllerOf(&p) == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			unmanaged = append(unmanaged, p.Namespace+"/"+p.Name)
		}
	}
	if len(unmanaged) > 0 {
		sort.Strings(unmanaged)
		return fmt.Errorf("--drain %s: pods no controller would replace: %s (kubectl drain refuses them without --force; move or delete them first)",
			d.Node, strings.Join(unmanaged, ", "))
	}
	return nil
}

// podsToEvict lists the node's pods a drain evicts: all but DaemonSet
// pods and mirror pods.
func (d Drain) podsToEvict(ctx context.Context, kube kubernetes.Interface) ([]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", d.Node).String()})
	if err != nil {
		return nil, fmt.Errorf("--drain: list the pods of node %s: %w", d.Node, CallError(ctx, err))
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Spec.NodeName != d.Node {
			continue // the field selector's job, checked here too
		}
		if _, mirror := p.Annotations[MirrorPodAnnotation]; mirror {
			continue
		}
		if c := metav1.GetControllerOf(&p); c != nil && c.Kind == "DaemonSet" {
			continue
		}
		if p.DeletionTimestamp != nil {
			continue // already going
		}
		out = append(out, p)
	}
	return out, nil
}

// Cordon marks the node unschedulable (or schedulable again with false).
func Cordon(ctx context.Context, kube kubernetes.Interface, node string, unschedulable bool) error {
	ctx, cancel := Bound(ctx)
	defer cancel()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": unschedulable}})
	if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cordon node %s: %w", node, CallError(ctx, err))
	}
	return nil
}

// Fire cordons the node and evicts its pods, all at once as kubectl does,
// each retried while a budget refuses it; it returns once every eviction
// has ended: nil when each was accepted (the pods then terminate) or its
// pod went otherwise, else an eviction's own error in preference to the
// context's that cut the others short.
func (d Drain) Fire(ctx context.Context, kube kubernetes.Interface, ref Ref) error {
	if err := Cordon(ctx, kube, d.Node, true); err != nil {
		return err
	}
	list, cancel := Bound(ctx)
	pods, err := d.podsToEvict(list, kube)
	cancel()
	if err != nil {
		return err
	}
	budgets := readBudgets(ctx, kube, ref.Namespace)
	errs := make(chan error, len(pods))
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- d.evict(ctx, kube, p, budgets)
		}()
	}
	wg.Wait()
	close(errs)
	// An eviction's own failure says more than the end that cut the
	// others short.
	var first error
	for err := range errs {
		switch {
		case err == nil:
		case ctx.Err() == nil || !errors.Is(err, ctx.Err()):
			return err
		case first == nil:
			first = err
		}
	}
	return first
}

// budgetsRead are the PodDisruptionBudgets of the workload's namespace as
// the drain began: what let each of its evictions through. Only that
// namespace's: the Service's pods are there, and the run may read budgets
// nowhere else.
type budgetsRead struct {
	namespace string
	pdbs      []policyv1.PodDisruptionBudget
	err       error
}

func readBudgets(ctx context.Context, kube kubernetes.Interface, namespace string) budgetsRead {
	b := budgetsRead{namespace: namespace}
	if namespace == "" {
		return b
	}
	call, cancel := Bound(ctx)
	defer cancel()
	list, err := kube.PolicyV1().PodDisruptionBudgets(namespace).List(call, metav1.ListOptions{})
	if err != nil {
		b.err = fmt.Errorf("list poddisruptionbudgets: %w", CallError(call, err))
		return b
	}
	b.pdbs = list.Items
	return b
}

// of describes the budgets that select p, and whether they are known (p
// is in the namespace read, and reading worked).
func (b budgetsRead) of(p *corev1.Pod) (budgets []string, known bool) {
	if p.Namespace != b.namespace || b.namespace == "" || b.err != nil {
		return nil, false
	}
	for _, pdb := range b.pdbs {
		if BudgetSelects(&pdb, labels.Set(p.Labels)) {
			budgets = append(budgets, describeBudget(&pdb))
		}
	}
	return budgets, true
}

// BudgetSelects says whether the budget's selector selects a pod with
// these labels, as the policy/v1 disruption controller reads it: a nil
// selector selects nothing, an empty one ({}) every pod of the budget's
// namespace (policy/v1beta1 read {} as nothing; policy/v1 changed it).
// An invalid selector selects nothing.
func BudgetSelects(pdb *policyv1.PodDisruptionBudget, podLabels labels.Set) bool {
	if pdb.Spec.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	return err == nil && sel.Matches(podLabels)
}

// describeBudget is a budget's name and what its spec keeps, with the
// disruptions its status allowed when read: "web (maxUnavailable: 2; 2
// disruptions allowed)".
func describeBudget(pdb *policyv1.PodDisruptionBudget) string {
	keep := "neither minAvailable nor maxUnavailable"
	switch {
	case pdb.Spec.MinAvailable != nil:
		keep = "minAvailable: " + pdb.Spec.MinAvailable.String()
	case pdb.Spec.MaxUnavailable != nil:
		keep = "maxUnavailable: " + pdb.Spec.MaxUnavailable.String()
	}
	allowed := fmt.Sprintf("%d disruptions allowed", pdb.Status.DisruptionsAllowed)
	if pdb.Status.DisruptionsAllowed == 1 {
		allowed = "1 disruption allowed"
	}
	return fmt.Sprintf("%s (%s; %s)", pdb.Name, keep, allowed)
}

// evict asks for one pod's eviction until it is accepted, the pod is gone,
// another error answers or ctx ends. It records the first refusal of each
// kind, the acceptance with the budgets that let it through (or, for a pod
// another hand was already deleting, eviction_overtaken), an error that
// ends it (eviction_failed), and at ctx's end what became of the pod
// (lastLook).
func (d Drain) evict(ctx context.Context, kube kubernetes.Interface, p corev1.Pod, budgets budgetsRead) error {
	refused := ""
	for {
		call, cancel := Bound(ctx)
		err := kube.CoreV1().Pods(p.Namespace).EvictV1(call, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		err = CallError(call, err)
		cancel()
		switch {
		case err == nil:
			if refused != "" && d.overtaken(ctx, kube, p) {
				return nil
			}
			e := report.Event{Kind: report.PodEvicted, Pod: p.Name, Node: d.Node, Revision: PodRevision(&p),
				Detail: fmt.Sprintf("pod %s/%s evicted from node %s", p.Namespace, p.Name, d.Node)}
			if bs, known := budgets.of(&p); known {
				e.Budgets = bs
				switch {
				case len(bs) > 0 && refused != "":
					// The budgets were read when the drain began; they
					// refused this pod since, so their status as read
					// then is not what let it go now.
					e.Detail += "; PodDisruptionBudget " + strings.Join(bs, ", ") + " let it go once it allowed a disruption, after refusing it (its status as read when the drain began)"
				case len(bs) > 0:
					e.Detail += "; PodDisruptionBudget " + strings.Join(bs, ", ") + " let it go"
				}
			} else if budgets.err != nil && p.Namespace == budgets.namespace {
				e.Detail += fmt.Sprintf("; its PodDisruptionBudgets unknown (%v)", budgets.err)
			}
			d.record(e)
			return nil
		case apierrors.IsNotFound(err):
			if refused != "" { // gone between two asks: not the drain's doing
				d.record(report.Event{Kind: report.EvictionOvertaken, Pod: p.Name, Node: d.Node, Revision: PodRevision(&p),
					Detail: fmt.Sprintf("pod %s/%s was gone when the drain asked again, its eviction refused before: deleted by another hand (its controller, a user), not let go by its budget", p.Namespace, p.Name)})
			}
			return nil
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget allows no more disruption now.
			if msg := err.Error(); msg != refused {
				refused = msg
				d.record(report.Event{Kind: report.EvictionRefused, Pod: p.Name, Node: d.Node, Revision: PodRevision(&p),
					Detail: fmt.Sprintf("eviction of %s/%s refused: %s (asking again every %s)", p.Namespace, p.Name, msg, EvictionRetry)})
			}
		case ctx.Err() != nil:
			// The run ended with this call in flight: the server may have
			// accepted it.
			d.lastLook(ctx, kube, p)
			return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
		default:
			// Not a budget's answer (a pod under two budgets, a webhook's
			// denial, ...): kubectl drain stops on it too. Recorded, as the
			// run may end by its timeout (other pods still refused) before
			// Fire's error is read.
			d.record(report.Event{Kind: report.EvictionFailed, Pod: p.Name, Node: d.Node, Revision: PodRevision(&p),
				Detail: fmt.Sprintf("eviction of %s/%s failed: %v (not asked again)", p.Namespace, p.Name, err)})
			return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		t := time.NewTimer(EvictionRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			d.lastLook(ctx, kube, p)
			return ctx.Err()
		case <-t.C:
		}
	}
}

// lastLookTimeout bounds the one read of a refused pod after the run's
// end (a Ctrl-C waits on it too).
const lastLookTimeout = 3 * time.Second

// lastLook reads, once the run has ended, a pod whose eviction a budget
// refused (or whose eviction call the end cut off), and records what
// became of it if that is no longer "held by the budget until the end":
// evicted after all (pod_evicted: the answer to the last call was cut
// off, or another eviction took it; the Eviction API marks the pod with a
// DisruptionTarget condition), or deleting or gone by another hand
// (eviction_overtaken: its controller scaling it down, a user). Not the
// pod lifecycle's kinds: the pod may be another workload's, and the
// watcher records the run's own pods' deletions when they happen. A pod
// still there, or one that cannot be read, records nothing: the drain saw
// every call refused.
func (d Drain) lastLook(ctx context.Context, kube kubernetes.Interface, p corev1.Pod) {
	call, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastLookTimeout)
	defer cancel()
	cur, err := current(call, kube, p)
	name := p.Namespace + "/" + p.Name
	switch {
	case err == nil && cur == nil: // gone, or another pod of that name since
		d.record(report.Event{Kind: report.EvictionOvertaken, Pod: p.Name, Node: d.Node, Revision: PodRevision(&p),
			Detail: fmt.Sprintf("pod %s found gone at the drain's end, its eviction refused until then: deleted by an eviction or by something else, not known which", name)})
	case err != nil || cur.DeletionTimestamp == nil:
		return
	case deletedBeforeEviction(cur):
		d.recordOvertaken(p, cur)
	case evictedByAPI(cur) != nil:
		d.record(report.Event{Kind: report.PodEvicted, Pod: p.Name, Node: d.Node, Revision: PodRevision(&p),
			Detail: fmt.Sprintf("pod %s found evicted at the drain's end (its DisruptionTarget condition says the Eviction API took it%s): the answer to the drain's last request was cut off by the run's end, or another eviction took it", name, since(cur))})
	default:
		d.record(report.Event{Kind: report.EvictionOvertaken, Pod: p.Name, Node: d.Node, Revision: PodRevision(&p),
			Detail: fmt.Sprintf("pod %s found deleting at the drain's end%s, not by an eviction (no DisruptionTarget condition from the Eviction API): its controller scaled it down or someone deleted it, while the budget refused the drain", name, since(cur))})
	}
}

// overtaken says, after an eviction the budget refused before was
// accepted, whether the pod was already being deleted by another hand
// (the Eviction API lets a deleting pod go whatever its budget), and
// records it so. Unknown (the pod not read, no condition to compare) is
// an eviction as any other.
func (d Drain) overtaken(ctx context.Context, kube kubernetes.Interface, p corev1.Pod) bool {
	call, cancel := Bound(ctx)
	defer cancel()
	cur, err := current(call, kube, p)
	if err != nil || cur == nil || !deletedBeforeEviction(cur) {
		return false
	}
	d.recordOvertaken(p, cur)
	return true
}

func (d Drain) recordOvertaken(p corev1.Pod, cur *corev1.Pod) {
	asked, _ := deletionAsked(cur)
	marked := evictedByAPI(cur).LastTransitionTime
	d.record(report.Event{Kind: report.EvictionOvertaken, Pod: p.Name, Node: d.Node, Revision: PodRevision(&p),
		Detail: fmt.Sprintf("pod %s/%s was already being deleted by another hand (its controller, a user: asked for at about %s) when an eviction was accepted at about %s: the Eviction API lets a deleting pod go whatever its budget, so not its budget letting it go",
			p.Namespace, p.Name, asked.UTC().Format("15:04:05"), marked.UTC().Format("15:04:05"))})
}

// current is the pod p as it is now: nil when it is gone or another pod
// has its name. A list by name, not a get: the drain may list pods in
// every namespace (ClusterPermissions) but get them only in the run's.
func current(ctx context.Context, kube kubernetes.Interface, p corev1.Pod) (*corev1.Pod, error) {
	list, err := kube.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", p.Name).String()})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Name == p.Name && (list.Items[i].UID == p.UID || p.UID == "") {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// deletedBeforeEviction: the pod's deletion was asked for (its deletion
// timestamp less its grace period) at least 2 s before the Eviction API
// marked it, both by the API server's clock: another hand deleted it,
// and an eviction found it deleting. An eviction that deletes the pod
// marks it in the same second (the timestamps are whole seconds).
func deletedBeforeEviction(p *corev1.Pod) bool {
	asked, ok := deletionAsked(p)
	c := evictedByAPI(p)
	return ok && c != nil && !c.LastTransitionTime.IsZero() && c.LastTransitionTime.Sub(asked) >= 2*time.Second
}

// deletionAsked is when a deleting pod's deletion was asked for, as far
// as its object says: its deletion timestamp less its grace period.
func deletionAsked(p *corev1.Pod) (time.Time, bool) {
	if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil {
		return time.Time{}, false
	}
	return p.DeletionTimestamp.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second), true
}

// evictedByAPI is the condition by which the Eviction API marked the pod
// for deletion, or nil.
func evictedByAPI(p *corev1.Pod) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI" {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// since says when a deleting pod's deletion was asked for.
func since(p *corev1.Pod) string {
	at, ok := deletionAsked(p)
	if !ok {
		return ""
	}
	return fmt.Sprintf(", asked for at about %s", at.UTC().Format("15:04:05"))
}

func (d Drain) record(e report.Event) {
	if d.Record != nil {
		d.Record(e)
	}
}

// Done says whether the drain is over for the workload: no pod of it is
// left on the node (each evicted one gone, none put back: the node is
// cordoned) and the workload is back to done as kubectl judges it (the
// replacements ready elsewhere).
func (d Drain) Done(w Workload, pods []*corev1.Pod) (done bool, message string) {
	on := 0
	for _, p := range pods {
		if p.Spec.NodeName == d.Node {
			on++
		}
	}
	if on > 0 {
		return false, fmt.Sprintf("%d pods of %s still on node %s", on, w.Ref(), d.Node)
	}
	pr := w.Progress()
	if !pr.Done {
		return false, pr.Message
	}
	return true, fmt.Sprintf("node %s drained: no pod of %s left on it, and %s", d.Node, w.Ref(), pr.Message)
}
