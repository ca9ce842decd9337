package rollout

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/rollprobe/rollprobe/report"
)

// Watcher observes the target with informers (resync 0: only real changes)
// and writes what happens to a Timeline. One factory per selector keeps
// each watch as narrow as the objects it needs.
type Watcher struct {
	target *Target
	tl     *Timeline
	now    func() time.Time

	factories []informers.SharedInformerFactory
	pods      cache.SharedIndexInformer
	sets      cache.SharedIndexInformer
	deploys   cache.SharedIndexInformer
	started   time.Time
	cancel    context.CancelFunc

	mu         sync.Mutex
	deployment *appsv1.Deployment
	seenRS     map[string]bool

	// genSeen is when each Deployment generation was first received.
	genSeen map[int64]time.Time
	// nodeIPs maps node addresses to node names (noteNode).
	nodeIPs map[string]string

	// changed has a token whenever the Deployment, a ReplicaSet or a pod
	// changed since the last receive (capacity 1: changes coalesce).
	changed chan struct{}
}

// ServiceNameLabel links an EndpointSlice to its Service.
const ServiceNameLabel = discoveryv1.LabelServiceName

// NewWatcher prepares informers for the target; Start runs them.
func NewWatcher(kube kubernetes.Interface, t *Target, tl *Timeline) (*Watcher, error) {
	sel, err := PodSelector(t.Deployment)
	if err != nil {
		return nil, err
	}
	w := &Watcher{target: t, tl: tl, now: tl.now, deployment: t.Deployment, seenRS: map[string]bool{}, genSeen: map[int64]time.Time{}, changed: make(chan struct{}, 1)}
	ns := informers.WithNamespace(t.Namespace)
	byLabel := func(s string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s })
	}
	deployF := informers.NewSharedInformerFactoryWithOptions(kube, 0, ns, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", t.Deployment.Name).String()
	}))
	podF := informers.NewSharedInformerFactoryWithOptions(kube, 0, ns, byLabel(sel))
	sliceF := informers.NewSharedInformerFactoryWithOptions(kube, 0, ns, byLabel(ServiceNameLabel+"="+t.Service.Name))
	eventF := informers.NewSharedInformerFactoryWithOptions(kube, 0, ns)
	w.factories = []informers.SharedInformerFactory{deployF, podF, sliceF, eventF}

	w.deploys = deployF.Apps().V1().Deployments().Informer()
	w.sets = podF.Apps().V1().ReplicaSets().Informer()
	w.pods = podF.Core().V1().Pods().Informer()
	slices := sliceF.Discovery().V1().EndpointSlices().Informer()
	events := eventF.Core().V1().Events().Informer()

	for name, inf := range map[string]cache.SharedIndexInformer{"deployment": w.deploys, "replicasets": w.sets, "pods": w.pods, "endpointslices": slices, "events": events} {
		name := name
		// The reflector resumes the watch itself (relist, backoff); the
		// default handler would only log it, on stderr, under a live view.
		_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			w.tl.Add(report.Event{Kind: report.WatchError, Detail: fmt.Sprintf("%s watch: %v (resuming)", name, err)})
		})
	}
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{w.deploys, cache.ResourceEventHandlerFuncs{AddFunc: w.onDeployment, UpdateFunc: func(_, n any) { w.onDeployment(n) }}},
		{w.sets, cache.ResourceEventHandlerFuncs{AddFunc: w.onReplicaSet, UpdateFunc: func(_, n any) { w.onReplicaSet(n) }}},
		{w.pods, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(n any) { w.onPodAdd(n); w.notify() },
			UpdateFunc: func(o, n any) { w.onPodUpdate(o, n); w.notify() },
			DeleteFunc: func(o any) { w.onPodDelete(o); w.notify() },
		}},
		{slices, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(n any) { w.onSlice(nil, n) },
			UpdateFunc: w.onSlice,
			DeleteFunc: func(o any) { w.onSlice(o, nil) },
		}},
		{events, cache.ResourceEventHandlerFuncs{AddFunc: w.onEvent}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Start runs the informers until Stop (or ctx ends) and waits for their
// caches to fill, at most until sync ends (a server that never answers
// must not hang the caller).
func (w *Watcher) Start(ctx, sync context.Context) error {
	ctx, w.cancel = context.WithCancel(ctx)
	w.started = w.now()
	for _, f := range w.factories {
		f.Start(ctx.Done())
	}
	syncCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(sync, cancel)()
	for _, f := range w.factories {
		for typ, ok := range f.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return fmt.Errorf("watch %v: caches did not sync", typ)
			}
		}
	}
	return nil
}

// Stop shuts the informers down and waits for them.
func (w *Watcher) Stop() {
	if w.cancel != nil {
		w.cancel()
	}
	for _, f := range w.factories {
		f.Shutdown()
	}
}

// Deployment is the latest Deployment object seen.
func (w *Watcher) Deployment() *appsv1.Deployment {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deployment
}

// GenerationSeenAfter returns when a Deployment generation above gen was
// first received (the watch's delivery of a write that changed the spec).
func (w *Watcher) GenerationSeenAfter(gen int64) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for g, at := range w.genSeen {
		if g > gen && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// Pods lists the pods the Deployment's selector matches, as last seen.
func (w *Watcher) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range w.pods.GetStore().List() {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// RevisionAnnotation holds a ReplicaSet's (and Deployment's) revision.
const RevisionAnnotation = "deployment.kubernetes.io/revision"

// NewRevision returns the pod-template-hash of the ReplicaSet that holds the
// Deployment's current revision, or "" if it is not known yet.
func (w *Watcher) NewRevision() string {
	d := w.Deployment()
	rev := d.Annotations[RevisionAnnotation]
	if rev == "" {
		return ""
	}
	for _, o := range w.sets.GetStore().List() {
		rs, ok := o.(*appsv1.ReplicaSet)
		if ok && rs.Annotations[RevisionAnnotation] == rev && metav1.IsControlledBy(rs, d) {
			return rs.Labels[PodTemplateHashLabel]
		}
	}
	return ""
}

// Changed receives a token after the Deployment, one of its ReplicaSets or
// one of its pods changed: a waiter re-reads Deployment, Pods and
// NewRevision then, instead of polling (kubectl's UntilWithSync model).
// Tokens coalesce: one receive may stand for many changes.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

func (w *Watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *Watcher) onDeployment(obj any) {
	if d, ok := obj.(*appsv1.Deployment); ok {
		now := w.now()
		w.mu.Lock()
		w.deployment = d
		if _, seen := w.genSeen[d.Generation]; !seen {
			w.genSeen[d.Generation] = now
		}
		w.mu.Unlock()
		w.notify()
	}
}

func (w *Watcher) onReplicaSet(obj any) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok || !metav1.IsControlledBy(rs, w.target.Deployment) {
		return
	}
	defer w.notify()
	w.mu.Lock()
	seen := w.seenRS[rs.Name]
	w.seenRS[rs.Name] = true
	w.mu.Unlock()
	if !seen && rs.CreationTimestamp.Time.After(w.started.Add(-2*time.Second)) {
		w.tl.Add(report.Event{Kind: report.RevisionCreated, Revision: rs.Labels[PodTemplateHashLabel], Server: ptrTime(rs.CreationTimestamp),
			Detail: "revision " + rs.Annotations[RevisionAnnotation]})
	}
}

func podEvent(kind report.EventKind, p *corev1.Pod) report.Event {
	return report.Event{Kind: kind, Pod: p.Name, Revision: p.Labels[PodTemplateHashLabel], IP: p.Status.PodIP, ResourceVersion: p.ResourceVersion,
		Node: p.Spec.NodeName}
}

// noteNode remembers the node a pod's host IP belongs to: how a target at
// a node's address (a NodePort) is told to be that node's.
func (w *Watcher) noteNode(p *corev1.Pod) {
	if p.Spec.NodeName == "" || p.Status.HostIP == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.nodeIPs == nil {
		w.nodeIPs = map[string]string{}
	}
	for _, ip := range p.Status.HostIPs {
		w.nodeIPs[ip.IP] = p.Spec.NodeName
	}
	w.nodeIPs[p.Status.HostIP] = p.Spec.NodeName
}

// NodeIPs maps each node address seen on the target's pods (status.hostIPs)
// to its node's name.
func (w *Watcher) NodeIPs() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.nodeIPs)
}

func (w *Watcher) onPodAdd(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.noteNode(p)
	// Pods that existed before we looked are the starting state.
	kind := report.PodCreated
	if w.started.IsZero() || p.CreationTimestamp.Time.Before(w.started.Add(-2*time.Second)) {
		kind = report.PodPresent
	}
	e := podEvent(kind, p)
	e.Server = ptrTime(p.CreationTimestamp)
	if kind == report.PodPresent {
		e.Ready = podReady(p)
		e.ReadinessConnects = ReadinessConnects(p, w.target.Service)
	}
	w.tl.Add(e)
	if kind == report.PodCreated {
		w.onPodUpdate(&corev1.Pod{ObjectMeta: p.ObjectMeta}, p)
	}
}

func (w *Watcher) onPodUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	w.noteNode(n)
	if o.Spec.NodeName == "" && n.Spec.NodeName != "" {
		e := podEvent(report.PodScheduled, n)
		e.Detail = "node " + n.Spec.NodeName
		w.tl.Add(e)
	}
	old := map[string]corev1.ContainerStatus{}
	for _, cs := range o.Status.ContainerStatuses {
		old[cs.Name] = cs
	}
	for _, cs := range n.Status.ContainerStatuses {
		prev := old[cs.Name]
		if r := cs.State.Running; r != nil && (prev.State.Running == nil || !prev.State.Running.StartedAt.Equal(&r.StartedAt)) {
			e := podEvent(report.ContainerStarted, n)
			e.Server, e.Detail = ptrTime(r.StartedAt), "container "+cs.Name
			w.tl.Add(e)
		}
		if term := cs.State.Terminated; term != nil && prev.State.Terminated == nil {
			e := podEvent(report.ContainerTerminated, n)
			code := term.ExitCode
			e.Server, e.ExitCode, e.Reason, e.Detail = ptrTime(term.FinishedAt), &code, term.Reason, "container "+cs.Name
			if code == report.SIGKILLExitCode {
				e.Detail += " (SIGKILL)"
			}
			w.tl.Add(e)
		}
	}
	if was, is := podReady(o), podReady(n); was != is {
		kind := report.PodUnready
		if is {
			kind = report.PodReady
		}
		e := podEvent(kind, n)
		e.ReadinessConnects = is && ReadinessConnects(n, w.target.Service)
		if c := podCondition(n, corev1.PodReady); c != nil {
			e.Server = ptrTime(c.LastTransitionTime)
		}
		w.tl.Add(e)
	}
	if o.DeletionTimestamp == nil && n.DeletionTimestamp != nil {
		e := podEvent(report.PodDeletionRequested, n)
		grace := int64(30)
		if n.DeletionGracePeriodSeconds != nil {
			grace = *n.DeletionGracePeriodSeconds
		}
		// The deletion timestamp is the deadline: the request was grace earlier.
		req := n.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
		e.Server, e.Detail = &req, fmt.Sprintf("grace %ds", grace)
		w.tl.Add(e)
	}
}

func (w *Watcher) onPodDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		w.tl.Add(podEvent(report.PodGone, p))
	}
}

// endpointState is one endpoint's conditions, keyed by its pod (or address).
type endpointState struct {
	ip, pod, node               string
	ready, serving, terminating bool
}

func sliceEndpoints(obj any) map[string]endpointState {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil
	}
	out := map[string]endpointState{}
	for _, ep := range s.Endpoints {
		st := endpointState{
			ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
			serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
			terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
		}
		if len(ep.Addresses) > 0 {
			st.ip = ep.Addresses[0]
		}
		if ep.TargetRef != nil {
			st.pod = ep.TargetRef.Name
		}
		if ep.NodeName != nil {
			st.node = *ep.NodeName
		}
		key := st.pod
		if key == "" {
			key = st.ip
		}
		out[key] = st
	}
	return out
}

// onSlice diffs one EndpointSlice's endpoints: added, removed, and each
// change of ready, serving and terminating (what kube-proxy acts on).
func (w *Watcher) onSlice(oldObj, newObj any) {
	before, after := sliceEndpoints(oldObj), sliceEndpoints(newObj)
	ev := func(kind report.EventKind, st endpointState) {
		w.tl.Add(report.Event{Kind: kind, Pod: st.pod, IP: st.ip, Node: st.node, Ready: st.ready, Serving: st.serving, Terminating: st.terminating})
	}
	for key, n := range after {
		o, existed := before[key]
		if !existed {
			ev(report.EndpointAdded, n)
			continue
		}
		if o.ready != n.ready {
			ev(map[bool]report.EventKind{true: report.EndpointReady, false: report.EndpointUnready}[n.ready], n)
		}
		if o.serving != n.serving {
			ev(map[bool]report.EventKind{true: report.EndpointServing, false: report.EndpointNotServing}[n.serving], n)
		}
		if !o.terminating && n.terminating {
			ev(report.EndpointTerminating, n)
		}
	}
	for key, o := range before {
		if _, ok := after[key]; !ok {
			ev(report.EndpointRemoved, o)
		}
	}
}

func (w *Watcher) onEvent(obj any) {
	e, ok := obj.(*corev1.Event)
	if !ok || e.LastTimestamp.Time.Before(w.started.Add(-2*time.Second)) && e.EventTime.Time.Before(w.started.Add(-2*time.Second)) {
		return
	}
	ref := e.InvolvedObject
	relevant := (ref.Kind == "Deployment" && ref.Name == w.target.Deployment.Name) ||
		(ref.Kind == "ReplicaSet" && w.isOurRS(ref.Name)) || (ref.Kind == "Pod" && w.isOurPod(ref.Name))
	if !relevant {
		return
	}
	w.tl.Add(report.Event{Kind: report.KubeEvent, Pod: podName(ref), Reason: e.Reason, Detail: ref.Kind + " " + ref.Name + ": " + e.Message})
}

func podName(ref corev1.ObjectReference) string {
	if ref.Kind == "Pod" {
		return ref.Name
	}
	return ""
}

func (w *Watcher) isOurRS(name string) bool {
	_, ok, _ := w.sets.GetStore().GetByKey(w.target.Namespace + "/" + name)
	return ok
}

func (w *Watcher) isOurPod(name string) bool {
	_, ok, _ := w.pods.GetStore().GetByKey(w.target.Namespace + "/" + name)
	return ok
}

func podReady(p *corev1.Pod) bool {
	c := podCondition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func ptrTime(t metav1.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	tt := t.Time
	return &tt
}
