#include "core/hierarchy/svg.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dendro {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int32_t kRadialAbove = 200;  // kAuto: leaves beyond which to draw radially
// Tableau 10: distinct, readable on white.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr const char* kAboveCut = "#8c8c8c";
constexpr const char* kPlain = "#3b3b3b";

}  // namespace

std::string SvgEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string SvgNumber(double v) { return absl::StrFormat("%.2f", v); }

const char* SvgPaletteColour(int64_t i) { return kPalette[i % std::size(kPalette)]; }

namespace {

std::string Escape(std::string_view text) { return SvgEscape(text); }
std::string Num(double v) { return SvgNumber(v); }

// Leaves in depth-first order (children in the tree's order), iteratively.
std::vector<int32_t> LeafOrder(const Hierarchy& h) {
  std::vector<int32_t> order;
  order.reserve(h.num_leaves());
  std::vector<int32_t> stack = {h.root()};
  while (!stack.empty()) {
    const int32_t v = stack.back();
    stack.pop_back();
    if (h.is_leaf(v)) {
      order.push_back(v);
      continue;
    }
    auto kids = h.children(v);
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
  }
  return order;
}

// For each node, its position along the leaf axis: leaves at their rank in
// `order`, internal nodes midway between their first and last child.
std::vector<double> Positions(const Hierarchy& h, const std::vector<int32_t>& order) {
  std::vector<double> pos(h.num_nodes(), 0.0);
  for (size_t p = 0; p < order.size(); ++p) pos[order[p]] = static_cast<double>(p);
  // Children precede parents in id order.
  for (int32_t v = h.num_leaves(); v < h.num_nodes(); ++v) {
    auto kids = h.children(v);
    double lo = pos[kids[0]], hi = pos[kids[0]];
    for (int32_t c : kids) {
      lo = std::min(lo, pos[c]);
      hi = std::max(hi, pos[c]);
    }
    pos[v] = (lo + hi) / 2;
  }
  return pos;
}

// The cluster every leaf below a node belongs to at the cut, or -1 when the
// node spans several (it lies above the cut). Empty without colouring.
absl::StatusOr<std::vector<int32_t>> NodeClusters(const Hierarchy& h, int32_t level) {
  if (level == 0) return std::vector<int32_t>();
  auto cut = h.CutToK(level);
  if (!cut.ok()) return cut.status();
  std::vector<int32_t> cluster(h.num_nodes(), -1);
  for (int32_t v = 0; v < h.num_leaves(); ++v) cluster[v] = (*cut)[v];
  for (int32_t v = h.num_leaves(); v < h.num_nodes(); ++v) {
    auto kids = h.children(v);
    int32_t c = cluster[kids[0]];
    for (int32_t k : kids) {
      if (cluster[k] != c) c = -1;
    }
    cluster[v] = c;
  }
  return cluster;
}

std::string Colour(const std::vector<int32_t>& cluster, int32_t v) {
  if (cluster.empty()) return kPlain;
  return cluster[v] < 0 ? kAboveCut : SvgPaletteColour(cluster[v]);
}

std::string LeafName(const Hierarchy& h, int32_t leaf) {
  return h.leaf_names().empty() ? absl::StrCat(leaf) : h.leaf_names()[leaf];
}

std::string LeafClass(const std::vector<int32_t>& cluster, int32_t leaf) {
  return cluster.empty() ? "leaf" : absl::StrCat("leaf cluster-", cluster[leaf]);
}

std::string Header(double width, double height, const std::string& title) {
  std::string out = absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
      // No fixed width or height: the picture scales to the window (or the
      // element it is placed in) by its viewBox, aspect kept.
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ", Num(width), " ",
      Num(height), "\" preserveAspectRatio=\"xMidYMid meet\"",
      " font-family=\"sans-serif\" font-size=\"10\">\n",
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  if (!title.empty()) {
    absl::StrAppend(&out, "<text class=\"title\" x=\"", Num(width / 2),
                    "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">", Escape(title),
                    "</text>\n");
  }
  return out;
}

std::string Rectangular(const Hierarchy& h, const std::vector<int32_t>& order,
                        const std::vector<int32_t>& cluster, const std::string& title) {
  const double step = 14, left = 60, right = 20, top = title.empty() ? 20 : 36, plot = 400;
  const double label_room = 130;
  const double width = left + right + step * std::max<size_t>(order.size(), 1);
  const double height = top + plot + label_room;
  const double root_h = h.height(h.root()) > 0 ? h.height(h.root()) : 1.0;
  const std::vector<double> pos = Positions(h, order);
  auto x = [&](int32_t v) { return left + step * (pos[v] + 0.5); };
  auto y = [&](double height_value) { return top + plot * (1 - height_value / root_h); };

  std::string out = Header(width, height, title);
  // Height axis.
  absl::StrAppend(&out, "<g class=\"axis\" stroke=\"#555\">\n<line x1=\"", Num(left - 10),
                  "\" y1=\"", Num(y(0)), "\" x2=\"", Num(left - 10), "\" y2=\"", Num(y(root_h)),
                  "\"/>\n");
  for (int t = 0; t <= 4; ++t) {
    const double v = root_h * t / 4;
    absl::StrAppend(&out, "<line x1=\"", Num(left - 14), "\" y1=\"", Num(y(v)), "\" x2=\"",
                    Num(left - 10), "\" y2=\"", Num(y(v)), "\"/><text x=\"", Num(left - 16),
                    "\" y=\"", Num(y(v) + 3), "\" text-anchor=\"end\" stroke=\"none\">",
                    absl::StrFormat("%.3g", v), "</text>\n");
  }
  absl::StrAppend(&out, "</g>\n<g class=\"edges\" fill=\"none\" stroke-width=\"1.2\">\n");
  for (int32_t v = 0; v < h.num_nodes(); ++v) {
    const int32_t p = h.parent(v);
    if (p < 0) continue;
    absl::StrAppend(&out, "<path class=\"edge\" stroke=\"", Colour(cluster, v), "\" d=\"M",
                    Num(x(v)), " ", Num(y(h.height(v))), " V", Num(y(h.height(p))), " H",
                    Num(x(p)), "\"/>\n");
  }
  absl::StrAppend(&out, "</g>\n<g class=\"leaves\">\n");
  for (int32_t leaf : order) {
    const double lx = x(leaf), ly = y(0) + 6;
    absl::StrAppend(&out, "<text class=\"", LeafClass(cluster, leaf), "\" x=\"", Num(lx),
                    "\" y=\"", Num(ly), "\" transform=\"rotate(60 ", Num(lx), " ", Num(ly),
                    ")\">", Escape(LeafName(h, leaf)), "</text>\n");
  }
  absl::StrAppend(&out, "</g>\n</svg>\n");
  return out;
}

std::string Radial(const Hierarchy& h, const std::vector<int32_t>& order,
                   const std::vector<int32_t>& cluster, const std::string& title) {
  const double radius = std::max(200.0, 1.1 * static_cast<double>(order.size()));
  const double label_room = 140;
  const double size = 2 * (radius + label_room);
  const double top = title.empty() ? 0 : 24;
  const double cx = size / 2, cy = size / 2 + top;
  const double root_h = h.height(h.root()) > 0 ? h.height(h.root()) : 1.0;
  const std::vector<double> pos = Positions(h, order);
  const double n = static_cast<double>(std::max<size_t>(order.size(), 1));
  auto angle = [&](int32_t v) { return -kPi / 2 + 2 * kPi * (pos[v] + 0.5) / n; };
  auto r = [&](double height_value) { return radius * (1 - height_value / root_h); };
  auto px = [&](double rr, double a) { return cx + rr * std::cos(a); };
  auto py = [&](double rr, double a) { return cy + rr * std::sin(a); };

  std::string out = Header(size, size + top, title);
  absl::StrAppend(&out, "<g class=\"edges\" fill=\"none\" stroke-width=\"1\">\n");
  for (int32_t v = 0; v < h.num_nodes(); ++v) {
    const int32_t p = h.parent(v);
    if (p < 0) continue;
    const double a = angle(v), ap = angle(p);
    const double rv = r(h.height(v)), rp = r(h.height(p));
    absl::StrAppend(&out, "<path class=\"edge\" stroke=\"", Colour(cluster, v), "\" d=\"M",
                    Num(px(rv, a)), " ", Num(py(rv, a)), " L", Num(px(rp, a)), " ",
                    Num(py(rp, a)));
    if (rp > 0 && std::abs(ap - a) > 1e-12) {
      absl::StrAppend(&out, " A", Num(rp), " ", Num(rp), " 0 ",
                      std::abs(ap - a) > kPi ? 1 : 0, " ", ap > a ? 1 : 0, " ",
                      Num(px(rp, ap)), " ", Num(py(rp, ap)));
    }
    absl::StrAppend(&out, "\"/>\n");
  }
  absl::StrAppend(&out, "</g>\n<g class=\"leaves\" font-size=\"8\">\n");
  for (int32_t leaf : order) {
    const double a = angle(leaf);
    double degrees = a * 180 / kPi;
    const bool left_half = std::cos(a) < 0;
    if (left_half) degrees += 180;
    const double lx = px(radius + 6, a), ly = py(radius + 6, a);
    absl::StrAppend(&out, "<text class=\"", LeafClass(cluster, leaf), "\" x=\"", Num(lx),
                    "\" y=\"", Num(ly), "\" dominant-baseline=\"middle\" text-anchor=\"",
                    left_half ? "end" : "start", "\" transform=\"rotate(", Num(degrees), " ",
                    Num(lx), " ", Num(ly), ")\">", Escape(LeafName(h, leaf)), "</text>\n");
  }
  absl::StrAppend(&out, "</g>\n</svg>\n");
  return out;
}

}  // namespace

absl::StatusOr<std::string> ToSvg(const Hierarchy& tree, const SvgOptions& options) {
  if (options.color_level < 0 || options.color_level > tree.num_leaves()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "colour level must be in [0, %d] (0: no colouring), got %d", tree.num_leaves(),
        options.color_level));
  }
  auto cluster = NodeClusters(tree, options.color_level);
  if (!cluster.ok()) return cluster.status();
  const std::vector<int32_t> order = LeafOrder(tree);
  const bool radial =
      options.layout == SvgOptions::Layout::kRadial ||
      (options.layout == SvgOptions::Layout::kAuto && tree.num_leaves() > kRadialAbove);
  return radial ? Radial(tree, order, *cluster, options.title)
                : Rectangular(tree, order, *cluster, options.title);
}

}  // namespace dendro
