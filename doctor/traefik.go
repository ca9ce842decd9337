package doctor

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// TraefikServicesGVR is Traefik's TraefikService: a weighted round robin,
// a mirror or a highest-random-weight choice over Kubernetes Services and
// other TraefikServices.
var TraefikServicesGVR = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "traefikservices"}

// The three kinds of TraefikService (its spec's one field), as
// WeightedRoute.Kind says them.
const (
	TraefikWeighted  = "weighted"
	TraefikMirroring = "mirroring"
	TraefikHRW       = "highestRandomWeight"
)

// WeightedRoute is a TraefikService that holds the target's Service beside
// other children: Traefik builds it only while each of its Services has a
// serving endpoint (allowEmptyServices is false by default; the same for
// the three kinds: each child is built by the CRD provider's
// nameAndService, which fails on an empty Service), so the target's
// Service going empty drops it whole, even as a mirror, whose answers
// Traefik throws away.
type WeightedRoute struct {
	// Name is its name, NAMESPACE/NAME when it is of another namespace
	// than the Service (as are the names in Through and Others).
	Name string
	// Kind is how it holds the Service: TraefikWeighted,
	// TraefikMirroring or TraefikHRW.
	Kind string
	// Weight is the Service's weight in it (weighted, highest random
	// weight); nil when unset.
	Weight *int64
	// Mirror: the Service is one of a mirroring TraefikService's mirrors,
	// sent a copy of Percent percent of the requests (nil: unset, 0 for
	// Traefik); otherwise, for a mirroring one, it is the main Service.
	Mirror  bool
	Percent *int64
	// Through are the TraefikServices of its children that hold the
	// Service (nested, at any depth) rather than the Service itself: each
	// "traefikservice NAME". Traefik builds none of them while the Service
	// is empty, and the route then names a service that does not exist.
	Through []string
	// Others are its other children, each "service NAME" or
	// "traefikservice NAME" (with the namespace when another); for a
	// mirroring one, its main Service first.
	Others []string
	// CrossNamespace: one of its own children is of another namespace
	// than it. Traefik builds it only with its CRD provider's
	// allowCrossNamespace (false by default).
	CrossNamespace bool
}

// weightedRoutes lists the TraefikServices that hold service of namespace
// ns, itself or through TraefikServices that hold it, beside another
// child. It reads every namespace's where the identity may list them
// cluster-wide (a TraefikService of another namespace can name the
// Service, when Traefik's CRD provider allows cross-namespace
// references), else ns's alone: deploy/rbac.yaml's Role grants only that.
// unread says why none could be read ("" when read, or when Traefik's CRDs
// are not served: no TraefikService can exist then); a client without a
// dynamic side (a test's fake) reads none and says nothing.
func weightedRoutes(ctx context.Context, kube kubernetes.Interface, ns, service string) (routes []WeightedRoute, unread string) {
	d, ok := kube.(rollout.DynamicClients)
	if !ok || !rollout.Served(kube, TraefikServicesGVR) {
		return nil, ""
	}
	call, cancel := rollout.Bound(ctx)
	defer cancel()
	list, err := d.Dynamic().Resource(TraefikServicesGVR).List(call, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		list, err = d.Dynamic().Resource(TraefikServicesGVR).Namespace(ns).List(call, metav1.ListOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, ""
	case err != nil:
		return nil, fmt.Sprintf("list %s.%s: %v", TraefikServicesGVR.Resource, TraefikServicesGVR.Group, rollout.CallError(call, err))
	}
	all := map[traefikRef]*traefikService{}
	var refs []traefikRef
	for i := range list.Items {
		var ts traefikService
		if runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &ts) == nil && ts.kind() != "" {
			ref := traefikRef{list.Items[i].GetNamespace(), list.Items[i].GetName()}
			all[ref] = &ts
			refs = append(refs, ref)
		}
	}
	target := traefikRef{ns, service}
	holds := holdsService(all, target)
	for _, ref := range refs {
		if r, ok := weighing(ref, all[ref], target, holds); ok {
			routes = append(routes, r)
		}
	}
	return routes, ""
}

// traefikRef names a Service or a TraefikService: its namespace and name.
type traefikRef struct{ Namespace, Name string }

// ref is what c names, read from a TraefikService of namespace ns: a
// child without a namespace is in its parent's, as Traefik reads it.
func (c traefikChild) ref(ns string) traefikRef {
	if c.Namespace != "" {
		ns = c.Namespace
	}
	return traefikRef{ns, c.Name}
}

// holdsService returns whether the TraefikService named (one of all) has
// service among its children, itself or through TraefikServices at any
// depth (a cycle holds nothing more). No memo: there are a handful, and a
// name's answer found inside a cycle depends on where the walk began.
func holdsService(all map[traefikRef]*traefikService, service traefikRef) func(traefikRef) bool {
	var holds func(ref traefikRef, seen map[traefikRef]bool) bool
	holds = func(ref traefikRef, seen map[traefikRef]bool) bool {
		ts := all[ref]
		if ts == nil || seen[ref] {
			return false
		}
		seen[ref] = true
		found := false
		for _, c := range ts.children() {
			switch childKind(c.Kind) {
			case "service":
				found = found || c.ref(ref.Namespace) == service
			case "traefikservice":
				found = found || holds(c.ref(ref.Namespace), seen)
			}
		}
		return found
	}
	return func(ref traefikRef) bool { return holds(ref, map[traefikRef]bool{}) }
}

// childKind is a child's kind, lower case: Service when unset.
func childKind(kind string) string {
	if kind == "" {
		return "service"
	}
	return strings.ToLower(kind)
}

// traefikChild is one child of a TraefikService: a weighted or highest-
// random-weight one's service, or a mirroring one's main service or a
// mirror.
type traefikChild struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Weight    *int64 `json:"weight"`
	Percent   *int64 `json:"percent"`
}

// heldChild is a child as children lists it: a mirror or not.
type heldChild struct {
	traefikChild
	mirror bool
}

// traefikService is the part of a TraefikService the check reads.
type traefikService struct {
	Spec struct {
		Weighted *struct {
			Services []traefikChild `json:"services"`
		} `json:"weighted"`
		HighestRandomWeight *struct {
			Services []traefikChild `json:"services"`
		} `json:"highestRandomWeight"`
		Mirroring *struct {
			Name      string         `json:"name"`
			Namespace string         `json:"namespace"`
			Kind      string         `json:"kind"`
			Mirrors   []traefikChild `json:"mirrors"`
		} `json:"mirroring"`
	} `json:"spec"`
}

// kind is which of the three it is (Traefik builds the first its spec
// has, in this order), "" for none.
func (ts *traefikService) kind() string {
	switch {
	case ts.Spec.Weighted != nil:
		return TraefikWeighted
	case ts.Spec.Mirroring != nil:
		return TraefikMirroring
	case ts.Spec.HighestRandomWeight != nil:
		return TraefikHRW
	}
	return ""
}

// children are its children, a mirroring one's main Service first.
func (ts *traefikService) children() []heldChild {
	var cs []heldChild
	switch ts.kind() {
	case TraefikWeighted:
		for _, c := range ts.Spec.Weighted.Services {
			cs = append(cs, heldChild{traefikChild: c})
		}
	case TraefikHRW:
		for _, c := range ts.Spec.HighestRandomWeight.Services {
			cs = append(cs, heldChild{traefikChild: c})
		}
	case TraefikMirroring:
		m := ts.Spec.Mirroring
		cs = append(cs, heldChild{traefikChild: traefikChild{Name: m.Name, Namespace: m.Namespace, Kind: m.Kind}})
		for _, c := range m.Mirrors {
			cs = append(cs, heldChild{traefikChild: c, mirror: true})
		}
	}
	return cs
}

// weighing: ts, the TraefikService at ref, holds service (a child of kind
// Service, Traefik's default, or a TraefikService that holds it) beside at
// least one other child. Names are as seen from service's namespace: one
// of another namespace is written NAMESPACE/NAME.
func weighing(ref traefikRef, ts *traefikService, service traefikRef, holds func(traefikRef) bool) (WeightedRoute, bool) {
	seen := func(r traefikRef) string {
		if r.Namespace != service.Namespace {
			return r.Namespace + "/" + r.Name
		}
		return r.Name
	}
	r := WeightedRoute{Name: seen(ref), Kind: ts.kind()}
	found := false
	for _, c := range ts.children() {
		kind, child := childKind(c.Kind), c.ref(ref.Namespace)
		direct := kind == "service" && child == service
		nested := kind == "traefikservice" && holds(child)
		r.CrossNamespace = r.CrossNamespace || child.Namespace != ref.Namespace
		if direct || nested {
			if nested {
				r.Through = append(r.Through, "traefikservice "+seen(child))
			}
			switch {
			case !found:
				found, r.Weight, r.Mirror, r.Percent = true, c.Weight, c.mirror, c.Percent
			case r.Kind != TraefikMirroring:
				// Listed again: Traefik weighs each listing (1 when
				// unset), so the Service's share is their sum.
				sum := weightOrOne(r.Weight) + weightOrOne(c.Weight)
				r.Weight = &sum
			}
			continue
		}
		r.Others = append(r.Others, kind+" "+seen(child))
	}
	return r, found && len(r.Others) > 0
}

// weightOrOne is a weighted child's weight: Traefik's is 1 when unset.
func weightOrOne(w *int64) int64 {
	if w == nil {
		return 1
	}
	return *w
}

// holding says how r holds svc, for the evidence: "TraefikService split
// weighs service web at weight 1 beside service web-other".
func (r WeightedRoute) holding(svc string) string {
	through := ""
	if len(r.Through) > 0 {
		through = " through " + strings.Join(r.Through, ", ") + " (which holds it)"
	}
	weight := "with no weight set"
	if r.Weight != nil {
		weight = fmt.Sprintf("at weight %d", *r.Weight)
	}
	others := strings.Join(r.Others, ", ")
	if r.CrossNamespace {
		return r.says(svc, through, weight, others) + " (it names another namespace's: Traefik builds it only with its CRD provider's allowCrossNamespace)"
	}
	return r.says(svc, through, weight, others)
}

// says is holding's sentence.
func (r WeightedRoute) says(svc, through, weight, others string) string {
	switch {
	case r.Kind == TraefikMirroring && r.Mirror:
		copies := "no percent set: a copy of none"
		if r.Percent != nil {
			copies = fmt.Sprintf("a copy of %d%% of them", *r.Percent)
		}
		return fmt.Sprintf("TraefikService %s mirrors to service %s%s the requests it sends to %s (%s, whose answers Traefik throws away)", r.Name, svc, through, others, copies)
	case r.Kind == TraefikMirroring:
		return fmt.Sprintf("TraefikService %s sends to service %s%s, mirroring to %s", r.Name, svc, through, others)
	case r.Kind == TraefikHRW:
		return fmt.Sprintf("TraefikService %s chooses by highest random weight (by client address) service %s%s %s beside %s", r.Name, svc, through, weight, others)
	}
	return fmt.Sprintf("TraefikService %s weighs service %s%s %s beside %s", r.Name, svc, through, weight, others)
}

// onePod names the workload when it runs a single pod (its replicas, 1 by
// default); a DaemonSet's pods are one per node, not judged here.
func onePod(w rollout.Workload) (string, bool) {
	one := func(n *int32) bool { return n == nil || *n == 1 }
	switch {
	case w.Deployment != nil && one(w.Deployment.Spec.Replicas):
		return "deployment " + w.Deployment.Name, true
	case w.StatefulSet != nil && one(w.StatefulSet.Spec.Replicas):
		return "statefulset " + w.StatefulSet.Name, true
	case w.Rollout != nil && one(w.Rollout.Spec.Replicas):
		return "rollout " + w.Rollout.Name, true
	}
	return "", false
}

// checkHandWeightedRoutes: the target's Service is one child of a
// TraefikService set by hand (a fixed split, a blue/green nobody
// reweighs, a shadow copy of the traffic, a highest-random-weight choice)
// and its workload runs one pod: while that pod is unready Traefik drops
// the whole route (its own 404 for every request of the host). The lab's
// traefik-weighted sample measured it: 596 to 602 requests, every one of
// the host, while one of two Services was empty for about 3 s; with
// allowEmptyServices=true, only that Service's half (its own 503s); as a
// mirror, 599 to 612, though the Service answered none of the host's
// requests (none with allowEmptyServices=true). TraefikServices that could
// not be read leave the check unmade, said as such (info), never passed.
func checkHandWeightedRoutes(s *subject) (report.Finding, bool) {
	if s.Service == nil {
		return report.Finding{}, false
	}
	if s.WeightedRoutesUnread != "" {
		return report.Finding{Severity: report.SeverityInfo,
			Title: "not checked: whether a TraefikService holding service " + s.Service.Name + " turns on one pod",
			Evidence: []string{"Traefik's TraefikServices could not be read (" + s.WeightedRoutesUnread + "): a route over this Service and others " +
				"(weighted, mirrored, chosen by highest random weight), which Traefik drops whole while any of them is empty, is not known"},
			Fix: "grant list on traefikservices.traefik.io in the namespace (deploy/rbac.yaml does) to have it checked"}, true
	}
	who, one := onePod(s.Workload)
	if len(s.WeightedRoutes) == 0 || !one {
		return report.Finding{}, false
	}
	var evidence []string
	mirrored := false
	for _, r := range s.WeightedRoutes {
		evidence = append(evidence, r.holding(s.Service.Name))
		mirrored = mirrored || r.Mirror
	}
	evidence = append(evidence, who+" runs 1 replica behind service "+s.Service.Name+": while that pod is unready (a failed readiness probe, a restart, an eviction, "+
		"its own rollout) the Service has no serving endpoint")
	if n := s.containers(func(ct corev1.Container) bool {
		return ct.ReadinessProbe != nil && ct.ReadinessProbe.FailureThreshold == 1
	}); len(n) > 0 {
		evidence = append(evidence, fmt.Sprintf("its readiness probe takes the pod out on one failed probe (failureThreshold: 1 in %s): one slow answer does it", strings.Join(n, ", ")))
	}
	share := "not this Service's share"
	if mirrored {
		share = "not this Service's share (as a mirror it has none: the requests it only gets copies of fail too)"
	}
	evidence = append(evidence, "Traefik builds a TraefikService (weighted, mirroring or highest random weight) only while each of its Services, mirrors too, has a serving endpoint "+
		"(allowEmptyServices is false by default): while this one has none it drops the TraefikService (and any TraefikService holding it: the one weighing it is left naming a service that does not exist) "+
		"and the routes over it, and answers 404 for every request of the host, "+share)
	fix := "run two pods or more behind each Service of the route, with a readiness probe that outlasts one slow answer (failureThreshold above 1); " +
		"and in Traefik providers.kubernetesCRD.allowEmptyServices=true: it keeps the route while a Service is empty and answers only that " +
		"Service's share 503 (set its weight to 0 while it has no pod to have none fail)"
	if mirrored {
		fix += "; a mirror's copies are then lost and the route's answers are not (or take the mirror out of the route while it has no pod)"
	}
	return report.Finding{Title: "a Service a TraefikService holds runs one pod: its readiness is the whole route's",
		Evidence: evidence, Fix: fix}, true
}
