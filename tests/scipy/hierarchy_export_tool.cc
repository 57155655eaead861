// Writes a few random hierarchies (fixed seed) for check_scipy_linkage.py:
//   <dir>/<name>.bin   linkage, (L-1) x 4 little-endian float64, row-major
//   <dir>/<name>.nwk   Newick text
//   <dir>/<name>.json  sidecar: num_leaves, binary, expected leaf order
//                      (depth-first in children() order), CutToK and
//                      CutAtHeight results
//   <dir>/cases.json   the list of names
// Internal nodes get strictly increasing heights, so SciPy's maxclust
// criterion reaches exactly the same partitions as CutToK.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/hierarchy/export.h"
#include "core/hierarchy/hierarchy.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

Hierarchy RandomBinary(int32_t num_leaves, std::mt19937& rng) {
  std::vector<int32_t> active(num_leaves);
  std::iota(active.begin(), active.end(), 0);
  std::vector<Merge> merges;
  std::uniform_real_distribution<double> step(0.01, 1.0);
  double h = 0;
  for (int32_t t = 0; t + 1 < num_leaves; ++t) {
    size_t i = rng() % active.size();
    size_t j = rng() % active.size();
    while (j == i) j = rng() % active.size();
    h += step(rng);
    merges.push_back({active[i], active[j], h});  // operand order as drawn
    for (size_t k : {std::max(i, j), std::min(i, j)}) {
      active[k] = active.back();
      active.pop_back();
    }
    active.push_back(num_leaves + t);
  }
  auto tree = Hierarchy::FromMerges(num_leaves, merges);
  if (!tree.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tree.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(tree);
}

// Contracts random internal edges, then scrambles internal ids.
Hierarchy RandomNary(int32_t num_leaves, std::mt19937& rng) {
  Hierarchy bin = RandomBinary(num_leaves, rng);
  const int32_t n = bin.num_nodes();
  std::vector<int32_t> up(n);
  for (int32_t v = n - 1; v >= 0; --v) {
    const int32_t p = bin.parent(v);
    up[v] = (v >= num_leaves && p >= 0 && rng() % 2) ? up[p] : v;
  }
  std::vector<int32_t> keep;
  for (int32_t v = num_leaves; v < n; ++v) {
    if (up[v] == v) keep.push_back(v);
  }
  std::shuffle(keep.begin(), keep.end(), rng);
  std::vector<int32_t> id(n, -1);
  for (int32_t v = 0; v < num_leaves; ++v) id[v] = v;
  for (size_t i = 0; i < keep.size(); ++i) id[keep[i]] = num_leaves + static_cast<int32_t>(i);
  const int32_t m = num_leaves + static_cast<int32_t>(keep.size());
  std::vector<int32_t> parent(m);
  std::vector<double> height(m);
  for (int32_t v = 0; v < n; ++v) {
    if (id[v] < 0) continue;
    parent[id[v]] = bin.parent(v) < 0 ? -1 : id[up[bin.parent(v)]];
    height[id[v]] = bin.height(v);
  }
  auto tree = Hierarchy::FromParents(num_leaves, parent, height);
  if (!tree.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tree.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(tree);
}

std::vector<int32_t> LeafOrder(const Hierarchy& h) {
  std::vector<int32_t> order;
  std::vector<int32_t> stack = {h.root()};
  while (!stack.empty()) {
    const int32_t v = stack.back();
    stack.pop_back();
    if (h.is_leaf(v)) order.push_back(v);
    auto kids = h.children(v);
    for (size_t i = kids.size(); i-- > 0;) stack.push_back(kids[i]);
  }
  return order;
}

bool WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

std::string LittleEndianDoubles(const std::vector<double>& values) {
  std::string bytes;
  bytes.reserve(values.size() * 8);
  for (double x : values) {
    uint64_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    for (int b = 0; b < 8; ++b) bytes.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));
  }
  return bytes;
}

bool WriteCase(const std::string& dir, const std::string& name, const Hierarchy& h) {
  nlohmann::json side;
  side["name"] = name;
  side["num_leaves"] = h.num_leaves();
  side["binary"] = h.is_binary();
  side["linkage"] = name + ".bin";
  side["newick"] = name + ".nwk";
  side["leaf_order"] = LeafOrder(h);
  // CutToK at a spread of reachable levels.
  const std::vector<int32_t> levels = h.ReachableLevels();
  std::set<int32_t> ks;
  for (size_t i = 0; i < levels.size(); i += std::max<size_t>(1, levels.size() / 12)) {
    ks.insert(levels[i]);
  }
  ks.insert(levels.back());
  if (levels.size() > 1) ks.insert(levels[1]);
  nlohmann::json cuts = nlohmann::json::array();
  for (int32_t k : ks) {
    auto labels = h.CutToK(k);
    if (!labels.ok()) return false;
    cuts.push_back({{"k", k}, {"labels", *labels}});
  }
  side["cuts"] = std::move(cuts);
  // CutAtHeight at, just below and between a few internal heights.
  nlohmann::json height_cuts = nlohmann::json::array();
  for (int32_t v = h.num_leaves(); v < h.num_nodes();
       v += std::max(1, h.num_internal() / 8)) {
    for (double t : {h.height(v), h.height(v) * (1 - 1e-9)}) {
      height_cuts.push_back({{"h", t}, {"labels", h.CutAtHeight(t)}});
    }
  }
  side["height_cuts"] = std::move(height_cuts);
  return WriteFile(dir + "/" + name + ".bin", LittleEndianDoubles(ToLinkage(h))) &&
         WriteFile(dir + "/" + name + ".nwk", ToNewick(h)) &&
         WriteFile(dir + "/" + name + ".json", side.dump());
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::mt19937 rng(20240617);
  std::vector<std::string> names;
  for (int32_t L : {2, 3, 5, 37, 200, 1500}) {
    const std::string name = "binary_" + std::to_string(L);
    if (!WriteCase(dir, name, RandomBinary(L, rng))) return 1;
    names.push_back(name);
  }
  for (int32_t L : {4, 9, 60, 400}) {
    const std::string name = "nary_" + std::to_string(L);
    if (!WriteCase(dir, name, RandomNary(L, rng))) return 1;
    names.push_back(name);
  }
  if (!WriteFile(dir + "/cases.json", nlohmann::json(names).dump())) return 1;
  std::printf("wrote %zu hierarchies to %s\n", names.size(), dir.c_str());
  return 0;
}

}  // namespace
}  // namespace dendro

int main(int argc, char** argv) { return dendro::Main(argc, argv); }
