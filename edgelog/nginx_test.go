package edgelog

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/nginxtest"
)

// A real nginx (Debian's) in front of two backends and a closed port, with
// NginxLogFormat: what Read makes of its log agrees with the backends' own
// record of which requests each served, and with what the client saw.
// nginx tries the next server when one refuses (proxy_next_upstream's
// default), so some lines list two addresses; a group whose servers all
// refused leaves later requests none to try ("no live upstreams": the
// group's name where an address would be).
func TestReadNginxAgreesWithItsBackends(t *testing.T) {
	bin := nginxtest.Bin(t)
	var mu sync.Mutex
	servedBy := map[string]string{} // request ID -> the backend that answered it
	backend := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/slow/") {
				time.Sleep(slowFor)
			}
			mu.Lock()
			servedBy[r.Header.Get("X-Request-Id")] = addr
			mu.Unlock()
			fmt.Fprintln(w, "ok")
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return addr
	}
	a, b := backend(), backend()
	refusing, gone1, gone2 := closedPort(t), closedPort(t), closedPort(t)
	addr := closedPort(t)
	ngx := nginxtest.New(t, bin)
	ngx.Start(t, nginxtest.Options{HTTP: fmt.Sprintf(`  %[1]s
  access_log %[2]s/access.log rollprobe;
  upstream retried { server %[3]s max_fails=0; server %[4]s max_fails=0; server %[5]s max_fails=0; }
  upstream refused { server %[5]s; }
  upstream slow { server %[3]s; }
  upstream allgone { server %[6]s max_fails=1 fail_timeout=60s; server %[7]s max_fails=1 fail_timeout=60s; }
  server {
    listen %[8]s;
    location /retried/ { proxy_pass http://retried; }
    location /refused/ { proxy_pass http://refused; }
    location /slow/ { proxy_pass http://slow; }
    location /allgone/ { proxy_pass http://allgone; }
  }`, NginxLogFormat, ngx.Dir, a, b, refusing, gone1, gone2, addr)})

	type sent struct {
		path       string
		status     int
		start, end time.Time
	}
	requests := map[string]sent{}
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(id, path string) {
		req, err := http.NewRequest("GET", "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Request-Id", id)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", id, path, err)
		}
		resp.Body.Close()
		requests[id] = sent{path, resp.StatusCode, start, time.Now()}
	}
	n := 0
	for _, p := range []struct {
		path  string
		count int
	}{{"/retried/", 30}, {"/refused/", 5}, {"/slow/", 5}, {"/allgone/", 3}} {
		for range p.count {
			n++
			send(fmt.Sprintf("run1-%d", n), p.path)
		}
	}
	send("someone-else-1", "/retried/")
	ngx.Signal(t, "quit") // its worker finishes and closes the log

	path := filepath.Join(ngx.Dir, "access.log")
	log, err := ReadFile(path, FormatAuto, "X-Request-Id", []string{"run1"})
	if err != nil {
		t.Fatal(err)
	}
	if log.Format != FormatNginx || len(log.ByID) != n || log.Unreadable != 0 || log.Duplicates != 0 {
		t.Fatalf("format %q, %d lines of the run's %d requests, %d unreadable, %d duplicates", log.Format, len(log.ByID), n, log.Unreadable, log.Duplicates)
	}
	// What makes this test: lines that list the server refused before the
	// one that answered, and lines naming the group, not a server.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var retried, noneLeft int
	servers := map[string]int{} // request ID -> the servers nginx tried
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var fields map[string]string
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("nginx wrote a line that is not a JSON object of strings (%v): %s", err, line)
		}
		switch up := fields["upstream_addr"]; {
		case strings.Contains(up, ", "):
			retried++
		case up == "allgone":
			noneLeft++
		}
		for _, a := range strings.Split(fields["upstream_addr"], ", ") {
			if _, _, err := net.SplitHostPort(a); err == nil {
				servers[fields["http_x_request_id"]]++
			}
		}
	}
	if retried == 0 || noneLeft == 0 {
		t.Fatalf("%d lines list two servers, %d name none: this test needs both\n%s", retried, noneLeft, raw)
	}
	const slack = 2 * time.Millisecond // nginx logs its times to the millisecond
	for id, s := range requests {
		if !strings.HasPrefix(id, "run1-") {
			continue
		}
		e := log.ByID[id]
		want := ""
		switch s.path {
		case "/retried/", "/slow/":
			want = servedBy[id]
		case "/refused/":
			want = refusing
		}
		if _, served := servedBy[id]; (s.path == "/refused/" || s.path == "/allgone/") && served {
			t.Errorf("%s %s: a backend served it", id, s.path)
		}
		if s.path == "/allgone/" && e.Upstream != "" && e.Upstream != gone1 && e.Upstream != gone2 {
			t.Errorf("%s %s: upstream %q, want one of its servers (%s, %s) or none", id, s.path, e.Upstream, gone1, gone2)
		}
		if s.path != "/allgone/" && e.Upstream != want {
			t.Errorf("%s %s: upstream %q, want %q (the backend's own record)", id, s.path, e.Upstream, want)
		}
		if e.Tried != servers[id] {
			t.Errorf("%s %s: tried %d servers, nginx's line lists %d", id, s.path, e.Tried, servers[id])
		}
		// The attempts before the last failed: by construction, only the
		// closed ports refuse, the backends answer every request.
		if len(e.FailedOn) != max(e.Tried-1, 0) {
			t.Errorf("%s %s: failed on %v, of %d servers tried", id, s.path, e.FailedOn, e.Tried)
		}
		for _, f := range e.FailedOn {
			if f != refusing && f != gone1 && f != gone2 {
				t.Errorf("%s %s: failed on %s, which answers every request (the refusing ports: %s, %s, %s)", id, s.path, f, refusing, gone1, gone2)
			}
		}
		if e.Status != s.status || (s.status == 200) != (e.OriginStatus == 200) {
			t.Errorf("%s %s: status %d (origin %d), the client got %d", id, s.path, e.Status, e.OriginStatus, s.status)
		}
		// nginx had the request after the client sent it and ended it
		// before the client had the answer; the slow ones took at least
		// the backend's sleep.
		if e.Start.Before(s.start.Add(-slack)) || e.Start.Add(e.Duration).After(s.end.Add(slack)) || (s.path == "/slow/" && e.Duration < slowFor-slack) {
			t.Errorf("%s %s: nginx had it from %s for %s; the client sent it at %s and had the answer at %s",
				id, s.path, e.Start.Format("15:04:05.000"), e.Duration, s.start.Format("15:04:05.000"), s.end.Format("15:04:05.000"))
		}
	}
	// The refused group's 502s are nginx's own, for the one server it had;
	// the last all-gone request found no server left to try.
	if e := log.ByID[fmt.Sprintf("run1-%d", n)]; e.Status != 502 || e.Upstream != "" {
		t.Errorf("no live upstreams: %+v, want a 502 naming no backend", e)
	}
}

// slowFor is how long the backends take to answer a /slow/ request.
const slowFor = 30 * time.Millisecond

// closedPort is a loopback address nothing listens on: a connect to it is
// refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
