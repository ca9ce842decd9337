package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// killedBy is a SIGKILL of pod's container name (a native sidecar when
// sidecar), received at ms.
func killedBy(ms int, pod, name string, sidecar bool) report.Event {
	e := exited(ms, ms/1000*1000, pod)
	code := int32(report.SIGKILLExitCode)
	e.ExitCode, e.Container, e.Sidecar, e.Reason = &code, name, sidecar, "Error"
	return e
}

// The grace finding says which containers the kubelet killed: a native
// sidecar is sent SIGTERM only once the app's containers have exited (or
// the grace period ran out), with what is left of it, so a sidecar killed
// where the app drained in time needs its own shutdown looked at, not the
// app's. A report written
// before timeline[].container names none and adds no line.
func TestTheGraceFindingNamesTheContainersKilled(t *testing.T) {
	appDone := exited(5500, 5000, "b")
	appDone.Container = "app"
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "c", Revision: "old", Ready: true},
		deleted(2000, 2000, "a"),
		deleted(2100, 2000, "b"),
		deleted(2200, 2000, "c"),
		killedBy(5100, "a", "app", false),
		appDone,
		killedBy(7600, "b", "proxy", true),
		killedBy(5200, "c", "", false),
	}}
	analyse(r)
	f := find(r, GraceTooShort)
	if f == nil {
		t.Fatalf("no grace finding among %+v", r.Findings)
	}
	if got := strings.Join(f.Pods, ","); got != "a,b,c" {
		t.Errorf("pods %s, want a,b,c", got)
	}
	want := "SIGKILLed: container app in 1 pod; sidecar proxy in 1 pod"
	if len(f.Evidence) != 2 || f.Evidence[1] != want {
		t.Errorf("evidence %q, want a second line %q", f.Evidence, want)
	}
	if !strings.Contains(f.Fix, "native sidecar is sent SIGTERM only once the app's containers have exited") {
		t.Errorf("fix %q does not say how a sidecar's stop is timed", f.Fix)
	}

	// Only unnamed containers: the pods' names are all there is to say.
	old := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "c", Revision: "old", Ready: true},
		deleted(2200, 2000, "c"),
		killedBy(5200, "c", "", false),
	}}
	analyse(old)
	if f := find(old, GraceTooShort); f == nil || len(f.Evidence) != 1 || strings.Contains(f.Fix, "sidecar") {
		t.Errorf("grace finding of a report without container names: %+v", f)
	}
}

// The grace finding counts the kills that came after the deletion was
// requested, by the kubelet's and the apiserver's times: an OOM kill
// before it (the container restarted, the pod deleted later in the
// rollout) is no grace period's, while a kill received in the same update
// as the deletion, before it on the timeline, is.
func TestTheGraceFindingCountsKillsAfterTheDeletion(t *testing.T) {
	oom := killedBy(1500, "a", "app", false)
	oom.Reason = "OOMKilled"
	appDone := exited(6500, 6000, "a")
	appDone.Container = "app"
	sameUpdate := killedBy(5000, "b", "app", false) // the kubelet's end at +5s, the request's +2s
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		oom,
		deleted(3000, 3000, "a"),
		appDone,
		sameUpdate,
		deleted(5000, 2000, "b"),
	}}
	analyse(r)
	f := find(r, GraceTooShort)
	if f == nil || strings.Join(f.Pods, ",") != "b" {
		t.Fatalf("grace finding %+v, want b's alone: a's kill was an OOM before its deletion", f)
	}
	if len(f.Evidence) != 2 || f.Evidence[1] != "SIGKILLed: container app in 1 pod" {
		t.Errorf("evidence %q", f.Evidence)
	}
	for _, p := range r.Pods {
		if p.Pod == "a" && (p.ExitCode == nil || *p.ExitCode != report.SIGKILLExitCode) {
			t.Errorf("a's exit_code %v: its app was SIGKILLed (by the OOM killer), the pod's record says so", p.ExitCode)
		}
	}
}

// The grace finding says the grace period the deletions had, where the
// timeline has it, and the fix raises that figure; a timeline without it
// says nothing of it.
func TestTheGraceFindingSaysTheGracePeriod(t *testing.T) {
	withGrace := func(e report.Event, s int64) report.Event {
		e.GracePeriodS = &s
		return e
	}
	r := &report.Report{StartedAt: t0, Timeline: []report.Event{
		{At: at(0), Kind: report.PodPresent, Pod: "a", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "b", Revision: "old", Ready: true},
		{At: at(0), Kind: report.PodPresent, Pod: "c", Revision: "old", Ready: true},
		withGrace(deleted(2000, 2000, "a"), 3),
		withGrace(deleted(2100, 2000, "b"), 3),
		withGrace(deleted(2200, 2000, "c"), 5),
		killedBy(5100, "a", "app", false),
		killedBy(5200, "b", "app", false),
		killedBy(7300, "c", "app", false),
	}}
	analyse(r)
	f := find(r, GraceTooShort)
	if f == nil {
		t.Fatalf("no grace finding among %+v", r.Findings)
	}
	if want := "their deletions' grace period: 3s in 2 pods; 5s in 1 pod"; !strings.Contains(strings.Join(f.Evidence, "\n"), want) {
		t.Errorf("evidence %q lacks %q", f.Evidence, want)
	}
	if want := "raise terminationGracePeriodSeconds (5s here) above"; !strings.HasPrefix(f.Fix, want) {
		t.Errorf("fix %q, want it to start %q", f.Fix, want)
	}
	for i := range r.Timeline {
		r.Timeline[i].GracePeriodS = nil
	}
	r.Findings = nil
	analyse(r)
	if f := find(r, GraceTooShort); f == nil || strings.Contains(strings.Join(f.Evidence, "\n"), "grace period:") || !strings.HasPrefix(f.Fix, "raise terminationGracePeriodSeconds above") {
		t.Errorf("without the grace periods: %+v", f)
	}
}
