package edgelog

import (
	"os"
	"path/filepath"
	"reflect"
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
	log, err := Read(strings.NewReader(traefikLog), FormatTraefik, "X-Request-Id", []string{"r1a2", "p2"})
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
	if log, err := Read(strings.NewReader(lower), FormatTraefik, "X-Request-Id", []string{"r1a2"}); err != nil || log.ByID["r1a2-2"].Upstream != "10.244.2.6:8080" {
		t.Errorf("the header's field in lower case: %+v, %v", log.ByID, err)
	}
	// Another header name: none of these lines has it.
	if log, _ := Read(strings.NewReader(traefikLog), FormatTraefik, "X-Trace", []string{"r1a2"}); len(log.ByID) != 0 {
		t.Errorf("by a header the lines lack: %+v", log.ByID)
	}
}

func TestReadFile(t *testing.T) {
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
	log, err := ReadFile(path, FormatTraefik, "X-Request-Id", []string{"r1a2"})
	if err != nil || log.ByID["r1a2-1"].Upstream != "10.244.1.5:8080" {
		t.Errorf("%+v, %v", log, err)
	}
}

// Lines of NginxLogFormat as nginx writes them (edgelog's nginx test runs
// a real one), with the cases it meets less often: numbers written bare
// by a log_format that does not quote them, an internal redirect's second
// group (" : "), a unix socket, values nginx had none for ("-" or empty).
const nginxLog = `{"msec":"1796113538.310","request_time":"0.250","status":"502","upstream_addr":"10.244.1.5:8080, 10.244.2.6:8080","upstream_status":"502, 502","upstream_response_time":"0.200, 0.001","http_x_request_id":"r1a2-1"}
{"msec":1796113539.5,"request_time":0.031,"status":200,"upstream_addr":"10.244.1.5:8080 : [fd00::7]:8080","upstream_status":"404 : 200","upstream_response_time":"0.001 : 0.030","http_x_request_id":"r1a2-2"}
{"msec":"1796113540.000","request_time":"0.000","status":"502","upstream_addr":"naive","upstream_status":"502","upstream_response_time":"0.000","http_x_request_id":"r1a2-3"}
{"msec":"1796113541.000","request_time":"0.002","status":"200","upstream_addr":"unix:/run/app.sock","upstream_status":"200","upstream_response_time":"0.002","http_x_request_id":"r1a2-4"}
{"msec":"1796113542.000","request_time":"0.000","status":"404","upstream_addr":"","upstream_status":"-","upstream_response_time":"-","http_x_request_id":"r1a2-5"}
{"msec":"1796113544.000","request_time":"0.002","status":"502","upstream_addr":"10.244.1.3:8080, naive","upstream_status":"502, 502","upstream_response_time":"0.001, 0.000","http_x_request_id":"r1a2-6"}
{"msec":"1796113543.000","request_time":"0.000","status":"200","upstream_addr":"10.244.1.5:8080","upstream_status":"200","upstream_response_time":"0.000","http_x_request_id":"other-1"}
`

func TestReadNginx(t *testing.T) {
	log, err := Read(strings.NewReader(nginxLog), FormatAuto, "X-Request-Id", []string{"r1a2"})
	if err != nil {
		t.Fatal(err)
	}
	at := func(sec, ms int64) time.Time { return time.Unix(sec, ms*1e6).UTC() }
	want := map[string]Entry{
		// The last server tried failed too: nginx's 502 names it, and the
		// first attempt's 200 ms is time outside the last one.
		"r1a2-1": {Upstream: "10.244.2.6:8080", Status: 502, OriginStatus: 502, Start: at(1796113538, 60), Duration: 250 * time.Millisecond, Overhead: 249 * time.Millisecond, Tried: 2, FailedOn: []string{"10.244.1.5:8080"}},
		"r1a2-2": {Upstream: "[fd00::7]:8080", Status: 200, OriginStatus: 200, Start: at(1796113539, 469), Duration: 31 * time.Millisecond, Overhead: time.Millisecond, Tried: 2, FailedOn: []string{"10.244.1.5:8080"}},
		// No server to try: nginx's own 502, no origin.
		"r1a2-3": {Status: 502, Start: at(1796113540, 0)},
		"r1a2-4": {Status: 200, OriginStatus: 200, Start: at(1796113540, 998), Duration: 2 * time.Millisecond, Tried: 1},
		"r1a2-5": {Status: 404, Start: at(1796113542, 0)},
		// Tried a pod, which failed, and then had no server left (the
		// group's name after it, as a real nginx logs it): the pod.
		"r1a2-6": {Upstream: "10.244.1.3:8080", Status: 502, OriginStatus: 502, Start: at(1796113543, 998), Duration: 2 * time.Millisecond, Overhead: time.Millisecond, Tried: 1},
	}
	if log.Format != FormatNginx || len(log.ByID) != len(want) || log.Unreadable != 0 {
		t.Errorf("format %q, %d entries, %d unreadable: want nginx, %d, 0", log.Format, len(log.ByID), log.Unreadable, len(want))
	}
	for id, e := range want {
		if got := log.ByID[id]; !reflect.DeepEqual(got, e) {
			t.Errorf("%s: %+v, want %+v", id, got, e)
		}
	}
	// Another request ID header: nginx's variable for it names the key.
	other := strings.ReplaceAll(nginxLog, "http_x_request_id", "http_x_trace_id")
	if log, _ := Read(strings.NewReader(other), FormatNginx, "X-Trace-Id", []string{"r1a2"}); len(log.ByID) != len(want) {
		t.Errorf("by X-Trace-Id: %d entries, want %d", len(log.ByID), len(want))
	}
	// Told the wrong format, the lines hold no ID where it looks: none.
	if log, _ := Read(strings.NewReader(nginxLog), FormatTraefik, "X-Request-Id", []string{"r1a2"}); len(log.ByID) != 0 || log.Format != FormatTraefik {
		t.Errorf("nginx's lines read as Traefik's: %+v", log)
	}
	if _, err := Read(strings.NewReader(nginxLog), "apache", "X-Request-Id", []string{"r1a2"}); err == nil {
		t.Error("an unknown format: no error")
	}
}

// Auto tells the formats apart by the first of the run's lines; a line of
// the run in neither format before it is unreadable, and a log with no
// line of the run leaves the format unknown (auto).
func TestReadAutoFormat(t *testing.T) {
	log, _ := Read(strings.NewReader(traefikLog), FormatAuto, "X-Request-Id", []string{"r1a2"})
	if log.Format != FormatTraefik || log.ByID["r1a2-2"].Upstream != "10.244.2.6:8080" {
		t.Errorf("Traefik's log: format %q, %+v", log.Format, log.ByID)
	}
	odd := `{"time":"x","X-Request-Id":"r1a2-7"}` + "\n" + nginxLog
	if log, _ := Read(strings.NewReader(odd), FormatAuto, "X-Request-Id", []string{"r1a2"}); log.Format != FormatNginx || log.Unreadable != 1 || len(log.ByID) != 6 {
		t.Errorf("a line of neither format first: format %q, %d unreadable, %d entries", log.Format, log.Unreadable, len(log.ByID))
	}
	if log, _ := Read(strings.NewReader(nginxLog), FormatAuto, "X-Request-Id", []string{"zz"}); log.Format != FormatAuto || len(log.ByID) != 0 {
		t.Errorf("no line of the run: format %q, %d entries", log.Format, len(log.ByID))
	}
}

func TestSeconds(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0.005": 5 * time.Millisecond, "1.5": 1500 * time.Millisecond, "12": 12 * time.Second,
		"0.000000001": 1, "1796113538.287": 1796113538287 * time.Millisecond,
	} {
		if got, ok := seconds(in); !ok || got != want {
			t.Errorf("seconds(%q) = %s, %v; want %s", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "-", "-1.0", "+1", ".5", "1.0000000001", "x", "1e3", "99999999999999999999"} {
		if got, ok := seconds(bad); ok {
			t.Errorf("seconds(%q) = %s, want not a time", bad, got)
		}
	}
}
