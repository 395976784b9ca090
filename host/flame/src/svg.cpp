// The flame graph SVG: a tree of frames from the folded stacks, laid out from
// the root at the bottom, each frame a <g> with its place in count units
// (fg-s start, fg-v width, fg-d depth) so the inline script can zoom.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "flame_script.h"
#include "kthost/common/strings.h"
#include "kthost/flame/flame.h"

namespace kt {
namespace {

struct Node {
  std::string name;
  double value = 0;   // inclusive, laid out
  double before = 0;  // diff: the inclusive count before
  std::map<std::string, std::unique_ptr<Node>> children;
};

void insert(Node& root, const std::string& stack, double n, bool into_before) {
  Node* f = &root;
  (into_before ? root.before : root.value) += n;
  size_t start = 0;
  while (start <= stack.size()) {
    size_t end = stack.find(';', start);
    if (end == std::string::npos) end = stack.size();
    std::string name = stack.substr(start, end - start);
    auto& c = f->children[name];
    if (!c) {
      c = std::make_unique<Node>();
      c->name = std::move(name);
    }
    (into_before ? c->before : c->value) += n;
    f = c.get();
    start = end + 1;
  }
}

// Warm colours, stable per name.
std::string warm(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "rgb(%u,%u,%u)", 205 + h % 50, 80 + (h >> 8) % 150, 30 + (h >> 16) % 55);
  return buf;
}

// Red for growth, blue for shrinkage, white for none; full colour at a
// change of 100% of before (or anything new).
std::string change_colour(double before, double after) {
  double r = before > 0 ? (after - before) / before : (after > 0 ? 1.0 : 0.0);
  r = std::clamp(r, -1.0, 1.0);
  const unsigned fade = static_cast<unsigned>(std::lround(220 * (1.0 - std::fabs(r))));
  char buf[32];
  if (r >= 0) std::snprintf(buf, sizeof buf, "rgb(255,%u,%u)", 35 + fade * 200 / 220, 35 + fade * 200 / 220);
  else std::snprintf(buf, sizeof buf, "rgb(%u,%u,255)", 35 + fade * 200 / 220, 35 + fade * 200 / 220);
  return buf;
}

struct Layout {
  FlameOptions o;
  double total = 1, frame_h = 17, top = 72, side = 10, height = 0;
  bool diff = false;
  int next_id = 0;
  double px(double v) const { return (o.width - 2 * side) * v / total; }
};

int depth_of(const Node& f) {
  int d = 0;
  for (const auto& [n, c] : f.children) d = std::max(d, depth_of(*c));
  return d + 1;
}

std::string number(double v) {
  char buf[48];
  if (std::fabs(v - std::round(v)) < 1e-9) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

void draw(const Node& f, double start, int depth, Layout& l, std::string& out) {
  const double w = l.px(f.value);
  if (w < l.o.min_frame_px) return;
  const double x = l.side + l.px(start);
  const double y = l.height - (depth + 1) * l.frame_h - 28;
  const std::string name = xml_escape(f.name);
  std::string title = name + " (" + number(f.value) + " " + l.o.unit;
  char buf[640];
  std::snprintf(buf, sizeof buf, ", %.2f%%", 100.0 * f.value / l.total);
  title += buf;
  if (l.diff) {
    const double change = f.before > 0 ? 100.0 * (f.value - f.before) / f.before : 0;
    if (f.before > 0) std::snprintf(buf, sizeof buf, "; before %s, %+.2f%%", number(f.before).c_str(), change);
    else std::snprintf(buf, sizeof buf, "; new");
    title += buf;
  }
  title += ")";
  const std::string fill = l.diff ? change_colour(f.before, f.value) : warm(f.name);
  std::snprintf(buf, sizeof buf, "<g class=\"f\" id=\"f%d\" fg-s=\"%.17g\" fg-v=\"%.17g\" fg-d=\"%d\"><title>",
                l.next_id++, start, f.value, depth);
  out += buf;
  out += title + "</title>";
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" rx=\"2\" ry=\"2\"/>"
                "<text x=\"%.2f\" y=\"%.1f\">",
                x, y, w, l.frame_h - 1, fill.c_str(), x + 3, y + l.frame_h - 5);
  out += buf;
  // The label as the script would set it, for viewers that run no script.
  const size_t fit = static_cast<size_t>(w / 7);
  if (fit >= 3) out += xml_escape(f.name.size() <= fit ? f.name : f.name.substr(0, fit - 2) + "..");
  out += "</text></g>\n";
  double child = start;
  for (const auto& [n, c] : f.children) {
    draw(*c, child, depth + 1, l, out);
    child += c->value;
  }
}

std::string render(const Node& root, Layout& l, const std::string& note) {
  l.total = std::max(root.value, 1.0);
  l.height = l.top + depth_of(root) * l.frame_h + 40;
  char buf[1024];
  std::string out = "<?xml version=\"1.0\" standalone=\"no\"?>\n";
  std::snprintf(buf, sizeof buf,
                "<svg version=\"1.1\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                "xmlns=\"http://www.w3.org/2000/svg\" fg-total=\"%.17g\" fg-side=\"%.0f\" fg-unit=\"%s\">\n",
                l.o.width, l.height, l.o.width, l.height, l.total, l.side, xml_escape(l.o.unit).c_str());
  out += buf;
  out += "<style>text { font-family: monospace; font-size: 12px; fill: rgb(0,0,0); }\n"
         ".f:hover rect { stroke: black; stroke-width: 0.5; cursor: pointer; }\n"
         ".ui { cursor: pointer; } .hide { display: none; } .parent rect { opacity: 0.5; }</style>\n";
  std::snprintf(buf, sizeof buf, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"rgb(250,250,240)\"/>\n",
                l.o.width, l.height);
  out += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" style=\"font-size:17px\">",
                l.o.width / 2);
  out += buf;
  out += xml_escape(l.o.title) + "</text>\n";
  std::string sub = l.o.subtitle;
  if (!note.empty()) sub += sub.empty() ? note : "; " + note;
  if (!sub.empty()) {
    std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"42\" text-anchor=\"middle\">", l.o.width / 2);
    out += buf;
    out += xml_escape(sub) + "</text>\n";
  }
  std::snprintf(buf, sizeof buf,
                "<text id=\"unzoom\" class=\"ui hide\" x=\"%.0f\" y=\"24\">Reset Zoom</text>\n"
                "<text id=\"search\" class=\"ui\" x=\"%.0f\" y=\"24\" text-anchor=\"end\">Search</text>\n"
                "<text id=\"matched\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\"></text>\n"
                "<text id=\"details\" x=\"%.0f\" y=\"%.0f\"> </text>\n",
                l.side, l.o.width - l.side, l.o.width - l.side, l.height - 10, l.side, l.height - 10);
  out += buf;
  out += "<g id=\"frames\">\n";
  if (root.value > 0) draw(root, 0, 0, l, out);
  out += "</g>\n<script type=\"text/ecmascript\"><![CDATA[\n";
  out += kFlameScript;
  out += "]]></script>\n</svg>\n";
  return out;
}

}  // namespace

std::string flame_svg(const FoldedStacks& stacks, const FlameOptions& options) {
  Node root;
  root.name = "all";
  for (const auto& [stack, n] : stacks.stacks) insert(root, stack, static_cast<double>(n), false);
  Layout l;
  l.o = options;
  return render(root, l, "");
}

std::string diff_flame_svg(const FoldedStacks& before, uint32_t before_runs, const FoldedStacks& after,
                           uint32_t after_runs, const FlameOptions& options) {
  Node root;
  root.name = "all";
  const double b = std::max<uint32_t>(before_runs, 1), a = std::max<uint32_t>(after_runs, 1);
  for (const auto& [stack, n] : after.stacks) insert(root, stack, static_cast<double>(n) / a, false);
  double vanished = 0;
  for (const auto& [stack, n] : before.stacks) {
    insert(root, stack, static_cast<double>(n) / b, true);
    if (!after.stacks.count(stack)) vanished += static_cast<double>(n) / b;
  }
  Layout l;
  l.o = options;
  l.diff = true;
  char note[256];
  std::snprintf(note, sizeof note, "red grew, blue shrank; %s %s before in stacks not run after",
                number(vanished).c_str(), options.unit.c_str());
  return render(root, l, note);
}

}  // namespace kt
