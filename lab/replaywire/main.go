// Command replaywire re-runs the timeline's inference on reports the lab's
// wire checks kept (LAB_KEEP_WIRE) and holds it to what conntrack recorded
// in the same run: for each failure conntrack mapped to a pod address (not
// one that joined an earlier connection's entry, which the timeline cannot
// know), is the pod named for certain the one conntrack names, or among the
// candidates? It prints the counts per report and in all, and every
// contradiction. A change to the analysis is replayed on runs kept before
// and after it:
//
//	LAB_KEEP_WIRE=/tmp/wire ROLLPROBE_REQUIRE_LAB=1 go test ./lab -run 'TestLab/attribution_agrees_with_the_wire' -count 5
//	go run ./lab/replaywire /tmp/wire/*.json
//
// It exits 1 when any certain attribution contradicts conntrack.
package main

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/report"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: replaywire REPORT.json...")
		os.Exit(2)
	}
	total := map[string]int{}
	wrong := 0
	for _, path := range os.Args[1:] {
		counts, contradictions, err := replay(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		fmt.Printf("%s: %s\n", path, format(counts))
		for _, c := range contradictions {
			fmt.Println("  " + c)
		}
		wrong += len(contradictions)
		for k, v := range counts {
			total[k] += v
		}
	}
	fmt.Printf("in all: %s\n", format(total))
	if wrong > 0 {
		os.Exit(1)
	}
}

// replay analyses the report at path again without conntrack's evidence
// and compares the result with that evidence.
func replay(path string) (map[string]int, []string, error) {
	r, err := report.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	podAt := holders(r.Timeline)
	truth := map[string]string{}
	inferred := *r
	inferred.Failures = nil
	for _, f := range r.Failures {
		if addr, err := netip.ParseAddrPort(f.PodAddr); err == nil && !f.JoinedConntrackEntry {
			truth[f.RequestID] = podAt(addr.Addr().String(), f.Start)
		}
		f.PodAddr, f.PriorPodAddr, f.JoinedConntrackEntry = "", "", false
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence, f.Context = "", 0, nil, "", ""
		inferred.Failures = append(inferred.Failures, f)
	}
	x := analysis.Explain(&inferred)
	counts := map[string]int{}
	var contradictions []string
	for _, f := range x.Failures {
		pod, ok := truth[f.RequestID]
		if !ok || pod == "" {
			continue
		}
		switch {
		case f.Confidence == 1 && f.LikelyPod == pod:
			counts["certain "+string(f.Class)]++
		case f.Confidence == 1:
			counts["contradicted "+string(f.Class)]++
			contradictions = append(contradictions, fmt.Sprintf("%s (%s at %+.3fs): %s for certain, conntrack says %s (%s)",
				f.RequestID, f.Class, f.Start.Sub(r.StartedAt).Seconds(), f.LikelyPod, pod, f.Context))
		case slices.Contains(f.Candidates, pod):
			counts["ambiguous "+string(f.Class)]++
		default:
			counts["missed "+string(f.Class)]++
			contradictions = append(contradictions, fmt.Sprintf("%s (%s at %+.3fs): candidates %v, conntrack says %s (%s)",
				f.RequestID, f.Class, f.Start.Sub(r.StartedAt).Seconds(), f.Candidates, pod, f.Context))
		}
	}
	return counts, contradictions, nil
}

// holders says which pod held an address at a time: the last one seen with
// it by then (the lab hands a freed address to a new pod), or the first.
func holders(timeline []report.Event) func(ip string, at time.Time) string {
	type holder struct {
		pod  string
		from time.Time
	}
	byIP := map[string][]holder{}
	for _, e := range timeline {
		hs := byIP[e.IP]
		if e.IP == "" || e.Pod == "" || (len(hs) > 0 && hs[len(hs)-1].pod == e.Pod) {
			continue
		}
		byIP[e.IP] = append(hs, holder{e.Pod, e.At})
	}
	return func(ip string, at time.Time) string {
		pod := ""
		for _, h := range byIP[ip] {
			if pod == "" || !h.from.After(at) {
				pod = h.pod
			}
		}
		return pod
	}
}

func format(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}
