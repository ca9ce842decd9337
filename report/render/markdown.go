package render

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// Markdown renders the report for a pull request or a GitHub step summary.
func Markdown(w io.Writer, r *report.Report) error {
	var b strings.Builder
	icon := "✅"
	if !r.Verdict.Pass {
		icon = "❌"
	}
	fmt.Fprintf(&b, "## %s rollprobe %s: %s\n\n", icon, r.Command, probed(r))
	if ro := r.Rollout; ro != nil {
		trigger := "*" + ro.Trigger + "*"
		if ro.TemplateFrom != "" {
			trigger += " on its template, `" + ro.TemplateFrom + "` (workloadRef)"
		}
		fmt.Fprintf(&b, "%s `%s/%s` behind Service `%s`, trigger %s: **%s**", ro.WorkloadKind(), ro.Namespace, ro.WorkloadName(), ro.Service, trigger, ro.Status)
		switch {
		case ro.OldRevision != "" && ro.OldRevision == ro.NewRevision: // a drain, a scale
			fmt.Fprintf(&b, " (`%s`, unchanged)", ro.OldRevision)
		case ro.OldRevision != "" && ro.NewRevision != "":
			fmt.Fprintf(&b, " (`%s` → `%s`)", ro.OldRevision, ro.NewRevision)
		}
		if back := abortedBack(r); back != "" {
			b.WriteString(", " + back)
		}
		b.WriteString("\n\n")
		if len(ro.Steps) > 0 {
			b.WriteString("| step | weight | from | to | sent | failed | verdict | new revision's share |\n|---|---|---|---|---|---|---|---|\n")
			for _, s := range ro.Steps {
				verdict, share := "✅", "unknown"
				if !s.Pass {
					verdict = "❌"
				}
				if s.NewSharePct != nil {
					share = fmt.Sprintf("%.1f%% of %d", *s.NewSharePct, s.Named)
				}
				fmt.Fprintf(&b, "| %d `%s` | %d%% | %+.1fs | %+.1fs | %d | %d | %s | %s |\n", s.Index+1, s.Step, s.Weight, s.StartS, s.EndS, s.Sent, s.Failed, verdict, share)
			}
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "| sent | ok | failed | p50 | p99 | max | achieved rate |\n|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %.4g ms | %.4g ms | %.4g ms | %.1f of %g req/s |\n\n",
		r.Totals.Sent, r.Totals.OK, r.Totals.Failed, r.LatencyMS.P50, r.LatencyMS.P99, r.LatencyMS.Max, r.Prober.AchievedRate, r.Prober.TargetRate)
	if len(r.Paths) > 1 {
		b.WriteString("| path | target | sent | failed | failures | p99 | verdict |\n|---|---|---|---|---|---|---|\n")
		for _, p := range r.Paths {
			fmt.Fprintf(&b, "| %s | `%s` | %d | %d | %s | %.4g ms | %s |\n", p.Name, p.Target, p.Totals.Sent, p.Totals.Failed,
				ClassCounts(p.Totals.ByClass), p.LatencyMS.P99, pathVerdict(p.Verdict))
		}
		b.WriteString("\n")
	}
	if c := ClassCounts(r.Totals.ByClass); c != "" {
		fmt.Fprintf(&b, "Failures: %s\n\n", c)
	}
	if line := EOFSplit(r.Totals); line != "" {
		fmt.Fprintf(&b, "Closed without an answer: %s\n\n", line)
	}
	if len(r.Outages) > 0 {
		// The pods column only when an outage names pods (a probe's, or an
		// earlier version's report, never do).
		withPods := slices.ContainsFunc(r.Outages, func(o report.Outage) bool { return len(o.Pods) > 0 })
		if withPods {
			b.WriteString("| outage | duration | failed | on pods | context |\n|---|---|---|---|---|\n")
		} else {
			b.WriteString("| outage | duration | failed | context |\n|---|---|---|---|\n")
		}
		for _, o := range r.Outages {
			fmt.Fprintf(&b, "| %+.2fs | %.2fs | %d |", o.Start.Sub(r.StartedAt).Seconds(), o.DurationS, o.Count)
			if withPods {
				fmt.Fprintf(&b, " %s |", OutagePods(r, o, 5))
			}
			fmt.Fprintf(&b, " %s |\n", o.Context)
		}
		b.WriteString("\n")
	}
	for _, st := range r.ViewStalls {
		fmt.Fprintf(&b, "⏸️ %s\n\n", ViewStallLine(r, st))
	}
	for _, line := range HiddenRetryLines(r) {
		fmt.Fprintf(&b, "🔁 %s\n\n", line)
	}
	if line := AttributionLine(r); line != "" {
		fmt.Fprintf(&b, "Attributed: %s\n\n", line)
	}
	if line := RefusalsLine(r); line != "" {
		fmt.Fprintf(&b, "Refused: %s\n\n", line)
	}
	if e := r.EdgeLog; e != nil {
		fmt.Fprintf(&b, "Edge access log: %s\n\n", EdgeLogLine(e))
	}
	if lines := ConntrackLines(r); len(lines) > 0 {
		fmt.Fprintf(&b, "Conntrack: %s\n", lines[0])
		for _, line := range lines[1:] {
			fmt.Fprintf(&b, "- %s\n", line)
		}
		b.WriteString("\n")
	}
	writeMarkdownPods(&b, r)
	if len(r.Probers) > 0 {
		paths := len(r.Paths) > 0 // each path has its own probers
		if paths {
			b.WriteString("| prober | node | path | req/s | sent | failed | clock offset | status |\n|---|---|---|---|---|---|---|---|\n")
		} else {
			b.WriteString("| prober | node | req/s | sent | failed | clock offset | status |\n|---|---|---|---|---|---|---|\n")
		}
		for _, p := range r.Probers {
			failed := fmt.Sprint(p.Failed)
			if c := ClassCounts(p.ByClass); c != "" {
				failed += " (" + c + ")"
			}
			path := ""
			if paths {
				path = " " + p.Path + " |"
			}
			fmt.Fprintf(&b, "| `%s` | `%s` |%s %.4g | %d | %s | %+.2f ms | %s %s |\n", p.Pod, p.Node, path, p.ShareRPS, p.Sent, failed, p.ClockOffsetMS, p.Status, p.Lost)
		}
		fmt.Fprintf(&b, "\nProbers started within %.2f ms of each other.\n\n", r.Prober.StartSpreadMS)
	}
	for _, f := range r.Findings {
		static := ""
		if f.Source == report.SourceDoctor {
			static = " (static check)"
		}
		fmt.Fprintf(&b, "### %s %s%s\n\n", map[report.Severity]string{report.SeverityError: "❌", report.SeverityWarning: "⚠️"}[f.Severity], f.Title, static)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "- %s\n", e)
		}
		fmt.Fprintf(&b, "\n**Fix:** %s ([%s](%s))\n\n", f.Fix, f.ID, report.FindingDoc(f.ID))
	}
	fmt.Fprintf(&b, "**Verdict:** exit %d", r.Verdict.ExitCode)
	if len(r.Verdict.Reasons) > 0 {
		fmt.Fprintf(&b, " — %s", strings.Join(r.Verdict.Reasons, "; "))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, Printable(b.String()))
	return err
}

// OutageLine says an outage of r in a line: "+5.20s for 0.90s (20 failed,
// while terminating: web-1; on web-1 17 (12 certain); 3 on no pod named)".
func OutageLine(r *report.Report, o report.Outage) string {
	s := fmt.Sprintf("%+.2fs for %.2fs (%d failed", o.Start.Sub(r.StartedAt).Seconds(), o.DurationS, o.Count)
	if o.Context != "" {
		s += ", " + o.Context
	}
	if on := OutagePods(r, o, 3); on != "" {
		s += "; on " + on
	}
	return s + ")"
}

// OutagePods says on which pods an outage's failures fell, the most hit
// first, up to max of them: "web-1 17 (12 certain), web-2 3 (certain); 2
// on no pod named" (an edge's own refusal, or a failure put on none).
// "" when none was put on a pod.
func OutagePods(r *report.Report, o report.Outage, max int) string {
	if len(o.Pods) == 0 {
		return ""
	}
	var parts []string
	onPods := 0
	for i, p := range o.Pods {
		onPods += p.Failures
		if i >= max {
			continue
		}
		switch p.Certain {
		case 0:
			parts = append(parts, fmt.Sprintf("%s %d (none certain)", p.Pod, p.Failures))
		case p.Failures:
			parts = append(parts, fmt.Sprintf("%s %d (certain)", p.Pod, p.Failures))
		default:
			parts = append(parts, fmt.Sprintf("%s %d (%d certain)", p.Pod, p.Failures, p.Certain))
		}
	}
	s := strings.Join(parts, ", ")
	if more := len(o.Pods) - max; more > 0 {
		s += fmt.Sprintf(" and %d more pods", more)
	}
	switch rest := o.Count - onPods; {
	case rest > 0 && r.FailureInfo.Total > uint64(r.FailureInfo.Kept):
		s += fmt.Sprintf("; %d not kept in full or on no pod named", rest)
	case rest > 0:
		s += fmt.Sprintf("; %d on no pod named", rest)
	}
	return s
}

// ViewStallLine says one stall of the view of the cluster in a sentence:
// when, how long, and what it did to attribution.
func ViewStallLine(r *report.Report, st report.ViewStall) string {
	span := fmt.Sprintf("for %.1fs", st.DurationS)
	if st.Open {
		span = fmt.Sprintf("for %.1fs, to the end of the watch", st.DurationS)
	}
	s := fmt.Sprintf("The view of the cluster stalled at %+.2fs %s: no pods list answered and no watch delivered anything (the API server frozen, overloaded or cut off)", st.Start.Sub(r.StartedAt).Seconds(), span)
	switch {
	case st.Failures == 0:
		return s + "; no failure began in it."
	case st.Widened == 0:
		return s + fmt.Sprintf("; %d failures began in it, none attributed from the timeline (conntrack and the backend header do not depend on the view).", st.Failures)
	}
	return s + fmt.Sprintf("; %d failures began in it, %d of them attributed from the timeline counting changes received up to its end (less certain); the other %d named by conntrack, the edge's access log or the backend header (which do not depend on the view) or by nothing.", st.Failures, st.Widened, st.Failures-st.Widened)
}

// EOFSplit says how the eof and eof_reused failures split by server close:
// "3 before the request reached the server (the keep-alive race: nothing
// processed), 2 after it (cut in flight)"; "" when there are none.
func EOFSplit(t report.Totals) string {
	var parts []string
	if n := t.EOFBeforeRequest; n > 0 {
		parts = append(parts, fmt.Sprintf("%d before the request reached the server (the keep-alive race: nothing processed)", n))
	}
	if n := t.EOFAfterRequest; n > 0 {
		parts = append(parts, fmt.Sprintf("%d after the server had it (cut in flight)", n))
	}
	return strings.Join(parts, ", ")
}

// ClassCounts lists the non-zero failure counts of a by-class map as
// "class n, ...", sorted by class name.
func ClassCounts(by map[string]uint64) string {
	var parts []string
	for _, c := range sortedKeys(by) {
		if n := by[c]; n > 0 && c != report.ClassOK {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
	}
	return strings.Join(parts, ", ")
}

// podsOpenUpTo: a longer pod table is collapsed (a <details> block) so the
// findings stay near the top of a pull request.
const podsOpenUpTo = 10

// writeMarkdownPods renders the per-pod table: what each pod served, how
// much after its deletion was requested, when it turned ready and was
// deleted, and how its container ended.
func writeMarkdownPods(b *strings.Builder, r *report.Report) {
	if len(r.Pods) == 0 {
		return
	}
	rel := func(t *time.Time) string {
		switch {
		case t == nil:
			return "–"
		case !t.After(r.StartedAt):
			return "before"
		}
		return fmt.Sprintf("%+.2fs", t.Sub(r.StartedAt).Seconds())
	}
	collapsed := len(r.Pods) > podsOpenUpTo
	if collapsed {
		fmt.Fprintf(b, "<details><summary>%d pods</summary>\n\n", len(r.Pods))
	}
	edge := report.EdgeFailedAttemptsKnown(r)
	if edge {
		b.WriteString("| pod | revision | served | after deletion | edge retried | ready | deleted | exit |\n|---|---|---:|---:|---:|---|---|---|\n")
	} else {
		b.WriteString("| pod | revision | served | after deletion | ready | deleted | exit |\n|---|---|---:|---:|---|---|---|\n")
	}
	for _, p := range r.Pods {
		exit := "–"
		if p.ExitCode != nil {
			exit = fmt.Sprint(*p.ExitCode)
		}
		served, after := servedCells(r, p)
		cells := []string{"`" + p.Pod + "`", orDash(p.Revision), served, after}
		if edge {
			cells = append(cells, edgeFailedCell(p))
		}
		cells = append(cells, rel(p.ReadyAt), rel(p.DeletedAt), exit)
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	if note := servedNote(r); note != "" {
		b.WriteString("\n<sub>" + note + "</sub>\n")
	}
	if edge {
		b.WriteString("\n<sub>" + edgeFailedNote + "</sub>\n")
	}
	if collapsed {
		b.WriteString("\n</details>\n")
	}
	b.WriteString("\n")
}
