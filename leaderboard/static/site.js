/* OPD-Bench leaderboard: suite tabs and sortable table columns. No dependencies, works from file://.
   Reads only the page's own DOM; never builds HTML from strings. */
(function () {
  "use strict";

  // ---- tabs: one panel per board; the URL hash names the open one so links can point at a tab ----
  var tabs = Array.prototype.slice.call(document.querySelectorAll('[role="tab"][data-tab]'));
  var panels = Array.prototype.slice.call(document.querySelectorAll('[role="tabpanel"][data-panel]'));

  function activate(slug, focus) {
    var found = false;
    tabs.forEach(function (tab) {
      var on = tab.getAttribute("data-tab") === slug;
      found = found || on;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.tabIndex = on ? 0 : -1;
      if (on && focus) { tab.focus(); }
    });
    if (!found) { return false; }
    panels.forEach(function (panel) { panel.hidden = panel.getAttribute("data-panel") !== slug; });
    return true;
  }

  if (tabs.length) {
    tabs.forEach(function (tab, i) {
      tab.addEventListener("click", function () {
        var slug = tab.getAttribute("data-tab");
        activate(slug, false);
        if (window.history && window.history.replaceState) { window.history.replaceState(null, "", "#" + slug); }
      });
      tab.addEventListener("keydown", function (ev) {
        var step = ev.key === "ArrowRight" ? 1 : ev.key === "ArrowLeft" ? -1 : 0;
        if (!step) { return; }
        ev.preventDefault();
        var next = tabs[(i + step + tabs.length) % tabs.length];
        activate(next.getAttribute("data-tab"), true);
      });
    });
    // a link to a board (index.html#SLUG) opens its tab and scrolls to it: the slug names a tab, not an element
    function arrive() {
      var slug = decodeURIComponent(window.location.hash.slice(1));
      if (!activate(slug, false)) { return false; }
      var tab = document.getElementById("tab-" + slug);
      if (tab && tab.scrollIntoView) { tab.scrollIntoView(); }
      return true;
    }
    if (!arrive()) { activate(tabs[0].getAttribute("data-tab"), false); }
    window.addEventListener("hashchange", arrive);
  }

  // ---- sorting: click a column title; numbers by value, text by locale; blanks always last ----
  function sortKey(cell) {
    var raw = cell ? cell.getAttribute("data-sort") : null;
    if (raw === null) { raw = cell ? cell.textContent.trim() : ""; }
    if (raw === "") { return { blank: true }; }
    var n = Number(raw);
    return isNaN(n) ? { text: raw } : { num: n };
  }

  function compare(a, b) {
    if (a.blank || b.blank) { return a.blank && b.blank ? 0 : (a.blank ? 1 : -1); }
    if (a.num !== undefined && b.num !== undefined) { return a.num - b.num; }
    var sa = a.num !== undefined ? String(a.num) : a.text;
    var sb = b.num !== undefined ? String(b.num) : b.text;
    return sa.localeCompare(sb, undefined, { numeric: true, sensitivity: "base" });
  }

  function sortTable(table, th) {
    var col = th.cellIndex;
    var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    Array.prototype.forEach.call(table.tBodies, function (body) {
      var rows = Array.prototype.map.call(body.rows, function (row, i) {
        return { row: row, key: sortKey(row.cells[col]), i: i };
      });
      rows.sort(function (x, y) {
        var c = compare(x.key, y.key);
        if (x.key.blank || y.key.blank) { return c || x.i - y.i; }  // blanks last in both directions
        return sign * c || x.i - y.i;
      });
      rows.forEach(function (r) { body.appendChild(r.row); });
    });
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    if (!table.tHead) { return; }
    Array.prototype.forEach.call(table.tHead.querySelectorAll("th button"), function (button) {
      button.addEventListener("click", function () { sortTable(table, button.closest("th")); });
    });
  });
})();
