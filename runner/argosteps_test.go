package runner

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// TestArgoSteps: each step's window runs from its rollout_step to the
// next; a second counts in the step in force when it began; the share is
// of named responses, by the pods' revisions; unknown without names.
func TestArgoSteps(t *testing.T) {
	w25, w50 := int32(25), int32(50)
	dur := intstr.FromString("3s")
	r := &rollout.ArgoRollout{}
	r.Spec.Strategy.Canary = &rollout.ArgoCanary{Steps: []rollout.ArgoCanaryStep{
		{SetWeight: &w25}, {Pause: &rollout.ArgoPause{}}, {SetWeight: &w50}, {Pause: &rollout.ArgoPause{Duration: &dur}},
	}}
	start := time.Unix(1_800_000_000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	complete := at(9)
	rep := &report.Report{StartedAt: start, EndedAt: at(12),
		Rollout: &report.Rollout{NewRevision: "new", OldRevision: "old", CompleteAt: &complete},
		Pods:    []report.PodTraffic{{Pod: "web-old-1", Revision: "old"}, {Pod: "web-new-1", Revision: "new"}},
		Timeline: []report.Event{
			{At: at(1.5), Kind: report.RolloutStep, Detail: "step 1 of 4: setWeight: 25"},
			{At: at(2), Kind: report.RolloutStep, Detail: "step 2 of 4: pause"},
			{At: at(5), Kind: report.RolloutStep, Detail: "step 3 of 4: setWeight: 50"},
			{At: at(6), Kind: report.RolloutStep, Detail: "step 4 of 4: pause: 3s"},
			{At: at(7), Kind: report.RolloutStep, Detail: "every step done (4)"},
			{At: at(7.5), Kind: report.PodReady, Pod: "web-new-1"},
		},
	}
	for s := int64(0); s < 12; s++ {
		row := report.SeriesRow{T: s, Sent: 10, OK: 10, Backends: map[string]uint64{"web-old-1": 6, "web-new-1": 4}}
		if s == 3 {
			row.OK, row.Failed = 8, 2
		}
		if s == 6 {
			row.Backends = nil // no names in this second
		}
		rep.Series = append(rep.Series, row)
	}
	steps := argoSteps(rep, r, report.Budget{})
	want := []struct {
		index        int
		step         string
		weight       int
		startS, endS float64
		sent, failed uint64
		pass         bool
		named        uint64
		share        float64 // -1: unknown
	}{
		// Second 1 began before step 1 (at 1.5 s): not in it.
		{0, "setWeight: 25", 25, 1.5, 2, 0, 0, true, 0, -1},
		{1, "pause", 25, 2, 5, 30, 2, false, 30, 40},
		{2, "setWeight: 50", 50, 5, 6, 10, 0, true, 10, 40},
		{3, "pause: 3s", 50, 6, 7, 10, 0, true, 0, -1},
		// From every step done to the completion at 9 s: seconds 7 and 8.
		{4, "full promotion", 100, 7, 9, 20, 0, true, 20, 40},
	}
	if len(steps) != len(want) {
		t.Fatalf("%d steps: %+v", len(steps), steps)
	}
	for i, w := range want {
		s := steps[i]
		share := -1.0
		if s.NewSharePct != nil {
			share = *s.NewSharePct
		}
		if s.Index != w.index || s.Step != w.step || s.Weight != w.weight || s.StartS != w.startS || s.EndS != w.endS ||
			s.Sent != w.sent || s.Failed != w.failed || s.Pass != w.pass || s.Named != w.named || share != w.share {
			t.Errorf("step %d: %+v (share %v)\nwant %+v", i, s, share, w)
		}
	}
	if argoSteps(rep, &rollout.ArgoRollout{}, report.Budget{}) != nil {
		t.Error("a Rollout without a canary has no steps")
	}

	// The wall clock set 1 s forward in the run's first second (the
	// timeline's times are the wall clock's): second t, from 1 on, began
	// at +t+1 s, so seconds 1 to 3 are the pause's, 5 the second pause's
	// (its responses named their pods) and 6 and 7 the promotion's.
	rep.Clock = []report.ClockLead{{AtMS: 0}, {AtMS: 400}, {AtMS: 500, LeadMS: 1000}}
	var got [][3]uint64
	for _, s := range argoSteps(rep, r, report.Budget{}) {
		got = append(got, [3]uint64{s.Sent, s.Failed, s.Named})
	}
	if want := [][3]uint64{{0, 0, 0}, {30, 2, 30}, {10, 0, 10}, {10, 0, 10}, {20, 0, 10}}; !slices.Equal(got, want) {
		t.Errorf("on the stepped clock, each step's sent, failed and named: %v, want %v", got, want)
	}
}

// A finding of the traffic found after the analysis goes after the
// traffic's own findings and before the doctor's, as Explain orders them.
func TestWithRunFindingGoesBeforeTheDoctor(t *testing.T) {
	run := report.Finding{ID: "stops-accepting-before-endpoints-propagate"}
	doc := report.Finding{ID: "no-prestop-hook", Source: report.SourceDoctor}
	added := report.Finding{ID: "canary-share-below-weight"}
	ids := func(fs []report.Finding) (out []string) {
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	for _, tc := range []struct {
		in   []report.Finding
		want []string
	}{
		{nil, []string{added.ID}},
		{[]report.Finding{run}, []string{run.ID, added.ID}},
		{[]report.Finding{run, doc}, []string{run.ID, added.ID, doc.ID}},
		{[]report.Finding{doc}, []string{added.ID, doc.ID}},
	} {
		if got := ids(withRunFinding(tc.in, added)); !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v, want %v", ids(tc.in), got, tc.want)
		}
	}
}
