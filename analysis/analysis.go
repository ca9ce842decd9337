// Package analysis explains a run: it groups failed requests into outage
// windows, lines each failure up with what the pods and endpoints were doing
// at that moment (from the timeline), counts each pod's traffic, and turns
// the patterns into findings with evidence and a concrete fix. It is a pure
// function of the report, so a saved report can be analysed again.
package analysis

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/rollout"
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

// deletedBy reports whether p's deletion had been requested at t.
func (p *life) deletedBy(t time.Time) bool {
	return p.deleted != nil && !p.deleted.After(t.Add(receiveSlack))
}

// Analyse fills the report's outages, pods and findings, and each kept
// failure's likely pod and context. It needs the run sections (timeline).
func Analyse(r *report.Report) {
	pods := lifecycles(r.Timeline)
	for i := range r.Failures {
		attribute(&r.Failures[i], pods, r.StartedAt)
	}
	r.Outages = outages(r, pods)
	r.Pods = traffic(r, pods)
	r.Findings = findings(r, pods)
}

// life is one pod's lifecycle as the timeline saw it (local receive times).
type life struct {
	name, revision          string
	created, ready, deleted *time.Time
	endpointGone, gone      *time.Time
	exitCode                *int32
	exitAt                  *time.Time
	present                 bool
}

func lifecycles(events []rollout.Event) map[string]*life {
	pods := map[string]*life{}
	get := func(e rollout.Event) *life {
		p := pods[e.Pod]
		if p == nil {
			p = &life{name: e.Pod}
			pods[e.Pod] = p
		}
		if p.revision == "" {
			p.revision = e.Revision
		}
		return p
	}
	for _, e := range events {
		if e.Pod == "" {
			continue
		}
		at := e.At
		switch e.Kind {
		case rollout.PodPresent:
			p := get(e)
			p.present = true
			if strings.Contains(e.Detail, "ready=true") {
				p.ready = &at
			}
		case rollout.PodCreated:
			get(e).created = &at
		case rollout.PodReady:
			if p := get(e); p.ready == nil || p.deleted == nil {
				p.ready = &at
			}
		case rollout.PodDeletionRequested:
			get(e).deleted = &at
		case rollout.EndpointRemoved:
			get(e).endpointGone = &at
		case rollout.ContainerTerminated:
			p := get(e)
			p.exitCode, p.exitAt = e.ExitCode, &at
		case rollout.PodGone:
			get(e).gone = &at
		}
	}
	return pods
}

// connectionClasses fail before or without a response: what a pod that
// stopped listening, or vanished, does to the clients still routed to it.
var connectionClasses = map[string]bool{"refused": true, "reset": true, "eof": true, "eof_reused": true, "connect_timeout": true, "truncated": true}

// attribute names the pod a failure most likely hit. With the backend header
// on the response it is certain. Otherwise the candidates are the pods being
// terminated at that moment (deletion requested, not gone long ago); failing
// that, pods that had just turned ready. The failure's class narrows them:
// see terminatingAt and justReadyAt.
func attribute(f *report.Failure, pods map[string]*life, start time.Time) {
	at := f.Intended
	if f.Backend != "" {
		f.LikelyPod, f.Confidence = f.Backend, 1
		if p := pods[f.Backend]; p != nil {
			f.Context = describe(p, at, start)
		}
		return
	}
	cands := terminatingAt(pods, at, f.Class)
	if len(cands) == 0 {
		cands = justReadyAt(pods, at, f.Class)
	}
	if len(cands) == 0 {
		f.Context = "no pod was terminating or just ready"
		return
	}
	// The most recent change is the likeliest cause.
	sort.Slice(cands, func(i, j int) bool { return changeTime(cands[i]).After(changeTime(cands[j])) })
	f.LikelyPod = cands[0].name
	f.Confidence = math.Round(100/float64(len(cands))) / 100
	f.Context = describe(cands[0], at, start)
}

// answeredClasses need something at the pod's IP to answer: a RST, a FIN, a
// response. A pod that is gone (its sandbox and IP with it) cannot produce
// them; a connection to its IP just times out.
var answeredClasses = map[string]bool{"refused": true, "reset": true, "eof": true, "eof_reused": true, "truncated": true,
	"timeout": true, "http_5xx": true, "http_status": true}

func changeTime(p *life) time.Time {
	if p.deleted != nil {
		return *p.deleted
	}
	if p.ready != nil {
		return *p.ready
	}
	return time.Time{}
}

// terminatingAt: deletion requested before t, and the pod not gone for more
// than a few seconds (routes to a vanished pod IP linger as long as the
// proxies lag). For a class that needs an answer from the pod, the pod must
// still have been there; class "" applies no such filter.
func terminatingAt(pods map[string]*life, t time.Time, class string) []*life {
	var out []*life
	for _, p := range pods {
		if !p.deletedBy(t) || t.Sub(*p.deleted) >= 5*time.Minute {
			continue
		}
		switch {
		case p.gone == nil:
		case answeredClasses[class] && t.After(p.gone.Add(receiveSlack)):
			continue
		case t.Sub(*p.gone) >= 30*time.Second:
			continue
		}
		out = append(out, p)
	}
	return out
}

// justReadyAt: pods that turned ready within readyWindow before t. A
// connect_timeout is never theirs: a new pod's IP exists and answers, with a
// refusal if nothing listens yet.
func justReadyAt(pods map[string]*life, t time.Time, class string) []*life {
	if class == "connect_timeout" {
		return nil
	}
	var out []*life
	for _, p := range pods {
		if p.ready != nil && !p.present && !p.ready.After(t) && t.Sub(*p.ready) < readyWindow {
			out = append(out, p)
		}
	}
	return out
}

func describe(p *life, t, start time.Time) string {
	rel := func(x *time.Time) string { return fmt.Sprintf("%+.2fs", x.Sub(start).Seconds()) }
	var parts []string
	if p.deletedBy(t) {
		parts = append(parts, fmt.Sprintf("%.2fs after %s's deletion was requested (%s)", max(0, t.Sub(*p.deleted).Seconds()), p.name, rel(p.deleted)))
		if p.endpointGone != nil {
			if p.endpointGone.After(t) {
				parts = append(parts, "its endpoint was still listed (removed "+rel(p.endpointGone)+")")
			} else {
				parts = append(parts, "its endpoint was removed "+rel(p.endpointGone))
			}
		}
		if p.exitAt != nil && !p.exitAt.After(t) {
			parts = append(parts, fmt.Sprintf("its container had exited (%s, code %d)", rel(p.exitAt), *p.exitCode))
		}
	} else if p.ready != nil && !p.ready.After(t) {
		parts = append(parts, fmt.Sprintf("%.2fs after %s turned ready (%s)", t.Sub(*p.ready).Seconds(), p.name, rel(p.ready)))
	}
	if len(parts) == 0 {
		return "served by " + p.name
	}
	return strings.Join(parts, "; ")
}

func outages(r *report.Report, pods map[string]*life) []report.Outage {
	var out []report.Outage
	var cur *report.Outage
	for _, f := range r.Failures {
		if f.Class == "local" {
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
		for _, p := range terminatingAt(pods, o.Start, "") {
			names = append(names, p.name)
		}
		sort.Strings(names)
		switch {
		case len(names) > 0:
			o.Context = "while terminating: " + strings.Join(names, ", ")
		default:
			for _, p := range justReadyAt(pods, o.Start, "") {
				names = append(names, p.name)
			}
			sort.Strings(names)
			if len(names) > 0 {
				o.Context = "right after turning ready: " + strings.Join(names, ", ")
			}
		}
	}
	return out
}

func traffic(r *report.Report, pods map[string]*life) []report.PodTraffic {
	names := map[string]bool{}
	for name := range pods {
		names[name] = true
	}
	for name := range r.Totals.ByBackend {
		names[name] = true
	}
	var out []report.PodTraffic
	for name := range names {
		pt := report.PodTraffic{Pod: name, Served: r.Totals.ByBackend[name]}
		if p := pods[name]; p != nil {
			pt.Revision, pt.ReadyAt, pt.DeletedAt, pt.GoneAt, pt.ExitCode = p.revision, p.ready, p.deleted, p.gone, p.exitCode
			if p.deleted != nil {
				cut := int64(p.deleted.Sub(r.StartedAt) / time.Second)
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
