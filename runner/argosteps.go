package runner

import (
	"math"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// argoSteps are an Argo canary's steps as the run saw them: each from its
// rollout_step event to the next (the last, the full promotion, to the
// rollout's completion), with the traffic of the seconds that began in it
// (the series' whole seconds), its verdict by the run's budget, and the
// share of named responses that came from the new revision against the
// weight the step declared. nil for anything else.
func argoSteps(rep *report.Report, r *rollout.ArgoRollout, budget report.Budget) []report.CanaryStep {
	if r == nil || r.Spec.Strategy.Canary == nil || rep.Rollout == nil || rep.Rollout.NewRevision == "" {
		return nil
	}
	n := len(r.Spec.Strategy.Canary.Steps)
	var steps []report.CanaryStep
	var starts []time.Time
	for _, e := range rep.Timeline {
		i, ok := rollout.ArgoStepIndex(e)
		if !ok || i > n {
			continue
		}
		name := rollout.ArgoStep(r, int32(i))
		if i == n {
			name = "full promotion"
		}
		steps = append(steps, report.CanaryStep{Index: i, Step: name, Weight: int(rollout.ArgoSetWeight(r, int32(i))),
			StartS: round3(e.At.Sub(rep.StartedAt).Seconds())})
		starts = append(starts, e.At)
	}
	if len(steps) == 0 {
		return nil
	}
	end := rep.EndedAt
	if ro := rep.Rollout; ro.CompleteAt != nil {
		end = *ro.CompleteAt
	}
	revision := map[string]string{}
	for _, p := range rep.Pods {
		name, _, _ := strings.Cut(p.Pod, "#")
		revision[name] = p.Revision
	}
	newNamed := make([]uint64, len(steps))
	for k := range steps {
		stepEnd := end
		if k+1 < len(starts) {
			stepEnd = starts[k+1]
		}
		steps[k].EndS = round3(max(stepEnd.Sub(rep.StartedAt).Seconds(), steps[k].StartS))
	}
	clock := rep.WallClock() // the steps' times are the wall clock's, the series' seconds the run's
	for _, row := range rep.Series {
		at := clock.SecondAt(row.T)
		k := -1
		for j := range steps {
			if !at.Before(starts[j]) {
				k = j
			}
		}
		if k < 0 || !at.Before(end) {
			continue
		}
		s := &steps[k]
		s.Sent += row.Sent
		s.Failed += row.Failed
		for pod, c := range row.Backends {
			s.Named += c
			if revision[pod] == rep.Rollout.NewRevision {
				newNamed[k] += c
			}
		}
	}
	for k := range steps {
		s := &steps[k]
		s.Pass = !budget.Exceeded(s.Sent, s.Failed)
		if s.Named > 0 {
			pct := round3(100 * float64(newNamed[k]) / float64(s.Named))
			s.NewSharePct = &pct
		}
	}
	return steps
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
