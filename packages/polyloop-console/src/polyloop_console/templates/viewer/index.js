(function () {
  "use strict";
  var filter = document.getElementById("filter");
  var ending = document.getElementById("ending");
  var count = document.getElementById("count");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#runs tbody tr"));
  var current = -1;
  function visible() { return rows.filter(function (row) { return !row.hidden; }); }
  function apply() {
    var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
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
