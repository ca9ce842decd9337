package render

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"testing"

	"github.com/rollprobe/rollprobe/internal/fixture"
	"github.com/rollprobe/rollprobe/internal/testenv"
	"github.com/rollprobe/rollprobe/report"
)

// parseOpenMetrics parses text with the Prometheus project's own strict
// OpenMetrics parser (Debian's python3-prometheus-client, a referee nobody
// here wrote) and returns every sample as name{labels} -> value.
func parseOpenMetrics(t *testing.T, text []byte) map[string]float64 {
	t.Helper()
	const py = `
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join("%s=%s" % kv for kv in sorted(s.labels.items()))
        out[s.name + ("{" + labels + "}" if labels else "")] = s.value
print(json.dumps(out))
`
	if err := exec.Command("/usr/bin/python3", "-c", "import prometheus_client.openmetrics.parser").Run(); err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "the OpenMetrics referee needs Debian's python3-prometheus-client: %v", err)
	}
	cmd := exec.Command("/usr/bin/python3", "-c", py)
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("not OpenMetrics: %v\n%s\n--- input:\n%s", err, out, text)
	}
	samples := map[string]float64{}
	if err := json.Unmarshal(out, &samples); err != nil {
		t.Fatal(err)
	}
	return samples
}

func TestOpenMetrics(t *testing.T) {
	r := fixture.NaiveRun()
	var buf bytes.Buffer
	if err := OpenMetrics(&buf, r); err != nil {
		t.Fatal(err)
	}
	got := parseOpenMetrics(t, buf.Bytes())
	var outage float64
	for _, o := range r.Outages {
		outage += o.DurationS
	}
	want := map[string]float64{
		"rollprobe_requests_total{class=ok}":       float64(r.Totals.ByClass["ok"]),
		"rollprobe_requests_total{class=refused}":  float64(r.Totals.ByClass["refused"]),
		"rollprobe_failed_requests":                float64(r.Totals.Failed),
		"rollprobe_sent_requests":                  float64(r.Totals.Sent),
		"rollprobe_outages":                        float64(len(r.Outages)),
		"rollprobe_outage_seconds":                 outage,
		"rollprobe_latency_seconds{quantile=0.99}": r.LatencyMS.P99 / 1000,
		"rollprobe_latency_seconds_count":          float64(r.LatencyMS.Count),
		"rollprobe_old_pods_gone_seconds":          r.Rollout.OldPodsGoneAt.Sub(*r.Rollout.TriggeredAt).Seconds(),
		"rollprobe_pass":                           0,
		"rollprobe_exit_code":                      1,
	}
	for name, v := range want {
		g, ok := got[name]
		if !ok || math.Abs(g-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	if r.Totals.Failed == 0 || outage == 0 {
		t.Fatal("the fixture must have failures and an outage for this test to mean anything")
	}

	// A probe without a rollout and with nothing succeeding has no rollout
	// times and no latency: left out, not 0.
	p := &report.Report{Command: "probe", Totals: report.Totals{Sent: 10, Failed: 10, ByClass: map[string]uint64{"ok": 0, "reset": 10}},
		Verdict: report.Verdict{ExitCode: 1}}
	buf.Reset()
	if err := OpenMetrics(&buf, p); err != nil {
		t.Fatal(err)
	}
	got = parseOpenMetrics(t, buf.Bytes())
	// Its failures have no outages (a report from before probes had
	// them): their count is unknown, not 0.
	for _, absent := range []string{"rollprobe_old_pods_gone_seconds", "rollprobe_latency_seconds_count", "rollprobe_rollout_complete_seconds",
		"rollprobe_outages", "rollprobe_outage_seconds"} {
		if _, ok := got[absent]; ok {
			t.Errorf("%s present for a probe with no latency, no rollout and no outages known", absent)
		}
	}
	if got["rollprobe_requests_total{class=reset}"] != 10 {
		t.Errorf("samples %v", got)
	}
}

// A run of several paths has each path's counts and verdict, labelled by
// path, beside the run's.
func TestOpenMetricsPaths(t *testing.T) {
	path := func(name string, ok, refused uint64, pass bool) report.PathReport {
		return report.PathReport{Name: name, Totals: report.Totals{Sent: ok + refused, OK: ok, Failed: refused,
			ByClass: map[string]uint64{"ok": ok, "refused": refused}}, Verdict: report.Verdict{Pass: pass}}
	}
	r := &report.Report{Command: "probe", Totals: report.Totals{Sent: 30, OK: 25, Failed: 5, ByClass: map[string]uint64{"ok": 25, "refused": 5}},
		Paths: []report.PathReport{path("svc", 10, 0, true), path("edge.lab", 15, 5, false), path(`a"b`, 0, 0, false)}, Verdict: report.Verdict{ExitCode: 1}}
	var buf bytes.Buffer
	if err := OpenMetrics(&buf, r); err != nil {
		t.Fatal(err)
	}
	got := parseOpenMetrics(t, buf.Bytes())
	for name, v := range map[string]float64{
		"rollprobe_path_requests_total{class=refused,path=edge.lab}": 5,
		"rollprobe_path_requests_total{class=ok,path=svc}":           10,
		"rollprobe_path_failed_requests{path=edge.lab}":              5,
		"rollprobe_path_failed_requests{path=svc}":                   0,
		"rollprobe_path_pass{path=svc}":                              1,
		"rollprobe_path_pass{path=edge.lab}":                         0,
		"rollprobe_failed_requests":                                  5,
		// A bare URL's path is named after its host, which Go's URL
		// parser lets hold a quote: escaped, the output stays valid.
		`rollprobe_path_pass{path=a"b}`: 0,
	} {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
}
