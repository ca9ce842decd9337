package report

import "time"

// EventKind names a lifecycle event. The names appear in the report.
type EventKind string

const (
	PodPresent           EventKind = "pod_present" // existed when watching began
	PodCreated           EventKind = "pod_created"
	PodScheduled         EventKind = "pod_scheduled"
	ContainerStarted     EventKind = "container_started"
	PodReady             EventKind = "pod_ready"
	PodUnready           EventKind = "pod_unready"
	PodDeletionRequested EventKind = "pod_deletion_requested"
	ContainerTerminated  EventKind = "container_terminated"
	PodGone              EventKind = "pod_gone"
	EndpointAdded        EventKind = "endpoint_added"
	EndpointReady        EventKind = "endpoint_ready"
	EndpointUnready      EventKind = "endpoint_unready"
	EndpointServing      EventKind = "endpoint_serving"
	EndpointNotServing   EventKind = "endpoint_not_serving"
	EndpointTerminating  EventKind = "endpoint_terminating"
	EndpointRemoved      EventKind = "endpoint_removed"
	RevisionCreated      EventKind = "revision_created" // a new ReplicaSet or ControllerRevision
	PodEvicted           EventKind = "pod_evicted"      // a drain's eviction was accepted
	EvictionRefused      EventKind = "eviction_refused" // a PodDisruptionBudget refused a drain's eviction (429); asked again
	RolloutTriggered     EventKind = "rollout_triggered"
	RolloutComplete      EventKind = "rollout_complete"
	RolloutFailed        EventKind = "rollout_failed"
	AllOldPodsGone       EventKind = "old_pods_gone"
	AbortedPodsGone      EventKind = "aborted_pods_gone" // an aborted Argo Rollout's new revision scaled down: every pod of it gone
	NoRollout            EventKind = "no_rollout"        // the trigger ended without changing the workload
	WatchError           EventKind = "watch_error"       // a watch broke; the informer resumes it
	KubeEvent            EventKind = "k8s_event"         // a Kubernetes Event about our objects
	ViewStalled          EventKind = "view_stalled"      // no list answered, no watch event, for longer than ViewStallBound
	ViewResumed          EventKind = "view_resumed"      // the first sign of life after a stall

	// A drain's eviction that ended otherwise: the API answered an error
	// other than a budget's refusal, and the drain asked no more
	// (eviction_failed); or a pod whose eviction a budget refused was
	// being deleted by another hand than the drain's (its controller, a
	// user), found so when an eviction was then accepted or at the
	// drain's end (eviction_overtaken).
	EvictionFailed    EventKind = "eviction_failed"
	EvictionOvertaken EventKind = "eviction_overtaken"

	// An Argo Rollout's own progress, from its status: a canary step
	// reached (rollout_step, Detail "step 2 of 5: setWeight: 50"), a pause
	// begun (rollout_paused, Detail its reason), rollprobe's promote
	// through a pause (rollout_promoted), a blue/green active Service
	// switched to another revision (active_switched, Revision the new one),
	// an old ReplicaSet given the time it will be scaled down
	// (scale_down_deadline: Revision its revision, Detail the deadline and
	// how long after the event it is).
	RolloutStep       EventKind = "rollout_step"
	RolloutPaused     EventKind = "rollout_paused"
	RolloutPromoted   EventKind = "rollout_promoted"
	ActiveSwitched    EventKind = "active_switched"
	ScaleDownDeadline EventKind = "scale_down_deadline"
)

// IsEndpoint reports whether k is one of the endpoint_* kinds, whose events
// carry the endpoint's conditions in Ready, Serving and Terminating.
func (k EventKind) IsEndpoint() bool {
	switch k {
	case EndpointAdded, EndpointReady, EndpointUnready, EndpointServing, EndpointNotServing, EndpointTerminating, EndpointRemoved:
		return true
	}
	return false
}

// SIGKILLExitCode is the exit code of a container killed with SIGKILL
// (128 + 9): the kubelet's end of a grace period.
const SIGKILLExitCode = 137

// Event is one thing that happened. At is when rollprobe received it on the
// local clock (the order that counts: metav1.Time has 1 s precision);
// Server is the time the object itself records, where there is one.
//
// Ready, Serving and Terminating are facts, not prose: on endpoint_* events
// they are the endpoint's EndpointSlice conditions after the change (for
// endpoint_removed, the last ones seen); on pod_present, Ready is the pod's
// Ready condition. Elsewhere they are false. Absent in JSON means false.
type Event struct {
	At     time.Time  `json:"at"`
	Server *time.Time `json:"server_time,omitempty"`
	// ResourceVersion, on pod events, is the pod's version in the update
	// that showed the change.
	ResourceVersion string `json:"resource_version,omitempty"`
	// CommittedAfter, on pod_deletion_requested, is a local time the
	// apiserver committed the deletion after: the send time of the last
	// list whose resourceVersion was below the deletion's (see
	// rollout.RevisionClock). Unlike Server it has no 1 s flooring.
	CommittedAfter *time.Time `json:"committed_after,omitempty"`
	// PreStopSleepS, on pod_deletion_requested, is how long after the
	// request the kubelet cannot yet have told any of the pod's containers
	// to stop: the smallest lifecycle.preStop.sleep of its containers,
	// capped by the deletion's grace period (0: a container has no sleep
	// action; an exec hook is not counted, as it may fail at once).
	PreStopSleepS int64 `json:"prestop_sleep_s,omitempty"`
	// GracePeriodS, on pod_deletion_requested, is the deletion's grace
	// period (metadata.deletionGracePeriodSeconds: the pod's
	// terminationGracePeriodSeconds unless the request gave its own); nil
	// when the pod did not say. 0 is a grace period: a forced deletion.
	GracePeriodS *int64    `json:"grace_period_s,omitempty"`
	Kind         EventKind `json:"kind"`
	Pod          string    `json:"pod,omitempty"`
	Revision     string    `json:"revision,omitempty"`
	IP           string    `json:"ip,omitempty"`
	// Node, on pod and endpoint events, is the node the pod runs on (the
	// EndpointSlice's nodeName for endpoints): what a node-local traffic
	// policy routes by. "" while a pod is not scheduled.
	Node        string `json:"node,omitempty"`
	Ready       bool   `json:"ready,omitempty"`
	Serving     bool   `json:"serving,omitempty"`
	Terminating bool   `json:"terminating,omitempty"`
	// ReadinessConnects, on pod_ready and pod_present, is that the pod's
	// readiness probe connects to every port the Service sends it traffic
	// on: Ready, it was listening there.
	ReadinessConnects bool   `json:"readiness_connects,omitempty"`
	ExitCode          *int32 `json:"exit_code,omitempty"`
	// Container, on container_started and container_terminated, is the
	// container's name: with sidecars, which one stopped matters.
	Container string `json:"container,omitempty"`
	// Sidecar, on those events, is that the container is a native sidecar:
	// an init container with restartPolicy Always, which runs beside the
	// app's containers; at the pod's deletion the kubelet sends it SIGTERM
	// once they have exited, or once the grace period has run out waiting
	// for them. Ordinary init containers, which end before the pod serves,
	// have no events.
	Sidecar bool `json:"sidecar,omitempty"`
	// ServicePort, on those events, is that the container declares a port
	// the run's Service sends its traffic to (rollout.ServiceContainers),
	// so its exit ends the pod's share of that traffic. False where none
	// does, or where it cannot be told (a target port given as a number
	// no container declares).
	ServicePort bool   `json:"service_port,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Detail      string `json:"detail,omitempty"`
	// Budgets, on pod_evicted, are the PodDisruptionBudgets that selected
	// the pod when the drain began, each as its name, what its spec keeps
	// and the disruptions its status allowed then ("web (maxUnavailable: 2;
	// 2 disruptions allowed)"): the budgets that let the eviction
	// through. Absent: none selected it, or they were not read (the pod is
	// in another namespace than the workload's; or reading failed, and
	// Detail says so).
	Budgets []string `json:"budgets,omitempty"`
}

// ContainerNamed is "container NAME" (or "sidecar NAME" for a native
// sidecar) for prose, or "container" when the name is unknown (a report
// written before timeline[].container).
func ContainerNamed(name string, sidecar bool) string {
	switch {
	case name == "":
		return "container"
	case sidecar:
		return "sidecar " + name
	}
	return "container " + name
}

// Killed reports whether e is a container that ended by SIGKILL.
func (e Event) Killed() bool {
	return e.Kind == ContainerTerminated && e.ExitCode != nil && *e.ExitCode == SIGKILLExitCode
}

// IsDrain reports whether k is one of a drain's eviction kinds. They may
// name a pod of any workload on the node, not only the run's.
func (k EventKind) IsDrain() bool {
	switch k {
	case PodEvicted, EvictionRefused, EvictionFailed, EvictionOvertaken:
		return true
	}
	return false
}

// AbortedWayBack is an aborted Argo Rollout's way back as the run followed
// it: when the run saw the abort (its first rollout_failed event: the
// Rollout Degraded), when every pod of the aborted revision was gone
// (aborted_pods_gone, written only once the run followed the abort to
// that end) and that revision. ok is false when the run did not follow an
// abort to its end.
func AbortedWayBack(r *Report) (seenAt, goneAt time.Time, revision string, ok bool) {
	for _, e := range r.Timeline {
		switch e.Kind {
		case RolloutFailed:
			if seenAt.IsZero() {
				seenAt = e.At
			}
		case AbortedPodsGone:
			goneAt, revision = e.At, e.Revision
		}
	}
	return seenAt, goneAt, revision, !seenAt.IsZero() && revision != ""
}
