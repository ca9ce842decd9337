package lab_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/doctor"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
)

// testTraefikWeightedByHand: traefik-weighted, a route Traefik weighs
// half and half over two Services and nobody reweighs, its one pod of
// traefik-weighted made unready for 5 s by the run's deploy command
// (demoapp's /unready; the Deployment is left as it was: no rollout).
// Probed through the lab's Traefik and, side by side, through a second
// one with allowEmptyServices=true, and through the lab's Gateway (the
// first Traefik), whose HTTPRoute weighs the same two Services by its
// backendRefs, through a nested route on the first Traefik (a
// TraefikService weighing, beside the other Service, a TraefikService over
// traefik-weighted alone), and through a mirrored one on both Traefiks (a
// TraefikService sending to the other Service and copying every request
// to traefik-weighted). Referees: each Traefik's access log. Through
// the default one's TraefikService, plain, nested or mirrored, every
// request of the host failed while the Service was empty, each a 404
// Traefik answered itself (it dropped the route; the mirrored route so
// too, though the Service never answers it); the other Traefik failed
// none on the mirrored route, serving it meanwhile; through the other, and through the
// Gateway (Traefik's Gateway provider builds an empty Service as a
// balancer with no server, not an error), that Service's half failed, each a 503 Traefik answered itself ("no
// available server"), the other half served by the other Service's pod.
// rollprobe counts exactly those, names no pod for any (no X-Pod-Name),
// puts the 503s beside the unready pod with no pod terminating, and
// explains them all (checkWeightedFindings).
func testTraefikWeightedByHand(t *testing.T, ctx context.Context, c *lab.Client) {
	const (
		sample = "traefik-weighted"
		host   = sample + ".lab.example"
		gwHost = sample + "-gw.lab.example" // its HTTPRoute, on the lab's Gateway
		// A TraefikService weighing, beside the other Service, another
		// TraefikService over sample's Service alone.
		nestedHost = sample + "-nested.lab.example"
		// A TraefikService sending to the other Service and mirroring
		// every request to sample's.
		mirrorHost = sample + "-mirror.lab.example"
		// A TraefikService choosing one of the two by highest random
		// weight (a hash of the client's address).
		hrwHost = sample + "-hrw.lab.example"
	)
	cfg := lab.Config{StateDir: stateDir}
	ensureWorkload(t, ctx, c, rollout.KindDeployment, sample)
	ensureWorkload(t, ctx, c, rollout.KindDeployment, sample+"-other")
	deleteWeightedAtEnd(t, c, sample)
	waitEdge(t, "https://"+host+"/", cfg.EdgeCAPath())
	waitEdge(t, "https://"+gwHost+"/", cfg.EdgeCAPath())
	waitEdge(t, "https://"+nestedHost+"/", cfg.EdgeCAPath())
	waitEdge(t, "https://"+mirrorHost+"/", cfg.EdgeCAPath())
	waitEdge(t, "https://"+hrwHost+"/", cfg.EdgeCAPath())
	traefikLogOnFailure(t)
	emptyURL := startTraefikAllowingEmpty(t, ctx, host)

	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + sample})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("want one pod of %s with an IP: %v %v", sample, err, pods)
	}
	pod, ip := pods.Items[0].Name, pods.Items[0].Status.PodIP
	// The deploy command: the pod unready for 5 s (its probe sees it
	// within 3 s), then time for it to be ready again and for both
	// Traefiks to hear of it, within the command so the run probes on.
	deploy := fmt.Sprintf("%s get http://%s/unready?for=5s && sleep 15", filepath.Join(binDir, "demoapp"), net.JoinHostPort(ip, "8080"))
	// Seven paths at 50 requests/s each, 350 in all (the mirrored routes
	// send Traefik a copy of each): at the default 200 each, 1,400 TLS
	// requests/s through two Traefiks beside the control plane, a slow
	// machine's Traefiks (2026-12-04, alone) answered late from the
	// start, the prober opened connections to keep its schedule (623 and
	// 820 workers on one path) and their handshakes failed (tls up to
	// 1,269 on a path, connect and request timeouts), in 2 of 4 runs and
	// in both CI rehearsals: load, not the route. 50 a second still puts
	// about 150 requests of each path in the Service's 3 s gap.
	r := startWorkloadRun(t, nil, rollout.KindDeployment, sample, "edge=https://"+host+"/", "--target", "allow-empty="+emptyURL,
		"--target", "gateway=https://"+gwHost+"/", "--target", "nested=https://"+nestedHost+"/", "--target", "mirror=https://"+mirrorHost+"/",
		"--target", "allow-empty-mirror="+strings.Replace(emptyURL, host, mirrorHost, 1), "--target", "hrw=https://"+hrwHost+"/", "--cacert", cfg.EdgeCAPath(), "--conn", "keepalive", "--rate", "50", "--exec", "--", "sh", "-c", deploy).wait(t)
	// no_change: the deploy command changed no workload.
	checkEdgeReportWith(t, r, report.StatusNoChange)
	if r.exit != 1 {
		t.Fatalf("exit %d, want 1 (requests failed)\n%s", r.exit, r.out())
	}
	want := []string{"edge", "allow-empty", "gateway", "nested", "mirror", "allow-empty-mirror", "hrw"}
	if len(r.rep.Paths) != len(want) {
		t.Fatalf("paths %+v, want %v", r.rep.Paths, want)
	}
	for i, name := range want {
		if r.rep.Paths[i].Name != name {
			t.Fatalf("paths %+v, want %v", r.rep.Paths, want)
		}
	}
	edge, empty, gw, nested, mirror, emptyMirror, hrw := r.rep.Paths[0], r.rep.Paths[1], r.rep.Paths[2], r.rep.Paths[3], r.rep.Paths[4], r.rep.Paths[5], r.rep.Paths[6]
	unready := false
	for _, e := range r.rep.Timeline {
		if e.Kind == report.PodUnready && e.Pod == pod {
			unready = true
		}
	}
	if !unready {
		t.Fatalf("the timeline has no PodUnready of %s\n%s", pod, r.out())
	}

	// The default Traefik: its own 404s, every request of the host, on
	// the TraefikService and on the one nesting another over the Service.
	byEdge := readAccessLog(t, cfg, edge.RunID, host)
	own404 := checkRouteDropped(t, r.rep, "the default Traefik", byEdge, edge)
	byNested := readAccessLog(t, cfg, nested.RunID, nestedHost)
	nested404 := checkRouteDropped(t, r.rep, "the default Traefik's nested route", byNested, nested)
	byMirror := readAccessLog(t, cfg, mirror.RunID, mirrorHost)
	mirror404 := checkRouteDropped(t, r.rep, "the default Traefik's mirrored route", byMirror, mirror)
	byHRW := readAccessLog(t, cfg, hrw.RunID, hrwHost)
	hrw404 := checkRouteDropped(t, r.rep, "the default Traefik's highest-random-weight route", byHRW, hrw)
	// The prober's one address keeps to one of the two Services: which
	// one decides what rollprobe can say of the route (checkWeightedFindings).
	hrwChose := ""
	for _, e := range byHRW {
		if e.DownstreamStatus == 200 {
			chose := sample
			if strings.HasPrefix(e.OriginPod, sample+"-other-") {
				chose = sample + "-other"
			}
			if hrwChose != "" && chose != hrwChose {
				t.Errorf("the highest-random-weight route answered one client from both Services (%s, %s): want one", hrwChose, chose)
			}
			hrwChose = chose
		}
	}
	for _, e := range byMirror {
		if e.DownstreamStatus == 200 && !strings.HasPrefix(e.OriginPod, sample+"-other-") {
			t.Errorf("request %s of the mirrored route answered by %q: want only the other Service's pod (the mirror's answers are thrown away)", e.RequestID, e.OriginPod)
		}
	}

	// The Traefik allowing empty Services, and the Gateway: their own
	// 503s, the empty Service's half; the other half served meanwhile.
	byEmpty := readAccessLogFile(t, cfg.TraefikAllowingEmptyAccessLog(), []string{empty.RunID}, host)
	kept := checkRouteKept(t, r.rep, "the Traefik allowing empty Services", byEmpty, empty, sample)
	byGateway := readAccessLog(t, cfg, gw.RunID, gwHost)
	keptByGateway := checkRouteKept(t, r.rep, "the Gateway", byGateway, gw, sample)
	// The Traefik allowing empty Services builds the mirroring
	// TraefikService with an empty mirror: the host loses nothing.
	byEmptyMirror := readAccessLogFile(t, cfg.TraefikAllowingEmptyAccessLog(), []string{emptyMirror.RunID}, mirrorHost)
	keptMirrored := checkMirrorKept(t, r.rep, byEmptyMirror, emptyMirror, byEdge, sample)

	for _, f := range r.rep.Failures {
		byID, want := byEdge, 404
		switch f.Path {
		case nested.Name:
			byID = byNested
		case mirror.Name:
			byID = byMirror
		case hrw.Name:
			byID = byHRW
		case empty.Name:
			byID, want = byEmpty, 503
		case gw.Name:
			byID, want = byGateway, 503
		}
		if e, ok := byID[f.RequestID]; !ok || e.DownstreamStatus != want || e.ServiceAddr != "" {
			t.Errorf("failure %s on %s (%s %d): Traefik's line %+v, want its own %d", f.RequestID, f.Path, f.Class, f.Status, e, want)
		}
		if f.LikelyPod != "" || !strings.Contains(f.Context, "the edge answered it itself") {
			t.Errorf("failure %s on %s put on %q (%s): Traefik answered it, no pod did", f.RequestID, f.Path, f.LikelyPod, f.Context)
		}
		if want == 503 && !strings.Contains(f.Context, "while pod "+pod+" was unready and no pod was terminating") {
			t.Errorf("503 failure %s on %s: context %q, want the unready pod named", f.RequestID, f.Path, f.Context)
		}
	}
	checkWeightedFindings(t, r, sample, hrwChose)
	// The doctor named the risk before any traffic, from the
	// TraefikService it read, and the nested one through the TraefikService
	// that holds the Service.
	if f := findingByID(r.rep, doctor.TraefikWeightedRouteOnePod); f == nil || f.Source != report.SourceDoctor || f.Severity != report.SeverityWarning ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "TraefikService "+sample+" weighs service "+sample+" at weight 1 beside service "+sample+"-other") ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "TraefikService "+sample+"-nested weighs service "+sample+" through traefikservice "+sample+"-inner (which holds it) at weight 1 beside service "+sample+"-other") ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "TraefikService "+sample+"-mirror mirrors to service "+sample+" the requests it sends to service "+sample+"-other (a copy of 100% of them") ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "TraefikService "+sample+"-hrw chooses by highest random weight (by client address) service "+sample+" at weight 1 beside service "+sample+"-other") {
		t.Errorf("doctor finding %+v: want the warning naming TraefikServices %s, %s-nested, %s-mirror and %s-hrw", f, sample, sample, sample, sample)
	}
	t.Logf("%s unready: the default Traefik answered %d requests 404 itself (%d on the nested route, %d on the mirrored one, %d on the highest-random-weight one, which chose service %s for the prober); the one allowing empty Services %s, and on the mirrored route %s; the Gateway %s",
		pod, own404, nested404, mirror404, hrw404, hrwChose, kept, keptMirrored, keptByGateway)
}

// checkRouteDropped: through path, an edge that dropped the weighted route
// while a Service in it was empty: every failure is its own 404 (no
// backend in its access log, byLog), and rollprobe's count equals them.
func checkRouteDropped(t *testing.T, rep *report.Report, edge string, byLog map[string]accessEntry, path report.PathReport) uint64 {
	t.Helper()
	var own404 uint64
	for _, e := range byLog {
		switch {
		case e.DownstreamStatus == 404 && e.ServiceAddr == "" && e.OriginPod == "":
			own404++
		case e.DownstreamStatus != 200 || e.OriginPod == "":
			t.Errorf("request %s through %s: status %d from %q, want 200 from a pod or its own 404", e.RequestID, edge, e.DownstreamStatus, e.OriginPod)
		}
	}
	if own404 == 0 || path.Totals.Failed != own404 || path.Totals.ByClass[report.ClassHTTPStatus] != own404 {
		t.Fatalf("%s answered %d requests 404 itself; rollprobe counted %d failed %v on path %s\n%s\nrollprobe's failures of the path:\n%s", edge, own404, path.Totals.Failed, nonZero(path.Totals.ByClass), path.Name, tallyBySecond(byLog), failuresBySecond(rep, path.Name))
	}
	return own404
}

// checkRouteKept: through path, an edge that kept the weighted route while
// sample's Service was empty: every failure is its own 503 (no backend in
// its access log, byLog), rollprobe's count equals them, and the other
// Service's pod served requests between the first and the last of them.
// It returns what it measured, for the log.
func checkRouteKept(t *testing.T, rep *report.Report, edge string, byLog map[string]accessEntry, path report.PathReport, sample string) string {
	t.Helper()
	var own503 uint64
	var from, to time.Time
	for _, e := range byLog {
		switch {
		case e.DownstreamStatus == 503 && e.ServiceAddr == "" && e.OriginPod == "":
			own503++
			if from.IsZero() || e.StartUTC.Before(from) {
				from = e.StartUTC
			}
			if e.StartUTC.After(to) {
				to = e.StartUTC
			}
		case e.DownstreamStatus != 200 || e.OriginPod == "":
			t.Errorf("request %s through %s: status %d from %q, want 200 from a pod or its own 503", e.RequestID, edge, e.DownstreamStatus, e.OriginPod)
		}
	}
	if own503 == 0 || path.Totals.Failed != own503 || path.Totals.ByClass[report.ClassProxy5xx] != own503 {
		t.Fatalf("%s answered %d requests 503 itself; rollprobe counted %d failed %v on path %s\n%s\nrollprobe's failures of the path:\n%s", edge, own503, path.Totals.Failed, nonZero(path.Totals.ByClass), path.Name, tallyBySecond(byLog), failuresBySecond(rep, path.Name))
	}
	var servedMeanwhile, sentMeanwhile uint64
	for _, e := range byLog {
		if e.StartUTC.Before(from) || e.StartUTC.After(to) {
			continue
		}
		sentMeanwhile++
		if e.DownstreamStatus == 200 && strings.HasPrefix(e.OriginPod, sample+"-other-") {
			servedMeanwhile++
		}
	}
	if servedMeanwhile == 0 {
		t.Errorf("%s served nothing from its first own 503 to its last: want the other Service's half\n%s", edge, tallyBySecond(byLog))
	}
	return fmt.Sprintf("answered %d requests 503 itself (%s to %s), serving %d of %d meanwhile from the other Service",
		own503, from.Format("15:04:05.000"), to.Format("15:04:05.000"), servedMeanwhile, sentMeanwhile)
}

// checkMirrorKept: through path, an edge that kept a route mirroring to
// sample's Service while that Service was empty (Traefik allowing empty
// Services): no request failed, by rollprobe and by the access log
// (byLog), every answer came from the other Service's pod, and some were
// served while the default Traefik answered its own 404s (byDropped):
// while the mirror was empty.
func checkMirrorKept(t *testing.T, rep *report.Report, byLog map[string]accessEntry, path report.PathReport, byDropped map[string]accessEntry, sample string) string {
	t.Helper()
	var from, to time.Time
	for _, e := range byDropped {
		if e.DownstreamStatus == 404 && e.ServiceAddr == "" {
			if from.IsZero() || e.StartUTC.Before(from) {
				from = e.StartUTC
			}
			if e.StartUTC.After(to) {
				to = e.StartUTC
			}
		}
	}
	var served, meanwhile uint64
	for _, e := range byLog {
		if e.DownstreamStatus != 200 || !strings.HasPrefix(e.OriginPod, sample+"-other-") {
			t.Errorf("request %s of the mirrored route kept: status %d from %q, want 200 from the other Service's pod", e.RequestID, e.DownstreamStatus, e.OriginPod)
			continue
		}
		served++
		if !from.IsZero() && !e.StartUTC.Before(from) && !e.StartUTC.After(to) {
			meanwhile++
		}
	}
	if path.Totals.Failed != 0 || served == 0 || meanwhile == 0 {
		t.Fatalf("the mirrored route through the Traefik allowing empty Services: rollprobe counted %d failed %v; its access log %d served, %d of them while the default Traefik dropped the route (%s to %s)\n%s\nrollprobe's failures of the path:\n%s",
			path.Totals.Failed, nonZero(path.Totals.ByClass), served, meanwhile, from.Format("15:04:05.000"), to.Format("15:04:05.000"), tallyBySecond(byLog), failuresBySecond(rep, path.Name))
	}
	return fmt.Sprintf("failed none, serving %d (%d of them while the default Traefik dropped its route)", served, meanwhile)
}

// deleteWeightedAtEnd deletes traefik-weighted's objects when the test
// ends: its Deployments go with the group's others anyway, but a route
// left over Services without endpoints has Traefik log an error on every
// reload for the rest of the lab's tests.
func deleteWeightedAtEnd(t *testing.T, c *lab.Client, sample string) {
	t.Cleanup(func() {
		ctx := context.Background()
		del := func(what string, err error) {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s: %v", what, err)
			}
		}
		traefik := func(resource string) schema.GroupVersionResource {
			return schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: resource}
		}
		for _, o := range []struct {
			gvr  schema.GroupVersionResource
			name string
		}{
			{traefik("ingressroutes"), sample}, {traefik("ingressroutes"), sample + "-nested"}, {traefik("ingressroutes"), sample + "-mirror"}, {traefik("ingressroutes"), sample + "-hrw"},
			{traefik("traefikservices"), sample}, {traefik("traefikservices"), sample + "-nested"}, {traefik("traefikservices"), sample + "-inner"},
			{traefik("traefikservices"), sample + "-mirror"}, {traefik("traefikservices"), sample + "-hrw"},
			{schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}, sample},
		} {
			del(o.gvr.Resource+" "+o.name, c.Dynamic.Resource(o.gvr).Namespace("default").Delete(ctx, o.name, metav1.DeleteOptions{}))
		}
		for _, name := range []string{sample, sample + "-other"} {
			del("deployment "+name, c.Kube.AppsV1().Deployments("default").Delete(ctx, name, metav1.DeleteOptions{}))
			del("service "+name, c.Kube.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}))
		}
	})
}

// checkWeightedFindings: the failures of testTraefikWeightedByHand, all
// the edges' own answers, are explained by the Service's gap (no serving
// endpoint, while the API listed none: always there, the pod unready for
// seconds) or by edge-had-no-backend (while it
// still listed the pod: a Traefik that heard of the change first), and by
// nothing else; the gap's finding says, from each path's own traffic,
// that the default Traefik failed the whole route, plain and nested (none
// served by the other Service's pod), and the other Traefik and the
// Gateway kept it (some served), that the mirrored route, which never got
// an answer from the Service, was failed whole all the same, and its fix
// keeps the route.
func checkWeightedFindings(t *testing.T, r *runResult, sample, hrwChose string) {
	t.Helper()
	leading := func(ev []string, has string) int {
		for _, line := range ev {
			if strings.Contains(line, has) {
				var n int
				if _, err := fmt.Sscanf(line, "%d ", &n); err == nil {
					return n
				}
			}
		}
		return -1
	}
	explained := 0
	// The pod is unready about 3 s, so the API lists no serving endpoint
	// for a while in every run: the gap's finding is required, or a run
	// whose failures all went to edge-had-no-backend would pass unread.
	gap := findingByID(r.rep, analysis.NoServingEndpoint)
	if gap == nil {
		t.Errorf("no %s finding: %v", analysis.NoServingEndpoint, findingIDs(r.rep))
	} else {
		inGap := leading(gap.Evidence, ": not a propagation race")
		own := leading(gap.Evidence, " the edge answered itself (")
		if inGap <= 0 || own != inGap {
			t.Errorf("%s: %d failures, %d of them the edge's own; want all:\n%s", gap.ID, inGap, own, strings.Join(gap.Evidence, "\n"))
		}
		explained += inGap
		ev := strings.Join(gap.Evidence, "\n")
		// Each path's own line: the default Traefik's TraefikServices,
		// plain and nested, dropped the route; the other Traefik and the
		// Gateway kept it.
		for path, verdict := range map[string]string{
			"edge":        "served none of them: the edge failed the whole route",
			"nested":      "served none of them: the edge failed the whole route",
			"allow-empty": "the edge kept the route and failed service " + sample + "'s share alone",
			"gateway":     "the edge kept the route and failed service " + sample + "'s share alone",
		} {
			line := ""
			for _, l := range gap.Evidence {
				if strings.HasPrefix(l, "path "+path+"'s route also reached pods outside service "+sample+" during the run ("+sample+"-other-") {
					line = l
				}
			}
			if !strings.Contains(line, verdict) {
				t.Errorf("%s's evidence for path %s: %q, want %q:\n%s", gap.ID, path, line, verdict, ev)
			}
		}
		// The mirrored route: no answer from the Service, dropped whole.
		mirrored := ""
		for _, l := range gap.Evidence {
			if strings.HasPrefix(l, "path mirror's route got every answer of the run from outside service "+sample+" (the backend header named "+sample+"-other-") {
				mirrored = l
			}
		}
		if !strings.Contains(mirrored, "none from its pods, yet in the ") || !strings.Contains(mirrored, "it served none: the route depends on service "+sample+" without sending it requests to answer, and the edge failed it whole") {
			t.Errorf("%s's evidence for path mirror: %q, want the route dropped whole for a Service it sends nothing to answer:\n%s", gap.ID, mirrored, ev)
		}
		// The highest-random-weight route, dropped whole too: said as the
		// weighted route's if the prober's address chose the Service (its
		// other pods reached only by other clients: none said), as the
		// mirror's if it chose the other.
		hrwLine := ""
		for _, l := range gap.Evidence {
			if strings.HasPrefix(l, "path hrw's route") {
				hrwLine = l
			}
		}
		switch {
		case hrwChose == sample && hrwLine != "":
			t.Errorf("%s's evidence for path hrw, whose client kept to service %s: %q, want none (no other pod reached)", gap.ID, sample, hrwLine)
		case hrwChose == sample+"-other" && !strings.Contains(hrwLine, "none from its pods, yet in the "):
			t.Errorf("%s's evidence for path hrw, whose client kept to service %s-other: %q, want the route dropped for a Service that answers it nothing", gap.ID, sample, hrwLine)
		}
		if strings.Contains(ev, "path allow-empty-mirror's") {
			t.Errorf("%s's evidence names path allow-empty-mirror, which failed nothing:\n%s", gap.ID, ev)
		}
		if !strings.Contains(gap.Fix, "allowEmptyServices=true: Traefik keeps the route") {
			t.Errorf("%s's fix %q: want the route kept", gap.ID, gap.Fix)
		}
		t.Logf("%s: %s", gap.ID, strings.Join(gap.Evidence, " | "))
	}
	if fd := findingByID(r.rep, analysis.EdgeHadNoBackend); fd != nil {
		var n int
		if _, err := fmt.Sscanf(fd.Title[strings.Index(fd.Title, " to send ")+1:], "to send %d requests", &n); err != nil {
			t.Errorf("%s's title %q: %v", fd.ID, fd.Title, err)
		}
		explained += n
		t.Logf("%s: %s", fd.ID, strings.Join(fd.Evidence, " | "))
	}
	if uint64(explained) != r.rep.Totals.Failed {
		t.Errorf("%d of %d failures explained by %s and %s: %v", explained, r.rep.Totals.Failed, analysis.NoServingEndpoint, analysis.EdgeHadNoBackend, findingIDs(r.rep))
	}
	for _, f := range r.rep.Findings {
		if f.Severity == report.SeverityError && f.ID != analysis.NoServingEndpoint && f.ID != analysis.EdgeHadNoBackend {
			t.Errorf("error finding %s for the edges' own answers: %s", f.ID, f.Title)
		}
	}
}

// failuresBySecond tallies the failures of path the report kept by the
// second they began in (UTC, as tallyBySecond tallies an access log) and
// class, after the path's prober figures: where a count beyond the
// edge's own answers came from (a loaded machine's handshakes to the edge
// failed as the run began).
func failuresBySecond(rep *report.Report, path string) string {
	type key struct {
		sec   int64
		class string
	}
	n := map[key]int{}
	kept := 0
	for _, f := range rep.Failures {
		if f.Path == path {
			n[key{f.Start.Unix(), f.Class}]++
			kept++
		}
	}
	keys := slices.Collect(maps.Keys(n))
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.sec, b.sec), strings.Compare(a.class, b.class))
	})
	var b strings.Builder
	for _, p := range rep.Paths {
		if p.Name == path {
			fmt.Fprintf(&b, "prober: %.1f of %.0f requests/s, %d workers, schedule lag up to %.0f ms; %d failures kept\n",
				p.Prober.AchievedRate, p.Prober.TargetRate, p.Prober.Workers, p.Prober.MaxScheduleLagMS, kept)
		}
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %s: %d\n", time.Unix(k.sec, 0).UTC().Format("15:04:05"), k.class, n[k])
	}
	return b.String()
}

// testTraefikCrossNamespace: traefik-cross-namespace, a TraefikService of
// namespace edge-cross weighing traefik-weighted's two Services of
// default, routed from default. The doctor reads it (TraefikServices of
// every namespace, as the lab's admin may list them) and says that
// Traefik builds it only with allowCrossNamespace. Referees: the lab's
// Traefik (the default, false) logs that it refused the reference and
// answers every request of the host 404 itself (its access log); the
// second one (allowCrossNamespace=true) serves each from one of the two
// Services' pods (its access log).
func testTraefikCrossNamespace(t *testing.T, ctx context.Context, c *lab.Client) {
	const (
		sample = "traefik-weighted"
		ns     = "edge-cross"
		host   = "traefik-cross.lab.example"
	)
	cfg := lab.Config{StateDir: stateDir}
	ensureWorkload(t, ctx, c, rollout.KindDeployment, sample)
	ensureWorkload(t, ctx, c, rollout.KindDeployment, sample+"-other")
	deleteWeightedAtEnd(t, c, sample)
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		route := schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "ingressroutes"}
		if err := c.Dynamic.Resource(route).Namespace("default").Delete(context.Background(), "traefik-cross", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ingressroute traefik-cross: %v", err)
		}
		// The namespace takes its TraefikService with it.
		if err := c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	since := time.Now().Add(-time.Second).Truncate(time.Second)
	traefikLogOnFailure(t)
	apply(t, "traefik-cross-namespace")
	allowing := startTraefikAllowingEmpty(t, ctx, host) // waits until it serves the host

	out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
		"doctor", "--deployment", "default/"+sample, "-o", "json")
	var res report.DoctorResult
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
		t.Fatalf("doctor: exit %d, %v\n%s", exitCode(err), jerr, out)
	}
	want := "TraefikService " + ns + "/traefik-cross weighs service " + sample + " at weight 1 beside service " + sample + "-other (it names another namespace's: Traefik builds it only with its CRD provider's allowCrossNamespace)"
	var weighted *report.Finding
	for i, f := range res.Findings {
		if f.ID == doctor.TraefikWeightedRouteOnePod {
			weighted = &res.Findings[i]
		}
	}
	if weighted == nil || !slices.Contains(weighted.Evidence, want) {
		t.Errorf("doctor's %s: %+v\nwant the evidence %q", doctor.TraefikWeightedRouteOnePod, weighted, want)
	}

	probe := func(url string) *report.Report {
		t.Helper()
		path := filepath.Join(t.TempDir(), "probe.json")
		out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", filepath.Join(binDir, "rollprobe"),
			"probe", url, "--cacert", cfg.EdgeCAPath(), "--backend-header", "X-Pod-Name", "--rate", "20", "--duration", "1s",
			"--progress", "0", "--report", path)
		rep, rerr := report.ReadFile(path)
		if rerr != nil || rep.Totals.Sent == 0 {
			t.Fatalf("probe %s: exit %d, %v\n%s", url, exitCode(err), rerr, out)
		}
		return rep
	}
	// The second Traefik, allowing it: every request served by a pod of
	// one of the two Services.
	served := probe(allowing)
	byAllowing := readAccessLogFile(t, cfg.TraefikAllowingEmptyAccessLog(), []string{served.Config.RunID}, host)
	pods := map[string]bool{}
	for _, e := range byAllowing {
		pod := strings.TrimPrefix(strings.TrimPrefix(e.OriginPod, sample+"-other-"), sample+"-")
		if e.DownstreamStatus != 200 || pod == e.OriginPod {
			t.Errorf("request %s through the Traefik allowing it: %d from %q, want 200 from a pod of %s or %s-other", e.RequestID, e.DownstreamStatus, e.OriginPod, sample, sample)
		}
		pods[e.OriginPod] = true
	}
	if served.Totals.OK != served.Totals.Sent || uint64(len(byAllowing)) != served.Totals.Sent {
		t.Errorf("through the Traefik allowing it: %d of %d ok, its access log %d lines", served.Totals.OK, served.Totals.Sent, len(byAllowing))
	}
	// The default Traefik: its own 404 for every request of the host.
	refused := probe("https://" + host + "/")
	byDefault := readAccessLog(t, cfg, refused.Config.RunID, host)
	for _, e := range byDefault {
		if e.DownstreamStatus != 404 || e.ServiceAddr != "" || e.OriginPod != "" {
			t.Errorf("request %s through the lab's Traefik: %d from %q (%s), want its own 404", e.RequestID, e.DownstreamStatus, e.OriginPod, e.ServiceAddr)
		}
	}
	if refused.Totals.ByStatus["404"] != refused.Totals.Sent || uint64(len(byDefault)) != refused.Totals.Sent {
		t.Errorf("through the lab's Traefik: %v of %d sent, its access log %d lines: want every one its own 404", refused.Totals.ByStatus, refused.Totals.Sent, len(byDefault))
	}
	var said []string
	for _, l := range traefikLogLines(t, since) {
		if strings.Contains(l, "not in the parent resource namespace") && strings.Contains(l, "traefik-cross") {
			said = append(said, l)
		}
	}
	if len(said) == 0 {
		t.Errorf("the lab's Traefik logged no refusal of the cross-namespace reference since %s", since.Format(time.RFC3339))
	}
	t.Logf("served by %d pods through the Traefik allowing it; the lab's Traefik: %d 404s, and said %q", len(pods), len(byDefault), said[:min(len(said), 1)])
}
