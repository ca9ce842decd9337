package tui

import (
	"fmt"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
)

type styles struct {
	title, dim, bad, warn, good, focus, phase lipgloss.Style
}

func newStyles(color bool) styles {
	s := styles{
		title: lipgloss.NewStyle().Bold(true),
		dim:   lipgloss.NewStyle(),
		bad:   lipgloss.NewStyle(),
		warn:  lipgloss.NewStyle(),
		good:  lipgloss.NewStyle(),
		focus: lipgloss.NewStyle().Bold(true),
		phase: lipgloss.NewStyle().Bold(true),
	}
	if color {
		s.dim = s.dim.Foreground(lipgloss.Color("8"))
		s.bad = s.bad.Foreground(lipgloss.Color("9")).Bold(true)
		s.warn = s.warn.Foreground(lipgloss.Color("11"))
		s.good = s.good.Foreground(lipgloss.Color("10"))
		s.focus = s.focus.Foreground(lipgloss.Color("14"))
		s.phase = s.phase.Foreground(lipgloss.Color("14"))
	}
	return s
}

// Minimum sizes: below them the layout degrades rather than breaks.
const (
	minWidth  = 40
	minHeight = 12
	wideWidth = 120 // pods and events side by side from here
)

func (m Model) render() string {
	w, h := max(m.width, minWidth), max(m.height, minHeight)
	var top []string
	top = append(top, m.header(w))
	if m.snap.Rollout != nil {
		top = append(top, m.rolloutLine(w))
	}
	top = append(top, m.counters(w), m.latencyLine(w))
	if len(m.snap.Probers) > 0 {
		top = append(top, m.probersLine(w))
	}
	if len(m.snap.Paths) > 0 {
		top = append(top, m.pathsLine(w))
	}
	top = append(top, m.chart(w)...)
	footer := m.footer(w)
	rest := h - len(top) - 1
	var body []string
	switch {
	case m.showHelp:
		body = m.helpLines(w)
	case m.endScreen():
		body = m.doneLines(w)
	default:
		body = m.panes(w, rest)
	}
	body = fit(body, rest, m.bodyScroll, m.endScreen() || m.showHelp)
	lines := append(append(top, body...), footer)
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, w, "…")
	}
	return strings.Join(lines, "\n")
}

// fit pads or cuts lines to exactly n; a scrollable body starts at offset.
func fit(lines []string, n, offset int, scrollable bool) []string {
	if scrollable && len(lines) > n {
		offset = min(offset, len(lines)-n)
		lines = lines[offset:]
	}
	if len(lines) > n {
		lines = lines[:n]
	}
	for len(lines) < n {
		lines = append(lines, "")
	}
	return lines
}

func (m Model) header(w int) string {
	s := m.snap
	phase := strings.ToUpper(orDash(s.Phase))
	if m.stopping && m.done == nil {
		phase = "STOPPING"
	}
	rate := fmt.Sprintf("%.0f req/s", s.AchievedRate)
	if s.TargetRate > 0 {
		rate = fmt.Sprintf("%.0f/%g req/s", s.AchievedRate, s.TargetRate)
	}
	left := m.st.title.Render("rollprobe "+orDash(s.Command)) + "  " + s.Target
	right := m.st.phase.Render("● "+phase) + "  " + clock(s.Elapsed) + "  " + rate
	if s.ViewStalled > 0 {
		right = m.st.bad.Render(fmt.Sprintf("API silent %.0fs", s.ViewStalled.Seconds())) + "  " + right
	}
	return spread(left, right, w)
}

func (m Model) rolloutLine(w int) string {
	r := m.snap.Rollout
	rev := orDash(r.OldRevision)
	if r.NewRevision != "" {
		rev += "→" + r.NewRevision
	}
	name := r.Name
	if w < 100 {
		name = name[strings.IndexByte(name, '/')+1:] // the namespace only where there is room
	}
	if r.Kind != "" && r.Kind != "deployment" {
		name = r.Kind + " " + name // a Deployment goes without saying
	}
	line := fmt.Sprintf("%s  %s  updated %d/%d ready %d/%d available %d/%d",
		m.st.title.Render(name), rev, r.Updated, r.Desired, r.Ready, r.Desired, r.Available, r.Desired)
	if r.OldPod > 0 && r.NewRevision != "" {
		line += "  " + m.st.warn.Render(fmt.Sprintf("old pods %d", r.OldPod))
	}
	return line
}

func (m Model) counters(w int) string {
	s := m.snap
	parts := []string{m.st.good.Render(fmt.Sprintf("ok %d", s.OK))}
	for _, c := range s.Classes {
		parts = append(parts, m.st.bad.Render(fmt.Sprintf("%s %d", c.Class, c.N)))
	}
	if len(s.Classes) == 0 {
		parts = append(parts, m.st.dim.Render("no failures"))
	}
	ratio := "-"
	if s.Sent > 0 {
		ratio = fmt.Sprintf("%.3f%%", 100*float64(s.Sent-s.Failed)/float64(s.Sent))
	}
	return spread(strings.Join(parts, "  "), fmt.Sprintf("done %d  success %s", s.Sent, ratio), w)
}

// probersLine: one entry per in-cluster prober, its node, rate and
// failures (the merged counts are above).
func (m Model) probersLine(int) string {
	parts := []string{"probers"}
	for _, p := range m.snap.Probers {
		entry := fmt.Sprintf("%s %g/s", p.Node, p.Rate)
		if p.Path != "" {
			entry = fmt.Sprintf("%s %s %g/s", p.Path, p.Node, p.Rate)
		}
		switch {
		case p.Lost != "":
			entry = m.st.bad.Render(entry + " LOST")
		case p.Failed > 0:
			entry += " " + m.st.bad.Render(fmt.Sprintf("%d failed", p.Failed))
		default:
			entry += " " + m.st.good.Render("ok")
		}
		parts = append(parts, entry)
	}
	return strings.Join(parts, "  ")
}

// pathsLine: one entry per path of a run that probes several, its sent
// and failed (the counts above are all of them).
func (m Model) pathsLine(int) string {
	parts := []string{"paths"}
	for _, p := range m.snap.Paths {
		entry := fmt.Sprintf("%s %d sent", p.Name, p.Sent)
		if p.Failed > 0 {
			entry += " " + m.st.bad.Render(fmt.Sprintf("%d failed", p.Failed))
		} else {
			entry += " " + m.st.good.Render("ok")
		}
		parts = append(parts, entry)
	}
	return strings.Join(parts, "  ")
}

func (m Model) latencyLine(int) string {
	l := m.snap.Latency
	return fmt.Sprintf("latency p50 %s  p90 %s  p99 %s  max %s", dur(l.P50), dur(l.P90), dur(l.P99), dur(l.Max)) +
		m.st.dim.Render("  (from intended send time)")
}

// Sparkline levels, lowest first.
var levels = []rune(" ▁▂▃▄▅▆▇█")

// chart draws requests and failures per second over the last seconds that
// fit, with a row of marks where pods were deleted (▼) or turned ready (▲).
func (m Model) chart(w int) []string {
	const label = 12
	cols := max(10, w-label)
	secs := m.snap.Seconds
	first := max(0, len(secs)-cols)
	window := secs[first:]
	var maxSent, maxFail uint64
	for _, s := range window {
		maxSent, maxFail = max(maxSent, s.Sent), max(maxFail, s.Failed)
	}
	var req, fail, marks strings.Builder
	for _, s := range window {
		req.WriteRune(level(s.Sent, maxSent))
		if s.Failed == 0 {
			fail.WriteString(m.st.dim.Render("·"))
		} else {
			fail.WriteString(m.st.bad.Render(string(max(levels[1], level(s.Failed, maxFail)))))
		}
	}
	markAt := map[int]MarkKind{}
	for _, mk := range m.snap.Marks {
		if mk.Kind == MarkDeleted || markAt[mk.Second] == 0 {
			markAt[mk.Second] = mk.Kind
		}
	}
	for i := range window {
		switch markAt[m.snap.SecondsFrom+first+i] {
		case MarkDeleted:
			marks.WriteString(m.st.warn.Render("▼"))
		case MarkReady:
			marks.WriteString(m.st.good.Render("▲"))
		default:
			marks.WriteByte(' ')
		}
	}
	var lastSent uint64
	if n := len(window); n > 1 {
		lastSent = window[n-2].Sent // the last complete second
	}
	span := fmt.Sprintf("-%ds", len(window))
	axis := strings.Repeat(" ", label) + span + strings.Repeat(" ", max(1, len(window)-len(span)-3)) + "now"
	legend := "   · no failure"
	if m.snap.Rollout != nil {
		legend = "   ▼ pod deletion requested  ▲ pod ready" + legend
	}
	lines := []string{
		m.st.title.Render("requests per second") + m.st.dim.Render(legend),
		fmt.Sprintf("%-*s", label, fmt.Sprintf("sent/s %d", lastSent)) + req.String(),
		m.st.bad.Render(fmt.Sprintf("%-*s", label, fmt.Sprintf("failed ≤%d", maxFail))) + fail.String(),
	}
	if m.snap.Rollout != nil {
		lines = append(lines, fmt.Sprintf("%-*s", label, "pods")+marks.String())
	}
	return append(lines, m.st.dim.Render(axis))
}

func level(v, top uint64) rune {
	if top == 0 || v == 0 {
		return levels[0]
	}
	i := int((v*uint64(len(levels)-1) + top - 1) / top)
	return levels[min(i, len(levels)-1)]
}

// panes renders the pod table and the event log, stacked (or side by
// side on wide terminals) in n rows.
func (m Model) panes(w, n int) []string {
	if w >= wideWidth {
		left, right := w/2-1, w-w/2-1
		pods := fit(m.podPane(left, n), n, 0, false)
		log := fit(m.logPane(right, n), n, 0, false)
		out := make([]string, n)
		for i := range out {
			out[i] = padRight(pods[i], left) + "  " + log[i]
		}
		return out
	}
	podRows := n / 2
	return append(m.podPane(w, podRows), m.logPane(w, n-podRows)...)
}

func (m Model) paneTitle(p pane, text string) string {
	if m.focus == p {
		return m.st.focus.Render("▸ " + text)
	}
	return m.st.title.Render("  " + text)
}

func (m Model) podPane(w, n int) []string {
	if n <= 0 {
		return nil
	}
	if m.snap.Rollout == nil {
		return m.backendPane(w, n)
	}
	const fixed = 10 + 1 + 5 + 1 + 7 + 1 + 4 + 1 + 7 + 1 + 8
	nameW := max(12, w-fixed-1)
	title := m.paneTitle(panePods, fmt.Sprintf("pods (%d)", len(m.snap.Pods)))
	lines := []string{title}
	if n == 1 {
		return lines
	}
	lines = append(lines, m.st.dim.Render(fmt.Sprintf("%-*s %-10s %-5s %-7s %-4s %7s %8s", nameW, "name", "revision", "ready", "serving", "term", "age", "served")))
	rows := m.snap.Pods
	avail := n - 2
	off := min(m.scroll[panePods], max(0, len(rows)-avail))
	for i := off; i < len(rows) && len(lines) < n; i++ {
		p := rows[i]
		served := fmt.Sprint(p.Served)
		if m.snap.ServedUnknown {
			served = "unknown"
		}
		line := fmt.Sprintf("%-*s %-10s %-5s %-7s %-4s %7s %8s", nameW, ansi.Truncate(p.Name, nameW, "…"), orDash(p.Revision),
			yes(p.Ready), yes(p.Serving), yes(p.Terminating), age(p.Age, p.Gone), served)
		switch {
		case p.Gone:
			line = m.st.dim.Render(line)
		case p.Terminating:
			line = m.st.warn.Render(line)
		}
		lines = append(lines, line)
	}
	return lines
}

// backendPane is probe's pod table: the backends that answered (by
// --backend-header) and how many responses each served.
func (m Model) backendPane(w, n int) []string {
	lines := []string{m.paneTitle(panePods, fmt.Sprintf("backends (%d)", len(m.snap.Pods)))}
	if len(m.snap.Pods) == 0 && n > 1 {
		lines = append(lines, m.st.dim.Render("  (responses name their pod with --backend-header X-Pod-Name)"))
	}
	nameW := max(12, w-10)
	off := min(m.scroll[panePods], max(0, len(m.snap.Pods)-(n-1)))
	for i := off; i < len(m.snap.Pods) && len(lines) < n; i++ {
		p := m.snap.Pods[i]
		lines = append(lines, fmt.Sprintf("%-*s %8d", nameW, ansi.Truncate(p.Name, nameW, "…"), p.Served))
	}
	return lines
}

func (m Model) logPane(w, n int) []string {
	if n <= 0 {
		return nil
	}
	log := m.snap.Log
	title := m.paneTitle(paneLog, fmt.Sprintf("events (%d)", len(log)))
	lines := []string{title}
	avail := n - 1
	end := max(0, len(log)-m.scroll[paneLog])
	start := max(0, end-avail)
	for _, l := range log[start:end] {
		text := fmt.Sprintf("%8s  %s", fmt.Sprintf("%+.1fs", l.At.Seconds()), l.Text)
		if l.Bad {
			text = m.st.bad.Render("!" + text[1:])
		}
		lines = append(lines, ansi.Truncate(text, w, "…"))
	}
	return lines
}

func (m Model) doneLines(w int) []string {
	d := m.done
	verdict := d.Verdict
	style := m.st.good
	if d.ExitCode != 0 {
		style = m.st.bad
	}
	lines := []string{style.Render(fmt.Sprintf("verdict: %s (exit %d)", verdict, d.ExitCode))}
	for _, r := range d.Reasons {
		lines = append(lines, "  "+r)
	}
	for _, f := range d.Findings {
		sev := strings.ToUpper(f.Severity)
		st := m.st.warn
		if f.Severity == "error" {
			st = m.st.bad
		}
		title := f.Title
		if f.Static {
			title += m.st.dim.Render(" (static check)")
		}
		lines = append(lines, st.Render(fmt.Sprintf("%-7s", sev))+" "+title)
		for _, l := range strings.Split(wrap("fix: "+f.Fix, w-8), "\n") {
			lines = append(lines, "        "+l)
		}
	}
	lines = append(lines, d.Files...)
	return lines
}

func (m Model) helpLines(w int) []string {
	h := m.help
	h.SetWidth(w)
	lines := []string{m.st.title.Render("keys")}
	lines = append(lines, strings.Split(h.FullHelpView(keys.FullHelp()), "\n")...)
	lines = append(lines, "",
		"sent/s: requests sent per second (the last complete second); failed ≤N: failures per second, N the peak shown;",
		"▼ marks a second in which a pod's deletion was requested, ▲ one in which a pod turned ready.",
		"pods: serving = its endpoint is serving; term = terminating (deletion requested).",
		"Latency counts from each request's intended send time (coordinated omission corrected).")
	return lines
}

func (m Model) footer(w int) string {
	switch {
	case m.endScreen():
		return m.st.dim.Render("q/enter: exit   tab: pods, events   ?: help   ↑↓: scroll")
	case m.done != nil:
		next := "events"
		if m.focus == paneLog {
			next = "the verdict"
		}
		style := m.st.good
		if m.done.ExitCode != 0 {
			style = m.st.bad
		}
		return style.Render(fmt.Sprintf("%s (exit %d)", m.done.Verdict, m.done.ExitCode)) + m.st.dim.Render("   q/enter: exit   tab: "+next+"   ↑↓: scroll")
	case m.stopping:
		return m.st.warn.Render("stopping: finishing in-flight requests and writing the report…")
	}
	h := m.help
	h.SetWidth(w)
	return h.ShortHelpView(keys.ShortHelp())
}

func (m Model) paneRows() int { return max(1, (max(m.height, minHeight)-12)/2) }

// spread puts left and right on one line of width w.
func spread(left, right string, w int) string {
	gap := w - lipgloss.Width(left) - lipgloss.Width(right)
	if gap < 2 {
		return left + "  " + right
	}
	return left + strings.Repeat(" ", gap) + right
}

func padRight(s string, w int) string {
	if d := w - lipgloss.Width(s); d > 0 {
		return s + strings.Repeat(" ", d)
	}
	return ansi.Truncate(s, w, "…")
}

// wrap breaks s into lines of at most w cells (no padding).
func wrap(s string, w int) string {
	lines := strings.Split(lipgloss.NewStyle().Width(max(20, w)).Render(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func clock(d time.Duration) string {
	d = d.Round(100 * time.Millisecond)
	return fmt.Sprintf("%d:%04.1f", int(d.Minutes()), (d % time.Minute).Seconds())
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3gs", d.Seconds())
}

func age(d time.Duration, gone bool) string {
	if gone {
		return "gone"
	}
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
