// Live refresh: while the "live" box is ticked (remembered per browser), the
// page's <main> is re-fetched every 2 s and swapped in (not while a filter or
// a limit is being typed, nor while jobs are ticked). The server renders
// (and escapes) everything; this only moves its HTML across.
(function () {
  "use strict";
  // the jobs table's "tick all" box (delegated: live refresh swaps the table)
  document.addEventListener("change", function (e) {
    if (e.target && e.target.id === "tick-all") {
      document.querySelectorAll("form.bulk input[name=ids]").forEach(function (c) { c.checked = e.target.checked; });
    }
  });
  var box = document.getElementById("live");
  if (!box) { return; }
  var key = "tether-live";
  var timer = null;
  function tick() {
    if (document.hidden) { return; }
    fetch(location.href, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        var main = document.getElementById("main");
        // not while one types a filter or a limit, nor while rows are ticked for a bulk action
        var busy = main && (main.contains(document.activeElement.closest("form.filters, form.limits")) ||
                            main.querySelector("form.bulk input[type=checkbox]:checked"));
        if (fresh && main && !busy) {
          var open = [];
          main.querySelectorAll("details").forEach(function (d, i) { if (d.open) { open.push(i); } });
          main.replaceWith(fresh);
          var details = fresh.querySelectorAll("details");
          open.forEach(function (i) { if (details[i]) { details[i].open = true; } });
        }
      })
      .catch(function () {});
  }
  function apply() {
    if (timer) { clearInterval(timer); timer = null; }
    if (box.checked) { timer = setInterval(tick, 2000); }
    try { localStorage.setItem(key, box.checked ? "1" : ""); } catch (e) {}
  }
  try { box.checked = localStorage.getItem(key) === "1"; } catch (e) {}
  box.addEventListener("change", apply);
  apply();
}());
