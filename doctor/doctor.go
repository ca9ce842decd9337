// Package doctor is the static half of rollprobe: it reads a Deployment,
// its Service and the namespace's PodDisruptionBudgets and names the
// settings that drop requests during a rollout, before any traffic is sent.
// Severity: error = drops requests (or kills pods) in a rollout whenever
// the app behaves as most do (stops accepting on SIGTERM, listens a moment
// after it starts); warning = a risk that depends on the app or on events
// other than rollouts. rollprobe run adds these findings to its report.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// Check IDs (stable: JUnit cases and CI annotations use them).
const (
	NoPreStop                  = "no-prestop-hook"
	GraceBelowPreStop          = "grace-below-prestop-plus-drain"
	NoReadiness                = "no-readiness-probe"
	ReadinessIsLiveness        = "readiness-same-as-liveness"
	PublishesNotReady          = "service-publishes-not-ready-addresses"
	ZeroReadyPossible          = "rollout-can-leave-no-ready-pod"
	ETPLocalBefore126          = "external-traffic-policy-local-before-1.26"
	NoPDB                      = "no-pod-disruption-budget"
	PDBAllowsNoEviction        = "pod-disruption-budget-allows-no-eviction"
	PDBAllowsEvictingAll       = "pod-disruption-budget-allows-evicting-all"
	ShellPID1                  = "shell-may-not-forward-sigterm"
	ScaleDownBeforeProp        = "scale-down-delay-below-propagation"
	CanaryWeightRounded        = "canary-weight-rounded-to-pods"
	TraefikWeightedRouteOnePod = "traefik-weighted-route-on-one-pod"
)

// Input is what the checks read.
type Input struct {
	// Workload is the object whose pod template the checks read: a
	// Deployment, StatefulSet or DaemonSet.
	Workload rollout.Workload
	Service  *corev1.Service // may be nil
	PDBs     []policyv1.PodDisruptionBudget
	// WeightedRoutes: the TraefikServices that weigh the Service beside
	// other children; WeightedRoutesUnread says why they could not be
	// read ("" when they were, or when Traefik's CRDs are not served).
	WeightedRoutes       []WeightedRoute
	WeightedRoutesUnread string
	// Autoscalers names the HorizontalPodAutoscalers that scale the
	// workload (rollout.Autoscalers); nil when none, or when they could
	// not be listed (nothing is claimed of them then).
	Autoscalers []string
	// Server version, zero when unknown.
	Version advice.Version
}

// Options tune the checks.
type Options struct {
	// ExpectedDrain is how long the app needs after SIGTERM to finish its
	// requests and exit: the grace period must cover preStop plus this.
	ExpectedDrain time.Duration
	// MeasuredPreStop is the preStop sleep a run measured on this cluster
	// (0: none yet); the advice names it instead of the default, so a
	// report carries one number for one fix.
	MeasuredPreStop int
	// Measured, from a run, is what its traffic showed of the pods'
	// shutdown; nil for doctor alone. Measured evidence outranks a static
	// guess: a check it contradicts says what was measured and drops to a
	// note.
	Measured *Measured
}

// Measured is what a run measured of the pods' shutdown.
type Measured struct {
	PodsDeleted int    // pods whose deletion the run saw
	Sent        uint64 // requests sent
	Failed      uint64 // requests that failed (the target's failures)
	// ServedAfterDeletion: responses from pods after their deletion was
	// requested (known only with a backend header; 0 otherwise).
	ServedAfterDeletion uint64
	// ExitedWithin is, over the deleted pods whose containers' exit the
	// run saw after the deletion request (ExitsSeen of them), the longest
	// time from that request to the pod's last container exit, both as
	// the watch received them: how long the slowest kept running, late by
	// at most the watch's delivery.
	ExitedWithin time.Duration
	ExitsSeen    int
}

// promptExit: a pod whose containers had all exited this soon after its
// deletion request did not wait for its endpoint's removal to propagate
// (kube-proxy alone applies a change up to its 1 s minSyncPeriod late).
const promptExit = time.Second

// exitedPromptly: every pod the run deleted was seen to exit within
// promptExit of its deletion request. A run that met no drop then won a
// race against propagation; the app did not delay its shutdown.
func (m *Measured) exitedPromptly() bool {
	return m != nil && m.ExitsSeen > 0 && m.ExitsSeen == m.PodsDeleted && m.ExitedWithin < promptExit
}

// deletedUnderLoadWithoutDrop: the run deleted pods while it sent requests
// and none failed, the measurement a static guess about the pods' shutdown
// yields to (false for doctor alone, m nil).
func (m *Measured) deletedUnderLoadWithoutDrop() bool {
	return m != nil && m.PodsDeleted > 0 && m.Sent > 0 && m.Failed == 0
}

// DefaultExpectedDrain is a typical HTTP server's drain.
const DefaultExpectedDrain = 5 * time.Second

// Gather fetches what the checks read beyond the target: the namespace's
// PodDisruptionBudgets, the TraefikServices weighing the Service (read
// when permitted: their absence leaves one check unmade, said so) and the
// server version.
func Gather(ctx context.Context, kube kubernetes.Interface, t *rollout.Target) (Input, error) {
	in := Input{Workload: t.Workload, Service: t.Service}
	call, cancel := rollout.Bound(ctx)
	defer cancel()
	pdbs, err := kube.PolicyV1().PodDisruptionBudgets(t.Namespace).List(call, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list poddisruptionbudgets: %w", rollout.CallError(call, err))
	}
	in.PDBs = pdbs.Items
	if t.Service != nil {
		in.WeightedRoutes, in.WeightedRoutesUnread = weightedRoutes(ctx, kube, t.Namespace, t.Service.Name)
	}
	// Read when granted: they only add to what a finding says.
	in.Autoscalers, _ = rollout.Autoscalers(ctx, kube, t.Workload.Ref())
	in.Version = rollout.ServerVersion(ctx, kube)
	return in, nil
}

// subject is what every check reads, prepared once: the input, the
// options, the containers behind the Service and the grace period.
type subject struct {
	Input
	opts    Options
	serving []corev1.Container
	// apps are the pod's containers (spec.containers); sidecars names its
	// native sidecars (init containers with restartPolicy Always), which
	// serving holds where the Service targets their ports.
	apps     []corev1.Container
	sidecars map[string]bool
	grace    int64
}

// check is one static check. run returns its finding, or false when the
// check passes. The table is the documented list of checks, in report
// order.
type check struct {
	id, title string
	severity  report.Severity // the finding's usual severity (grace-period can downgrade to warning)
	run       func(s *subject) (report.Finding, bool)
}

var checks = []check{
	{NoPreStop, "containers keep serving while endpoints propagate (preStop hook)", report.SeverityError, checkPreStop},
	{GraceBelowPreStop, "the grace period covers preStop plus the app's drain", report.SeverityError, checkGrace},
	{NoReadiness, "containers have a readiness probe", report.SeverityError, checkReadiness},
	{ReadinessIsLiveness, "readiness and liveness probes differ", report.SeverityWarning, checkReadinessIsLiveness},
	{PublishesNotReady, "the Service routes only to ready pods that are not terminating", report.SeverityError, checkPublishesNotReady},
	{ZeroReadyPossible, "the rollout strategy keeps a ready pod", report.SeverityError, func(s *subject) (report.Finding, bool) { return zeroReady(s.Workload, s.Service) }},
	{ScaleDownBeforeProp, "an Argo Rollout keeps its old pods until the traffic's move has propagated", report.SeverityError, checkScaleDownDelay},
	{CanaryWeightRounded, "an Argo canary's pods can express each setWeight", report.SeverityWarning, checkCanaryWeights},
	{TraefikWeightedRouteOnePod, "a route Traefik weighs (an Argo canary's, or one by hand) runs two pods or more behind each Service", report.SeverityWarning, checkTraefikWeightedRouteOnePod},
	{ETPLocalBefore126, "externalTrafficPolicy: Local is safe on this cluster version", report.SeverityError, checkETPLocal},
	{NoPDB, "a PodDisruptionBudget covers the pods", report.SeverityWarning, checkPDB},
	{PDBAllowsNoEviction, "the PodDisruptionBudget lets a drain evict a pod", report.SeverityWarning, checkPDBAllowsEviction},
	{PDBAllowsEvictingAll, "the PodDisruptionBudget keeps one of the workload's pods through a drain", report.SeverityWarning, checkPDBAllowsEvictingAll},
	{ShellPID1, "the container's main process receives SIGTERM", report.SeverityWarning, checkShell},
}

// Check is one static check as the documentation and JUnit list it.
type Check struct{ ID, Title string }

// Checks lists every check in the order they are reported (derived from
// the table, so the list cannot drift from what runs).
func Checks() []Check {
	out := make([]Check, len(checks))
	for i, c := range checks {
		out[i] = Check{c.id, c.title}
	}
	return out
}

// Run returns the findings of every check that does not pass, in Checks
// order, each marked with Source doctor.
func Run(in Input, opts Options) []report.Finding {
	if opts.ExpectedDrain <= 0 {
		opts.ExpectedDrain = DefaultExpectedDrain
	}
	spec := in.Workload.Template().Spec
	s := &subject{Input: in, opts: opts, serving: servingContainers(spec, in.Service),
		apps: spec.Containers, sidecars: map[string]bool{}, grace: int64(corev1.DefaultTerminationGracePeriodSeconds)}
	for _, c := range spec.InitContainers {
		if rollout.IsNativeSidecar(c) {
			s.sidecars[c.Name] = true
		}
	}
	if spec.TerminationGracePeriodSeconds != nil {
		s.grace = *spec.TerminationGracePeriodSeconds
	}
	var out []report.Finding
	for _, c := range checks {
		f, found := c.run(s)
		if !found {
			continue
		}
		f.ID, f.Source = c.id, report.SourceDoctor
		if f.Severity == "" {
			f.Severity = c.severity
		}
		out = append(out, f)
	}
	return out
}

// containers lists the names of the serving containers for which bad
// holds, a native sidecar's marked so.
func (s *subject) containers(bad func(c corev1.Container) bool) []string {
	var out []string
	for _, c := range s.serving {
		if bad(c) {
			name := c.Name
			if s.sidecars[c.Name] {
				name += " (native sidecar)"
			}
			out = append(out, name)
		}
	}
	return out
}

// holders are the containers whose preStop hooks keep c serving after a
// deletion: c's own; for a native sidecar, every app container's too, as
// the kubelet stops a native sidecar only after they have exited.
func (s *subject) holders(c corev1.Container) []corev1.Container {
	if !s.sidecars[c.Name] {
		return []corev1.Container{c}
	}
	return append([]corev1.Container{c}, s.apps...)
}

// hooked reports whether a preStop hook holds c (holders).
func (s *subject) hooked(c corev1.Container) bool {
	return slices.ContainsFunc(s.holders(c), func(h corev1.Container) bool { return h.Lifecycle != nil && h.Lifecycle.PreStop != nil })
}

// preStopHold is how long after a deletion the hooks of c's holders keep
// it serving: the longest; known is false when a hook's length cannot be
// read (it might be longer).
func (s *subject) preStopHold(c corev1.Container) (seconds int64, known bool) {
	for _, h := range s.holders(c) {
		if h.Lifecycle == nil || h.Lifecycle.PreStop == nil {
			continue
		}
		n, ok := preStopSeconds(h)
		if !ok {
			return 0, false
		}
		seconds = max(seconds, n)
	}
	return seconds, true
}

func checkPreStop(s *subject) (report.Finding, bool) {
	noHook := s.containers(func(c corev1.Container) bool { return !s.hooked(c) })
	if len(noHook) == 0 {
		return report.Finding{}, false
	}
	m := s.opts.Measured
	if m.deletedUnderLoadWithoutDrop() && !m.exitedPromptly() {
		// The run deleted pods under load and nothing dropped: whatever
		// delays this app's shutdown (a sleep in its SIGTERM handler, a
		// framework's graceful delay) worked here.
		evidence := []string{fmt.Sprintf("container(s) %s: no lifecycle.preStop", strings.Join(noHook, ", ")),
			fmt.Sprintf("this run deleted %d pod(s) under load and none of its %d requests failed", m.PodsDeleted, m.Sent)}
		if m.ServedAfterDeletion > 0 {
			evidence = append(evidence, fmt.Sprintf("%d responses came from pods after their deletion was requested: they kept serving while endpoints propagated", m.ServedAfterDeletion))
		}
		if m.ExitsSeen > 0 {
			evidence = append(evidence, fmt.Sprintf("the slowest of the %d pod(s) whose exit the run saw exited %.2fs after its deletion request", m.ExitsSeen, m.ExitedWithin.Seconds()))
		}
		return report.Finding{Severity: report.SeverityInfo,
			Title:    "no preStop hook, but this run measured no drop: the app appears to delay its own shutdown; keep it so",
			Evidence: evidence,
			Fix:      "keep the app's shutdown delay above the endpoint propagation time (or make it explicit: " + advice.PreStopSleep(DefaultPreStopSeconds, s.Version) + "); rollprobe run on every deploy keeps measuring it"}, true
	}
	t, ok := argoTrafficFirst(s.Workload.Rollout)
	if move, abort := t.keeps(s.propagation()); ok && move && abort {
		// The rollout itself moves the traffic first and deletes the old
		// pods well after, as an abort does the new ones: only the other
		// ways pods go remain.
		kept := fmt.Sprintf("deletes the old pods %d s after that (%s)", t.delay, t.why)
		if t.never {
			kept = "never deletes the old pods (" + t.why + ")"
		}
		aborted := fmt.Sprintf("%s, and the new revision's pods go %d s after that (%s)", t.abortMoment, t.abortDelay, t.abortWhy)
		if t.abortNever {
			aborted = fmt.Sprintf("%s, and the new revision's pods are kept (%s)", t.abortMoment, t.abortWhy)
		}
		return report.Finding{Severity: report.SeverityWarning,
			Title: "no preStop hook: a node drain, an eviction or a scale-down stops the app while traffic is still routed to it",
			Evidence: withRaceWon(m, "the next drain, eviction or scale-down", withAutoscalers(s, withNotReadyPublished(s, withH2CEdge(s, withOthersHooked(s, []string{fmt.Sprintf("container(s) %s: no lifecycle.preStop", strings.Join(noHook, ", ")),
				fmt.Sprintf("the %s strategy's own updates do not need it: the traffic moves first (%s) and the controller %s; %s", t.strategy, t.moment, kept, aborted),
				"every other deletion sends SIGTERM at once, while kube-proxy, ingresses and load balancers still route to the pod until the EndpointSlice change reaches them"}))))),
			Fix: preStopFix(s)}, true
	}
	return report.Finding{
		Title: "no preStop hook: the app is told to stop while traffic is still routed to it",
		Evidence: withRaceWon(m, "the next rollout or scale-in", withAutoscalers(s, withNotReadyPublished(s, withH2CEdge(s, withOthersHooked(s, []string{fmt.Sprintf("container(s) %s: no lifecycle.preStop", strings.Join(noHook, ", ")),
			"on deletion the kubelet sends SIGTERM at once; kube-proxy, ingresses and load balancers stop routing to the pod only when the EndpointSlice change reaches them (1-3 s typically, more behind a busy ingress)"}))))),
		Fix: preStopFix(s)}, true
}

// withRaceWon adds, to a run that met no drop though every pod it deleted
// exited at once, why the missing hook still stands: the endpoint change
// reached the probed paths before the pods stopped, this time; next names
// the deletions that may lose the race.
func withRaceWon(m *Measured, next string, evidence []string) []string {
	if !m.deletedUnderLoadWithoutDrop() || !m.exitedPromptly() {
		return evidence
	}
	return append(evidence, fmt.Sprintf("this run met no drop (%d requests), but each of the %d pod(s) it deleted exited within %.2fs of its deletion request (as the watch received both): "+
		"the app does not wait for its endpoint's removal to propagate; the change reached the probed paths first this time, a race %s may lose",
		m.Sent, m.PodsDeleted, m.ExitedWithin.Seconds(), next))
}

// withAutoscalers adds that an autoscaler scales the workload: its
// scale-ins delete pods as a rollout does, and far more often, so the
// missing hook drops requests between deploys too.
func withAutoscalers(s *subject, evidence []string) []string {
	if len(s.Autoscalers) == 0 {
		return evidence
	}
	return append(evidence, fmt.Sprintf("%s scales %s: each of its scale-ins deletes pods the same way, between deploys too (rollprobe run --scale N measures one)",
		strings.Join(s.Autoscalers, " and "), s.Workload.Ref()))
}

// withOthersHooked adds, where a container the Service does not target
// has a preStop hook while one it targets has none (an app behind a proxy
// run as a second container), that a hook holds only its own container:
// the kubelet runs each container's hook and stops that container on its
// own. (A native sidecar's stop waits for the app's containers, so no
// hook of theirs is missing for it: holders.)
func withOthersHooked(s *subject, evidence []string) []string {
	var hooked []string
	for _, c := range s.apps {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && !slices.ContainsFunc(s.serving, func(v corev1.Container) bool { return v.Name == c.Name }) {
			hooked = append(hooked, c.Name)
		}
	}
	if len(hooked) == 0 {
		return evidence
	}
	return append(evidence, fmt.Sprintf("container(s) %s have a preStop hook, but a hook delays only its own container's stop: the kubelet stops the others at once", strings.Join(hooked, ", ")))
}

// withNotReadyPublished adds, for a Service that publishes not-ready
// addresses, that the hook is not enough there: the endpoint stays listed
// until the pod is gone (checkPublishesNotReady), so a preStop sleep only
// moves the window.
func withNotReadyPublished(s *subject, evidence []string) []string {
	if s.Service == nil || !s.Service.Spec.PublishNotReadyAddresses {
		return evidence
	}
	return append(evidence, fmt.Sprintf("service %s publishes not-ready addresses (%s): its endpoints stay listed until the pod is gone, so a preStop sleep alone does not keep traffic off a terminating pod there", s.Service.Name, PublishesNotReady))
}

// traefikServersScheme is the Service annotation by which Traefik's
// Kubernetes Ingress provider speaks to the pods in another scheme than
// http ("h2c" for gRPC in cleartext).
const traefikServersScheme = "traefik.ingress.kubernetes.io/service.serversscheme"

// withH2CEdge adds, for a Service Traefik reaches over h2c, what a pod
// gone without a preStop costs there: Traefik v3.6 dials h2c backends
// with net.Dial, no timeout (pkg/server/service/smart_roundtripper.go),
// and x/net's HTTP/2 connection pool waits for that dial whatever the
// request's context, so a call sent to a deleted pod's address is held
// until the kernel gives up the connect: minutes, measured in the lab.
func withH2CEdge(s *subject, evidence []string) []string {
	if s.Service == nil || !strings.EqualFold(s.Service.Annotations[traefikServersScheme], "h2c") {
		return evidence
	}
	return append(evidence, fmt.Sprintf("service %s is reached by Traefik over h2c (%s: h2c): Traefik v3.6 dials h2c backends with no timeout, "+
		"so a call it sends to a deleted pod's address waits until the kernel gives up the connect (2m13s and 2m15s in the lab), long after clients time out", s.Service.Name, traefikServersScheme))
}

func preStopFix(s *subject) string {
	if n := s.opts.MeasuredPreStop; n > 0 {
		return fmt.Sprintf("add a preStop hook that waits for endpoint propagation, at least %ds as this run measured: %s", n, advice.PreStopSleep(n, s.Version))
	}
	return "add a preStop hook that waits for endpoint propagation: " + advice.PreStopSleep(DefaultPreStopSeconds, s.Version) +
		"; rollprobe run measures the window on your cluster and sizes it"
}

// DefaultPreStopSeconds is the preStop sleep the doctor suggests before a
// run has measured the window.
const DefaultPreStopSeconds = 5

// propagation is how long a pod must keep serving after traffic is moved
// from it: the window a run measured, else the preStop the doctor
// suggests.
func (s *subject) propagation() int64 {
	return max(int64(DefaultPreStopSeconds), int64(s.opts.MeasuredPreStop))
}

// argoDefaultScaleDownDelay is Argo Rollouts' scaleDownDelaySeconds when
// the spec leaves it unset (utils/defaults, v1.10.1).
const argoDefaultScaleDownDelay = 30

// trafficFirst is how a Rollout whose updates move the traffic off the old
// pods before deleting them (a blue/green's switch of its active Service,
// a traffic-routed canary's full promotion) keeps them after the move.
type trafficFirst struct {
	strategy  string // blueGreen or canary: the field of spec.strategy
	moment    string // the move, in words
	delay     int32  // seconds the old ReplicaSet is kept after the move
	never     bool   // scaleDownDelaySeconds 0: never scaled down
	limitZero bool   // scaleDownDelayRevisionLimit 0 gave delay 0
	why       string // the setting behind delay, in words
	// The same after an abort, which moves the traffic back to the stable
	// pods and then scales the new revision's down (abortMoment, in
	// words): abortDelay seconds later, or never (abortNever).
	abortMoment string
	abortDelay  int32
	abortNever  bool
	abortWhy    string
}

// keeps says whether the old pods are kept at least need seconds after
// the move, and the aborted revision's after a move back.
func (t trafficFirst) keeps(need int64) (afterMove, afterAbort bool) {
	return t.never || int64(t.delay) >= need, t.abortNever || int64(t.abortDelay) >= need
}

// argoTrafficFirst reads it from the Rollout, as Argo Rollouts v1.10.1's
// scaleDownDelayHelper applies it: a revision limit of 0 scales the old
// ReplicaSet down at once whatever the delay; a delay of 0 adds no
// deadline and keeps it for ever (argoproj/argo-rollouts#1992). A canary
// without traffic routing (it deletes old pods as its weights rise) and
// one with dynamicStableScale (it scales the stable pods down as the
// weights move) are not this shape: false.
func argoTrafficFirst(r *rollout.ArgoRollout) (trafficFirst, bool) {
	if r == nil {
		return trafficFirst{}, false
	}
	var t trafficFirst
	var delay, limit *int32
	switch st := r.Spec.Strategy; {
	case st.BlueGreen != nil:
		t = trafficFirst{strategy: "blueGreen", moment: "the active Service switches to the new revision",
			abortMoment: "an abort after the switch (a failed post-promotion analysis, say) switches the active Service back to the stable revision"}
		delay, limit = st.BlueGreen.ScaleDownDelaySeconds, st.BlueGreen.ScaleDownDelayRevisionLimit
	case st.Canary != nil && len(st.Canary.TrafficRouting) > 0 && !st.Canary.DynamicStableScale:
		t = trafficFirst{strategy: "canary", moment: "the full promotion routes every request to the new revision",
			abortMoment: "an abort sets the weights back to the stable revision"}
		delay, limit = st.Canary.ScaleDownDelaySeconds, st.Canary.ScaleDownDelayRevisionLimit
	default:
		return trafficFirst{}, false
	}
	switch {
	case limit != nil && *limit == 0:
		t.limitZero, t.why = true, "scaleDownDelayRevisionLimit: 0 scales the old ReplicaSet down at once, whatever scaleDownDelaySeconds says"
	case delay == nil:
		t.delay, t.why = argoDefaultScaleDownDelay, fmt.Sprintf("scaleDownDelaySeconds unset: Argo Rollouts' default, %d", argoDefaultScaleDownDelay)
	case *delay == 0:
		t.never, t.why = true, "scaleDownDelaySeconds: 0, which Argo Rollouts reads as never (argoproj/argo-rollouts#1992)"
	default:
		t.delay, t.why = *delay, fmt.Sprintf("scaleDownDelaySeconds: %d", *delay)
	}
	d, keep, why := rollout.ArgoAbortDelay(r)
	t.abortDelay, t.abortNever, t.abortWhy = int32(d/time.Second), keep, why
	return t, true
}

// checkScaleDownDelay: a Rollout that moves the traffic first must keep
// its old pods serving until the move has reached every proxy: the delay
// before the controller deletes them plus the pods' preStop sleep must
// cover the propagation. An abort moves the traffic back to the stable
// pods and deletes the new revision's after its own delay: the same
// shape, a warning alone (it only happens on an abort, which no run
// exercises).
func checkScaleDownDelay(s *subject) (report.Finding, bool) {
	t, ok := argoTrafficFirst(s.Workload.Rollout)
	if !ok {
		return report.Finding{}, false
	}
	// The pods keep serving after their deletion for the shortest preStop
	// sleep of the serving containers; a hook whose length cannot be read
	// might cover it, so nothing is claimed then.
	pre, noHook := int64(-1), []string{}
	for _, c := range s.serving {
		n, known := s.preStopHold(c)
		switch {
		case !s.hooked(c):
			noHook, n = append(noHook, c.Name), 0
		case !known:
			return report.Finding{}, false
		}
		if pre < 0 || n < pre {
			pre = n
		}
	}
	pre = max(pre, 0)
	need := s.propagation()
	move, abort := t.keeps(need - pre)
	if move && abort {
		return report.Finding{}, false
	}
	ref := s.Workload.Ref()
	var evidence []string
	after := "the move"
	if !move {
		evidence = append(evidence, fmt.Sprintf("rollout %s: the traffic moves first (%s), then the controller deletes the old pods %d s later: %s", ref.Name, t.moment, t.delay, t.why))
	}
	if !abort {
		evidence = append(evidence, fmt.Sprintf("rollout %s: %s, then the controller deletes the new revision's pods %d s later: %s", ref.Name, t.abortMoment, t.abortDelay, t.abortWhy))
		if move {
			after = "the move back"
		}
	}
	if len(noHook) > 0 {
		evidence = append(evidence, fmt.Sprintf("container(s) %s: no lifecycle.preStop, so the pods stop serving when they are deleted", strings.Join(noHook, ", ")))
	} else {
		delay := t.delay
		if move {
			delay = t.abortDelay
		}
		evidence = append(evidence, fmt.Sprintf("their preStop sleep keeps them serving %d s more: %d s after %s in all", pre, int64(delay)+pre, after))
	}
	window := fmt.Sprintf("kube-proxy, ingresses and load balancers send new connections to the pods the traffic left until the move reaches them: %d s is the least to allow", need)
	switch measured := int64(s.opts.MeasuredPreStop); {
	case measured > 0 && measured == need:
		window += " (the window this run measured)"
	case measured > 0:
		window += fmt.Sprintf(" (this run measured %d s; the doctor allows no less than its %d s)", measured, DefaultPreStopSeconds)
	default:
		window += " (1-3 s typically, more behind a busy ingress)"
	}
	evidence = append(evidence, window)
	keep := max(int64(argoDefaultScaleDownDelay), need)
	var fields []string
	if !move {
		fields = append(fields, fmt.Sprintf(`"scaleDownDelaySeconds":%d`, keep))
		if t.limitZero {
			fields = append(fields, `"scaleDownDelayRevisionLimit":null`)
		}
	}
	if !abort {
		fields = append(fields, fmt.Sprintf(`"abortScaleDownDelaySeconds":%d`, max(int64(rollout.ArgoDefaultAbortDelay), need)))
	}
	whose := "the old pods"
	switch {
	case !move && !abort:
		whose = "the old pods, and an aborted update's,"
	case !abort:
		whose = "an aborted update's pods"
	}
	fix := fmt.Sprintf("keep %s at least %d s after %s: kubectl patch rollout %s -n %s --type merge -p '{\"spec\":{\"strategy\":{\"%s\":{%s}}}}' (%d s is Argo's default), or give the pods a preStop sleep that covers it: %s",
		whose, need, after, ref.Name, ref.Namespace, t.strategy, strings.Join(fields, ","), argoDefaultScaleDownDelay, advice.PreStopSleep(int(need), s.Version))
	measured := ""
	if m := s.opts.Measured; !move && m.deletedUnderLoadWithoutDrop() {
		// The run's own updates went through proxies that had the move in
		// time: that part is a note, never an error the run contradicts.
		measured = fmt.Sprintf("this run deleted %d pod(s) under load and none of its %d requests failed; a slower ingress or load balancer than the paths it probed may not be as quick", m.PodsDeleted, m.Sent)
	}
	switch {
	case !abort && (move || measured != ""):
		// Only an abort is left to delete pods early: no run exercises one.
		if measured != "" {
			evidence = append(evidence, measured+" (an abort was not exercised)")
		}
		return report.Finding{Severity: report.SeverityWarning,
			Title:    "an aborted update's pods are deleted before the traffic's move back can have reached every proxy",
			Evidence: evidence, Fix: fix}, true
	case measured != "":
		return report.Finding{Severity: report.SeverityInfo,
			Title:    "the old pods are deleted soon after the traffic moves, but this run measured no drop: the proxies it went through had the move in time",
			Evidence: append(evidence, measured), Fix: fix}, true
	}
	title := "the old pods are deleted before the traffic's move can have reached every proxy"
	if !abort {
		title += ", and so are an aborted update's after the move back"
	}
	return report.Finding{Title: title, Evidence: evidence, Fix: fix}, true
}

func checkGrace(s *subject) (report.Finding, bool) {
	var graceErr, graceWarn []string
	drain := int64(s.opts.ExpectedDrain / time.Second)
	for _, c := range s.serving {
		pre, known := preStopSeconds(c)
		if !known || pre <= 0 {
			continue
		}
		switch {
		case s.grace <= pre:
			graceErr = append(graceErr, fmt.Sprintf("container %s: preStop waits %ds, terminationGracePeriodSeconds is %d: the hook uses up the grace period and the app gets only the kubelet's 2 s minimum after SIGTERM", c.Name, pre, s.grace))
		case s.grace < pre+drain:
			graceWarn = append(graceWarn, fmt.Sprintf("container %s: preStop %ds + expected drain %ds > terminationGracePeriodSeconds %d", c.Name, pre, drain, s.grace))
		}
	}
	switch {
	case len(graceErr) > 0:
		return report.Finding{Severity: report.SeverityError, Title: "the grace period does not cover the preStop hook",
			Evidence: graceErr,
			Fix:      fmt.Sprintf("set terminationGracePeriodSeconds above preStop plus the app's drain time (here at least preStop + %ds)", drain)}, true
	case len(graceWarn) > 0:
		return report.Finding{Severity: report.SeverityWarning, Title: "the grace period may not cover preStop plus the app's drain",
			Evidence: append(graceWarn, "the app is SIGKILLed at the end of the grace period, cutting the requests it is still serving"),
			Fix:      fmt.Sprintf("raise terminationGracePeriodSeconds to at least preStop + %ds (or, if the app drains faster than %ds, state its real drain time)", drain, drain)}, true
	}
	return report.Finding{}, false
}

func checkReadiness(s *subject) (report.Finding, bool) {
	noReady := s.containers(func(c corev1.Container) bool { return c.ReadinessProbe == nil })
	if len(noReady) == 0 {
		return report.Finding{}, false
	}
	return report.Finding{Title: "no readiness probe: new pods get traffic the moment their process starts",
		Evidence: []string{fmt.Sprintf("container(s) %s: no readinessProbe; a pod counts as ready as soon as its containers start, before the app listens", strings.Join(noReady, ", "))},
		Fix:      "add a readinessProbe that checks an endpoint the app serves only when it can take requests (httpGet), and a startupProbe for slow starts"}, true
}

func checkReadinessIsLiveness(s *subject) (report.Finding, bool) {
	same := s.containers(func(c corev1.Container) bool {
		return c.ReadinessProbe != nil && c.LivenessProbe != nil && reflect.DeepEqual(c.ReadinessProbe.ProbeHandler, c.LivenessProbe.ProbeHandler)
	})
	if len(same) == 0 {
		return report.Finding{}, false
	}
	return report.Finding{Title: "readiness and liveness probes are the same check",
		Evidence: []string{fmt.Sprintf("container(s) %s: readinessProbe and livenessProbe use the same handler", strings.Join(same, ", ")),
			"a pod that should only stop receiving traffic (overloaded, draining) is restarted instead, and a readiness check that may not fail while draining cannot take the pod out early"},
		Fix: "liveness: the process is not wedged (cheap, generous thresholds); readiness: the app can serve now (fails while starting and while draining)"}, true
}

// checkPublishesNotReady: a Service with publishNotReadyAddresses has its
// EndpointSlices mark every pod with an address ready, whatever its
// readiness and while it terminates (the EndpointConditions contract:
// ready is never true for a terminating endpoint unless the Service
// overrides readiness so). kube-proxy, a headless Service's DNS records
// and ingress controllers reading the slices then route to a pod from its
// start to its removal: neither a readiness probe nor a preStop sleep can
// take it out of rotation.
func checkPublishesNotReady(s *subject) (report.Finding, bool) {
	svc := s.Service
	if svc == nil || !svc.Spec.PublishNotReadyAddresses {
		return report.Finding{}, false
	}
	evidence := []string{fmt.Sprintf("service %s has publishNotReadyAddresses: true: its EndpointSlices mark each pod ready from the moment it has an address, whatever its readiness probe says, and still while it terminates", svc.Name),
		"kube-proxy, DNS (a headless Service's records) and ingress controllers route to a new pod before the app listens and to an old one until the pod is gone: neither a readiness probe nor a preStop sleep takes a pod out of rotation"}
	fix := advice.ClientsOffNotReadyService
	m := s.opts.Measured
	if m.deletedUnderLoadWithoutDrop() && !m.exitedPromptly() {
		return report.Finding{Severity: report.SeverityInfo,
			Title:    "the Service publishes not-ready addresses, but this run measured no drop: the app listens from its start until it is gone",
			Evidence: append(evidence, fmt.Sprintf("this run deleted %d pod(s) under load and none of its %d requests failed", m.PodsDeleted, m.Sent)),
			Fix:      fix + "; or keep the app listening from its first instant to SIGKILL, as it did here"}, true
	}
	f := report.Finding{Title: "the Service publishes not-ready addresses: traffic reaches pods before they are ready and while they terminate",
		Evidence: evidence, Fix: fix}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		// A headless Service's setting may be deliberate: each pod's own
		// name resolves as soon as it has an address, which shortens a
		// recreated pod's "no such name" (pod-dns-name-stale's trade).
		// Clients of the Service's name are still sent to pods that
		// cannot serve.
		f.Severity = report.SeverityWarning
		f.Evidence = append(f.Evidence, "it is headless: a pod's own name then resolves as soon as the pod has an address, which shortens its absence across a recreation for a client that must reach that one pod; clients of the Service's name are the ones sent to pods that cannot serve")
	}
	if m.deletedUnderLoadWithoutDrop() { // and every deleted pod exited at once
		// The address stays published until the pod object is gone, after
		// the app: the same race a missing preStop hook runs (withRaceWon).
		f.Evidence = append(f.Evidence, fmt.Sprintf("this run met no drop (%d requests), but each of the %d pod(s) it deleted exited within %.2fs of its deletion request (as the watch received both) while its address stayed published until the pod was gone: "+
			"a connection routed to it between its exit and its removal's propagation is refused; none was this time, a race the next rollout or scale-in may lose",
			m.Sent, m.PodsDeleted, m.ExitedWithin.Seconds()))
	}
	return f, true
}

func checkETPLocal(s *subject) (report.Finding, bool) {
	svc := s.Service
	if svc == nil || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal || !s.Version.Before(1, 26) {
		return report.Finding{}, false
	}
	return report.Finding{
		Title: "externalTrafficPolicy: Local on a cluster older than 1.26 blackholes traffic at terminating pods",
		Evidence: []string{fmt.Sprintf("service %s is %s with externalTrafficPolicy Local; the server is v%s", svc.Name, svc.Spec.Type, s.Version),
			"before 1.26 kube-proxy does not fall back to serving-but-terminating endpoints: a node whose only local pod is terminating drops the load balancer's traffic until its health check fails"},
		Fix: "upgrade to 1.26+ (ProxyTerminatingEndpoints), or use externalTrafficPolicy: Cluster, or keep the pod serving (preStop sleep) longer than the load balancer's health-check interval x threshold"}, true
}

// drainEvicts: a node drain evicts the workload's pods, so its budgets
// are what keeps some serving. Not a DaemonSet's: a drain leaves them be
// (kubectl drain --ignore-daemonsets, as run --drain), and it runs one a
// node, which no eviction of another node's pods takes.
func drainEvicts(w rollout.Workload) bool { return w.DaemonSet == nil }

// checkPDB: a budget keeps evictions (drains, upgrades) from taking the
// pods at once.
func checkPDB(s *subject) (report.Finding, bool) {
	w := s.Workload
	tmpl := w.Template()
	if !drainEvicts(w) || coveredByPDB(tmpl, s.PDBs) {
		return report.Finding{}, false
	}
	ref := w.Ref()
	return report.Finding{Title: "no PodDisruptionBudget covers the pods",
		Evidence: []string{fmt.Sprintf("no PodDisruptionBudget in namespace %s selects the labels of %s %s's pods", ref.Namespace, ref.Kind.Lower(), ref.Name),
			"a rollout is bounded by maxUnavailable, but a node drain or cluster upgrade may evict every pod at once"},
		Fix: fmt.Sprintf("add a PodDisruptionBudget selecting %s with maxUnavailable: 1", labels.Set(tmpl.Labels))}, true
}

func checkShell(s *subject) (report.Finding, bool) {
	shells := s.containers(shellWithoutExec)
	if len(shells) == 0 {
		return report.Finding{}, false
	}
	return report.Finding{Title: "a shell runs as the main process and may not pass SIGTERM on",
		Evidence: []string{fmt.Sprintf("container(s) %s: command is a shell script that does not exec the server", strings.Join(shells, ", ")),
			"a shell as PID 1 ignores SIGTERM unless it traps it: the app never starts its graceful shutdown and is SIGKILLed at the end of the grace period"},
		Fix: "exec the server from the script (exec ./server ...), or run it directly as the command"}, true
}

// servingContainers are the containers behind the Service's target ports,
// native sidecars among them (a TLS terminator in front of the app: the
// Service may target its port, and its readiness probe gates the pod's);
// without a Service (or a port match), the app's containers declaring
// ports; failing that, all of the app's.
func servingContainers(spec corev1.PodSpec, svc *corev1.Service) []corev1.Container {
	cs := spec.Containers
	candidates := slices.Clone(cs)
	for _, c := range spec.InitContainers {
		if rollout.IsNativeSidecar(c) {
			candidates = append(candidates, c)
		}
	}
	var out []corev1.Container
	if svc != nil {
		for _, c := range candidates {
			if servesAny(c, svc.Spec.Ports) {
				out = append(out, c)
			}
		}
	}
	if len(out) == 0 {
		for _, c := range cs {
			if len(c.Ports) > 0 {
				out = append(out, c)
			}
		}
	}
	if len(out) == 0 {
		out = cs
	}
	return out
}

func servesAny(c corev1.Container, ports []corev1.ServicePort) bool {
	for _, sp := range ports {
		target := sp.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(sp.Port)
		}
		for _, cp := range c.Ports {
			if (target.Type == intstr.String && cp.Name == target.StrVal) || (target.Type == intstr.Int && cp.ContainerPort == target.IntVal) {
				return true
			}
		}
	}
	return false
}

var sleepRE = regexp.MustCompile(`(?:^|[\s;&|])(?:/bin/|/usr/bin/)?sleep\s+([0-9]+)(?:s?)(?:$|[\s;&|])`)

// preStopSeconds is how long the container's preStop hook waits, when that
// can be read from the spec (a sleep action, or an exec of sleep N).
func preStopSeconds(c corev1.Container) (int64, bool) {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0, false
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		return h.Sleep.Seconds, true
	case h.Exec != nil:
		if m := sleepRE.FindStringSubmatch(strings.Join(h.Exec.Command, " ")); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// shellWithoutExec: the command runs a shell -c script that neither execs
// its last step nor traps TERM.
func shellWithoutExec(c corev1.Container) bool {
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) < 3 {
		return false
	}
	base := argv[0][strings.LastIndexByte(argv[0], '/')+1:]
	if base != "sh" && base != "bash" && base != "ash" && base != "dash" {
		return false
	}
	if argv[1] != "-c" && argv[1] != "-ec" && argv[1] != "-ce" {
		return false
	}
	script := strings.Join(argv[2:], " ")
	return !strings.Contains(script, "exec ") && !strings.Contains(script, "trap ")
}

// zeroReady: the strategy may take every ready pod away during a rollout
// (see the kind's function).
func zeroReady(w rollout.Workload, svc *corev1.Service) (report.Finding, bool) {
	switch {
	case w.StatefulSet != nil:
		return zeroReadyStatefulSet(w.StatefulSet)
	case w.DaemonSet != nil:
		return zeroReadyDaemonSet(w.DaemonSet, svc)
	case w.Rollout != nil:
		return zeroReadyArgoCanary(w.Rollout)
	}
	return zeroReadyDeployment(w.Deployment)
}

// zeroReadyArgoCanary: an Argo canary without traffic routing scales its
// stable ReplicaSet down as the canary's comes up, keeping the replicas
// less maxUnavailable available, as a Deployment does (Argo's
// resolveFenceposts: the same rounding, the same 25% defaults). A
// blue/green keeps the active ReplicaSet until the new one is available
// and switched to, and a canary with traffic routing keeps the stable one
// whole: neither can leave no ready pod this way.
func zeroReadyArgoCanary(r *rollout.ArgoRollout) (report.Finding, bool) {
	c := r.Spec.Strategy.Canary
	if c == nil || len(c.TrafficRouting) > 0 {
		return report.Finding{}, false
	}
	replicas, unavail, surge := argoCanaryLimits(r)
	f, ok := rollingZeroReady(replicas, unavail, surge)
	if !ok {
		return f, false
	}
	f.Evidence[0] = "argo canary with " + f.Evidence[0]
	f.Fix = "set spec.strategy.canary.maxUnavailable: 0 and maxSurge: 1 (canary pods come up before stable ones go), or run more replicas"
	return f, true
}

// checkCanaryWeights: without traffic routing an Argo canary's weight is a
// share of its pods, and Argo Rollouts approximates it with whole pods
// (argoCanaryPods). A weight the pods cannot come near gives the canary a
// different share of new connections than the steps say: a bad release
// reaches more (or fewer) users than planned. A Rollout with
// setCanaryScale steps sets its canary's pods itself: not judged.
func checkCanaryWeights(s *subject) (report.Finding, bool) {
	r := s.Workload.Rollout
	if r == nil || r.Spec.Strategy.Canary == nil || len(r.Spec.Strategy.Canary.TrafficRouting) > 0 {
		return report.Finding{}, false
	}
	c := r.Spec.Strategy.Canary
	// maxSurge as resolveFenceposts resolves it (rounded up; when both are
	// 0 it raises maxUnavailable, not the surge).
	replicas, _, surge := argoCanaryLimits(r)
	maxSurge, err := intstr.GetScaledValueFromIntOrPercent(&surge, int(replicas), true)
	if err != nil || replicas < 1 {
		return report.Finding{}, false
	}
	weights, ok := setWeights(c)
	if !ok {
		return report.Finding{}, false
	}
	var evidence []string
	for _, w := range weights {
		if w <= 0 || w >= 100 {
			continue
		}
		canary, stable := argoCanaryPods(replicas, w, int32(maxSurge))
		share := 100 * float64(canary) / float64(canary+stable)
		if math.Abs(share-float64(w)) <= max(5, float64(w)/4) {
			continue
		}
		evidence = append(evidence, fmt.Sprintf("setWeight: %d on %d replicas: Argo Rollouts runs %d canary pod(s) beside %d stable one(s), %.0f%% of the pods", w, replicas, canary, stable, share))
	}
	if len(evidence) == 0 {
		return report.Finding{}, false
	}
	evidence = append(evidence, "without traffic routing the Service spreads new connections over the pods: the canary gets about its share of the pods, not the weight")
	return report.Finding{Title: "a canary weight its pods cannot express: the canary gets a different share of the traffic",
		Evidence: evidence,
		Fix: "run replicas that express every weight (replicas × weight / 100 whole: 10 replicas for steps of 10%), give the canary traffic routing " +
			"(spec.strategy.canary.trafficRouting: a proxy weighs each request), or set the canary's pods yourself (setCanaryScale)"}, true
}

// checkTraefikWeightedRouteOnePod: Traefik builds a weighted TraefikService (how
// Argo routes a canary through it) only while each of its Services has a
// serving endpoint (allowEmptyServices is false by default); while one has
// none it drops the TraefikService and the routes over it, and answers 404
// for the whole host, not that Service's share. A side of one pod empties
// its Service whenever that pod is unready: a CI run of the lab's
// argo-canary-traefik failed 401 requests so in 2 s (its canary pod's
// readiness, by the signature; TestLab makes it on purpose). With traffic
// routing Argo Rollouts v1.10.1 runs
// ceil(weight × replicas / maxTrafficWeight) canary pods, at least
// minPodsPerReplicaSet (capped at replicas), and keeps the stable side
// whole unless dynamicStableScale scales it the same way
// (CalculateReplicaCountsForTrafficRoutedCanary). A Rollout with
// setCanaryScale steps sets its pods itself: not judged. Any other
// workload's Service weighed in a TraefikService by hand:
// checkHandWeightedRoutes.
func checkTraefikWeightedRouteOnePod(s *subject) (report.Finding, bool) {
	r := s.Workload.Rollout
	if r == nil || r.Spec.Strategy.Canary == nil || len(r.Spec.Strategy.Canary.TrafficRouting) == 0 {
		return checkHandWeightedRoutes(s)
	}
	c := r.Spec.Strategy.Canary
	var routing struct {
		Traefik          json.RawMessage `json:"traefik"`
		MaxTrafficWeight *int32          `json:"maxTrafficWeight"`
	}
	if json.Unmarshal(c.TrafficRouting, &routing) != nil || len(routing.Traefik) == 0 {
		return checkHandWeightedRoutes(s)
	}
	maxWeight := int32(100)
	if routing.MaxTrafficWeight != nil && *routing.MaxTrafficWeight > 0 {
		maxWeight = *routing.MaxTrafficWeight
	}
	replicas, _, _ := argoCanaryLimits(r)
	pods := func(weight int32) int32 {
		n := int32(math.Ceil(float64(weight) * float64(replicas) / float64(maxWeight)))
		if n > 0 && c.MinPodsPerReplicaSet != nil {
			n = max(n, min(*c.MinPodsPerReplicaSet, replicas))
		}
		return n
	}
	weights, ok := setWeights(c)
	if !ok {
		return report.Finding{}, false
	}
	var evidence []string
	for _, w := range weights {
		if w <= 0 || w >= maxWeight {
			continue
		}
		if pods(w) == 1 {
			evidence = append(evidence, fmt.Sprintf("setWeight: %d on %d replicas: Argo Rollouts runs 1 canary pod behind service %s", w, replicas, orUnnamed(c.CanaryService)))
		}
		if c.DynamicStableScale && pods(maxWeight-w) == 1 {
			evidence = append(evidence, fmt.Sprintf("setWeight: %d on %d replicas with dynamicStableScale: Argo Rollouts keeps 1 stable pod behind service %s", w, replicas, orUnnamed(c.StableService)))
		}
	}
	if len(evidence) == 0 {
		return report.Finding{}, false
	}
	if n := s.containers(func(ct corev1.Container) bool {
		return ct.ReadinessProbe != nil && ct.ReadinessProbe.FailureThreshold == 1
	}); len(n) > 0 {
		evidence = append(evidence, fmt.Sprintf("its readiness probe takes a pod out on one failed probe (failureThreshold: 1 in %s): one slow answer does it", strings.Join(n, ", ")))
	}
	evidence = append(evidence, "trafficRouting.traefik: Traefik builds the weighted TraefikService only while each of its Services has a serving endpoint "+
		"(allowEmptyServices is false by default); while that one pod is unready (a failed readiness probe, a restart, an eviction) "+
		"it drops the TraefikService and the routes over it, and answers 404 for every request of the host, not that side's share")
	return report.Finding{Title: "a side of the weighted route is one pod: its readiness is the whole route's",
		Evidence: evidence,
		Fix: "run two pods or more on each side at every step (spec.strategy.canary.minPodsPerReplicaSet: 2, or replicas with weight × replicas / 100 above 1) " +
			"and a readiness probe that outlasts one slow answer (failureThreshold above 1); and in Traefik providers.kubernetesCRD.allowEmptyServices=true: " +
			"it keeps the route while a side is empty, and Argo Rollouts sets the weight of a canary with no available pod to 0, so the stable side " +
			"takes its share (until Traefik has that weight, it answers the empty side's share 503 itself)"}, true
}

// setWeights are a canary's setWeight values, each once, in step order;
// false when a setCanaryScale step sets its pods itself (then neither
// weight check judges it).
func setWeights(c *rollout.ArgoCanary) ([]int32, bool) {
	var out []int32
	for _, st := range c.Steps {
		if len(st.SetCanaryScale) > 0 {
			return nil, false
		}
		if st.SetWeight != nil && !slices.Contains(out, *st.SetWeight) {
			out = append(out, *st.SetWeight)
		}
	}
	return out, true
}

// orUnnamed is a Service's name, or a phrase for one not named.
func orUnnamed(name string) string {
	if name == "" {
		return "(none named)"
	}
	return name
}

// argoCanaryPods is how many canary and stable pods Argo Rollouts v1.10.1
// runs for weight on a canary without traffic routing
// (approximateWeightedCanaryStableReplicaCounts): of the canary counts
// rounded up and down, over replicas and, when it may surge, replicas+1,
// the one nearest the weight, the first found on a tie; a count of 0 only
// when one replica may not surge, a rounded-down count not when its
// rounding is a tie (x.5: the larger is taken).
func argoCanaryPods(replicas, weight, maxSurge int32) (canary, stable int32) {
	type option struct{ canary, total int32 }
	exact := float64(replicas*weight) / 100
	ceil, floor := int32(math.Ceil(exact)), int32(math.Floor(exact))
	tied := func(total int32) bool {
		_, frac := math.Modf(float64(total) * float64(weight) / 100)
		return frac == 0.5
	}
	zeroAllowed := replicas == 1 && maxSurge == 0
	var options []option
	if ceil < replicas || zeroAllowed {
		options = append(options, option{ceil, replicas})
	}
	if !tied(replicas) && (floor != 0 || zeroAllowed) {
		options = append(options, option{floor, replicas})
	}
	if maxSurge > 0 {
		options = append(options, option{ceil, replicas + 1})
		if !tied(replicas+1) && (floor != 0 || zeroAllowed) {
			options = append(options, option{floor, replicas + 1})
		}
	}
	if len(options) == 0 {
		return 0, replicas
	}
	delta := func(o option) float64 { return math.Abs(float64(o.canary*100)/float64(o.total) - float64(weight)) }
	best := options[0]
	for _, o := range options[1:] {
		if delta(o) < delta(best) {
			best = o
		}
	}
	return best.canary, best.total - best.canary
}

// argoCanaryLimits are a canary's replicas (spec.replicas, 1 when unset)
// and its maxUnavailable and maxSurge with Argo's defaults (25% each), a
// bare number string read as a percentage, as Argo reads it.
func argoCanaryLimits(r *rollout.ArgoRollout) (replicas int32, unavail, surge intstr.IntOrString) {
	replicas = 1
	if r.Spec.Replicas != nil {
		replicas = *r.Spec.Replicas
	}
	unavail, surge = intstr.FromString("25%"), intstr.FromString("25%")
	if c := r.Spec.Strategy.Canary; c != nil && c.MaxUnavailable != nil {
		unavail = argoPercent(*c.MaxUnavailable)
	}
	if c := r.Spec.Strategy.Canary; c != nil && c.MaxSurge != nil {
		surge = argoPercent(*c.MaxSurge)
	}
	return replicas, unavail, surge
}

// zeroReadyStatefulSet: a StatefulSet's rolling update deletes a pod and
// only then creates its replacement under the same name (it has no
// surge): with maxUnavailable (1 by default) as many replicas as it has,
// the Service is left with no ready pod while they are recreated.
func zeroReadyStatefulSet(s *appsv1.StatefulSet) (report.Finding, bool) {
	replicas := int32(1)
	if s.Spec.Replicas != nil {
		replicas = *s.Spec.Replicas
	}
	if replicas == 0 || s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return report.Finding{}, false
	}
	unavail := intstr.FromInt32(1)
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		unavail = *ru.MaxUnavailable
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(&unavail, int(replicas), false)
	if err != nil {
		return report.Finding{}, false
	}
	u = max(u, 1) // the controller always replaces at least one pod at a time
	if int(replicas)-u >= 1 {
		return report.Finding{}, false
	}
	return report.Finding{Title: "the rollout can leave no ready pod",
		Evidence: []string{fmt.Sprintf("statefulset with replicas %d, maxUnavailable %s: a rolling update deletes a pod before it creates its replacement under the same name (a StatefulSet has no surge), so the Service has no ready pod while it is recreated", replicas, unavail.String())},
		Fix:      "run at least 2 replicas (with maxUnavailable 1), so one serves while another is recreated"}, true
}

// zeroReadyDaemonSet: without surge a DaemonSet's rolling update deletes
// a node's pod before its replacement starts. That leaves the node with no
// local endpoint, which only matters when the Service keeps traffic on the
// node it entered (externalTrafficPolicy or internalTrafficPolicy Local).
func zeroReadyDaemonSet(d *appsv1.DaemonSet, svc *corev1.Service) (report.Finding, bool) {
	if svc == nil || d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		return report.Finding{}, false
	}
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && svc.Spec.Type != corev1.ServiceTypeClusterIP
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		local = true
	}
	surge := intstr.FromInt32(0)
	if ru := d.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
		surge = *ru.MaxSurge
	}
	if !local || surge.String() != "0" && surge.String() != "0%" {
		return report.Finding{}, false
	}
	return report.Finding{Title: "the rollout can leave a node with no ready pod while its traffic must stay there",
		Evidence: []string{fmt.Sprintf("daemonset with maxSurge %s: a rolling update deletes each node's pod before its replacement starts", surge.String()),
			fmt.Sprintf("service %s keeps traffic on the node it entered (a Local traffic policy): that node drops it until the new pod is ready", svc.Name)},
		Fix: "set updateStrategy.rollingUpdate.maxSurge: 1 and maxUnavailable: 0, so each node's new pod is ready before the old one goes (with a preStop sleep, so the old one keeps serving while endpoints propagate)"}, true
}

// zeroReadyDeployment: maxUnavailable rounds down and maxSurge up, as the
// Deployment controller does; both 0 means maxUnavailable 1.
func zeroReadyDeployment(d *appsv1.Deployment) (report.Finding, bool) {
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if replicas == 0 {
		return report.Finding{}, false
	}
	f := report.Finding{Title: "the rollout can leave no ready pod"}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		f.Evidence = []string{"strategy Recreate: every old pod is terminated before any new pod starts"}
		f.Fix = "use strategy RollingUpdate with maxUnavailable: 0 and maxSurge: 1 (or 25%)"
		return f, true
	}
	unavail, surge := intstr.FromString("25%"), intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxUnavailable != nil {
			unavail = *ru.MaxUnavailable
		}
		if ru.MaxSurge != nil {
			surge = *ru.MaxSurge
		}
	}
	return rollingZeroReady(replicas, unavail, surge)
}

// argoPercent: Argo reads any string bound as a percentage, "%" or not
// (its defaults are "25"); intstr's scaling wants the "%".
func argoPercent(v intstr.IntOrString) intstr.IntOrString {
	if v.Type == intstr.String && !strings.HasSuffix(v.StrVal, "%") {
		return intstr.FromString(v.StrVal + "%")
	}
	return v
}

// rollingZeroReady: a rolling update of replicas with these bounds may
// leave no ready pod. maxUnavailable rounds down and maxSurge up; both 0
// means maxUnavailable 1 (the Deployment controller and Argo alike).
func rollingZeroReady(replicas int32, unavail, surge intstr.IntOrString) (report.Finding, bool) {
	if replicas == 0 {
		return report.Finding{}, false
	}
	f := report.Finding{Title: "the rollout can leave no ready pod"}
	u, err1 := intstr.GetScaledValueFromIntOrPercent(&unavail, int(replicas), false)
	s, err2 := intstr.GetScaledValueFromIntOrPercent(&surge, int(replicas), true)
	if err1 != nil || err2 != nil {
		return report.Finding{}, false
	}
	if u == 0 && s == 0 {
		u = 1
	}
	if int(replicas)-u >= 1 {
		return report.Finding{}, false
	}
	f.Evidence = []string{fmt.Sprintf("replicas %d, maxUnavailable %s (= %d): the controller may scale the ready pods down to %d before new ones are ready",
		replicas, unavail.String(), u, max(0, int(replicas)-u))}
	f.Fix = "set maxUnavailable: 0 and maxSurge: 1 (new pods come up before old ones go), or run more replicas"
	return f, true
}

// budgetAllowance is how many disruptions budget p allows with every pod
// it counts ready, for a workload of desired replicas, and why, in words.
// Its pods are all that its selector matches, as the disruption
// controller counts them (status.expectedPods, once it has seen the
// budget's spec): one budget over several workloads counts theirs too.
// Before the controller has, the workload's replicas stand in, and why
// says so. Percentages round up, as the controller rounds them. ok false:
// the budget does not select the workload's pods, or says neither field.
func budgetAllowance(p *policyv1.PodDisruptionBudget, podLabels labels.Set, desired int) (allowed int, why string, ok bool) {
	if desired <= 0 || !rollout.BudgetSelects(p, podLabels) {
		return 0, "", false
	}
	pool, counted := desired, "the workload's replicas, the budget's status not yet observed"
	if p.Status.ObservedGeneration >= p.Generation && p.Status.ExpectedPods > 0 {
		pool, counted = int(p.Status.ExpectedPods), "the pods its selector matches, by its status"
	}
	switch {
	case p.Spec.MaxUnavailable != nil:
		v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, pool, true)
		if err != nil {
			return 0, "", false
		}
		return min(max(v, 0), pool), fmt.Sprintf("maxUnavailable %s of %d pods: %s", p.Spec.MaxUnavailable.String(), pool, counted), true
	case p.Spec.MinAvailable != nil:
		v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MinAvailable, pool, true)
		if err != nil {
			return 0, "", false
		}
		return max(pool-v, 0), fmt.Sprintf("minAvailable %s of %d pods: %s", p.Spec.MinAvailable.String(), pool, counted), true
	}
	return 0, "", false
}

// checkPDBAllowsEviction: a budget covering the pods that allows no
// disruption even when every pod is ready (maxUnavailable 0, or
// minAvailable the whole of its pods) refuses every eviction: a drain or
// node upgrade waits on it for ever.
func checkPDBAllowsEviction(s *subject) (report.Finding, bool) {
	w := s.Workload
	if !drainEvicts(w) {
		return report.Finding{}, false
	}
	desired, _, _, _ := w.Counts()
	for _, p := range s.PDBs {
		allowed, why, ok := budgetAllowance(&p, labels.Set(w.Template().Labels), int(desired))
		if !ok || allowed > 0 {
			continue
		}
		ref := w.Ref()
		return report.Finding{Title: fmt.Sprintf("PodDisruptionBudget %s allows no eviction of %s's pods", p.Name, ref.Name),
			Evidence: []string{fmt.Sprintf("PodDisruptionBudget %s (%s) selects the pods of %s %s: even with every pod ready it allows no disruption", p.Name, why, ref.Kind.Lower(), ref.Name),
				"the Eviction API refuses every eviction it covers (429): a node drain or cluster upgrade waits on it for ever (rollprobe run --drain: drain-blocked-by-pod-disruption-budget)"},
			Fix: fmt.Sprintf("set maxUnavailable: 1 on PodDisruptionBudget %s (or minAvailable below the replicas), and run more replicas than it keeps", p.Name)}, true
	}
	return report.Finding{}, false
}

// checkPDBAllowsEvictingAll: a budget covering the pods that, with every
// pod ready, allows as many disruptions as the workload has replicas lets
// a drain of a node holding them all evict them together: it protects
// nothing of this workload (it counts other workloads' pods, or keeps too
// few). One replica is left out: with one, any budget that allows an
// eviction allows all, and the fix is more replicas
// (rollout-can-leave-no-ready-pod's matter).
func checkPDBAllowsEvictingAll(s *subject) (report.Finding, bool) {
	w := s.Workload
	desired, _, _, _ := w.Counts()
	if desired < 2 || !drainEvicts(w) {
		return report.Finding{}, false
	}
	for _, p := range s.PDBs {
		allowed, why, ok := budgetAllowance(&p, labels.Set(w.Template().Labels), int(desired))
		if !ok || allowed < int(desired) {
			continue
		}
		ref := w.Ref()
		return report.Finding{Title: fmt.Sprintf("PodDisruptionBudget %s lets a drain evict every pod of %s at once", p.Name, ref.Name),
			Evidence: []string{fmt.Sprintf("PodDisruptionBudget %s (%s) selects the pods of %s %s: with every pod ready it allows %d disruptions, and %s has %d replicas", p.Name, why, ref.Kind.Lower(), ref.Name, allowed, ref.Name, desired),
				"a drain of a node that holds them all evicts them together, and the Service has nothing to serve until a replacement is ready (rollprobe run --drain measures it: pod-disruption-budget-too-loose)"},
			Fix: fmt.Sprintf("give %s a budget of its own: a selector matching its pods only, with maxUnavailable: 1 (or minAvailable below its replicas); fix PodDisruptionBudget %s", ref.Name, p.Name)}, true
	}
	return report.Finding{}, false
}

func coveredByPDB(tmpl *corev1.PodTemplateSpec, pdbs []policyv1.PodDisruptionBudget) bool {
	podLabels := labels.Set(tmpl.Labels)
	for _, p := range pdbs {
		if rollout.BudgetSelects(&p, podLabels) {
			return true
		}
	}
	return false
}
