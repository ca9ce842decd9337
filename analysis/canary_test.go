package analysis

import (
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// canarySteps is the lab's graceful canary as one run measured it: 11.8%
// at 25% and 29% at 50% with --conn mixed=0.5, each pause long enough to
// be judged; the setWeight steps and the promotion are not.
func canarySteps(conn string) *report.Report {
	pct := func(x float64) *float64 { return &x }
	return &report.Report{Config: report.Config{Conn: conn}, Rollout: &report.Rollout{Kind: "Rollout", Name: "web", Steps: []report.CanaryStep{
		{Index: 0, Step: "setWeight: 25", Weight: 25, StartS: 2.1, EndS: 3.5, Named: 200, NewSharePct: pct(0)},
		{Index: 1, Step: "pause", Weight: 25, StartS: 3.5, EndS: 8.9, Named: 1000, NewSharePct: pct(11.8)},
		{Index: 2, Step: "setWeight: 50", Weight: 50, StartS: 8.9, EndS: 9.5, Named: 200, NewSharePct: pct(15)},
		{Index: 3, Step: "pause: 3s", Weight: 50, StartS: 9.5, EndS: 12.1, Named: 600, NewSharePct: pct(29)},
		{Index: 4, Step: "full promotion", Weight: 100, StartS: 12.1, EndS: 13.5, Named: 200, NewSharePct: pct(57)},
	}}}
}

func TestCanaryShareBelowWeight(t *testing.T) {
	f, ok := CanaryShare(canarySteps("mixed=0.5"), false)
	if !ok || f.ID != CanaryShareBelowWeight || f.Severity != report.SeverityWarning {
		t.Fatalf("%+v (%v): want a warning for 11.8%% at a weight of 25%%", f, ok)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{
		"step 2 (pause, weight 25%), +3.5s to +8.9s: the new revision answered 11.8% of the 1000 responses",
		"step 4 (pause: 3s, weight 50%), +9.5s to +12.1s: the new revision answered 29.0% of the 600",
		"--conn mixed=0.5", "no traffic routing",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	// Too few named responses (200), or the full promotion: not judged.
	for _, not := range []string{"step 1 ", "step 3 ", "step 5 "} {
		if strings.Contains(ev, not) {
			t.Errorf("evidence judges %q:\n%s", not, ev)
		}
	}
	if !strings.Contains(f.Fix, "trafficRouting") {
		t.Errorf("fix: %s", f.Fix)
	}
}

// Nothing to say: a routed canary (the proxy weighs requests; a lower
// share is its delay), a run of new connections only (they follow the
// pods' share), shares within the margin, no steps.
func TestCanaryShareNothingToSay(t *testing.T) {
	if f, ok := CanaryShare(canarySteps("mixed=0.5"), true); ok {
		t.Errorf("routed: %+v", f)
	}
	if f, ok := CanaryShare(canarySteps("new"), false); ok {
		t.Errorf("--conn new: %+v", f)
	}
	r := canarySteps("keepalive")
	*r.Rollout.Steps[1].NewSharePct, *r.Rollout.Steps[3].NewSharePct = 18.76, 37.6 // just above 25-6.25 and 50-12.5
	if f, ok := CanaryShare(r, false); ok {
		t.Errorf("within the margin: %+v", f)
	}
	*r.Rollout.Steps[1].NewSharePct = 18.75
	if f, ok := CanaryShare(r, false); !ok || !strings.Contains(strings.Join(f.Evidence, "\n"), "--conn keepalive") {
		t.Errorf("at the margin: %+v (%v)", f, ok)
	}
	// A weight of 10%: the margin is 5 points, not 2.5.
	r.Rollout.Steps = []report.CanaryStep{{Index: 0, Step: "pause", Weight: 10, Named: 900, NewSharePct: new(float64)}}
	*r.Rollout.Steps[0].NewSharePct = 5.5
	if f, ok := CanaryShare(r, false); ok {
		t.Errorf("5.5%% at 10%%: %+v", f)
	}
	if f, ok := CanaryShare(&report.Report{Config: report.Config{Conn: "keepalive"}}, false); ok {
		t.Errorf("no rollout: %+v", f)
	}
}

// The finding's ID is in the schema and has its page (it is not one of
// the rules Explain applies, which those tests walk).
func TestCanaryShareIDIsDocumented(t *testing.T) {
	checkDocumentedID(t, CanaryShareBelowWeight)
}
