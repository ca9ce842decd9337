// Command replaywire re-runs the timeline's inference on reports the lab's
// wire checks kept (LAB_KEEP_WIRE) and holds it to what conntrack recorded
// in the same run: for each failure conntrack mapped to a pod address (not
// one that followed an earlier connection's entry, which the timeline
// cannot know), is the pod named for certain the one conntrack names, or
// among the candidates? It prints the counts per report and in all, and every
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

	"github.com/rollprobe/rollprobe/internal/wirecheck"
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
// and compares the result with that evidence, naming pods as the wire
// checks do (wirecheck: NAME@REVISION).
func replay(path string) (map[string]int, []string, error) {
	r, err := report.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	podAt, ident := wirecheck.PodAt(r), wirecheck.Idents(r)
	inferred, followed := wirecheck.TimelineAlone(r)
	truth := map[string]string{}
	for _, f := range r.Failures {
		if addr, err := netip.ParseAddrPort(f.PodAddr); err == nil && !followed[f.RequestID] {
			truth[f.RequestID] = podAt(addr, f.Start)
		}
	}
	counts := map[string]int{}
	var contradictions []string
	for _, f := range inferred.Failures {
		pod, ok := truth[f.RequestID]
		if !ok || pod == "" {
			continue
		}
		var candidates []string
		for _, k := range f.Candidates {
			candidates = append(candidates, ident[k])
		}
		switch {
		case f.Confidence == 1 && ident[f.LikelyPod] == pod:
			counts["certain "+string(f.Class)]++
		case f.Confidence == 1:
			counts["contradicted "+string(f.Class)]++
			contradictions = append(contradictions, fmt.Sprintf("%s (%s at %+.3fs): %s for certain, conntrack says %s (%s)",
				f.RequestID, f.Class, f.Start.Sub(r.StartedAt).Seconds(), ident[f.LikelyPod], pod, f.Context))
		case slices.Contains(candidates, pod):
			counts["ambiguous "+string(f.Class)]++
		default:
			counts["missed "+string(f.Class)]++
			contradictions = append(contradictions, fmt.Sprintf("%s (%s at %+.3fs): candidates %v, conntrack says %s (%s)",
				f.RequestID, f.Class, f.Start.Sub(r.StartedAt).Seconds(), candidates, pod, f.Context))
		}
	}
	return counts, contradictions, nil
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
