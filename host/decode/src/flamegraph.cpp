// A flame graph SVG written directly: frames stacked from the root at the
// bottom, widths proportional to instructions, a tooltip (<title>) on each.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>

#include "kthost/decode/report.h"

namespace kt {
namespace {

struct Frame {
  std::string name;
  uint64_t value = 0;  // inclusive
  std::map<std::string, std::unique_ptr<Frame>> children;
};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += (c < 0x20 || c >= 0x7f) ? '?' : static_cast<char>(c);
    }
  }
  return out;
}

// Warm colors, stable per name.
std::string color(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  unsigned r = 205 + h % 50, g = 80 + (h >> 8) % 150, b = 30 + (h >> 16) % 55;
  char buf[32];
  std::snprintf(buf, sizeof buf, "rgb(%u,%u,%u)", r, g, b);
  return buf;
}

struct Layout {
  double width = 1200, frame_h = 17, pad_top = 40, pad_side = 10;
  int depth = 0;
  uint64_t total = 1;
};

void draw(const Frame& f, double x, int level, const Layout& l, double img_h, std::string& out) {
  double w = (l.width - 2 * l.pad_side) * static_cast<double>(f.value) / static_cast<double>(l.total);
  if (w < 0.1) return;
  double y = img_h - (level + 1) * l.frame_h - 10;
  char buf[512];
  double share = 100.0 * static_cast<double>(f.value) / static_cast<double>(l.total);
  std::string name = xml_escape(f.name);
  std::snprintf(buf, sizeof buf, "<g><title>%s (%" PRIu64 " instructions, %.2f%%)</title>", name.c_str(), f.value, share);
  out += buf;
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" rx=\"2\" ry=\"2\"/>", x, y, w,
                l.frame_h - 1, color(f.name).c_str());
  out += buf;
  size_t fit = static_cast<size_t>(w / 7);  // about 7 px per character at font-size 12
  if (fit >= 3) {
    std::string label = f.name.size() <= fit ? f.name : f.name.substr(0, fit - 2) + "..";
    std::snprintf(buf, sizeof buf, "<text x=\"%.2f\" y=\"%.1f\">", x + 3, y + l.frame_h - 5);
    out += buf;
    out += xml_escape(label) + "</text>";
  }
  out += "</g>\n";
  double cx = x;
  for (const auto& [n, c] : f.children) {
    draw(*c, cx, level + 1, l, img_h, out);
    cx += (l.width - 2 * l.pad_side) * static_cast<double>(c->value) / static_cast<double>(l.total);
  }
}

int depth_of(const Frame& f) {
  int d = 0;
  for (const auto& [n, c] : f.children) d = std::max(d, depth_of(*c));
  return d + 1;
}

}  // namespace

std::string flamegraph_svg(const Profile& p, const Symbolizer& symbols, const std::string& title) {
  Frame root;
  root.name = "all";
  for (const auto& [path, n] : p.stacks) {
    Frame* f = &root;
    root.value += n;
    for (uint32_t id : path) {
      auto& c = f->children[function_key(symbols.function(id))];
      if (!c) {
        c = std::make_unique<Frame>();
        c->name = function_key(symbols.function(id));
      }
      c->value += n;
      f = c.get();
    }
  }
  Layout l;
  l.total = std::max<uint64_t>(root.value, 1);
  l.depth = depth_of(root);
  double img_h = l.pad_top + l.depth * l.frame_h + 20;
  char buf[512];
  std::string out = "<?xml version=\"1.0\" standalone=\"no\"?>\n";
  std::snprintf(buf, sizeof buf,
                "<svg version=\"1.1\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                "xmlns=\"http://www.w3.org/2000/svg\">\n",
                l.width, img_h, l.width, img_h);
  out += buf;
  out += "<style>text { font-family: monospace; font-size: 12px; fill: rgb(0,0,0); }</style>\n";
  std::snprintf(buf, sizeof buf, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"rgb(250,250,240)\"/>\n",
                l.width, img_h);
  out += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" style=\"font-size:17px\">", l.width / 2);
  out += buf;
  out += xml_escape(title) + "</text>\n";
  if (root.value) draw(root, l.pad_side, 0, l, img_h, out);
  out += "</svg>\n";
  return out;
}

}  // namespace kt
