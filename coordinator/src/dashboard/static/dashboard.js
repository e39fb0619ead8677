// benchlake dashboard: the only script (served from /static, no inline code).
// A page whose <body> has data-live="/api/runs/ID" polls that JSON every 2 s
// and reloads itself when the run's version (states, attempts, files)
// changes; a page with data-refresh="N" reloads every N seconds.
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
    var api = matrix.getAttribute("data-api");
    var last = "";
    var timer = null;
    matrix.addEventListener("mousemove", function (ev) {
      var box = matrix.getBoundingClientRect();
      var to = Math.floor((ev.clientX - box.left) / box.width * n);
      var from = Math.floor((ev.clientY - box.top) / box.height * n);
      if (n <= 0 || from < 0 || to < 0 || from >= n || to >= n) { return; }
      var key = from + "," + to;
      if (key === last) { return; }
      last = key;
      hover.textContent = "from rank " + from + " → to rank " + to + " …";
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
              hover.setAttribute("data-pair", key);
            }
          })
          .catch(function (e) { hover.textContent = "no value (" + e.message + ")"; });
      }, 40);
    });
  }
  var refresh = parseInt(body.getAttribute("data-refresh") || "0", 10);
  if (refresh > 0) {
    setTimeout(function () { window.location.reload(); }, refresh * 1000);
  }
})();
