package doctor

import (
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// Evaluate runs the checks and judges them against failOn.
func Evaluate(in Input, opts Options, failOn report.FailOn) report.DoctorResult {
	if opts.ExpectedDrain <= 0 {
		opts.ExpectedDrain = DefaultExpectedDrain
	}
	ref := in.Workload.Ref()
	res := report.DoctorResult{Schema: report.DoctorSchema, Namespace: ref.Namespace, Kind: string(ref.Kind), Name: ref.Name,
		ExpectedDrainS: opts.ExpectedDrain.Seconds(), FailOn: failOn, Findings: Run(in, opts), Pass: true}
	if ref.Kind == rollout.KindDeployment {
		res.Deployment = ref.Name
	}
	if in.Service != nil {
		res.Service = in.Service.Name
	}
	res.TemplateFrom = in.Workload.TemplateFrom()
	if in.Version.Known() {
		res.ServerVersion = in.Version.String()
	}
	byID := map[string]report.Finding{}
	for _, f := range res.Findings {
		byID[f.ID] = f
		if failOn.Fails(f.Severity) {
			res.Pass = false
		}
	}
	for _, c := range checks {
		st := report.CheckStatus{ID: c.id, Title: c.title, Status: report.CheckPassed}
		if f, ok := byID[c.id]; ok {
			st.Status = string(f.Severity)
		}
		res.Checks = append(res.Checks, st)
	}
	return res
}
