// awa serve: live updates, written by hand (no library). Every few seconds, while the tab is
// visible, the page fetches itself and swaps in each element marked data-live (same id).
// Without JavaScript the pages are complete as served; reload to refresh.
(function () {
  "use strict";
  var PERIOD_MS = 5000;
  var live = document.querySelectorAll("[data-live][id]");
  if (!live.length || !window.fetch || !window.DOMParser) { return; }
  var busy = false;
  function refresh() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        live.forEach(function (element) {
          var fresh = doc.getElementById(element.id);
          if (fresh) { element.innerHTML = fresh.innerHTML; }
        });
        document.documentElement.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, PERIOD_MS);
})();
