// rollprobe's HTML report: zoom and pan on the shared time axis, and the
// failures table's class filter. Plain script, no dependency, no network.
(function () {
  "use strict";
  var doc = document.documentElement;
  window.addEventListener("error", function (e) { doc.setAttribute("data-error", String(e.message)); });
  var svg = document.getElementById("timeline");
  if (svg) {
    var from = +svg.dataset.from, to = +svg.dataset.to;
    var x0 = +svg.dataset.x0, w = +svg.dataset.w, top = +svg.dataset.top, bottom = +svg.dataset.bottom;
    var a = from, b = to;
    var plots = svg.querySelectorAll("svg.plot");
    var labels = svg.querySelectorAll("[data-t]");
    var ticks = document.getElementById("ticks");
    var NS = svg.namespaceURI; // the SVG namespace, taken from the page: no URL in this file

    // tickStep matches svg.go's: about eight ticks at 1, 2 or 5 times a power of ten.
    function tickStep(span) {
      var raw = span / 8, p = Math.pow(10, Math.floor(Math.log10(raw)));
      var ms = [1, 2, 5];
      for (var i = 0; i < ms.length; i++) { if (raw <= ms[i] * p) return ms[i] * p; }
      return 10 * p;
    }
    function xOf(t) { return x0 + (t - a) / (b - a) * w; }
    function draw() {
      plots.forEach(function (p) {
        var h = p.viewBox.baseVal.height;
        p.setAttribute("viewBox", a + " 0 " + (b - a) + " " + h);
      });
      labels.forEach(function (l) {
        var t = +l.dataset.t;
        l.setAttribute("transform", "translate(" + xOf(t) + ",0)");
        l.style.display = (t < a || t > b) ? "none" : "";
      });
      while (ticks.firstChild) ticks.removeChild(ticks.firstChild);
      var step = tickStep(b - a);
      for (var t = Math.ceil(a / step) * step; t <= b + 1e-9; t += step) {
        var x = xOf(t);
        var line = document.createElementNS(NS, "line");
        line.setAttribute("class", "grid");
        line.setAttribute("x1", x); line.setAttribute("x2", x);
        line.setAttribute("y1", top); line.setAttribute("y2", bottom);
        var text = document.createElementNS(NS, "text");
        text.setAttribute("class", "tick");
        text.setAttribute("x", x); text.setAttribute("y", bottom + 16);
        var v = Math.round(t * 1000) / 1000;
        text.textContent = (v >= 0 ? "+" : "") + v + "s";
        ticks.appendChild(line); ticks.appendChild(text);
      }
      var z = document.getElementById("zoom-range");
      if (z) z.textContent = (a === from && b === to) ? "whole run" : (a.toFixed(2) + "s to " + b.toFixed(2) + "s");
    }
    function zoomTo(na, nb) {
      var minSpan = 0.05;
      if (nb - na < minSpan) { var c = (na + nb) / 2; na = c - minSpan / 2; nb = c + minSpan / 2; }
      var span = Math.min(nb - na, to - from);
      na = Math.max(from, Math.min(na, to - span));
      a = na; b = na + span;
      draw();
      // The zoom is in the address, so a link can show the same moment.
      var whole = a === from && b === to;
      try { history.replaceState(null, "", whole ? location.pathname : "#zoom=" + a.toFixed(3) + "," + b.toFixed(3)); } catch (e) { /* some viewers forbid it */ }
    }
    // timeAt is the time under a mouse event's x.
    function timeAt(ev) {
      var pt = svg.createSVGPoint();
      pt.x = ev.clientX; pt.y = ev.clientY;
      var p = pt.matrixTransform(svg.getScreenCTM().inverse());
      return a + (p.x - x0) / w * (b - a);
    }
    svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var t = timeAt(ev), f = ev.deltaY < 0 ? 1 / 1.25 : 1.25;
      zoomTo(t - (t - a) * f, t + (b - t) * f);
    }, { passive: false });
    var drag = null;
    svg.addEventListener("mousedown", function (ev) { drag = { t: timeAt(ev), a: a, b: b }; });
    window.addEventListener("mouseup", function () { drag = null; });
    svg.addEventListener("mousemove", function (ev) {
      if (!drag) return;
      var d = drag.t - (drag.a + (timeAt(ev) - a) / (b - a) * (drag.b - drag.a));
      zoomTo(drag.a + d, drag.b + d);
    });
    svg.addEventListener("dblclick", function () { zoomTo(from, to); });
    document.querySelectorAll("[data-zoom-reset]").forEach(function (el) {
      el.addEventListener("click", function () { zoomTo(from, to); });
    });
    // An outage (its band or a link to it) zooms to it, with two seconds around.
    function zoomToOutage(n) {
      var band = document.getElementById("outage-" + n);
      if (!band) return;
      zoomTo(+band.dataset.from - 2, +band.dataset.to + 2);
    }
    svg.querySelectorAll("rect.outage").forEach(function (r) {
      r.addEventListener("click", function () { zoomToOutage(r.id.replace("outage-", "")); });
    });
    document.querySelectorAll("[data-zoom-outage]").forEach(function (el) {
      el.addEventListener("click", function (ev) {
        ev.preventDefault();
        zoomToOutage(el.dataset.zoomOutage);
        svg.scrollIntoView({ behavior: "smooth", block: "center" });
      });
    });
    draw();
    var z = /^#zoom=(-?[0-9.]+),(-?[0-9.]+)$/.exec(location.hash);
    if (z) zoomTo(+z[1], +z[2]);
  }

  // The failures table: show one class, or all.
  var filter = document.getElementById("class-filter");
  if (filter) {
    filter.addEventListener("change", function () {
      var shown = 0;
      document.querySelectorAll("#failures tbody tr").forEach(function (tr) {
        var on = filter.value === "" || tr.dataset.class === filter.value;
        tr.style.display = on ? "" : "none";
        if (on) shown++;
      });
      document.getElementById("failures-shown").textContent = shown;
    });
  }
  if (!doc.hasAttribute("data-error")) doc.setAttribute("data-rendered", "ok");
})();
