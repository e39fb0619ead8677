// benchlake dashboard: the only script (served from /static, no inline code).
// A page whose <body> has data-live="/api/runs/ID" polls that JSON every 2 s
// and reloads itself when the run's version (states, attempts, files)
// changes; a page with data-refresh="N" reloads every N seconds; an admin
// action's form with data-confirm asks before it is sent.
(function () {
  "use strict";
  var body = document.body;
  var live = body.getAttribute("data-live");
  var status = document.getElementById("live-status");
  function say(text) {
    if (status) { status.textContent = text; }
  }
  if (live) {
    var version = body.getAttribute("data-version");
    var poll = function () {
      fetch(live, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (!r.ok) { throw new Error("HTTP " + r.status); }
          return r.json();
        })
        .then(function (j) {
          say("· checked " + new Date().toLocaleTimeString() + " · " + j.state);
          if (j.version !== version) {
            window.location.reload();
            return;
          }
          setTimeout(poll, 2000);
        })
        .catch(function (e) {
          say("· update failed (" + e.message + "), retrying");
          setTimeout(poll, 5000);
        });
    };
    setTimeout(poll, 2000);
  }
  // The LinkTest pair matrix: the pair under the pointer (rank from the
  // position in the image), its values fetched from data-api (debounced).
  var matrix = document.getElementById("lt-matrix");
  var hover = document.getElementById("lt-hover");
  if (matrix && hover) {
    var n = parseInt(matrix.getAttribute("data-n") || "0", 10);
    // The image has `side` pixels a side, each `bin` ranks (the slowest pair
    // of its block): the pointer picks a pixel, the server names its pair.
    var bin = Math.max(1, parseInt(matrix.getAttribute("data-bin") || "1", 10));
    var side = Math.max(1, parseInt(matrix.getAttribute("data-side") || String(n), 10));
    // A zoomed window starts at rank r0 (rows) and c0 (columns) of `total`.
    var r0 = parseInt(matrix.getAttribute("data-r0") || "0", 10);
    var c0 = parseInt(matrix.getAttribute("data-c0") || "0", 10);
    var total = parseInt(matrix.getAttribute("data-total") || String(n), 10);
    var zoom = matrix.getAttribute("data-zoom");
    var zspan = parseInt(matrix.getAttribute("data-zspan") || "0", 10);
    var at = null;
    var api = matrix.getAttribute("data-api");
    var last = "";
    var timer = null;
    matrix.addEventListener("mousemove", function (ev) {
      var box = matrix.getBoundingClientRect();
      var px = Math.floor((ev.clientX - box.left) / box.width * side);
      var py = Math.floor((ev.clientY - box.top) / box.height * side);
      if (n <= 0 || px < 0 || py < 0 || px >= side || py >= side) { return; }
      var key = py + "," + px;
      if (key === last) { return; }
      last = key;
      var from = r0 + Math.min(n - 1, py * bin), to = c0 + Math.min(n - 1, px * bin);
      at = [from + Math.floor(bin / 2), to + Math.floor(bin / 2)];
      var cursor = document.getElementById("lt-cursor");
      if (cursor) {
        // The pixel in the SVG's units, at least 4 units wide to stay visible.
        var x0 = parseFloat(matrix.getAttribute("x")), y0 = parseFloat(matrix.getAttribute("y"));
        var cell = parseFloat(matrix.getAttribute("width")) / side, size = Math.max(cell, 4);
        cursor.setAttribute("x", String(x0 + (px + 0.5) * cell - size / 2));
        cursor.setAttribute("y", String(y0 + (py + 0.5) * cell - size / 2));
        cursor.setAttribute("width", String(size));
        cursor.setAttribute("height", String(size));
      }
      hover.textContent = (bin > 1 ? "ranks from " : "from rank ") + from + " → " + to + " …";
      clearTimeout(timer);
      timer = setTimeout(function () {
        fetch(api + "&from=" + from + "&to=" + to, { credentials: "same-origin" })
          .then(function (r) {
            if (!r.ok) { throw new Error("HTTP " + r.status); }
            return r.json();
          })
          .then(function (j) {
            if (last === key) {
              hover.textContent = j.text;
              hover.setAttribute("data-pair", j.from + "," + j.to);
            }
          })
          .catch(function (e) { hover.textContent = "no value (" + e.message + ")"; });
      }, 40);
    });
    // A click on a binned matrix zooms into a window around the pixel.
    if (zoom && zspan > 0) {
      matrix.addEventListener("click", function () {
        if (!at) { return; }
        var clamp = function (v) { return Math.max(0, Math.min(total - zspan, v)); };
        window.location.href = zoom + "&r0=" + clamp(at[0] - Math.floor(zspan / 2)) +
          "&c0=" + clamp(at[1] - Math.floor(zspan / 2)) + "&span=" + zspan;
      });
    }
  }
  // Admin actions that cannot be undone at once (cancel, drain) ask first.
  var asks = document.querySelectorAll("form[data-confirm]");
  for (var i = 0; i < asks.length; i++) {
    asks[i].addEventListener("submit", function (e) {
      if (!window.confirm(this.getAttribute("data-confirm"))) { e.preventDefault(); }
    });
  }
  var refresh = parseInt(body.getAttribute("data-refresh") || "0", 10);
  if (refresh > 0) {
    setTimeout(function () { window.location.reload(); }, refresh * 1000);
  }
})();
