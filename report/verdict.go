package report

import (
	"fmt"
	"strings"

	"github.com/rollprobe/rollprobe/report/exitcode"
)

// Budget is how many failures a run may have and still pass.
type Budget struct {
	MaxFailures    uint64  // absolute; 0 means any failure fails the run
	MaxFailureRate float64 // fraction of sent, in [0,1]; 0 disables the check
	// RedirectsExpected: the user named the statuses that count as ok
	// (--expect-status), so a run answered mostly by redirects is what was
	// asked for. Otherwise it proves nothing about the app (see Judge).
	RedirectsExpected bool
}

// Exceeded says whether failed of sent requests are over the budget: more
// than MaxFailures and, when MaxFailureRate is set, more than that share of
// sent too. The one rule every output that judges drops uses.
func (b Budget) Exceeded(sent, failed uint64) bool {
	over := failed > b.MaxFailures
	if b.MaxFailureRate > 0 && sent > 0 {
		over = over && float64(failed)/float64(sent) > b.MaxFailureRate
	}
	return over
}

// MinRateRatio is the share of the target rate the prober must achieve for a
// clean run to count as proof.
const MinRateRatio = 0.95

// Facts are the numbers a verdict is judged on.
type Facts struct {
	Sent         uint64
	Failed       uint64 // target failures (local errors excluded)
	OK           uint64
	Redirects    uint64 // responses with a 3xx status (ok or not)
	LocalErrors  uint64
	TargetRate   float64 // 0: closed model, no rate to hold
	AchievedRate float64
	Interrupted  bool
	// RolloutFailed, when set, says why the rollout failed or timed out.
	RolloutFailed string
	// LostProbers says, for each in-cluster prober whose results are
	// incomplete, which and why: the run cannot prove anything.
	LostProbers []string
	// Internal, when set, is rollprobe's own failure during the run (a
	// recovered panic with its stack, an engine that stopped on its own):
	// exit 70 (Verdict.WithInternal).
	Internal string
	// Paths, when the run probed several, are each path's traffic: the
	// budget, the rate and the redirects are judged per path (any path
	// over its budget fails the run), in place of the totals above.
	Paths []PathFacts
}

// PathFacts are one path's traffic numbers; Name is "" for the only
// traffic of a run of one target.
type PathFacts struct {
	Name                     string
	Sent, Failed, OK         uint64
	Redirects                uint64
	TargetRate, AchievedRate float64
}

// Verdict is the outcome of a run as CI sees it.
type Verdict struct {
	Pass     bool          `json:"pass"`
	ExitCode exitcode.Code `json:"exit_code"`
	Reasons  []string      `json:"reasons"`
	// Inconclusive: the run could not prove anything either way.
	Inconclusive bool `json:"inconclusive"`
	Interrupted  bool `json:"interrupted"`
	// InternalError, when set, is rollprobe's own failure during the run
	// (a recovered panic, with its stack): exit 70. A bug report needs it.
	InternalError string `json:"internal_error,omitempty"`
	// OutputsFailed names each output that could not be written (the
	// report file itself is then missing, and this is read from the JUnit,
	// the HTML page or the summary); the exit code accounts for it.
	OutputsFailed []string `json:"outputs_failed,omitempty"`
}

// WithInternal is v for a run in which rollprobe itself failed (fault: a
// recovered panic and its stack): the first line becomes a reason, the run
// proves nothing, and the exit code is Internal unless it was interrupted
// (Judge's precedence). Judge applies it for Facts.Internal; the runner
// for a failure after the verdict was judged (in the analysis, say).
func (v Verdict) WithInternal(fault string) Verdict {
	if fault == "" {
		return v
	}
	first, _, _ := strings.Cut(fault, "\n")
	v.Reasons = append(append([]string(nil), v.Reasons...), "internal error: "+first)
	v.InternalError = fault
	v.Inconclusive, v.Pass = true, false
	if v.ExitCode != exitcode.Interrupted {
		v.ExitCode = exitcode.Internal
	}
	return v
}

// WithOutputsFailed is v for a run some of whose outputs could not be
// written, each named in failed ("the JUnit XML junit.xml: no space left
// on device"): each becomes a reason, the run no longer passes, and the
// exit code is OutputFailed unless the verdict's own code takes
// precedence (exitcode.WithOutputFailure). The summary, the JUnit and the
// outputs that were written then state the process's real exit code.
func (v Verdict) WithOutputsFailed(failed []string) Verdict {
	if len(failed) == 0 {
		return v
	}
	v.Reasons = append([]string(nil), v.Reasons...) // v shares its slices with the report it came from
	for _, f := range failed {
		v.Reasons = append(v.Reasons, "could not write "+f)
	}
	v.OutputsFailed = append(append([]string(nil), v.OutputsFailed...), failed...)
	v.ExitCode = exitcode.WithOutputFailure(v.ExitCode)
	v.Pass = false
	return v
}

// VerdictWord is the run's verdict in one word, as the HTML page, the JUnit
// properties and the GitHub step outputs say it: pass, inconclusive (the
// run proved nothing and dropped nothing), or fail.
func (r *Report) VerdictWord() string {
	switch {
	case r.Verdict.Pass:
		return "pass"
	case r.Verdict.Inconclusive && r.Totals.Failed == 0:
		return "inconclusive"
	}
	return "fail"
}

// Judge applies the budget. Precedence when several things went wrong: an
// interruption (130) wins, then rollprobe's own failure (70: nothing else
// it concluded can be trusted), then a failed rollout (3), then failures
// above budget (1) — observed drops are real evidence even from a prober
// that fell behind — then inconclusive (4). Every reason is listed either
// way. (5, an output not written, is decided after Judge: WithOutputsFailed.)
func Judge(f Facts, b Budget) Verdict {
	v := Verdict{Reasons: []string{}}
	paths := f.Paths
	if len(paths) == 0 {
		paths = []PathFacts{{Sent: f.Sent, Failed: f.Failed, OK: f.OK, Redirects: f.Redirects, TargetRate: f.TargetRate, AchievedRate: f.AchievedRate}}
	}
	overBudget := false
	for _, p := range paths {
		reasons, over := judgeTraffic(p, b)
		overBudget = overBudget || over
		v.Reasons = append(v.Reasons, reasons...)
	}
	if f.RolloutFailed != "" {
		v.Reasons = append(v.Reasons, "rollout failed: "+f.RolloutFailed)
	}
	for _, lost := range f.LostProbers {
		v.Inconclusive = true
		v.Reasons = append(v.Reasons, lost+": the merged results are incomplete")
	}
	if f.LocalErrors > 0 {
		v.Inconclusive = true
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d local errors on the prober's side (descriptors, ports, buffers): it could not send everything it should have", f.LocalErrors))
	}
	for _, p := range paths {
		if inconclusive := inconclusiveTraffic(p, b); len(inconclusive) > 0 {
			v.Inconclusive = true
			v.Reasons = append(v.Reasons, inconclusive...)
		}
	}
	if f.Sent == 0 && !f.Interrupted {
		v.Inconclusive = true
		v.Reasons = append(v.Reasons, "no request was sent")
	}
	if f.Interrupted {
		v.Interrupted = true
		v.Reasons = append(v.Reasons, "interrupted before the end: the results cover only part of the run")
	}
	switch {
	case f.Interrupted:
		v.ExitCode = exitcode.Interrupted
	case f.RolloutFailed != "":
		v.ExitCode = exitcode.RolloutFailed
	case overBudget:
		v.ExitCode = exitcode.Failures
	case v.Inconclusive:
		v.ExitCode = exitcode.Inconclusive
	default:
		v.ExitCode = exitcode.OK
	}
	v.Pass = v.ExitCode == exitcode.OK
	return v.WithInternal(f.Internal)
}

// reasonPrefix names the path a reason is about ("edge: "); none for a
// run of one target.
func (p PathFacts) reasonPrefix() string {
	if p.Name == "" {
		return ""
	}
	return p.Name + ": "
}

// judgeTraffic applies the budget to one path's traffic (the run's only
// one when it probed one): the reasons it fails, and whether it does.
func judgeTraffic(p PathFacts, b Budget) (reasons []string, overBudget bool) {
	prefix := p.reasonPrefix()
	overBudget = b.Exceeded(p.Sent, p.Failed)
	if b.MaxFailureRate > 0 && p.Sent > 0 {
		rate := float64(p.Failed) / float64(p.Sent)
		if overBudget {
			reasons = append(reasons, fmt.Sprintf("%s%d of %d requests failed (%.3f%%), above the budget of %d and %.3f%%",
				prefix, p.Failed, p.Sent, 100*rate, b.MaxFailures, 100*b.MaxFailureRate))
		}
	} else if overBudget {
		reasons = append(reasons, fmt.Sprintf("%s%d of %d requests failed, above the budget of %d", prefix, p.Failed, p.Sent, b.MaxFailures))
	}
	return reasons, overBudget
}

// inconclusiveTraffic is why one path's traffic proves nothing: a rate
// not held, or mostly redirects.
func inconclusiveTraffic(p PathFacts, b Budget) (reasons []string) {
	prefix := p.reasonPrefix()
	if p.TargetRate > 0 && p.AchievedRate < MinRateRatio*p.TargetRate {
		reasons = append(reasons, fmt.Sprintf("%sachieved %.1f req/s, below %.0f%% of the target %.1f req/s", prefix, p.AchievedRate, 100*MinRateRatio, p.TargetRate))
	}
	// An http:// edge that answers 308 to https, a login redirect: with
	// the default statuses (200-399) every such response is ok, and a run
	// that never reached a pod would pass.
	if !b.RedirectsExpected && p.OK > 0 && 2*p.Redirects > p.OK {
		reasons = append(reasons, fmt.Sprintf("%s%d of %d ok responses were redirects (3xx): the probe measured the redirect, not the app behind it; probe the URL it redirects to, or name the statuses to accept with --expect-status", prefix, p.Redirects, p.OK))
	}
	return reasons
}
