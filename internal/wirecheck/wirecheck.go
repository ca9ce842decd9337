// Package wirecheck is what the lab's wire checks and the replaywire tool
// share to hold a report's attribution to evidence the analysis did not
// make: which pod held an address when a SYN went to it, the name a
// report's pod key stands for, and the report analysed again from its
// timeline alone.
//
// A pod is named NAME@REVISION throughout: a StatefulSet's replacement
// bears its predecessor's name (its report key NAME#2), so the name alone
// would take one for the other.
package wirecheck

import (
	"net/netip"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/analysis"
	"github.com/rollprobe/rollprobe/report"
)

// PodAt returns a lookup of the pod that held an address at a time, from
// the timeline's pod events (the lab may give a freed address to a new
// pod); the port is ignored. "" when no pod of the run held it.
func PodAt(rep *report.Report) func(netip.AddrPort, time.Time) string {
	type holder struct {
		pod  string
		from time.Time
	}
	byIP := map[string][]holder{}
	seen := map[string]bool{}
	for _, e := range rep.Timeline {
		if e.Pod == "" || e.IP == "" || e.Revision == "" || seen[e.Pod+"/"+e.IP] {
			continue // only pod events carry the revision
		}
		seen[e.Pod+"/"+e.IP] = true
		byIP[e.IP] = append(byIP[e.IP], holder{e.Pod + "@" + e.Revision, e.At})
	}
	return func(dst netip.AddrPort, at time.Time) string {
		hs := byIP[dst.Addr().String()]
		pod := ""
		for _, h := range hs {
			if !h.from.After(at) || pod == "" {
				pod = h.pod
			}
		}
		return pod
	}
}

// Idents maps the report's pod keys (what likely_pod and candidates name)
// to NAME@REVISION, from its pods table.
func Idents(rep *report.Report) map[string]string {
	ident := map[string]string{}
	for _, p := range rep.Pods {
		name, _, _ := strings.Cut(p.Pod, "#")
		ident[p.Pod] = name + "@" + p.Revision
	}
	return ident
}

// TimelineAlone is rep analysed again without conntrack's evidence, as
// the timeline infers where conntrack cannot be read (a prober off the
// nodes); rep is not changed. followed holds the failures conntrack shows
// (or makes likely) followed an earlier connection's entry past the
// rules: the timeline, which models the rules, cannot know them.
func TimelineAlone(rep *report.Report) (inferred report.Report, followed map[string]bool) {
	inferred = *rep
	inferred.Failures = nil
	followed = map[string]bool{}
	for _, f := range rep.Failures {
		followed[f.RequestID] = f.JoinedConntrackEntry || f.PriorPodAddr != ""
		f.PodAddr, f.PriorPodAddr, f.JoinedConntrackEntry = "", "", false
		f.LikelyPod, f.Confidence, f.Candidates, f.Evidence, f.Context = "", 0, nil, "", ""
		inferred.Failures = append(inferred.Failures, f)
	}
	x := analysis.Explain(&inferred)
	inferred.Failures, inferred.Attribution = x.Failures, x.Attribution
	return inferred, followed
}
