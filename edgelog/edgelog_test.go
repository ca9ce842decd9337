package edgelog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Lines as Traefik v3 writes them with --accesslog.format=json,
// --accesslog.fields.defaultMode=keep and the request ID header kept
// (fields trimmed to those around the ones read).
const traefikLog = `{"ClientAddr":"10.0.0.2:51234","DownstreamStatus":200,"OriginStatus":200,"RequestHost":"naive.lab.example","RouterName":"default-naive@kubernetes","ServiceAddr":"10.244.1.5:8080","ServiceName":"default-naive-80@kubernetes","ServiceURL":"http://10.244.1.5:8080","StartUTC":"2026-11-30T10:00:00.1Z","request_X-Request-Id":"r1a2-1","level":"info","msg":"","time":"2026-11-30T10:00:00Z"}
{"ClientAddr":"10.0.0.2:51236","DownstreamStatus":502,"OriginStatus":0,"RequestHost":"naive.lab.example","Overhead":1250000000,"Duration":133478000000,"ServiceAddr":"10.244.2.6:8080","StartUTC":"2026-11-30T10:00:01Z","request_X-Request-Id":"r1a2-2"}
{"ClientAddr":"10.0.0.2:51238","DownstreamStatus":404,"OriginStatus":0,"RequestHost":"nothing.lab.example","StartUTC":"2026-11-30T10:00:02Z","request_X-Request-Id":"r1a2-3"}
{"DownstreamStatus":200,"ServiceAddr":"10.244.1.5:8080","request_X-Request-Id":"someone-else-1"}
{"DownstreamStatus":200,"ServiceAddr":"10.244.1.5:8080","request_X-Request-Id":"r1a2-4"}
{"DownstreamStatus":200,"ServiceAddr":"10.244.2.6:8080","request_X-Request-Id":"r1a2-4"}
time="2026-11-30T10:00:03Z" level=error msg="not an access log line"
{"DownstreamStatus":200,"ServiceAddr":"10.244.1.5:8080","request_X-Request-Id":"r1a2-9"

{"DownstreamStatus":200,"ServiceAddr":"10.244.1.7:8080","request_X-Request-Id":"p2-1"}
`

// The run's lines are kept by request ID (its own prefix, or a prober's),
// with where Traefik sent each and what it answered; a line of another
// client, or none of a request (Traefik's own log), is left out; a line of
// the run's cut short is counted, and a request ID on two lines left out
// and counted (which one is the request is not known).
func TestReadTraefik(t *testing.T) {
	log, err := ReadTraefik(strings.NewReader(traefikLog), "X-Request-Id", []string{"r1a2", "p2"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Entry{
		"r1a2-1": {Upstream: "10.244.1.5:8080", Status: 200, OriginStatus: 200, Start: time.Date(2026, 11, 30, 10, 0, 0, 1e8, time.UTC)},
		"r1a2-2": {Upstream: "10.244.2.6:8080", Status: 502, Start: time.Date(2026, 11, 30, 10, 0, 1, 0, time.UTC), Overhead: 1250 * time.Millisecond, Duration: 133478 * time.Millisecond},
		"r1a2-3": {Status: 404, Start: time.Date(2026, 11, 30, 10, 0, 2, 0, time.UTC)},
		"p2-1":   {Upstream: "10.244.1.7:8080", Status: 200},
	}
	if len(log.ByID) != len(want) {
		t.Errorf("entries %+v, want %+v", log.ByID, want)
	}
	for id, e := range want {
		if got := log.ByID[id]; got.Upstream != e.Upstream || got.Status != e.Status || got.OriginStatus != e.OriginStatus || !got.Start.Equal(e.Start) || got.Overhead != e.Overhead || got.Duration != e.Duration {
			t.Errorf("%s: %+v, want %+v", id, got, e)
		}
	}
	if log.Unreadable != 1 || log.Duplicates != 1 {
		t.Errorf("unreadable %d, duplicates %d: want 1 and 1", log.Unreadable, log.Duplicates)
	}
	// The header as the user spelt it in Traefik's configuration.
	lower := strings.ReplaceAll(traefikLog, "request_X-Request-Id", "request_x-request-id")
	if log, err := ReadTraefik(strings.NewReader(lower), "X-Request-Id", []string{"r1a2"}); err != nil || log.ByID["r1a2-2"].Upstream != "10.244.2.6:8080" {
		t.Errorf("the header's field in lower case: %+v, %v", log.ByID, err)
	}
	// Another header name: none of these lines has it.
	if log, _ := ReadTraefik(strings.NewReader(traefikLog), "X-Trace", []string{"r1a2"}); len(log.ByID) != 0 {
		t.Errorf("by a header the lines lack: %+v", log.ByID)
	}
}

func TestReadTraefikFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	if err := os.WriteFile(path, []byte(traefikLog), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckReadable(path); err != nil {
		t.Errorf("a readable file: %v", err)
	}
	for _, bad := range []string{filepath.Join(dir, "nope.log"), dir} {
		if err := CheckReadable(bad); err == nil {
			t.Errorf("%s: readable, want an error", bad)
		}
	}
	log, err := ReadTraefikFile(path, "X-Request-Id", []string{"r1a2"})
	if err != nil || log.ByID["r1a2-1"].Upstream != "10.244.1.5:8080" {
		t.Errorf("%+v, %v", log, err)
	}
}
