// Package htmlreport renders a report as one self-contained HTML page: the
// run on a shared, zoomable time axis (requests per second by class,
// latency, one lane per pod with its lifecycle and endpoint conditions,
// outage bands linked to the findings that explain them), then the
// verdict, the findings, the pods and the first failures.
//
// The page loads nothing: no script, style, font or image from any URL.
// The charts are SVG drawn here; a small embedded script adds zoom, pan
// and the failures filter, and the page reads without it.
package htmlreport

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
	textrender "github.com/rollprobe/rollprobe/report/render" // the shared formats of numbers for people
)

var (
	//go:embed assets/style.css
	styleCSS string
	//go:embed assets/zoom.js
	zoomJS string
	//go:embed assets/page.html.tmpl
	pageTemplate string
)

// maxFailureRows bounds the failures table (the JSON report has them all).
const maxFailureRows = 500

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"offset": func(r *report.Report, t time.Time) string { return fmt.Sprintf("%+.3fs", t.Sub(r.StartedAt).Seconds()) },
	// A pod's time no later than the run's start is "before", as the
	// text and Markdown say: a pod ready when the watch began has the
	// watch's first sight as its ready_at, not the moment it turned ready.
	"podAt": func(r *report.Report, t *time.Time) string {
		switch {
		case t == nil:
			return ""
		case !t.After(r.StartedAt):
			return "before"
		}
		return fmt.Sprintf("%+.2fs", t.Sub(r.StartedAt).Seconds())
	},
	"ms":          textrender.Millis,
	"percent":     textrender.Percent,
	"join":        strings.Join,
	"doc":         report.FindingDoc,
	"color":       func(c string) string { return classColor[c] },
	"utc":         func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
	"dur":         func(from, to float64) float64 { return to - from },
	"classes":     classList,
	"stall":       textrender.ViewStallLine,
	"edgeLog":     textrender.EdgeLogLine,
	"conntrack":   textrender.ConntrackLines,
	"attribution": textrender.AttributionLine,
	"refusals":    textrender.RefusalsLine,
	"inc":         func(i int) int { return i + 1 },
	"pct":         func(p *float64) string { return fmt.Sprintf("%.1f%%", *p) },
}).Parse(pageTemplate))

// view is what the template reads.
type view struct {
	R            *report.Report
	Title        string
	VerdictClass string
	VerdictWord  string
	Classes      []classCount // failure classes with a count, report order
	Timeline     template.HTML
	Bands        []band
	Findings     []findingView
	Pods         []podView
	// EdgeColumn: the pods carry the edge's failed attempts
	// (report.EdgeFailedAttemptsKnown).
	EdgeColumn  bool
	Failures    []report.Failure
	FailureNote string
	CSS         template.CSS
	JS          template.JS
	LaneStates  []stateView
	// Evictions: a drain's evictions are on the lanes (their legend).
	Evictions bool
}

type classCount struct {
	Name  string
	Count uint64
}

type stateView struct {
	Name, Text, Color string
}

type findingView struct {
	report.Finding
	Outages []int // the outages it explains
}

type podView struct {
	report.PodTraffic
	Group    string
	Failures int
	// ServedCell and AfterCell are the served counts as shown
	// (report.ServedShown), ServedFrom what measured them ("" unknown).
	ServedCell, AfterCell, ServedFrom string
}

// Write renders r as an HTML page.
func Write(w io.Writer, r *report.Report) error {
	m := newModel(r)
	svg := timeline(m)
	v := view{
		R: r, Timeline: template.HTML(svg),
		Bands: m.Bands, CSS: template.CSS(styleCSS + colorRules()), JS: template.JS(zoomJS),
	}
	for _, e := range r.Timeline {
		v.Evictions = v.Evictions || e.Kind.IsDrain()
	}
	v.Title = "rollprobe " + r.Command + ": " + r.Target
	if ro := r.Rollout; ro != nil {
		v.Title = fmt.Sprintf("rollprobe run: %s/%s", ro.Namespace, ro.WorkloadName())
		if k := ro.WorkloadKind(); k != "Deployment" {
			v.Title = fmt.Sprintf("rollprobe run: %s %s/%s", strings.ToLower(k), ro.Namespace, ro.WorkloadName())
		}
	}
	v.VerdictClass = r.VerdictWord()
	v.VerdictWord = fmt.Sprintf("%s (exit %d)", v.VerdictClass, r.Verdict.ExitCode)
	for _, c := range report.FailureClassNames() {
		if n := r.Totals.ByClass[c]; n > 0 {
			v.Classes = append(v.Classes, classCount{c, n})
		}
	}
	if r.Prober.LocalErrors > 0 && r.Totals.ByClass[report.ClassLocal] == 0 {
		v.Classes = append(v.Classes, classCount{report.ClassLocal, r.Prober.LocalErrors})
	}
	for _, s := range laneStates {
		v.LaneStates = append(v.LaneStates, stateView{string(s), stateText[s], stateColor[s]})
	}
	for _, f := range r.Findings {
		fv := findingView{Finding: f}
		for _, b := range m.Bands {
			if slices.Contains(b.FindingIDs, f.ID) {
				fv.Outages = append(fv.Outages, b.N)
			}
		}
		v.Findings = append(v.Findings, fv)
	}
	failuresByPod := map[string]int{}
	groupOf := map[string]string{}
	for _, g := range m.Groups {
		for _, l := range g.Lanes {
			failuresByPod[l.Pod] = l.Failures
			groupOf[l.Pod] = l.Group
		}
	}
	v.EdgeColumn = report.EdgeFailedAttemptsKnown(r)
	for _, p := range r.Pods {
		served, after, from := report.ServedShown(r, p)
		v.Pods = append(v.Pods, podView{PodTraffic: p, Group: groupOf[p.Pod], Failures: failuresByPod[p.Pod],
			ServedCell: served, AfterCell: after, ServedFrom: from})
	}
	v.Failures = r.Failures[:min(len(r.Failures), maxFailureRows)]
	switch {
	case uint64(len(r.Failures)) < r.FailureInfo.Total:
		v.FailureNote = fmt.Sprintf("The report kept the first %d of %d failed attempts in full", len(r.Failures), r.FailureInfo.Total)
	default:
		v.FailureNote = fmt.Sprintf("All %d failed attempts", len(r.Failures))
	}
	if len(v.Failures) < len(r.Failures) {
		v.FailureNote += fmt.Sprintf("; this table shows the first %d (the JSON report has them all)", len(v.Failures))
	}
	return page.Execute(w, v)
}

// colorRules gives every class and lane state its colour.
func colorRules() string {
	var b strings.Builder
	for _, c := range report.ClassNames {
		fmt.Fprintf(&b, ".c-%s{fill:%s}", c, classColor[c])
	}
	for _, s := range laneStates {
		fmt.Fprintf(&b, ".s-%s{fill:%s}", s, stateColor[s])
	}
	return b.String()
}
