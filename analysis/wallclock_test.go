package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// steppedClock is the run's clock set 3 s forward in the tick from 1.0 to
// 1.1 s (as this project's CI machines' clocks were): from the run's
// second 2 on, second t began at started_at plus t plus 3 s on the wall
// clock, where the timeline's times are.
var steppedClock = []report.ClockLead{{AtMS: 0}, {AtMS: 1000}, {AtMS: 1100, LeadMS: 3000}}

// Per-pod traffic meets the timeline on the wall clock. A StatefulSet's
// web-2 was deleted at +5.0 s (wall) and its successor created at +5.6 s:
// responses naming web-2 in the run's second 2 (wall +5.0 to +6.0) were
// the old pod's, those from second 3 on the successor's, not, as started_at
// plus the second would have it, the old pod's up to second 5. web-1's
// deletion at +8.5 s fell in the run's second 5: its responses of seconds
// 6 to 11 came after it.
func TestPerPodTrafficOnTheRunsSeconds(t *testing.T) {
	tl := web2Recreated()
	tl = append(tl, report.Event{At: at(8500), Kind: report.PodDeletionRequested, Pod: "web-1", Revision: "web-a"})
	var series []report.SeriesRow
	for s := int64(0); s < 12; s++ {
		row := report.SeriesRow{T: s, Backends: map[string]uint64{"web-1": 50}}
		if s <= 2 || s >= 5 {
			row.Backends["web-2"] = 50
		}
		series = append(series, row)
	}
	r := &report.Report{StartedAt: t0, EndedAt: at(15000), Clock: steppedClock, Timeline: inOrder(tl), Series: series,
		Config: report.Config{BackendHeader: "X-Pod-Name"},
		Totals: report.Totals{ByBackend: map[string]uint64{"web-1": 600, "web-2": 500}}}
	x := Explain(r)
	byPod := map[string]report.PodTraffic{}
	for _, p := range x.Pods {
		byPod[p.Pod] = p
	}
	if old, succ := byPod["web-2"], byPod["web-2#2"]; old.Served != 150 || succ.Served != 350 || old.ServedAfterDeletion != 0 {
		t.Errorf("web-2 served %d (%d after its deletion), its successor %d: want 150 (0) and 350", old.Served, old.ServedAfterDeletion, succ.Served)
	}
	if one := byPod["web-1"]; one.ServedAfterDeletion != 300 {
		t.Errorf("web-1 served %d after its deletion at +8.5s (the run's second 5): want seconds 6 to 11's 300", one.ServedAfterDeletion)
	}
}

// The shutdown coverage reads the series' seconds around each deletion on
// the run's clock: b, deleted at +8 s (wall), the run's second 5, named
// only in the run's second 7 (wall +10 s), after it, was not exercised,
// though second 7 is within started_at plus 3 to 8 s.
func TestShutdownCoverageOnTheRunsSeconds(t *testing.T) {
	rows := each(map[string]uint64{"a": 50, "c": 50})
	rows[7] = report.SeriesRow{T: 7, Backends: map[string]uint64{"a": 50, "b": 50, "c": 50}}
	r := coverageRun(rows...)
	r.Clock = steppedClock
	analyse(r)
	if f := find(r, ShutdownNotExercised); f == nil || strings.Join(f.Pods, ",") != "b" {
		t.Fatalf("b named only after its deletion by the run's clock, yet: %+v", r.Findings)
	}
}

// A latency spike is sought in the seconds after a deletion on the run's
// clock: a's deletion at +5.3 s (wall) was at the run's 2.3 s, and the
// edge path's successes slowed in seconds 2 and 3, to 1.7 s after it.
func TestLatencySpikeOnTheRunsSeconds(t *testing.T) {
	r := spikeRun(map[string]map[int64]float64{
		"svc":  {2: 30},
		"edge": {2: 1100, 3: 900},
	}, 20, 12)
	r.Clock = steppedClock
	analyse(r)
	if f := find(r, LatencySpikeAtDeletion); f == nil || !strings.Contains(strings.Join(f.Evidence, "\n"), "ended 1.7s after a's deletion") {
		t.Fatalf("findings %+v: want a latency spike at a's deletion (the run's 2.3 s), ending 1.7 s after it with second 3", r.Findings)
	}
}
