package analysis

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// nginx's log lists the attempts it retried on another backend: those
// on a pod being deleted are failures its clients never saw, named on
// the pod; an address no pod of the run bore is said as such, and the
// fix then starts from the backends, not the preStop. A run whose log
// lists no failed attempt, or names only the last attempt (Traefik's),
// has no such finding.
func TestEdgeRetriesHidFailures(t *testing.T) {
	run := func(edge *report.EdgeLog) *report.Report {
		return &report.Report{StartedAt: t0,
			Timeline: []report.Event{
				{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", IP: "10.244.1.5", Ready: true},
				{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", IP: "10.244.2.6", Ready: true},
				ev(4200, report.PodDeletionRequested, "a", "old"),
			},
			EdgeLog: edge}
	}
	three := 3
	onA := []report.EdgeFailedAttempts{{Addr: "10.244.1.5:8080", T: 4, Attempts: 2}, {Addr: "10.244.1.5:8080", T: 5, Attempts: 1}}
	r := run(&report.EdgeLog{File: "/var/log/nginx/access.log", Format: "nginx", Requests: 900, Retried: &three, FailedAttempts: onA})
	analyse(r)
	f := find(r, EdgeRetriesHidFailures)
	if f == nil {
		t.Fatalf("no %s: %+v", EdgeRetriesHidFailures, r.Findings)
	}
	all := strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"the edge's access log (/var/log/nginx/access.log, nginx) lists 3 attempts that failed on a backend before it sent the request to another: 3 of the run's requests failed there first",
		"3 on pod a (10.244.1.5:8080), in requests it received from +4s to +5s; rollprobe received its deletion at +4.20s, the last failed attempt at most 1.80s after it (by the second)",
		"never passes on a POST, PATCH or LOCK it had already sent",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("evidence lacks %q:\n%s", want, all)
		}
	}
	if f.Severity != report.SeverityWarning || f.Title != "the edge retried 3 requests on another pod after attempts failed on pods being deleted: failures your clients did not see" ||
		!strings.HasPrefix(f.Fix, "keep the edge from sending requests to pods that have stopped: a preStop hook that waits at least 4s (lifecycle.preStop.sleep.seconds: 4") ||
		strings.Join(f.Pods, ",") != "a" {
		t.Errorf("finding %+v", *f)
	}
	// The pods table: a's 3 failed attempts, b's none (the log was read).
	for _, p := range r.Pods {
		want := map[string]uint64{"a": 3, "b": 0}[p.Pod]
		if p.EdgeFailedAttempts == nil || *p.EdgeFailedAttempts != want {
			t.Errorf("pod %s: edge_failed_attempts %v, want %d", p.Pod, p.EdgeFailedAttempts, want)
		}
	}
	// The attempts' window, to the end of second +5 from the deletion at
	// +4.2 s (1.8 s), sizes the preStop every finding names.
	if x := Explain(r); x.PreStopSeconds != PreStopSeconds(1800*time.Millisecond) {
		t.Errorf("preStop %ds, want %ds from the attempts' 1.8 s", x.PreStopSeconds, PreStopSeconds(1800*time.Millisecond))
	}

	// One attempt on an address no pod bore, one on a pod not deleted.
	mixed := append(onA, report.EdgeFailedAttempts{Addr: "10.244.9.9:8080", T: 5, Attempts: 1}, report.EdgeFailedAttempts{Addr: "10.244.2.6:8080", T: 6, Attempts: 1})
	five := 5
	r = run(&report.EdgeLog{File: "access.log", Format: "nginx", Retried: &five, FailedAttempts: mixed})
	analyse(r)
	f = find(r, EdgeRetriesHidFailures)
	if f == nil {
		t.Fatalf("no %s: %+v", EdgeRetriesHidFailures, r.Findings)
	}
	all = strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"1 on 10.244.9.9:8080 (no pod of the run's there then), in requests it received in second +5s",
		"1 on pod b (10.244.2.6:8080), in requests it received in second +6s; its deletion was not requested in the run",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("evidence lacks %q:\n%s", want, all)
		}
	}
	if f.Title != "the edge retried 5 requests on another backend after attempts failed on 3 backends: failures your clients did not see" ||
		!strings.HasPrefix(f.Fix, "find why those backends failed the attempts; for the pods being deleted, a preStop hook that waits at least 4s") || strings.Join(f.Pods, ",") != "a,b" {
		t.Errorf("finding %+v", *f)
	}

	zero := 0
	for name, edge := range map[string]*report.EdgeLog{
		"no retries":     {Format: "nginx", Retried: &zero},
		"traefik's log":  {Format: "traefik"},
		"no edge log":    nil,
		"retried absent": {Format: "nginx", FailedAttempts: onA},
	} {
		r := run(edge)
		analyse(r)
		if f := find(r, EdgeRetriesHidFailures); f != nil {
			t.Errorf("%s: %+v", name, *f)
		}
		for _, p := range r.Pods {
			if name != "no retries" && p.EdgeFailedAttempts != nil {
				t.Errorf("%s: pod %s's edge_failed_attempts %d, want unknown", name, p.Pod, *p.EdgeFailedAttempts)
			}
			if name == "no retries" && (p.EdgeFailedAttempts == nil || *p.EdgeFailedAttempts != 0) {
				t.Errorf("%s: pod %s's edge_failed_attempts %v, want 0 (the log was read)", name, p.Pod, p.EdgeFailedAttempts)
			}
		}
	}
}

// Attempts that failed on a pod in seconds that ended before its deletion
// measure no window after it: nothing is sized from them.
func TestEdgeRetriesBeforeTheDeletionSizeNothing(t *testing.T) {
	one := 1
	r := &report.Report{StartedAt: t0,
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", IP: "10.244.1.5", Ready: true},
			ev(4200, report.PodDeletionRequested, "a", "old"),
		},
		EdgeLog: &report.EdgeLog{File: "access.log", Format: "nginx", Retried: &one,
			FailedAttempts: []report.EdgeFailedAttempts{{Addr: "10.244.1.5:8080", T: 3, Attempts: 1}}}}
	analyse(r)
	f := find(r, EdgeRetriesHidFailures)
	if f == nil {
		t.Fatalf("no %s: %+v", EdgeRetriesHidFailures, r.Findings)
	}
	if all := strings.Join(f.Evidence, "\n"); strings.Contains(all, "the last failed attempt") || strings.Contains(f.Fix, "at least") {
		t.Errorf("sized from attempts before the deletion:\n%s\nfix: %s", all, f.Fix)
	}
	if x := Explain(r); x.PreStopSeconds != 0 {
		t.Errorf("preStop %ds, want none", x.PreStopSeconds)
	}
}

// The client met the race for 0.5 s; the edge's attempts failed on the
// pod for up to 3 s (by the second), retried elsewhere: the propagation finding's preStop
// covers the longer window, and says why.
func TestEdgeRetriesWidenThePropagationPreStop(t *testing.T) {
	r := clientRaceBesideEdgeAttempts(report.EdgeFailedAttempts{Addr: "10.244.1.5:8080", T: 5, Attempts: 1}, report.EdgeFailedAttempts{Addr: "10.244.1.5:8080", T: 7, Attempts: 1})
	analyse(r)
	fp := find(r, StopsBeforePropagation)
	if fp == nil {
		t.Fatalf("no %s: %+v", StopsBeforePropagation, r.Findings)
	}
	want := PreStopSeconds(3 * time.Second) // to the end of second +7 from +5.0 s
	if got := suggestedSleep(fp.Fix); got != want {
		t.Errorf("propagation preStop %ds, want %ds: %s", got, want, fp.Fix)
	}
	if all := strings.Join(fp.Evidence, "\n"); !strings.Contains(all, "the edge's log lists attempts that failed on pods up to 3.00s after their deletion, which it retried elsewhere (see edge-retries-hid-failures)") {
		t.Errorf("evidence does not say why the preStop is longer:\n%s", all)
	}
	fe := find(r, EdgeRetriesHidFailures)
	if fe == nil || suggestedSleep(fe.Fix) != want {
		t.Errorf("%s: %+v, want the same %ds", EdgeRetriesHidFailures, fe, want)
	}
}

// suggestedSleep is the N of a fix's "waits at least Ns"; 0 without one.
func suggestedSleep(fix string) int {
	var n int
	if i := strings.Index(fix, "at least "); i >= 0 {
		fmt.Sscanf(fix[i+len("at least "):], "%d", &n)
	}
	return n
}

// Attempts that measured no window still get the one preStop the
// clients' failures sized, not a sleep without a number.
func TestEdgeRetriesNameTheClientsPreStop(t *testing.T) {
	r := clientRaceBesideEdgeAttempts(report.EdgeFailedAttempts{Addr: "10.244.1.5:8080", T: 3, Attempts: 1})
	analyse(r)
	fp, fe := find(r, StopsBeforePropagation), find(r, EdgeRetriesHidFailures)
	if fp == nil || fe == nil {
		t.Fatalf("findings %+v", r.Findings)
	}
	if want := suggestedSleep(fp.Fix); want == 0 || suggestedSleep(fe.Fix) != want || strings.Contains(strings.Join(fe.Evidence, "\n"), "the last failed attempt") {
		t.Errorf("propagation's preStop %ds; %s: %s\n%s", want, fe.ID, fe.Fix, strings.Join(fe.Evidence, "\n"))
	}
}

// clientRaceBesideEdgeAttempts is a run whose client met pod a's race once,
// 0.5 s after its deletion at +5 s, and whose nginx log lists attempts,
// one request retried for each.
func clientRaceBesideEdgeAttempts(attempts ...report.EdgeFailedAttempts) *report.Report {
	retried, exit := len(attempts), int32(0)
	return &report.Report{StartedAt: t0,
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", IP: "10.244.1.5", Ready: true},
			ev(5000, report.PodDeletionRequested, "a", "old"),
			{At: at(5010), Kind: report.ContainerTerminated, Pod: "a", Revision: "old", ExitCode: &exit},
			ev(5600, report.EndpointRemoved, "a", ""),
			ev(5700, report.PodGone, "a", "old"),
		},
		Failures: []report.Failure{fail(5500, "refused", true, "")},
		EdgeLog:  &report.EdgeLog{File: "access.log", Format: "nginx", Retried: &retried, FailedAttempts: attempts}}
}
