/* tailpod's HTML report: draws the charts of the embedded JSON as SVG and makes the tables sort.
   No library: the page must open offline and stay a few kilobytes (docs/results.md says why).
   After drawing, it writes what it drew into <body data-drawn="..."> so a test reads it back. */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#17becf", "#bcbd22", "#7f7f7f"];
  var DASHES = ["none", "9 4", "2 3", "12 3 3 3"];  // one per compared run, as plot_compare's styles
  var W = 760, H = 380, M = {l: 72, r: 16, t: 16, b: 48};

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) { return "—"; }
    var a = Math.abs(v);
    if (v === 0) { return "0"; }
    if (a >= 1 && Number.isInteger(v)) { return v.toLocaleString("en-US"); }
    if (a >= 1000) { return v.toLocaleString("en-US", {maximumFractionDigits: 0}); }
    if (a >= 100) { return v.toFixed(1); }
    if (a >= 1) { return v.toFixed(2); }
    return v.toPrecision(3);
  }
  function scale(lo, hi, a, b, log) {
    if (log) { lo = Math.log(lo); hi = Math.log(hi); }
    if (hi === lo) { hi = lo + 1; lo = lo - (log ? 0 : 1); }
    return function (v) { var x = log ? Math.log(v) : v; return a + (x - lo) / (hi - lo) * (b - a); };
  }
  function ticks(lo, hi, log, xs) {
    if (log) {
      var out = [], p = Math.pow(2, Math.floor(Math.log2(lo)));
      while (p <= hi * 1.0001) { if (p >= lo / 1.0001) { out.push(p); } p *= 2; }
      return out.length > 12 ? out.filter(function (_, i) { return i % 2 === 0; }) : out;
    }
    if (xs && xs.length <= 12) { return xs; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) || 1)));
    if ((hi - lo) / step < 4) { step /= 2; }
    var t = [], v = Math.ceil(lo / step) * step;
    for (; v <= hi + 1e-9; v += step) { t.push(+v.toPrecision(6)); }
    return t;
  }

  function drawChart(box, chart, state, tip, watermark) {
    var svg = box.querySelector("svg");
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    if (watermark) {
      el("text", {x: W / 2, y: H / 2, "text-anchor": "middle", "class": "watermark"}, svg)
        .textContent = watermark;
    }
    var shown = chart.series.filter(function (s) { return !state.hidden[s.name]; });
    var xs = [], ys = [];
    shown.forEach(function (s) {
      s.points.forEach(function (p) {
        xs.push(p.x); ys.push(p.y);
        if (p.lo !== null) { ys.push(p.lo); } if (p.hi !== null) { ys.push(p.hi); }
      });
    });
    var cat = chart.x_labels;
    var xlog = !cat && state.xlog && xs.every(function (v) { return v > 0; });
    var ylog = state.ylog && ys.every(function (v) { return v > 0; });
    var uniq = Array.from(new Set(xs)).sort(function (a, b) { return a - b; });
    var x0 = Math.min.apply(null, xs.length ? xs : [0]), x1 = Math.max.apply(null, xs.length ? xs : [1]);
    var y0 = ylog ? Math.min.apply(null, ys.length ? ys : [1]) : Math.min(0, Math.min.apply(null, ys.length ? ys : [0]));
    var y1 = Math.max.apply(null, ys.length ? ys : [1]);
    if (!ylog) { y1 = y1 * 1.05 || 1; } else { y0 = y0 / 1.2; y1 = y1 * 1.2; }
    var pad = xlog ? 1.15 : 0;
    var fx = xlog ? scale(x0 / pad, x1 * pad, M.l, W - M.r, true)
                  : scale(x0 - (x1 - x0) * 0.04, x1 + (x1 - x0) * 0.04, M.l, W - M.r, false);
    var fy = scale(y0, y1, H - M.b, M.t, ylog);
    var axes = el("g", {"class": "axes"}, svg);
    el("line", {x1: M.l, y1: H - M.b, x2: W - M.r, y2: H - M.b, stroke: "#333"}, axes);
    el("line", {x1: M.l, y1: M.t, x2: M.l, y2: H - M.b, stroke: "#333"}, axes);
    if (cat) { x0 = 0; x1 = Math.max(cat.length - 1, 0); fx = scale(-0.5, x1 + 0.5, M.l, W - M.r, false); }
    (cat ? cat.map(function (_, i) { return i; }) : ticks(x0, x1, xlog, uniq)).forEach(function (t) {
      var x = fx(t);
      el("line", {x1: x, y1: H - M.b, x2: x, y2: H - M.b + 5, stroke: "#333"}, axes);
      el("text", {x: x, y: H - M.b + 18, "text-anchor": "middle", "class": "tick"}, axes).textContent = cat ? cat[t] : fmt(t);
    });
    var yt = ylog ? (function () { var o = [], p = Math.pow(10, Math.floor(Math.log10(y0)));
      while (p <= y1) { if (p >= y0) { o.push(p); } p *= 10; } return o.length ? o : [y0, y1]; })()
      : ticks(y0, y1, false);
    yt.forEach(function (t) {
      var y = fy(t);
      el("line", {x1: M.l, y1: y, x2: W - M.r, y2: y, stroke: "#ddd"}, axes);
      el("text", {x: M.l - 6, y: y + 4, "text-anchor": "end", "class": "tick"}, axes).textContent = fmt(t);
    });
    el("text", {x: (M.l + W - M.r) / 2, y: H - 8, "text-anchor": "middle", "class": "label"}, axes)
      .textContent = chart.x_label + (xlog ? " (log)" : "");
    el("text", {x: 14, y: (M.t + H - M.b) / 2, "text-anchor": "middle", "class": "label",
                transform: "rotate(-90 14 " + (M.t + H - M.b) / 2 + ")"}, axes)
      .textContent = chart.y_label + (ylog ? " (log)" : "");
    var drawn = [];
    chart.series.forEach(function (s, i) {
      if (state.hidden[s.name]) { return; }
      var color = s.void ? "#999" : PALETTE[i % PALETTE.length];
      var g = el("g", {"class": "series" + (s.void ? " void" : ""), "data-series": s.name}, svg);
      var d = s.points.map(function (p, j) { return (j ? "L" : "M") + fx(p.x) + " " + fy(p.y); }).join(" ");
      el("path", {d: d, fill: "none", stroke: color, "stroke-width": 2,
                  "stroke-dasharray": s.void ? "6 4" : DASHES[(s.group || 0) % DASHES.length]}, g);
      var n = 0, bars = 0;
      s.points.forEach(function (p) {
        if (p.lo !== null && p.hi !== null) {
          el("line", {x1: fx(p.x), x2: fx(p.x), y1: fy(p.lo), y2: fy(p.hi), stroke: color,
                      "stroke-width": 1.2, "class": "bar"}, g);
          bars += 1;
        }
        var c = el("circle", {cx: fx(p.x), cy: fy(p.y), r: 4.5, fill: color, "class": "point",
                              "data-x": p.x, "data-y": p.y}, g);
        var text = s.name + (s.void ? " (VOID: " + s.void + ")" : "") + "\n" + chart.x_label + " = " +
          (cat ? cat[p.x] : fmt(p.x)) + "\n" + chart.y_label + " = " + fmt(p.y) +
          (p.lo !== null ? " [" + fmt(p.lo) + "–" + fmt(p.hi) + "]" : (p.n === 1 ? " (no spread: 1 rep)" : "")) +
          (p.n ? "\nreps: " + p.n : "");
        el("title", {}, c).textContent = text;
        c.addEventListener("mouseenter", function (ev) {
          tip.textContent = text; tip.style.display = "block";
          tip.style.left = (ev.pageX + 12) + "px"; tip.style.top = (ev.pageY + 12) + "px";
        });
        c.addEventListener("mouseleave", function () { tip.style.display = "none"; });
        n += 1;
      });
      drawn.push({name: s.name, void: !!s.void, points: n, bars: bars,
                  xs: s.points.map(function (p) { return cat ? cat[p.x] : p.x; })});
    });
    return {id: chart.id, xlog: xlog, ylog: ylog, watermark: watermark || null, series: drawn};
  }

  function setupChart(box, chart, tip, summary, watermark) {
    var state = {hidden: {}, xlog: chart.x_log, ylog: chart.y_log};
    var legend = box.querySelector(".legend");
    function redraw() { summary[chart.id] = drawChart(box, chart, state, tip, watermark); publish(summary); }
    chart.series.forEach(function (s, i) {
      var b = document.createElement("button");
      b.type = "button";
      b.className = "toggle" + (s.void ? " void" : "");
      b.style.borderColor = s.void ? "#999" : PALETTE[i % PALETTE.length];
      b.textContent = s.name + (s.void ? " — VOID: " + s.void : "");
      b.title = "show or hide this series";
      b.addEventListener("click", function () {
        state.hidden[s.name] = !state.hidden[s.name];
        b.classList.toggle("off", !!state.hidden[s.name]);
        redraw();
      });
      legend.appendChild(b);
    });
    ["xlog", "ylog"].forEach(function (k) {
      var input = box.querySelector("input[name=" + k + "]");
      if (k === "xlog" && chart.x_labels) { input.parentNode.style.display = "none"; return; }
      input.checked = state[k];
      input.addEventListener("change", function () { state[k] = input.checked; redraw(); });
    });
    redraw();
  }

  function publish(summary) {
    var charts = Object.keys(summary).map(function (k) { return summary[k]; });
    // each stamp, and whether it is on the first screen (the header keeps it there on scroll)
    var stamps = Array.prototype.map.call(document.querySelectorAll("#stamps .stamp"), function (s) {
      var r = s.getBoundingClientRect(), st = window.getComputedStyle(s);
      return {text: s.textContent, visible: r.height > 0 && r.top >= 0 &&
              r.bottom <= window.innerHeight && st.visibility !== "hidden" && st.display !== "none"};
    });
    document.body.setAttribute("data-drawn", JSON.stringify({
      charts: charts, stamps: stamps, void_cells: document.querySelectorAll("td.void").length}));
  }

  function cellKey(td) {
    var t = td.textContent.trim();
    var m = t.replace(/[,$]/g, "").match(/^[~]?(-?\d+(\.\d+)?(e-?\d+)?)/i);
    return m ? {num: parseFloat(m[1]), text: t} : {num: null, text: t};
  }
  function sortable(table) {
    var head = table.tHead; if (!head) { return; }
    Array.prototype.forEach.call(head.rows[0].cells, function (th, col) {
      th.classList.add("sortable");
      th.title = "sort by this column";
      th.addEventListener("click", function () {
        var body = table.tBodies[0]; if (!body) { return; }
        var dir = th.getAttribute("data-sort") === "asc" ? "desc" : "asc";
        Array.prototype.forEach.call(head.rows[0].cells, function (h) { h.removeAttribute("data-sort"); });
        th.setAttribute("data-sort", dir);
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellKey(a.cells[col] || a.cells[0]), y = cellKey(b.cells[col] || b.cells[0]);
          var r = (x.num !== null && y.num !== null) ? x.num - y.num
                : (x.num !== null ? -1 : (y.num !== null ? 1 : x.text.localeCompare(y.text)));
          return dir === "asc" ? r : -r;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var data = JSON.parse(document.getElementById("tailpod-data").textContent);
    var tip = document.getElementById("tip");
    var summary = {};
    data.charts.forEach(function (chart) {
      var box = document.getElementById("chart-" + chart.id);
      setupChart(box, chart, tip, summary, data.watermark);
    });
    publish(summary);
    Array.prototype.forEach.call(document.querySelectorAll("main table"), sortable);
    document.body.setAttribute("data-ready", "1");
  });
})();
