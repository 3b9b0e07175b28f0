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
