package analysis

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// The propagation finding's fix names the container to hold: the one with
// the port the Service targets, as the exits say. A proxy in
// spec.containers that exited seconds before the app behind it (whose own
// preStop hook kept it up) is named in the evidence, and the fix says the
// hook must be on the proxy: the kubelet stops each container on its own.
func TestThePropagationFixNamesTheServingContainer(t *testing.T) {
	type exit struct {
		container        string
		serverMS         int
		servicePort, nat bool // nat: a native sidecar
	}
	for _, tc := range []struct {
		name                  string
		exits                 []exit
		wantFix, wantEvidence string // "" for no such line
		notFix                string
	}{
		{"one container, its port targeted", []exit{{"app", 2000, true, false}},
			"give container app a preStop hook", "", "the hook must be on"},
		{"a proxy in front stopped 5s before the app",
			[]exit{{"proxy", 2000, true, false}, {"app", 7000, false, false}},
			"give container proxy a preStop hook that waits at least",
			"container proxy, which has the port the Service sends traffic to, exited first in 1 pod, 5s before container app (the kubelet's times, to the second)",
			""},
		// A mesh redirects the app's port to its proxy: which stop the
		// refusals met cannot be told, and the fix names no container.
		{"a container without the port stopped first: unsure",
			[]exit{{"istio-proxy", 2000, false, false}, {"app", 7000, true, false}},
			"give the container a preStop hook", "", "the hook must be on"},
		{"a container without the port stopped in the same second: the port's",
			[]exit{{"istio-proxy", 2000, false, false}, {"app", 2000, true, false}},
			"give container app a preStop hook", "", "the hook must be on"},
		{"the same second orders nothing",
			[]exit{{"proxy", 2000, true, false}, {"app", 2000, false, false}},
			"give container proxy a preStop hook", "", "the hook must be on"},
		{"no container known to have the port (an undeclared number)",
			[]exit{{"app", 2000, false, false}},
			"give the container a preStop hook", "", "the hook must be on"},
		{"a proxy that crashed before the deletion did not stop first at it",
			[]exit{{"proxy", 0, true, false}, {"app", 7000, false, false}},
			"give container proxy a preStop hook", "", "the hook must be on"},
		{"a native sidecar that crashed first is not a legacy one",
			[]exit{{"tls", 2000, true, true}, {"app", 7000, false, false}},
			"give sidecar tls a preStop hook", "", "the hook must be on"},
	} {
		ready := ev(1000, report.PodReady, "o", "old")
		ready.ReadinessConnects = true
		timeline := []report.Event{ev(500, report.PodCreated, "o", "old"), ready, deleted(1800, 1000, "o")}
		for _, x := range tc.exits {
			e := exited(x.serverMS+300, x.serverMS, "o")
			e.Container, e.ServicePort, e.Sidecar = x.container, x.servicePort, x.nat
			timeline = append(timeline, e)
		}
		r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670}, Timeline: timeline,
			Failures: []report.Failure{fail(2600, "refused", true, ""), fail(3100, "refused", true, "")}}
		analyse(r)
		f := find(r, StopsBeforePropagation)
		if f == nil {
			t.Fatalf("%s: no %s finding: %+v", tc.name, StopsBeforePropagation, r.Findings)
		}
		if !strings.Contains(f.Fix, tc.wantFix) || (tc.notFix != "" && strings.Contains(f.Fix, tc.notFix)) {
			t.Errorf("%s: fix %q, want %q and not %q", tc.name, f.Fix, tc.wantFix, tc.notFix)
		}
		early := ""
		for _, line := range f.Evidence {
			if strings.Contains(line, "exited first in") {
				early = line
			}
		}
		if (tc.wantEvidence == "") != (early == "") || !strings.Contains(early, tc.wantEvidence) {
			t.Errorf("%s: evidence %q, want a line with %q", tc.name, f.Evidence, tc.wantEvidence)
		}
	}
}

// Where a serving container stopped first, the fix says the hook belongs
// on it, and offers a native sidecar where the server has them.
func TestTheEarlyStopFixFollowsTheServerVersion(t *testing.T) {
	proxy, app := exited(2300, 2000, "o"), exited(7300, 7000, "o")
	proxy.Container, proxy.ServicePort, app.Container = "proxy", true, "app"
	for _, tc := range []struct {
		version      string
		want, absent string
	}{
		{"1.36", "the hook must be on container proxy itself: another container's hook delays only its own stop (where it is a proxy in front of the app, running it as a native sidecar, an init container with restartPolicy: Always, does the same: the kubelet stops a native sidecar only after the app's containers have exited)", "1.29+"},
		{"", "the kubelet stops a native sidecar only after the app's containers have exited; Kubernetes 1.29+)", ""},
		{"1.28", "the hook must be on container proxy itself: another container's hook delays only its own stop", "native sidecar"},
	} {
		ready := ev(1000, report.PodReady, "o", "old")
		ready.ReadinessConnects = true
		r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670, ServerVersion: tc.version},
			Timeline: []report.Event{ev(500, report.PodCreated, "o", "old"), ready, deleted(1800, 1000, "o"), proxy, app},
			Failures: []report.Failure{fail(2600, "refused", true, "")}}
		analyse(r)
		f := find(r, StopsBeforePropagation)
		if f == nil || !strings.Contains(f.Fix, tc.want) || (tc.absent != "" && strings.Contains(f.Fix, tc.absent)) {
			t.Errorf("server %q: finding %+v, want a fix with %q and without %q", tc.version, f, tc.want, tc.absent)
		}
	}
}

// The abrupt-close finding's fix names the container to drain where the
// exits say which has the Service's port: a proxy in front of the app
// closes the kept-alive connections, not the app.
func TestTheAbruptCloseFixNamesTheServingContainer(t *testing.T) {
	for _, tc := range []struct {
		servicePort bool
		meshFirst   bool // a container without the port exited a second before
		want        string
	}{
		{true, false, "in container proxy (the Service's port), drain on SIGTERM: "},
		{false, false, "drain on SIGTERM: "},
		{true, true, "drain on SIGTERM: "},
	} {
		proxy := exited(2300, 2000, "o")
		proxy.Container, proxy.ServicePort = "proxy", tc.servicePort
		ready := ev(1000, report.PodReady, "o", "old")
		ready.ReadinessConnects = true
		timeline := []report.Event{ev(500, report.PodCreated, "o", "old"), ready, deleted(1800, 1000, "o"), proxy}
		if tc.meshFirst {
			mesh := exited(1200, 1000, "o")
			mesh.Container = "istio-proxy"
			timeline = append(timeline, mesh)
		}
		r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670},
			Timeline: timeline,
			Failures: []report.Failure{cutInFlight(fail(2600, "eof_reused", false, "o"))}}
		analyse(r)
		if f := find(r, AbruptKeepAliveClose); f == nil || !strings.HasPrefix(f.Fix, tc.want) {
			t.Errorf("service_port %v, mesh first %v: finding %+v, want a fix starting %q", tc.servicePort, tc.meshFirst, f, tc.want)
		}
	}
}

// An app behind a proxy that exited first, the proxy (the Service's port)
// still taking connections: the 5xx it answered without the app's backend
// header, on a path with no proxy before the pods, show it. The fix puts
// the hook on the app, which must outlive the proxy. Through an edge the
// same exits show nothing of which stop the failures met: the fix names
// no container.
func TestAnAppGoneBehindItsProxy(t *testing.T) {
	for _, tc := range []struct {
		name                string
		viaEdge             bool
		wantFix, notFix     string
		wantEvidence, notEv string
	}{
		{"cluster IP", false,
			"give container app a preStop hook that waits at least", "give container proxy",
			"container app exited first in 1 pod, 5s before container proxy, which has the port the Service sends traffic to (the kubelet's times, to the second); 2 failures on those pods were 5xx without the backend header on a path with no proxy before the pods: container proxy answered them for the app behind it, gone",
			"proxy_5xx means the proxy in front"},
		{"through an edge", true,
			"give the container a preStop hook", "give container",
			"proxy_5xx means the proxy in front", "exited first in"},
	} {
		app, proxy := exited(2300, 2000, "o"), exited(7300, 7000, "o")
		app.Container, proxy.Container, proxy.ServicePort = "app", "proxy", true
		ready := ev(1000, report.PodReady, "o", "old")
		ready.ReadinessConnects = true
		f1, f2 := fail(2600, report.ClassProxy5xx, true, ""), fail(3100, report.ClassProxy5xx, true, "")
		f1.ViaEdge, f2.ViaEdge = tc.viaEdge, tc.viaEdge
		r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670, Entry: &report.Entry{Via: report.ViaClusterIP}},
			Timeline: []report.Event{ev(500, report.PodCreated, "o", "old"), ready, deleted(1800, 1000, "o"), app, proxy},
			Failures: []report.Failure{f1, f2}}
		r.Totals.ByClass = map[string]uint64{report.ClassProxy5xx: 2}
		analyse(r)
		f := find(r, StopsBeforePropagation)
		if f == nil {
			t.Fatalf("%s: no finding among %+v; failures %+v", tc.name, r.Findings, r.Failures)
		}
		ev := strings.Join(f.Evidence, "\n")
		if !strings.Contains(f.Fix, tc.wantFix) || strings.Contains(f.Fix, tc.notFix) || !strings.Contains(ev, tc.wantEvidence) || strings.Contains(ev, tc.notEv) {
			t.Errorf("%s: evidence\n%s\nfix %q\nwant %q and %q, not %q nor %q", tc.name, ev, f.Fix, tc.wantEvidence, tc.wantFix, tc.notEv, tc.notFix)
		}
		if !tc.viaEdge && !strings.Contains(f.Fix, "container app is behind container proxy, which answered for it once it had exited: it must stop after it, with a preStop hook at least as long as that of container proxy") {
			t.Errorf("%s: fix %q does not say the app must outlive the proxy", tc.name, f.Fix)
		}
	}
}

// A 5xx the pod's own proxy answered on a connection the prober kept
// alive to the pod came whatever the endpoints said: it sizes no preStop,
// and the evidence says so. The one on a new connection does.
func TestAPodsOwn5xxOnAKeptAliveConnectionSizesNoPreStop(t *testing.T) {
	app, proxy := exited(2300, 2000, "o"), exited(7300, 7000, "o")
	app.Container, proxy.Container, proxy.ServicePort = "app", "proxy", true
	ready := ev(1000, report.PodReady, "o", "old")
	ready.ReadinessConnects = true
	fresh, reused := fail(2600, report.ClassProxy5xx, true, ""), fail(6000, report.ClassProxy5xx, false, "")
	r := &report.Report{StartedAt: t0, Rollout: &report.Rollout{TriggerSeenAfterMS: 670, Entry: &report.Entry{Via: report.ViaClusterIP}},
		Timeline: []report.Event{ev(500, report.PodCreated, "o", "old"), ready, deleted(1800, 1000, "o"), app, proxy},
		Failures: []report.Failure{fresh, reused}}
	r.Totals.ByClass = map[string]uint64{report.ClassProxy5xx: 2}
	analyse(r)
	f := find(r, StopsBeforePropagation)
	if f == nil {
		t.Fatalf("no finding among %+v", r.Findings)
	}
	ev := strings.Join(f.Evidence, "\n")
	if want := "1 of them was a 5xx answered at the pod on connections the prober kept alive to it, which endpoint changes never touch"; !strings.Contains(ev, want) {
		t.Errorf("evidence\n%s\nlacks %q", ev, want)
	}
	// The new connection's 5xx, 0.8 s after the deletion's receipt, sizes
	// it (PreStopSeconds: 0.8*1.5+1, rounded up); the kept-alive one, 4.2 s
	// after, would have made it 8.
	if x := Explain(r); x.PreStopSeconds > 3 || !strings.Contains(f.Fix, fmt.Sprintf("at least %ds", x.PreStopSeconds)) {
		t.Errorf("preStop %d, fix %q: want it sized from the new connection's 5xx alone", x.PreStopSeconds, f.Fix)
	}
}
