package analysis

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// routeShare is what one path's traffic says of the edge's route while it
// answered requests itself for a Service it had no pod of: whether the
// route also reaches pods outside the Service (responses named by pods
// the timeline does not hold), and how many of those it served in the
// whole seconds from the edge's first own answer to its last.
type routeShare struct {
	path    string
	own     int      // the edge's own answers on the path
	outside []string // pods outside the Service the path reached in the run
	served  uint64   // responses from them in the whole seconds of the own answers
	seconds int      // how many seconds those are
	// none: the route got no answer of the run from the Service's pods
	// (while the backend header named them on other paths): it reaches
	// the Service, if at all, without sending it requests to answer (a
	// mirror's copies, whose answers are thrown away).
	none bool
}

// routeShares measures, for each path with failures the edge answered
// itself (edgeOwn), whether the route lost only the empty Service's share
// or all of it: a route that reached pods outside the Service during the
// run and served none of them in the seconds of the edge's own answers
// was dropped whole (Traefik drops a weighted TraefikService while any of
// its Services is empty); one that served them kept the rest (Traefik's
// Gateway API routes, and TraefikServices allowing empty Services). Paths whose
// route reached no pod outside the Service (a route of this Service
// alone, or a run without the backend header), whose backend header named
// none of the timeline's pods on any path (it names something else then),
// or whose own answers span no whole second of the series, say nothing and
// are left out. A path whose header named none of them while another
// path's did got no answer from the Service at all: it is measured too
// (none), and said only when it served nothing in those seconds (a route
// dropped whole for a Service it never sent a request to answer: Traefik's
// mirroring TraefikService, with the Service as a mirror, or its
// highest-random-weight one, whose hash of the client's address sent it to
// the other Service; both measured in the lab).
func routeShares(r *report.Report, pods *Pods, edgeOwn []report.Failure) []routeShare {
	type pathData struct {
		series    []report.SeriesRow
		byBackend map[string]uint64
	}
	paths := map[string]pathData{"": {r.Series, r.Totals.ByBackend}}
	for _, p := range r.Paths {
		paths[p.Name] = pathData{p.Series, p.Totals.ByBackend}
	}
	type span struct {
		first, last time.Time
		n           int
	}
	own := map[string]*span{}
	for i := range edgeOwn {
		f := &edgeOwn[i]
		at := beganAt(f)
		sp := own[f.Path]
		if sp == nil {
			sp = &span{first: at, last: at}
			own[f.Path] = sp
		}
		if at.Before(sp.first) {
			sp.first = at
		}
		if at.After(sp.last) {
			sp.last = at
		}
		sp.n++
	}
	// Whether the backend header names pods: it named one of the
	// timeline's on some path.
	headerNamesPods := false
	for _, d := range paths {
		for name, n := range d.byBackend {
			if n > 0 && len(pods.Incarnations(name)) > 0 {
				headerNamesPods = true
			}
		}
	}
	clock := r.WallClock() // the series' seconds on the failures' clock
	var out []routeShare
	for path, sp := range own {
		d, ok := paths[path]
		if !ok {
			continue
		}
		// The series' seconds wholly within the edge's own answers: a
		// second they only began or ended in holds the route's successes
		// before or after too.
		secs := map[int64]bool{}
		for sec := clock.SecondFrom(sp.first); !clock.SecondAt(sec + 1).After(sp.last); sec++ {
			secs[sec] = true
		}
		if len(secs) == 0 {
			continue // under a whole second: too short to tell
		}
		// Outside are the names no pod of the timeline bore (Incarnations,
		// by name; Get takes a key), when the backend header names pods:
		// only when it named one of the timeline's on this path is a name
		// it bore none of a pod outside the Service, not a version or a
		// node that every response of the Service's own pods carries.
		outside := map[string]bool{}
		namesPods := false
		for name, n := range d.byBackend {
			switch {
			case n == 0:
			case len(pods.Incarnations(name)) == 0:
				outside[name] = true
			default:
				namesPods = true
			}
		}
		if len(outside) == 0 || !headerNamesPods {
			continue
		}
		s := routeShare{path: path, own: sp.n, seconds: len(secs), none: !namesPods}
		for name := range outside {
			s.outside = append(s.outside, name)
		}
		sort.Strings(s.outside)
		for _, row := range d.series {
			if !secs[row.T] {
				continue
			}
			for name, n := range row.Backends {
				if outside[name] {
					s.served += n
				}
			}
		}
		if s.none && s.served > 0 {
			continue // a route of other Services that went on serving: nothing of this one's
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// routeShareEvidence says routeShares' measure for svc, a line per path,
// and whether any route was dropped whole (its fix: keep the route).
func routeShareEvidence(r *report.Report, pods *Pods, edgeOwn []report.Failure, svc string) (ev []string, droppedWhole bool) {
	for _, s := range routeShares(r, pods, edgeOwn) {
		on := "the run's route"
		if s.path != "" {
			on = "path " + s.path + "'s route"
		}
		outside := strings.Join(s.outside, ", ")
		if len(s.outside) > 3 {
			outside = strings.Join(s.outside[:3], ", ") + fmt.Sprintf(" and %d more", len(s.outside)-3)
		}
		if s.none {
			droppedWhole = true
			ev = append(ev, fmt.Sprintf("%s got every answer of the run from outside %s (the backend header named %s), none from its pods, yet in the %s within its %d answers of the edge's own, while %s had no serving endpoint, it served none: "+
				"the route depends on %s without sending it requests to answer, and the edge failed it whole; Traefik so drops a TraefikService, and the routes that use it, "+
				"while any Service it holds has no serving endpoint, also one that answers this route nothing: a mirror (its answers are thrown away), or one a highest-random-weight "+
				"TraefikService chooses for other clients (providers.kubernetesCRD.allowEmptyServices is false by default), answering 404 for the host",
				on, svc, outside, wholeSeconds(s.seconds), s.own, svc, svc))
			continue
		}
		if s.served == 0 {
			droppedWhole = true
			ev = append(ev, fmt.Sprintf("%s also reached pods outside %s during the run (%s), and in the %s within its %d answers of the edge's own it served none of them: "+
				"the edge failed the whole route, not only %s's share; Traefik so drops a weighted TraefikService, and the routes that use it, while any of its Services has no serving endpoint "+
				"(providers.kubernetesCRD.allowEmptyServices is false by default), answering 404 for the host",
				on, svc, outside, wholeSeconds(s.seconds), s.own, svc))
			continue
		}
		ev = append(ev, fmt.Sprintf("%s also reached pods outside %s during the run (%s), and in the %s within its %d answers of the edge's own it served %s from them: "+
			"the edge kept the route and failed %s's share alone (Traefik so answers an empty Service's share 503 itself through a Gateway API HTTPRoute, or a TraefikService with allowEmptyServices=true)",
			on, svc, outside, wholeSeconds(s.seconds), s.own, nOf(s.served, "request"), svc))
	}
	return ev, droppedWhole
}

// wholeSeconds says n whole seconds.
func wholeSeconds(n int) string {
	if n == 1 {
		return "1 whole second"
	}
	return fmt.Sprintf("%d whole seconds", n)
}

// keepTheRouteFix is the fix for a route an edge dropped whole while one
// of its Services was empty.
const keepTheRouteFix = "; where the edge dropped a route over several Services whole while one was empty (Traefik's weighted or mirroring TraefikService), " +
	"set providers.kubernetesCRD.allowEmptyServices=true: Traefik keeps the route, the other Services serve their share, and the empty one's share is answered 503 " +
	"(none, when its weight is 0: Argo Rollouts so weighs a canary with no available pod; none either when it is only a mirror: its copies are lost, the answers are not)"
