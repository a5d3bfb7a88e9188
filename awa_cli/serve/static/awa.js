// awa serve: live updates and the jobs list's selection, written by hand (no library; the
// page's Content-Security-Policy allows only this same-origin file, no inline script).
// Without JavaScript the pages are complete as served; reload to refresh.
//
// Live updates: every few seconds, while the tab is visible, the page fetches itself and
// swaps in each element marked data-live (same id). A refresh is skipped while the person
// is using the list: a box is ticked, a cell is expanded, or a field inside it has focus.
(function () {
  "use strict";
  var PERIOD_MS = 5000;
  var live = document.querySelectorAll("[data-live][id]");

  function busyWith(element) {
    if (element.querySelector("input[type=checkbox]:checked, details[open]")) { return true; }
    var active = document.activeElement;
    return Boolean(active && active !== document.body && element.contains(active) &&
      active.matches("input:not([type=checkbox]):not([type=radio]), select, textarea"));
  }

  function countSelected() {
    var shown = document.getElementById("selected-count");
    if (!shown) { return; }
    var n = document.querySelectorAll("input[name=ids][form=bulk]:checked").length;
    shown.textContent = n ? n + (n === 1 ? " job selected" : " jobs selected") : "Selected jobs";
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.matches && target.matches("input[data-select-all]")) {
      document.querySelectorAll("input[name=ids][form=bulk]").forEach(function (box) {
        box.checked = target.checked;
      });
    }
    countSelected();
  });

  if (!live.length || !window.fetch || !window.DOMParser) { return; }
  var busy = false;
  function refresh() {
    if (busy || document.hidden) { return; }
    var idle = Array.prototype.filter.call(live, function (element) { return !busyWith(element); });
    if (!idle.length) { return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        idle.forEach(function (element) {
          var fresh = doc.getElementById(element.id);
          if (fresh && !busyWith(element)) { element.innerHTML = fresh.innerHTML; }
        });
        var all = document.querySelector("input[data-select-all]");
        if (all) { all.checked = false; }
        countSelected();
        document.documentElement.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, PERIOD_MS);
})();
