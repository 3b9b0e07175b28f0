// The console's live run page (design 0069): on each "changed" event of the run, fetch the
// page again and swap its body in, keeping which folds are open and where it was scrolled.
//
// Loaded in the head, before the viewer's own script, so the listeners that script puts on
// document and window are known and taken off before it runs again on the new body (else
// each swap would add a second keyboard handler).
(function () {
  "use strict";
  var me = document.currentScript;
  var events = me && me.dataset.events;
  if (!events || !window.EventSource) { return; }
  var added = [];
  [document, window].forEach(function (target) {
    var add = target.addEventListener;
    target.addEventListener = function (type, listener, options) {
      added.push([target, type, listener, options]);
      return add.call(target, type, listener, options);
    };
  });
  var root = document.documentElement;
  root.dataset.liveSwaps = "0";

  function foldKey(details) {
    if (details.id) { return "#" + details.id; }
    var section = details.closest("[id]");
    var scope = section || document.body;
    var all = Array.prototype.indexOf.call(scope.querySelectorAll("details"), details);
    return (section ? "#" + section.id : "") + "/" + all;
  }

  function scrolled() {
    var found = [];
    document.querySelectorAll("[id]").forEach(function (element) {
      if (element.scrollTop) { found.push([element.id, element.scrollTop]); }
    });
    return found;
  }

  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    if (!fresh.body || !fresh.getElementById("polyloop-live")) { return false; }
    var open = {};
    document.querySelectorAll("details[open]").forEach(function (d) { open[foldKey(d)] = 1; });
    var x = window.scrollX, y = window.scrollY, inner = scrolled();
    added.splice(0).forEach(function (entry) {
      entry[0].removeEventListener(entry[1], entry[2], entry[3]);
    });
    document.body.replaceWith(document.adoptNode(fresh.body));
    // Scripts parsed from text do not run: put fresh copies in (allowed by their digests).
    document.body.querySelectorAll("script").forEach(function (old) {
      if (old.type && old.type !== "text/javascript") { return; }
      var script = document.createElement("script");
      script.textContent = old.textContent;
      old.replaceWith(script);
    });
    document.querySelectorAll("details").forEach(function (d) {
      if (open[foldKey(d)] && !d.open) { d.open = true; }
    });
    inner.forEach(function (entry) {
      var element = document.getElementById(entry[0]);
      if (element) { element.scrollTop = entry[1]; }
    });
    window.scrollTo(x, y);
    root.dataset.liveSwaps = String(Number(root.dataset.liveSwaps) + 1);
    return true;
  }

  var busy = false, again = false, source = null;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.pathname + location.search, {credentials: "same-origin", cache: "no-store"})
      .then(function (response) {
        if (!response.ok || response.redirected) { throw new Error("signed out or gone"); }
        return response.text();
      })
      .then(function (html) { swap(html); })
      .catch(function () {
        root.dataset.live = "stopped";
        if (source) { source.close(); }
      })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  function connect() {
    source = new EventSource(events);
    source.addEventListener("open", function () { root.dataset.live = "connected"; });
    source.addEventListener("changed", refresh);
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) { root.dataset.live = "stopped"; }
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", connect);
    added.pop();  // ours: kept across swaps
  } else {
    connect();
  }
})();
