package render

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/fixture"
	"github.com/rollprobe/rollprobe/internal/golden"
	"github.com/rollprobe/rollprobe/report"
)

// The text summary of a run: rollout, outages, per-pod table, findings
// (the doctor's marked as static).
func TestRunText(t *testing.T) {
	var buf bytes.Buffer
	if err := Text(&buf, fixture.NaiveRun()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "naive.txt", buf.Bytes())
}

func TestRunMarkdown(t *testing.T) {
	var md bytes.Buffer
	if err := Markdown(&md, fixture.NaiveRun()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "naive.summary.md", md.Bytes())
}

// eof and eof_reused are split by server close in both summaries.
func TestEOFSplit(t *testing.T) {
	r := fixture.NaiveRun()
	r.Totals.EOFBeforeRequest, r.Totals.EOFAfterRequest = 3, 2
	out := summaries(t, r)
	want := "3 before the request reached the server (the keep-alive race: nothing processed), 2 after the server had it (cut in flight)"
	if !strings.Contains(out["text"], "closes    "+want) || !strings.Contains(out["markdown"], want) {
		t.Fatalf("the split is missing:\n%s\n%s", out["text"], out["markdown"])
	}
}

// More than podsOpenUpTo pods: the table is collapsed.
func TestMarkdownCollapsesALongPodTable(t *testing.T) {
	r := fixture.NaiveRun()
	for len(r.Pods) <= podsOpenUpTo {
		r.Pods = append(r.Pods, r.Pods[0])
	}
	var md bytes.Buffer
	if err := Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "<details><summary>11 pods</summary>") {
		t.Fatalf("%s", md.String())
	}
}

// Without a backend header nothing names the pod that answered: the pod
// tables say unknown, never 0.
func TestServedIsUnknownWithoutABackendHeader(t *testing.T) {
	r := fixture.NaiveRun()
	r.Config.BackendHeader = ""
	for i := range r.Pods {
		r.Pods[i].Served, r.Pods[i].ServedAfterDeletion = 0, 0
	}
	for name, out := range summaries(t, r) {
		for _, p := range r.Pods {
			var row string
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, p.Pod) && strings.Contains(line, " "+p.Revision+" ") {
					row = line
					break
				}
			}
			if !strings.Contains(row, "unknown") || strings.Contains(row, " 0 ") {
				t.Errorf("%s: pod %s's row %q: want served unknown", name, p.Pod, row)
			}
		}
	}
}

// A stall of the view is said in both summaries with when, how long and
// what it did to the attribution of the failures begun in it.
func TestViewStallIsSaid(t *testing.T) {
	r := fixture.NaiveRun()
	start := r.StartedAt.Add(12300 * time.Millisecond)
	r.ViewStalls = []report.ViewStall{{Start: start, End: start.Add(8100 * time.Millisecond), DurationS: 8.1, Failures: 5, Widened: 2}}
	for name, out := range summaries(t, r) {
		for _, want := range []string{"stalled at +12.30s for 8.1s", "5 failures began in it, 2 of them attributed from the timeline", "the other 3 named by conntrack"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	r.ViewStalls = nil
	if strings.Contains(summaries(t, r)["text"], "stalled") {
		t.Error("a run without a stall says one")
	}
}

// Without a backend header, the pods conntrack mapped responses to show
// that count (and say where it comes from, and how many responses no row
// holds); the part after deletion stays unknown (the HTML page:
// htmlreport's TestServedFromConntrack).
func TestServedFromConntrackWithoutABackendHeader(t *testing.T) {
	r := fixture.NaiveRun()
	r.Config.BackendHeader = ""
	r.Conntrack = &report.Conntrack{Watching: true, ResponsesUnmapped: 3}
	for i := range r.Pods {
		n := uint64(4100 + i)
		r.Pods[i].ServedConntrack = &n
	}
	for name, out := range summaries(t, r) {
		for i, p := range r.Pods {
			if want := fmt.Sprint(4100 + i); !strings.Contains(out, want) {
				t.Errorf("%s: pod %s's conntrack count %s is not shown", name, p.Pod, want)
			}
		}
		if !strings.Contains(out, "served from conntrack") {
			t.Errorf("%s: does not say the counts come from conntrack", name)
		}
		if !strings.Contains(out, "3 responses on connections conntrack did not map") {
			t.Errorf("%s: does not say how many responses no row holds", name)
		}
	}
}

// Without a backend header or conntrack's counts, the edge's access log's
// are shown, and said to be its.
func TestServedFromTheAccessLogWithoutABackendHeader(t *testing.T) {
	r := fixture.NaiveRun()
	r.Config.BackendHeader = ""
	r.EdgeLog = &report.EdgeLog{File: "traefik.log", Format: "traefik"}
	for i := range r.Pods {
		n := uint64(5200 + i)
		r.Pods[i].ServedAccessLog = &n
	}
	for name, out := range summaries(t, r) {
		for i, p := range r.Pods {
			if want := fmt.Sprint(5200 + i); !strings.Contains(out, want) {
				t.Errorf("%s: pod %s's access log count %s is not shown", name, p.Pod, want)
			}
		}
		if !strings.Contains(out, "served from the edge's access log") {
			t.Errorf("%s: does not say the counts come from the access log", name)
		}
	}
}

// Where the edge's log lists the attempts it retried elsewhere, the pods
// table has a column of them, every pod's count (0 included: the log was
// read) and a note saying what it counts; where it does not, no column:
// an unknown count is never shown as 0.
func TestEdgeRetriedColumn(t *testing.T) {
	r := fixture.NaiveRun()
	r.EdgeLog = &report.EdgeLog{File: "access.log", Format: "nginx"}
	for name, out := range summaries(t, r) {
		if strings.Contains(out, "edge retried") {
			t.Errorf("%s: an edge column without the log's attempts:\n%s", name, out)
		}
	}
	counts := []uint64{7, 0, 3}
	for i := range r.Pods {
		n := counts[i%len(counts)]
		r.Pods[i].EdgeFailedAttempts = &n
	}
	for name, out := range summaries(t, r) {
		if !strings.Contains(out, "edge retried: the attempts the edge's log lists as failed on the pod") {
			t.Errorf("%s: no note on the edge column:\n%s", name, out)
		}
		for i, p := range r.Pods {
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, p.Pod) && strings.Contains(l, fmt.Sprint(p.Served)) {
					line = l
				}
			}
			fields := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '|' })
			// pod, revision, served, after deletion, edge retried, ...
			if len(fields) < 5 || fields[4] != fmt.Sprint(counts[i%len(counts)]) {
				t.Errorf("%s: pod %s's row %q: want its %d attempts after the served counts", name, p.Pod, line, counts[i%len(counts)])
			}
		}
	}
}

// summaries renders r as the text and Markdown summaries, by name.
func summaries(t *testing.T, r *report.Report) map[string]string {
	t.Helper()
	var text, md bytes.Buffer
	if err := Text(&text, r); err != nil {
		t.Fatal(err)
	}
	if err := Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"text": text.String(), "markdown": md.String()}
}

// The text and Markdown summaries count the failed connections conntrack
// showed reached no pod among those it judged, and those whose SYN joined
// an earlier connection's entry, and say what that means; a run without
// any says nothing of it.
func TestNoEntryIsCounted(t *testing.T) {
	for _, face := range []string{"text", "markdown"} {
		t.Run(face, func(t *testing.T) {
			r := fixture.NaiveRun()
			r.Conntrack = &report.Conntrack{Watching: true, Connections: 900, FailuresMapped: 40, FailuresUnmapped: 2, FailuresNoEntry: 3}
			out := summaries(t, r)[face]
			for _, want := range []string{"40 of 45 failed connections found there", "3 failed connections reached no pod: conntrack has no entry for them"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s lacks %q:\n%s", face, want, out)
				}
			}
			if strings.Contains(out, "joined its conntrack entry") {
				t.Error("a run with no joined entry says some joined one")
			}
			if strings.Contains(out, "unanswered connections of an earlier run") {
				t.Error("a run with no stale entry counted says some were found")
			}
			stale := 3
			r.Conntrack.StaleEntries, r.Conntrack.StalePortsHeld = &stale, 2
			if out := summaries(t, r)[face]; !strings.Contains(out, "3 unanswered connections of an earlier run were still in conntrack: 2 of their source ports kept") {
				t.Errorf("%s does not count the stale entries:\n%s", face, out)
			}
			r.Conntrack.FailuresJoined = 2
			if out := summaries(t, r)[face]; !strings.Contains(out, "2 of those found went where an earlier unanswered connection from the same port went") {
				t.Errorf("%s does not count the failures that joined an earlier entry:\n%s", face, out)
			}
			if strings.Contains(out, "whose source port carried another connection") || strings.Contains(out, "most likely following the entry") {
				t.Error("a run with no ambiguous or followed failure says it had some")
			}
			if !strings.Contains(out, "2 failed connections not found there, their pods from other evidence (a backend header or the edge's log where one names it, else the timeline): 2 with no event in their window\n") {
				t.Errorf("%s does not say why 2 failures were not found (no lag known, nothing lost):\n%s", face, out)
			}
			lag := 1250.0
			r.Conntrack.FailuresUnmapped, r.Conntrack.FailuresAmbiguous, r.Conntrack.FailuresFollowed, r.Conntrack.EventLagMaxMS = 6, 2, 1, &lag
			for _, want := range []string{
				"6 failed connections not found there, their pods from other evidence (a backend header or the edge's log where one names it, else the timeline): ",
				"2 whose source port carried another connection, to another pod, within their window",
				"1 with no event of their own, most likely following the entry an earlier connection from their port left",
				"3 with no event in their window: the watch's reads were up to 1250 ms apart",
			} {
				if out := summaries(t, r)[face]; !strings.Contains(out, want) {
					t.Errorf("%s lacks %q:\n%s", face, want, out)
				}
			}
			r.Conntrack.FailuresUnmapped, r.Conntrack.FailuresAmbiguous, r.Conntrack.FailuresFollowed = 3, 2, 1
			if out := summaries(t, r)[face]; strings.Contains(out, "with no event in their window") {
				t.Errorf("every unmapped failure was ambiguous or followed, yet some are said to have had no event:\n%s", out)
			}
			// A conntrack that saw none of the run's connections: its own line
			// says why (a lab run said "3 with no event in their window" above it).
			r.Conntrack.Connections = 0
			if out := summaries(t, r)[face]; strings.Contains(out, "not found there") || !strings.Contains(out, "none of the run's connections passed this host's conntrack") {
				t.Errorf("a conntrack that saw no connection: want only its own line, not the unmapped one:\n%s", out)
			}
			r.Conntrack.Connections = 900
			r.Conntrack.FailuresUnmapped, r.Conntrack.FailuresAmbiguous, r.Conntrack.FailuresFollowed = 0, 0, 0
			if out := summaries(t, r)[face]; strings.Contains(out, "not found there") {
				t.Errorf("a run with every failure found says some were not:\n%s", out)
			}
			r.Conntrack.FailuresNoEntry = 0
			if strings.Contains(summaries(t, r)[face], "reached no pod") {
				t.Error("a run with none says some reached no pod")
			}
			if strings.Contains(out, "passed this host's conntrack") {
				t.Error("a run whose conntrack saw 900 connections says it saw none")
			}
			// Probed from a host that rewrites nothing (a node port from outside
			// the cluster): conntrack is read and sees none of the connections.
			r.Conntrack = &report.Conntrack{Watching: true, FailuresUnmapped: 1}
			if out := summaries(t, r)[face]; !strings.Contains(out, "none of the run's connections passed this host's conntrack") {
				t.Errorf("a watch that saw no connection does not say so:\n%s", out)
			}
		})
	}
}

// Probers of a run that probed several paths: each prober's line says the
// path it probed (each path has its own probers); a run of one target has
// no path column.
func TestProbersSayTheirPath(t *testing.T) {
	r := fixture.NaiveRun()
	r.Paths = []report.PathReport{{Name: "svc"}, {Name: "edge-tls"}}
	r.Probers = []report.ProberInfo{
		{Pod: "rollprobe-a-0-x", Node: "node-1", Path: "svc", ShareRPS: 50, Sent: 500, Status: report.ProberOK},
		{Pod: "rollprobe-a-1-y", Node: "node-2", Path: "edge-tls", ShareRPS: 50, Sent: 499, Status: report.ProberOK},
	}
	lines := func(out, pod string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, pod) && !strings.Contains(l, "failure") {
				return l
			}
		}
		return ""
	}
	for name, out := range summaries(t, r) {
		for _, p := range r.Probers {
			if l := lines(out, p.Pod); !strings.Contains(l, " "+p.Path+" ") {
				t.Errorf("%s: prober %s's line does not say its path %s: %q", name, p.Pod, p.Path, l)
			}
		}
	}
	one := *r
	one.Paths = nil
	for name, out := range summaries(t, &one) {
		if strings.Contains(out, "edge-tls") {
			t.Errorf("%s: a path column for a run of one target:\n%s", name, out)
		}
	}
}

// The text and Markdown summaries say how the failures were attributed;
// a run with nothing attributed says nothing of it.
func TestAttributionIsSaid(t *testing.T) {
	r := fixture.NaiveRun()
	r.Attribution = &report.Attribution{Certain: 3, Ambiguous: 2, Unattributed: 1, ReceiveToleranceMS: 250, ToleranceSource: "the watch's measured lag"}
	want := "3 to one pod for certain, 2 among several candidates, 1 to none (a pod's change counts from 250ms before rollprobe received it: the watch's measured lag)"
	for face, out := range summaries(t, r) {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", face, want, out)
		}
	}
	r.Attribution = &report.Attribution{}
	for face, out := range summaries(t, r) {
		if strings.Contains(out, "to one pod for certain") {
			t.Errorf("%s attributes failures of a run with none:\n%s", face, out)
		}
	}
}

// Every face says who refused the run's refused connections, as their
// sockets showed: a reject rule's ICMP error (with its senders) or a
// reset, and how many could not say; a run whose sockets said nothing
// says nothing of it.
func TestRefusalsAreCountedByWhoRefused(t *testing.T) {
	r := fixture.NaiveRun()
	r.Failures = nil
	for i, by := range []string{report.RefusedByICMP, report.RefusedByICMP, report.RefusedByICMP, report.RefusedByRST, ""} {
		f := report.Failure{Seq: uint64(i), Class: report.ClassRefused, Phase: "dial", Fresh: true, RefusedBy: by,
			Start: r.StartedAt.Add(time.Second), End: r.StartedAt.Add(time.Second), Intended: r.StartedAt.Add(time.Second)}
		if by == report.RefusedByICMP {
			f.ICMP = &report.ICMPError{From: []string{"10.244.2.1", "10.244.1.1", "10.244.2.1"}[i], Type: 3, Code: 3, Name: "port unreachable"}
		}
		r.Failures = append(r.Failures, f)
	}
	r.Failures = append(r.Failures, report.Failure{Seq: 9, Class: report.ClassReset, Phase: "read_headers"})
	want := "3 of 5 refused connections by a reject rule's ICMP error (from 10.244.1.1, 10.244.2.1: no pod's TCP stack), 1 by a TCP reset (a stack with nothing listening); 1 not known (their sockets could not say)"
	for face, out := range summaries(t, r) {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", face, want, out)
		}
	}
	for i := range r.Failures {
		r.Failures[i].RefusedBy, r.Failures[i].ICMP = "", nil
	}
	for face, out := range summaries(t, r) {
		if strings.Contains(out, "refused connections by") {
			t.Errorf("%s speaks of who refused, which no socket said:\n%s", face, out)
		}
	}
}

// An outage's pods: the most hit first, certainty said in words, the rest
// counted, and the failures on no pod named.
func TestOutagePods(t *testing.T) {
	o := report.Outage{Count: 10, Pods: []report.OutagePod{
		{Pod: "a", Failures: 4, Certain: 4}, {Pod: "b", Failures: 3, Certain: 1}, {Pod: "c", Failures: 2}, {Pod: "d", Failures: 1, Certain: 1}}}
	r := &report.Report{}
	if got, want := OutagePods(r, o, 3), "a 4 (certain), b 3 (1 certain), c 2 (none certain) and 1 more pods"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	o.Count = 12
	if got, want := OutagePods(r, o, 5), "a 4 (certain), b 3 (1 certain), c 2 (none certain), d 1 (certain); 2 on no pod named"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	r.FailureInfo = report.FailureInfo{Total: 20, Kept: 10, Limit: 10}
	if got, want := OutagePods(r, o, 5), "a 4 (certain), b 3 (1 certain), c 2 (none certain), d 1 (certain); 2 not kept in full or on no pod named"; got != want {
		t.Errorf("failures not all kept: got %q, want %q", got, want)
	}
	if got := OutagePods(r, report.Outage{Count: 3}, 3); got != "" {
		t.Errorf("no pods: got %q, want nothing", got)
	}
}

// The Markdown outage table has its pods column only when an outage names
// pods: an empty column would read as "none".
func TestMarkdownOutagePodsColumnOnlyWithPods(t *testing.T) {
	r := fixture.NaiveRun()
	r.Outages[0].Pods = nil
	var md bytes.Buffer
	if err := Markdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| outage | duration | failed | context |\n") || strings.Contains(md.String(), "on pods") {
		t.Errorf("outage table:\n%s", md.String())
	}
}
