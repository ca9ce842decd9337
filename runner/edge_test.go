package runner

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollprobe/rollprobe/edgelog"
	"github.com/rollprobe/rollprobe/report"
)

// A failed connection is to an edge only when its address is none of the
// Service's, no node's and no pod's: an address in doubt keeps the pods as
// candidates.
func TestMarkEdgeConnections(t *testing.T) {
	svc := &corev1.Service{
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::a"}, ExternalIPs: []string{"192.0.2.7"}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{
			Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.4"}, {Hostname: "lb.example"}}}},
	}
	nodes := map[string]string{"10.100.0.11": "n1"}
	rep := &report.Report{Timeline: []report.Event{{Kind: report.PodReady, Pod: "p", IP: "10.244.1.7"}}}
	for _, addr := range []string{"10.96.0.10:80", "[fd00::a]:80", "192.0.2.7:80", "198.51.100.4:443", "10.100.0.11:30080",
		"10.100.0.11:8443", "10.244.1.7:8080", "10.100.0.1:443", "", "0.0.0.0:0", "10.100.0.99:30080"} {
		rep.Failures = append(rep.Failures, report.Failure{RemoteAddr: addr})
	}
	markEdgeConnections(rep, svc, nodes)
	for _, f := range rep.Failures {
		if want := f.RemoteAddr == "10.100.0.1:443"; f.ViaEdge != want {
			t.Errorf("%q: via_edge %v, want %v", f.RemoteAddr, f.ViaEdge, want)
		}
	}
	// Without the Service, nothing is known to be direct: nothing is marked.
	rep.Failures[7].ViaEdge = false
	markEdgeConnections(rep, nil, nodes)
	if rep.Failures[7].ViaEdge {
		t.Errorf("marked with no Service known")
	}
}

// Each path's entry is read from the address it dialled: its ConnectTo
// when set (a name pinned to the edge's address is the edge's), else its
// target, the Service's cluster DNS name among them.
func TestSetPathEntries(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, ClusterIP: "10.96.0.10"}}
	rep := &report.Report{Paths: []report.PathReport{
		{Name: "svc", Target: "http://web.prod.svc/"},
		{Name: "ip", Target: "http://10.96.0.10/"},
		{Name: "edge", Target: "https://web.example/"},
		{Name: "pinned", Target: "http://web.example/", ConnectTo: "10.96.0.10:80"},
		{Name: "pinned-away", Target: "http://web.prod.svc/", ConnectTo: "10.100.0.1:80"},
	}}
	setPathEntries(rep, svc, nil)
	want := map[string]bool{"svc": true, "ip": true, "pinned": true}
	for _, p := range rep.Paths {
		if got := p.Entry != nil && p.Entry.Via == report.ViaClusterIP && p.Entry.Port == 80 && p.Entry.From == report.EntryFromTarget; got != want[p.Name] {
			t.Errorf("%s: entry %+v, want a cluster IP entry from the target: %v", p.Name, p.Entry, want[p.Name])
		}
	}
}

// A name's entry is what its connections were sent to, when recorded in
// full: every address the same way in gives that entry, read from them;
// addresses that differ, one of nothing the run knows, or a list cut
// short give none, whatever the name's spec says. An address, or a name
// with nothing recorded, is read from the target.
func TestEntryFromWhatWasDialled(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"}}}
	nodes := map[string]string{"10.100.0.11": "node-1", "10.100.0.12": "node-2"}
	for _, tc := range []struct {
		name, target string
		dialled      []string
		more         bool
		want         string // via/node/from, "" for none
	}{
		{"a name at a node's port", "http://shop.example:30080/", []string{"10.100.0.11:30080"}, false, "node_port/node-1/dialled"},
		{"a name at both stacks' cluster IPs", "http://shop.example/", []string{"[fd00::10]:80", "10.96.0.10:80"}, false, "cluster_ip//dialled"},
		{"a name at two nodes", "http://shop.example:30080/", []string{"10.100.0.11:30080", "10.100.0.12:30080"}, false, ""},
		{"the cluster DNS name resolved elsewhere", "http://web.prod.svc/", []string{"10.100.0.1:80"}, false, ""},
		{"the cluster DNS name, nothing recorded", "http://web.prod.svc/", nil, false, "cluster_ip//target"},
		{"a list cut short", "http://web.prod.svc/", []string{"10.96.0.10:80"}, true, "cluster_ip//target"},
		{"an address", "http://10.96.0.10/", []string{"10.96.0.10:80"}, false, "cluster_ip//target"},
		{"another name, nothing recorded", "http://shop.example/", nil, false, ""},
	} {
		u, _ := url.Parse(tc.target)
		e := entryOf(svc, u, nodes, report.ProberStats{Dialled: tc.dialled, DialledMore: tc.more})
		got := ""
		if e != nil {
			got = e.Via + "/" + e.Node + "/" + e.From
		}
		if got != tc.want {
			t.Errorf("%s: entry %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The edge's access log gives each failed request it has a line for the
// address it was forwarded to; a failure before the edge (its connection
// refused) needs none; one that got past it without a line is counted,
// after the bounded wait for Traefik to log it. An unreadable log is said,
// not fatal.
func TestReadEdgeLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "traefik.log")
	log := `{"DownstreamStatus":502,"ServiceAddr":"10.244.1.5:8080","Duration":133478123456,"request_X-Request-Id":"run1-7"}
{"DownstreamStatus":200,"OriginStatus":200,"ServiceAddr":"10.244.1.5:8080","StartUTC":"2026-11-30T10:00:01.2Z","request_X-Request-Id":"run1-8"}
{"DownstreamStatus":404,"OriginStatus":404,"ServiceAddr":"10.244.1.5:8080","StartUTC":"2026-11-30T10:00:01.7Z","request_X-Request-Id":"run1-11"}
{"DownstreamStatus":502,"OriginStatus":502,"ServiceAddr":"10.244.1.5:8080","StartUTC":"2026-11-30T10:00:01.8Z","request_X-Request-Id":"run1-15"}
{"DownstreamStatus":200,"OriginStatus":200,"ServiceAddr":"10.244.2.6:8080","StartUTC":"2026-11-30T10:00:03Z","request_X-Request-Id":"run1-12"}
{"DownstreamStatus":200,"OriginStatus":200,"ServiceAddr":"10.244.2.6:8080","StartUTC":"2026-11-30T09:59:59.9Z","request_X-Request-Id":"run1-13"}
{"DownstreamStatus":499,"OriginStatus":200,"ServiceAddr":"10.244.2.6:8080","StartUTC":"2026-11-30T10:00:03Z","request_X-Request-Id":"run1-14"}
{"DownstreamStatus":504,"ServiceAddr":"10.244.2.6:8080","request_X-Request-Id":"fleet2-3"}
{"DownstreamStatus":502,"ServiceAddr":"10.244.2.6:8080","request_X-Request-Id":"other-7"}
{"DownstreamStatus":502,"ServiceAddr":"10.244.3.9:8080","StartUTC":"2026-11-30T10:00:02.5Z","Overhead":2100000000,"Duration":2100500000,"request_X-Request-Id":"path3-5"}
{"DownstreamStatus":200,"OriginStatus":200,"ServiceAddr":"10.244.3.9:8080","StartUTC":"2026-11-30T10:00:02.9Z","Overhead":100000000,"request_X-Request-Id":"path3-6"}
{"DownstreamStatus":200,"OriginStatus":200,"ServiceAddr":"10.244.3.9:8080","StartUTC":"2026-11-30T10:00:02.95Z","Overhead":99000000,"request_X-Request-Id":"path3-7"}
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := &report.Report{StartedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), Config: report.Config{RunID: "run1", RequestIDHeader: "X-Request-Id"},
		Probers: []report.ProberInfo{{RunID: "fleet2"}}, Paths: []report.PathReport{{Name: "edge", RunID: "path3"}},
		Failures: []report.Failure{
			{RequestID: "run1-7", Class: report.ClassProxy5xx, ViaEdge: true},
			{RequestID: "fleet2-3", Class: report.ClassTimeout, ViaEdge: true},
			{RequestID: "run1-9", Class: report.ClassRefused, ViaEdge: true},
			{RequestID: "run1-10", Class: report.ClassProxy5xx, ViaEdge: true},
			{RequestID: "path3-5", Class: report.ClassProxy5xx, ViaEdge: true, Path: "edge"},
		}}
	got := readEdgeLog(context.Background(), rep, path, edgelog.FormatAuto, 0)
	// The responses a backend gave, by address and second of the run (a
	// clock behind the run's: before its first second); a 5xx (the edge's
	// own, with or without an origin status) is none, and so is an answer
	// the client had given up on (499).
	want := report.EdgeLog{File: path, Format: "traefik", Requests: 11, FailuresFound: 3, FailuresNotFound: 1,
		RequestsByPath: map[string]int{"": 8, "edge": 3},
		Responses: []report.EdgeResponses{{Addr: "10.244.2.6:8080", T: -1, Responses: 1}, {Addr: "10.244.1.5:8080", T: 1, Responses: 2},
			{Addr: "10.244.3.9:8080", T: 2, Responses: 2}, {Addr: "10.244.2.6:8080", T: 3, Responses: 1}},
		// The requests that waited 100 ms or more inside the edge, by the
		// path their ID names (99 ms is the edge's own).
		Waits: []report.EdgeWaits{{Path: "edge", T: 2, Requests: 2}}}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("edge log %+v, want %+v", *got, want)
	}
	for i, addr := range []string{"10.244.1.5:8080", "10.244.2.6:8080", "", "", "10.244.3.9:8080"} {
		if rep.Failures[i].UpstreamAddr != addr {
			t.Errorf("failure %s: upstream %q, want %q", rep.Failures[i].RequestID, rep.Failures[i].UpstreamAddr, addr)
		}
	}
	// How long the edge had each request, where its line says (in ms,
	// to the microsecond); none without a line or a Duration.
	for i, d := range []float64{133478.123, 0, 0, 0, 2100.5} {
		if got := rep.Failures[i].EdgeDurationMS; got != d {
			t.Errorf("failure %s: edge duration %v ms, want %v", rep.Failures[i].RequestID, got, d)
		}
	}
	if got := readEdgeLog(context.Background(), rep, filepath.Join(t.TempDir(), "gone.log"), edgelog.FormatAuto, 0); got.Error == "" || got.FailuresFound != 0 {
		t.Errorf("a log gone since the preflight: %+v", *got)
	}
}

// nginx's log, its format told by its first line of the run's: the last
// server tried names the failure's pod, a line naming no server (no live
// upstreams) says the edge sent the request nowhere (found: no wait for
// another line), a request that waited on a server tried before the one
// that answered counts as a wait inside the edge, and a log with none of
// the run's lines leaves the format unknown.
func TestReadEdgeLogNginx(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nginx.log")
	log := `{"msec":"1796032800.900","request_time":"0.400","status":"200","upstream_addr":"10.244.1.5:8080","upstream_status":"200","upstream_response_time":"0.400","http_x_request_id":"other-1"}
{"msec":"1796032801.250","request_time":"0.001","status":"502","upstream_addr":"10.244.1.5:8080, 10.244.2.6:8080","upstream_status":"502, 502","upstream_response_time":"0.000, 0.001","http_x_request_id":"run1-7"}
{"msec":"1796032801.500","request_time":"1.002","status":"200","upstream_addr":"10.244.3.9:8080, 10.244.2.6:8080","upstream_status":"504, 200","upstream_response_time":"1.000, 0.002","http_x_request_id":"run1-8"}
{"msec":"1796032801.700","request_time":"0.000","status":"502","upstream_addr":"naive","upstream_status":"502","upstream_response_time":"0.000","http_x_request_id":"run1-9"}
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := &report.Report{StartedAt: time.Unix(1796032800, 0).UTC(), Config: report.Config{RunID: "run1", RequestIDHeader: "X-Request-Id"},
		Failures: []report.Failure{
			{RequestID: "run1-7", Class: report.ClassProxy5xx, ViaEdge: true},
			{RequestID: "run1-9", Class: report.ClassProxy5xx, ViaEdge: true},
		}}
	got := readEdgeLog(context.Background(), rep, path, edgelog.FormatAuto, 0)
	retried := 2 // run1-7 and run1-8 (other-1 is not the run's)
	want := report.EdgeLog{File: path, Format: "nginx", Requests: 3, FailuresFound: 1, FailuresNoBackend: 1, Retried: &retried,
		Responses: []report.EdgeResponses{{Addr: "10.244.2.6:8080", T: 0, Responses: 1}},
		Waits:     []report.EdgeWaits{{T: 0, Requests: 1}},
		// The attempts before the last, by the second nginx received
		// their request in: run1-8's at +0.498 s, run1-7's at +1.249 s.
		FailedAttempts: []report.EdgeFailedAttempts{{Addr: "10.244.3.9:8080", T: 0, Attempts: 1}, {Addr: "10.244.1.5:8080", T: 1, Attempts: 1}}}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("edge log %+v, want %+v", *got, want)
	}
	if up := rep.Failures[0].UpstreamAddr; up != "10.244.2.6:8080" || rep.Failures[0].EdgeDurationMS != 1 {
		t.Errorf("run1-7: upstream %q, %v ms: want the last server tried, 1 ms", up, rep.Failures[0].EdgeDurationMS)
	}
	if f := rep.Failures[1]; f.UpstreamAddr != "" || !f.EdgeNoBackend {
		t.Errorf("run1-9 (no live upstreams): upstream %q, no backend %v: want none, said", f.UpstreamAddr, f.EdgeNoBackend)
	}
	if rep.Failures[0].EdgeNoBackend {
		t.Errorf("run1-7 went to a backend, and is said to have had none")
	}
	rep.Config.RunID = "zz"
	if got := readEdgeLog(context.Background(), rep, path, edgelog.FormatAuto, 0); got.Format != edgelog.FormatAuto || got.Requests != 0 || got.Retried != nil {
		t.Errorf("no line of the run: %+v", *got)
	}
}
