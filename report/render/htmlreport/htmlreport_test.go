package htmlreport

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/rollprobe/rollprobe/internal/fixture"
	"github.com/rollprobe/rollprobe/report"
)

// lab reads a report the lab's demo wrote (testdata/naive.json: three
// outages, three old pods deleted and three new ones; graceful.json:
// nothing dropped).
func lab(t *testing.T, name string) *report.Report {
	t.Helper()
	r, err := report.ReadFile("testdata/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// probeOnly is a probe report: the naive run without its rollout sections.
func probeOnly(t *testing.T) *report.Report {
	r := lab(t, "naive")
	r.Command, r.Rollout, r.Attribution, r.Timeline, r.Pods, r.Findings = "probe", nil, nil, nil, nil, nil
	for i := range r.Failures {
		r.Failures[i].LikelyPod, r.Failures[i].Candidates, r.Failures[i].Context, r.Failures[i].Confidence = "", nil, "", 0
	}
	return r
}

// older is a report as an older rollprobe wrote it: no service-time
// series, no attribution section, no addresses on failures.
func older(t *testing.T) *report.Report {
	r := lab(t, "naive")
	r.Attribution = nil
	for i := range r.Series {
		r.Series[i].ServiceP50MS, r.Series[i].ServiceP99MS = 0, 0
	}
	for i := range r.Failures {
		r.Failures[i].LocalAddr, r.Failures[i].RemoteAddr = "", ""
	}
	return r
}

func render(t *testing.T, r *report.Report) (string, *html.Node) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, r); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return buf.String(), doc
}

// walk calls fn on every element.
func walk(n *html.Node, fn func(*html.Node)) {
	if n.Type == html.ElementNode {
		fn(n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, fn)
	}
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// find returns every element with the tag (any if "") whose attribute key
// has the value (any value if val is "").
func find(doc *html.Node, tag, key, val string) []*html.Node {
	var out []*html.Node
	walk(doc, func(n *html.Node) {
		if tag != "" && n.Data != tag {
			return
		}
		if v, ok := attr(n, key); ok && (val == "" || v == val) {
			out = append(out, n)
		}
	})
	return out
}

func text(n *html.Node) string {
	var b strings.Builder
	var rec func(*html.Node)
	rec = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c)
		}
	}
	rec(n)
	return b.String()
}

func offset(r *report.Report, at time.Time) float64 { return at.Sub(r.StartedAt).Seconds() }

// near compares a coordinate the page printed with an offset.
func near(t *testing.T, printed string, want float64) bool {
	t.Helper()
	v, err := strconv.ParseFloat(printed, 64)
	if err != nil {
		t.Fatalf("coordinate %q: %v", printed, err)
	}
	return math.Abs(v-want) < 0.002
}

var allReports = []struct {
	name string
	get  func(t *testing.T) *report.Report
}{
	{"naive (lab)", func(t *testing.T) *report.Report { return lab(t, "naive") }},
	{"graceful (lab, no failure)", func(t *testing.T) *report.Report { return lab(t, "graceful") }},
	{"naive from two probers (lab)", func(t *testing.T) *report.Report { return lab(t, "naive-probers") }},
	{"fixture", func(*testing.T) *report.Report { return fixture.NaiveRun() }},
	{"probe (no rollout)", probeOnly},
	{"older report", older},
}

// The page loads nothing: no element names a resource, no style imports
// or points anywhere but inside the page, the script asks for nothing.
func TestLoadsNothing(t *testing.T) {
	for _, tc := range allReports {
		t.Run(tc.name, func(t *testing.T) {
			page, doc := render(t, tc.get(t))
			walk(doc, func(n *html.Node) {
				switch n.Data {
				case "link", "img", "iframe", "object", "embed", "video", "audio", "source", "image", "use", "base", "form":
					t.Errorf("<%s> element: could load something", n.Data)
				}
				for _, a := range n.Attr {
					switch strings.ToLower(a.Key) {
					case "src", "srcset", "action", "poster", "data", "xlink:href", "background":
						t.Errorf("<%s %s=%q>: a resource attribute", n.Data, a.Key, a.Val)
					case "href":
						// In-page anchors, and a finding's documentation: a
						// link the reader may follow loads nothing by itself.
						if !strings.HasPrefix(a.Val, "#") && !(n.Data == "a" && strings.HasPrefix(a.Val, report.DocsURL+"findings/")) {
							t.Errorf("<%s href=%q>: a link out of the page", n.Data, a.Val)
						}
					case "style":
						if strings.Contains(a.Val, "url(") {
							t.Errorf("<%s style=%q>: url()", n.Data, a.Val)
						}
					}
				}
				if n.Data == "style" || n.Data == "script" {
					body := text(n)
					for _, bad := range []string{"@import", "url(", "http:", "https:", "//cdn", "fetch(", "XMLHttpRequest", "import(", "WebSocket", "sendBeacon"} {
						if strings.Contains(body, bad) {
							t.Errorf("<%s> contains %q", n.Data, bad)
						}
					}
				}
			})
			scripts := 0
			walk(doc, func(n *html.Node) {
				if n.Data == "script" {
					scripts++
				}
			})
			if scripts != 1 || !strings.Contains(page, `id="timeline"`) {
				t.Errorf("%d scripts (want the one inline), timeline drawn: %v", scripts, strings.Contains(page, `id="timeline"`))
			}
		})
	}
}

// Every pod of the report has a lane and a row; a deleted pod's lane marks
// the deletion where the report has it; a SIGKILLed one is marked so.
func TestEveryPodHasALane(t *testing.T) {
	for _, tc := range allReports {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.get(t)
			_, doc := render(t, r)
			pods := map[string]bool{}
			for _, p := range r.Pods {
				pods[p.Pod] = true
			}
			for _, e := range r.Timeline {
				if e.Pod != "" && e.Kind != report.KubeEvent {
					pods[e.Pod] = true
				}
			}
			lanes := find(doc, "g", "data-pod", "")
			if len(lanes) != len(pods) {
				t.Errorf("%d lanes for %d pods", len(lanes), len(pods))
			}
			for pod := range pods {
				l := find(doc, "g", "data-pod", pod)
				if len(l) != 1 {
					t.Errorf("pod %s: %d lanes", pod, len(l))
					continue
				}
				if len(find(doc, "text", "data-pod", pod)) != 1 {
					t.Errorf("pod %s: no name beside its lane", pod)
				}
			}
			for _, p := range r.Pods {
				if len(find(doc, "tr", "data-pod", p.Pod)) != 1 {
					t.Errorf("pod %s: no row in the pods table", p.Pod)
				}
				lane := find(doc, "g", "data-pod", p.Pod)
				if p.DeletedAt == nil || len(lane) != 1 || r.Timeline == nil {
					continue
				}
				marks := find(lane[0], "line", "class", "mark-deletion")
				if len(marks) != 1 {
					t.Errorf("pod %s: %d deletion marks, want 1", p.Pod, len(marks))
					continue
				}
				x, _ := attr(marks[0], "x1")
				if !near(t, x, offset(r, *p.DeletedAt)) {
					t.Errorf("pod %s: deletion marked at %s, the report says %+.3fs", p.Pod, x, offset(r, *p.DeletedAt))
				}
			}
		})
	}
}

// A pod's lane follows its events: ready, then terminating from the
// deletion request, exited from the container's end, gone with the pod;
// its endpoint ready, then terminating but serving, then not serving,
// then removed. A SIGKILL is marked as one; each exit's mark names its
// container, a native sidecar as one.
func TestLaneFollowsTheLifecycle(t *testing.T) {
	t0 := fixture.T0
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	killed, zero := int32(137), int32(0)
	r := &report.Report{StartedAt: t0, DurationS: 20, Command: "run",
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "web-1", Ready: true},
			{At: at(0), Kind: report.EndpointAdded, Pod: "web-1", Ready: true, Serving: true},
			{At: at(5), Kind: report.PodDeletionRequested, Pod: "web-1"},
			{At: at(5.1), Kind: report.EndpointTerminating, Pod: "web-1", Serving: true, Terminating: true},
			{At: at(8), Kind: report.EndpointNotServing, Pod: "web-1", Terminating: true},
			{At: at(9), Kind: report.ContainerTerminated, Pod: "web-1", Container: "app", ExitCode: &killed},
			{At: at(9.2), Kind: report.EndpointRemoved, Pod: "web-1"},
			{At: at(9.5), Kind: report.ContainerTerminated, Pod: "web-1", Container: "proxy", Sidecar: true, ExitCode: &zero},
			{At: at(10), Kind: report.PodGone, Pod: "web-1"},
			{At: at(4), Kind: report.PodCreated, Pod: "web-2"},
			{At: at(6), Kind: report.PodReady, Pod: "web-2"},
		}}
	m := newModel(r)
	var l1, l2 *lane
	for _, g := range m.Groups {
		for _, l := range g.Lanes {
			switch l.Pod {
			case "web-1":
				l1 = l
			case "web-2":
				l2 = l
			}
		}
	}
	if l1 == nil || l2 == nil {
		t.Fatalf("lanes: %+v", m.Groups)
	}
	want1 := []segment{{0, 5, podReady}, {5, 9, podTerminating}, {9, 10, podExited}}
	if !slices.Equal(l1.Life, want1) {
		t.Errorf("web-1 life %v, want %v", l1.Life, want1)
	}
	wantEP := []segment{{0, 5.1, epReady}, {5.1, 8, epServingTerm}, {8, 9.2, epTerminatingOut}}
	if !slices.Equal(l1.Endpoint, wantEP) {
		t.Errorf("web-1 endpoint %v, want %v", l1.Endpoint, wantEP)
	}
	kinds, titles := []string{}, []string{}
	for _, mk := range l1.Markers {
		kinds = append(kinds, fmt.Sprintf("%s@%g", mk.Kind, mk.T))
		titles = append(titles, mk.Title)
	}
	if !slices.Equal(kinds, []string{"deletion@5", "sigkill@9", "exit@9.5"}) {
		t.Errorf("web-1 markers %v", kinds)
	}
	if want := []string{"web-1: container app exited with code 137 at +9.00s", "web-1: sidecar proxy exited with code 0 at +9.50s"}; len(titles) != 3 || !slices.Equal(titles[1:], want) {
		t.Errorf("web-1 marker titles %q, want the exits' %q", titles, want)
	}
	want2 := []segment{{4, 6, podStarting}, {6, 20, podReady}}
	if !slices.Equal(l2.Life, want2) {
		t.Errorf("web-2 life %v, want %v (ready to the end of the axis)", l2.Life, want2)
	}
	_, doc := render(t, r)
	if len(find(doc, "line", "class", "mark-sigkill")) != 1 {
		t.Errorf("no SIGKILL mark on the page")
	}
}

// Every outage is a band at its place, a row, and a link to the finding
// that explains it; every finding is on the page with its evidence and fix.
func TestOutagesAndFindings(t *testing.T) {
	for _, tc := range allReports {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.get(t)
			_, doc := render(t, r)
			for i, o := range r.Outages {
				id := fmt.Sprintf("outage-%d", i+1)
				bands := find(doc, "rect", "id", id)
				if len(bands) != 1 {
					t.Errorf("%s: %d bands", id, len(bands))
					continue
				}
				from, _ := attr(bands[0], "data-from")
				to, _ := attr(bands[0], "data-to")
				if !near(t, from, offset(r, o.Start)) || !near(t, to, offset(r, o.End)) {
					t.Errorf("%s: band %s..%s, the report says %+.3f..%+.3f", id, from, to, offset(r, o.Start), offset(r, o.End))
				}
				if !strings.Contains(text(bands[0]), fmt.Sprintf("%d failed", o.Count)) {
					t.Errorf("%s: band title %q lacks its count", id, text(bands[0]))
				}
				if len(find(doc, "tr", "data-outage", strconv.Itoa(i+1))) != 1 {
					t.Errorf("%s: no row in the outages table", id)
				}
			}
			for _, p := range r.Probers {
				if len(find(doc, "tr", "data-prober", p.Pod)) != 1 {
					t.Errorf("prober %s: no row", p.Pod)
				}
			}
			for _, f := range r.Findings {
				sec := find(doc, "section", "id", "finding-"+f.ID)
				if len(sec) != 1 {
					t.Errorf("finding %s: %d sections", f.ID, len(sec))
					continue
				}
				body := text(sec[0])
				for _, want := range append([]string{f.Title, f.Fix}, f.Evidence...) {
					if !strings.Contains(body, want) {
						t.Errorf("finding %s lacks %q", f.ID, want)
					}
				}
			}
		})
	}
	// In the naive run every outage is explained by the traffic finding,
	// and the band's label links to it.
	r := lab(t, "naive")
	_, doc := render(t, r)
	for i := range r.Outages {
		labels := find(doc, "g", "data-outage", strconv.Itoa(i+1))
		if len(labels) != 1 {
			t.Fatalf("outage %d: %d labels", i+1, len(labels))
		}
		if want := fmt.Sprintf("#%d: %d failed %s", i+1, r.Outages[i].Count, classList(r.Outages[i].ByClass)); !strings.Contains(text(labels[0]), want) {
			t.Errorf("outage %d's label %q, want it to start %q", i+1, text(labels[0]), want)
		}
		links := find(labels[0], "a", "href", "#finding-stops-accepting-before-endpoints-propagate")
		if len(links) != 1 {
			t.Errorf("outage %d's label does not link to the finding that explains it", i+1)
		}
	}
}

// Every second with a failure has a mark in the failure strip, and the
// failures table has a row per kept failure with its class.
func TestEveryFailureSecondIsMarked(t *testing.T) {
	r := lab(t, "naive")
	_, doc := render(t, r)
	marks := map[string]bool{}
	for _, l := range find(doc, "line", "class", "failmark") {
		x, _ := attr(l, "x1")
		marks[x] = true
	}
	n := 0
	for _, row := range r.Series {
		if row.Failed == 0 {
			continue
		}
		n++
		if !marks[num(float64(row.T)+0.5)] {
			t.Errorf("second %d (%d failed) has no mark", row.T, row.Failed)
		}
	}
	if n == 0 || len(marks) != n {
		t.Errorf("%d marks for %d seconds with failures", len(marks), n)
	}
	rows := find(doc, "tr", "data-class", "")
	if len(rows) != len(r.Failures) {
		t.Errorf("%d failure rows, the report kept %d", len(rows), len(r.Failures))
	}
	for i, row := range rows {
		if c, _ := attr(row, "data-class"); c != r.Failures[i].Class {
			t.Errorf("row %d: class %s, want %s", i, c, r.Failures[i].Class)
		}
	}
}

// An hour with 20 pods fits in 2 MB, and so does a three-hour run folded
// into buckets; in both, every second with a failure is still marked.
func TestLongRunsStaySmallAndShowEveryFailure(t *testing.T) {
	for _, hours := range []int{1, 3} {
		t.Run(fmt.Sprintf("%dh", hours), func(t *testing.T) {
			r := longRun(hours*3600, 20)
			page, doc := render(t, r)
			if len(page) > 2<<20 {
				t.Errorf("%d bytes, over 2 MB", len(page))
			}
			t.Logf("%d bytes", len(page))
			per := (len(r.Series) + maxBars - 1) / maxBars
			marks := map[string]bool{}
			for _, l := range find(doc, "line", "class", "failmark") {
				x, _ := attr(l, "x1")
				marks[x] = true
			}
			for _, row := range r.Series {
				if row.Failed == 0 {
					continue
				}
				start := row.T / int64(per) * int64(per)
				if !marks[num(float64(start)+float64(per)/2)] {
					t.Fatalf("second %d with %d failures: its bucket (from %d) is not marked", row.T, row.Failed, start)
				}
			}
			if lanes := find(doc, "g", "data-pod", ""); len(lanes) != 20 {
				t.Errorf("%d lanes, want 20", len(lanes))
			}
		})
	}
}

// longRun is a synthetic run of the given seconds at 1,000 req/s with pods
// replaced in waves and a failure every 97 s (a lone failure among 97,000
// successes: what folding must not hide).
func longRun(seconds, pods int) *report.Report {
	t0 := fixture.T0
	r := &report.Report{Schema: report.Schema, Command: "run", Target: "http://svc/", StartedAt: t0,
		DurationS: float64(seconds), EndedAt: t0.Add(time.Duration(seconds) * time.Second),
		Totals:  report.Totals{ByClass: map[string]uint64{}},
		Rollout: &report.Rollout{Namespace: "ns", Deployment: "web", OldRevision: "old", NewRevision: "new"}}
	for s := range seconds {
		row := report.SeriesRow{T: int64(s), Sent: 1000, OK: 1000, P50MS: 1.5 + float64(s%7), P99MS: 9 + float64(s%13),
			ServiceP50MS: 1.2, ServiceP99MS: 8}
		if s%97 == 50 {
			row.OK, row.Failed, row.ByClass = 999, 1, map[string]uint64{report.ClassRefused: 1}
			at := t0.Add(time.Duration(s)*time.Second + 300*time.Millisecond)
			r.Failures = append(r.Failures, report.Failure{Class: report.ClassRefused, Phase: "dial", Intended: at, Start: at, End: at,
				Error: "connect: connection refused", Fresh: true})
			r.Totals.ByClass[report.ClassRefused]++
		}
		r.Series = append(r.Series, row)
	}
	for i := range pods {
		rev := "old"
		if i >= pods/2 {
			rev = "new"
		}
		pod := fmt.Sprintf("web-%s-%02d", rev, i)
		at := t0.Add(time.Duration(i*seconds/pods) * time.Second)
		r.Pods = append(r.Pods, report.PodTraffic{Pod: pod, Revision: rev})
		r.Timeline = append(r.Timeline,
			report.Event{At: at, Kind: report.PodCreated, Pod: pod, Revision: rev},
			report.Event{At: at.Add(2 * time.Second), Kind: report.PodReady, Pod: pod, Revision: rev},
			report.Event{At: at.Add(2 * time.Second), Kind: report.EndpointReady, Pod: pod, Ready: true, Serving: true},
			report.Event{At: at.Add(600 * time.Second), Kind: report.PodDeletionRequested, Pod: pod},
			report.Event{At: at.Add(605 * time.Second), Kind: report.PodGone, Pod: pod})
	}
	return r
}

// A node gap (externalTrafficPolicy: Local, a NodePort target) is drawn
// across the lanes of the pods on that node, and only theirs, with a
// legend entry; a run without one draws none.
func TestNodeGapOnThePodLanes(t *testing.T) {
	t0 := fixture.T0
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := &report.Report{StartedAt: t0, DurationS: 20, Command: "run",
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "web-1", Ready: true, Node: "n1"},
			{At: at(0), Kind: report.PodPresent, Pod: "web-2", Ready: true, Node: "n2"},
			{At: at(6), Kind: report.PodCreated, Pod: "web-3", Node: "n1"},
		},
		NodeGaps: []report.NodeGap{{Node: "n1", Start: at(5), End: at(9), Failed: 42}}}
	_, doc := render(t, r)
	gaps := find(doc, "rect", "class", "node-gap")
	if len(gaps) != 2 {
		t.Fatalf("%d node-gap rects, want one on each of n1's two lanes", len(gaps))
	}
	for _, g := range gaps {
		if node, _ := attr(g, "data-node"); node != "n1" || !strings.Contains(text(g), "node n1 had no serving endpoint") || !strings.Contains(text(g), "42 failed") {
			t.Errorf("gap rect %s %q", node, text(g))
		}
	}
	page, _ := render(t, r)
	if !strings.Contains(page, "the pod's node had no serving endpoint") {
		t.Error("no legend entry for node gaps")
	}
	if page, _ := render(t, lab(t, "naive")); strings.Contains(page, "node-gap\"") || strings.Contains(page, "had no serving endpoint") {
		t.Error("a run without node gaps draws one")
	}
}

// A run of several paths has a row per path with its own counts and
// verdict, and each failure names its path.
func TestPathsTable(t *testing.T) {
	r := lab(t, "naive")
	svc := report.PathReport{Name: "svc", Target: "http://naive.default.svc/", Totals: report.Totals{Sent: 100, OK: 100, ByClass: map[string]uint64{"ok": 100}},
		Verdict: report.Verdict{Pass: true}, Outages: []report.Outage{}}
	edge := report.PathReport{Name: "edge", Target: "https://naive.lab.example/", Totals: r.Totals, Outages: r.Outages,
		Verdict: report.Verdict{ExitCode: 1, Reasons: []string{"edge: 134 of 2450 requests failed, above the budget of 0"}}}
	r.Paths = []report.PathReport{svc, edge}
	for i := range r.Failures {
		r.Failures[i].Path = "edge"
	}
	_, doc := render(t, r)
	for _, p := range r.Paths {
		rows := find(doc, "tr", "data-path", p.Name)
		if len(rows) != 1 {
			t.Fatalf("path %s: %d rows", p.Name, len(rows))
		}
		row := text(rows[0])
		if !strings.Contains(row, p.Target) || !strings.Contains(row, fmt.Sprint(p.Totals.Sent)) {
			t.Errorf("path %s's row %q lacks its target or its count", p.Name, row)
		}
	}
	if row := text(find(doc, "tr", "data-path", "edge")[0]); !strings.Contains(row, "fail") || !strings.Contains(row, "above the budget") {
		t.Errorf("the failing path's row does not say why: %q", row)
	}
	failures := find(doc, "tr", "data-class", "")
	if len(failures) == 0 || !strings.Contains(text(failures[0]), "edge") {
		t.Errorf("the failures do not name their path")
	}
}

// With several paths each gets its own failure strip on the timeline: a
// mark for every second that path failed in, none for a path that did not.
func TestPathStrips(t *testing.T) {
	r := lab(t, "naive")
	var clean []report.SeriesRow
	for _, row := range r.Series {
		clean = append(clean, report.SeriesRow{T: row.T, Sent: row.Sent, OK: row.Sent})
	}
	r.Paths = []report.PathReport{{Name: "svc", Series: clean, Outages: []report.Outage{}}, {Name: "edge", Series: r.Series, Outages: r.Outages}}
	page, doc := render(t, r)
	for _, name := range []string{"svc", "edge"} {
		if !strings.Contains(page, ">path "+name+"</text>") {
			t.Errorf("no strip titled path %s", name)
		}
	}
	if marks := find(doc, "line", "data-path", "svc"); len(marks) != 0 {
		t.Errorf("%d failure marks on the path that failed nothing", len(marks))
	}
	marks := map[string]bool{}
	for _, l := range find(doc, "line", "data-path", "edge") {
		x, _ := attr(l, "x1")
		marks[x] = true
	}
	n := 0
	for _, row := range r.Series {
		if row.Failed > 0 {
			n++
			if !marks[num(float64(row.T)+0.5)] {
				t.Errorf("edge: second %d (%d failed) has no mark", row.T, row.Failed)
			}
		}
	}
	if n == 0 || len(marks) != n {
		t.Errorf("edge: %d marks for %d seconds with failures", len(marks), n)
	}
}

// A stall of the view is drawn over the timeline with its sentence as the
// title, said under the summary, and has a legend entry; a run without
// one draws none.
func TestViewStallIsDrawn(t *testing.T) {
	r := lab(t, "naive")
	start := r.StartedAt.Add(4 * time.Second)
	r.ViewStalls = []report.ViewStall{{Start: start, End: start.Add(8 * time.Second), DurationS: 8, Failures: 3, Widened: 3}}
	page, doc := render(t, r)
	rects := find(doc, "rect", "class", "stall")
	if len(rects) != 1 || !strings.Contains(text(rects[0]), "stalled at +4.00s for 8.0s") {
		t.Fatalf("%d stall rects: %v", len(rects), rects)
	}
	if x, _ := attr(rects[0], "x"); x != "4" {
		t.Errorf("stall drawn from x=%s, want 4 (seconds)", x)
	}
	for _, want := range []string{`class="stall-note"`, "3 failures began in it", "the view of the cluster stalled (no API answer)"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if page, _ := render(t, lab(t, "naive")); strings.Contains(page, `class="stall"`) || strings.Contains(page, "stall-note\"") {
		t.Error("a run without a stall draws one")
	}
}

// The object a workloadRef names is said by the trigger, once.
func TestTemplateFromIsShown(t *testing.T) {
	r := lab(t, "naive")
	r.Rollout.TemplateFrom = "deployment web-template"
	page, _ := render(t, r)
	if n := strings.Count(page, "on its template, deployment web-template (workloadRef)"); n != 1 {
		t.Errorf("the template's object said %d times, want once", n)
	}
	if page, _ := render(t, lab(t, "naive")); strings.Contains(page, "workloadRef") {
		t.Error("a Deployment's run names a workloadRef")
	}
}

// The edge's access log is said once, and where it sent a failure and how
// long it had it beside that failure's connection.
func TestEdgeLogIsShown(t *testing.T) {
	r := lab(t, "naive")
	r.EdgeLog = &report.EdgeLog{File: "traefik.log", Format: "traefik", Requests: 100, FailuresFound: 1}
	r.Failures[0].UpstreamAddr, r.Failures[0].EdgeDurationMS = "10.244.1.5:8080", 133478.1
	page, doc := render(t, r)
	if notes := find(doc, "p", "class", "muted edge-log"); len(notes) != 1 || !strings.Contains(text(notes[0]), "1 failed requests found there") {
		t.Errorf("edge log notes %v", notes)
	}
	if !strings.Contains(page, "⇒ 10.244.1.5:8080") {
		t.Error("the failure's upstream address is not shown")
	}
	if !strings.Contains(page, "edge held 133s") {
		t.Error("how long the edge had the failure is not shown")
	}
	if page, _ := render(t, lab(t, "naive")); strings.Contains(page, "edge-log") {
		t.Error("a run without an edge log shows one")
	}
}

// What the conntrack watch saw is said once: its summary, then each fact
// (here: failures it found on no pod, and those not found and why).
func TestConntrackIsShown(t *testing.T) {
	r := lab(t, "naive")
	r.Conntrack = &report.Conntrack{Watching: true, Connections: 900, FailuresMapped: 40, FailuresUnmapped: 2, FailuresNoEntry: 3}
	_, doc := render(t, r)
	notes := find(doc, "div", "class", "muted conntrack")
	if len(notes) != 1 {
		t.Fatalf("%d conntrack notes, want 1", len(notes))
	}
	got := text(notes[0])
	for _, want := range []string{"Conntrack: 900 connections seen; 40 of 45 failed connections found there",
		"3 failed connections reached no pod", "2 failed connections not found there"} {
		if !strings.Contains(got, want) {
			t.Errorf("the conntrack note lacks %q: %s", want, got)
		}
	}
	items := 0
	walk(notes[0], func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "li" {
			items++
		}
	})
	if items != 2 {
		t.Errorf("%d facts listed, want 2: %s", items, got)
	}
	r.Conntrack = &report.Conntrack{Reason: "not root"}
	if _, doc := render(t, r); len(find(doc, "div", "class", "muted conntrack")) != 1 || !strings.Contains(text(find(doc, "div", "class", "muted conntrack")[0]), "Conntrack: not read: not root") {
		t.Error("a conntrack not read is not said so")
	}
	if _, doc := render(t, lab(t, "naive")); len(find(doc, "div", "class", "muted conntrack")) != 0 {
		t.Error("a run without a conntrack watch shows one")
	}
}

// How the failures were attributed is said in the text's and Markdown's
// words; a run with nothing attributed says nothing of it.
func TestAttributionIsShown(t *testing.T) {
	r := lab(t, "naive")
	r.Attribution = &report.Attribution{Certain: 3, Ambiguous: 2, Unattributed: 1, ReceiveToleranceMS: 250, ToleranceSource: "the watch's measured lag"}
	_, doc := render(t, r)
	notes := find(doc, "p", "class", "muted attribution")
	if want := "Attributed: 3 to one pod for certain, 2 among several candidates, 1 to none (a pod's change counts from 250ms before rollprobe received it: the watch's measured lag)"; len(notes) != 1 || text(notes[0]) != want {
		t.Errorf("attribution notes %d, want 1 saying %q", len(notes), want)
	}
	r.Attribution = &report.Attribution{}
	if _, doc := render(t, r); len(find(doc, "p", "class", "muted attribution")) != 0 {
		t.Error("a run with nothing attributed shows an attribution line")
	}
}

// Who refused the refused connections is said in the text's words; a
// run whose sockets said nothing says nothing of it.
func TestRefusalsAreShown(t *testing.T) {
	r := lab(t, "naive")
	r.Failures = []report.Failure{
		{Class: report.ClassRefused, RefusedBy: report.RefusedByICMP, ICMP: &report.ICMPError{From: "10.244.1.1", Type: 3, Code: 3, Name: "port unreachable"}},
		{Class: report.ClassRefused, RefusedBy: report.RefusedByRST},
	}
	_, doc := render(t, r)
	notes := find(doc, "p", "class", "muted refusals")
	if want := "Refused: 1 of 2 refused connections by a reject rule's ICMP error (from 10.244.1.1: no pod's TCP stack), 1 by a TCP reset (a stack with nothing listening)"; len(notes) != 1 || text(notes[0]) != want {
		t.Errorf("refusal notes %d, want 1 saying %q", len(notes), want)
	}
	r.Failures[0].RefusedBy, r.Failures[0].ICMP, r.Failures[1].RefusedBy = "", nil, ""
	if _, doc := render(t, r); len(find(doc, "p", "class", "muted refusals")) != 0 {
		t.Error("a run whose sockets said nothing shows a refusal line")
	}
}

// A failed rollout's end and an abort's way back are marked on the
// timeline beside the trigger.
func TestAbortIsMarked(t *testing.T) {
	r := lab(t, "naive")
	at := r.StartedAt.Add(8 * time.Second)
	r.Timeline = append(r.Timeline,
		report.Event{At: at, Kind: report.RolloutFailed, Detail: "RolloutAborted"},
		report.Event{At: at.Add(2 * time.Second), Kind: report.AbortedPodsGone, Revision: "r2", Detail: "every pod of the aborted revision r2 is gone"})
	page, _ := render(t, r)
	for _, want := range []string{"rollout failed at +8.00s: RolloutAborted", "aborted pods gone at +10.00s: every pod of the aborted revision r2 is gone"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not mark %q", want)
		}
	}
	if page, _ := render(t, lab(t, "naive")); strings.Contains(page, "aborted pods gone") {
		t.Error("a completed rollout's page marks an abort")
	}
}

// A drain's evictions, accepted and refused by a PodDisruptionBudget, are
// marked on their pod's lane, with a legend entry only when there are any.
func TestEvictionsOnThePodLanes(t *testing.T) {
	t0 := fixture.T0
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := &report.Report{StartedAt: t0, DurationS: 20, Command: "run",
		Timeline: []report.Event{
			{At: at(0), Kind: report.PodPresent, Pod: "web-1", Ready: true, Node: "n1"},
			{At: at(0), Kind: report.PodPresent, Pod: "web-2", Ready: true, Node: "n1"},
			{At: at(5), Kind: report.PodEvicted, Pod: "web-1", Node: "n1"},
			{At: at(5), Kind: report.EvictionRefused, Pod: "web-2", Node: "n1", Detail: "Cannot evict pod as it would violate the pod's disruption budget."},
		}}
	page, doc := render(t, r)
	ev, refused := find(doc, "line", "class", "mark-evicted"), find(doc, "line", "class", "mark-eviction-refused")
	if len(ev) != 1 || !strings.Contains(text(ev[0]), "web-1: evicted by the drain of n1") {
		t.Errorf("eviction marks %v", ev)
	}
	if len(refused) != 1 || !strings.Contains(text(refused[0]), "web-2: eviction refused") || !strings.Contains(text(refused[0]), "disruption budget") {
		t.Errorf("refusal marks %v", refused)
	}
	if !strings.Contains(page, "evicted by a drain</span>") {
		t.Error("no legend entry for evictions")
	}
	if page, _ := render(t, lab(t, "naive")); strings.Contains(page, "evicted by a drain</span>") {
		t.Error("a run without a drain has the eviction legend")
	}
}

// An Argo canary's steps get a table: one row each, its verdict, and the
// new revision's share, "unknown" (never 0) when no response named a pod.
func TestCanaryStepsTable(t *testing.T) {
	r := lab(t, "naive")
	share := 12.7
	r.Rollout.Kind, r.Rollout.Steps = "Rollout", []report.CanaryStep{
		{Index: 1, Step: "pause", Weight: 25, StartS: 2.7, EndS: 8, Sent: 1200, Failed: 3, Named: 1200, NewSharePct: &share},
		{Index: 2, Step: "setWeight: 50", Weight: 50, StartS: 8, EndS: 8.9, Pass: true},
	}
	_, doc := render(t, r)
	rows := find(doc, "tr", "data-step", "")
	if len(rows) != 2 {
		t.Fatalf("%d step rows, want 2", len(rows))
	}
	for i, want := range [][]string{{"2 pause", "25%", "+2.7 s", "1200", "fail", "12.7%", "of 1200"}, {"3 setWeight: 50", "50%", "pass", "unknown"}} {
		row := text(rows[i])
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("step row %q lacks %q", row, w)
			}
		}
	}
	r.Rollout.Steps = nil
	if _, doc := render(t, r); len(find(doc, "table", "id", "steps")) != 0 {
		t.Error("a rollout without steps has no steps table")
	}
}

// The pods table's served cells: the backend header's counts when there
// is one; without it conntrack's (titled so) with after-deletion unknown;
// with neither, unknown, never 0.
func TestServedFromConntrack(t *testing.T) {
	cells := func(r *report.Report) map[string][]string {
		_, doc := render(t, r)
		out := map[string][]string{}
		walk(doc, func(n *html.Node) {
			pod, ok := attr(n, "data-pod")
			if n.Data != "tr" || !ok {
				return
			}
			var tds []string
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if c.Data == "td" {
					tds = append(tds, strings.TrimSpace(text(c)))
				}
			}
			out[pod] = tds
		})
		return out
	}
	r := fixture.NaiveRun()
	r.Config.BackendHeader = ""
	for _, row := range cells(r) {
		if row[6] != "unknown" || row[7] != "unknown" {
			t.Errorf("no header, no conntrack: served cells %q, want unknown", row[6:8])
		}
	}
	for i := range r.Pods {
		n := uint64(4100 + i)
		r.Pods[i].ServedConntrack = &n
	}
	got := cells(r)
	for i, p := range r.Pods {
		if row := got[p.Pod]; len(row) < 8 || row[6] != fmt.Sprint(4100+i) || row[7] != "unknown" {
			t.Errorf("pod %s: served cells %q, want %d from conntrack and unknown after deletion", p.Pod, row, 4100+i)
		}
	}
	// The edge's access log, when conntrack mapped nothing to a pod.
	for i := range r.Pods {
		n := uint64(5200 + i)
		r.Pods[i].ServedConntrack, r.Pods[i].ServedAccessLog = nil, &n
	}
	got = cells(r)
	for i, p := range r.Pods {
		if row := got[p.Pod]; len(row) < 8 || row[6] != fmt.Sprint(5200+i) || row[7] != "unknown" {
			t.Errorf("pod %s: served cells %q, want %d from the access log and unknown after deletion", p.Pod, row, 5200+i)
		}
	}
	r.Config.BackendHeader = "X-Pod-Name"
	got = cells(r)
	for _, p := range r.Pods {
		if row := got[p.Pod]; len(row) < 8 || row[6] != fmt.Sprint(p.Served) || row[7] != fmt.Sprint(p.ServedAfterDeletion) {
			t.Errorf("pod %s: served cells %q, want the backend header's %d and %d", p.Pod, row, p.Served, p.ServedAfterDeletion)
		}
	}
}

// The pods table has an "edge retried" column only where the pods carry
// the edge's failed attempts: each pod's count, 0 included.
func TestEdgeRetriedColumn(t *testing.T) {
	edgeCells := func(r *report.Report) (heads int, cells map[string]string) {
		_, doc := render(t, r)
		cells = map[string]string{}
		walk(doc, func(n *html.Node) {
			if n.Data == "th" && strings.TrimSpace(text(n)) == "edge retried" {
				heads++
			}
			pod, ok := attr(n, "data-pod")
			if n.Data != "tr" || !ok {
				return
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if class, _ := attr(c, "class"); c.Data == "td" && strings.Contains(class, "edge-retried") {
					cells[pod] = strings.TrimSpace(text(c))
				}
			}
		})
		return heads, cells
	}
	r := fixture.NaiveRun()
	if heads, cells := edgeCells(r); heads != 0 || len(cells) != 0 {
		t.Errorf("no edge attempts known: %d headers, cells %v; want none", heads, cells)
	}
	counts := []uint64{7, 0}
	for i := range r.Pods {
		n := counts[i%len(counts)]
		r.Pods[i].EdgeFailedAttempts = &n
	}
	heads, cells := edgeCells(r)
	if heads != 1 {
		t.Errorf("%d edge retried headers, want 1", heads)
	}
	for i, p := range r.Pods {
		if got, want := cells[p.Pod], fmt.Sprint(counts[i%len(counts)]); got != want {
			t.Errorf("pod %s: edge retried %q, want %s", p.Pod, got, want)
		}
	}
}

// The charts' seconds are drawn where the timeline's events are: on the
// wall clock. With the clock set 3 s forward in the run's second 1, the
// run's second 4 (its failures) is drawn from +7 s, one second wide, next
// to a pod's deletion received at +7.2 s, and the axis reaches the run's
// last second's end, +13 s.
func TestSecondsDrawnOnTheWallClock(t *testing.T) {
	t0 := fixture.T0
	r := &report.Report{StartedAt: t0, EndedAt: t0.Add(13 * time.Second), DurationS: 10, Command: "run",
		Clock:    []report.ClockLead{{AtMS: 0}, {AtMS: 1000}, {AtMS: 1100, LeadMS: 3000}},
		Timeline: []report.Event{{At: t0.Add(7200 * time.Millisecond), Kind: report.PodDeletionRequested, Pod: "a", Revision: "old"}}}
	for s := int64(0); s < 10; s++ {
		row := report.SeriesRow{T: s, Sent: 10, OK: 10}
		if s == 4 {
			row.OK, row.Failed, row.ByClass = 7, 3, map[string]uint64{report.ClassRefused: 3}
		}
		r.Series = append(r.Series, row)
	}
	m := newModel(r)
	if len(m.FailSeconds) != 1 || m.FailSeconds[0].T != 7 || m.FailSeconds[0].Span != 1 || m.FailSeconds[0].perSecond(m.FailSeconds[0].Failed) != 3 {
		t.Errorf("the failed second drawn at %+v: want from +7s, one second wide, 3 a second", m.FailSeconds)
	}
	if m.Buckets[1].T != 1 || m.Buckets[2].T != 5 || m.To != 13 {
		t.Errorf("seconds 1 and 2 drawn from %v and %v, the axis to %v: want +1s, +5s (after the step) and +13s", m.Buckets[1].T, m.Buckets[2].T, m.To)
	}
}

// A pod ready when the watch began has the watch's first sight as its
// ready_at, a moment before the run's start: its cell says "before", as
// the text and Markdown do, never "-0.00s" (which reads as a pod that
// turned ready as the run began). Later times stay offsets.
func TestPodsTableSaysBeforeForTimesBeforeTheStart(t *testing.T) {
	r := lab(t, "naive")
	_, doc := render(t, r)
	before, after := 0, 0
	for _, p := range r.Pods {
		rows := find(doc, "tr", "data-pod", p.Pod)
		if len(rows) != 1 || p.ReadyAt == nil {
			t.Fatalf("pod %s: %d rows, ready_at %v", p.Pod, len(rows), p.ReadyAt)
		}
		var cells []*html.Node
		for c := rows[0].FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.ElementNode && c.Data == "td" {
				cells = append(cells, c)
			}
		}
		if len(cells) < 3 {
			t.Fatalf("pod %s: %d cells", p.Pod, len(cells))
		}
		got := text(cells[2])
		want := fmt.Sprintf("%+.2fs", offset(r, *p.ReadyAt))
		if !p.ReadyAt.After(r.StartedAt) {
			want = "before"
			before++
		} else {
			after++
		}
		if got != want {
			t.Errorf("pod %s: ready cell %q, want %q", p.Pod, got, want)
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("the lab's report has %d pods ready before the start and %d after; want both", before, after)
	}
}

// A drain or a scale changes no revision: its pods are one group titled
// by that revision, not "old revision" with no new one; a rollout has
// both groups.
func TestLaneGroupsOfOneRevision(t *testing.T) {
	titles := func(r *report.Report) []string {
		var out []string
		for _, g := range newModel(r).Groups {
			out = append(out, g.Title)
		}
		return out
	}
	r := fixture.NaiveRun()
	old, rolled := r.Rollout.OldRevision, titles(r)
	if !slices.Contains(rolled, "old revision "+old) || !slices.Contains(rolled, "new revision "+r.Rollout.NewRevision) {
		t.Fatalf("a rollout's groups %q", rolled)
	}
	r.Rollout.NewRevision = old
	for i := range r.Pods {
		r.Pods[i].Revision = old
	}
	for i := range r.Timeline {
		if r.Timeline[i].Revision != "" {
			r.Timeline[i].Revision = old
		}
	}
	if got := titles(r); !slices.Equal(got, []string{"revision " + old}) {
		t.Errorf("one revision's groups %q", got)
	}
	// Its end marker says what its follow recorded, not "old pods gone".
	r.Timeline = append(r.Timeline, report.Event{At: *r.Rollout.OldPodsGoneAt, Kind: report.AllOldPodsGone, Revision: old, Detail: "the scale removed no pod"})
	var labels []string
	for _, mk := range newModel(r).Rollout {
		labels = append(labels, mk.Label+": "+mk.Title)
	}
	if got := strings.Join(labels, " | "); !strings.Contains(got, "done: done at ") || !strings.Contains(got, ": the scale removed no pod") ||
		strings.Contains(got, "old pods gone") {
		t.Errorf("markers %s", got)
	}
}
