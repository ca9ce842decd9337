package lab_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/edgelog"
	"github.com/rollprobe/rollprobe/internal/nginxtest"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
)

// nginxEdgePort is where the test's nginx listens on the hub.
const nginxEdgePort = 28080

// testNginxEdge: rollprobe run through a real nginx (Debian's) on the
// hub, which proxies to naive's pods by the addresses they had when it
// started: a view that never changes, as an edge whose controller stopped
// would hold. nginx tries the next pod when one fails (proxy_next_upstream)
// and takes a failed one out (max_fails=1) for longer than the run, so
// once the rollout has deleted every old pod it has none left: the last
// old pod's failure names it (nginx logs "that pod's address, naive": it
// tried the pod, then found no server left), and the requests after it
// find no live upstream ("naive" alone). The run reads nginx's log
// (edgelog.NginxLogFormat). Referee: nginx's own log, read here with the
// test's own parsing: every failure has its line, a line naming an
// address names the failure's pod (the pod with that address in the
// timeline, for certain, by the log), a line naming none leaves the
// failure on no pod, and those are the edge's own finding while the API
// listed the new pods serving; the requests nginx retried on another pod
// (the first old pods' deletions) are counted as its log lists them.
func testNginxEdge(t *testing.T, ctx context.Context, c *lab.Client) {
	bin := nginxtest.Bin(t)
	ensureSample(t, ctx, c, "naive")
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=naive"})
	if err != nil {
		t.Fatal(err)
	}
	var servers []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			servers = append(servers, fmt.Sprintf("server %s max_fails=1 fail_timeout=300s;", net.JoinHostPort(p.Status.PodIP, "8080")))
		}
	}
	if len(servers) == 0 {
		t.Fatal("no naive pod with an address")
	}
	logPath := startHubNginx(t, bin, strings.Join(servers, " "))

	r := startRunOn(t, nil, "naive", fmt.Sprintf("http://%s:%d/", netns.HubIP, nginxEdgePort),
		"--edge-access-log", logPath, "--edge-log-format", edgelog.FormatNginx).wait(t)
	if r.exit != 1 || r.rep == nil {
		t.Fatalf("exit %d (%v): want 1, every old pod gone from nginx's fixed view\n%s", r.exit, r.repErr, r.out())
	}
	rep := r.rep
	checkRunReport(t, r, "complete")
	if e := rep.EdgeLog; e == nil || e.Error != "" || e.Format != edgelog.FormatNginx || e.FailuresNotFound != 0 || e.Duplicates != 0 {
		t.Fatalf("edge log %+v: want nginx's, every failure's line found", rep.EdgeLog)
	}

	lines, received := readNginxLog(t, logPath)
	podByIP := map[string]string{}
	for _, e := range rep.Timeline {
		if e.Pod != "" && e.IP != "" {
			podByIP[e.IP] = e.Pod
		}
	}
	named, nowhere := 0, 0
	for _, f := range rep.Failures {
		tried, ok := lines[f.RequestID]
		if !ok {
			t.Errorf("failure %s (%s) has no line in nginx's log", f.RequestID, f.Class)
			continue
		}
		// nginx lists the servers it tried in turn, and the group's name
		// when it had none left to try next: the last address is the pod
		// the request went to last.
		last := ""
		for _, a := range tried {
			if _, err := netip.ParseAddrPort(a); err == nil {
				last = a
			}
		}
		addr, err := netip.ParseAddrPort(last)
		if err != nil {
			// The group's name alone: nginx sent the request nowhere.
			nowhere++
			if !f.EdgeNoBackend || f.LikelyPod != "" || f.UpstreamAddr != "" {
				t.Errorf("failure %s: nginx tried %q, no server; rollprobe: no backend %v, pod %q, upstream %q", f.RequestID, tried, f.EdgeNoBackend, f.LikelyPod, f.UpstreamAddr)
			}
			continue
		}
		named++
		pod := podByIP[addr.Addr().String()]
		if f.UpstreamAddr != last || f.EdgeNoBackend || f.LikelyPod != pod || f.Confidence != 1 || f.Evidence != report.EvidenceAccessLog {
			t.Errorf("failure %s: nginx tried %q (the last: pod %q); rollprobe: upstream %q, pod %q (%v, %s), no backend %v",
				f.RequestID, tried, pod, f.UpstreamAddr, f.LikelyPod, f.Confidence, f.Evidence, f.EdgeNoBackend)
		}
	}
	if named == 0 || nowhere == 0 || rep.EdgeLog.FailuresFound != named || rep.EdgeLog.FailuresNoBackend != nowhere {
		logNginxFailures(t, logPath)
		t.Errorf("%d failures nginx's log names a pod for, %d none; rollprobe's edge log %+v: want both kinds, the same counts", named, nowhere, *rep.EdgeLog)
	}
	// The requests nginx retried on another pod after an attempt failed
	// (the first old pods' deletions): counted as its log lists them.
	// The attempts before the last each failed: by pod, what nginx's
	// clients never saw fail.
	retried := 0
	failedOn := map[string]int{}
	// afterDeletion: by pod, how long after rollprobe received its
	// deletion nginx received the last request it then tried on the pod
	// in vain (nginx's clock, which the lab's namespaces share).
	deleted := deletionRequests(rep)
	afterDeletion := map[string]time.Duration{}
	for id, tried := range lines {
		var addrs []netip.AddrPort
		for _, a := range tried {
			if addr, err := netip.ParseAddrPort(a); err == nil {
				addrs = append(addrs, addr)
			}
		}
		if len(addrs) < 2 || !strings.HasPrefix(id, rep.Config.RunID+"-") {
			continue
		}
		retried++
		for _, a := range addrs[:len(addrs)-1] {
			pod := podByIP[a.Addr().String()]
			failedOn[pod]++
			if at, ok := deleted[pod]; ok && received[id].After(at) {
				afterDeletion[pod] = max(afterDeletion[pod], received[id].Sub(at))
			}
		}
	}
	if rep.EdgeLog.Retried == nil || *rep.EdgeLog.Retried != retried || retried == 0 {
		t.Errorf("rollprobe counts %v requests nginx retried on another pod, its log %d: want the same, some", rep.EdgeLog.Retried, retried)
	}
	// The pods table: each pod's failed attempts as nginx's log lists
	// them, 0 for a pod it never tried in vain.
	for _, p := range rep.Pods {
		if p.EdgeFailedAttempts == nil || *p.EdgeFailedAttempts != uint64(failedOn[p.Pod]) {
			t.Errorf("pod %s: rollprobe's edge_failed_attempts %v, nginx's log %d", p.Pod, p.EdgeFailedAttempts, failedOn[p.Pod])
		}
	}
	if fr := findingByID(rep, analysis.EdgeRetriesHidFailures); fr == nil {
		t.Errorf("findings %v: want %s for the %d requests nginx retried", findingIDs(rep), analysis.EdgeRetriesHidFailures, retried)
	} else {
		// Every pod nginx's view held was an old one, deleted in the run.
		ev := strings.Join(fr.Evidence, "\n")
		if !strings.Contains(fr.Title, fmt.Sprintf("retried %d requests on another pod after attempts failed on pods being deleted", retried)) ||
			!slices.Equal(fr.Pods, slices.Sorted(maps.Keys(failedOn))) {
			t.Errorf("%s: %q naming %v; nginx's log: %d retried, failed on %v", fr.ID, fr.Title, fr.Pods, retried, failedOn)
		}
		for pod, n := range failedOn {
			if pod == "" || !strings.Contains(ev, fmt.Sprintf("%d on pod %s (", n, pod)) {
				t.Errorf("nginx's log: %d attempts failed on pod %q; the finding says\n%s", n, pod, ev)
			}
		}
		// The preStop it names covers the attempts' window by nginx's own
		// log, whatever the clients saw: rollprobe reads it to the end of
		// the second, an upper bound of this.
		var window time.Duration
		for pod, w := range afterDeletion {
			window = max(window, w)
			i := slices.IndexFunc(fr.Evidence, func(line string) bool { return strings.Contains(line, fmt.Sprintf(" on pod %s (", pod)) })
			if i < 0 || !strings.Contains(fr.Evidence[i], "the last failed attempt at most") {
				t.Errorf("nginx's log: attempts failed on pod %s up to %s after its deletion; the finding says no window\n%s", pod, w, ev)
			}
		}
		if window > 0 && suggestedPreStop(fr) < analysis.PreStopSeconds(window) {
			t.Errorf("%s: suggested preStop %ds does not cover nginx's failed attempts up to %s after their pod's deletion (%ds): %s",
				fr.ID, suggestedPreStop(fr), window.Round(time.Millisecond), analysis.PreStopSeconds(window), fr.Fix)
		}
		t.Logf("nginx's failed attempts came up to %s after their pod's deletion (by pod %v); the finding's preStop %ds", window.Round(time.Millisecond), afterDeletion, suggestedPreStop(fr))
		t.Logf("%s: %s", fr.Title, ev)
	}
	fd := findingByID(rep, analysis.EdgeHadNoBackend)
	if fd == nil || !strings.Contains(fd.Title, "to send "+nRequests(nowhere)+" to") || strings.Contains(fd.Title, "listed 0 serving") {
		t.Errorf("findings %v (%+v): want %s for the %d sent nowhere, while the API listed serving endpoints", findingIDs(rep), fd, analysis.EdgeHadNoBackend, nowhere)
	}
	t.Logf("through nginx's fixed view: %d of %d failed (%v); %d named on the pod nginx's log names, %d sent nowhere; %d retried on another pod",
		rep.Totals.Failed, rep.Totals.Sent, nonZero(rep.Totals.ByClass), named, nowhere, retried)
}

// startHubNginx runs nginx (nginxtest) in the hub's namespace, proxying /
// to servers (nginx upstream server lines), logging in
// edgelog.NginxLogFormat; it returns the log's path.
func startHubNginx(t *testing.T, bin, servers string) string {
	t.Helper()
	n := nginxtest.New(t, bin)
	logPath := filepath.Join(n.Dir, "access.log")
	n.Start(t, nginxtest.Options{Prefix: []string{"ip", "netns", "exec", netns.LabNetNS}, HTTP: fmt.Sprintf(`  %s
  access_log %s rollprobe;
  upstream naive { %s }
  server {
    listen %s:%d;
    location / {
      proxy_pass http://naive;
      proxy_connect_timeout 1s;
    }
  }`, edgelog.NginxLogFormat, logPath, servers, netns.HubIP, nginxEdgePort)})
	return logPath
}

// readNginxLog is the referee's reading of nginx's log: by request ID,
// the entries of $upstream_addr (the servers nginx tried in turn, and the
// group's name when none was left), split on its commas, and when nginx
// received the request ($msec, when it logged it, less $request_time).
func readNginxLog(t *testing.T, path string) (tried map[string][]string, received map[string]time.Time) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tried, received = map[string][]string{}, map[string]time.Time{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line map[string]string
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("nginx's log: %v: %s", err, sc.Text())
		}
		id := line["http_x_request_id"]
		var addrs []string
		for _, s := range strings.Split(line["upstream_addr"], ",") {
			addrs = append(addrs, strings.TrimSpace(s))
		}
		tried[id] = addrs // one line per ID (the test checks no duplicates)
		logged, err1 := strconv.ParseFloat(line["msec"], 64)
		took, err2 := strconv.ParseFloat(line["request_time"], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("nginx's log: msec %q, request_time %q: %s", line["msec"], line["request_time"], sc.Text())
		}
		received[id] = time.UnixMilli(int64(math.Round((logged - took) * 1000)))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tried, received
}

// logNginxFailures logs the first lines of nginx's log that are not a
// 200, as nginx wrote them: the evidence when the test and rollprobe
// disagree.
func logNginxFailures(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Log(err)
		return
	}
	shown := 0
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" && !strings.Contains(line, `"status":"200"`) && shown < 12 {
			t.Logf("nginx: %s", line)
			shown++
		}
	}
}
