// Draws every figure of the page from the JSON block #figures (built by webui/figures.py), wires
// the copy buttons, and on a node page refetches the series for the zoomed range.
(function () {
  "use strict";
  var CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  function figures() {
    var el = document.getElementById("figures");
    return el ? JSON.parse(el.textContent || "{}") : {};
  }

  // A figure with a `note` (figures.lines_or_note: fewer than two points) is not a chart: its
  // title and the note say why, instead of a line that is a single dot on a 1.5 ms axis.
  function drawOne(div, fig, react) {
    if (fig.note) {
      if (div.data) Plotly.purge(div);
      div.classList.add("fig-note");
      div.textContent = "";
      var t = document.createElement("p"), n = document.createElement("p");
      t.className = "t"; t.textContent = fig.layout.title.text;
      n.className = "dim"; n.textContent = fig.note;
      div.appendChild(t); div.appendChild(n);
      return;
    }
    if (div.classList.contains("fig-note")) { div.classList.remove("fig-note"); div.textContent = ""; }
    var f = fig.layout.meta && fig.layout.meta.yscale;
    if (f) {  // byte series come as whole bytes: shown in the axis' binary unit (figures._in_unit)
      fig.data.forEach(function (t) {
        if (!t.yaxis || t.yaxis === "y") t.y = t.y.map(function (v) { return v === null ? null : v / f; });
      });
    }
    if (react && div.data) Plotly.react(div, fig.data, fig.layout, CONFIG);
    else Plotly.newPlot(div, fig.data, fig.layout, CONFIG);
  }

  function draw() {
    var figs = figures();
    Object.keys(figs).forEach(function (key) {
      var div = document.getElementById("fig-" + key);
      if (div) drawOne(div, figs[key], false);
    });
    document.querySelectorAll(".fig").forEach(function (div) {
      if (!figs[div.id.slice(4)]) div.remove();  // a figure the data has nothing for
    });
    var node = document.body.getAttribute("data-node");
    if (node !== null) { wireZoom(node); watchLive(node); }
    if (document.body.getAttribute("data-nodes") !== null) watchFleet();
  }

  // The nodes page while a watch writes: reload when any node has a newer sample (a table
  // and one bar chart: nothing to keep); stop when no node is live any more.
  function watchFleet() {
    var secs = parseFloat(document.body.getAttribute("data-refresh") || "0");
    var last = parseFloat(document.body.getAttribute("data-last") || "0");
    var status = document.getElementById("live");
    if (!secs || !status) return;
    var timer = setInterval(function () {
      fetch("/api/nodes/last", { credentials: "same-origin" }).then(function (r) { return r.json(); })
        .then(function (info) {
          if (info.last && info.last > last) { clearInterval(timer); window.location.reload(); }
          else if (!info.live) {
            clearInterval(timer);
            document.body.setAttribute("data-refresh", "0");
            status.textContent = "not refreshing: no watch has written to this store since " +
              new Date(last * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
          }
        }).catch(function () { /* the next tick tries again */ });
    }, secs * 1000);
  }

  // While a watch writes this node's samples, poll its last sample time every `data-refresh`
  // seconds and redraw the charts when it moved; stop when nothing new came for 3 intervals.
  var zoomed = null;
  function watchLive(node) {
    var secs = parseFloat(document.body.getAttribute("data-refresh") || "0");
    var status = document.getElementById("live");
    if (!secs || !status) return;
    var last = parseFloat(document.body.getAttribute("data-last") || "0");
    var quietSince = Date.now();
    var timer = setInterval(function () {
      fetch("/api/node/last?n=" + encodeURIComponent(node), { credentials: "same-origin" })
        .then(function (r) { return r.json(); }).then(function (info) {
          if (info.last && info.last > last) {
            last = info.last; quietSince = Date.now();
            document.body.setAttribute("data-last", String(last));
            if (info.headline) { var h = document.getElementById("node-headline"); if (h) h.textContent = info.headline; }
            status.textContent = "live: a watch is writing; refreshed " + new Date().toLocaleTimeString() +
              " (every " + secs + " s)";
            if (!zoomed) refetch(node, null);
          } else if (Date.now() - quietSince > 3 * secs * 1000 && !info.live) {
            clearInterval(timer);
            document.body.setAttribute("data-refresh", "0");
            status.textContent = "not refreshing: no new sample since " +
              new Date(last * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC (the watch stopped writing)";
          }
        }).catch(function () { /* the next tick tries again */ });
    }, secs * 1000);
  }

  function refetch(node, range, done) {
    var q = "/api/node?n=" + encodeURIComponent(node);
    var params = new URLSearchParams(window.location.search);
    if (range) {
      q += "&start=" + Date.parse(range[0].replace(" ", "T") + "Z") / 1000 +
           "&end=" + Date.parse(range[1].replace(" ", "T") + "Z") / 1000;
    } else {
      if (params.get("start")) q += "&start=" + params.get("start");
      if (params.get("end")) q += "&end=" + params.get("end");
    }
    return fetch(q, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (figs) {
      Object.keys(figs).forEach(function (key) {
        var d = document.getElementById("fig-" + key);
        if (!d) return;
        var layout = figs[key].layout;
        if (range) layout.xaxis = Object.assign({}, layout.xaxis, { range: range, autorange: false });
        drawOne(d, figs[key], true);
      });
    }).finally(function () { if (done) done(); });
  }

  // Zoom on one time chart: refetch that range (finer buckets) for all of them, keep them aligned.
  function wireZoom(node) {
    var busy = false;
    document.querySelectorAll(".timefig").forEach(function (div) {
      if (!div.on) return;
      div.on("plotly_relayout", function (ev) {
        if (busy) return;
        var range = null;
        if (ev["xaxis.range[0]"] !== undefined) {
          range = [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
        } else if (!ev["xaxis.autorange"]) {
          return;
        }
        busy = true;
        zoomed = range;  // a zoomed view is not moved by the live refresh
        refetch(node, range, function () { busy = false; });
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

  // Verdicts the server had not computed when it rendered the page ([data-pending]: their
  // snapshot refs; a thread computes them): ask for each (/api/verdict waits for it), then
  // fetch the page again and swap its [data-swap] parts in, so its words are the template's.
  // Swapped after the first verdict and then at most every 2 s; a few rounds at most (a
  // live store's latest snapshot moves on). The thread computes every pending verdict, not
  // only those asked for: once a swap leaves nothing pending the chain stops, so the page
  // does not change again under its reader.
  function pendingRefs() {
    var refs = [];
    document.querySelectorAll("[data-pending]").forEach(function (el) {
      el.getAttribute("data-pending").split(" ").forEach(function (r) {
        if (r && refs.indexOf(r) < 0) refs.push(r);
      });
    });
    return refs;
  }
  function awaitVerdicts(round) {
    var refs = pendingRefs();
    if (!refs.length || round > 3 || !window.fetch || !window.DOMParser) return;
    var swapped = 0, closed = false;
    function swap(last) {
      swapped = Date.now();
      return fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.text(); }).then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          document.querySelectorAll("[data-swap]").forEach(function (el) {
            var fresh = el.id && doc.getElementById(el.id);
            if (!fresh) return;
            fresh = document.importNode(fresh, true);
            fresh.setAttribute("data-swapped", String(round + 1));  // came by this script
            el.replaceWith(fresh);
          });
          if (last) {
            closed = true;
            awaitVerdicts(round + 1);
          }
        });
    }
    var chain = Promise.resolve();
    refs.forEach(function (ref, i) {
      chain = chain.then(function () {
        if (pendingRefs().indexOf(ref) < 0) return false;  // an earlier swap brought it
        return fetch("/api/verdict?ref=" + encodeURIComponent(ref), { credentials: "same-origin" });
      }).then(function (asked) {
        if (!asked) return;
        var last = i === refs.length - 1 || !pendingRefs().some(function (r) { return r !== ref; });
        if (last || !swapped || Date.now() - swapped > 2000) return swap(last);
      });
    });
    // Steps skipped to the end (their verdicts came by earlier swaps) leave a verdict asked but
    // not swapped in, or one a swap newly brought pending: another round takes them.
    chain.then(function () {
      if (!closed && pendingRefs().length) awaitVerdicts(round + 1);
    }).catch(function () { /* the page says a reload shows them */ });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { awaitVerdicts(0); });
  } else awaitVerdicts(0);

  window.beamallocDraw = draw;
  if (window.Plotly) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
    else draw();
  }
})();
