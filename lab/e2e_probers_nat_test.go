package lab_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/internal/wirecheck"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
)

// testProbersConntrack runs naive's rollout from two probers on their
// nodes' network (--probers-conntrack) and checks what their conntrack
// said against a packet capture on each node (tcpdump, in the node's
// namespace, where a host-network prober's SYNs leave from): at least 95%
// of the failed connections mapped, every mapped one going to the pod
// the wire shows (100%), failures seen on both nodes, every failure
// conntrack named certain, and what each pod served by conntrack held to
// its backend header.
func testProbersConntrack(t *testing.T, ctx context.Context, c *lab.Client) {
	if err := capture.Available(); err != nil {
		skipOrFail(t, "%v", err)
	}
	ip := ensureSample(t, ctx, c, "naive")
	wires := map[string]*capture.Capture{}
	for _, n := range netns.Nodes(lab.DefaultNodes) {
		wires[n.Name] = capture.Start(t, n.NS, "any", capture.SYNFilter)
	}
	args := append(append([]string{}, proberArgs...), "--probers-conntrack", "--conn", "new")
	r := startRunOn(t, []string{"--client"}, "naive", "http://"+ip+"/", args...).wait(t)
	checkRunReport(t, r, report.StatusComplete)
	if r.exit != 1 || r.rep.Totals.Failed == 0 {
		t.Fatalf("exit %d, %d failed; want 1 with failures\n%s", r.exit, r.rep.Totals.Failed, r.out())
	}
	ct := r.rep.Conntrack
	if ct == nil || !ct.Watching || ct.Reason != "" {
		t.Fatalf("conntrack %+v: both probers ran on their node's network with NET_ADMIN", ct)
	}
	if n := ct.FailuresMapped + ct.FailuresUnmapped; n == 0 || float64(ct.FailuresMapped) < 0.95*float64(n) {
		t.Errorf("conntrack mapped %d of %d failed connections, want 95%% at least (%+v)", ct.FailuresMapped, n, *ct)
	}
	servedAgreesWithTheBackendHeader(t, r.rep)
	// By node, by source address and port: not by port alone, as a node's
	// capture also holds the other node's prober's SYNs to this node's
	// pods, from its own node's address and ports of its own, and the
	// kubelet's probes of this node's pods are from the bridge's address
	// as a host-network prober's are. A CI run took such a SYN, to one of
	// this node's pods from the same port number within the window, for
	// two connect timeouts whose conntrack said otherwise (138 of 140
	// agreed): which of the two it was is not known.
	syns := map[string]map[netip.AddrPort][]capture.SYN{}
	for node, w := range wires {
		syns[node] = map[netip.AddrPort][]capture.SYN{}
		for _, s := range w.SYNs() {
			syns[node][s.Src] = append(syns[node][s.Src], s)
		}
	}
	podAt := wirecheck.PodAt(r.rep)
	podCIDR := map[string]netip.Prefix{}
	for _, n := range netns.Nodes(lab.DefaultNodes) {
		podCIDR[n.Name] = netip.MustParsePrefix(n.PodCIDR)
	}
	checked, agree, byNode := 0, 0, map[string]int{}
	for _, f := range r.rep.Failures {
		local, err := netip.ParseAddrPort(f.LocalAddr)
		if err != nil || f.PodAddr == "" {
			continue
		}
		byNode[f.Node]++
		// A failed connect's local address is its SYN's source (the
		// node's pod bridge address, the route's for Service addresses),
		// held to the node's capture below.
		if local.Addr().IsUnspecified() {
			t.Errorf("%s on %s (%s): local_addr %s has no IP", f.RequestID, f.Node, f.Class, local)
			continue
		}
		// A fresh connection's SYN: the first from its port at or after the
		// request began (tcpdump and the probers read the nodes' clock).
		var syn *capture.SYN
		for i, s := range syns[f.Node][local] {
			if !s.At.Before(f.Start.Add(-time.Millisecond)) && !s.At.After(f.End) {
				syn = &syns[f.Node][local][i]
				break
			}
		}
		if syn == nil {
			// No SYN left the node in the request's window: only one to a
			// vanished pod of its own can stay (no neighbour); one to
			// another node's pod is routed, and must be on the wire, if
			// not within the window, then near it: a prober's times reach
			// the report through the clock offset its pings measured,
			// within half a round trip (a refusal's SYN and reset, here
			// ~1 ms apart, missed the window in a run here).
			pod := netip.MustParseAddrPort(f.PodAddr).Addr()
			near := slices.ContainsFunc(syns[f.Node][local], func(s capture.SYN) bool {
				return s.Dst.Addr() == pod && !s.At.Before(f.Start.Add(-50*time.Millisecond)) && !s.At.After(f.End.Add(50*time.Millisecond))
			})
			if !podCIDR[f.Node].Contains(pod) && !near {
				t.Errorf("%s (%s, prober %s on %s, port %d): no SYN on the wire, though conntrack says it went to %s, not a pod of its node", f.RequestID, f.Class, f.Prober, f.Node, local.Port(), pod)
			}
			continue
		}
		checked++
		wirePod := podAt(syn.Dst, syn.At)
		mapped := podAt(netip.MustParseAddrPort(f.PodAddr), syn.At)
		if wirePod == "" || mapped != wirePod {
			t.Errorf("%s (%s, prober %s on %s): conntrack says %s (%s), the wire %s (%s)", f.RequestID, f.Class, f.Prober, f.Node,
				f.PodAddr, mapped, syn.Dst, wirePod)
			continue
		}
		agree++
		if f.Evidence != report.EvidenceConntrack || f.Confidence != 1 || !strings.HasPrefix(wirePod, strings.Split(f.LikelyPod, "#")[0]+"@") {
			t.Errorf("%s: pod %s (%s, confidence %v), the wire %s", f.RequestID, f.LikelyPod, f.Evidence, f.Confidence, wirePod)
		}
	}
	if checked == 0 {
		t.Fatalf("no mapped failure was found on the wire (%d failures)", len(r.rep.Failures))
	}
	if len(byNode) < 2 {
		t.Errorf("mapped failures by node %v: want both probers' nodes", byNode)
	}
	t.Logf("conntrack from the probers: %d of %d failed connections mapped; %d checked on the wire, %d agree; by node %v; %d of %d failures certain",
		ct.FailuresMapped, ct.FailuresMapped+ct.FailuresUnmapped, checked, agree, byNode, r.rep.Attribution.Certain,
		r.rep.Attribution.Certain+r.rep.Attribution.Ambiguous+r.rep.Attribution.Unattributed)
}
