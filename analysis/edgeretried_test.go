package analysis

import (
	"strings"
	"testing"

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
		"3 on pod a (10.244.1.5:8080), in requests it received from +4s to +5s; rollprobe received its deletion at +4.20s",
		"never passes on a POST, PATCH or LOCK it had already sent",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("evidence lacks %q:\n%s", want, all)
		}
	}
	if f.Severity != report.SeverityWarning || f.Title != "the edge retried 3 requests on another pod after attempts failed on pods being deleted: failures your clients did not see" ||
		!strings.HasPrefix(f.Fix, "keep the edge from sending requests to pods that have stopped") || strings.Join(f.Pods, ",") != "a" {
		t.Errorf("finding %+v", *f)
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
		!strings.HasPrefix(f.Fix, "find why those backends failed") || strings.Join(f.Pods, ",") != "a,b" {
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
	}
}
