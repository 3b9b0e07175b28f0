"""The inline style and scripts of ``polyloop view``'s pages (design 0048).

The scripts read the page and never write markup: text goes in through ``textContent`` only,
so nothing from a log can become code. They use no library and fetch nothing.
"""

from __future__ import annotations

__all__ = ["INDEX_SCRIPT", "RUN_SCRIPT", "STYLE"]

STYLE = """
:root { --fg: #1d2127; --muted: #5b6470; --line: #d8dde3; --bg: #fff; --panel: #f6f8fa;
  --act: #1f6feb; --bad: #c62828; --final: #2e7d32; --replay: #8e24aa; --wait: #b26a00; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--fg); background: var(--bg); display: grid;
  grid-template-columns: 22rem minmax(0, 1fr); grid-template-rows: auto auto 1fr;
  height: 100vh; }
header { grid-column: 1 / -1; display: flex; justify-content: space-between;
  align-items: center; padding: .5rem 1rem; border-bottom: 1px solid var(--line); gap: 1rem; }
header h1 { font-size: 1.1rem; margin: 0; display: inline; word-break: break-all; }
header .store, header .keys { margin: 0; color: var(--muted); font-size: .85rem; }
.back { margin-right: .5rem; }
.damage { grid-column: 1 / -1; background: #fdecea; color: #611a15; padding: .5rem 1rem;
  border-bottom: 1px solid #f5c2c0; max-height: 12rem; overflow: auto; }
nav#steps { grid-row: 3; overflow-y: auto; border-right: 1px solid var(--line);
  background: var(--panel); }
nav#steps ol { list-style: none; margin: 0; padding: .25rem 0; }
nav#steps a { display: block; padding: .1rem .6rem; color: var(--fg); text-decoration: none;
  white-space: nowrap; overflow: hidden; text-overflow: ellipsis; border-left: 3px solid
  transparent; }
nav#steps a.act { border-left-color: var(--act); }
nav#steps a.bad { border-left-color: var(--bad); }
nav#steps a.final { border-left-color: var(--final); }
nav#steps a.pending { border-left-color: var(--wait); background: #fff4e0; }
nav#steps a.pending.doubt { border-left-color: var(--bad); background: #fdecea; }
nav#steps a .args { color: var(--muted); font: 12px ui-monospace, Menlo, Consolas, monospace; }
nav#steps a.current { background: #dde7f3; }
nav#steps .n { display: inline-block; min-width: 2.5rem; color: var(--muted); }
main { grid-row: 3; overflow-y: auto; padding: 0 1rem 4rem; }
main.index { grid-column: 1 / -1; }
#parameters { margin: .5rem 0; font-size: .8rem; }
#parameters summary, details.messages summary { cursor: pointer; color: var(--act); }
#parameters table { border-collapse: collapse; width: 100%; }
#parameters th, #parameters td { text-align: left; vertical-align: top; padding: .15rem .25rem;
  border-bottom: 1px solid var(--line); overflow-wrap: anywhere; }
#parameters th { font-weight: 600; width: 35%; }
section.task { border-bottom: 1px solid var(--line); padding: .5rem 0 1rem; }
section.task h2 { font-size: 1rem; margin: .5rem 0; }
p.missing { color: #611a15; background: #fdecea; padding: .4rem .6rem; border-radius: 4px; }
p.rebuilt { color: var(--muted); }
ol.messages { list-style: none; margin: .25rem 0; padding: 0; }
ol.messages li { margin: .25rem 0; }
ol.messages .role { font-size: .75rem; color: var(--muted); text-transform: uppercase; }
section.step.pending { border-left: 4px solid var(--wait); padding-left: .75rem; }
section.step.pending.doubt { border-left-color: var(--bad); }
section.step.pending .state { color: var(--wait); font-weight: 600; }
section.step.pending.doubt .state { color: var(--bad); }
p.detail, p.source { color: var(--muted); margin: .25rem 0; }
section.step, section.summary { border-bottom: 1px solid var(--line); padding: .5rem 0 1rem;
  scroll-margin-top: .5rem; }
/* Steps off screen are neither laid out nor painted until scrolled to (a long run opens fast). */
section.step { content-visibility: auto; contain-intrinsic-size: auto 700px; }
section.step:focus { outline: 2px solid var(--act); outline-offset: 2px; }
section.step h2 { font-size: 1rem; margin: .5rem 0; }
section.step h2 a { color: inherit; }
section.step.bad h2 .decision { color: var(--bad); }
section.step.final h2 .decision { color: var(--final); }
h3 { font-size: .85rem; margin: .75rem 0 .25rem; color: var(--muted); text-transform: uppercase;
  letter-spacing: .03em; }
h4 { font-size: .8rem; margin: .5rem 0 .25rem; color: var(--muted); }
.status { font-size: .8rem; padding: 0 .35rem; border: 1px solid var(--line);
  border-radius: .5rem; }
.mark { font-size: .8rem; padding: 0 .4rem; border-radius: .5rem; margin-left: .4rem; }
.mark.replay { background: var(--replay); color: #fff; }
.mark-dot { color: var(--replay); font-weight: 700; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .1rem .75rem;
  margin: .25rem 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; padding: .4rem .5rem;
  background: var(--panel); border: 1px solid var(--line); border-radius: 4px;
  font: 12.5px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace;
  max-height: 40rem; overflow-y: auto; }
pre.preview { border-bottom-left-radius: 0; border-bottom-right-radius: 0; }
pre.bad, pre.failure { border-color: #f5c2c0; }
details.fold summary { cursor: pointer; color: var(--act); font-size: .85rem; padding: .2rem 0; }
details.fold:not([open]) pre { display: none; }
ul.intents { margin: 0; padding-left: 1.2rem; }
.index table { border-collapse: collapse; width: 100%; }
.index th, .index td { text-align: left; padding: .2rem .5rem; border-bottom: 1px solid
  var(--line); overflow-wrap: anywhere; }
.index td.num { text-align: right; font-variant-numeric: tabular-nums; }
.index td.muted { color: var(--muted); }
.index td.task { max-width: 30rem; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.index th button { font: inherit; font-weight: 600; background: none; border: 0; padding: 0;
  cursor: pointer; color: var(--fg); }
.index th[aria-sort="ascending"] button::after { content: " ▲"; }
.index th[aria-sort="descending"] button::after { content: " ▼"; }
.index tr.current { background: #dde7f3; }
.filters { display: flex; gap: .5rem; align-items: center; margin: .75rem 0; }
.filters input { flex: 1; padding: .3rem .5rem; font: inherit; }
kbd { border: 1px solid var(--line); border-bottom-width: 2px; border-radius: 3px;
  padding: 0 .25rem; font-size: .8em; }
@media (max-width: 900px) { body { grid-template-columns: 14rem minmax(0, 1fr); } }
"""

RUN_SCRIPT = """
(function () {
  "use strict";
  var full = null;  // the folded texts, parsed when a fold is first opened
  document.querySelectorAll("details.fold").forEach(function (fold) {
    fold.addEventListener("toggle", function () {
      var pre = fold.querySelector("pre");
      if (fold.open && !pre.dataset.filled) {
        full = full || JSON.parse(document.getElementById("full-texts").textContent);
        pre.textContent = full[Number(fold.dataset.full)];
        pre.dataset.filled = "1";
      }
    });
  });
  var steps = Array.prototype.slice.call(document.querySelectorAll("main section.step"));
  var links = {};
  document.querySelectorAll("nav#steps a").forEach(function (a) { links[a.dataset.step] = a; });
  var current = -1;
  function go(index) {
    if (!steps.length) { return; }
    current = Math.max(0, Math.min(steps.length - 1, index));
    var section = steps[current];
    section.scrollIntoView({block: "start"});
    section.focus({preventScroll: true});
    document.querySelectorAll("nav#steps a.current").forEach(function (a) {
      a.classList.remove("current");
    });
    var link = links[section.dataset.step];
    if (link) { link.classList.add("current"); link.scrollIntoView({block: "nearest"}); }
    if (history.replaceState) { history.replaceState(null, "", "#" + section.id); }
  }
  function fromHash() {
    var target = document.getElementById(location.hash.slice(1));
    var index = steps.indexOf(target);
    if (index >= 0) { go(index); }
  }
  document.querySelector("nav#steps").addEventListener("click", function (event) {
    var a = event.target.closest("a");
    if (!a) { return; }
    event.preventDefault();
    go(steps.indexOf(document.getElementById("step-" + a.dataset.step)));
  });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var tag = (event.target.tagName || "").toLowerCase();
    if (tag === "input" || tag === "textarea" || tag === "select") { return; }
    var key = event.key;
    if (key === "j" || key === "ArrowDown" && event.shiftKey) { go(current + 1); }
    else if (key === "k" || key === "ArrowUp" && event.shiftKey) { go(current - 1); }
    else if (key === "g" || key === "Home") { go(0); }
    else if (key === "G" || key === "End") { go(steps.length - 1); }
    else if (key === "o" && current >= 0) {
      var folds = steps[current].querySelectorAll("details.fold");
      var open = !Array.prototype.some.call(folds, function (f) { return f.open; });
      folds.forEach(function (f) { f.open = open; });
    } else if (key === "p") {
      var panel = document.getElementById("parameters");
      panel.open = !panel.open;
      if (panel.open) { panel.scrollIntoView({block: "nearest"}); }
    } else { return; }
    event.preventDefault();
  });
  if (location.hash) { fromHash(); }
  window.addEventListener("hashchange", fromHash);
})();
"""

INDEX_SCRIPT = """
(function () {
  "use strict";
  var filter = document.getElementById("filter");
  var ending = document.getElementById("ending");
  var count = document.getElementById("count");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#runs tbody tr"));
  var current = -1;
  function visible() { return rows.filter(function (row) { return !row.hidden; }); }
  function apply() {
    var words = filter.value.toLowerCase().split(/\\s+/).filter(Boolean);
    var wanted = ending.value;
    rows.forEach(function (row) {
      var hay = row.textContent.toLowerCase();
      row.hidden = (wanted && row.dataset.ending !== wanted) ||
        !words.every(function (word) { return hay.indexOf(word) >= 0; });
    });
    count.textContent = visible().length + " of " + rows.length + " runs";
  }
  function move(step) {
    var shown = visible();
    if (!shown.length) { return; }
    rows.forEach(function (row) { row.classList.remove("current"); });
    current = Math.max(0, Math.min(shown.length - 1, current + step));
    shown[current].classList.add("current");
    shown[current].scrollIntoView({block: "nearest"});
  }
  var body = document.querySelector("#runs tbody");
  document.querySelectorAll("#runs thead th").forEach(function (th, column) {
    th.querySelector("button").addEventListener("click", function () {
      var descending = th.getAttribute("aria-sort") === "ascending";
      document.querySelectorAll("#runs thead th").forEach(function (other) {
        other.removeAttribute("aria-sort");
      });
      th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      var numeric = th.dataset.kind === "number";
      rows.sort(function (a, b) {
        var x = a.cells[column].dataset.sort, y = b.cells[column].dataset.sort;
        var order = numeric ? Number(x) - Number(y) : x.localeCompare(y);
        return descending ? -order : order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
      current = -1;
      apply();
    });
  });
  filter.addEventListener("input", function () { current = -1; apply(); });
  ending.addEventListener("change", function () { current = -1; apply(); });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    if (event.target === filter) {
      if (event.key === "Escape") { filter.blur(); }
      return;
    }
    if (event.key === "/") { filter.focus(); }
    else if (event.key === "j") { move(1); }
    else if (event.key === "k") { move(-1); }
    else if (event.key === "Enter" && current >= 0) {
      var link = visible()[current].querySelector("a");
      if (link) { link.click(); }
    } else { return; }
    event.preventDefault();
  });
  apply();
})();
"""
