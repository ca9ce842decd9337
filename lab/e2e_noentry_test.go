package lab_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
)

// captureRejects captures the ICMP errors on every node while the test
// goes on: kube-proxy's reject of a Service address it holds no endpoint
// for is one, sent by the probing host to itself. Nil without tcpdump.
func captureRejects(t *testing.T) []*capture.Capture {
	t.Helper()
	if capture.Available() != nil {
		return nil
	}
	var caps []*capture.Capture
	for _, n := range netns.Nodes(lab.DefaultNodes) {
		caps = append(caps, capture.Start(t, n.NS, "any", "icmp"))
	}
	return caps
}

// checkCleanBesidesTheNodesOwn is checkClean for a graceful rollout, save
// for one kind of failure no pod caused: a refusal whose SYN the probing
// host's own rules rejected while the API listed serving endpoints
// (kube-proxy held none for the Service at that instant). A CI run of the
// graceful canary had one, 6 s after the last endpoint change with four
// ready endpoints; node-1's capture showed kube-proxy's own ICMP reject
// of the Service address (once in 7 runs; its cause in kube-proxy not
// found). Each such failure must be held to the wire: conntrack had no
// entry for it (NoConntrackEntry), and an ICMP unreachable the probing
// host sent itself quotes its SYN, from its port to the Service address;
// the run must fail (exit 1: a CI gate never lies about a drop) with the
// proxy-rules finding and no other error. It returns how many there were
// in each of the run's windows given (seconds from its start), so step
// verdicts can be judged.
func checkCleanBesidesTheNodesOwn(t *testing.T, r *runResult, rejects []*capture.Capture, windows [][2]float64) (inWindow []int) {
	t.Helper()
	inWindow = make([]int, len(windows))
	if r.rep.Totals.Failed == 0 {
		if r.exit != 0 {
			t.Fatalf("exit %d with nothing failed\n%s", r.exit, r.out())
		}
		checkClean(t, r)
		return inWindow
	}
	if rejects == nil {
		t.Fatalf("%d failed, and no capture to tell who refused them\n%s", r.rep.Totals.Failed, r.out())
	}
	var seen []capture.Unreachable
	for _, c := range rejects {
		seen = append(seen, c.Unreachables()...)
	}
	if uint64(len(r.rep.Failures)) != r.rep.Totals.Failed {
		t.Fatalf("%d failed, %d kept", r.rep.Totals.Failed, len(r.rep.Failures))
	}
	for _, f := range r.rep.Failures {
		local, err1 := netip.ParseAddrPort(f.LocalAddr)
		remote, err2 := netip.ParseAddrPort(f.RemoteAddr)
		if f.Class != report.ClassRefused || !f.NoConntrackEntry || f.LikelyPod != "" || err1 != nil || err2 != nil {
			t.Fatalf("failure #%d (%s at %+.2fs, no conntrack entry %v, pod %q, %s > %s) on a graceful rollout\n%s",
				f.Seq, f.Class, f.AtMS/1000, f.NoConntrackEntry, f.LikelyPod, f.LocalAddr, f.RemoteAddr, r.out())
		}
		found := false
		for _, u := range seen {
			if u.Src.Port() == local.Port() && u.Dst == remote && u.From == u.Src.Addr() &&
				!u.At.Before(f.Start.Add(-time.Millisecond)) && !u.At.After(f.End.Add(time.Millisecond)) {
				found = true
			}
		}
		if !found {
			t.Fatalf("failure #%d (refused at %+.2fs from port %d): no ICMP unreachable the probing host sent itself quotes its SYN to %s (%d unreachables captured)",
				f.Seq, f.AtMS/1000, local.Port(), remote, len(seen))
		}
		for i, w := range windows {
			if s := f.AtMS / 1000; s >= w[0] && s < w[1] {
				inWindow[i]++
			}
		}
		t.Logf("failure #%d (refused at %+.2fs): the probing host's own reject of %s, on the wire and in conntrack; context %q", f.Seq, f.AtMS/1000, remote, f.Context)
	}
	if r.exit != 1 {
		t.Errorf("exit %d with %d requests the node refused: want 1", r.exit, len(r.rep.Failures))
	}
	if findingByID(r.rep, analysis.ProxyRulesWithoutEndpoint) == nil {
		t.Errorf("findings %+v: want %s", r.rep.Findings, analysis.ProxyRulesWithoutEndpoint)
	}
	for _, f := range r.rep.Findings {
		if f.Severity == report.SeverityError && f.ID != analysis.ProxyRulesWithoutEndpoint {
			t.Errorf("error finding on a graceful rollout: %+v", f)
		}
	}
	return inWindow
}
