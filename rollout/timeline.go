package rollout

import (
	"sync"
	"time"
)

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
	RevisionCreated      EventKind = "revision_created" // a new ReplicaSet
	RolloutTriggered     EventKind = "rollout_triggered"
	RolloutComplete      EventKind = "rollout_complete"
	RolloutFailed        EventKind = "rollout_failed"
	AllOldPodsGone       EventKind = "old_pods_gone"
	WatchError           EventKind = "watch_error" // a watch broke; the informer resumes it
	KubeEvent            EventKind = "k8s_event"   // a Kubernetes Event about our objects
)

// Event is one thing that happened. At is when rollprobe received it on the
// local clock (the order that counts: metav1.Time has 1 s precision);
// Server is the time the object itself records, where there is one.
type Event struct {
	At       time.Time  `json:"at"`
	Server   *time.Time `json:"server_time,omitempty"`
	Kind     EventKind  `json:"kind"`
	Pod      string     `json:"pod,omitempty"`
	Revision string     `json:"revision,omitempty"`
	IP       string     `json:"ip,omitempty"`
	ExitCode *int32     `json:"exit_code,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Detail   string     `json:"detail,omitempty"`
}

// Timeline is an append-only, concurrency-safe list of events in receive
// order.
type Timeline struct {
	mu     sync.Mutex
	events []Event
	now    func() time.Time
}

// NewTimeline makes a timeline stamping events with now (time.Now if nil).
func NewTimeline(now func() time.Time) *Timeline {
	if now == nil {
		now = time.Now
	}
	return &Timeline{now: now}
}

// Add stamps e with the receive time (unless set) and appends it.
func (t *Timeline) Add(e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.At.IsZero() {
		e.At = t.now()
	}
	t.events = append(t.events, e)
}

// Events returns a copy of every event so far.
func (t *Timeline) Events() []Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Event(nil), t.events...)
}

// Since returns the events after the first n, for incremental readers.
func (t *Timeline) Since(n int) []Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n >= len(t.events) {
		return nil
	}
	return append([]Event(nil), t.events[n:]...)
}

// Kinds filters events by kind, in order.
func Kinds(events []Event, kinds ...EventKind) []Event {
	want := map[EventKind]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	var out []Event
	for _, e := range events {
		if want[e.Kind] {
			out = append(out, e)
		}
	}
	return out
}
