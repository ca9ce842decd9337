package lab_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// The edge: names through the lab's CoreDNS, and the samples through
// Traefik (Ingress and Gateway API) over TLS, with Traefik's own access log
// as the referee of what reached which pod.
func testEdge(t *testing.T, ctx context.Context, c *lab.Client) {
	cfg := lab.Config{StateDir: stateDir}
	edgeArgs := []string{"--cacert", cfg.EdgeCAPath()}

	t.Run("names resolve through CoreDNS on a node", func(t *testing.T) {
		ensureSample(t, ctx, c, "graceful")
		for _, name := range []string{"graceful", "graceful.default.svc", "graceful.default.svc.cluster.local"} {
			out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
				"probe", "http://"+name+"/", "--rate", "20", "--duration", "1s", "--backend-header", "X-Pod-Name", "--progress", "0")
			if err != nil {
				t.Fatalf("probe http://%s/: %v\n%s", name, err, out)
			}
		}
		// A name CoreDNS does not know fails as dns, never as the target's
		// refusal: the class that names the cause.
		dir := t.TempDir()
		out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
			"probe", "http://no-such-service.default.svc/", "--rate", "20", "--duration", "1s", "--progress", "0",
			"--report", filepath.Join(dir, "r.json"))
		rep, rerr := report.ReadFile(filepath.Join(dir, "r.json"))
		if err == nil || rerr != nil || rep.Totals.Failed == 0 || rep.Totals.ByClass[report.ClassDNS] != rep.Totals.Failed {
			t.Fatalf("unknown name: %v, report %v %+v\n%s", err, rerr, rep, out)
		}
	})

	t.Run("names resolve through CoreDNS in prober pods", func(t *testing.T) {
		ensureSample(t, ctx, c, "graceful")
		r := startRunOn(t, []string{"--client"}, "graceful", "http://graceful.default.svc/", proberArgs...).wait(t)
		if r.rep == nil || r.rep.Totals.OK == 0 {
			t.Fatalf("exit %d, report %v\n%s", r.exit, r.repErr, r.out())
		}
		checkClean(t, r)
		checkProbers(t, ctx, c, r.rep)
	})

	t.Run("naive through the ingress over https", func(t *testing.T) {
		ensureSample(t, ctx, c, "naive")
		waitEdge(t, "https://naive.lab.example/", cfg.EdgeCAPath())
		hub := edgeCapture(t)
		// Traefik's access log read by rollprobe itself (--edge-access-log):
		// where it forwarded each failed request.
		r := startRunOn(t, nil, "naive", "https://naive.lab.example/", append(edgeArgs, "--conn", "new", "--edge-access-log", cfg.TraefikAccessLog(), "--edge-log-wait", refereeLogWait.String())...).wait(t)
		checkEdgeReport(t, r)
		if r.exit != 1 || r.rep.Totals.Failed == 0 {
			t.Fatalf("exit %d, %d failed: want 1 with failures\n%s", r.exit, r.rep.Totals.Failed, r.out())
		}
		byClass := nonZero(r.rep.Totals.ByClass)
		checkEdgeClasses(t, r.rep, "", byClass, hub)
		if byClass[report.ClassProxy5xx] == 0 {
			t.Fatalf("no proxy_5xx through the edge (%v)", byClass)
		}
		checkNaive(t, r) // every failure on an old pod, the propagation finding sized to cover them
		sentTo := refereeAccessLog(t, cfg, r.rep, "naive.lab.example")
		checkEdgeLogNamesThePods(t, r.rep, sentTo)
	})

	t.Run("naive at the Service and through the ingress, side by side", func(t *testing.T) {
		ensureSample(t, ctx, c, "naive")
		waitEdge(t, "https://naive.lab.example/", cfg.EdgeCAPath())
		// At 100 requests a second a path, as from the probers below: at
		// the default 200 a path, 400 new connections a second (half of
		// them TLS handshakes with Traefik) from the client host beside
		// the lab starved the 2-core CI machine (07b8560's: 36 connects and
		// 163 handshakes to Traefik timed out, begun in one 240 ms burst
		// with the prober 150 ms behind its schedule).
		hub := edgeCapture(t)
		r := startRunOn(t, nil, "naive", "svc=http://naive.default.svc/",
			append(edgeArgs, "--target", "edge=https://naive.lab.example/", "--conn", "new", "--rate", "100",
				"--edge-access-log", cfg.TraefikAccessLog(), "--edge-log-wait", refereeLogWait.String())...).wait(t)
		svc, edge := checkSideBySide(t, r, hub)
		checkNaive(t, r) // every failure on an old pod, the preStop covering both paths
		t.Logf("side by side: svc %d of %d failed (%v), edge %d of %d (%v)", svc.Totals.Failed, svc.Totals.Sent, nonZero(svc.Totals.ByClass),
			edge.Totals.Failed, edge.Totals.Sent, nonZero(edge.Totals.ByClass))
	})

	t.Run("naive at the Service and through the ingress from two probers each", func(t *testing.T) {
		ensureSample(t, ctx, c, "naive")
		waitEdge(t, "https://naive.lab.example/", cfg.EdgeCAPath())
		// From the client host, which reaches neither the ClusterIP nor
		// (by name) the edge: the probers do, each path from its own two.
		// At 100 requests a second a path, not the default 200: four
		// prober pods each shaking hands with Traefik for every request
		// starved the 2-core machine in a warm CI run (prober pods sent
		// ClientHellos up to 2 s after their connects, connects to the
		// hub timed out, CoreDNS answers came late), which is the
		// machine's limit, not what this test is for.
		hub := edgeCapture(t)
		r := startRunOn(t, []string{"--client"}, "naive", "svc=http://naive.default.svc/",
			append(append(edgeArgs, "--target", "edge=https://naive.lab.example/", "--conn", "new", "--rate", "100",
				"--edge-access-log", cfg.TraefikAccessLog(), "--edge-log-wait", refereeLogWait.String()), proberArgs...)...).wait(t)
		svc, edge := checkSideBySide(t, r, hub)
		checkPathProbers(t, r.rep, r.rep.Config.Rate/2)
		checkNaive(t, r) // as from this process: every failure on an old pod, the preStop covering both paths
		noProberPods(t, ctx, c)
		t.Logf("from probers: svc %d of %d failed (%v), edge %d of %d (%v)", svc.Totals.Failed, svc.Totals.Sent, nonZero(svc.Totals.ByClass),
			edge.Totals.Failed, edge.Totals.Sent, nonZero(edge.Totals.ByClass))
	})

	t.Run("naive through an nginx whose view never changes, its log read", func(t *testing.T) { testNginxEdge(t, ctx, c) })

	t.Run("a route that retries: the drops it hides show as latency", func(t *testing.T) {
		ensureSample(t, ctx, c, "naive")
		waitEdge(t, "https://naive-retry.lab.example/", cfg.EdgeCAPath())
		r := startRunOn(t, nil, "naive", "svc=http://naive.default.svc/",
			append(edgeArgs, "--target", "retry=https://naive-retry.lab.example/", "--edge-access-log", cfg.TraefikAccessLog())...).wait(t)
		checkEdgeReport(t, r)
		rep := r.rep
		if len(rep.Paths) != 2 {
			t.Fatalf("paths %+v\n%s", rep.Paths, r.out())
		}
		retry := rep.Paths[1]
		// The Service's path, by its cluster DNS name, is known to enter
		// at its cluster IP (so its slow seconds are not read as a
		// proxy's retries), by where its connections went; the retry
		// path's name is the edge's.
		if e := rep.Paths[0].Entry; e == nil || e.Via != report.ViaClusterIP || e.From != report.EntryFromDialled || retry.Entry != nil {
			t.Errorf("entries: svc %+v (dialled %v), retry %+v (dialled %v): want the Service's cluster IP from what it dialled, then none",
				e, rep.Paths[0].Prober.Dialled, retry.Entry, retry.Prober.Dialled)
		}
		byID := readAccessLog(t, cfg, retry.RunID, "naive-retry.lab.example")
		f := findingByID(rep, analysis.LatencySpikeAtDeletion)
		if f == nil {
			// Every path's seconds, the pods' steps and Traefik's slowest
			// entries: the rule also weighs the Service path's p99 in the
			// same second, and one warm CI run (of e2c5d98) had the retry
			// path at 286-326ms for three seconds with no finding and only
			// the retry path shown.
			last := 0 // the longest path's last second: the run's whole span
			for _, p := range rep.Paths {
				last = max(last, len(p.Series))
			}
			t.Fatalf("no %s finding (findings %v):\n%s", analysis.LatencySpikeAtDeletion, findingIDs(rep),
				spikeContext(rep, byID, 0, last, rep.StartedAt.Add(-time.Second), rep.StartedAt.Add(time.Duration(last+1)*time.Second)))
		}
		// Only the path through a proxy can have retried: the Service path
		// has nothing between the prober and the pods.
		ev := strings.Join(f.Evidence, "\n")
		if strings.Contains(ev, "svc: the successes'") || !strings.Contains(ev, "retry: the successes'") {
			t.Fatalf("the finding names the wrong paths:\n%s", ev)
		}
		// Referee: Traefik's access log. Every spike rollprobe flagged on
		// the retry path holds successes that waited inside Traefik, outside
		// the attempt that answered, at least the finding's floor.
		spikes := regexp.MustCompile(`retry: the successes' p99 time from the request's write reached \d+ms from \+(\d+)s to \+(\d+)s`).FindAllStringSubmatch(ev, -1)
		for _, m := range spikes {
			from, _ := strconv.Atoi(m[1])
			to, _ := strconv.Atoi(m[2])
			// A success counted in second from began at most the route's
			// longest retry chain earlier (3 attempts of a 1 s dial and
			// the backoff: about 3.4 s), so Traefik's start times from 5 s
			// before the span to its end hold every request it counted.
			lo, hi := rep.StartedAt.Add(time.Duration(from-5)*time.Second), rep.StartedAt.Add(time.Duration(to)*time.Second)
			waited := 0
			for _, e := range byID {
				if e.DownstreamStatus == 200 && e.Overhead >= 100*time.Millisecond && !e.StartUTC.Before(lo) && e.StartUTC.Before(hi) {
					waited++
				}
			}
			if waited == 0 {
				t.Errorf("rollprobe flagged +%ds to +%ds on the retry path; Traefik's log has no success begun then that waited 100ms inside it\n%s",
					from, to, spikeContext(rep, byID, from, to, lo, hi))
			}
			t.Logf("spike +%ds to +%ds: %d successes Traefik logged as waiting >= 100ms inside it", from, to, waited)
		}
		if len(spikes) == 0 {
			t.Fatalf("no spike of the retry path in the evidence:\n%s", ev)
		}
		// rollprobe read the same log (--edge-access-log): the requests it
		// counts as having waited inside Traefik for each spike are those
		// the test's own reading of the log finds (Overhead of 100 ms or
		// more, received in the seconds the evidence names), and the title
		// says the waits were measured.
		counted := regexp.MustCompile(`the edge's access log: (\d+) of retry's requests it received from ([+-]\d+)s to \+(\d+)s waited 100ms or more inside it`).FindAllStringSubmatch(ev, -1)
		if len(counted) != len(spikes) || !strings.HasSuffix(f.Title, "retried inside the proxy (its access log shows the waits)") {
			t.Fatalf("title %q; the spikes' waits from the access log %v: want one count a spike (%d), measured\n%s", f.Title, counted, len(spikes), ev)
		}
		for _, m := range counted {
			n, _ := strconv.Atoi(m[1])
			from, _ := strconv.Atoi(m[2])
			to, _ := strconv.Atoi(m[3])
			lo, hi := rep.StartedAt.Add(time.Duration(from)*time.Second), rep.StartedAt.Add(time.Duration(to)*time.Second)
			want := 0
			for _, e := range byID {
				if e.Overhead >= 100*time.Millisecond && !e.StartUTC.Before(lo) && e.StartUTC.Before(hi) {
					want++
				}
			}
			if n != want || n == 0 {
				t.Errorf("+%ds to +%ds: rollprobe counted %d requests that waited inside Traefik, Traefik's log %d", from, to, n, want)
			}
			t.Logf("+%ds to +%ds: %d requests waited 100ms or more inside Traefik (rollprobe and the test's reading agree)", from, to, n)
		}
	})

	t.Run("the edge frozen while pods roll: its drops are named on no pod", func(t *testing.T) {
		traefik := componentPID(t, "traefik")
		ensureSample(t, ctx, c, "graceful")
		waitEdge(t, "https://graceful.lab.example/", cfg.EdgeCAPath())
		hub := edgeCapture(t)
		run := startRunOn(t, nil, "graceful", "https://graceful.lab.example/", append(edgeArgs, "--conn", "new")...)
		run.waitFor(t, "triggered: restart")
		// The graceful sample drops nothing of its own: freeze Traefik
		// (SIGSTOP) while its pods go away. Its kernel still takes
		// connections; their TLS handshakes wait on Traefik.
		time.Sleep(1500 * time.Millisecond)
		stoppedAt, contAt := freeze(t, "traefik", edgeFreeze, traefik)
		r := run.wait(t)
		checkEdgeReport(t, r)
		rep := r.rep
		byClass := nonZero(rep.Totals.ByClass)
		if r.exit != 1 || byClass[report.ClassTLS] == 0 {
			t.Fatalf("exit %d, classes %v: want 1 with tls failures (Traefik frozen %+.2fs to %+.2fs)\n%s", r.exit, byClass,
				stoppedAt.Sub(rep.StartedAt).Seconds(), contAt.Sub(rep.StartedAt).Seconds(), r.out())
		}
		// Two kinds of failure, no other. The edge's own: handshakes
		// Traefik left unanswered while frozen (or connections to it not up
		// in time: a loaded run's prober sent one SYN 1.8 s late), each held
		// to the hub's capture, on no pod, claimed by the edge's finding
		// (checkEdgeClasses). And, once it ran again, what a lagging edge
		// does to old pods that stopped after their preStop sleep while
		// Traefik, its view of the endpoints behind by the freeze, still
		// sent them requests: 502s, or waits on a vanished pod's IP until
		// the prober gave up (the first runs: 62 proxy_5xx from 1.5 s to
		// 2.7 s after SIGCONT; then 62 and 33 timeouts): the pods'
		// shutdown outran the edge's view, which the propagation finding
		// names, each on an old pod.
		for class := range byClass {
			if class != report.ClassOK && !edgeOwnClass(class) && class != report.ClassProxy5xx && class != report.ClassTimeout {
				t.Errorf("%s with Traefik frozen during a graceful rollout: want only tls, connect_timeout, proxy_5xx and timeout (%v)", class, byClass)
				logFailuresOfClass(t, rep, "", class)
			}
		}
		checkEdgeClasses(t, rep, "", byClass, hub)
		// The test's own referee: each of the edge's own failures began
		// while Traefik was frozen, or at most the connect timeout before
		// (caught by it), or after it while Traefik, thawed, had not yet
		// caught up with what waited on it (the busy period the freeze
		// began, by the hub's capture: a CI rehearsal on 2026-12-02, the
		// machine loaded, had 326 handshakes fail up to 2.8 s after
		// SIGCONT, each answered late or never); no 502 or timeout began
		// before the freeze.
		caughtUp := freezeBusyEnd(hub, contAt)
		var lastOwn time.Time
		for _, f := range rep.Failures {
			early, late := stoppedAt, contAt
			if edgeOwnClass(f.Class) {
				if f.Start.After(lastOwn) {
					lastOwn = f.Start
				}
				early = stoppedAt.Add(-prober.DefaultConnectTimeout)
				if caughtUp.After(late) {
					late = caughtUp
				}
			}
			if f.Start.Before(early) || (edgeOwnClass(f.Class) && f.Start.After(late)) {
				t.Errorf("%s %s began %+.3fs, outside what Traefik's freeze (%+.3fs to %+.3fs, caught up with its queue at %+.3fs) explains", f.RequestID, f.Class,
					f.Start.Sub(rep.StartedAt).Seconds(), stoppedAt.Sub(rep.StartedAt).Seconds(), contAt.Sub(rep.StartedAt).Seconds(), caughtUp.Sub(rep.StartedAt).Seconds())
			}
		}
		t.Logf("Traefik thawed at %+.3fs, caught up with its queue at %+.3fs; the edge's own failures began until %+.3fs",
			contAt.Sub(rep.StartedAt).Seconds(), caughtUp.Sub(rep.StartedAt).Seconds(), lastOwn.Sub(rep.StartedAt).Seconds())
		if byClass[report.ClassProxy5xx]+byClass[report.ClassTimeout] > 0 {
			requireAttributed(t, rep, rep.Rollout.OldRevision, func(f report.Failure) bool { return !edgeOwnClass(f.Class) })
			if f := findingByID(rep, analysis.StopsBeforePropagation); f == nil || strings.Contains(strings.Join(f.Evidence, " "), "tls") {
				t.Errorf("the propagation finding must name the 502s and timeouts and only them: %+v", f)
			}
		}
		if findingByID(rep, analysis.Unexplained) != nil {
			t.Errorf("failures left unexplained (findings %v)", findingIDs(rep))
		}
		refereeAccessLog(t, cfg, rep, "graceful.lab.example")
		t.Logf("Traefik frozen %.1fs: %d of %d requests failed (%v)", contAt.Sub(stoppedAt).Seconds(), rep.Totals.Failed, rep.Totals.Sent, byClass)
	})

	t.Run("graceful through the Gateway over https drops nothing", func(t *testing.T) {
		ensureSample(t, ctx, c, "graceful")
		waitEdge(t, "https://graceful-gw.lab.example/", cfg.EdgeCAPath())
		hub := edgeCapture(t)
		r := startRunOn(t, nil, "graceful", "https://graceful-gw.lab.example/", append(edgeArgs, "--edge-access-log", cfg.TraefikAccessLog())...).wait(t)
		checkEdgeReport(t, r)
		checkCleanThroughTheEdge(t, r, hub)
		sentTo := refereeAccessLog(t, cfg, r.rep, "graceful-gw.lab.example")
		checkEdgeLogNamesThePods(t, r.rep, sentTo) // an HTTPRoute's lines as an Ingress's
	})

	t.Run("gRPC through the ingress over https (ALPN h2)", func(t *testing.T) { testGRPCThroughTheEdge(t, ctx, c) })

	t.Run("a route weighted by hand, or mirrored, loses a Service: 404s, or 503s allowing empty Services or through a Gateway", func(t *testing.T) {
		testTraefikWeightedByHand(t, ctx, c)
	})

	t.Run("a route across namespaces: the doctor reads it, only a Traefik allowing it builds it", func(t *testing.T) {
		testTraefikCrossNamespace(t, ctx, c)
	})

	t.Run("one edge address by IP with the name users take (--connect-to)", func(t *testing.T) {
		ensureSample(t, ctx, c, "graceful")
		waitEdge(t, "https://graceful.lab.example/", cfg.EdgeCAPath())
		// Port 8443 has no listener anywhere: the requests can only succeed
		// if every connection goes to --connect-to, while the name stays
		// in the TLS server name and the Host header (Traefik routes by it).
		dir := t.TempDir()
		out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
			"probe", "https://graceful.lab.example:8443/", "--connect-to", netns.HubIP+":443", "--cacert", cfg.EdgeCAPath(),
			"--backend-header", "X-Pod-Name", "--rate", "20", "--duration", "1s", "--progress", "0", "--report", filepath.Join(dir, "r.json"))
		rep, rerr := report.ReadFile(filepath.Join(dir, "r.json"))
		if err != nil || rerr != nil || rep.Totals.OK == 0 || rep.Totals.OK != rep.Totals.Sent || rep.Config.ConnectTo != netns.HubIP+":443" || len(rep.Totals.ByBackend) == 0 {
			t.Fatalf("exit %d, report %v %+v\n%s", exitCode(err), rerr, rep, out)
		}
	})

	t.Run("a CA that did not sign the edge's certificate", func(t *testing.T) {
		ensureSample(t, ctx, c, "graceful")
		dir := t.TempDir()
		// The apiserver's self-signed certificate: a real CA file, not the edge's.
		other := filepath.Join(stateDir, "pki", "apiserver", "apiserver.crt")
		out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
			"probe", "https://graceful.lab.example/", "--cacert", other, "--rate", "20", "--duration", "1s",
			"--progress", "0", "--report", filepath.Join(dir, "r.json"))
		rep, rerr := report.ReadFile(filepath.Join(dir, "r.json"))
		if exitCode(err) != 1 || rerr != nil || rep.Totals.Failed == 0 || rep.Totals.ByClass[report.ClassTLS] != rep.Totals.Failed {
			t.Fatalf("exit %d, report %v, classes %v\n%s", exitCode(err), rerr, rep, out)
		}
	})
}

// testEdgeLag: with the ingress hearing of endpoint changes lag late
// (lab up --edge-lag), Traefik keeps routing to a deleted naive pod at least
// that long after its deletion, so the edge's failures come at least lag
// after the deletion of the pod Traefik sent them to (its access log says
// which), and the suggested preStop covers them (checkNaive).
func testEdgeLag(t *testing.T, ctx context.Context, c *lab.Client, lag time.Duration) {
	cfg := lab.Config{StateDir: stateDir}
	apply(t, "naive")
	ensureSample(t, ctx, c, "naive")
	waitEdge(t, "https://naive.lab.example/", cfg.EdgeCAPath())
	hub := edgeCapture(t)
	r := startRunOn(t, nil, "naive", "https://naive.lab.example/", "--cacert", cfg.EdgeCAPath(), "--conn", "new").wait(t)
	checkEdgeReport(t, r)
	if r.exit != 1 || r.rep.Totals.Failed == 0 {
		t.Fatalf("exit %d, %d failed: want 1 with failures\n%s", r.exit, r.rep.Totals.Failed, r.out())
	}
	// checkNaive leaves the edge's own failed handshakes and connects out
	// of the pods': here they are held to the hub's capture, as in the
	// edge suite.
	heldAtTheEdge(t, r, hub)
	checkNaive(t, r)
	sentTo := refereeAccessLog(t, cfg, r.rep, "naive.lab.example")
	// The window as the referee saw it: from the deletion of the pod
	// Traefik sent each failed request to.
	window, last := deletionWindow(r.rep, func(f report.Failure) string { return sentTo[f.RequestID] })
	t.Logf("with the edge %s late, Traefik sent requests to a deleted pod up to %s after its deletion", lag, window)
	if window < lag {
		t.Fatalf("Traefik sent requests to deleted pods at most %s after their deletion, want at least its %s lag", window, lag)
	}
	// The fix is sized to cover the edge's window as the referee saw it.
	propagation := findingByID(r.rep, analysis.StopsBeforePropagation)
	if sleep := suggestedPreStop(propagation); time.Duration(sleep)*time.Second < window {
		t.Fatalf("suggested preStop %ds does not cover the %s Traefik kept sending to deleted pods\nthat failure: %s", sleep, window, failureJSON(last))
	}
}

// checkSideBySide holds a naive rollout probed at the Service (path svc)
// and through the ingress over https (path edge) to what both paths must
// show, and the edge path to Traefik's access log (its requests picked by
// the run's request IDs, or by its own probers' when probers sent them).
func checkSideBySide(t *testing.T, r *runResult, hub *capture.Capture) (svc, edge report.PathReport) {
	t.Helper()
	checkEdgeReport(t, r)
	rep := r.rep
	if r.exit != 1 || len(rep.Paths) != 2 || rep.Paths[0].Name != "svc" || rep.Paths[1].Name != "edge" {
		t.Fatalf("exit %d, paths %+v: want 1 with the paths svc and edge\n%s", r.exit, rep.Paths, r.out())
	}
	svc, edge = rep.Paths[0], rep.Paths[1]
	// Both paths drop on a naive rollout, each its own way: the Service by
	// connection failures, the edge by Traefik's answers.
	if svc.Totals.Failed == 0 || edge.Totals.Failed == 0 || svc.Verdict.Pass || edge.Verdict.Pass {
		t.Fatalf("svc failed %d (%v), edge %d (%v): want both to drop", svc.Totals.Failed, svc.Verdict.Reasons, edge.Totals.Failed, edge.Verdict.Reasons)
	}
	checkEdgeClasses(t, rep, "edge", nonZero(edge.Totals.ByClass), hub)
	if svc.Totals.ByClass[report.ClassProxy5xx] != 0 {
		t.Errorf("proxy_5xx on the Service's path, which has no proxy (%v)", nonZero(svc.Totals.ByClass))
	}
	for _, f := range rep.Failures {
		if f.Path == "svc" && f.ViaEdge {
			t.Errorf("a failure on the Service's path is marked via_edge: %s -> %s (%s)", f.LocalAddr, f.RemoteAddr, f.Class)
		}
	}
	if rep.Totals.Sent != svc.Totals.Sent+edge.Totals.Sent || rep.Totals.Failed != svc.Totals.Failed+edge.Totals.Failed {
		t.Fatalf("the run's totals (%d sent, %d failed) are not its paths' sum", rep.Totals.Sent, rep.Totals.Failed)
	}
	byPath := map[string]uint64{}
	for _, f := range rep.Failures {
		byPath[f.Path]++
	}
	if rep.FailureInfo.Kept == int(rep.FailureInfo.Total) && (byPath["svc"] != svc.Totals.Failed || byPath["edge"] != edge.Totals.Failed) {
		t.Errorf("failures by path %v; the paths counted svc %d, edge %d", byPath, svc.Totals.Failed, edge.Totals.Failed)
	}
	if ev := strings.Join(findingByID(rep, analysis.StopsBeforePropagation).Evidence, "\n"); !strings.Contains(ev, "by path, the last such failure") {
		t.Errorf("the propagation finding does not compare the paths:\n%s", ev)
	}
	// The edge path, as Traefik's access log saw it.
	edgeView := *rep
	edgeView.Config.RunID, edgeView.Totals, edgeView.Failures, edgeView.Probers = edge.RunID, edge.Totals, nil, nil
	for _, f := range rep.Failures {
		if f.Path == "edge" {
			edgeView.Failures = append(edgeView.Failures, f)
		}
	}
	for _, p := range rep.Probers {
		if p.Path == "edge" {
			edgeView.Probers = append(edgeView.Probers, p)
		}
	}
	sentTo := refereeAccessLog(t, lab.Config{StateDir: stateDir}, &edgeView, "naive.lab.example")
	if rep.EdgeLog != nil {
		checkEdgeLogNamesThePods(t, &edgeView, sentTo)
	}
	return svc, edge
}

// checkEdgeLogNamesThePods holds a run that read Traefik's access log
// (--edge-access-log) to it: every failure that reached Traefik as a
// request is named, for certain, on the pod the referee's own reading of
// the log (sentTo: request ID to pod) says Traefik forwarded it to, with
// the log as its evidence (or the backend header, when the pod's own
// answer named it); one that never got past Traefik's handshake names no
// pod; the report's counts are those failures.
func checkEdgeLogNamesThePods(t *testing.T, rep *report.Report, sentTo map[string]string) {
	t.Helper()
	e := rep.EdgeLog
	if e == nil || e.Error != "" || e.Format != "traefik" || e.Duplicates != 0 {
		t.Fatalf("edge log %+v: want Traefik's read", e)
	}
	reached, byLog, noServer := 0, 0, 0
	for _, f := range rep.Failures {
		hit, ok := sentTo[f.RequestID]
		if !ok {
			if f.LikelyPod != "" || f.UpstreamAddr != "" {
				t.Errorf("failure %s (%s) never reached Traefik as a request, yet names %q at %q", f.RequestID, f.Class, f.LikelyPod, f.UpstreamAddr)
			}
			continue
		}
		reached++
		if hit == "" { // Traefik chose no server (none left): no pod to name from its log
			noServer++
			if f.UpstreamAddr != "" {
				t.Errorf("failure %s: upstream %q where Traefik logged none", f.RequestID, f.UpstreamAddr)
			}
			continue
		}
		if f.Evidence == report.EvidenceAccessLog {
			byLog++
		}
		if f.LikelyPod != hit || f.Confidence != 1 || (f.Evidence != report.EvidenceAccessLog && f.Evidence != report.EvidenceBackendHeader) {
			t.Errorf("failure %s (%s): %s (confidence %.2f, %s), want %s, certain, as Traefik forwarded it", f.RequestID, f.Class, f.LikelyPod, f.Confidence, f.Evidence, hit)
		}
	}
	if e.FailuresFound != reached-noServer || e.FailuresNotFound != noServer {
		t.Errorf("edge log %+v: want %d failures found (those that reached Traefik and a server), %d without a server", e, reached-noServer, noServer)
	}
	// What each pod served, from the log (as a run without a backend
	// header shows it), against the pods' own word: the backend header
	// each answer carried, counted by the prober. (The log's count leaves
	// 5xx answers out, as Traefik logs its own 502s like a pod's; the
	// demo app answers none.)
	for _, p := range rep.Pods {
		switch {
		case p.ServedAccessLog == nil:
			t.Errorf("pod %s: no count from the access log", p.Pod)
		case *p.ServedAccessLog != rep.Totals.ByBackend[p.Pod]:
			t.Errorf("pod %s: %d served by the access log, %d answers named it (backend header)", p.Pod, *p.ServedAccessLog, rep.Totals.ByBackend[p.Pod])
		}
	}
	// What the timeline alone gives on the same failures (a run without
	// the log): the same report analysed again without the addresses.
	inferred := *rep
	inferred.Failures = nil
	for _, f := range rep.Failures {
		f.UpstreamAddr, f.LikelyPod, f.Confidence, f.Candidates, f.Evidence, f.Context = "", "", 0, nil, "", ""
		inferred.Failures = append(inferred.Failures, f)
	}
	certainBefore, agreeBefore := 0, 0
	for _, f := range analysis.Explain(&inferred).Failures {
		if hit := sentTo[f.RequestID]; hit != "" && f.Confidence == 1 {
			certainBefore++
			if f.LikelyPod == hit {
				agreeBefore++
			}
		}
	}
	t.Logf("edge access log: %d of the run's requests, %d failures reached Traefik, %d named by its log (the rest by the backend header), %d without a server; from the timeline alone %d of them certain (%d agreeing)",
		e.Requests, reached, byLog, noServer, certainBefore, agreeBefore)
}

// waitEdge waits until url answers 200 through the edge from the first
// node: Traefik routes a new Ingress or HTTPRoute a moment (its providers'
// throttle) after the apiserver has it.
func waitEdge(t *testing.T, url, ca string) {
	t.Helper()
	waitEdgeWith(t, url, ca)
}

// waitEdgeWith is waitEdge with more of probe's flags (--protocol grpc,
// say: a gRPC server answers no plain GET).
func waitEdgeWith(t *testing.T, url, ca string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		var err error
		out, err = rollprobe(t, append([]string{"lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
			"probe", url, "--cacert", ca, "--rate", "10", "--duration", "500ms", "--backend-header", "X-Pod-Name", "--progress", "0"}, args...)...)
		if err == nil {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s never answered through the edge:\n%s", url, out)
}

// checkEdgeReport: the report validates and its page draws it, the rollout
// completed, and the goroutine engine probed (https by name: the event
// loops serve only http:// to an IP).
func checkEdgeReport(t *testing.T, r *runResult) {
	t.Helper()
	checkEdgeReportWith(t, r, report.StatusComplete)
}

// checkEdgeReportWith is checkEdgeReport for a run whose rollout status
// is status (no_change for a deploy command that changed no workload).
func checkEdgeReportWith(t *testing.T, r *runResult, status report.RolloutStatus) {
	t.Helper()
	if r.repErr != nil {
		t.Fatalf("report: %v\n%s", r.repErr, r.out())
	}
	validateSchema(t, r.reportPath)
	checkPage(t, r.htmlPath, r.rep)
	if r.rep.Rollout == nil || r.rep.Rollout.Status != status {
		t.Fatalf("rollout %+v, want %s\n%s", r.rep.Rollout, status, r.out())
	}
	if r.rep.Prober.Engine != "goroutines" {
		t.Fatalf("engine %q, want goroutines", r.rep.Prober.Engine)
	}
}

// accessEntry is what the referee reads of a line of Traefik's JSON access
// log.
type accessEntry struct {
	RequestHost      string `json:"RequestHost"`
	DownstreamStatus int    `json:"DownstreamStatus"`
	ServiceAddr      string `json:"ServiceAddr"`
	RequestID        string `json:"request_X-Request-Id"`
	// OriginPod is the X-Pod-Name of the response the pod sent, empty when
	// Traefik answered itself (its error handler sets none).
	OriginPod string `json:"origin_X-Pod-Name"`
	// Overhead is the time the request spent inside Traefik outside the
	// attempt that answered it (ns): failed attempts and the retry
	// middleware's backoff, for a retried request.
	Overhead time.Duration `json:"Overhead"`
	StartUTC time.Time     `json:"StartUTC"`
	// RequestProtocol is the protocol the client's request came in on
	// ("HTTP/2.0" for one sent over ALPN h2).
	RequestProtocol string `json:"RequestProtocol"`
	// Duration is the request's whole time inside Traefik (ns).
	Duration time.Duration `json:"Duration"`
}

// refereeLogWait is how long the referee waits for Traefik's log to hold
// every request of a run, and, where a test holds rollprobe to naming
// every failure's pod from the log, how long rollprobe waits for the same
// (--edge-log-wait; its default is 10 s): Traefik logs a request when it
// ends, and a warm CI run's four prober pods saw two timeouts' lines come
// after rollprobe's 10 s, which the referee, later, had.
const refereeLogWait = 30 * time.Second

// refereeAccessLog holds rollprobe's counts for a run through the edge to
// Traefik's own access log, the run's requests picked by their request IDs:
// every request rollprobe sent reached Traefik once; Traefik answered
// a 5xx of its own (none from the pod) exactly as often as rollprobe
// counted proxy_5xx; each pod served, by Traefik's backend address, what
// rollprobe counted for it by the backend header (and its answers carry
// that pod's name); each failure that rollprobe attributed for certain hit
// the pod Traefik forwarded it to; and each one put on a pod by inference
// has that pod among its candidates (a guess among several may miss; a
// candidate set without the truth is a wrong claim). It returns the pod
// each failed request was forwarded to, by request ID.
func refereeAccessLog(t *testing.T, cfg lab.Config, rep *report.Report, host string) map[string]string {
	t.Helper()
	podByIP := map[string]string{}
	for _, e := range rep.Timeline {
		if e.Pod != "" && e.IP != "" {
			podByIP[e.IP] = e.Pod
		}
	}
	// A request that failed to connect (or to resolve, or to shake hands)
	// never reached Traefik as a request; every other one did. Traefik
	// logs a request when it ends, which for one waiting on a vanished pod
	// is when it notices the client gave up: read until the log holds them
	// all, or give up after 30 s.
	neverReached := rep.Totals.ByClass[report.ClassConnectTimeout] + rep.Totals.ByClass[report.ClassRefused] +
		rep.Totals.ByClass[report.ClassDNS] + rep.Totals.ByClass[report.ClassTLS] + grpcGoUnsent(rep)
	want := rep.Totals.Sent - neverReached
	var byID map[string]accessEntry
	for deadline := time.Now().Add(refereeLogWait); ; time.Sleep(time.Second) {
		byID = readAccessLogOf(t, cfg, requestPrefixes(rep), host)
		if uint64(len(byID)) >= want || time.Now().After(deadline) {
			break
		}
	}
	if uint64(len(byID)) != want {
		t.Fatalf("Traefik logged %d of the run's requests; rollprobe sent %d, of which %d never connected (%v): want %d",
			len(byID), rep.Totals.Sent, neverReached, nonZero(rep.Totals.ByClass), want)
	}
	timedOut := map[string]bool{}
	for _, f := range rep.Failures {
		if f.Class == report.ClassTimeout {
			timedOut[f.RequestID] = true
		}
	}
	servedByPod := map[string]uint64{}
	var proxy5xx, gaveUp uint64
	for id, e := range byID {
		switch {
		case clientGaveUp(rep, e, timedOut[id]):
			gaveUp++
		case traefikAnswered(e):
			proxy5xx++
		default:
			ip, _, _ := net.SplitHostPort(e.ServiceAddr)
			pod, ok := podByIP[ip]
			if !ok {
				t.Fatalf("Traefik forwarded %s to %s, which no pod of the run's timeline had", id, e.ServiceAddr)
			}
			if e.OriginPod != pod {
				t.Errorf("Traefik forwarded %s to %s (%s), and the answer it logged names %q", id, e.ServiceAddr, pod, e.OriginPod)
			}
			servedByPod[pod]++
		}
	}
	// grpc-go's client keeps no header of a response that is not gRPC: a
	// call Traefik answered itself is a grpc_status failure carrying its
	// HTTP status (grpcGoHTTP5xx), never a proxy_5xx.
	own := rep.Totals.ByClass[report.ClassProxy5xx] + grpcGoHTTP5xx(rep)
	if proxy5xx != own || gaveUp != rep.Totals.ByClass[report.ClassTimeout] {
		logAccessDisagreements(t, rep, byID)
	}
	if proxy5xx != own {
		t.Fatalf("Traefik answered a 5xx of its own %d times, rollprobe counted %d proxy_5xx and %d grpc-go calls answered with an HTTP 5xx",
			proxy5xx, rep.Totals.ByClass[report.ClassProxy5xx], grpcGoHTTP5xx(rep))
	}
	if gaveUp != rep.Totals.ByClass[report.ClassTimeout] {
		t.Fatalf("Traefik logged %d requests the client closed first (499), rollprobe counted %d timeouts", gaveUp, rep.Totals.ByClass[report.ClassTimeout])
	}
	if rep.EdgeLog != nil {
		checkEdgeHeld(t, rep, byID)
	}
	for _, pod := range slices.Sorted(maps.Keys(podSet(servedByPod, rep.Totals.ByBackend))) {
		if rep.Totals.ByBackend[pod] != servedByPod[pod] {
			t.Errorf("pod %s: rollprobe counted %d responses by its backend header, Traefik's access log %d", pod, rep.Totals.ByBackend[pod], servedByPod[pod])
		}
	}
	certain, agree, likelyAgree, named, amongNamed := 0, 0, 0, 0, 0
	missed := map[string]int{} // "the pod hit, rollprobe's candidates": failures
	sentTo := map[string]string{}
	for _, fl := range rep.Failures {
		e, ok := byID[fl.RequestID]
		switch {
		case !ok && (fl.Class == report.ClassConnectTimeout || fl.Class == report.ClassRefused || fl.Class == report.ClassDNS || fl.Class == report.ClassTLS || unsentByGRPCGo(fl)):
			continue
		case !ok:
			t.Fatalf("failure %s (%s) is not in Traefik's access log", fl.RequestID, fl.Class)
		}
		if fl.Class == report.ClassGRPCStatus && (fl.Phase != "" || fl.Status != e.DownstreamStatus) {
			t.Errorf("grpc-go call %s failed in phase %q with status %d (%s: %s); Traefik answered it %d",
				fl.RequestID, fl.Phase, fl.Status, fl.GRPCStatus, fl.Error, e.DownstreamStatus)
		}
		ip, _, _ := net.SplitHostPort(e.ServiceAddr)
		hit := podByIP[ip]
		sentTo[fl.RequestID] = hit
		if hit == fl.LikelyPod {
			likelyAgree++
		}
		if fl.LikelyPod != "" {
			// A guess among candidates may miss; the pod hit missing from
			// them all is the inference excluding the truth.
			named++
			if hit == fl.LikelyPod || slices.Contains(fl.Candidates, hit) {
				amongNamed++
			} else {
				missed[fmt.Sprintf("%s, not %s", hit, strings.Join(append([]string{fl.LikelyPod}, fl.Candidates...), "/"))]++
			}
		}
		if fl.Confidence == 1 {
			certain++
			if hit == fl.LikelyPod {
				agree++
			} else {
				t.Errorf("failure %s attributed for certain to %s; Traefik forwarded it to %s (%s)", fl.RequestID, fl.LikelyPod, e.ServiceAddr, hit)
			}
		}
	}
	t.Logf("referee (Traefik's access log): %d requests, %d proxy 5xx, %d given up (499), served by pod %v; %d of %d certain attributions agree, and the likely pod of %d of %d failures; the pod hit is among the candidates of %d of %d failures put on a pod",
		len(byID), proxy5xx, gaveUp, servedByPod, agree, certain, likelyAgree, len(rep.Failures), amongNamed, named)
	if len(missed) > 0 {
		t.Errorf("failures whose candidates lack the pod Traefik sent them to (rollprobe named a set without the truth): %v", missed)
	}
	return sentTo
}

// requestPrefixes are the prefixes of a run's request IDs: the run's own
// (each path's, when it probed several), or each in-cluster prober's.
func requestPrefixes(rep *report.Report) []string {
	if len(rep.Probers) == 0 {
		out := []string{rep.Config.RunID}
		for _, p := range rep.Paths {
			if p.RunID != rep.Config.RunID {
				out = append(out, p.RunID)
			}
		}
		return out
	}
	var out []string
	for _, p := range rep.Probers {
		out = append(out, p.RunID)
	}
	return out
}

// readAccessLog reads the entries of Traefik's access log for run's
// requests (by their request ID), each of which must be for host and be
// there once.
func readAccessLog(t *testing.T, cfg lab.Config, run, host string) map[string]accessEntry {
	t.Helper()
	return readAccessLogOf(t, cfg, []string{run}, host)
}

// readAccessLogOf is readAccessLog for the requests of several run IDs
// (each in-cluster prober numbers its own).
func readAccessLogOf(t *testing.T, cfg lab.Config, runs []string, host string) map[string]accessEntry {
	t.Helper()
	return readAccessLogFile(t, cfg.TraefikAccessLog(), runs, host)
}

// readAccessLogFile is readAccessLogOf for the access log at path (a
// second Traefik's).
func readAccessLogFile(t *testing.T, path string, runs []string, host string) map[string]accessEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byID := map[string]accessEntry{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e accessEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("Traefik's access log: %v: %s", err, sc.Bytes())
		}
		if !slices.ContainsFunc(runs, func(run string) bool { return strings.HasPrefix(e.RequestID, run+"-") }) {
			continue
		}
		if e.RequestHost != host {
			t.Fatalf("request %s reached Traefik for host %q, want %q", e.RequestID, e.RequestHost, host)
		}
		if _, dup := byID[e.RequestID]; dup {
			t.Fatalf("request %s is in Traefik's access log twice", e.RequestID)
		}
		byID[e.RequestID] = e
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return byID
}

func podSet(a, b map[string]uint64) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// exitCode is a command's exit code from its error (0 for nil, -1 when it
// did not run).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(interface{ ExitCode() int }); ok {
		return ee.ExitCode()
	}
	return -1
}

// spikeContext says, for a spike of seconds from..to that Traefik's log
// does not hold, what else there is to know: each path's seconds around
// it, the deletions, and the slowest of Traefik's entries begun between lo
// and hi (its whole time against the part outside the answering attempt:
// a slow pod, or slowness outside Traefik altogether).
func spikeContext(rep *report.Report, byID map[string]accessEntry, from, to int, lo, hi time.Time) string {
	var b strings.Builder
	for _, p := range rep.Paths {
		fmt.Fprintf(&b, "path %s:\n", p.Name)
		for _, row := range p.Series {
			if row.T >= int64(from-2) && row.T <= int64(to+1) {
				fmt.Fprintf(&b, "  +%ds sent %d failed %d ok p99 %.1fms from the write, %.1fms from the send; service p99 %.1fms lag %.1fms slow connects %d\n",
					row.T, row.Sent, row.Failed, row.OKAfterWriteP99MS, row.OKServiceP99MS, row.ServiceP99MS, row.MaxLagMS, row.SlowConnects)
			}
		}
	}
	for _, e := range rep.Timeline {
		if e.Kind == report.PodDeletionRequested || e.Kind == report.PodReady || e.Kind == report.EndpointRemoved {
			fmt.Fprintf(&b, "%s %s %+.3fs\n", e.Pod, e.Kind, e.At.Sub(rep.StartedAt).Seconds())
		}
	}
	var in []accessEntry
	for _, e := range byID {
		if !e.StartUTC.Before(lo) && e.StartUTC.Before(hi) {
			in = append(in, e)
		}
	}
	slices.SortFunc(in, func(a, b accessEntry) int { return cmp.Compare(b.Duration, a.Duration) })
	fmt.Fprintf(&b, "Traefik's slowest of %d entries begun then:\n", len(in))
	for _, e := range in[:min(len(in), 8)] {
		fmt.Fprintf(&b, "  %s began %+.3fs status %d took %s, %s outside the answering attempt, pod %q\n",
			e.RequestID, e.StartUTC.Sub(rep.StartedAt).Seconds(), e.DownstreamStatus, e.Duration, e.Overhead, e.OriginPod)
	}
	return b.String()
}

// logFailuresOfClass logs what the report kept of the failures of class on
// path ("" for any) and the pods' events around them: seen once in a warm
// CI (of 1029714), 12 tls failures on the edge path, where this test wants
// none, with nothing left to say why (the report went with the test's
// temporary directory). A handshake that outlives the request's time under
// load (tls_cause handshake_timeout) and one Traefik cut (connection) are
// different stories.
func logFailuresOfClass(t *testing.T, rep *report.Report, path, class string) {
	t.Helper()
	var b strings.Builder
	var first, last time.Time
	for _, f := range rep.Failures {
		if f.Class != class || (path != "" && f.Path != path) {
			continue
		}
		if first.IsZero() {
			first = f.Start
		}
		last = f.Start
		fmt.Fprintf(&b, "%s %+.3fs..%+.3fs (intended %+.3fs) status=%d phase=%s tls_cause=%s %s -> %s: %s\n", f.RequestID,
			f.Start.Sub(rep.StartedAt).Seconds(), f.End.Sub(rep.StartedAt).Seconds(), f.Intended.Sub(rep.StartedAt).Seconds(),
			f.Status, f.Phase, f.TLSCause, f.LocalAddr, f.RemoteAddr, f.Error)
	}
	for _, e := range rep.Timeline {
		if e.Pod != "" && !first.IsZero() && !e.At.Before(first.Add(-5*time.Second)) && !e.At.After(last.Add(5*time.Second)) {
			fmt.Fprintf(&b, "%+8.3fs %s %s\n", e.At.Sub(rep.StartedAt).Seconds(), e.Kind, e.Pod)
		}
	}
	t.Logf("the %s failures kept (%d of %d failures kept in all) and the pods' events from 5 s before to 5 s after them:\n%s",
		class, rep.FailureInfo.Kept, rep.FailureInfo.Total, b.String())
}

// traefikLogOnFailure prints, when t fails, the warnings and errors
// Traefik logged from a second before the call (its log's times are whole
// seconds) to the test's end: a configuration it could not build (a
// Service without servers, a missing Secret) is said there and nowhere
// else, and an edge test's failure may be that.
func traefikLogOnFailure(t *testing.T) {
	t.Helper()
	since := time.Now().Add(-time.Second).Truncate(time.Second)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		lines := traefikLogLines(t, since)
		if len(lines) > 40 {
			lines = slices.Concat(lines[:20], []string{fmt.Sprintf("... %d more ...", len(lines)-40)}, lines[len(lines)-20:])
		}
		t.Logf("Traefik's warnings and errors since %s: %d\n%s", since.Format(time.RFC3339), len(lines), strings.Join(lines, "\n"))
	})
}

// traefikLogLines are the warnings and errors in Traefik's log dated
// since or later.
func traefikLogLines(t *testing.T, since time.Time) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(stateDir, "logs", "traefik.log"))
	if err != nil {
		t.Errorf("Traefik's log: %v", err)
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// "2026-12-02T10:14:39Z ERR message key=value ..."
		stamp, rest, _ := strings.Cut(sc.Text(), " ")
		at, err := time.Parse(time.RFC3339, stamp)
		if err != nil || at.Before(since) || !(strings.HasPrefix(rest, "WRN ") || strings.HasPrefix(rest, "ERR ")) {
			continue
		}
		lines = append(lines, sc.Text())
	}
	return lines
}

// edgeCapture captures, in the hub's namespace where Traefik serves, its
// port 443's SYNs both ways and every segment with data to or from it:
// the referee of when a client's SYN reached Traefik's namespace, whether
// and when Traefik's kernel took the connection (its SYN-ACK), when the
// client's first flight (its ClientHello) reached it, and when Traefik
// answered (its first flight is the first data it sends). nil without
// tcpdump.
func edgeCapture(t *testing.T) *capture.Capture {
	t.Helper()
	traefikLogOnFailure(t)
	if capture.Available() != nil {
		return nil
	}
	// On the hub's bridge, where its address is, each packet is seen once;
	// headers only: the busy lab's TLS payloads would cost the capture
	// CPU the lab's components need.
	return capture.StartHeaders(t, netns.LabNetNS, netns.LabBridge,
		"(tcp port 443 and tcp[tcpflags] & tcp-syn != 0) or (tcp port 443 and (ip[2:2] - ((ip[0]&0xf)<<2) - ((tcp[12]&0xf0)>>2)) > 0)", 128)
}

// freezeBusyEnd is, by the hub's capture, when Traefik, frozen until
// thawed, had first answered every ClientHello waiting on it: the end of
// the busy period the freeze began, in queueing's sense (the hellos that
// reached Traefik and had no answer yet, a queue that empties for the
// first time after thawed). Hellos that reach it while it works the
// queue off join the period: they wait behind it. On a loaded machine (busy loops
// beside the lab, 2026-12-02) Traefik's queue after a 3 s freeze stayed
// 450 to 650 deep for 1.5 s after SIGCONT and emptied 3.4 s after it,
// 1.3 s after its answer to the last hello queued in the freeze; the
// handshakes begun in between failed. A hello never answered (the prober
// gave up; the capture keeps no FIN or RST) leaves the queue a connect
// timeout after it reached Traefik, when the prober has given up on it.
// The zero time without a capture, or when the queue never empties.
func freezeBusyEnd(hub *capture.Capture, thawed time.Time) time.Time {
	if hub == nil {
		return time.Time{}
	}
	type conn struct{ hello, answered time.Time }
	var conns []*conn
	byClient := map[netip.AddrPort]*conn{}
	for _, s := range hub.Segments() { // in capture order
		client, fromTraefik := s.Src, false
		if s.Src.Port() == 443 {
			client, fromTraefik = s.Dst, true
		}
		c := byClient[client]
		switch {
		case fromTraefik && s.Has('S'): // Traefik's SYN-ACK: a new connection on this port
			byClient[client] = &conn{}
		case c == nil || s.SeqEnd == s.Seq:
		case !fromTraefik && c.hello.IsZero():
			c.hello = s.At
			conns = append(conns, c)
		case fromTraefik && !c.hello.IsZero() && c.answered.IsZero():
			c.answered = s.At
		}
	}
	type change struct {
		at    time.Time
		delta int
	}
	var changes []change
	for _, c := range conns {
		left := c.answered
		if left.IsZero() {
			left = c.hello.Add(prober.DefaultConnectTimeout)
		}
		changes = append(changes, change{c.hello, 1}, change{left, -1})
	}
	// At one instant an answer leaves before a hello joins: a queue that
	// empties as a new hello arrives has emptied.
	slices.SortFunc(changes, func(a, b change) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	waiting := 0
	for _, ch := range changes {
		waiting += ch.delta
		if waiting == 0 && ch.at.After(thawed) {
			return ch.at
		}
	}
	return time.Time{}
}

// checkEdgeClasses holds the classes of a path through Traefik (path ""
// for a run of one path; byClass its counts). Traefik answers for a pod it
// could not reach (proxy_5xx), or waits on a pod IP that no longer answers
// until the prober gives up (timeout). A failure of the connection to
// Traefik itself no pod causes, and none was seen while the lab had CPU to
// spare; a starved CI run (load average 4 on 2 cores) had 62 TLS
// handshakes to Traefik unfinished at the prober's 2 s, and a later one
// (07b8560's) 36 connects to Traefik timed out. Those are accepted only as
// what they are, held to the hub's capture (hub): each a TLS handshake
// timeout on a connection Traefik's kernel took (its SYN-ACK) and the
// prober left unfinished (checkEdgeHandshakes), or a connect timeout whose
// connection the capture shows never up on the prober's side
// (checkEdgeConnects); each marked via_edge, put on no pod and claimed by
// the edge-failed-connections finding. Any other class fails the test,
// as does any of them without the capture.
func checkEdgeClasses(t *testing.T, rep *report.Report, path string, byClass map[string]uint64, hub *capture.Capture) {
	t.Helper()
	for class := range byClass {
		switch {
		case class == report.ClassOK || class == report.ClassProxy5xx || class == report.ClassTimeout:
		case class == report.ClassTLS && hub != nil:
			checkEdgeHandshakes(t, rep, path, byClass[class], hub)
		case class == report.ClassConnectTimeout && hub != nil:
			checkEdgeConnects(t, rep, path, byClass[class], hub)
		default:
			t.Errorf("%s through the edge: want only proxy_5xx and timeout (%v)", class, byClass)
			logFailuresOfClass(t, rep, path, class)
		}
	}
	for _, f := range rep.Failures {
		if (path == "" || f.Path == path) && f.RemoteAddr != "" && !f.ViaEdge {
			t.Errorf("a failure through the edge is not marked via_edge: %s -> %s (%s)", f.LocalAddr, f.RemoteAddr, f.Class)
		}
	}
}

// pathClasses is the path's failures by class (none of zero).
func pathClasses(t *testing.T, rep *report.Report, name string) map[string]uint64 {
	t.Helper()
	for _, p := range rep.Paths {
		if p.Name == name {
			return nonZero(p.Totals.ByClass)
		}
	}
	t.Fatalf("no path %q in the report", name)
	return nil
}

// unsentByGRPCGo: a call grpc-go failed without sending it (its channel
// had no connection to the edge), which never reached Traefik: a
// grpc_status or a timeout in dial, which no other client gives (theirs
// in dial are refused, connect_timeout, dns), whatever the path's name.
func unsentByGRPCGo(f report.Failure) bool {
	return f.Phase == "dial" && (f.Class == report.ClassGRPCStatus || f.Class == report.ClassTimeout)
}

// grpcGoUnsent counts the run's unsentByGRPCGo calls.
func grpcGoUnsent(rep *report.Report) uint64 {
	var n uint64
	for _, f := range rep.Failures {
		if unsentByGRPCGo(f) {
			n++
		}
	}
	return n
}

// grpcGoHTTP5xx counts the grpc-go client's calls failed on an HTTP 5xx
// that was not gRPC: grpc_status failures with that status (the raw
// client's carry 200).
func grpcGoHTTP5xx(rep *report.Report) uint64 {
	var n uint64
	for _, f := range rep.Failures {
		if f.Class == report.ClassGRPCStatus && f.Status >= 500 && f.Status <= 599 {
			n++
		}
	}
	return n
}

// checkGRPCGoEdgeClasses is checkEdgeClasses for the grpc-go path, whose
// calls the edge answered with a 5xx are grpc_status failures: each with
// no phase (answered, not cut), its HTTP status kept, and on no h2 finding
// (the connection to Traefik never closed under them).
func checkGRPCGoEdgeClasses(t *testing.T, rep *report.Report, byClass map[string]uint64, hub *capture.Capture) {
	t.Helper()
	others := map[string]uint64{}
	for class, n := range byClass {
		if class != report.ClassGRPCStatus {
			others[class] = n
		}
	}
	checkEdgeClasses(t, rep, "grpc-go", others, hub)
	for _, f := range rep.Failures {
		if f.Path == "grpc-go" && f.Class == report.ClassGRPCStatus && (f.Phase != "" || f.Status < 500 || f.Status > 599) {
			t.Errorf("grpc-go call %s through the edge failed %s in phase %q with status %d (%s): want an answered HTTP 5xx", f.RequestID, f.GRPCStatus, f.Phase, f.Status, f.Error)
		}
	}
	for _, id := range []string{analysis.H2CloseWithoutGoAway, analysis.H2GoAwayDroppedStreams} {
		if f := findingByID(rep, id); f != nil {
			t.Errorf("%s through the edge, whose connections stay up: %+v", id, f)
		}
	}
}

// checkCleanThroughTheEdge: a graceful rollout probed through Traefik, where
// no pod may drop anything. The failures allowed are the edge's own, as
// checkEdgeClasses allows them: a TLS handshake to Traefik unfinished, or
// a connection to it not up, within the prober's connect timeout, each
// held to the hub's capture (hub), on no pod, claimed by the
// edge-failed-connections finding, the run's only error finding; the
// verdict then fails (exit 1), as it must: those requests did fail. (A
// warm CI run's Argo canary through Traefik: 6 handshakes timed out
// within 25 ms at +53.2 s, 6 s after the last old pod was gone, with the
// prober's sends up to 418 ms late and the successes' p99 at 2 s: the
// machine starved, not the rollout. Connect timeouts to Traefik came the
// same way in the naive edge tests of 07b8560's CI.) Any other class
// fails, as in checkClean.
func checkCleanThroughTheEdge(t *testing.T, r *runResult, hub *capture.Capture) {
	t.Helper()
	byClass := nonZero(r.rep.Totals.ByClass)
	delete(byClass, report.ClassOK)
	own := byClass[report.ClassTLS] + byClass[report.ClassConnectTimeout]
	delete(byClass, report.ClassTLS)
	delete(byClass, report.ClassConnectTimeout)
	if own == 0 || len(byClass) > 0 {
		checkClean(t, r)
		return
	}
	heldAtTheEdge(t, r, hub)
	if r.exit != 1 {
		t.Errorf("exit %d with %d requests failed at the edge: want 1", r.exit, own)
	}
	for _, f := range r.rep.Findings {
		if f.Severity == report.SeverityError && f.ID != analysis.EdgeFailedConnections {
			t.Errorf("error finding on a graceful rollout: %+v", f)
		}
	}
	t.Logf("nothing dropped on the pods; %d TLS handshakes to the edge unfinished and %d connections to it not up, held to the hub's capture",
		r.rep.Totals.ByClass[report.ClassTLS], r.rep.Totals.ByClass[report.ClassConnectTimeout])
}

// edgeOwnClass: a class that, on a run whose one path goes through the
// edge, is a failure of the prober's own connection to the edge (a TLS
// handshake or a connect to Traefik), which no pod can cause: the classes
// heldAtTheEdge holds to the capture.
func edgeOwnClass(class string) bool {
	return class == report.ClassTLS || class == report.ClassConnectTimeout
}

// heldAtTheEdge holds a run's tls and connect_timeout failures (one path,
// through the edge) to the hub's capture as checkEdgeClasses does, and
// returns how many there were: the edge's own, which a test of the pods
// leaves out of its count (edgeOwnClass). A test fails with such failures
// and no capture.
func heldAtTheEdge(t *testing.T, r *runResult, hub *capture.Capture) uint64 {
	t.Helper()
	tls := r.rep.Totals.ByClass[report.ClassTLS]
	connects := r.rep.Totals.ByClass[report.ClassConnectTimeout]
	if tls+connects == 0 {
		return 0
	}
	if uint64(len(r.rep.Failures)) != r.rep.Totals.Failed {
		t.Fatalf("%d failed, %d kept: each failure at the edge must be held to the capture", r.rep.Totals.Failed, len(r.rep.Failures))
	}
	if hub == nil {
		t.Fatalf("%d tls and %d connect_timeout failures through the edge and no capture to hold them to\n%s", tls, connects, r.out())
	}
	if tls > 0 {
		checkEdgeHandshakes(t, r.rep, "", tls, hub)
	}
	if connects > 0 {
		checkEdgeConnects(t, r.rep, "", connects, hub)
	}
	return tls + connects
}

// checkEdgeHandshakes holds the n tls failures of path to the hub's
// capture (see checkEdgeClasses).
func checkEdgeHandshakes(t *testing.T, rep *report.Report, path string, n uint64, hub *capture.Capture) {
	t.Helper()
	fails := keptOfClass(t, rep, path, report.ClassTLS, n)
	byPort := hubSegmentsByClientPort(hub)
	refereeSawEverything(t, hub, len(fails), "tls")
	// The prober gives a connection and its handshake until its connect
	// timeout after the request began. The capture shows whether the
	// prober finished it: a TLS 1.3 client's next flight (its Finished)
	// follows the server's first one, and once sent, the handshake is
	// done on its side. So each failure must show, on the hub, the
	// connection taken (Traefik's SYN-ACK) and no data from the prober
	// after Traefik's first before it gave up. Which side held the
	// handshake is logged: the ClientHello reaching Traefik late (the
	// prober or the network to Traefik), Traefik answering late, or the
	// prober not finishing after a timely answer (itself starved: a warm
	// CI run's prober pods sent ClientHellos up to 2 s after their
	// connects and left answers Traefik sent in 0.2 s unfinished).
	connectTimeout := time.Duration(rep.Config.ConnectTimeoutMS * float64(time.Millisecond))
	heldBy := map[string]int{}
	for _, f := range fails {
		local, err := netip.ParseAddrPort(f.LocalAddr)
		if f.TLSCause != "handshake_timeout" || !f.ViaEdge || f.LikelyPod != "" || err != nil {
			t.Errorf("%s %s -> %s: tls_cause %q, via_edge %v, likely pod %q: want a handshake timeout via the edge on no pod",
				f.RequestID, f.LocalAddr, f.RemoteAddr, f.TLSCause, f.ViaEdge, f.LikelyPod)
			continue
		}
		took := false
		var hello, answered, finished time.Time // the prober's first data, Traefik's, the prober's after it
		for _, s := range ownSegments(byPort[local.Port()], local, f.Start, f.End) {
			switch {
			case s.Has('S') && s.Src.Port() == 443:
				took = true
			case s.Has('S'): // the client's SYN
			case s.SeqEnd == s.Seq:
			case s.Dst.Port() == 443 && hello.IsZero():
				hello = s.At
			case s.Dst.Port() == 443 && !answered.IsZero() && finished.IsZero():
				finished = s.At
			case s.Src.Port() == 443 && answered.IsZero():
				answered = s.At
			}
		}
		if !took || !finished.IsZero() {
			t.Errorf("%s %s -> %s, %+.3fs..%+.3fs: the hub's capture shows Traefik's SYN-ACK %v, the ClientHello %s, Traefik's first data %s, the prober's next %s: want the connection taken and the handshake unfinished",
				f.RequestID, f.LocalAddr, f.RemoteAddr, f.Start.Sub(rep.StartedAt).Seconds(), f.End.Sub(rep.StartedAt).Seconds(), took,
				relTime(hello, rep.StartedAt), relTime(answered, rep.StartedAt), relTime(finished, rep.StartedAt))
			continue
		}
		half := f.Start.Add(connectTimeout / 2)
		switch {
		case hello.IsZero() || !hello.Before(half):
			heldBy["the ClientHello reached Traefik late or never"]++
		case answered.IsZero() || !answered.Before(half):
			heldBy["Traefik answered late or never"]++
		default:
			heldBy["the prober left a timely answer unfinished"]++
		}
	}
	t.Logf("%d TLS handshakes to Traefik not finished within the prober's connect timeout, each as the hub's capture shows it: %v", len(fails), heldBy)
	if findingByID(rep, analysis.EdgeFailedConnections) == nil {
		t.Errorf("no %s finding for %d handshakes Traefik left unanswered (findings %v)", analysis.EdgeFailedConnections, len(fails), findingIDs(rep))
	}
}

// traefikAnswered: a 5xx Traefik made itself, for a pod it could not reach
// (no pod's X-Pod-Name came back). Not only 502/503/504: Traefik answers
// 500 for an upstream error that is neither an EOF nor a network error,
// such as Go's "server closed idle connection" on a fresh connection a
// dying pod closed (a warm CI run's naive rollout through the edge).
func traefikAnswered(e accessEntry) bool {
	return e.DownstreamStatus >= 500 && e.DownstreamStatus <= 599 && e.OriginPod == ""
}

// clientGaveUp: Traefik's log shows the client gave up first (499), or a
// 5xx Traefik decided as the prober's request timeout ran out, which
// reached the prober after it and which rollprobe counted a timeout
// (timedOut): both are right (a warm CI run: Traefik's 502 after 4,994
// ms inside it, the prober's timeout at 5,006 ms).
func clientGaveUp(rep *report.Report, e accessEntry, timedOut bool) bool {
	const answerRace = 50 * time.Millisecond
	timeout := time.Duration(rep.Config.TimeoutMS * float64(time.Millisecond))
	return e.DownstreamStatus == 499 || (traefikAnswered(e) && timedOut && e.Duration >= timeout-answerRace)
}

// logAccessDisagreements logs each request whose class rollprobe and
// Traefik's access log tell differently (a 5xx of Traefik's not counted
// proxy_5xx, a 499 not counted timeout, or the other way), with both
// sides' times: which side of which deadline each fell on.
func logAccessDisagreements(t *testing.T, rep *report.Report, byID map[string]accessEntry) {
	t.Helper()
	failed := map[string]report.Failure{}
	for _, f := range rep.Failures {
		failed[f.RequestID] = f
	}
	if rep.FailureInfo.Kept != int(rep.FailureInfo.Total) {
		t.Logf("%d of %d failures kept: the others' classes are not known here", rep.FailureInfo.Kept, rep.FailureInfo.Total)
	}
	n := 0
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		e := byID[id]
		class := report.ClassOK
		f, ok := failed[id]
		if ok {
			class = f.Class
		}
		gaveUp := clientGaveUp(rep, e, class == report.ClassTimeout)
		proxied := traefikAnswered(e) && !gaveUp
		if proxied == (class == report.ClassProxy5xx) && gaveUp == (class == report.ClassTimeout) {
			continue
		}
		if n++; n > 20 {
			continue
		}
		t.Logf("%s: Traefik %d, began %+.3fs, %.0f ms inside it, to %s; rollprobe %s (%q) after %.0f ms", id, e.DownstreamStatus,
			e.StartUTC.Sub(rep.StartedAt).Seconds(), float64(e.Duration)/1e6, e.ServiceAddr, class, f.Error, f.LatencyMS)
	}
	t.Logf("%d requests rollprobe and Traefik's access log class differently", n)
}

// relTime is at as seconds since start, "none" when zero.
func relTime(at, start time.Time) string {
	if at.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%+.3fs", at.Sub(start).Seconds())
}

// edgeFreeze is how long the edge test freezes Traefik: a second past the
// prober's connect timeout, so the handshakes begun in that second fail,
// and well under its request timeout, so the requests Traefik already
// held are answered late rather than given up.
const edgeFreeze = prober.DefaultConnectTimeout + time.Second

// testGRPCThroughTheEdge rolls the gRPC samples probed as users' gRPC
// clients reach them: by name, through Traefik's Ingress, over TLS with
// ALPN h2 (Traefik speaks h2c to the pods), by rollprobe's own streams and
// by grpc-go's client beside them (--grpc-client both). Traefik's access
// log is the referee: each of the run's calls reached it once over
// HTTP/2, each of its own 5xx is a proxy_5xx of the raw path's or a
// grpc-go call answered with that HTTP status (grpc-go fails it
// UNAVAILABLE, and it must not read as cut with its connection), each pod
// served what its answers' x-pod-name said, and each failed call is named
// on the pod Traefik forwarded it to.
func testGRPCThroughTheEdge(t *testing.T, ctx context.Context, c *lab.Client) {
	cfg := lab.Config{StateDir: stateDir}
	for _, tc := range []struct {
		sample string
		exit   int
	}{
		// GracefulStop after a preStop sleep: the calls in flight finish,
		// and Traefik, whose view of the endpoints the sleep outlasts,
		// sends no new ones to the stopping pod.
		{"grpc-graceful", 0},
		// No preStop, exit at once: Traefik, whose view lags the deletion,
		// sends calls to a pod that is gone and answers them itself (a 502
		// with no x-pod-name: proxy_5xx). (grpc-stop, whose 2 s preStop
		// ends about when Traefik drops the pod, its providers throttled
		// to 2 s, had 20, 9 and 8 calls cut through the edge in three runs,
		// the last 1.96-1.97 s after the deletion: a race, not a test.)
		{"grpc-naive", 1},
	} {
		t.Run(tc.sample, func(t *testing.T) {
			host := tc.sample + ".lab.example"
			if tc.sample == "grpc-naive" {
				deleteEdgeSampleAtEnd(t, c, tc.sample) // this test's alone: its pods leave the nodes
			}
			ensureSample(t, ctx, c, tc.sample)
			waitEdgeWith(t, "https://"+host+"/", cfg.EdgeCAPath(), "--protocol", "grpc")
			hub := edgeCapture(t)
			// Traefik logs a call it holds on a gone pod's IP only when its
			// own connect to that IP gives up (its h2c dial has no timeout,
			// and the HTTP/2 pool waits it out whatever the client does):
			// about 3 s when the node answers the SYN with an ICMP host
			// unreachable, 72 s and 135 s in two runs when that reply was
			// rate-limited away (the kernel's SYN retries), long after the
			// client's timeout. The run waits for those lines once the
			// rollout is over (--edge-log-wait, not counted in --timeout)
			// so that every failure is named by the log.
			r := startRunOn(t, nil, tc.sample, "https://"+host+"/", "--cacert", cfg.EdgeCAPath(), "--protocol", "grpc", "--grpc-client", "both",
				"--edge-access-log", cfg.TraefikAccessLog(), "--edge-log-wait", "180s").wait(t)
			checkEdgeReport(t, r)
			rep := r.rep
			if rep.Config.Protocol != "grpc" || rep.Config.GRPCMethod != "grpc.health.v1.Health/Check" {
				t.Fatalf("protocol %q, method %q", rep.Config.Protocol, rep.Config.GRPCMethod)
			}
			byClass := nonZero(rep.Totals.ByClass)
			if tc.exit == 0 {
				checkCleanThroughTheEdge(t, r, hub)
			} else {
				if r.exit != tc.exit || rep.Totals.Failed == 0 {
					t.Fatalf("exit %d, %d failed: want %d with failures\n%s", r.exit, rep.Totals.Failed, tc.exit, r.out())
				}
				checkEdgeClasses(t, rep, "raw", pathClasses(t, rep, "raw"), hub)
				checkGRPCGoEdgeClasses(t, rep, pathClasses(t, rep, "grpc-go"), hub)
			}
			sentTo := refereeAccessLog(t, cfg, rep, host)
			checkEdgeLogNamesThePods(t, rep, sentTo)
			// The client's connections end at Traefik, which picks a pod for
			// each call: a pod that answered after its deletion was sent
			// those calls by the edge, and no connection of the run was
			// placed on a pod (no uneven-load finding).
			if f := findingByID(rep, analysis.H2PinnedToTerminating); f != nil && !strings.HasPrefix(f.Title, "the edge kept sending") {
				t.Errorf("%s through the edge: %q", analysis.H2PinnedToTerminating, f.Title)
			}
			if f := findingByID(rep, analysis.H2UnevenAfterRollout); f != nil {
				t.Errorf("%s through the edge, which places no connection on a pod: %+v", analysis.H2UnevenAfterRollout, f)
			}
			if tc.exit != 0 {
				// Each failure a call Traefik sent to an old pod after its
				// deletion, while its view of the endpoints lagged: the
				// propagation finding's preStop covers the window the
				// access log shows.
				requireAttributed(t, rep, rep.Rollout.OldRevision, func(f report.Failure) bool { return !(f.ViaEdge && edgeOwnClass(f.Class)) })
				window, last := deletionWindow(rep, func(f report.Failure) string { return sentTo[f.RequestID] })
				propagation := findingByID(rep, analysis.StopsBeforePropagation)
				if propagation == nil {
					t.Fatalf("no %s finding (findings %v)", analysis.StopsBeforePropagation, findingIDs(rep))
				}
				sleep := suggestedPreStop(propagation)
				if time.Duration(sleep)*time.Second < window {
					t.Errorf("suggested preStop %ds does not cover the %s Traefik kept sending calls to deleted pods\nthat failure: %s", sleep, window, failureJSON(last))
				}
				t.Logf("Traefik sent calls to deleted pods up to %s after their deletion; the finding's preStop: %ds", window, sleep)
				// The doctor read the Service's h2c annotation: no preStop
				// behind Traefik over h2c costs calls held for minutes.
				if p := findingByID(rep, "no-prestop-hook"); p == nil || !strings.Contains(strings.Join(p.Evidence, "\n"), "Traefik v3.6 dials h2c backends with no timeout") {
					t.Errorf("no-prestop-hook does not say what Traefik does over h2c: %+v", p)
				}
			}
			// Every call came to Traefik over HTTP/2: the handshake chose h2
			// by ALPN (Traefik's own record of the request).
			protocols := map[string]int{}
			var longestHeld time.Duration // the longest Traefik held a call it answered itself
			// Traefik still had calls long after the client gave up (its h2c
			// dial to a gone pod's IP): refereeAccessLog held the finding to
			// the log; each of them went to a deleted pod.
			if held := findingByID(rep, analysis.EdgeHeldPastTimeout); held != nil && !strings.Contains(held.Title, "waiting on pods that were gone") {
				t.Errorf("%s: %q, but each call went to a deleted pod", analysis.EdgeHeldPastTimeout, held.Title)
			}
			for _, e := range readAccessLogOf(t, cfg, requestPrefixes(rep), host) {
				protocols[e.RequestProtocol]++
				if traefikAnswered(e) {
					longestHeld = max(longestHeld, e.Duration)
				}
			}
			if longestHeld > 0 {
				t.Logf("Traefik held a call it then answered itself for up to %s", longestHeld.Round(time.Millisecond))
			}
			if len(protocols) != 1 || protocols["HTTP/2.0"] == 0 {
				t.Errorf("Traefik logged the run's calls over %v, want HTTP/2.0 only", protocols)
			}
			t.Logf("%s through the edge: exit %d, %d of %d failed %v, findings %v", tc.sample, r.exit, rep.Totals.Failed, rep.Totals.Sent, byClass, findingIDs(rep))
		})
	}
}

// checkEdgeHeld holds each failure's edge_duration_ms to Traefik's own
// Duration for its request (none without a line when the run read the
// log: only a failure the run counted not found may have one now), and the
// edge-held-requests-past-client-timeout finding to the log: present
// exactly when the log, as the run read it, shows failed requests Traefik
// still had a second or more past the client's timeout, with their count
// and the longest.
func checkEdgeHeld(t *testing.T, rep *report.Report, lines map[string]accessEntry) {
	t.Helper()
	timeout := time.Duration(rep.Config.TimeoutMS * float64(time.Millisecond))
	held, longest, late := 0, time.Duration(0), 0
	for _, f := range rep.Failures {
		e, ok := lines[f.RequestID]
		if ok && f.EdgeDurationMS == 0 {
			late++ // logged after the run read the log
			continue
		}
		want := 0.0
		if ok {
			want = float64(e.Duration.Microseconds()) / 1000
		}
		if f.EdgeDurationMS != want {
			t.Errorf("failure %s: edge_duration_ms %v, Traefik's log %v ms", f.RequestID, f.EdgeDurationMS, want)
		}
		if ok && e.Duration >= timeout+time.Second {
			held++
			longest = max(longest, e.Duration)
		}
	}
	f := findingByID(rep, analysis.EdgeHeldPastTimeout)
	switch {
	case held == 0 && f != nil:
		t.Errorf("%s, but Traefik's log ends every failed call within a second of the client's %s timeout: %+v", analysis.EdgeHeldPastTimeout, timeout, *f)
	case held > 0 && f == nil:
		t.Errorf("no %s, but Traefik's log has %d failed calls it still had a second past the client's %s timeout, up to %s (findings %v)",
			analysis.EdgeHeldPastTimeout, held, timeout, longest, findingIDs(rep))
	case held > 0:
		count := fmt.Sprintf("%d requests that failed were still held", held)
		if held == 1 {
			count = "1 request that failed was still held"
		}
		if !strings.HasPrefix(f.Evidence[0], count) || !strings.Contains(f.Evidence[0], "up to "+longest.Round(time.Millisecond).String()+" ") {
			t.Errorf("%s says %q; Traefik's log: %d held, up to %s", analysis.EdgeHeldPastTimeout, f.Evidence[0], held, longest)
		}
		t.Logf("Traefik's log: %d failed calls held a second or more past the client's %s timeout, up to %s; the finding: %q", held, timeout, longest.Round(time.Millisecond), f.Title)
	}
	if late > rep.EdgeLog.FailuresNotFound {
		t.Errorf("%d failures have a line in Traefik's log and no edge_duration_ms, but the run counted %d not found", late, rep.EdgeLog.FailuresNotFound)
	}
}

// deleteEdgeSampleAtEnd deletes a sample's Deployment, Service and
// Ingress (each named as the sample) when the test ends, passed or not.
func deleteEdgeSampleAtEnd(t *testing.T, c *lab.Client, sample string) {
	t.Cleanup(func() {
		ctx := context.Background()
		for what, del := range map[string]func() error{
			"deployment": func() error {
				return c.Kube.AppsV1().Deployments("default").Delete(ctx, sample, metav1.DeleteOptions{})
			},
			"service": func() error { return c.Kube.CoreV1().Services("default").Delete(ctx, sample, metav1.DeleteOptions{}) },
			"ingress": func() error {
				return c.Kube.NetworkingV1().Ingresses("default").Delete(ctx, sample, metav1.DeleteOptions{})
			},
		} {
			if err := del(); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s %s: %v", what, sample, err)
			}
		}
	})
}

// checkEdgeConnects holds the n connect_timeout failures of path to the
// hub's capture: each via the edge, on no pod, claimed by the
// edge-failed-connections finding, and the capture showing no data from
// the prober on its connection (ownSegments) before it gave up (the
// connection was never up on its side). A failure whose SYN never
// reached the hub has no connection there to contradict it: it passes by
// that absence (Traefik never saw it), which a capture that dropped
// packets would also give: a capture that dropped any fails the test
// (refereeSawEverything). Which side held the connection is logged, by
// when the prober's first SYN reached Traefik's namespace and when
// Traefik's kernel answered it.
func checkEdgeConnects(t *testing.T, rep *report.Report, path string, n uint64, hub *capture.Capture) {
	t.Helper()
	fails := keptOfClass(t, rep, path, report.ClassConnectTimeout, n)
	byPort := hubSegmentsByClientPort(hub)
	refereeSawEverything(t, hub, len(fails), "connect_timeout")
	connectTimeout := time.Duration(rep.Config.ConnectTimeoutMS * float64(time.Millisecond))
	heldBy := map[string]int{}
	var detail strings.Builder
	for i, f := range fails {
		local, err := netip.ParseAddrPort(f.LocalAddr)
		if !f.ViaEdge || f.LikelyPod != "" || err != nil {
			t.Errorf("%s %s -> %s: via_edge %v, likely pod %q: want a connect timeout via the edge on no pod",
				f.RequestID, f.LocalAddr, f.RemoteAddr, f.ViaEdge, f.LikelyPod)
			continue
		}
		var syn, synAck, data time.Time
		syns := 0
		for _, s := range ownSegments(byPort[local.Port()], local, f.Start, f.End) {
			switch {
			case s.Has('S') && s.Src.Port() == 443:
				if synAck.IsZero() {
					synAck = s.At
				}
			case s.Has('S'):
				syns++
				if syn.IsZero() {
					syn = s.At
				}
			case s.Dst.Port() == 443 && s.SeqEnd != s.Seq && data.IsZero():
				data = s.At
			}
		}
		if i < 5 {
			fmt.Fprintf(&detail, "\n%s %s %+.3fs..%+.3fs: SYNs %d, the first %s, Traefik's SYN-ACK %s, the prober's first data %s", f.RequestID, f.LocalAddr,
				f.Start.Sub(rep.StartedAt).Seconds(), f.End.Sub(rep.StartedAt).Seconds(), syns, relTime(syn, rep.StartedAt), relTime(synAck, rep.StartedAt), relTime(data, rep.StartedAt))
		}
		if !data.IsZero() {
			var segs strings.Builder
			for _, s := range byPort[local.Port()] {
				if !s.At.Before(f.Start.Add(-time.Second)) && s.At.Before(f.End.Add(time.Second)) {
					fmt.Fprintf(&segs, "\n    %s %s > %s [%s] seq %d..%d", relTime(s.At, rep.StartedAt), s.Src, s.Dst, s.Flags, s.Seq, s.SeqEnd)
				}
			}
			t.Errorf("%s %s -> %s, %+.3fs..%+.3fs (%s): the hub's capture shows the prober's data at %s after its SYN: the connection was up, not a connect timeout; the port's segments from a second before to a second after:%s",
				f.RequestID, f.LocalAddr, f.RemoteAddr, f.Start.Sub(rep.StartedAt).Seconds(), f.End.Sub(rep.StartedAt).Seconds(), f.Error, relTime(data, rep.StartedAt), segs.String())
			continue
		}
		half := f.Start.Add(connectTimeout / 2)
		switch {
		case syn.IsZero() || !syn.Before(half):
			heldBy["the SYN reached Traefik's namespace late or never"]++
		case synAck.IsZero() || !synAck.Before(half):
			heldBy["Traefik's kernel answered late or never"]++
		default:
			heldBy["the prober did not take a timely SYN-ACK"]++
		}
	}
	t.Logf("%d connections to Traefik not up within the prober's connect timeout, each as the hub's capture shows it: %v%s", len(fails), heldBy, detail.String())
	if findingByID(rep, analysis.EdgeFailedConnections) == nil {
		t.Errorf("no %s finding for %d connections to Traefik not up in time (findings %v)", analysis.EdgeFailedConnections, len(fails), findingIDs(rep))
	}
}

// refereeSawEverything fails the test when the hub's tcpdump dropped
// packets: the edge's own failures (n of class) pass by what the capture
// does not hold (no data from the prober, for a connect timeout no SYN at
// all), which a capture with holes would give for any connection.
func refereeSawEverything(t *testing.T, hub *capture.Capture, n int, class string) {
	t.Helper()
	if dropped := hub.Dropped(); dropped > 0 {
		t.Errorf("the hub's tcpdump dropped %d packets: it cannot referee the %d %s failures through the edge, which pass by what it did not see", dropped, n, class)
	}
}

// hubSegmentsByClientPort groups the hub capture's segments by the
// client's port: the client is a node's address (the node masquerades
// its pods') or the prober's own.
func hubSegmentsByClientPort(hub *capture.Capture) map[uint16][]capture.Segment {
	byPort := map[uint16][]capture.Segment{}
	for _, s := range hub.Segments() {
		port := s.Dst.Port()
		if s.Dst.Port() == 443 {
			port = s.Src.Port()
		}
		byPort[port] = append(byPort[port], s)
	}
	return byPort
}

// labPrefix is the lab's network, where the hub sees every client of
// Traefik: the client host's own address or a node's.
var labPrefix = netip.MustParsePrefix(netns.LabCIDR)

// fromTheProber: s, a segment on the client port of local (the
// prober's end of a connection to Traefik), is on that connection: its
// client is local's address or, masqueraded, a lab address. By port and
// network only: two probers behind two nodes using one port at once
// would be taken for one.
func fromTheProber(s capture.Segment, local netip.AddrPort) bool {
	client := s.Src
	if s.Src.Port() == 443 {
		client = s.Dst
	}
	return client.Addr() == local.Addr() || labPrefix.Contains(client.Addr())
}

// ownSegments is, of a port's segments on the hub (segs), those of the
// connection a failure from local had between from and to (the
// request's start and end): from the prober's last new SYN on the port in
// that window (its retransmissions keep the sequence number) onward. Not
// every segment of the window: a request begins before its name's lookup
// and its socket's bind, and an earlier connection on the same port (its
// port free again once it closed) can carry data after that; a loaded
// run's hub capture showed 12 connect timeouts with such an earlier
// connection's ClientHello and request in their window. nil without a
// SYN of the prober's in the window.
func ownSegments(segs []capture.Segment, local netip.AddrPort, from, to time.Time) []capture.Segment {
	var in []capture.Segment
	for _, s := range segs {
		if !s.At.Before(from) && s.At.Before(to) && fromTheProber(s, local) {
			in = append(in, s)
		}
	}
	first := -1 // the first SYN of the last new connection
	for i, s := range in {
		if s.Has('S') && s.Dst.Port() == 443 && (first < 0 || s.Seq != in[first].Seq) {
			first = i
		}
	}
	if first < 0 {
		return nil
	}
	return in[first:]
}

// keptOfClass is the failures of class on path ("" for every path) that
// the report kept: all n of them, or the test fails (each must be held to
// the capture).
func keptOfClass(t *testing.T, rep *report.Report, path, class string, n uint64) []report.Failure {
	t.Helper()
	var fails []report.Failure
	for _, f := range rep.Failures {
		if f.Class == class && (path == "" || f.Path == path) {
			fails = append(fails, f)
		}
	}
	if uint64(len(fails)) != n {
		t.Errorf("%d %s failures kept of %d: each must be held to the capture", len(fails), class, n)
	}
	return fails
}
