package lab_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
	"github.com/rollprobe/rollprobe/report"
)

// testH2 rolls the HTTP/2 and gRPC samples with rollprobe speaking h2 or
// gRPC from the client host through the first node's NodePort, under a
// capture decoded by Wireshark's HTTP/2 dissector (tshark): the frames on
// the wire are the referee of every class, and each sample's way of
// stopping is the finding it must get.
func testH2(t *testing.T, ctx context.Context, c *lab.Client) {
	if err := capture.TsharkAvailable(); err != nil {
		skipOrFail(t, "the frame referee: %v", err)
	}
	for _, tc := range []struct {
		sample   string
		protocol string
		nodePort int
		exit     int
		// allowed are the classes the sample's stop can cause; finding is
		// the one it must get ("" for none).
		allowed []string
		finding string
		check   func(t *testing.T, rep *report.Report)
	}{
		{"h2-naive", "h2", 30090, 1, []string{report.ClassClosedNoGoAway, report.ClassReset, report.ClassRefused, report.ClassConnectTimeout},
			analysis.H2CloseWithoutGoAway, nil},
		{"h2-shutdown", "h2", 30091, 1, []string{report.ClassGoAwayCut, report.ClassGoAwayUnprocessed},
			analysis.H2GoAwayDroppedStreams, func(t *testing.T, rep *report.Report) {
				for _, f := range rep.Failures {
					if f.GoAway != report.GoAwaySingle || f.H2Code != "NO_ERROR" {
						t.Errorf("%s %s: goaway %q, h2_code %q: want http.Server.Shutdown's single GOAWAY, NO_ERROR", f.RequestID, f.Class, f.GoAway, f.H2Code)
					}
				}
				if rep.Totals.ByClass[report.ClassGoAwayCut] == 0 {
					t.Errorf("no goaway_cut: the 100 ms shutdown timeout must cut streams of 500 ms")
				}
			}},
		{"grpc-stop", "grpc", 30092, 1, []string{report.ClassClosedNoGoAway, report.ClassReset}, analysis.H2CloseWithoutGoAway, nil},
		{"grpc-graceful", "grpc", 30093, 0, nil, "", func(t *testing.T, rep *report.Report) {
			if rep.Config.GRPCMethod != "grpc.health.v1.Health/Check" {
				t.Errorf("config.grpc_method %q", rep.Config.GRPCMethod)
			}
			// Every call named its pod (x-pod-name): the pods' counts add
			// up to the ok count, the new pods among them.
			var served uint64
			newServed := false
			for _, p := range rep.Pods {
				served += p.Served
				newServed = newServed || (p.Revision == rep.Rollout.NewRevision && p.Served > 0)
			}
			if served != rep.Totals.OK || !newServed {
				t.Errorf("pods served %d by x-pod-name (new ones: %v), ok %d", served, newServed, rep.Totals.OK)
			}
		}},
	} {
		t.Run(tc.sample, func(t *testing.T) {
			ensureSample(t, ctx, c, tc.sample)
			target := fmt.Sprintf("http://%s:%d", firstNode().IP, tc.nodePort)
			if err := waitServingFrom(ctx, netns.LabNetNS, target+"/"); err != nil {
				t.Fatal(err)
			}
			wire := capture.Start(t, netns.LabNetNS, "any", "tcp port "+strconv.Itoa(tc.nodePort))
			r := startRunOn(t, []string{"--client"}, tc.sample, target, "--protocol", tc.protocol).wait(t)
			frames := wire.H2(tc.nodePort)
			if r.repErr != nil || r.exit != tc.exit {
				t.Fatalf("exit %d (%v), want %d\n%s", r.exit, r.repErr, tc.exit, r.out())
			}
			rep := r.rep
			validateSchema(t, r.reportPath)
			checkPage(t, r.htmlPath, rep)
			if rep.Rollout == nil || rep.Rollout.Status != report.StatusComplete || rep.Config.Protocol != tc.protocol ||
				rep.Config.Connections != 10 || rep.Prober.Engine != "goroutines" {
				t.Fatalf("rollout %+v, protocol %q, connections %d, engine %q", rep.Rollout, rep.Config.Protocol, rep.Config.Connections, rep.Prober.Engine)
			}
			// The referee: each class as many times as the frames show, on the
			// connections of the run itself (the preflight's 50 requests before
			// it are not in the report).
			wireClasses := frames.Since(rep.StartedAt).Classes()
			got := map[string]uint64{}
			for k, v := range rep.Totals.ByClass {
				got[k] = v
			}
			got[report.ClassClosedNoGoAway] += got[report.ClassReset]
			got[report.ClassReset] = 0
			for _, k := range report.ClassNames {
				if got[k] != wireClasses[k] {
					t.Errorf("%s: rollprobe %d, the wire %d", k, got[k], wireClasses[k])
				}
			}
			for k, v := range rep.Totals.ByClass {
				if v > 0 && k != report.ClassOK && !slices.Contains(tc.allowed, k) {
					t.Errorf("%d %s: not what %s's stop causes (%v)", v, k, tc.sample, tc.allowed)
				}
			}
			if tc.finding != "" && findingByID(rep, tc.finding) == nil {
				t.Errorf("findings %v, want %s", findingIDs(rep), tc.finding)
			}
			if tc.finding == "" {
				checkClean(t, r)
			}
			if tc.check != nil {
				tc.check(t, rep)
			}
			t.Logf("exit %d, %d failed of %d %v, wire %v, findings %v", r.exit, rep.Totals.Failed, rep.Totals.Sent,
				nonZero(rep.Totals.ByClass), wireClasses, findingIDs(rep))
		})
	}
}
