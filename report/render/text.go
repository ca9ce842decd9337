// Package render draws reports for people: the text summary, Markdown (a
// pull request, a GitHub step summary) and the doctor's result. It reads
// the contract (package report) and nothing else of rollprobe's; nothing
// else in rollprobe renders a report.
package render

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
)

// Text renders the human summary of r.
func Text(w io.Writer, r *report.Report) error {
	var b strings.Builder
	model := fmt.Sprintf("%g req/s", r.Config.Rate)
	if r.Config.Model == report.ModelClosed {
		model = fmt.Sprintf("closed model, %d workers", r.Config.Concurrency)
	}
	if len(r.Paths) > 1 {
		model += " each"
	}
	fmt.Fprintf(&b, "rollprobe %s %s  (%s, %s, %.1fs", r.Command, probed(r), model, r.Config.Conn, r.DurationS)
	if r.Interrupted {
		b.WriteString(", interrupted")
	}
	b.WriteString(")\n")

	if ro := r.Rollout; ro != nil {
		trigger := ro.Trigger
		if ro.TemplateFrom != "" {
			trigger += " on its template, " + ro.TemplateFrom + " (workloadRef)"
		}
		fmt.Fprintf(&b, "  rollout   %s behind service %s (%s): %s", ro.Workload(), ro.Service, trigger, ro.Status)
		switch {
		case ro.OldRevision != "" && ro.OldRevision == ro.NewRevision: // a drain, a scale
			fmt.Fprintf(&b, ", revision %s (unchanged)", ro.OldRevision)
		case ro.OldRevision != "" || ro.NewRevision != "":
			fmt.Fprintf(&b, ", revision %s -> %s", orDash(ro.OldRevision), orDash(ro.NewRevision))
		}
		if ro.TriggeredAt != nil && ro.OldPodsGoneAt != nil {
			after := ro.OldPodsGoneAt.Sub(*ro.TriggeredAt).Seconds()
			if what := OneRevisionEnd(r); what != "" {
				fmt.Fprintf(&b, ", done %.1fs after the trigger (%s)", after, what)
			} else {
				fmt.Fprintf(&b, ", old pods gone %.1fs after the trigger", after)
			}
		}
		if back := abortedBack(r); back != "" {
			b.WriteString(", " + back)
		}
		if ro.Message != "" {
			fmt.Fprintf(&b, " (%s)", ro.Message)
		}
		b.WriteString("\n")
		if entries := nodePortEntries(r); entries != "" {
			fmt.Fprintf(&b, "  entry     %s (service type %s, externalTrafficPolicy %s)\n", entries, orDash(ro.ServiceType), orDash(ro.ExternalTrafficPolicy))
		}
		for i, line := range StepLines(ro) {
			label := "          "
			if i == 0 {
				label = "steps     "
			}
			fmt.Fprintf(&b, "  %s%s\n", label, line)
		}
	}
	writePaths(&b, r)
	t := r.Totals
	fmt.Fprintf(&b, "  requests  sent %d  ok %d  failed %d (%s)", t.Sent, t.OK, t.Failed, Percent(t.Failed, t.Sent))
	if len(r.Paths) > 1 {
		b.WriteString("  (all paths)")
	}
	if n := r.Prober.Canceled; n > 0 {
		fmt.Fprintf(&b, "  canceled %d (in flight when interrupted: no outcome)", n)
	}
	b.WriteString("\n")
	if t.Failed > 0 || r.Prober.LocalErrors > 0 {
		var parts []string
		for _, c := range report.FailureClassNames() {
			if n := t.ByClass[c]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", c, n))
			}
		}
		fmt.Fprintf(&b, "  failures  %s\n", strings.Join(parts, "  "))
	}
	if line := EOFSplit(t); line != "" {
		fmt.Fprintf(&b, "  closes    %s\n", line)
	}
	if codes := sortedKeys(t.ByStatus); len(codes) > 0 {
		parts := make([]string, len(codes))
		for i, code := range codes {
			parts[i] = fmt.Sprintf("%s×%d", code, t.ByStatus[code])
		}
		fmt.Fprintf(&b, "  status    %s\n", strings.Join(parts, "  "))
	}
	l := r.LatencyMS
	fmt.Fprintf(&b, "  latency   p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (from intended send time)\n",
		Millis(l.P50), Millis(l.P90), Millis(l.P99), Millis(l.P999), Millis(l.Max))
	s := r.ServiceMS
	fmt.Fprintf(&b, "  service   p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (from actual send)\n",
		Millis(s.P50), Millis(s.P90), Millis(s.P99), Millis(s.P999), Millis(s.Max))
	p := r.Prober
	if p.TargetRate > 0 {
		fmt.Fprintf(&b, "  prober    %.1f of %g req/s, max schedule lag %s, %d workers, %d local errors\n",
			p.AchievedRate, p.TargetRate, Millis(p.MaxScheduleLagMS), p.Workers, p.LocalErrors)
	} else {
		fmt.Fprintf(&b, "  prober    %.1f req/s, %d workers, %d local errors\n", p.AchievedRate, p.Workers, p.LocalErrors)
	}
	fmt.Fprintf(&b, "  conns     %d fresh (%s), %d reused", t.FreshConnections, Percent(t.FreshConnections, t.FreshConnections+t.ReusedConnections), t.ReusedConnections)
	if t.SlowConnects > 0 {
		fmt.Fprintf(&b, "; %d succeeded only after a retransmitted SYN (about 1 s late)", t.SlowConnects)
	}
	b.WriteString("\n")
	for _, line := range HiddenRetryLines(r) {
		fmt.Fprintf(&b, "  hidden    %s\n", line)
	}
	if len(r.Pods) > 0 {
		writePods(&b, r)
	} else if backends := sortedKeys(t.ByBackend); len(backends) > 0 {
		parts := make([]string, 0, len(backends))
		for _, name := range backends {
			parts = append(parts, fmt.Sprintf("%s %d", name, t.ByBackend[name]))
		}
		fmt.Fprintf(&b, "  backends  %s\n", strings.Join(parts, "  "))
	}
	if len(r.Probers) > 0 {
		writeProbers(&b, r)
	}
	if len(r.Failures) > 0 {
		first, last := r.Failures[0], r.Failures[len(r.Failures)-1]
		span := fmt.Sprintf("from %+.3fs to %+.3fs", first.AtMS/1000, last.AtMS/1000)
		if r.FailureInfo.Total > uint64(r.FailureInfo.Kept) {
			span = fmt.Sprintf("from %+.3fs (the first %d of %d kept in full)", first.AtMS/1000, r.FailureInfo.Kept, r.FailureInfo.Total)
		}
		fmt.Fprintf(&b, "  failed    %s; first: %s\n", span, describeFailure(first))
	}
	if line := AttributionLine(r); line != "" {
		fmt.Fprintf(&b, "  attributed %s\n", line)
	}
	if line := RefusalsLine(r); line != "" {
		fmt.Fprintf(&b, "  refused   %s\n", line)
	}
	if e := r.EdgeLog; e != nil {
		fmt.Fprintf(&b, "  edge log  %s\n", EdgeLogLine(e))
	}
	if lines := ConntrackLines(r); len(lines) > 0 {
		fmt.Fprintf(&b, "  conntrack %s\n", lines[0])
		for _, line := range lines[1:] {
			fmt.Fprintf(&b, "            %s\n", line)
		}
	}
	for _, st := range r.ViewStalls {
		fmt.Fprintf(&b, "  stalled   %s\n", ViewStallLine(r, st))
	}
	for _, g := range r.NodeGaps {
		fmt.Fprintf(&b, "  node gap  %s had no serving endpoint from %+.2fs", g.Node, g.Start.Sub(r.StartedAt).Seconds())
		if g.Open {
			b.WriteString(" to the end")
		} else {
			fmt.Fprintf(&b, " for %.2fs", g.End.Sub(g.Start).Seconds())
		}
		fmt.Fprintf(&b, " (%d failed", g.Failed)
		if len(g.ReadyElsewhere) > 0 {
			fmt.Fprintf(&b, "; ready on other nodes: %s", strings.Join(g.ReadyElsewhere, ", "))
		}
		b.WriteString(")\n")
	}
	if len(r.Outages) > 0 {
		fmt.Fprintf(&b, "  outages   %d:", len(r.Outages))
		for i, o := range r.Outages {
			if i == 5 {
				fmt.Fprintf(&b, " ...")
				break
			}
			b.WriteString(" " + OutageLine(r, o))
		}
		b.WriteString("\n")
	}
	for _, f := range r.Findings {
		static := ""
		if f.Source == report.SourceDoctor {
			static = "  (static check: rollprobe doctor)"
		}
		fmt.Fprintf(&b, "  %-9s %s%s\n", strings.ToUpper(string(f.Severity)), f.Title, static)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "            - %s\n", e)
		}
		fmt.Fprintf(&b, "            fix: %s\n", f.Fix)
		fmt.Fprintf(&b, "            docs: %s\n", report.FindingDoc(f.ID))
	}
	fmt.Fprintf(&b, "verdict: %s (exit %d)", VerdictWord(r), r.Verdict.ExitCode)
	if len(r.Verdict.Reasons) > 0 {
		fmt.Fprintf(&b, ": %s", strings.Join(r.Verdict.Reasons, "; "))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, Printable(b.String()))
	return err
}

// VerdictWord is the verdict in one word: PASS, FAIL, INCONCLUSIVE,
// INTERRUPTED, or ERROR (rollprobe failed, or an output could not be
// written, and nothing took precedence).
func VerdictWord(r *report.Report) string {
	switch {
	case r.Verdict.Pass:
		return "PASS"
	case r.Verdict.Interrupted:
		return "INTERRUPTED"
	case r.Verdict.ExitCode == exitcode.Internal || r.Verdict.ExitCode == exitcode.OutputFailed:
		return "ERROR"
	case r.Verdict.Inconclusive && r.Verdict.ExitCode == exitcode.Inconclusive:
		return "INCONCLUSIVE"
	}
	return "FAIL"
}

// Percent is n of of as a percentage with three significant digits.
func Percent(n, of uint64) string {
	if of == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.3g%%", 100*float64(n)/float64(of))
}

// msText formats milliseconds with a unit that keeps three significant digits.
// Millis is a duration in milliseconds as people read it: µs, ms or s.
func Millis(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 1:
		return fmt.Sprintf("%.0fµs", v*1000)
	case v < 1000:
		return fmt.Sprintf("%.3gms", v)
	}
	return fmt.Sprintf("%.3gs", v/1000)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// servedCells are a pod's served counts as a table shows them
// (report.ServedShown: unknown, not 0, when nothing measured them).
func servedCells(r *report.Report, p report.PodTraffic) (served, after string) {
	served, after, _ = report.ServedShown(r, p)
	return served, after
}

// servedNote says, under a pods table, where its served counts come from
// when that is not the backend header ("" when it is, or no pod shows).
func servedNote(r *report.Report) string {
	if r.Config.BackendHeader != "" || len(r.Pods) == 0 {
		return ""
	}
	for _, p := range r.Pods {
		switch _, _, src := report.ServedShown(r, p); src {
		case "conntrack":
			note := "served from conntrack: the responses on connections the kernel saw go to each pod's address; after deletion unknown without --backend-header"
			if ct := r.Conntrack; ct != nil && ct.ResponsesUnmapped > 0 {
				note += fmt.Sprintf("; %d responses on connections conntrack did not map are in no row", ct.ResponsesUnmapped)
			}
			return note
		case "access log":
			return "served from the edge's access log: the responses it forwarded to each pod's address; after deletion unknown without --backend-header (the log is dated by the edge's clock)"
		}
	}
	return "served unknown: no --backend-header names the pod that answered, and neither conntrack nor an edge access log mapped a response to a pod"
}

// writePods renders run's per-pod traffic table: what each pod served, how
// much of it after its deletion was requested, and how its container ended.
func writePods(b *strings.Builder, r *report.Report) {
	width := len("pod")
	for _, p := range r.Pods {
		width = max(width, len(p.Pod))
	}
	rel := func(t *time.Time) string {
		switch {
		case t == nil:
			return "-"
		case !t.After(r.StartedAt):
			return "before" // e.g. ready when watching began
		}
		return fmt.Sprintf("%+.2fs", t.Sub(r.StartedAt).Seconds())
	}
	edge := report.EdgeFailedAttemptsKnown(r)
	edgeCol := func(s string) string {
		if !edge {
			return ""
		}
		return fmt.Sprintf("  %12s", s)
	}
	fmt.Fprintf(b, "  pods      %-*s  %-10s  %8s  %14s%s  %8s  %8s  %s\n", width, "pod", "revision", "served", "after deletion", edgeCol("edge retried"), "ready", "deleted", "exit")
	for _, p := range r.Pods {
		exit := "-"
		if p.ExitCode != nil {
			exit = fmt.Sprint(*p.ExitCode)
		}
		served, after := servedCells(r, p)
		fmt.Fprintf(b, "            %-*s  %-10s  %8s  %14s%s  %8s  %8s  %s\n", width, p.Pod, orDash(p.Revision), served, after, edgeCol(edgeFailedCell(p)), rel(p.ReadyAt), rel(p.DeletedAt), exit)
	}
	if note := servedNote(r); note != "" {
		b.WriteString("            (" + note + ")\n")
	}
	if edge {
		b.WriteString("            (" + edgeFailedNote + ")\n")
	}
}

// edgeFailedNote says, under a pods table, what its edge column counts.
const edgeFailedNote = "edge retried: the attempts the edge's log lists as failed on the pod before it sent their requests to another backend; its clients never saw them fail"

// edgeFailedCell is a pod's edge-retried count as a table shows it.
func edgeFailedCell(p report.PodTraffic) string {
	if p.EdgeFailedAttempts == nil {
		return "unknown"
	}
	return fmt.Sprint(*p.EdgeFailedAttempts)
}

// writeProbers renders the in-cluster probers: one line each, which is the
// per-node table when they are spread one per node.
func writeProbers(b *strings.Builder, r *report.Report) {
	width := len("prober")
	nodeWidth := len("node")
	pathWidth := 0 // no column for one target
	if len(r.Paths) > 0 {
		pathWidth = len("path")
	}
	for _, p := range r.Probers {
		width, nodeWidth = max(width, len(p.Pod)), max(nodeWidth, len(p.Node))
		if pathWidth > 0 {
			pathWidth = max(pathWidth, len(p.Path))
		}
	}
	pathCol := func(s string) string {
		if pathWidth == 0 {
			return ""
		}
		return fmt.Sprintf("%-*s  ", pathWidth, s)
	}
	fmt.Fprintf(b, "  probers   %-*s  %-*s  %s%7s  %7s  %7s  %9s  %s\n", width, "prober", nodeWidth, "node", pathCol("path"), "req/s", "sent", "failed", "clock", "status")
	for _, p := range r.Probers {
		status := p.Status
		if p.Lost != "" {
			status += ": " + p.Lost
		}
		fmt.Fprintf(b, "            %-*s  %-*s  %s%7.4g  %7d  %7d  %+7.2fms  %s", width, p.Pod, nodeWidth, p.Node, pathCol(p.Path), p.ShareRPS, p.Sent, p.Failed, p.ClockOffsetMS, status)
		if c := ClassCounts(p.ByClass); c != "" {
			fmt.Fprintf(b, "  (%s)", c)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "            started within %.2f ms of each other; times are on this machine's clock\n", r.Prober.StartSpreadMS)
}

// describeFailure says what one failure was: its class, where it failed,
// its status and its error, each only when there is one.
func describeFailure(f report.Failure) string {
	parts := []string{f.Class}
	if f.Phase != "" {
		parts = append(parts, "("+f.Phase+")")
	}
	if f.Status != 0 {
		parts = append(parts, fmt.Sprintf("status %d", f.Status))
	}
	if f.Error != "" {
		parts = append(parts, f.Error)
	}
	return strings.Join(parts, " ")
}

// probed names what a report probed: its target, or how many paths (each
// on a line of its own below).
func probed(r *report.Report) string {
	if len(r.Paths) > 1 {
		return fmt.Sprintf("%d paths", len(r.Paths))
	}
	return r.Target
}

// writePaths is one line per path of a run that probed several: its URL,
// counts, failures by class, p99 and its own verdict.
func writePaths(b *strings.Builder, r *report.Report) {
	if len(r.Paths) < 2 {
		return
	}
	width := 0
	for _, p := range r.Paths {
		width = max(width, len(p.Name))
	}
	for i, p := range r.Paths {
		label := "  paths     "
		if i > 0 {
			label = "            "
		}
		fmt.Fprintf(b, "%s%-*s  %s  sent %d  ok %d  failed %d (%s)", label, width, p.Name, p.Target, p.Totals.Sent, p.Totals.OK, p.Totals.Failed, Percent(p.Totals.Failed, p.Totals.Sent))
		if c := ClassCounts(p.Totals.ByClass); c != "" {
			fmt.Fprintf(b, ": %s", c)
		}
		if h := p.Totals.HiddenRetries; h != nil && h.Attempts == 0 {
			b.WriteString("; no hidden retry") // measured: grpc-go resent nothing
		} else if h != nil {
			fmt.Fprintf(b, "; hidden retries %d in %s", h.Attempts, plural(int(h.Calls), "call"))
		}
		fmt.Fprintf(b, "  p99 %s  %s\n", Millis(p.LatencyMS.P99), pathVerdict(p.Verdict))
	}
}

// nodePortEntries names the node ports the run's traffic entered the
// Service by: each path's own when there are several (probing a Local
// policy at every node is a path per node), else the run's; "" when none
// entered by a node port.
func nodePortEntries(r *report.Report) string {
	say := func(e *report.Entry) string { return fmt.Sprintf("node %s's NodePort %d", orDash(e.Node), e.Port) }
	if len(r.Paths) < 2 {
		if r.Rollout != nil && r.Rollout.Entry != nil && r.Rollout.Entry.Via == report.ViaNodePort {
			return say(r.Rollout.Entry)
		}
		return ""
	}
	var parts []string
	for _, p := range r.Paths {
		if e := p.Entry; e != nil && e.Via == report.ViaNodePort {
			parts = append(parts, say(e)+" (path "+p.Name+")")
		}
	}
	return strings.Join(parts, ", ")
}

// pathVerdict is a path's verdict in a word and its exit code.
func pathVerdict(v report.Verdict) string {
	switch {
	case v.Pass:
		return "pass"
	case v.ExitCode == exitcode.Failures:
		return "FAIL"
	}
	return fmt.Sprintf("%s (exit %d)", strings.ToUpper(v.ExitCode.String()), int(v.ExitCode))
}

// HiddenRetryLines say what grpc-go resent unseen, for the run or for each
// path that measured it (--grpc-client grpc-go or both); none when no
// path did.
func HiddenRetryLines(r *report.Report) []string {
	line := func(prefix string, h *report.HiddenRetries) string {
		if h.Calls == 0 {
			return prefix + "grpc-go resent no call on its own"
		}
		return fmt.Sprintf("%sgrpc-go resent %d calls on its own (%d attempts: streams refused or above a GOAWAY), unseen by their callers but %s later on average, %s at most",
			prefix, h.Calls, h.Attempts, Millis(h.AddedMSMean), Millis(h.AddedMSMax))
	}
	var out []string
	if len(r.Paths) > 1 {
		for _, p := range r.Paths {
			if h := p.Totals.HiddenRetries; h != nil {
				out = append(out, line(p.Name+": ", h))
			}
		}
		return out
	}
	if h := r.Totals.HiddenRetries; h != nil {
		out = append(out, line("", h))
	}
	return out
}

// StepLines say, step by step, what an Argo canary's traffic did (its
// verdict, the failures, the new revision's share of the responses that
// named their pod against the weight declared); none for other rollouts.
func StepLines(ro *report.Rollout) []string {
	var out []string
	for _, s := range ro.Steps {
		verdict := "pass"
		if !s.Pass {
			verdict = "FAIL"
		}
		share := "new revision's share unknown (no response named its pod)"
		if s.NewSharePct != nil {
			share = fmt.Sprintf("new revision %.1f%% of %d named", *s.NewSharePct, s.Named)
		}
		out = append(out, fmt.Sprintf("%d %-16s weight %3d%%  %+.1fs to %+.1fs  sent %d  failed %d  %s  %s",
			s.Index+1, s.Step, s.Weight, s.StartS, s.EndS, s.Sent, s.Failed, verdict, share))
	}
	return out
}

// EdgeLogLine says what the edge's access log gave (report.EdgeLog): how
// many failed requests it named the pod of, and what it could not.
func EdgeLogLine(e *report.EdgeLog) string {
	if e.Error != "" {
		return fmt.Sprintf("%s not read (%s): the pods of failures through the edge are inferred from the timeline", Printable(e.File), Printable(e.Error))
	}
	if e.Requests == 0 {
		return fmt.Sprintf("%s (%s): no line of the run's requests (is the request ID header kept? Traefik: --accesslog.fields.headers.names.X-Request-Id=keep; nginx: the log_format in docs/run.md, with $http_x_request_id; the header --request-id-header names); the pods of failures through the edge are inferred from the timeline",
			Printable(e.File), e.Format)
	}
	s := fmt.Sprintf("%s (%s): a line for %d of the run's requests; %d failed requests found there (the pod the edge forwarded each to), %d through the edge not found (their pods inferred)",
		Printable(e.File), e.Format, e.Requests, e.FailuresFound, e.FailuresNotFound)
	if e.FailuresNotFound > 0 {
		s += " (an edge logs a request when it ends, and can hold one on a gone pod for minutes: --edge-log-wait waits longer)"
	}
	if e.Retried != nil && *e.Retried > 0 {
		s += fmt.Sprintf("; %d requests the edge sent to another pod after an attempt failed (its retries: drops the client never saw)", *e.Retried)
	}
	if e.FailuresNoBackend > 0 {
		s += fmt.Sprintf("; %d failed requests the edge sent to no pod (its line names no backend: it answered them itself)", e.FailuresNoBackend)
	}
	waited := 0
	for _, w := range e.Waits {
		waited += w.Requests
	}
	if waited > 0 {
		s += fmt.Sprintf("; %d requests waited %s or more inside the edge outside the attempt that answered them (failed attempts, a retry's backoff): drops the client saw only as waits", waited, report.EdgeWaitFloor)
	}
	if e.Duplicates > 0 {
		s += fmt.Sprintf("; %d request IDs on more than one line, left out", e.Duplicates)
	}
	if e.Unreadable > 0 {
		s += fmt.Sprintf("; %d lines not JSON", e.Unreadable)
	}
	return s
}

// abortedBack says how long after the abort was seen (the Rollout
// Degraded) the aborted revision's pods were gone, when the run followed
// the abort back to that end (report.AbortedWayBack); "" otherwise.
func abortedBack(r *report.Report) string {
	seen, gone, _, ok := report.AbortedWayBack(r)
	if !ok {
		return ""
	}
	return fmt.Sprintf("the aborted revision's pods gone %.1fs after the abort", gone.Sub(seen).Seconds())
}

// AttributionLine says how many failures were put on one pod, on
// several candidates and on none, or "" when there were no failures to
// attribute.
func AttributionLine(r *report.Report) string {
	a := r.Attribution
	if a == nil || a.Certain+a.Ambiguous+a.Unattributed == 0 {
		return ""
	}
	return fmt.Sprintf("%d to one pod for certain, %d among several candidates, %d to none (a pod's change counts from %.0fms before rollprobe received it: %s)",
		a.Certain, a.Ambiguous, a.Unattributed, a.ReceiveToleranceMS, a.ToleranceSource)
}

// RefusalsLine says, for every face, who refused the run's refused
// connections as their sockets showed (Failure.RefusedBy): a reject
// rule's ICMP error (and from where) or a TCP reset; "" when no refused
// failure was kept or none was read.
func RefusalsLine(r *report.Report) string {
	refused, byICMP, byRST := 0, 0, 0
	var from []string
	seen := map[string]bool{}
	for _, f := range r.Failures {
		if f.Class != report.ClassRefused {
			continue
		}
		refused++
		switch f.RefusedBy {
		case report.RefusedByICMP:
			byICMP++
			if f.ICMP != nil && !seen[f.ICMP.From] {
				seen[f.ICMP.From] = true
				from = append(from, f.ICMP.From)
			}
		case report.RefusedByRST:
			byRST++
		}
	}
	if byICMP+byRST == 0 {
		return ""
	}
	sort.Strings(from)
	line := fmt.Sprintf("%d of %d refused connections by a reject rule's ICMP error (from %s: no pod's TCP stack), %d by a TCP reset (a stack with nothing listening)",
		byICMP, refused, strings.Join(from, ", "), byRST)
	if byICMP == 0 {
		line = fmt.Sprintf("%d of %d refused connections by a TCP reset (a stack with nothing listening), none by a reject rule's ICMP error", byRST, refused)
	}
	if rest := refused - byICMP - byRST; rest > 0 {
		line += fmt.Sprintf("; %d not known (their sockets could not say)", rest)
	}
	return line
}

// ConntrackLines is what the conntrack watch saw, for every face: the
// first line how much of the run it mapped and what named the failures'
// pods, the rest one fact each (no connection seen, failures it found on
// no pod, not found and why, stale entries, joined entries, why it was
// not read, lost events). nil when the run had no watch to ask.
func ConntrackLines(r *report.Report) []string {
	ct := r.Conntrack
	if ct == nil {
		return nil
	}
	if !ct.Watching {
		return []string{fmt.Sprintf("not read: %s; pods come from a backend header or the edge's log where one names them, else the timeline", ct.Reason)}
	}
	by := map[string]int{}
	for _, f := range r.Failures {
		if f.Evidence != "" {
			by[f.Evidence]++
		}
	}
	accessLog := ""
	if n := by[report.EvidenceAccessLog]; n > 0 {
		accessLog = fmt.Sprintf(", the edge's access log %d", n)
	}
	lines := []string{fmt.Sprintf("%d connections seen; %d of %d failed connections found there (where their SYN went); pods named by conntrack %d, backend header %d%s, timeline %d",
		ct.Connections, ct.FailuresMapped, ct.FailuresMapped+ct.FailuresUnmapped+ct.FailuresNoEntry, by[report.EvidenceConntrack], by[report.EvidenceBackendHeader], accessLog, by[report.EvidenceTimeline])}
	if ct.FailuresNoEntry > 0 {
		lines = append(lines, fmt.Sprintf("%d failed connections reached no pod: conntrack has no entry for them (the probing host's own rules refused their SYN)", ct.FailuresNoEntry))
	}
	if line := UnmappedLine(ct); line != "" {
		lines = append(lines, line)
	}
	if ct.StaleEntries != nil && *ct.StaleEntries > 0 {
		lines = append(lines, fmt.Sprintf("%d unanswered connections of an earlier run were still in conntrack: %d of their source ports kept from this run's connections, which would have followed them", *ct.StaleEntries, ct.StalePortsHeld))
	}
	if ct.FailuresJoined > 0 {
		lines = append(lines, fmt.Sprintf("%d of those found went where an earlier unanswered connection from the same port went: their SYN joined its conntrack entry, past the rules", ct.FailuresJoined))
	}
	if ct.Connections == 0 {
		lines = append(lines, "none of the run's connections passed this host's conntrack (their address is rewritten on another host, a node port or a load balancer, or nothing here tracks them): it names no pod here")
	}
	if ct.Reason != "" {
		lines = append(lines, "not read: "+ct.Reason)
	}
	if ct.Lost {
		lines = append(lines, "events lost: "+ct.LostReason)
	}
	return lines
}

// UnmappedLine says why conntrack named no pod for the failed connections
// it did not find (their pods come from other evidence then), or "" when
// it found them all.
func UnmappedLine(ct *report.Conntrack) string {
	if ct.FailuresUnmapped <= 0 || ct.Connections == 0 {
		// None seen at all: the line that says so is the why.
		return ""
	}
	var why []string
	if n := ct.FailuresAmbiguous; n > 0 {
		why = append(why, fmt.Sprintf("%d whose source port carried another connection, to another pod, within their window (the events' order cannot say which was theirs)", n))
	}
	if n := ct.FailuresFollowed; n > 0 {
		why = append(why, fmt.Sprintf("%d with no event of their own, most likely following the entry an earlier connection from their port left (that pod first among their candidates)", n))
	}
	if n := ct.FailuresUnmapped - ct.FailuresAmbiguous - ct.FailuresFollowed; n > 0 {
		var lag string
		switch {
		case ct.Lost:
			lag = ": the kernel dropped events"
		case ct.EventLagMaxMS != nil && *ct.EventLagMaxMS >= 1000:
			lag = fmt.Sprintf(": the watch's reads were up to %.0f ms apart, and an event received over a second after its SYN is outside the window", *ct.EventLagMaxMS)
		case ct.EventLagMaxMS != nil:
			lag = fmt.Sprintf(" (the watch's reads were at most %.0f ms apart)", *ct.EventLagMaxMS)
		}
		why = append(why, fmt.Sprintf("%d with no event in their window%s", n, lag))
	}
	return fmt.Sprintf("%d failed connections not found there, their pods from other evidence (a backend header or the edge's log where one names it, else the timeline): %s", ct.FailuresUnmapped, strings.Join(why, "; "))
}

// OneRevisionEnd says how a change that kept the revision (a drain, a
// scale) ended, as its follow recorded it ("every pod the scale removed
// is gone", "the scale removed no pod"): such a run has no old revision
// whose pods went, so "old pods gone" would say what did not happen (a
// scale-out removes none). "" for a rollout.
func OneRevisionEnd(r *report.Report) string {
	ro := r.Rollout
	if ro == nil || ro.OldRevision == "" || ro.OldRevision != ro.NewRevision {
		return ""
	}
	for _, e := range r.Timeline {
		if e.Kind == report.AllOldPodsGone && e.Detail != "" {
			return e.Detail
		}
	}
	return ""
}
