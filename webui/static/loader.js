// The report carries plotly.js gzipped (it is 4.8 MB raw): unpack it in the browser, run it,
// then draw. DecompressionStream needs no network, so the report opens offline.
(function () {
  "use strict";
  var el = document.getElementById("plotly-gz");
  if (!el || !window.DecompressionStream) return;
  var bin = atob(el.textContent.trim());
  var bytes = new Uint8Array(bin.length);
  for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  new Response(stream).text().then(function (js) {
    var s = document.createElement("script");
    s.textContent = js;
    document.head.appendChild(s);
    document.getElementById("plotly-missing").remove();
    window.beamallocDraw();
  });
})();
