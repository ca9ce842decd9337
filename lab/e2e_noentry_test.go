package lab_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
)

// checkCleanBesidesTheNodesOwn is checkClean with the run's windows:
// nothing failed (exit 0, no error finding), save for one kind of failure
// no pod caused, a refusal whose SYN a node's own rules rejected (the
// probing host's, or a prober pod's node's) while the API listed serving
// endpoints. kube-proxy's nftables mode
// replaces a Service's DNAT rule and its numgen map on each sync, and a
// SYN evaluated across that update can miss the map and meet the reject of
// ClusterIPs (lab/tools/nft-map-race.sh reproduces it without a cluster).
// CI met it in the graceful canary (node-1's capture showed the node's
// own ICMP reject) and in the plain graceful rollout. Each such failure
// must be held to the wire (requireNodesOwnRejects) and, when the run read
// conntrack, have no entry there; the run must fail (exit 1: a CI gate
// never lies about a drop), with the proxy-rules finding when conntrack
// was read, and no other error. It returns how many there were in each of
// the windows given (seconds from the run's start), so step verdicts can
// be judged.
func checkCleanBesidesTheNodesOwn(t *testing.T, r *runResult, windows [][2]float64) (inWindow []int) {
	t.Helper()
	inWindow = make([]int, len(windows))
	if r.rep.Totals.Failed == 0 {
		if r.exit != 0 {
			t.Fatalf("exit %d with nothing failed\n%s", r.exit, r.out())
		}
		for _, f := range r.rep.Findings {
			if f.Severity == report.SeverityError {
				t.Fatalf("error finding on a clean rollout: %+v", f)
			}
		}
		return inWindow
	}
	if uint64(len(r.rep.Failures)) != r.rep.Totals.Failed {
		t.Fatalf("%d failed, %d kept", r.rep.Totals.Failed, len(r.rep.Failures))
	}
	// A run whose conntrack saw its connections must say so (no entry, no
	// pod named, the proxy-rules finding); a plain probe, or one from a
	// host whose conntrack sees none of them (a node port probed from
	// outside: the rewrite is on the node), is held to the wire alone.
	watched := r.rep.Conntrack != nil && r.rep.Conntrack.Watching && r.rep.Conntrack.Connections > 0
	// So must one whose probers read the ICMP error that refused a
	// connection (refused_by icmp, held to the wire's below), wherever
	// they ran: the finding, and no pod named.
	byICMP := false
	for _, f := range r.rep.Failures {
		byICMP = byICMP || f.RefusedBy == report.RefusedByICMP
		if (watched && !f.NoConntrackEntry) || f.LikelyPod != "" {
			t.Fatalf("failure #%d (%s at %+.2fs, no conntrack entry %v, pod %q) on a graceful rollout\n%s",
				f.Seq, f.Class, f.AtMS/1000, f.NoConntrackEntry, f.LikelyPod, r.out())
		}
		for i, w := range windows {
			if s := f.AtMS / 1000; s >= w[0] && s < w[1] {
				inWindow[i]++
			}
		}
	}
	requireNodesOwnRejects(t, r, r.rep.Failures)
	if r.exit != 1 {
		t.Errorf("exit %d with %d requests the node refused: want 1", r.exit, len(r.rep.Failures))
	}
	if (watched || byICMP) && findingByID(r.rep, analysis.ProxyRulesWithoutEndpoint) == nil {
		t.Errorf("findings %+v: want %s", r.rep.Findings, analysis.ProxyRulesWithoutEndpoint)
	}
	for _, f := range r.rep.Findings {
		if f.Severity == report.SeverityError && f.ID != analysis.ProxyRulesWithoutEndpoint {
			t.Errorf("error finding on a graceful rollout: %+v", f)
		}
	}
	return inWindow
}

// requireNodesOwnRejects holds each failure to the wire: refused, and
// refused by a node's own rules, never by a pod. Either an ICMP
// unreachable a node's rules sent quotes its SYN, from its port to the
// address it dialled, within the request's time (a millisecond either
// side for the clocks of capture and prober), the sender being the
// probing host itself or, for a prober pod, its node (from the pods'
// gateway there): kube-proxy's reject of a ClusterIP. Or, where the probe
// addressed a node (a node port), a reset from that address to its port
// and no reset to its port from any other address in that time: a SYN
// that met no rewrite there reached the node's own stack, which has no
// socket at the node port (a warm CI run's DaemonSet under a Local
// policy: one "Out" reset from the node port, nothing on the pod side). A
// pod's refusal is a reset from the pod's address, captured on its
// node's pod side before the rewrite back (to the client's port, or, for
// a connection a node masqueraded, to that node), and never matches.
func requireNodesOwnRejects(t *testing.T, r *runResult, failures []report.Failure) {
	t.Helper()
	rejects, out := r.rejects, r.out()
	if rejects == nil {
		t.Fatalf("%d failed, and no capture to tell who refused them\n%s", len(failures), out)
	}
	wire := readOwnRejects(rejects)
	for _, f := range failures {
		if _, err := netip.ParseAddrPort(f.LocalAddr); f.Class != report.ClassRefused || err != nil {
			t.Fatalf("failure #%d (%s at %+.2fs, %s > %s): not a refusal a node's own rules can have made\n%s",
				f.Seq, f.Class, f.AtMS/1000, f.LocalAddr, f.RemoteAddr, out)
		}
		how, from := wire.how(f)
		if how == "" {
			t.Fatalf("failure #%d (refused at %+.2fs from %s, %s to %s): neither an ICMP unreachable a node's rules sent quoting its SYN to %s, nor a reset from a node port no pod's reset preceded (%d unreachables, %d resets captured; %s; the wall clock moved %v against the monotonic one over the run)\n%s",
				f.Seq, f.AtMS/1000, f.LocalAddr, f.Start.Format(time.RFC3339Nano), f.End.Format(time.RFC3339Nano), f.RemoteAddr,
				len(wire.unreachables), len(wire.resets), wire.samePort(f), r.wallStep, out)
		}
		// What the prober read from its socket's error queue is what the
		// wire shows: the same sender. It reads it on every Linux socket
		// (the lab's probers and nodes are), so an ICMP reject on the wire
		// must have been read.
		switch read := f.RefusedBy; {
		case from.IsValid() && read != report.RefusedByICMP:
			t.Fatalf("failure #%d (refused at %+.2fs): the wire shows %s from %s; rollprobe read %q\n%s", f.Seq, f.AtMS/1000, how, from, read, out)
		case read == report.RefusedByICMP && (f.ICMP == nil || f.ICMP.From != from.String()):
			t.Fatalf("failure #%d (refused at %+.2fs): rollprobe read an ICMP error %+v; the wire shows %s (from %v)\n%s", f.Seq, f.AtMS/1000, f.ICMP, how, from, out)
		case read == report.RefusedByRST && from.IsValid():
			t.Fatalf("failure #%d (refused at %+.2fs): rollprobe read a reset; the wire shows %s from %s\n%s", f.Seq, f.AtMS/1000, how, from, out)
		}
		t.Logf("failure #%d (refused at %+.2fs %s): %s of %s, on the wire (refused_by %q, icmp %+v); context %q", f.Seq, f.AtMS/1000, f.Node, how, f.RemoteAddr, f.RefusedBy, f.ICMP, f.Context)
	}
}

// ownRejects is what the nodes' captures hold to tell a node's own
// rejection of a SYN from a pod's (requireNodesOwnRejects).
type ownRejects struct {
	unreachables    []capture.Unreachable
	resets          []capture.Segment
	pods            netip.Prefix
	gateways, nodes map[netip.Addr]bool
}

func readOwnRejects(rejects []*capture.Capture) *ownRejects {
	w := &ownRejects{pods: netip.MustParsePrefix(netns.ClusterCIDR), gateways: map[netip.Addr]bool{}, nodes: map[netip.Addr]bool{}}
	for _, c := range rejects {
		w.unreachables = append(w.unreachables, c.Unreachables()...)
		for _, s := range c.Segments() {
			if s.Has('R') {
				w.resets = append(w.resets, s)
			}
		}
	}
	for _, n := range netns.Nodes(lab.DefaultNodes) {
		w.gateways[netip.MustParseAddr(n.PodGateway)] = true
		w.nodes[netip.MustParseAddr(n.IP)] = true
	}
	return w
}

// samePort lists the captured resets to f's local port with their time
// against f's, for a failure how could not match: which of its rules the
// wire missed.
func (w *ownRejects) samePort(f report.Failure) string {
	local, err := netip.ParseAddrPort(f.LocalAddr)
	if err != nil {
		return "no local port"
	}
	var seen []string
	for _, s := range w.resets {
		if s.Dst.Port() == local.Port() || s.Src.Port() == local.Port() {
			seen = append(seen, fmt.Sprintf("%s > %s %s at start%+v, end%+v", s.Src, s.Dst, s.Flags, s.At.Sub(f.Start), s.At.Sub(f.End)))
		}
	}
	if len(seen) == 0 {
		return "no reset to or from its port"
	}
	return "resets of its port: " + strings.Join(seen, "; ")
}

// how says how the wire shows that a node's own rules refused f, a
// refusal ("" when it does not), and the sender of the ICMP unreachable
// that did (invalid for a reset).
func (w *ownRejects) how(f report.Failure) (string, netip.Addr) {
	local, err1 := netip.ParseAddrPort(f.LocalAddr)
	remote, err2 := netip.ParseAddrPort(f.RemoteAddr)
	if f.Class != report.ClassRefused || err1 != nil || err2 != nil {
		return "", netip.Addr{}
	}
	during := func(at time.Time) bool {
		return !at.Before(f.Start.Add(-time.Millisecond)) && !at.After(f.End.Add(time.Millisecond))
	}
	for _, u := range w.unreachables {
		if u.Src.Port() == local.Port() && u.Dst == remote && (u.From == u.Src.Addr() || w.gateways[u.From]) && during(u.At) {
			return "the node's own ICMP reject", u.From
		}
	}
	if !w.nodes[remote.Addr()] {
		return "", netip.Addr{}
	}
	// A pod's reset of a connection a node masqueraded goes to the node's
	// address, perhaps from another port: any pod's reset to a node in
	// that time counts against too.
	fromNode, fromOthers := 0, 0
	for _, s := range w.resets {
		if !during(s.At) {
			continue
		}
		switch {
		case s.Src == remote && s.Dst.Port() == local.Port():
			fromNode++
		case s.Dst.Port() == local.Port() || (w.pods.Contains(s.Src.Addr()) && w.nodes[s.Dst.Addr()]):
			fromOthers++
		}
	}
	if fromNode > 0 && fromOthers == 0 {
		return "the node's own reset at its node port", netip.Addr{}
	}
	return "", netip.Addr{}
}
