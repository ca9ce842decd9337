// Package tui is rollprobe's live terminal dashboard (Bubble Tea). The
// model only renders Snapshots; one Sampler builds them from the run's
// recorder and timeline at most 10 times a second, never from the prober's
// workers. Commands decide when to use it (a TTY, --ui) and write the
// reports after it returns.
package tui

import (
	"time"

	"github.com/rollprobe/rollprobe/fleet"
)

// Snapshot is everything one frame shows.
type Snapshot struct {
	Command string // "run" or "probe"
	Target  string
	Phase   string // baseline, rolling, rolling back (an aborted Argo Rollout), settling, done (run); probing, done (probe)
	Elapsed time.Duration
	// ViewStalled: how long the view of the cluster has had no sign of
	// life, when over report.ViewStallBound; 0 while live.
	ViewStalled time.Duration
	// ServedUnknown: responses name no pod (no --backend-header), so what
	// each pod served is not known, and the pods pane says so rather than 0.
	ServedUnknown bool

	TargetRate   float64 // 0: closed model
	AchievedRate float64 // the run's average so far

	Sent, OK, Failed uint64
	Classes          []ClassCount // failure classes with a count, in the report's order
	Latency          Quantiles    // from the intended send time, run-long

	// Seconds are the run's last seconds (at most ChartSeconds, more than
	// any chart shows), Seconds[i] being second SecondsFrom+i; the last may
	// be the still-open current second.
	Seconds     []Second
	SecondsFrom int
	// Marks are the seconds where pods were deleted or turned ready.
	Marks []Mark

	Rollout *Rollout // nil for probe
	// Probers are the in-cluster probers' statuses (run --probers).
	Probers []fleet.Status
	// Paths are each path's counts when the run probes several.
	Paths []PathCount
	Pods  []Pod
	Log   []LogLine // everything logged so far, oldest first
}

// PathCount is one path's counts so far.
type PathCount struct {
	Name         string
	Sent, Failed uint64
}

// ClassCount is one failure class's count.
type ClassCount struct {
	Class string
	N     uint64
}

// Quantiles of latency.
type Quantiles struct{ P50, P90, P99, Max time.Duration }

// Second is one second of traffic.
type Second struct{ Sent, OK, Failed uint64 }

// MarkKind is what happened to pods in a second.
type MarkKind int

const (
	MarkReady   MarkKind = iota + 1 // a new pod turned ready
	MarkDeleted                     // a pod's deletion was requested
)

// Mark is a pod lifecycle change at a second of the run.
type Mark struct {
	Second int
	Kind   MarkKind
}

// Rollout is the workload's progress.
type Rollout struct {
	Kind                                       string // "deployment", "statefulset", "daemonset"
	Name                                       string // NAMESPACE/NAME
	OldRevision, NewRevision                   string
	Desired, Updated, Ready, Available, OldPod int32 // OldPod: old pods not yet gone
}

// Pod is a row of the pod table.
type Pod struct {
	Name, Revision              string
	Ready, Serving, Terminating bool
	Gone                        bool
	Age                         time.Duration
	Served                      uint64 // responses naming it (--backend-header); see Snapshot.ServedUnknown
}

// LogLine is an entry of the event log: a lifecycle event, an outage
// opening or closing, or a line the run logged.
type LogLine struct {
	At   time.Duration // since the start
	Text string
	Bad  bool // an outage or a failure: shown in the failure colour
}
