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
  var refresh = parseInt(body.getAttribute("data-refresh") || "0", 10);
  if (refresh > 0) {
    setTimeout(function () { window.location.reload(); }, refresh * 1000);
  }
})();
