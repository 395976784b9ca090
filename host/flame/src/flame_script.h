// The flame graph's inline script (ECMAScript 5, no external code): zoom on
// click, reset, regular-expression search with the matched share, details
// of the frame under the pointer, and the URL query "?s=REGEX&z=ID".
#pragma once

namespace kt {

inline constexpr const char* kFlameScript = R"JS((function () {
  "use strict";
  var svg = document.documentElement;
  var total = parseFloat(svg.getAttribute("fg-total"));
  var side = parseFloat(svg.getAttribute("fg-side"));
  var width = parseFloat(svg.getAttribute("width")) - 2 * side;
  var eps = total * 1e-12;
  var frames = Array.prototype.slice.call(document.getElementsByClassName("f"));
  var details = document.getElementById("details");
  var unzoomButton = document.getElementById("unzoom");
  var searchButton = document.getElementById("search");
  var matched = document.getElementById("matched");
  var searching = null;

  function num(g, name) { return parseFloat(g.getAttribute(name)); }
  function rectOf(g) { return g.getElementsByTagName("rect")[0]; }
  function titleOf(g) { return g.getElementsByTagName("title")[0].textContent; }
  function nameOf(g) { var t = titleOf(g); return t.substring(0, t.lastIndexOf(" (")); }
  function label(g) {
    var r = rectOf(g), t = g.getElementsByTagName("text")[0];
    var n = nameOf(g), fit = Math.floor(parseFloat(r.getAttribute("width")) / 7);
    t.setAttribute("x", parseFloat(r.getAttribute("x")) + 3);
    t.textContent = fit < 3 ? "" : (n.length <= fit ? n : n.substring(0, fit - 2) + "..");
  }
  function place(g, x, w) {
    var r = rectOf(g);
    r.setAttribute("x", x.toFixed(2));
    r.setAttribute("width", w.toFixed(2));
    label(g);
  }
  function show(g, how) {
    g.classList.remove("hide");
    g.classList.remove("parent");
    if (how) g.classList.add(how);
  }
  // The clicked frame fills the width; its ancestors span it, faded; frames
  // outside it are hidden.
  function zoom(z) {
    var zs = num(z, "fg-s"), zv = num(z, "fg-v"), zd = num(z, "fg-d");
    frames.forEach(function (f) {
      var s = num(f, "fg-s"), v = num(f, "fg-v"), d = num(f, "fg-d");
      if (d < zd && s <= zs + eps && s + v >= zs + zv - eps) {
        show(f, "parent");
        place(f, side, width);
      } else if (d >= zd && s >= zs - eps && s + v <= zs + zv + eps && zv > 0) {
        show(f, null);
        place(f, side + (s - zs) / zv * width, v / zv * width);
      } else {
        show(f, "hide");
      }
    });
    unzoomButton.classList.remove("hide");
    svg.setAttribute("fg-zoomed", z.id);
  }
  function unzoom() {
    frames.forEach(function (f) {
      show(f, null);
      place(f, side + num(f, "fg-s") / total * width, num(f, "fg-v") / total * width);
    });
    unzoomButton.classList.add("hide");
    svg.removeAttribute("fg-zoomed");
  }
  // Matches are coloured; the share counts nested matches once.
  function search(term) {
    var re;
    try { re = new RegExp(term); } catch (e) { matched.textContent = "not a regular expression: " + term; return; }
    var hits = [];
    frames.forEach(function (f) {
      var r = rectOf(f);
      if (!r.hasAttribute("fg-fill")) r.setAttribute("fg-fill", r.getAttribute("fill"));
      if (re.test(nameOf(f))) {
        r.setAttribute("fill", "rgb(230,0,230)");
        f.setAttribute("fg-match", "1");
        hits.push([num(f, "fg-s"), num(f, "fg-s") + num(f, "fg-v")]);
      } else {
        r.setAttribute("fill", r.getAttribute("fg-fill"));
        f.removeAttribute("fg-match");
      }
    });
    hits.sort(function (a, b) { return a[0] - b[0]; });
    var sum = 0, end = -Infinity;
    hits.forEach(function (h) {
      if (h[1] <= end) return;
      sum += h[1] - Math.max(h[0], end);
      end = h[1];
    });
    searching = term;
    matched.textContent = "Matched: " + (100 * sum / total).toFixed(2) + "%";
    svg.setAttribute("fg-matched", (100 * sum / total).toFixed(4));
    searchButton.textContent = "Reset Search";
  }
  function resetSearch() {
    frames.forEach(function (f) {
      var r = rectOf(f);
      if (r.hasAttribute("fg-fill")) r.setAttribute("fill", r.getAttribute("fg-fill"));
      f.removeAttribute("fg-match");
    });
    searching = null;
    matched.textContent = "";
    svg.removeAttribute("fg-matched");
    searchButton.textContent = "Search";
  }
  searchButton.addEventListener("click", function () {
    if (searching !== null) { resetSearch(); return; }
    var term = window.prompt("Search frames (regular expression):", "");
    if (term) search(term);
  });
  unzoomButton.addEventListener("click", unzoom);
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "f") {
      e.preventDefault();
      searchButton.dispatchEvent(new MouseEvent("click"));
    }
  });
  frames.forEach(function (f) {
    f.addEventListener("click", function (e) { e.stopPropagation(); zoom(f); });
    f.addEventListener("mouseover", function () { details.textContent = titleOf(f); });
    f.addEventListener("mouseout", function () { details.textContent = " "; });
  });
  var query = {};
  (window.location.search || "").replace(/^\?/, "").split("&").forEach(function (kv) {
    var i = kv.indexOf("=");
    if (i > 0) query[kv.substring(0, i)] = decodeURIComponent(kv.substring(i + 1).replace(/\+/g, " "));
  });
  if (query.z && document.getElementById(query.z))
    document.getElementById(query.z).dispatchEvent(new MouseEvent("click", { bubbles: true }));
  if (query.s) search(query.s);
})();
)JS";

}  // namespace kt
