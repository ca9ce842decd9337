package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic/dynamicinformer"
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
	// dynFactory watches a Rollout (nil for the other kinds).
	dynFactory dynamicinformer.DynamicSharedInformerFactory
	pods       cache.SharedIndexInformer
	// sets holds the workload's revisions: a Deployment's ReplicaSets, a
	// StatefulSet's or DaemonSet's ControllerRevisions.
	sets    cache.SharedIndexInformer
	objects cache.SharedIndexInformer
	// handlers are the event handlers' registrations: synced once each
	// has been handed its informer's initial list.
	handlers []cache.ResourceEventHandlerRegistration
	started  time.Time
	cancel   context.CancelFunc

	mu       sync.Mutex
	workload Workload
	seenRS   map[string]bool
	// deadlines: each Argo ReplicaSet's scale-down deadline as last seen.
	deadlines map[string]string

	// genSeen is when each generation of the workload's pod template
	// (Generation) was first received; specSeen, when each generation of
	// its own spec (SpecGeneration) was, and specReplicas the replicas
	// that spec wanted (fixed per generation). They differ only for a
	// Rollout whose template is another object's.
	genSeen      map[int64]time.Time
	specSeen     map[int64]time.Time
	specReplicas map[int64]int32
	// nodeIPs maps node addresses to node names (noteNode).
	nodeIPs map[string]string

	// changed has a token whenever the workload, a revision or a pod
	// changed since the last receive (capacity 1: changes coalesce).
	changed chan struct{}
}

// ServiceNameLabel links an EndpointSlice to its Service.
const ServiceNameLabel = discoveryv1.LabelServiceName

// NewWatcher prepares informers for the target; Start runs them.
func NewWatcher(kube kubernetes.Interface, t *Target, tl *Timeline) (*Watcher, error) {
	sel, err := PodSelector(t.Workload)
	if err != nil {
		return nil, err
	}
	dc, _ := kube.(DynamicClients)
	kube = typed(kube)
	w := &Watcher{target: t, tl: tl, now: tl.now, workload: t.Workload, seenRS: map[string]bool{}, deadlines: map[string]string{}, genSeen: map[int64]time.Time{}, specSeen: map[int64]time.Time{}, specReplicas: map[int64]int32{}, changed: make(chan struct{}, 1)}
	ns := informers.WithNamespace(t.Namespace)
	byLabel := func(s string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s })
	}
	objectF := informers.NewSharedInformerFactoryWithOptions(kube, 0, ns, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", t.Workload.Object().GetName()).String()
	}))
	podF := informers.NewSharedInformerFactoryWithOptions(kube, 0, ns, byLabel(sel))
	sliceF := informers.NewSharedInformerFactoryWithOptions(kube, 0, ns, byLabel(ServiceNameLabel+"="+t.Service.Name))
	eventF := informers.NewSharedInformerFactoryWithOptions(kube, 0, ns)
	w.factories = []informers.SharedInformerFactory{objectF, podF, sliceF, eventF}

	kind := t.Workload.Kind()
	switch kind {
	case KindRollout:
		if dc == nil {
			return nil, ErrNoDynamicClient
		}
		df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc.Dynamic(), 0, t.Namespace, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", t.Workload.Object().GetName()).String()
		})
		w.dynFactory = df
		w.objects = df.ForResource(RolloutsGVR).Informer()
	case KindStatefulSet:
		w.objects = objectF.Apps().V1().StatefulSets().Informer()
	case KindDaemonSet:
		w.objects = objectF.Apps().V1().DaemonSets().Informer()
	default:
		w.objects = objectF.Apps().V1().Deployments().Informer()
	}
	// A workload's revisions carry its pods' labels, so the pod
	// selector narrows their watch too. A Rollout's are ReplicaSets, as
	// a Deployment's.
	if kind == KindDeployment || kind == KindRollout {
		w.sets = podF.Apps().V1().ReplicaSets().Informer()
	} else {
		w.sets = podF.Apps().V1().ControllerRevisions().Informer()
	}
	w.pods = podF.Core().V1().Pods().Informer()
	slices := sliceF.Discovery().V1().EndpointSlices().Informer()
	events := eventF.Core().V1().Events().Informer()

	setsName := "replicasets"
	if kind != KindDeployment && kind != KindRollout {
		setsName = "controllerrevisions"
	}
	for name, inf := range map[string]cache.SharedIndexInformer{kind.Lower(): w.objects, setsName: w.sets, "pods": w.pods, "endpointslices": slices, "events": events} {
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
		{w.objects, cache.ResourceEventHandlerFuncs{AddFunc: w.onWorkload, UpdateFunc: func(_, n any) { w.onWorkload(n) }}},
		{w.sets, cache.ResourceEventHandlerFuncs{AddFunc: w.onRevision, UpdateFunc: func(_, n any) { w.onRevision(n) }}},
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
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return nil, err
		}
		w.handlers = append(w.handlers, reg)
	}
	return w, nil
}

// Start runs the informers until Stop (or ctx ends) and waits for their
// caches to fill and for the handlers to have taken in what was there
// (a pod present then is in the timeline before Start returns, so before
// any probe starts: a cache synced may not have been handed over yet), at
// most until sync ends (a server that never answers must not hang the
// caller).
func (w *Watcher) Start(ctx, sync context.Context) error {
	ctx, w.cancel = context.WithCancel(ctx)
	w.started = w.now()
	for _, f := range w.factories {
		f.Start(ctx.Done())
	}
	if w.dynFactory != nil {
		w.dynFactory.Start(ctx.Done())
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
	if w.dynFactory != nil {
		for gvr, ok := range w.dynFactory.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return fmt.Errorf("watch %v: caches did not sync", gvr)
			}
		}
	}
	// Not cache.WaitForCacheSync: its 100 ms poll would delay every run.
	for _, reg := range w.handlers {
		for !reg.HasSynced() {
			select {
			case <-syncCtx.Done():
				return errors.New("watch: the event handlers did not take in the initial lists")
			case <-time.After(time.Millisecond):
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
	if w.dynFactory != nil {
		w.dynFactory.Shutdown()
	}
}

// Workload is the latest object of the workload seen.
func (w *Watcher) Workload() Workload {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.workload
}

// GenerationSeenAfter returns when a workload generation above gen was
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

// ReplicasSeenAfter returns when a spec generation (SpecGeneration) above
// spec that wanted n replicas was first received: a scale's write, known
// to have been seen even when another write (an autoscaler's, a GitOps
// sync's) replaced it before anyone read Workload. A DaemonSet's
// "replicas" are the pods it wants scheduled, as Counts says.
func (w *Watcher) ReplicasSeenAfter(spec int64, n int32) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for g, at := range w.specSeen {
		if g > spec && w.specReplicas[g] == n && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// Pods lists the pods the workload's selector matches, as last seen.
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

// NewRevision returns the workload's current revision as its pods carry
// it (PodRevision), or "" if it is not known yet: for a Deployment, the
// pod-template-hash of the ReplicaSet that holds its revision once its
// controller has seen the current generation; for a
// StatefulSet, its update revision once its controller has seen the
// current generation; for a DaemonSet, the hash of its newest
// ControllerRevision.
func (w *Watcher) NewRevision() string {
	wl := w.Workload()
	switch {
	case wl.StatefulSet != nil:
		s := wl.StatefulSet
		if s.Status.ObservedGeneration < s.Generation {
			return ""
		}
		return s.Status.UpdateRevision
	case wl.Rollout != nil:
		// The controller names the ReplicaSet of the current template in
		// status.currentPodHash once it has seen the template (its own,
		// or its workloadRef's).
		if !argoGenerationObserved(wl.Rollout) || !argoWorkloadObserved(wl.Rollout) {
			return ""
		}
		return wl.Rollout.Status.CurrentPodHash
	case wl.DaemonSet != nil:
		var newest *appsv1.ControllerRevision
		for _, o := range w.sets.GetStore().List() {
			cr, ok := o.(*appsv1.ControllerRevision)
			if ok && metav1.IsControlledBy(cr, wl.DaemonSet) && (newest == nil || cr.Revision > newest.Revision) {
				newest = cr
			}
		}
		if newest == nil || wl.DaemonSet.Status.ObservedGeneration < wl.DaemonSet.Generation {
			return ""
		}
		return newest.Labels[ControllerRevisionHashLabel]
	}
	d := wl.Deployment
	rev := d.Annotations[RevisionAnnotation]
	if rev == "" || d.Status.ObservedGeneration < d.Generation {
		return "" // until its controller has seen the spec, rev is the one before
	}
	for _, o := range w.sets.GetStore().List() {
		rs, ok := o.(*appsv1.ReplicaSet)
		if ok && rs.Annotations[RevisionAnnotation] == rev && metav1.IsControlledBy(rs, d) {
			return rs.Labels[PodTemplateHashLabel]
		}
	}
	return ""
}

// Changed receives a token after the workload, one of its revisions or
// one of its pods changed: a waiter re-reads Workload, Pods and
// NewRevision then, instead of polling (kubectl's UntilWithSync model).
// Tokens coalesce: one receive may stand for many changes.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

func (w *Watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *Watcher) onWorkload(obj any) {
	var wl Workload
	switch o := obj.(type) {
	case *appsv1.Deployment:
		wl.Deployment = o
	case *appsv1.StatefulSet:
		wl.StatefulSet = o
	case *appsv1.DaemonSet:
		wl.DaemonSet = o
	case *unstructured.Unstructured:
		r, err := ArgoRolloutFrom(o)
		if err != nil {
			w.tl.Add(report.Event{Kind: report.WatchError, Detail: err.Error()})
			return
		}
		wl.Rollout = r
	default:
		return
	}
	gen, spec := wl.Generation(), wl.SpecGeneration()
	now := w.now()
	w.mu.Lock()
	if prev := w.workload.Rollout; prev != nil && wl.Rollout != nil {
		for _, e := range argoChanges(prev, wl.Rollout) {
			w.tl.Add(e)
		}
	}
	w.workload = wl
	if _, seen := w.genSeen[gen]; !seen {
		w.genSeen[gen] = now
	}
	if _, seen := w.specSeen[spec]; !seen {
		w.specSeen[spec] = now
		w.specReplicas[spec], _, _, _ = wl.Counts()
	}
	w.mu.Unlock()
	w.notify()
}

// onRevision notes a revision of the workload created since the watch
// began: a ReplicaSet (its pods' pod-template-hash, its revision number)
// or a ControllerRevision (the revision its pods carry: the StatefulSet's
// revision name, the DaemonSet's hash).
func (w *Watcher) onRevision(obj any) {
	owner := w.target.Workload.Object()
	var meta metav1.Object
	var rev, detail string
	switch o := obj.(type) {
	case *appsv1.ReplicaSet:
		meta, rev, detail = o, o.Labels[PodTemplateHashLabel], "revision "+o.Annotations[RevisionAnnotation]
		if rev == "" { // an Argo Rollout's
			rev, detail = o.Labels[ArgoPodHashLabel], "revision "+o.Annotations[ArgoRevisionAnnotation]
		}
	case *appsv1.ControllerRevision:
		rev = o.Labels[ControllerRevisionHashLabel]
		if w.target.Workload.Kind() == KindStatefulSet {
			rev = o.Name
		}
		meta, detail = o, fmt.Sprintf("revision %d", o.Revision)
	default:
		return
	}
	if !metav1.IsControlledBy(meta, owner) {
		return
	}
	defer w.notify()
	w.mu.Lock()
	seen := w.seenRS[meta.GetName()]
	w.seenRS[meta.GetName()] = true
	deadline := meta.GetAnnotations()[ArgoScaleDownDeadlineAnnotation]
	newDeadline := deadline != "" && deadline != w.deadlines[meta.GetName()]
	w.deadlines[meta.GetName()] = deadline
	w.mu.Unlock()
	created := meta.GetCreationTimestamp()
	if !seen && created.Time.After(w.started.Add(-2*time.Second)) {
		w.tl.Add(report.Event{Kind: report.RevisionCreated, Revision: rev, Server: ptrTime(created), Detail: detail})
	}
	if newDeadline {
		w.tl.Add(report.Event{Kind: report.ScaleDownDeadline, Revision: rev, Detail: scaleDownDetail(detail, deadline, w.now())})
	}
}

// scaleDownDetail says when an old ReplicaSet scales down: its deadline as
// the controller wrote it and, when it parses, how far ahead of now.
func scaleDownDetail(revision, deadline string, now time.Time) string {
	t, err := time.Parse(time.RFC3339, deadline)
	if err != nil {
		return fmt.Sprintf("%s scales down at %q", revision, deadline)
	}
	if d := t.Sub(now); d < 0 {
		return fmt.Sprintf("%s was due to scale down at %s (%.0fs ago)", revision, deadline, -d.Seconds())
	}
	return fmt.Sprintf("%s scales down at %s (%.0fs later)", revision, deadline, t.Sub(now).Seconds())
}

func podEvent(kind report.EventKind, p *corev1.Pod) report.Event {
	return report.Event{Kind: kind, Pod: p.Name, Revision: PodRevision(p), IP: p.Status.PodIP, ResourceVersion: p.ResourceVersion,
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
		e.ReadinessConnects = ReadinessConnects(p, w.target.Service, w.target.ServicePort)
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
	for _, e := range containerEvents(o, n, ServiceContainers(n, w.target.Service, w.target.ServicePort)) {
		w.tl.Add(e)
	}
	if was, is := podReady(o), podReady(n); was != is {
		kind := report.PodUnready
		if is {
			kind = report.PodReady
		}
		e := podEvent(kind, n)
		e.ReadinessConnects = is && ReadinessConnects(n, w.target.Service, w.target.ServicePort)
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
			e.GracePeriodS = &grace
		}
		// The deletion timestamp is the deadline: the request was grace earlier.
		req := n.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
		e.Server, e.Detail = &req, fmt.Sprintf("grace %ds", grace)
		if e.PreStopSleepS = PreStopSleep(n, grace); e.PreStopSleepS > 0 {
			e.Detail += fmt.Sprintf(", preStop sleep %ds", e.PreStopSleepS)
		}
		w.tl.Add(e)
	}
}

// containerEvents are the starts and exits between o's and n's container
// statuses: the app's containers' and the native sidecars' (init
// containers with restartPolicy Always: a proxy in the traffic's path is
// often one, and its exit matters as the app's does). Ordinary init
// containers are left out: they end before the pod serves, and their
// exits are no part of its going away. serving names the containers with
// a port the Service targets (ServiceContainers).
func containerEvents(o, n *corev1.Pod, serving map[string]bool) []report.Event {
	sidecars := map[string]bool{}
	for _, c := range n.Spec.InitContainers {
		if IsNativeSidecar(c) {
			sidecars[c.Name] = true
		}
	}
	old := map[string]corev1.ContainerStatus{}
	for _, cs := range o.Status.ContainerStatuses {
		old[cs.Name] = cs
	}
	for _, cs := range o.Status.InitContainerStatuses {
		if sidecars[cs.Name] {
			old[cs.Name] = cs
		}
	}
	var out []report.Event
	add := func(cs corev1.ContainerStatus, sidecar bool) {
		prev := old[cs.Name]
		if r := cs.State.Running; r != nil && (prev.State.Running == nil || !prev.State.Running.StartedAt.Equal(&r.StartedAt)) {
			e := podEvent(report.ContainerStarted, n)
			e.Server, e.Container, e.Sidecar, e.Detail = ptrTime(r.StartedAt), cs.Name, sidecar, report.ContainerNamed(cs.Name, sidecar)
			e.ServicePort = serving[cs.Name]
			out = append(out, e)
		}
		if term := cs.State.Terminated; term != nil && prev.State.Terminated == nil {
			e := podEvent(report.ContainerTerminated, n)
			code := term.ExitCode
			e.Server, e.ExitCode, e.Reason, e.Container, e.Sidecar = ptrTime(term.FinishedAt), &code, term.Reason, cs.Name, sidecar
			e.ServicePort = serving[cs.Name]
			e.Detail = report.ContainerNamed(cs.Name, sidecar)
			if code == report.SIGKILLExitCode {
				e.Detail += " (SIGKILL)"
			}
			out = append(out, e)
		}
	}
	for _, cs := range n.Status.InitContainerStatuses {
		if sidecars[cs.Name] {
			add(cs, true)
		}
	}
	for _, cs := range n.Status.ContainerStatuses {
		add(cs, false)
	}
	return out
}

// PreStopSleep is how many seconds after p's deletion request none of its
// containers can yet have been told to stop: the kubelet runs each
// container's preStop hook before its SIGTERM, and a sleep action
// (lifecycle.preStop.sleep) cannot fail the way an exec hook can (a
// missing sleep binary ends it at once). The smallest over p's
// containers, capped by the deletion's grace period (the kubelet stops a
// hook at its end); 0 when a container has no sleep action. (The doctor's
// preStopSeconds also reads `sleep N` in an exec hook: advice may guess,
// the attribution this feeds may not.) Native sidecars are left out: the
// kubelet runs their preStop hooks at the deletion too, but then holds
// their SIGTERM until the app's containers have exited, so none is told
// to stop before the app is.
func PreStopSleep(p *corev1.Pod, grace int64) int64 {
	least := int64(-1)
	for _, c := range p.Spec.Containers {
		var s int64
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			s = c.Lifecycle.PreStop.Sleep.Seconds
		}
		if least < 0 || s < least {
			least = s
		}
	}
	return max(0, min(least, grace))
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
	relevant := (ref.Kind == string(w.target.Workload.Kind()) && ref.Name == w.target.Workload.Object().GetName()) ||
		((ref.Kind == "ReplicaSet" || ref.Kind == "ControllerRevision") && w.isOurRS(ref.Name)) || (ref.Kind == "Pod" && w.isOurPod(ref.Name))
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

// argoChanges are the timeline events between two states of a Rollout:
// the step it reached, the pause it began, the active Service's switch.
func argoChanges(prev, cur *ArgoRollout) []report.Event {
	var out []report.Event
	ps, cs := prev.Status, cur.Status
	if cs.CurrentStepIndex != nil && (ps.CurrentStepIndex == nil || *ps.CurrentStepIndex != *cs.CurrentStepIndex) {
		i, n := *cs.CurrentStepIndex, 0
		if c := cur.Spec.Strategy.Canary; c != nil {
			n = len(c.Steps)
		}
		detail := fmt.Sprintf(argoDoneFormat, n)
		if int(i) < n {
			detail = fmt.Sprintf(argoStepFormat, i+1, n, ArgoStep(cur, i))
		}
		out = append(out, report.Event{Kind: report.RolloutStep, Revision: cs.CurrentPodHash, Detail: detail})
	}
	if len(cs.PauseConditions) > 0 && len(ps.PauseConditions) == 0 {
		pc := cs.PauseConditions[0]
		out = append(out, report.Event{Kind: report.RolloutPaused, Revision: cs.CurrentPodHash, Server: ptrTime(pc.StartTime), Detail: pc.Reason})
	}
	if a := cs.BlueGreen.ActiveSelector; a != "" && a != ps.BlueGreen.ActiveSelector && ps.BlueGreen.ActiveSelector != "" {
		out = append(out, report.Event{Kind: report.ActiveSwitched, Revision: a,
			Detail: fmt.Sprintf("the active Service now selects revision %s (was %s)", a, ps.BlueGreen.ActiveSelector)})
	}
	return out
}

// The rollout_step event's detail, written by argoChanges and read back by
// ArgoStepIndex.
const (
	argoStepFormat = "step %d of %d: %s"
	argoDoneFormat = "every step done (%d)"
)

// ArgoStepIndex is the step index (from 0; the number of steps once every
// one is done) a rollout_step event names.
func ArgoStepIndex(e report.Event) (int, bool) {
	if e.Kind != report.RolloutStep {
		return 0, false
	}
	var i, n int
	if _, err := fmt.Sscanf(e.Detail, "step %d of %d:", &i, &n); err == nil && i >= 1 {
		return i - 1, true
	}
	if _, err := fmt.Sscanf(e.Detail, "every step done (%d)", &n); err == nil {
		return n, true
	}
	return 0, false
}
