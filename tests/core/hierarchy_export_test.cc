// Round trips through the linkage, Newick and JSON exports.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/hierarchy/export.h"
#include "core/hierarchy/hierarchy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

using ::testing::HasSubstr;

// Random binary tree. With `unsorted`, heights only grow along paths (not
// globally) and operands come in random order.
Hierarchy RandomBinary(int32_t num_leaves, std::mt19937& rng, bool unsorted = false) {
  std::vector<int32_t> active(num_leaves);
  std::iota(active.begin(), active.end(), 0);
  std::vector<double> height(2 * num_leaves, 0.0);
  std::vector<Merge> merges;
  std::uniform_real_distribution<double> step(0.001, 2.0);
  double h = 0.0;
  for (int32_t t = 0; t + 1 < num_leaves; ++t) {
    std::uniform_int_distribution<size_t> pick(0, active.size() - 1);
    size_t i = pick(rng);
    size_t j = pick(rng);
    while (j == i) j = pick(rng);
    Merge m{active[i], active[j], 0.0};
    if (unsorted) {
      m.height = std::max(height[m.a], height[m.b]) + step(rng);
    } else {
      h += step(rng);
      m.height = h;
      if (m.a > m.b) std::swap(m.a, m.b);
    }
    height[num_leaves + t] = m.height;
    merges.push_back(m);
    active[std::min(i, j)] = num_leaves + t;
    active.erase(active.begin() + std::max(i, j));
  }
  auto tree = Hierarchy::FromMerges(num_leaves, merges);
  EXPECT_TRUE(tree.ok()) << tree.status();
  return *std::move(tree);
}

// Random n-ary tree: a binary tree with random internal edges contracted
// (children keep heights <= parents), ids scrambled by FromParents.
Hierarchy RandomNary(int32_t num_leaves, std::mt19937& rng) {
  Hierarchy bin = RandomBinary(num_leaves, rng);
  const int32_t n = bin.num_nodes();
  std::vector<int32_t> up(n);
  for (int32_t v = n - 1; v >= 0; --v) {
    const int32_t p = bin.parent(v);
    up[v] = (v >= num_leaves && p >= 0 && rng() % 2) ? up[p] : v;
  }
  std::vector<int32_t> id(n, -1);
  int32_t next = 0;
  for (int32_t v = 0; v < n; ++v) {
    if (up[v] == v) id[v] = next++;
  }
  std::vector<int32_t> parent(next);
  std::vector<double> height(next);
  for (int32_t v = 0; v < n; ++v) {
    if (id[v] < 0) continue;
    parent[id[v]] = bin.parent(v) < 0 ? -1 : id[up[bin.parent(v)]];
    height[id[v]] = bin.height(v);
  }
  auto tree = Hierarchy::FromParents(num_leaves, parent, height);
  EXPECT_TRUE(tree.ok()) << tree.status();
  return *std::move(tree);
}

void ExpectSameTree(const Hierarchy& a, const Hierarchy& b) {
  ASSERT_EQ(a.num_leaves(), b.num_leaves());
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  for (int32_t v = 0; v < a.num_nodes(); ++v) {
    EXPECT_EQ(a.parent(v), b.parent(v)) << v;
    EXPECT_EQ(a.height(v), b.height(v)) << v;  // bit-exact
    EXPECT_EQ(std::vector<int32_t>(a.children(v).begin(), a.children(v).end()),
              std::vector<int32_t>(b.children(v).begin(), b.children(v).end()))
        << v;
  }
  EXPECT_EQ(a.point_leaf(), b.point_leaf());
  EXPECT_EQ(a.metadata(), b.metadata());
}

TEST(LinkageTest, RoundTripsBinaryTrees) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t L = 1 + static_cast<int32_t>(rng() % 50);
    const bool unsorted = trial % 2 == 1;
    Hierarchy h = RandomBinary(L, rng, unsorted);
    std::vector<double> rows = ToLinkage(h);
    ASSERT_EQ(rows.size(), 4u * (L - 1));
    // Rows come in non-decreasing height, as SciPy expects.
    for (int32_t t = 1; t + 1 < L; ++t) EXPECT_LE(rows[4 * (t - 1) + 2], rows[4 * t + 2]);
    auto back = FromLinkage(L, rows);
    ASSERT_TRUE(back.ok()) << back.status();
    for (int32_t t = 0; t + 1 < L; ++t) {
      EXPECT_EQ(rows[4 * t + 3], back->leaf_count(L + t));
    }
    if (!unsorted) {
      // Merges already in height order: the same tree, node for node.
      for (int32_t t = 0; t + 1 < L; ++t) EXPECT_EQ(rows[4 * t + 3], h.leaf_count(L + t));
      Hierarchy expect = h;
      expect.mutable_metadata().clear();
      ExpectSameTree(*back, expect);
    } else {
      // Otherwise the same tree renumbered: every cut and the root agree.
      for (int32_t k = 1; k <= L; ++k) EXPECT_EQ(*back->CutToK(k), *h.CutToK(k)) << k;
      EXPECT_EQ(back->height(back->root()), h.height(h.root()));
    }
  }
}

TEST(LinkageTest, NaryTreesBinariseWithSameCuts) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t L = 2 + static_cast<int32_t>(rng() % 40);
    Hierarchy h = RandomNary(L, rng);
    auto back = FromLinkage(L, ToLinkage(h));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(back->is_binary());
    for (int32_t k : h.ReachableLevels()) EXPECT_EQ(*back->CutToK(k), *h.CutToK(k)) << k;
    EXPECT_EQ(back->height(back->root()), h.height(h.root()));
  }
}

TEST(LinkageTest, RejectsBadRows) {
  auto expect_error = [](int32_t L, std::vector<double> rows, const char* needle) {
    auto h = FromLinkage(L, rows);
    ASSERT_FALSE(h.ok()) << needle;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(h.status().message()), HasSubstr(needle));
  };
  expect_error(3, {0, 1, 1, 2}, "has 2 rows of 4 values (8 values), got 4 values");
  expect_error(3, {0, 1, 1, 2, 3, 2.5, 2, 3}, "row 1: the second node id is 2.5");
  expect_error(3, {0, 1, 1, 2, 3, 2, 2, 2}, "row 1: leaf count is 2, but the merged node has 3");
  expect_error(3, {0, 1, 1, 2, 0, 2, 2, 3}, "node 0 is merged twice");
  expect_error(3, {0, 1, 1, 2, 3, 2, 0.5, 3}, "below the height");
  expect_error(0, {}, "num_leaves must be >= 1");
}

TEST(NewickTest, HandMadeTrees) {
  // ((0,1)@1, (2,(3,4)@0.5)@2)@3
  auto h = Hierarchy::FromMerges(
      5, std::vector<Merge>{{3, 4, 0.5}, {0, 1, 1.0}, {2, 5, 2.0}, {6, 7, 3.0}});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(ToNewick(*h), "((0:1,1:1):2,(2:2,(3:0.5,4:0.5):1.5):1);");
  auto star = Hierarchy::FromParents(3, std::vector<int32_t>{3, 3, 3, -1},
                                     std::vector<double>{0, 0, 0, 0.25});
  ASSERT_TRUE(star.ok());
  EXPECT_EQ(ToNewick(*star), "(0:0.25,1:0.25,2:0.25);");
  auto single = Hierarchy::FromMerges(1, {});
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(ToNewick(*single), "0;");
}

// Minimal Newick reader: returns each internal node's leaf set with its
// height, reconstructed from branch lengths (leaves at height 0).
class NewickReader {
 public:
  explicit NewickReader(const std::string& s) : s_(s) {}

  bool Parse(std::map<std::set<int32_t>, double>* clusters) {
    clusters_ = clusters;
    Node root;
    if (!ParseNode(&root)) return false;
    if (pos_ >= s_.size() || s_[pos_] != ';' || pos_ + 1 != s_.size()) return false;
    return true;
  }

 private:
  struct Node {
    std::set<int32_t> leaves;
    double height = 0;  // height of this node
  };

  bool ParseNode(Node* node) {
    if (pos_ < s_.size() && s_[pos_] == '(') {
      ++pos_;
      std::vector<std::pair<Node, double>> kids;
      while (true) {
        Node child;
        if (!ParseNode(&child)) return false;
        double len = 0;
        if (!ParseLength(&len)) return false;
        kids.emplace_back(std::move(child), len);
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ')') {
          ++pos_;
          break;
        }
        return false;
      }
      if (kids.size() < 2) return false;
      node->height = kids[0].first.height + kids[0].second;
      for (auto& [child, len] : kids) {
        // Every child must imply the same parent height.
        if (std::abs(child.height + len - node->height) > 1e-9 * (1 + node->height)) return false;
        node->leaves.insert(child.leaves.begin(), child.leaves.end());
      }
      (*clusters_)[node->leaves] = node->height;
      return true;
    }
    size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (pos_ == start) return false;
    node->leaves.insert(std::stoi(s_.substr(start, pos_ - start)));
    node->height = 0;
    return true;
  }

  bool ParseLength(double* len) {
    if (pos_ >= s_.size() || s_[pos_] != ':') return false;
    ++pos_;
    const char* begin = s_.c_str() + pos_;
    char* end = nullptr;
    *len = std::strtod(begin, &end);
    if (end == begin) return false;
    pos_ += end - begin;
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::map<std::set<int32_t>, double>* clusters_ = nullptr;
};

TEST(NewickTest, ParsesBackToSameClusters) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t L = 2 + static_cast<int32_t>(rng() % 40);
    Hierarchy h = trial % 2 ? RandomNary(L, rng) : RandomBinary(L, rng, trial % 4 == 2);
    const std::string text = ToNewick(h);
    std::map<std::set<int32_t>, double> parsed;
    ASSERT_TRUE(NewickReader(text).Parse(&parsed)) << text;
    // Expected clusters from the tree itself.
    std::vector<std::set<int32_t>> sets(h.num_nodes());
    std::map<std::set<int32_t>, double> expect;
    for (int32_t v = 0; v < h.num_nodes(); ++v) {
      if (h.is_leaf(v)) sets[v].insert(v);
      for (int32_t c : h.children(v)) sets[v].insert(sets[c].begin(), sets[c].end());
      if (!h.is_leaf(v)) expect[sets[v]] = h.height(v);
    }
    ASSERT_EQ(parsed.size(), expect.size()) << text;
    for (const auto& [leaves, height] : expect) {
      auto it = parsed.find(leaves);
      ASSERT_NE(it, parsed.end()) << text;
      EXPECT_NEAR(it->second, height, 1e-9 * (1 + height));
    }
  }
}

TEST(NewickTest, DeepTreeDoesNotRecurse) {
  const int32_t L = 200000;
  std::vector<Merge> merges = {{0, 1, 1.0}};
  for (int32_t t = 1; t + 1 < L; ++t) merges.push_back({L + t - 1, t + 1, 1.0 + t});
  auto h = Hierarchy::FromMerges(L, merges);
  ASSERT_TRUE(h.ok());
  const std::string text = ToNewick(*h);
  EXPECT_EQ(text.substr(0, 4), "((((");
  // The last leaf hangs off the root (height L - 1) directly.
  EXPECT_EQ(text.substr(text.size() - 16), ",199999:199999);");
  EXPECT_EQ(std::count(text.begin(), text.end(), '('), L - 1);
}

// The clusters (leaf sets) of every internal node with its height.
std::map<std::set<int32_t>, double> Clusters(const Hierarchy& h) {
  std::vector<std::set<int32_t>> sets(h.num_nodes());
  std::map<std::set<int32_t>, double> out;
  for (int32_t v = 0; v < h.num_nodes(); ++v) {
    if (h.is_leaf(v)) sets[v].insert(v);
    for (int32_t c : h.children(v)) sets[v].insert(sets[c].begin(), sets[c].end());
    if (!h.is_leaf(v)) out[sets[v]] = h.height(v);
  }
  return out;
}

TEST(ParseNewickTest, ReadsBackWhatToNewickWrites) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t L = 2 + static_cast<int32_t>(rng() % 40);
    Hierarchy h = trial % 2 ? RandomNary(L, rng) : RandomBinary(L, rng, trial % 4 == 2);
    const std::string text = ToNewick(h);
    absl::StatusOr<Hierarchy> back = ParseNewick(text);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
    ASSERT_EQ(back->num_leaves(), h.num_leaves());
    EXPECT_TRUE(back->leaf_names().empty());  // ids 0..L-1 stay ids
    const auto want = Clusters(h);
    const auto got = Clusters(*back);
    ASSERT_EQ(got.size(), want.size()) << text;
    for (const auto& [leaves, height] : want) {
      auto it = got.find(leaves);
      ASSERT_NE(it, got.end()) << text;
      EXPECT_NEAR(it->second, height, 1e-9 * (1 + height));
    }
  }
}

TEST(ParseNewickTest, NamesLengthsCommentsAndOtherToolsTrees) {
  // Names in order of appearance; quoted names with blanks and quotes; an
  // internal label and a comment ignored; lengths that are not ultrametric.
  absl::StatusOr<Hierarchy> h =
      ParseNewick(" ( ( 'it''s a':1 , b_c:1.5 )inner:2 [note], 'd;e':0.5 ) root ; ");
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->num_leaves(), 3);
  EXPECT_THAT(h->leaf_names(), ::testing::ElementsAre("it's a", "b c", "d;e"));
  const auto clusters = Clusters(*h);
  ASSERT_EQ(clusters.size(), 2u);
  EXPECT_DOUBLE_EQ(clusters.at({0, 1}), 1.5);       // the longer way down
  EXPECT_DOUBLE_EQ(clusters.at({0, 1, 2}), 3.5);    // 2 + 1.5
  // No lengths: every branch counts 1.
  h = ParseNewick("((a,b),(c,(d,e)));");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_DOUBLE_EQ(Clusters(*h).at({0, 1, 2, 3, 4}), 3.0);
  // Names ToNewick writes out of order keep their ids.
  h = ParseNewick("((2:1,0:1):1,1:2);");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(Clusters(*h).count({0, 2}), 1u);
}

TEST(ParseNewickTest, RefusesWhatIsNotATreeNamingWhere) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"", "before ';'"},
           {"(a,b)", "before ';'"},
           {"(a,b));", "unmatched ')'"},
           {"((a,b);", "every '(' was closed"},
           {"(a,,b);", "empty leaf before ','"},
           {"(a,b):x;", "branch length"},
           {"(a:-1,b);", "branch length"},
           {"(a,'b);", "unclosed quote"},
           {"(a,b) [x;", "unclosed comment"},
           {"((a),b);", "1 child"},
           {"(a,b); c", "text after ';'"},
           {"(a b,c);", "second label"},
       }) {
    absl::StatusOr<Hierarchy> h = ParseNewick(c.text);
    EXPECT_TRUE(absl::IsInvalidArgument(h.status())) << c.text;
    EXPECT_THAT(std::string(h.status().message()), HasSubstr(c.says)) << c.text;
  }
  EXPECT_THAT(std::string(ParseNewick("(a,b):x;").status().message()),
              HasSubstr("at character 7"));
}

TEST(ParseNewickTest, DeepTreeDoesNotRecurse) {
  const int32_t L = 200000;
  std::vector<Merge> merges = {{0, 1, 1.0}};
  for (int32_t t = 1; t + 1 < L; ++t) merges.push_back({L + t - 1, t + 1, 1.0 + t});
  auto h = Hierarchy::FromMerges(L, merges);
  ASSERT_TRUE(h.ok());
  absl::StatusOr<Hierarchy> back = ParseNewick(ToNewick(*h));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->num_nodes(), h->num_nodes());
  // Internal nodes are numbered by height in both: the same parents.
  int32_t differ = 0;
  for (int32_t v = 0; v < h->num_nodes(); ++v) {
    differ += back->parent(v) != h->parent(v) || back->height(v) != h->height(v);
  }
  EXPECT_EQ(differ, 0);
}

TEST(JsonTest, RoundTripsTreesMetadataAndPoints) {
  std::mt19937 rng(33);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t L = 1 + static_cast<int32_t>(rng() % 40);
    Hierarchy h = (trial % 3 == 0 && L > 1) ? RandomNary(L, rng)
                                            : RandomBinary(L, rng, trial % 3 == 1);
    h.mutable_metadata()["method"] = "l2h";
    h.mutable_metadata()["note"] = "quote \" backslash \\ newline \n unicode \xc3\xa9";
    std::vector<int32_t> points(rng() % 100);
    for (int32_t& p : points) p = static_cast<int32_t>(rng() % L);
    ASSERT_TRUE(h.SetPointLeaf(points).ok());
    const std::string json = ToJson(h);
    auto back = ParseJson(json);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameTree(*back, h);

    // The document has the documented shape; "merges" are the linkage rows.
    nlohmann::json doc = nlohmann::json::parse(json);
    EXPECT_EQ(doc["format"], "dendro.hierarchy");
    EXPECT_EQ(doc["version"], 1);
    EXPECT_EQ(doc["num_leaves"], L);
    EXPECT_EQ(doc["nodes"].size(), static_cast<size_t>(h.num_nodes()));
    std::vector<double> rows = ToLinkage(h);
    ASSERT_EQ(doc["merges"].size() * 4, rows.size());
    for (size_t t = 0; t < doc["merges"].size(); ++t) {
      for (int c = 0; c < 4; ++c) EXPECT_EQ(doc["merges"][t][c].get<double>(), rows[4 * t + c]);
    }

    // Without points.
    auto no_points = ParseJson(ToJson(h, /*include_points=*/false));
    ASSERT_TRUE(no_points.ok()) << no_points.status();
    EXPECT_TRUE(no_points->point_leaf().empty());
    EXPECT_EQ(no_points->metadata(), h.metadata());
  }
}

// WriteJson: the text is what nlohmann's compact dump of the same document
// gives (the format readers already parse), cut into pieces of exactly the
// chunk size but the last, whatever the chunk size.
TEST(JsonTest, WriteJsonChunksTheCompactDocument) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 12; ++trial) {
    const int32_t L = 2 + static_cast<int32_t>(rng() % 30);
    Hierarchy h = RandomBinary(L, rng);
    h.mutable_metadata()["method"] = "ghhc";
    std::vector<int32_t> points(trial == 0 ? 0 : rng() % 5000);
    for (int32_t& p : points) p = static_cast<int32_t>(rng() % L);
    ASSERT_TRUE(h.SetPointLeaf(points).ok());
    for (const bool with_points : {true, false}) {
      std::string reference;
      for (const size_t chunk :
           {size_t{1}, size_t{64}, size_t{100}, size_t{4093}, size_t{1} << 22}) {
        std::string text;
        std::vector<size_t> sizes;
        ASSERT_TRUE(WriteJson(h, with_points, chunk, [&](std::string_view piece) {
                      sizes.push_back(piece.size());
                      text.append(piece);
                      return absl::OkStatus();
                    }).ok());
        const size_t expect = std::max<size_t>(chunk, 64);
        ASSERT_FALSE(sizes.empty());
        for (size_t i = 0; i + 1 < sizes.size(); ++i) ASSERT_EQ(sizes[i], expect) << chunk;
        EXPECT_GE(sizes.back(), 1u);
        EXPECT_LE(sizes.back(), expect);
        if (reference.empty()) {
          reference = text;
          const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text);
          EXPECT_EQ(doc.dump(), text);
          EXPECT_EQ(doc.contains("point_leaf"), with_points && !points.empty());
          if (doc.contains("point_leaf")) {
            EXPECT_EQ(doc["point_leaf"].get<std::vector<int32_t>>(), points);
          }
        }
        EXPECT_EQ(text, reference) << "chunk " << chunk;
      }
      EXPECT_EQ(reference, ToJson(h, with_points));
    }
  }
}

TEST(JsonTest, WriteJsonStopsAtTheSinksError) {
  std::mt19937 rng(5);
  Hierarchy h = RandomBinary(10, rng);
  ASSERT_TRUE(h.SetPointLeaf(std::vector<int32_t>(100000, 3)).ok());
  int calls = 0;
  const absl::Status s = WriteJson(h, true, 1000, [&](std::string_view) {
    return ++calls == 3 ? absl::CancelledError("reader went away") : absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 3);
}

TEST(JsonTest, RejectsBadDocuments) {
  auto h = Hierarchy::FromMerges(3, std::vector<Merge>{{0, 1, 1.0}, {3, 2, 2.0}});
  ASSERT_TRUE(h.ok());
  const nlohmann::json good = nlohmann::json::parse(ToJson(*h));
  auto expect_error = [](const std::string& text, const char* needle) {
    auto r = ParseJson(text);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(needle)) << text;
  };
  expect_error("{\"format\": ", "does not parse");
  expect_error("[1, 2]", "must be an object");
  {
    nlohmann::json d = good;
    d["format"] = "other";
    expect_error(d.dump(), "\"format\" must be \"dendro.hierarchy\"");
  }
  {
    nlohmann::json d = good;
    d["version"] = 2;
    expect_error(d.dump(), "unsupported \"version\" 2");
  }
  {
    nlohmann::json d = good;
    d["nodes"][0]["parent"] = 4;  // node 4's children list still says 3 has leaf 0
    expect_error(d.dump(), "node 3 lists child 0, whose parent is 4");
  }
  {
    nlohmann::json d = good;
    d["nodes"][4]["height"] = 0.5;  // root below its child 3 (height 1)
    expect_error(d.dump(), "below the height 1 of its child 3");
  }
  {
    nlohmann::json d = good;
    d["nodes"][1]["id"] = 0;
    expect_error(d.dump(), "nodes[1] has id 0");
  }
  {
    nlohmann::json d = good;
    d["nodes"][2]["height"] = "high";
    expect_error(d.dump(), "nodes[2].height must be a number");
  }
  {
    nlohmann::json d = good;
    d["point_leaf"] = {0, 3};
    expect_error(d.dump(), "point 1 is assigned to leaf 3");
  }
  {
    nlohmann::json d = good;
    d["metadata"] = {{"k", 5}};
    expect_error(d.dump(), "metadata \"k\" must be a string");
  }
  {
    nlohmann::json d = good;
    d.erase("nodes");
    expect_error(d.dump(), "\"nodes\" must be an array");
  }
}

TEST(JsonTest, ScrambledNaryIdsAreRenumbered) {
  // A hand-written document whose internal ids are not in (height, id)
  // order is accepted and renumbered like FromParents does it.
  const std::string text = R"({"format":"dendro.hierarchy","version":1,"num_leaves":3,
    "nodes":[{"id":0,"parent":4,"height":0,"children":[]},
             {"id":1,"parent":4,"height":0,"children":[]},
             {"id":2,"parent":3,"height":0,"children":[]},
             {"id":3,"parent":-1,"height":2,"children":[2,4]},
             {"id":4,"parent":3,"height":1,"children":[0,1]}]})";
  auto h = ParseJson(text);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->root(), 4);
  EXPECT_EQ(h->height(3), 1.0);
  EXPECT_EQ(std::vector<int32_t>(h->children(4).begin(), h->children(4).end()),
            (std::vector<int32_t>{2, 3}));
}

TEST(LeafNamesTest, NewickQuotesWhatNeedsQuotingAndJsonRoundTrips) {
  // ((0, 1), 2) with names.
  const Merge merges[] = {{0, 1, 1.0}, {3, 2, 2.0}};
  auto h = Hierarchy::FromMerges(3, merges);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(ToNewick(*h), "((0:1,1:1):1,2:2);");
  ASSERT_TRUE(h->SetLeafNames({"tabby-cat", "great white_shark", "O'Brien"}).ok());
  EXPECT_EQ(ToNewick(*h), "((tabby-cat:1,'great white_shark':1):1,'O''Brien':2);");
  auto back = ParseJson(ToJson(*h));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->leaf_names(), h->leaf_names());
  EXPECT_EQ(ToNewick(*back), ToNewick(*h));
  // Dropping them restores the ids.
  ASSERT_TRUE(h->SetLeafNames({}).ok());
  EXPECT_EQ(ToNewick(*h), "((0:1,1:1):1,2:2);");
  EXPECT_EQ(ToJson(*h).find("leaf_names"), std::string::npos);
}

TEST(LeafNamesTest, BadNamesAreRefused) {
  const Merge merges[] = {{0, 1, 1.0}};
  auto h = Hierarchy::FromMerges(2, merges);
  ASSERT_TRUE(h.ok());
  EXPECT_THAT(std::string(h->SetLeafNames({"one"}).message()), HasSubstr("1 leaf names"));
  EXPECT_THAT(std::string(h->SetLeafNames({"a", ""}).message()), HasSubstr("leaf name 1"));
  EXPECT_THAT(std::string(h->SetLeafNames({"a", "b\tc"}).message()),
              HasSubstr("control character"));
  EXPECT_THAT(std::string(h->SetLeafNames({std::string(257, 'x'), "b"}).message()),
              HasSubstr("1-256 bytes"));
  EXPECT_TRUE(h->leaf_names().empty());  // nothing was set
  const std::string doc =
      R"({"format":"dendro.hierarchy","version":1,"num_leaves":2,"leaf_names":["a"],
          "nodes":[{"id":0,"parent":2,"height":0,"children":[]},
                   {"id":1,"parent":2,"height":0,"children":[]},
                   {"id":2,"parent":-1,"height":1,"children":[0,1]}]})";
  EXPECT_THAT(std::string(ParseJson(doc).status().message()), HasSubstr("1 leaf names"));
}

}  // namespace
}  // namespace dendro
