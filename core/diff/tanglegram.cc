#include "core/diff/tanglegram.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/hierarchy/svg.h"

namespace dendro {
namespace {

// Children orders of one tree, changed by crossing reduction.
using ChildOrders = std::vector<std::vector<int32_t>>;

ChildOrders InitialOrders(const Hierarchy& h) {
  ChildOrders kids(h.num_nodes());
  for (int32_t v = h.num_leaves(); v < h.num_nodes(); ++v) {
    auto c = h.children(v);
    kids[v].assign(c.begin(), c.end());
  }
  return kids;
}

// Leaves below `root` in depth-first order under `kids`.
void CollectLeaves(const Hierarchy& h, const ChildOrders& kids, int32_t root,
                   std::vector<int32_t>* out) {
  std::vector<int32_t> stack = {root};
  while (!stack.empty()) {
    const int32_t v = stack.back();
    stack.pop_back();
    if (h.is_leaf(v)) {
      out->push_back(v);
      continue;
    }
    for (auto it = kids[v].rbegin(); it != kids[v].rend(); ++it) stack.push_back(*it);
  }
}

std::vector<int32_t> LeafOrder(const Hierarchy& h, const ChildOrders& kids) {
  std::vector<int32_t> order;
  order.reserve(h.num_leaves());
  CollectLeaves(h, kids, h.root(), &order);
  return order;
}

// Inversions of `v` (pairs i < j with v[i] > v[j]) by merge sort; sorts `v`.
int64_t SortCountInversions(std::vector<int64_t>* v) {
  std::vector<int64_t> tmp(v->size());
  int64_t inversions = 0;
  const size_t n = v->size();
  for (size_t width = 1; width < n; width *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * width) {
      const size_t mid = std::min(lo + width, n), hi = std::min(lo + 2 * width, n);
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        if ((*v)[j] < (*v)[i]) {
          inversions += static_cast<int64_t>(mid - i);
          tmp[k++] = (*v)[j++];
        } else {
          tmp[k++] = (*v)[i++];
        }
      }
      while (i < mid) tmp[k++] = (*v)[i++];
      while (j < hi) tmp[k++] = (*v)[j++];
    }
    v->swap(tmp);
  }
  return inversions;
}

// Pairs (x in p, y in q) with x > y; both sorted ascending.
int64_t PairsAbove(const std::vector<int64_t>& p, const std::vector<int64_t>& q) {
  int64_t count = 0;
  size_t i = 0;
  for (int64_t y : q) {
    while (i < p.size() && p[i] <= y) ++i;
    count += static_cast<int64_t>(p.size() - i);
  }
  return count;
}

constexpr size_t kMaxPairwiseChildren = 64;

// Reorders the children of every internal node of `h` (bottom-up) where
// that strictly lowers the crossings against the partner positions
// `partner_pos` (per leaf of h; -1 for a leaf without partner). Returns
// whether anything changed.
bool Sweep(const Hierarchy& h, const std::vector<int64_t>& partner_pos, ChildOrders* kids) {
  bool changed = false;
  std::vector<int32_t> leaves;
  for (int32_t v = h.num_leaves(); v < h.num_nodes(); ++v) {
    std::vector<int32_t>& order = (*kids)[v];
    const size_t m = order.size();
    // Sorted partner positions below each child.
    std::vector<std::vector<int64_t>> lists(m);
    size_t nonempty = 0;
    for (size_t c = 0; c < m; ++c) {
      leaves.clear();
      CollectLeaves(h, *kids, order[c], &leaves);
      for (int32_t l : leaves) {
        if (partner_pos[l] >= 0) lists[c].push_back(partner_pos[l]);
      }
      std::sort(lists[c].begin(), lists[c].end());
      if (!lists[c].empty()) ++nonempty;
    }
    if (nonempty < 2) continue;
    // Barycentric candidate: children by the mean of their partners'
    // positions (children without partners last, in their order).
    std::vector<double> mean(m, std::numeric_limits<double>::infinity());
    for (size_t c = 0; c < m; ++c) {
      if (lists[c].empty()) continue;
      double s = 0;
      for (int64_t x : lists[c]) s += static_cast<double>(x);
      mean[c] = s / static_cast<double>(lists[c].size());
    }
    std::vector<size_t> cand(m);
    std::iota(cand.begin(), cand.end(), 0);
    std::stable_sort(cand.begin(), cand.end(),
                     [&](size_t p, size_t q) { return mean[p] < mean[q]; });
    int64_t current_cost = 0, cand_cost = 0;
    if (m <= kMaxPairwiseChildren) {
      // above[p][q]: crossings between children p and q when p precedes q.
      std::vector<std::vector<int64_t>> above(m, std::vector<int64_t>(m, 0));
      for (size_t p = 0; p < m; ++p) {
        for (size_t q = 0; q < m; ++q) {
          if (p != q) above[p][q] = PairsAbove(lists[p], lists[q]);
        }
      }
      // Adjacent swaps while they help.
      for (size_t pass = 0; pass < m; ++pass) {
        bool swapped = false;
        for (size_t i = 0; i + 1 < m; ++i) {
          if (above[cand[i + 1]][cand[i]] < above[cand[i]][cand[i + 1]]) {
            std::swap(cand[i], cand[i + 1]);
            swapped = true;
          }
        }
        if (!swapped) break;
      }
      for (size_t p = 0; p < m; ++p) {
        for (size_t q = p + 1; q < m; ++q) {
          current_cost += above[p][q];
          cand_cost += above[cand[p]][cand[q]];
        }
      }
    } else {
      // Many children: count the inversions of both concatenations.
      std::vector<int64_t> seq;
      for (size_t c = 0; c < m; ++c) seq.insert(seq.end(), lists[c].begin(), lists[c].end());
      current_cost = SortCountInversions(&seq);
      seq.clear();
      for (size_t c : cand) seq.insert(seq.end(), lists[c].begin(), lists[c].end());
      cand_cost = SortCountInversions(&seq);
    }
    if (cand_cost < current_cost) {
      std::vector<int32_t> reordered(m);
      for (size_t i = 0; i < m; ++i) reordered[i] = order[cand[i]];
      order = std::move(reordered);
      changed = true;
    }
  }
  return changed;
}

// pos[leaf] = rank of leaf in `order`.
std::vector<int64_t> Ranks(const std::vector<int32_t>& order, int32_t num_leaves) {
  std::vector<int64_t> pos(num_leaves, -1);
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int64_t>(i);
  return pos;
}

// Partner positions for the leaves of one tree: pos_other[partner] or -1.
std::vector<int64_t> PartnerPositions(int32_t num_leaves, const std::vector<int32_t>& mine,
                                      const std::vector<int32_t>& theirs,
                                      const std::vector<int64_t>& pos_other) {
  std::vector<int64_t> out(num_leaves, -1);
  for (size_t i = 0; i < mine.size(); ++i) out[mine[i]] = pos_other[theirs[i]];
  return out;
}

int64_t Crossings(const LeafMatching& m, const std::vector<int64_t>& pos_a,
                  const std::vector<int64_t>& pos_b) {
  std::vector<int64_t> pa(m.a_leaf.size()), pb(m.b_leaf.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    pa[i] = pos_a[m.a_leaf[i]];
    pb[i] = pos_b[m.b_leaf[i]];
  }
  return CountCrossings(pa, pb);
}

absl::Status CheckMatching(const Hierarchy& a, const Hierarchy& b, const LeafMatching& m) {
  if (m.a_leaf.size() != m.b_leaf.size()) {
    return absl::InvalidArgumentError("leaf matching: the two sides differ in length");
  }
  std::vector<bool> seen_a(a.num_leaves(), false), seen_b(b.num_leaves(), false);
  for (size_t i = 0; i < m.a_leaf.size(); ++i) {
    const int32_t x = m.a_leaf[i], y = m.b_leaf[i];
    if (x < 0 || x >= a.num_leaves() || y < 0 || y >= b.num_leaves() || seen_a[x] || seen_b[y]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "leaf matching: pair %d (%d, %d) is outside the trees or repeats a leaf", i, x, y));
    }
    seen_a[x] = seen_b[y] = true;
  }
  return absl::OkStatus();
}

bool IsPermutation(const std::vector<int32_t>& order, int32_t n) {
  if (static_cast<int32_t>(order.size()) != n) return false;
  std::vector<bool> seen(n, false);
  for (int32_t v : order) {
    if (v < 0 || v >= n || seen[v]) return false;
    seen[v] = true;
  }
  return true;
}

// At most `max_bytes` bytes of `name`, cut at a UTF-8 character boundary,
// with an ellipsis when shortened.
std::string Truncate(const std::string& name, size_t max_bytes) {
  if (name.size() <= max_bytes) return name;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return name.substr(0, cut) + "\u2026";
}

// Node positions along the leaf axis: leaves at their rank (plus `offset`),
// internal nodes midway between their first and last child.
std::vector<double> AxisPositions(const Hierarchy& h, const std::vector<int32_t>& order,
                                  double offset) {
  std::vector<double> pos(h.num_nodes(), 0.0);
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = offset + static_cast<double>(i);
  for (int32_t v = h.num_leaves(); v < h.num_nodes(); ++v) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (int32_t c : h.children(v)) {
      lo = std::min(lo, pos[c]);
      hi = std::max(hi, pos[c]);
    }
    pos[v] = (lo + hi) / 2;
  }
  return pos;
}

}  // namespace

int64_t CountCrossings(absl::Span<const int64_t> pos_a, absl::Span<const int64_t> pos_b) {
  const size_t n = std::min(pos_a.size(), pos_b.size());
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t i, size_t j) { return pos_a[i] < pos_a[j]; });
  std::vector<int64_t> seq(n);
  for (size_t i = 0; i < n; ++i) seq[i] = pos_b[idx[i]];
  return SortCountInversions(&seq);
}

absl::StatusOr<TanglegramLayout> LayoutTanglegram(const Hierarchy& a, const Hierarchy& b,
                                                  const LeafMatching& matching, int32_t sweeps) {
  if (absl::Status s = CheckMatching(a, b, matching); !s.ok()) return s;
  ChildOrders kids_a = InitialOrders(a), kids_b = InitialOrders(b);
  TanglegramLayout out;
  out.order_a = LeafOrder(a, kids_a);
  out.order_b = LeafOrder(b, kids_b);
  std::vector<int64_t> pos_a = Ranks(out.order_a, a.num_leaves());
  std::vector<int64_t> pos_b = Ranks(out.order_b, b.num_leaves());
  out.crossings_before = Crossings(matching, pos_a, pos_b);
  int64_t crossings = out.crossings_before;
  for (int32_t s = 0; s < sweeps && crossings > 0; ++s) {
    ++out.sweeps;
    bool changed = Sweep(
        b, PartnerPositions(b.num_leaves(), matching.b_leaf, matching.a_leaf, pos_a), &kids_b);
    out.order_b = LeafOrder(b, kids_b);
    pos_b = Ranks(out.order_b, b.num_leaves());
    changed |= Sweep(a, PartnerPositions(a.num_leaves(), matching.a_leaf, matching.b_leaf, pos_b),
                     &kids_a);
    out.order_a = LeafOrder(a, kids_a);
    pos_a = Ranks(out.order_a, a.num_leaves());
    crossings = Crossings(matching, pos_a, pos_b);
    if (!changed) break;
  }
  out.crossings_after = crossings;
  return out;
}

absl::StatusOr<std::string> TanglegramSvg(const Hierarchy& a, const Hierarchy& b,
                                          const LeafMatching& matching,
                                          const TanglegramLayout& layout,
                                          const TanglegramOptions& options) {
  if (absl::Status s = CheckMatching(a, b, matching); !s.ok()) return s;
  if (!IsPermutation(layout.order_a, a.num_leaves()) ||
      !IsPermutation(layout.order_b, b.num_leaves())) {
    return absl::InvalidArgumentError("tanglegram layout: a leaf order is not a permutation");
  }
  const int32_t rows = std::max(a.num_leaves(), b.num_leaves());
  const double step = rows <= 200 ? 14 : rows <= 2000 ? 6 : 3;
  const double font = std::min(10.0, step * 0.8);
  const size_t max_label = rows <= 200 ? 24 : 12;
  auto label = [&](const Hierarchy& h, int32_t leaf) {
    return Truncate(h.leaf_names().empty() ? absl::StrCat(leaf) : h.leaf_names()[leaf], max_label);
  };
  size_t longest = 1;
  for (int32_t l = 0; l < a.num_leaves(); ++l) longest = std::max(longest, label(a, l).size());
  for (int32_t l = 0; l < b.num_leaves(); ++l) longest = std::max(longest, label(b, l).size());
  const double label_w = 0.6 * font * static_cast<double>(std::min(longest, max_label + 1));
  const double margin = 20, tree_w = 300, gap = 160;
  const double top = (options.title.empty() ? 0 : 22) + 34;
  const double a_root_x = margin, a_leaf_x = margin + tree_w;
  const double link_x0 = a_leaf_x + 6 + label_w, link_x1 = link_x0 + gap;
  const double b_leaf_x = link_x1 + 6 + label_w, b_root_x = b_leaf_x + tree_w;
  const double width = b_root_x + margin;
  const double height = top + step * rows + margin;

  const std::vector<double> pos_a = AxisPositions(a, layout.order_a, (rows - a.num_leaves()) / 2.0);
  const std::vector<double> pos_b = AxisPositions(b, layout.order_b, (rows - b.num_leaves()) / 2.0);
  auto y = [&](double p) { return top + step * (p + 0.5); };
  const double root_a = a.height(a.root()) > 0 ? a.height(a.root()) : 1.0;
  const double root_b = b.height(b.root()) > 0 ? b.height(b.root()) : 1.0;
  auto xa = [&](double h) { return a_leaf_x - (a_leaf_x - a_root_x) * h / root_a; };
  auto xb = [&](double h) { return b_leaf_x + (b_root_x - b_leaf_x) * h / root_b; };

  // Links coloured by A's clusters at a cut into (at most) ten.
  std::vector<int32_t> colour(a.num_leaves(), 0);
  {
    int32_t level = 1;
    for (int32_t k : a.ReachableLevels()) {
      if (k <= std::min(10, a.num_leaves())) level = k;
    }
    absl::StatusOr<std::vector<int32_t>> cut = a.CutToK(level);
    if (cut.ok()) colour = *std::move(cut);
  }
  std::vector<int32_t> partner_of_a(a.num_leaves(), -1);
  std::vector<bool> shared_b(b.num_leaves(), false);
  for (size_t i = 0; i < matching.a_leaf.size(); ++i) {
    partner_of_a[matching.a_leaf[i]] = matching.b_leaf[i];
    shared_b[matching.b_leaf[i]] = true;
  }

  std::string out = absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ", SvgNumber(width), " ",
      SvgNumber(height),
      "\" preserveAspectRatio=\"xMidYMin meet\" font-family=\"sans-serif\" "
      "font-size=\"",
      SvgNumber(font), "\">\n", "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  if (!options.title.empty()) {
    absl::StrAppend(&out, "<text class=\"title\" x=\"", SvgNumber(width / 2),
                    "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">",
                    SvgEscape(options.title), "</text>\n");
  }
  const double caption_y = top - 14;
  absl::StrAppend(&out, "<text class=\"caption\" x=\"", SvgNumber(a_root_x), "\" y=\"",
                  SvgNumber(caption_y), "\" font-size=\"12\">", SvgEscape(options.a_label),
                  "</text>\n<text class=\"caption\" x=\"", SvgNumber(b_root_x), "\" y=\"",
                  SvgNumber(caption_y), "\" font-size=\"12\" text-anchor=\"end\">",
                  SvgEscape(options.b_label), "</text>\n<text class=\"crossings\" x=\"",
                  SvgNumber((link_x0 + link_x1) / 2), "\" y=\"", SvgNumber(caption_y),
                  "\" font-size=\"10\" text-anchor=\"middle\">",
                  absl::StrFormat("crossings: %d (before reduction: %d)", layout.crossings_after,
                                  layout.crossings_before),
                  "</text>\n");

  auto edges = [&](const Hierarchy& h, const std::vector<double>& pos, auto x, const char* cls) {
    absl::StrAppend(&out, "<g class=\"", cls,
                    "\" fill=\"none\" stroke=\"#3b3b3b\" stroke-width=\"1\">\n");
    for (int32_t v = 0; v < h.num_nodes(); ++v) {
      const int32_t p = h.parent(v);
      if (p < 0) continue;
      absl::StrAppend(&out, "<path d=\"M", SvgNumber(x(h.height(v))), " ", SvgNumber(y(pos[v])),
                      " H", SvgNumber(x(h.height(p))), " V", SvgNumber(y(pos[p])), "\"/>\n");
    }
    absl::StrAppend(&out, "</g>\n");
  };
  edges(a, pos_a, xa, "edges-a");
  edges(b, pos_b, xb, "edges-b");

  absl::StrAppend(&out, "<g class=\"links\" stroke-width=\"1\" stroke-opacity=\"0.75\">\n");
  for (int32_t leaf : layout.order_a) {
    const int32_t partner = partner_of_a[leaf];
    if (partner < 0) continue;
    absl::StrAppend(&out, "<line x1=\"", SvgNumber(link_x0), "\" y1=\"", SvgNumber(y(pos_a[leaf])),
                    "\" x2=\"", SvgNumber(link_x1), "\" y2=\"", SvgNumber(y(pos_b[partner])),
                    "\" stroke=\"", SvgPaletteColour(colour[leaf]), "\"/>\n");
  }
  absl::StrAppend(&out, "</g>\n<g class=\"leaves-a\">\n");
  for (int32_t leaf : layout.order_a) {
    absl::StrAppend(&out, "<text x=\"", SvgNumber(a_leaf_x + 4), "\" y=\"",
                    SvgNumber(y(pos_a[leaf])), "\" dominant-baseline=\"middle\"",
                    partner_of_a[leaf] < 0 ? " fill=\"#9a9a9a\"" : "", ">",
                    SvgEscape(label(a, leaf)), "</text>\n");
  }
  absl::StrAppend(&out, "</g>\n<g class=\"leaves-b\" text-anchor=\"end\">\n");
  for (int32_t leaf : layout.order_b) {
    absl::StrAppend(&out, "<text x=\"", SvgNumber(b_leaf_x - 4), "\" y=\"",
                    SvgNumber(y(pos_b[leaf])), "\" dominant-baseline=\"middle\"",
                    shared_b[leaf] ? "" : " fill=\"#9a9a9a\"", ">", SvgEscape(label(b, leaf)),
                    "</text>\n");
  }
  absl::StrAppend(&out, "</g>\n</svg>\n");
  return out;
}

absl::StatusOr<std::string> DiffTanglegramSvg(const Hierarchy& a, const Hierarchy& b,
                                              const DiffReport& report,
                                              const TanglegramOptions& options) {
  TanglegramLayout layout;
  layout.order_a = report.order_a;
  layout.order_b = report.order_b;
  layout.crossings_before = report.crossings_before;
  layout.crossings_after = report.crossings_after;
  layout.sweeps = report.crossing_sweeps;
  return TanglegramSvg(a, b, report.matching, layout, options);
}

}  // namespace dendro
