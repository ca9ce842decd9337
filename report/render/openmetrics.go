package render

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// OpenMetrics writes a report's key numbers in the OpenMetrics text format,
// for GitLab's metrics report (artifacts:reports:metrics), which shows how
// each changed against the target branch: requests by class, failures,
// outages and their seconds, latency quantiles, and for run how long the
// old pods took to go. Names are rollprobe_*, times in seconds. Absent
// facts (no rollout, no latency because nothing succeeded) are left out
// rather than written as 0.
func OpenMetrics(w io.Writer, r *report.Report) error {
	m := &omWriter{w: w}
	m.family("rollprobe_requests", "counter", "requests sent, by outcome class")
	classes := make([]string, 0, len(r.Totals.ByClass))
	for c := range r.Totals.ByClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		m.sample("rollprobe_requests_total", `class="`+c+`"`, float64(r.Totals.ByClass[c]))
	}
	if len(r.Paths) > 1 {
		// Each path of a run that probed several, labelled by its name
		// (escaped: a bare URL's path is named after its host, which
		// may hold a quote).
		m.family("rollprobe_path_requests", "counter", "requests sent on each path, by outcome class")
		for _, p := range r.Paths {
			for _, c := range classes {
				m.sample("rollprobe_path_requests_total", `path="`+labelValue(p.Name)+`",class="`+c+`"`, float64(p.Totals.ByClass[c]))
			}
		}
		m.family("rollprobe_path_failed_requests", "gauge", "requests that failed on each path")
		for _, p := range r.Paths {
			m.sample("rollprobe_path_failed_requests", `path="`+labelValue(p.Name)+`"`, float64(p.Totals.Failed))
		}
		m.family("rollprobe_path_pass", "gauge", "1 when the path passed its own verdict")
		for _, p := range r.Paths {
			pass := 0.0
			if p.Verdict.Pass {
				pass = 1
			}
			m.sample("rollprobe_path_pass", `path="`+labelValue(p.Name)+`"`, pass)
		}
	}
	m.gauge("rollprobe_failed_requests", "requests that failed (the gate counts these)", float64(r.Totals.Failed))
	m.gauge("rollprobe_sent_requests", "requests sent", float64(r.Totals.Sent))
	var outageSeconds float64
	for _, o := range r.Outages {
		outageSeconds += o.DurationS
	}
	// A report with failures and no outages was written before probes had
	// outages: the count is unknown there, not 0.
	if r.Totals.Failed == 0 || len(r.Outages) > 0 {
		m.gauge("rollprobe_outages", "bursts of failed requests", float64(len(r.Outages)))
		m.gauge("rollprobe_outage_seconds", "seconds with requests failing, summed over the outages", outageSeconds)
	}
	m.gauge("rollprobe_slow_connects", "requests that succeeded only after a retransmitted SYN", float64(r.Totals.SlowConnects))
	for _, q := range []struct {
		name, help string
		q          report.Quantiles
	}{
		{"rollprobe_latency_seconds", "latency from each request's intended send time", r.LatencyMS},
		{"rollprobe_service_time_seconds", "latency from each request's actual send", r.ServiceMS},
	} {
		if q.q.Count == 0 {
			continue
		}
		m.family(q.name, "summary", q.help)
		for _, p := range []struct {
			label string
			ms    float64
		}{{"0.5", q.q.P50}, {"0.9", q.q.P90}, {"0.99", q.q.P99}, {"0.999", q.q.P999}} {
			m.sample(q.name, `quantile="`+p.label+`"`, p.ms/1000)
		}
		m.sample(q.name+"_count", "", float64(q.q.Count))
	}
	if ro := r.Rollout; ro != nil && ro.TriggeredAt != nil {
		if ro.OldPodsGoneAt != nil {
			m.gauge("rollprobe_old_pods_gone_seconds", "from the rollout's start until the last old pod was gone", ro.OldPodsGoneAt.Sub(*ro.TriggeredAt).Seconds())
		}
		if ro.CompleteAt != nil {
			m.gauge("rollprobe_rollout_complete_seconds", "from the rollout's start until it was complete", ro.CompleteAt.Sub(*ro.TriggeredAt).Seconds())
		}
	}
	pass := 0.0
	if r.Verdict.Pass {
		pass = 1
	}
	m.gauge("rollprobe_pass", "1 when the run passed its gate", pass)
	m.gauge("rollprobe_exit_code", "the run's exit code", float64(r.Verdict.ExitCode))
	if m.err == nil {
		_, m.err = io.WriteString(w, "# EOF\n")
	}
	return m.err
}

// omWriter writes families and samples, keeping the first error.
type omWriter struct {
	w   io.Writer
	err error
}

func (m *omWriter) printf(format string, args ...any) {
	if m.err == nil {
		_, m.err = fmt.Fprintf(m.w, format, args...)
	}
}

func (m *omWriter) family(name, typ, help string) {
	m.printf("# TYPE %s %s\n# HELP %s %s\n", name, typ, name, help)
}

func (m *omWriter) sample(name, labels string, v float64) {
	if labels != "" {
		labels = "{" + labels + "}"
	}
	m.printf("%s%s %s\n", name, labels, strconv.FormatFloat(v, 'g', -1, 64))
}

func (m *omWriter) gauge(name, help string, v float64) {
	m.family(name, "gauge", help)
	m.sample(name, "", v)
}

// labelValue escapes a label value as the exposition format requires:
// backslash, double quote and line feed.
func labelValue(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}
