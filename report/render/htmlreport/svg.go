package htmlreport

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/rollprobe/rollprobe/report"
)

// Geometry of the timeline, in CSS pixels of the outer SVG (it scales to
// the page's width). Everything on the time axis is drawn inside "plot"
// SVGs whose viewBox is in seconds across and pixels down: zooming changes
// their viewBox only (zoom.js), so bars, bands and lanes keep their data
// coordinates. Text never lives in a plot (it would stretch): labels sit in
// the outer SVG in groups carrying data-t, which zoom.js moves.
const (
	svgWidth   = 1200
	plotX      = 210 // left of the plots: room for pod names
	plotW      = svgWidth - plotX - 20
	labelRowY  = 12 // rollout markers' labels, alternating with the row under it
	labelRowH  = 12
	bandRowY   = 38 // outages' labels, alternating with the row under it
	rateY      = 60
	rateH      = 150
	failStripY = rateY + rateH + 4
	failStripH = 8
	// pathStripStep: each path's own failure strip, when a run probed
	// several, one under the other below the run's.
	pathStripStep = failStripH + 6
	latY          = failStripY + failStripH + 18
	latH          = 120
	lanesY        = latY + latH + 30
	groupH        = 20
	laneH         = 20
	lifeH         = 11 // the pod's own state, at the top of its lane
	epH           = 5  // its endpoint's conditions, under it
	// minFailH keeps a single failure's bar visible among thousands of
	// successes: at least this many pixels tall.
	minFailH = 3
)

// classColor is a fixed, colour-blind-safe palette (Okabe-Ito, then Tol's
// muted for the rarer classes): a class has the same colour in every
// report.
var classColor = map[string]string{
	report.ClassOK:                "#c5d3e0",
	report.ClassRefused:           "#d55e00",
	report.ClassConnectTimeout:    "#e69f00",
	report.ClassReset:             "#cc79a7",
	report.ClassEOF:               "#0072b2",
	report.ClassEOFReused:         "#56b4e9",
	report.ClassTruncated:         "#f0e442",
	report.ClassTimeout:           "#000000",
	report.ClassHTTP5xx:           "#009e73",
	report.ClassProxy5xx:          "#117733",
	report.ClassHTTPStatus:        "#882255",
	report.ClassGoAwayUnprocessed: "#88ccee",
	report.ClassGoAwayCut:         "#332288",
	report.ClassRefusedStream:     "#ddcc77",
	report.ClassRSTStream:         "#aa4499",
	report.ClassClosedNoGoAway:    "#661100",
	report.ClassGRPCStatus:        "#6699cc",
	report.ClassDNS:               "#44aa99",
	report.ClassTLS:               "#999933",
	report.ClassLocal:             "#888888",
}

// stateColor colours the lanes.
var stateColor = map[laneState]string{
	podStarting:      "#bcdcf0",
	podReady:         "#009e73",
	podUnready:       "#f0e442",
	podTerminating:   "#e69f00",
	podExited:        "#555555",
	epReady:          "#009e73",
	epServingTerm:    "#56b4e9",
	epNotReady:       "#bbbbbb",
	epTerminatingOut: "#d55e00",
}

// svgBuilder writes SVG text; every attribute value and text goes through
// esc.
type svgBuilder struct{ strings.Builder }

func (b *svgBuilder) f(format string, args ...any) { fmt.Fprintf(&b.Builder, format, args...) }

func esc(s string) string { return html.EscapeString(s) }

// num prints a coordinate compactly (3 decimals at most).
func num(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// timeline draws the whole timeline SVG.
func timeline(m *model) string {
	var b svgBuilder
	// With several paths each has its own failure strip under the run's:
	// everything below moves down by them.
	extra := len(m.PathStrips) * pathStripStep
	latTop, lanesTop := latY+extra, lanesY+extra
	nLanes, nGroups := 0, len(m.Groups)
	for _, g := range m.Groups {
		nLanes += len(g.Lanes)
	}
	lanesH := nGroups*groupH + nLanes*laneH
	bottom := lanesTop + lanesH
	if nLanes == 0 {
		bottom = latTop + latH
	}
	height := bottom + 28
	span := m.To - m.From
	b.f(`<svg id="timeline" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="timeline of the run" data-from="%s" data-to="%s" data-x0="%d" data-w="%d" data-top="%d" data-bottom="%d">`,
		svgWidth, height, num(m.From), num(m.To), plotX, plotW, rateY, bottom)
	b.f(`<g id="grid"></g><g id="ticks">%s</g>`, ticks(m.From, m.To, rateY, bottom))

	// Requests per second, stacked: ok at the bottom, then each failure class.
	scale := niceCeil(m.MaxRate)
	b.f(`<text class="axis-title" x="4" y="%d">requests/s</text>`, rateY+12)
	for _, v := range []float64{0, scale / 2, scale} {
		y := float64(rateY+rateH) - v/scale*rateH
		b.f(`<text class="ylabel" x="%d" y="%s">%s</text>`, plotX-6, num(y+4), num(v))
	}
	b.plot("rate", rateY, rateH, m.From, span)
	for _, k := range m.Buckets {
		y := float64(rateH)
		bar := func(class string, n uint64, minH float64) {
			if n == 0 {
				return
			}
			h := max(k.perSecond(n)/scale*rateH, minH)
			y -= h
			b.f(`<rect class="bar c-%s" x="%s" y="%s" width="%s" height="%s"><title>%s: %d at +%ss</title></rect>`,
				class, num(k.T), num(y), num(k.Span*0.9), num(h), class, n, num(k.T))
		}
		bar(report.ClassOK, k.OK, 0)
		for _, c := range report.FailureClassNames() {
			bar(c, k.ByClass[c], minFailH)
		}
	}
	b.WriteString(`</svg>`)

	// A mark under every bucket with a failure, a fixed 2 px wide at every
	// zoom (a stroke that does not scale): a failure among thousands of
	// successes is never hidden.
	b.f(`<text class="axis-title" x="4" y="%d">seconds with a failure</text>`, failStripY+failStripH)
	b.plot("failstrip", failStripY, failStripH, m.From, span)
	for _, k := range m.FailSeconds {
		x := num(k.T + k.Span/2)
		b.f(`<line class="failmark" x1="%s" x2="%s" y1="0" y2="%d"><title>+%ss: %d failed (%s)</title></line>`,
			x, x, failStripH, num(k.T), k.Failed, esc(classList(k.ByClass)))
	}
	b.WriteString(`</svg>`)
	for i, p := range m.PathStrips {
		y := failStripY + (i+1)*pathStripStep
		b.f(`<text class="axis-title path-strip" x="%d" y="%d">path %s</text>`, 14, y+failStripH, esc(p.Name))
		b.plot("failstrip", y, failStripH, m.From, span)
		b.f(`<rect class="lane-bg" x="%s" y="0" width="%s" height="%d"/>`, num(m.From), num(span), failStripH)
		for _, k := range p.FailSeconds {
			x := num(k.T + k.Span/2)
			b.f(`<line class="failmark" data-path="%s" x1="%s" x2="%s" y1="0" y2="%d"><title>%s, +%ss: %d failed (%s)</title></line>`,
				esc(p.Name), x, x, failStripH, esc(p.Name), num(k.T), k.Failed, esc(classList(k.ByClass)))
		}
		b.WriteString(`</svg>`)
	}

	// Latency on a log scale: from the intended send (solid) and from the
	// actual send (dashed), p50 and p99.
	lo, hi := latencyRange(m.Buckets)
	ly := func(v float64) float64 {
		return latH - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*latH
	}
	b.f(`<text class="axis-title" x="4" y="%d">latency (ms, log)</text>`, latTop+12)
	for d := lo; d <= hi*1.0001; d *= 10 {
		b.f(`<text class="ylabel" x="%d" y="%s">%s</text>`, plotX-6, num(float64(latTop)+ly(d)+4), num(d))
	}
	b.plot("latency", latTop, latH, m.From, span)
	for _, s := range []struct {
		class, title string
		v            func(bucket) float64
	}{
		{"lat-p99", "p99 from the intended send", func(k bucket) float64 { return k.P99 }},
		{"lat-p50", "p50 from the intended send", func(k bucket) float64 { return k.P50 }},
		{"svc-p99", "p99 from the actual send", func(k bucket) float64 { return k.SvcP99 }},
		{"svc-p50", "p50 from the actual send", func(k bucket) float64 { return k.SvcP50 }},
	} {
		var d strings.Builder
		pen := "M"
		for _, k := range m.Buckets {
			v := s.v(k)
			if v <= 0 {
				pen = "M" // no response completed: a gap, not a fall to zero
				continue
			}
			fmt.Fprintf(&d, "%s%s %s", pen, num(k.T+k.Span/2), num(ly(v)))
			pen = "L"
		}
		if d.Len() > 0 {
			b.f(`<path class="line %s" d="%s"><title>%s</title></path>`, s.class, d.String(), s.title)
		}
	}
	b.WriteString(`</svg>`)

	// One lane per pod, grouped by revision.
	if nLanes > 0 {
		y := lanesTop
		var lanes svgBuilder
		for _, g := range m.Groups {
			b.f(`<text class="group-title" x="4" y="%d">%s</text>`, y+14, esc(g.Title))
			y += groupH
			for _, l := range g.Lanes {
				ly := y - lanesTop
				b.f(`<text class="pod-name" x="%d" y="%d" data-pod="%s"><title>%s</title>%s</text>`,
					plotX-6, y+11, esc(l.Pod), esc(l.Pod), esc(shortPod(l.Pod)))
				lanes.f(`<g class="lane" data-pod="%s" data-group="%s">`, esc(l.Pod), l.Group)
				lanes.f(`<rect class="lane-bg" x="%s" y="%d" width="%s" height="%d"/>`, num(m.From), ly, num(span), laneH)
				for _, s := range l.Life {
					lanes.f(`<rect class="s-%s" x="%s" y="%d" width="%s" height="%d"><title>%s: %s, %+.2fs to %+.2fs</title></rect>`,
						s.State, num(s.From), ly+2, num(s.To-s.From), lifeH, esc(l.Pod), stateText[s.State], s.From, s.To)
				}
				for _, s := range l.Endpoint {
					lanes.f(`<rect class="s-%s" x="%s" y="%d" width="%s" height="%d"><title>%s: %s, %+.2fs to %+.2fs</title></rect>`,
						s.State, num(s.From), ly+3+lifeH, num(s.To-s.From), epH, esc(l.Pod), stateText[s.State], s.From, s.To)
				}
				for _, gp := range l.Gaps {
					lanes.f(`<rect class="node-gap" data-node="%s" x="%s" y="%d" width="%s" height="%d"><title>%s</title></rect>`,
						esc(l.Node), num(gp.From), ly, num(gp.To-gp.From), laneH, esc(gp.Title))
				}
				for _, mk := range l.Markers {
					lanes.f(`<line class="mark-%s" x1="%s" x2="%s" y1="%d" y2="%d"><title>%s</title></line>`,
						mk.Kind, num(mk.T), num(mk.T), ly, ly+laneH-1, esc(mk.Title))
					if mk.Kind == "sigkill" {
						b.f(`<g class="tlabel" data-t="%s" transform="translate(%s,0)"><text class="mark-label" x="3" y="%d">SIGKILL</text></g>`,
							num(mk.T), num(xOf(m, mk.T)), y+10)
					}
				}
				lanes.WriteString(`</g>`)
				y += laneH
			}
		}
		b.plot("lanes", lanesTop, lanesH, m.From, span)
		b.WriteString(lanes.String())
		b.WriteString(`</svg>`)
	}

	// Over everything: the rollout's moments and the outage bands.
	b.plot("overlay", rateY, bottom-rateY, m.From, span)
	for _, mk := range m.Rollout {
		b.f(`<line class="rollout-line" x1="%s" x2="%s" y1="0" y2="%d"><title>%s</title></line>`,
			num(mk.T), num(mk.T), bottom-rateY, esc(mk.Title))
	}
	for _, st := range m.Stalls {
		b.f(`<rect class="stall" x="%s" y="0" width="%s" height="%d"><title>%s</title></rect>`,
			num(st.From), num(max(st.To-st.From, 0.001)), bottom-rateY, esc(st.Title))
	}
	for _, bd := range m.Bands {
		w := max(bd.To-bd.From, 0.001)
		b.f(`<rect class="outage" id="outage-%d" data-from="%s" data-to="%s" x="%s" y="0" width="%s" height="%d"><title>outage #%d, %+.2fs to %+.2fs: %d failed (%s)%s</title></rect>`,
			bd.N, num(bd.From), num(bd.To), num(bd.From), num(w), bottom-rateY, bd.N, bd.From, bd.To, bd.Count, esc(bd.Classes), esc(contextSuffix(bd.Context)))
	}
	b.WriteString(`</svg>`)
	for i, mk := range m.Rollout {
		b.f(`<g class="tlabel" data-t="%s" transform="translate(%s,0)"><text class="rollout-label" x="2" y="%d">%s</text></g>`,
			num(mk.T), num(xOf(m, mk.T)), labelRowY+i%2*labelRowH, esc(mk.Label))
	}
	for _, bd := range m.Bands {
		target := fmt.Sprintf("#outage-%d", bd.N)
		if len(bd.FindingIDs) > 0 {
			target = "#finding-" + bd.FindingIDs[0]
		}
		b.f(`<g class="tlabel band-label" data-t="%s" data-outage="%d" transform="translate(%s,0)"><a href="%s"><text x="0" y="%d">#%d: %d failed <tspan class="band-classes">%s</tspan></text></a><title>%s%s</title></g>`,
			num(bd.From), bd.N, num(xOf(m, bd.From)), esc(target), bandRowY+(bd.N-1)%2*labelRowH, bd.N, bd.Count, esc(bd.Classes), esc(bd.Classes), esc(contextSuffix(bd.Context)))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// plot opens a plot SVG at y of height h showing [from, from+span].
func (b *svgBuilder) plot(name string, y, h int, from, span float64) {
	b.f(`<svg class="plot plot-%s" x="%d" y="%d" width="%d" height="%d" viewBox="%s 0 %s %d" preserveAspectRatio="none">`,
		name, plotX, y, plotW, h, num(from), num(span), h)
}

// xOf is the outer SVG's x of offset t at the initial zoom.
func xOf(m *model, t float64) float64 {
	return plotX + (t-m.From)/(m.To-m.From)*plotW
}

func contextSuffix(c string) string {
	if c == "" {
		return ""
	}
	return "; " + c
}

// shortPod keeps a pod name to what fits the label column.
func shortPod(p string) string {
	const max = 30
	if len(p) <= max {
		return p
	}
	return p[:max-1] + "…"
}

// niceCeil rounds v up to a round number (at least 1) that halves evenly:
// 1, 1.2, 1.6, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.6, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// tickStep is the distance between time-axis ticks for a visible span:
// about eight ticks, at 1, 2 or 5 times a power of ten seconds. zoom.js
// computes the same.
func tickStep(span float64) float64 {
	raw := span / 8
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// ticks draws the time axis for [from, to]: a label at the top of the
// charts and one at the bottom of the lanes, with a grid line between.
func ticks(from, to float64, top, bottom int) string {
	var b svgBuilder
	step := tickStep(to - from)
	for t := math.Ceil(from/step) * step; t <= to+1e-9; t += step {
		x := plotX + (t-from)/(to-from)*plotW
		label := fmt.Sprintf("%+gs", math.Round(t*1000)/1000)
		b.f(`<line class="grid" x1="%s" x2="%s" y1="%d" y2="%d"/><text class="tick" x="%s" y="%d">%s</text>`,
			num(x), num(x), top, bottom, num(x), bottom+16, label)
	}
	return b.String()
}
