package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/rollprobe/rollprobe/internal/golden"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
	"github.com/rollprobe/rollprobe/report/render"
)

// syntheticRun builds a finished probe from hand-made results: two seconds
// at 5 req/s with a burst of refused connections, a reset, an eof_reused and
// a 503, all at fixed times, so the report is byte-for-byte reproducible.
func syntheticRun(t *testing.T) probeRun {
	t.Helper()
	cfg := prober.DefaultConfig()
	cfg.Target, _ = prober.ParseTarget("http://10.96.0.10:80/healthz")
	cfg.Rate, cfg.Duration = 5, 2*time.Second
	cfg.Conn, _ = prober.ParseConnMode("mixed=0.5")
	cfg.BackendHeader = "X-Pod-Name"
	rec := prober.NewRecorder(3)
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	type outcome struct {
		class   prober.Class
		phase   prober.Phase
		status  int
		backend string
		err     error
	}
	ok := func(b string) outcome { return outcome{prober.OK, prober.PhaseNone, 200, b, nil} }
	outcomes := []outcome{
		ok("web-a"), ok("web-b"), ok("web-a"), ok("web-b"), ok("web-a"),
		{prober.Refused, prober.PhaseDial, 0, "", &netError{"dial", syscall.ECONNREFUSED}},
		{prober.Refused, prober.PhaseDial, 0, "", &netError{"dial", syscall.ECONNREFUSED}},
		{prober.Reset, prober.PhaseReadHeaders, 0, "", &netError{"read", syscall.ECONNRESET}},
		{prober.EOFReused, prober.PhaseReadHeaders, 0, "", errors.New("connection closed before any response byte")},
		{prober.HTTP5xx, prober.PhaseNone, 503, "web-c", nil},
	}
	for i, o := range outcomes {
		intended := ms(200 * i)
		res := prober.Result{
			Seq: uint64(i), Intended: intended, Start: intended + ms(1), End: intended + ms(3+i),
			Class: o.class, Phase: o.phase, Status: o.status, Fresh: i%2 == 0,
			ConnReqs: uint32(i / 2), ConnAge: ms(10 * i), Backend: o.backend, Err: o.err,
		}
		rec.Record(&res)
	}
	rec.Tick(time.Hour)
	return probeRun{
		Tool:    report.Tool{Name: "rollprobe", Version: "test"},
		Command: "probe",
		RunID:   "feedc0de",
		Config:  cfg,
		Budget:  report.Budget{},
		Summary: prober.Summary{
			Start:   time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC),
			Elapsed: 2050 * time.Millisecond, Sending: 2 * time.Second, Target: 5, Workers: 3,
		},
		Recorder: rec,
	}
}

type netError struct {
	op    string
	errno syscall.Errno
}

func (e *netError) Error() string { return e.op + " tcp 10.96.0.10:80: " + e.errno.Error() }
func (e *netError) Unwrap() error { return e.errno }

func TestGoldenJSON(t *testing.T) {
	r := build(syntheticRun(t))
	var buf bytes.Buffer
	if err := report.Encode(&buf, r); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report.golden.json", buf.Bytes())
}

func TestGoldenText(t *testing.T) {
	var buf bytes.Buffer
	if err := render.Text(&buf, build(syntheticRun(t))); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report.golden.txt", buf.Bytes())
}

func TestBuildCounts(t *testing.T) {
	r := build(syntheticRun(t))
	if r.Totals.Sent != 10 || r.Totals.OK != 5 || r.Totals.Failed != 5 {
		t.Errorf("totals %+v", r.Totals)
	}
	if len(r.Totals.ByClass) != prober.NumClasses || r.Totals.ByClass["refused"] != 2 || r.Totals.ByClass["dns"] != 0 {
		t.Errorf("by_class must list every class with zero counts: %v", r.Totals.ByClass)
	}
	if r.Totals.ByStatus["503"] != 1 || r.Totals.ByStatus["200"] != 5 {
		t.Errorf("by_status %v", r.Totals.ByStatus)
	}
	// The recorder kept 3 failures in full; the other 2 are only counted.
	if len(r.Failures) != 3 || r.FailureInfo.Total != 5 || r.FailureInfo.Kept != 3 {
		t.Errorf("failures kept %d, info %+v", len(r.Failures), r.FailureInfo)
	}
	if r.Failures[0].RequestID != "feedc0de-5" || r.Failures[0].AtMS != 1000 {
		t.Errorf("first failure %+v", r.Failures[0])
	}
	if len(r.Series) != 2 || r.Series[0].OK != 5 || r.Series[1].Failed != 5 {
		t.Errorf("series %+v", r.Series)
	}
	if r.Verdict.Pass || r.Verdict.ExitCode != exitcode.Failures {
		t.Errorf("verdict %+v, want failures above budget", r.Verdict)
	}
}

// schema compiles the published schema.
func schema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	sch, err := jsonschema.NewCompiler().Compile("../report/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// validate checks r against the published schema and returns its JSON.
func validate(t *testing.T, r *report.Report) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := report.Encode(&buf, r); err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := schema(t).Validate(doc); err != nil {
		t.Fatalf("report does not match its schema: %v", err)
	}
	return buf.Bytes()
}

// TestSchemaValidatesReports: the golden report conforms to the published
// schema, and the schema rejects a report that breaks the contract.
func TestSchemaValidatesReports(t *testing.T) {
	js := validate(t, build(syntheticRun(t)))
	sch := schema(t)
	var broken map[string]any
	_ = json.Unmarshal(js, &broken)
	delete(broken["totals"].(map[string]any)["by_class"].(map[string]any), "eof_reused")
	if err := sch.Validate(broken); err == nil {
		t.Fatal("schema accepted by_class without a class key")
	}
}

// A run whose paths two clients made says "both", not its first path's
// client, and its hidden retries are those its grpc-go paths measured; a
// run whose paths agree keeps its own config's.
func TestPathsClient(t *testing.T) {
	path := func(client string, h *report.HiddenRetries) report.PathReport {
		return report.PathReport{GRPCClient: client, Totals: report.Totals{HiddenRetries: h}}
	}
	goRetries := &report.HiddenRetries{Calls: 3, Attempts: 4, AddedMSMean: 10, AddedMSMax: 20}
	other := &report.HiddenRetries{Calls: 1, Attempts: 1, AddedMSMean: 50, AddedMSMax: 50}
	own := &report.HiddenRetries{Calls: 9}
	for _, tc := range []struct {
		name       string
		paths      []report.PathReport
		runClient  string
		runHidden  *report.HiddenRetries
		wantClient string
		wantHidden *report.HiddenRetries
	}{
		{"raw beside grpc-go", []report.PathReport{path("raw", nil), path("grpc-go", goRetries)}, "raw", nil, "both", goRetries},
		{"grpc-go beside raw", []report.PathReport{path("grpc-go", goRetries), path("raw", nil)}, "grpc-go", own, "both", goRetries},
		{"two grpc-go beside raw", []report.PathReport{path("raw", nil), path("grpc-go", goRetries), path("grpc-go", other)}, "raw", nil,
			"both", &report.HiddenRetries{Calls: 4, Attempts: 5, AddedMSMean: 20, AddedMSMax: 50}},
		{"all raw", []report.PathReport{path("raw", nil), path("raw", nil)}, "raw", nil, "raw", nil},
		{"all grpc-go", []report.PathReport{path("grpc-go", goRetries), path("grpc-go", other)}, "grpc-go", own, "grpc-go", own},
		{"not grpc", []report.PathReport{path("", nil), path("", nil)}, "", nil, "", nil},
	} {
		client, hidden := pathsClient(tc.paths, tc.runClient, tc.runHidden)
		if client != tc.wantClient || (hidden == nil) != (tc.wantHidden == nil) || hidden != nil && *hidden != *tc.wantHidden {
			t.Errorf("%s: %q %+v, want %q %+v", tc.name, client, hidden, tc.wantClient, tc.wantHidden)
		}
	}
}

// The wall clock set 2.7 s forward during the run (as this project's CI
// machines did theirs): a failure after the step is placed at the wall
// clock's reading then, as the timeline's events and the referees outside
// rollprobe are, its at_ms and its outage by that clock too; one before
// it, where it was; the end at the last reading's lead.
func TestBuildPlacesFailuresOnTheWallClock(t *testing.T) {
	run := syntheticRun(t)
	start := run.Summary.Start
	clock := report.NewWallClock(start)
	clock.NoteAt(1000*time.Millisecond, start.Add(1000*time.Millisecond))
	clock.NoteAt(1100*time.Millisecond, start.Add(1100*time.Millisecond+2700*time.Millisecond))
	run.Summary.Clock = clock
	r := build(run)
	byIntended := map[time.Duration]report.Failure{}
	for _, f := range r.Failures {
		byIntended[time.Duration(f.Seq)*200*time.Millisecond] = f
	}
	before, after := byIntended[1000*time.Millisecond], byIntended[1400*time.Millisecond]
	if !before.Intended.Equal(start.Add(time.Second)) || before.AtMS != 1000 {
		t.Errorf("failure before the step: intended %v, at_ms %v; want +1s as it was", before.Intended, before.AtMS)
	}
	step := 2700 * time.Millisecond
	if !after.Intended.Equal(start.Add(1400*time.Millisecond+step)) || !after.Start.Equal(start.Add(1401*time.Millisecond+step)) || after.AtMS != 4100 {
		t.Errorf("failure after the step: intended %v, start %v, at_ms %v; want 2.7 s later than the offsets", after.Intended, after.Start, after.AtMS)
	}
	if !r.EndedAt.Equal(start.Add(2050*time.Millisecond + step)) {
		t.Errorf("ended at %v, want the end's offset plus the step", r.EndedAt)
	}
	if len(r.Outages) != 1 || !r.Outages[0].Start.Equal(start.Add(time.Second)) || !r.Outages[0].End.Equal(start.Add(1800*time.Millisecond+step)) || r.Outages[0].DurationS != 0.8 {
		t.Errorf("outages %+v: want one from +1s to +1.8s plus the step, 0.8 s long (the step is not its length)", r.Outages)
	}
	// The report keeps the samples (its series' seconds are placed by
	// them), and the schema knows them.
	if len(r.Clock) != 3 || r.Clock[2].LeadMS != 2700 || !r.WallClock().SecondAt(2).Equal(start.Add(2*time.Second+step)) {
		t.Errorf("clock %+v: want the samples, second 2 placed after the step", r.Clock)
	}
	validate(t, r)
}
