// Draws every figure of the page from the JSON block #figures (built by webui/figures.py), wires
// the copy buttons, and on a node page refetches the series for the zoomed range.
(function () {
  "use strict";
  var CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  function figures() {
    var el = document.getElementById("figures");
    return el ? JSON.parse(el.textContent || "{}") : {};
  }

  function draw() {
    var figs = figures();
    Object.keys(figs).forEach(function (key) {
      var div = document.getElementById("fig-" + key);
      if (div) Plotly.newPlot(div, figs[key].data, figs[key].layout, CONFIG);
    });
    document.querySelectorAll(".fig").forEach(function (div) {
      if (!figs[div.id.slice(4)]) div.remove();  // a figure the data has nothing for
    });
    var node = document.body.getAttribute("data-node");
    if (node !== null) wireZoom(node);
  }

  // Zoom on one time chart: refetch that range (finer buckets) for all of them, keep them aligned.
  function wireZoom(node) {
    var busy = false;
    document.querySelectorAll(".timefig").forEach(function (div) {
      if (!div.on) return;
      div.on("plotly_relayout", function (ev) {
        if (busy) return;
        var q = "/api/node?n=" + encodeURIComponent(node), range = null;
        if (ev["xaxis.range[0]"] !== undefined) {
          range = [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
          q += "&start=" + Date.parse(range[0].replace(" ", "T") + "Z") / 1000 +
               "&end=" + Date.parse(range[1].replace(" ", "T") + "Z") / 1000;
        } else if (!ev["xaxis.autorange"]) {
          return;
        }
        busy = true;
        var params = new URLSearchParams(window.location.search);
        if (!range && params.get("start")) q += "&start=" + params.get("start");
        fetch(q, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (figs) {
          Object.keys(figs).forEach(function (key) {
            var d = document.getElementById("fig-" + key);
            if (!d || !d.data) return;
            var layout = figs[key].layout;
            if (range) layout.xaxis = Object.assign({}, layout.xaxis, { range: range, autorange: false });
            Plotly.react(d, figs[key].data, layout, CONFIG);
          });
        }).finally(function () { busy = false; });
      });
    });
  }

  function copyText(text, button) {
    function done() { button.textContent = "copied"; setTimeout(function () { button.textContent = "copy"; }, 1500); }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallback(text); done(); });
    } else { fallback(text); done(); }
  }
  function fallback(text) {  // file:// and plain http: no async clipboard
    var ta = document.createElement("textarea");
    ta.value = text; document.body.appendChild(ta); ta.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing more to try */ }
    ta.remove();
  }
  document.addEventListener("click", function (ev) {
    var b = ev.target.closest && ev.target.closest("button.copy");
    if (!b) return;
    var pre = document.getElementById(b.getAttribute("data-copy"));
    if (pre) copyText(pre.textContent, b);
  });

  window.beamallocDraw = draw;
  if (window.Plotly) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
    else draw();
  }
})();
