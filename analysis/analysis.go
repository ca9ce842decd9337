// Package analysis explains a run: it groups failed requests into outage
// windows, lines each failure up with what the pods and endpoints were doing
// at that moment (from the timeline), counts each pod's traffic, and turns
// the patterns into findings with evidence and a concrete fix. It is a pure
// function of the report's facts, so a saved report can be analysed again.
package analysis

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/advice"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// outageGap: failures further apart than this start a new outage window.
const outageGap = time.Second

// readyWindow: failures this soon after a pod turned ready may be its fault.
const readyWindow = 10 * time.Second

// receiveSlack: rollprobe hears of a deletion through its own watch, a
// moment after the kubelet (which acts on the same change) may already have
// stopped the container; failures this much before the received deletion
// still count as after it.
const receiveSlack = 500 * time.Millisecond

// Explanation is what the analysis adds to a report: the kept failures with
// their likely pod and context (in the same order), the outage windows, each
// pod's traffic and the findings.
type Explanation struct {
	Failures []report.Failure
	Outages  []report.Outage
	Pods     []report.PodTraffic
	Findings []report.Finding
}

// Explain analyses r (its failures, series and timeline); r is not changed.
func Explain(r *report.Report) Explanation {
	pods := FoldPods(r.Timeline)
	x := Explanation{Failures: make([]report.Failure, len(r.Failures))}
	for i, f := range r.Failures {
		attribute(&f, pods, r.StartedAt)
		x.Failures[i] = f
	}
	x.Outages = outages(x.Failures, pods)
	x.Pods = traffic(r, pods)
	x.Findings = findings(r, x.Failures, pods)
	return x
}

// serverVersion reads the rollout section's server version ("1.36").
func serverVersion(r *report.Report) advice.Version {
	if r.Rollout == nil {
		return advice.Version{}
	}
	major, minor, ok := strings.Cut(r.Rollout.ServerVersion, ".")
	if !ok {
		return advice.Version{}
	}
	v := advice.Version{}
	v.Major, _ = strconv.Atoi(major)
	v.Minor, _ = strconv.Atoi(strings.TrimRight(minor, "+"))
	return v
}

// class is a failure's class as the prober's enum (the report stores its
// name); an unknown name reads as OK, which no rule claims.
func class(f *report.Failure) prober.Class {
	c, _ := prober.ParseClass(f.Class)
	return c
}

// connectionFailure: no response at all, or a cut one; what a pod that
// stopped listening, or vanished, does to the clients still routed to it.
func connectionFailure(c prober.Class) bool {
	switch c {
	case prober.Refused, prober.Reset, prober.EOF, prober.EOFReused, prober.ConnectTimeout, prober.Truncated:
		return true
	}
	return false
}

// answered: the class needs something at the pod's IP to answer (a RST, a
// FIN, a response). A pod that is gone (its sandbox and IP with it) cannot
// produce them; a connection to its IP just times out.
func answered(c prober.Class) bool {
	switch c {
	case prober.Refused, prober.Reset, prober.EOF, prober.EOFReused, prober.Truncated, prober.Timeout, prober.HTTP5xx, prober.HTTPStatus:
		return true
	}
	return false
}

// anyClass applies no class filter (outage context).
const anyClass = prober.Class(255)

// attribute names the pod a failure most likely hit. With the backend header
// on the response it is certain. Otherwise the candidates are the pods being
// terminated at that moment (deletion requested, not gone long ago); failing
// that, pods that had just turned ready. The failure's class narrows them:
// see terminatingAt and justReadyAt.
func attribute(f *report.Failure, pods *Pods, start time.Time) {
	at := f.Intended
	if f.Backend != "" {
		f.LikelyPod, f.Confidence = f.Backend, 1
		if p := pods.Get(f.Backend); p != nil {
			f.Context = describe(p, at, start)
		}
		return
	}
	c := class(f)
	cands := terminatingAt(pods, at, c)
	if len(cands) == 0 {
		cands = justReadyAt(pods, at, c)
	}
	if len(cands) == 0 {
		f.Context = "no pod was terminating or just ready"
		return
	}
	// The most recent change is the likeliest cause.
	sort.Slice(cands, func(i, j int) bool { return changeTime(cands[i]).After(changeTime(cands[j])) })
	f.LikelyPod = cands[0].Name
	f.Confidence = math.Round(100/float64(len(cands))) / 100
	f.Context = describe(cands[0], at, start)
}

func changeTime(p *Pod) time.Time {
	if p.DeletedAt != nil {
		return *p.DeletedAt
	}
	if p.ReadyAt != nil {
		return *p.ReadyAt
	}
	return time.Time{}
}

// terminatingAt: deletion requested before t, and the pod not gone for more
// than a few seconds (routes to a vanished pod IP linger as long as the
// proxies lag). For a class that needs an answer from the pod, the pod must
// still have been there.
func terminatingAt(pods *Pods, t time.Time, c prober.Class) []*Pod {
	var out []*Pod
	for _, p := range pods.All() {
		if !p.DeletedBy(t, receiveSlack) || t.Sub(*p.DeletedAt) >= 5*time.Minute {
			continue
		}
		switch {
		case p.GoneAt == nil:
		case c != anyClass && answered(c) && t.After(p.GoneAt.Add(receiveSlack)):
			continue
		case t.Sub(*p.GoneAt) >= 30*time.Second:
			continue
		}
		out = append(out, p)
	}
	return out
}

// justReadyAt: pods that turned ready within readyWindow before t. A
// connect_timeout is never theirs: a new pod's IP exists and answers, with a
// refusal if nothing listens yet.
func justReadyAt(pods *Pods, t time.Time, c prober.Class) []*Pod {
	if c == prober.ConnectTimeout {
		return nil
	}
	var out []*Pod
	for _, p := range pods.All() {
		if p.ReadyAt != nil && !p.Present && !p.ReadyAt.After(t) && t.Sub(*p.ReadyAt) < readyWindow {
			out = append(out, p)
		}
	}
	return out
}

func describe(p *Pod, t, start time.Time) string {
	rel := func(x *time.Time) string { return fmt.Sprintf("%+.2fs", x.Sub(start).Seconds()) }
	var parts []string
	if p.DeletedBy(t, receiveSlack) {
		parts = append(parts, fmt.Sprintf("%.2fs after %s's deletion was requested (%s)", max(0, t.Sub(*p.DeletedAt).Seconds()), p.Name, rel(p.DeletedAt)))
		if p.EndpointGoneAt != nil {
			if p.EndpointGoneAt.After(t) {
				parts = append(parts, "its endpoint was still listed (removed "+rel(p.EndpointGoneAt)+")")
			} else {
				parts = append(parts, "its endpoint was removed "+rel(p.EndpointGoneAt))
			}
		}
		if p.ExitAt != nil && !p.ExitAt.After(t) {
			parts = append(parts, fmt.Sprintf("its container had exited (%s, code %d)", rel(p.ExitAt), *p.ExitCode))
		}
	} else if p.ReadyAt != nil && !p.ReadyAt.After(t) {
		parts = append(parts, fmt.Sprintf("%.2fs after %s turned ready (%s)", t.Sub(*p.ReadyAt).Seconds(), p.Name, rel(p.ReadyAt)))
	}
	if len(parts) == 0 {
		return "served by " + p.Name
	}
	return strings.Join(parts, "; ")
}

func outages(failures []report.Failure, pods *Pods) []report.Outage {
	var out []report.Outage
	var cur *report.Outage
	for _, f := range failures {
		if class(&f) == prober.Local {
			continue
		}
		if cur == nil || f.Intended.Sub(cur.End) > outageGap {
			out = append(out, report.Outage{Start: f.Intended, End: f.Intended, ByClass: map[string]uint64{}})
			cur = &out[len(out)-1]
		}
		cur.End = f.End
		if f.End.Before(f.Intended) {
			cur.End = f.Intended
		}
		cur.Count++
		cur.ByClass[f.Class]++
	}
	for i := range out {
		o := &out[i]
		o.DurationS = math.Round(o.End.Sub(o.Start).Seconds()*1000) / 1000
		var names []string
		for _, p := range terminatingAt(pods, o.Start, anyClass) {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		switch {
		case len(names) > 0:
			o.Context = "while terminating: " + strings.Join(names, ", ")
		default:
			for _, p := range justReadyAt(pods, o.Start, anyClass) {
				names = append(names, p.Name)
			}
			sort.Strings(names)
			if len(names) > 0 {
				o.Context = "right after turning ready: " + strings.Join(names, ", ")
			}
		}
	}
	return out
}

func traffic(r *report.Report, pods *Pods) []report.PodTraffic {
	names := map[string]bool{}
	for _, p := range pods.All() {
		names[p.Name] = true
	}
	for name := range r.Totals.ByBackend {
		names[name] = true
	}
	var out []report.PodTraffic
	for name := range names {
		pt := report.PodTraffic{Pod: name, Served: r.Totals.ByBackend[name]}
		if p := pods.Get(name); p != nil {
			pt.Revision, pt.ReadyAt, pt.DeletedAt, pt.GoneAt, pt.ExitCode = p.Revision, p.ReadyAt, p.DeletedAt, p.GoneAt, p.ExitCode
			if p.DeletedAt != nil {
				cut := int64(p.DeletedAt.Sub(r.StartedAt) / time.Second)
				for _, row := range r.Series {
					if row.T > cut {
						pt.ServedAfterDeletion += row.Backends[name]
					}
				}
			}
		}
		out = append(out, pt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}
