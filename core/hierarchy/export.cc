#include "core/hierarchy/export.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "nlohmann/json.hpp"

namespace dendro {

namespace {

using OrderedJson = nlohmann::ordered_json;

// Never throws: invalid UTF-8 in a string (e.g. a metadata value) is
// replaced rather than raising type_error 316.
template <typename Json>
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Shortest text that reads back as the same double.
void AppendDouble(std::string* out, double x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x);
  out->append(buf, res.ptr);
}

// Reads an integer-valued linkage entry.
absl::StatusOr<int64_t> LinkageInt(double x, size_t row, const char* what) {
  if (!std::isfinite(x) || x != std::floor(x) || std::fabs(x) > 2147483647.0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "linkage row %d: %s is %.17g, which is not a valid integer", row, what, x));
  }
  return static_cast<int64_t>(x);
}

absl::StatusOr<int64_t> JsonInt(const OrderedJson& j, const std::string& what) {
  if (!j.is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hierarchy JSON: ", what, " must be an integer, got ", Dump(j)));
  }
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT32_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat("hierarchy JSON: ", what, " is out of range: ", Dump(j)));
    }
    return static_cast<int64_t>(u);
  }
  const int64_t v = j.get<int64_t>();
  if (v < INT32_MIN || v > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("hierarchy JSON: ", what, " is out of range: ", Dump(j)));
  }
  return v;
}

const OrderedJson* Field(const OrderedJson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

absl::StatusOr<Hierarchy> ParseJsonImpl(const OrderedJson& doc) {
  if (!doc.is_object()) return absl::InvalidArgumentError("hierarchy JSON must be an object");
  const OrderedJson* format = Field(doc, "format");
  if (format == nullptr || !format->is_string() ||
      format->get<std::string>() != "dendro.hierarchy") {
    return absl::InvalidArgumentError(
        "hierarchy JSON: \"format\" must be \"dendro.hierarchy\"");
  }
  const OrderedJson* version = Field(doc, "version");
  if (version == nullptr || !version->is_number_integer() || version->get<int64_t>() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hierarchy JSON: unsupported \"version\" ",
        version == nullptr ? std::string("(missing)") : Dump(*version), " (expected 1)"));
  }
  const OrderedJson* nl = Field(doc, "num_leaves");
  if (nl == nullptr) return absl::InvalidArgumentError("hierarchy JSON: \"num_leaves\" missing");
  absl::StatusOr<int64_t> num_leaves = JsonInt(*nl, "num_leaves");
  if (!num_leaves.ok()) return num_leaves.status();
  if (*num_leaves < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hierarchy JSON: num_leaves must be >= 1, got ", *num_leaves));
  }
  const OrderedJson* nodes = Field(doc, "nodes");
  if (nodes == nullptr || !nodes->is_array()) {
    return absl::InvalidArgumentError("hierarchy JSON: \"nodes\" must be an array");
  }
  const int64_t n = static_cast<int64_t>(nodes->size());
  if (n < *num_leaves || n > 2 * *num_leaves - 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hierarchy JSON: %d nodes for %d leaves (expected between %d and %d)", n, *num_leaves,
        *num_leaves, 2 * *num_leaves - 1));
  }
  std::vector<int32_t> parent(n, -2);
  std::vector<double> height(n, 0.0);
  std::vector<std::vector<int32_t>> kids(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    const OrderedJson& node = (*nodes)[i];
    const std::string where = absl::StrCat("nodes[", i, "]");
    if (!node.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hierarchy JSON: ", where, " must be an object"));
    }
    const OrderedJson* id_j = Field(node, "id");
    const OrderedJson* parent_j = Field(node, "parent");
    const OrderedJson* height_j = Field(node, "height");
    const OrderedJson* children_j = Field(node, "children");
    if (id_j == nullptr || parent_j == nullptr || height_j == nullptr || children_j == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hierarchy JSON: ", where, " needs \"id\", \"parent\", \"height\" and \"children\""));
    }
    absl::StatusOr<int64_t> id = JsonInt(*id_j, where + ".id");
    if (!id.ok()) return id.status();
    if (*id < 0 || *id >= n || seen[*id]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "hierarchy JSON: %s has id %d; ids must be 0..%d, each exactly once", where, *id,
          n - 1));
    }
    seen[*id] = true;
    absl::StatusOr<int64_t> p = JsonInt(*parent_j, where + ".parent");
    if (!p.ok()) return p.status();
    parent[*id] = static_cast<int32_t>(*p);
    if (!height_j->is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hierarchy JSON: ", where, ".height must be a number"));
    }
    height[*id] = height_j->get<double>();
    if (!children_j->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hierarchy JSON: ", where, ".children must be an array"));
    }
    for (const OrderedJson& c : *children_j) {
      absl::StatusOr<int64_t> cid = JsonInt(c, where + ".children[]");
      if (!cid.ok()) return cid.status();
      kids[*id].push_back(static_cast<int32_t>(*cid));
    }
  }
  // The children lists must agree with the parent links.
  int64_t total_children = 0;
  for (int64_t v = 0; v < n; ++v) {
    for (int32_t c : kids[v]) {
      if (c < 0 || c >= n || parent[c] != v) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "hierarchy JSON: node %d lists child %d, whose parent is %d", v, c,
            (c < 0 || c >= n) ? -2 : parent[c]));
      }
    }
    total_children += static_cast<int64_t>(kids[v].size());
  }
  if (total_children != n - 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hierarchy JSON: the children lists hold %d entries, but %d nodes have a parent",
        total_children, n - 1));
  }
  const int32_t L = static_cast<int32_t>(*num_leaves);
  // A binary tree numbered like ToJson writes it goes through FromMerges,
  // which keeps each node's child order; anything else is renumbered.
  bool as_merges = n == 2 * static_cast<int64_t>(L) - 1;
  for (int64_t v = L; as_merges && v < n; ++v) {
    as_merges = kids[v].size() == 2 && kids[v][0] < v && kids[v][1] < v;
  }
  absl::StatusOr<Hierarchy> h = absl::InternalError("unset");
  if (as_merges) {
    std::vector<Merge> merges;
    merges.reserve(n - L);
    for (int64_t v = L; v < n; ++v) merges.push_back(Merge{kids[v][0], kids[v][1], height[v]});
    h = Hierarchy::FromMerges(L, merges);
  } else {
    h = Hierarchy::FromParents(L, parent, height);
  }
  if (!h.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("hierarchy JSON: ", h.status().message()));
  }
  if (const OrderedJson* meta = Field(doc, "metadata"); meta != nullptr) {
    if (!meta->is_object()) {
      return absl::InvalidArgumentError("hierarchy JSON: \"metadata\" must be an object");
    }
    for (auto it = meta->begin(); it != meta->end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("hierarchy JSON: metadata \"", it.key(), "\" must be a string"));
      }
      h->mutable_metadata()[it.key()] = it.value().get<std::string>();
    }
  }
  if (const OrderedJson* names = Field(doc, "leaf_names"); names != nullptr) {
    if (!names->is_array()) {
      return absl::InvalidArgumentError("hierarchy JSON: \"leaf_names\" must be an array");
    }
    std::vector<std::string> leaf_names;
    leaf_names.reserve(names->size());
    for (const OrderedJson& x : *names) {
      if (!x.is_string()) {
        return absl::InvalidArgumentError("hierarchy JSON: \"leaf_names\" must hold strings");
      }
      leaf_names.push_back(x.get<std::string>());
    }
    if (absl::Status s = h->SetLeafNames(std::move(leaf_names)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("hierarchy JSON: ", s.message()));
    }
  }
  if (const OrderedJson* pts = Field(doc, "point_leaf"); pts != nullptr) {
    if (!pts->is_array()) {
      return absl::InvalidArgumentError("hierarchy JSON: \"point_leaf\" must be an array");
    }
    std::vector<int32_t> point_leaf;
    point_leaf.reserve(pts->size());
    for (const OrderedJson& x : *pts) {
      absl::StatusOr<int64_t> leaf = JsonInt(x, "point_leaf[]");
      if (!leaf.ok()) return leaf.status();
      point_leaf.push_back(static_cast<int32_t>(*leaf));
    }
    if (absl::Status s = h->SetPointLeaf(std::move(point_leaf)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("hierarchy JSON: ", s.message()));
    }
  }
  return h;
}

}  // namespace

std::vector<double> ToLinkage(const Hierarchy& h) {
  const std::vector<Merge> merges = h.ToMerges();
  const int32_t L = h.num_leaves();
  // Rows in non-decreasing height, as SciPy's linkage() emits them and its
  // fcluster and dendrogram expect. A stable sort keeps a merge after the
  // merges of its children: they are earlier in ToMerges' order and never
  // higher.
  std::vector<int32_t> order(merges.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return merges[x].height < merges[y].height;
  });
  std::vector<int32_t> linkage_id(L + merges.size());
  std::iota(linkage_id.begin(), linkage_id.begin() + L, 0);
  for (size_t r = 0; r < order.size(); ++r) linkage_id[L + order[r]] = L + static_cast<int32_t>(r);
  std::vector<int64_t> count(L + merges.size(), 1);
  std::vector<double> rows;
  rows.reserve(4 * merges.size());
  for (size_t r = 0; r < order.size(); ++r) {
    const Merge& m = merges[order[r]];
    const int32_t a = linkage_id[m.a], b = linkage_id[m.b];
    count[L + r] = count[a] + count[b];
    rows.push_back(a);
    rows.push_back(b);
    rows.push_back(m.height);
    rows.push_back(static_cast<double>(count[L + r]));
  }
  return rows;
}

absl::StatusOr<Hierarchy> FromLinkage(int32_t num_leaves, const std::vector<double>& rows) {
  if (num_leaves < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_leaves must be >= 1, got %d", num_leaves));
  }
  const size_t num_rows = static_cast<size_t>(num_leaves) - 1;
  if (rows.size() != 4 * num_rows) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a linkage over %d leaves has %d rows of 4 values (%d values), got %d values",
        num_leaves, num_rows, 4 * num_rows, rows.size()));
  }
  std::vector<Merge> merges(num_rows);
  for (size_t t = 0; t < num_rows; ++t) {
    absl::StatusOr<int64_t> a = LinkageInt(rows[4 * t], t, "the first node id");
    if (!a.ok()) return a.status();
    absl::StatusOr<int64_t> b = LinkageInt(rows[4 * t + 1], t, "the second node id");
    if (!b.ok()) return b.status();
    merges[t] = Merge{static_cast<int32_t>(*a), static_cast<int32_t>(*b), rows[4 * t + 2]};
  }
  absl::StatusOr<Hierarchy> h = Hierarchy::FromMerges(num_leaves, merges);
  if (!h.ok()) return absl::InvalidArgumentError(absl::StrCat("linkage: ", h.status().message()));
  for (size_t t = 0; t < num_rows; ++t) {
    absl::StatusOr<int64_t> c = LinkageInt(rows[4 * t + 3], t, "the leaf count");
    if (!c.ok()) return c.status();
    const int32_t expect = h->leaf_count(num_leaves + static_cast<int32_t>(t));
    if (*c != expect) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "linkage row %d: leaf count is %d, but the merged node has %d leaves", t, *c, expect));
    }
  }
  return h;
}

namespace {
// A Newick label: bare when it is only letters, digits, '.', '-' (an
// unquoted '_' reads as a blank), else single-quoted with quotes doubled.
void AppendNewickLabel(std::string* out, const std::string& name) {
  bool bare = true;
  for (char c : name) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-')) {
      bare = false;
      break;
    }
  }
  if (bare) {
    out->append(name);
    return;
  }
  out->push_back('\'');
  for (char c : name) {
    if (c == '\'') out->push_back('\'');
    out->push_back(c);
  }
  out->push_back('\'');
}
}  // namespace

std::string ToNewick(const Hierarchy& h) {
  std::string out;
  // Iterative pre/post-order walk: deep (caterpillar) trees must not recurse.
  std::vector<std::pair<int32_t, size_t>> stack;  // node, next child index
  stack.emplace_back(h.root(), 0);
  while (!stack.empty()) {
    auto& [v, next] = stack.back();
    auto kids = h.children(v);
    if (kids.empty() || next == kids.size()) {
      if (kids.empty()) {
        if (h.leaf_names().empty()) {
          absl::StrAppend(&out, v);
        } else {
          AppendNewickLabel(&out, h.leaf_names()[v]);
        }
      } else {
        out.push_back(')');
      }
      const int32_t p = h.parent(v);
      if (p >= 0) {
        out.push_back(':');
        AppendDouble(&out, h.height(p) - h.height(v));
      }
      stack.pop_back();
      continue;
    }
    out.push_back(next == 0 ? '(' : ',');
    const int32_t child = kids[next++];
    stack.emplace_back(child, 0);
  }
  out.push_back(';');
  return out;
}

namespace {

// Everything of the JSON document except "point_leaf", as one compact object.
OrderedJson JsonHead(const Hierarchy& h) {
  OrderedJson doc;
  doc["format"] = "dendro.hierarchy";
  doc["version"] = 1;
  doc["num_leaves"] = h.num_leaves();
  OrderedJson meta = OrderedJson::object();
  for (const auto& [k, v] : h.metadata()) meta[k] = v;
  doc["metadata"] = std::move(meta);
  OrderedJson nodes = OrderedJson::array();
  for (int32_t v = 0; v < h.num_nodes(); ++v) {
    OrderedJson node;
    node["id"] = v;
    node["parent"] = h.parent(v);
    node["height"] = h.height(v);
    OrderedJson kids = OrderedJson::array();
    for (int32_t c : h.children(v)) kids.push_back(c);
    node["children"] = std::move(kids);
    nodes.push_back(std::move(node));
  }
  doc["nodes"] = std::move(nodes);
  const std::vector<double> rows = ToLinkage(h);
  OrderedJson merges = OrderedJson::array();
  for (size_t t = 0; 4 * t < rows.size(); ++t) {
    merges.push_back(OrderedJson::array({static_cast<int64_t>(rows[4 * t]),
                                         static_cast<int64_t>(rows[4 * t + 1]), rows[4 * t + 2],
                                         static_cast<int64_t>(rows[4 * t + 3])}));
  }
  doc["merges"] = std::move(merges);
  if (!h.leaf_names().empty()) doc["leaf_names"] = h.leaf_names();
  return doc;
}

}  // namespace

absl::Status WriteJson(const Hierarchy& h, bool include_points, size_t chunk_bytes,
                       absl::FunctionRef<absl::Status(std::string_view)> sink,
                       absl::Span<const int64_t> stable_ids) {
  if (!stable_ids.empty() && static_cast<int64_t>(stable_ids.size()) != h.num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(stable_ids.size(), " stable ids for a tree of ", h.num_nodes(), " nodes"));
  }
  chunk_bytes = std::max<size_t>(chunk_bytes, 64);
  std::string buf = Dump(JsonHead(h));
  // The head is an object ("{...}"); the ids and points go before its
  // closing brace.
  buf.pop_back();
  if (!stable_ids.empty()) {
    buf.append(",\"stable_ids\":[");
    char text[24];
    for (size_t v = 0; v < stable_ids.size(); ++v) {
      if (v > 0) buf.push_back(',');
      buf.append(text, std::to_chars(text, text + sizeof(text), stable_ids[v]).ptr);
    }
    buf.push_back(']');
  }
  // Sends the whole chunks at the front of `buf`; the rest waits for more.
  auto flush_whole_chunks = [&]() -> absl::Status {
    size_t sent = 0;
    for (; buf.size() - sent >= chunk_bytes; sent += chunk_bytes) {
      DENDRO_RETURN_IF_ERROR(sink(std::string_view(buf).substr(sent, chunk_bytes)));
    }
    buf.erase(0, sent);
    return absl::OkStatus();
  };
  const std::vector<int32_t>& points = h.point_leaf();
  if (include_points && !points.empty()) {
    // Written like nlohmann's compact dump of an int array ("[1,2,3]"), a
    // block of points at a time. An int32 takes at most 11 characters.
    buf.append(",\"point_leaf\":[");
    constexpr size_t kBlock = 4096, kMaxEntry = 12;
    std::vector<char> text(kBlock * kMaxEntry);
    for (size_t begin = 0; begin < points.size(); begin += kBlock) {
      const size_t end = std::min(points.size(), begin + kBlock);
      char* out = text.data();
      for (size_t i = begin; i < end; ++i) {
        if (i > 0) *out++ = ',';
        out = std::to_chars(out, out + 11, points[i]).ptr;
      }
      buf.append(text.data(), out);
      DENDRO_RETURN_IF_ERROR(flush_whole_chunks());
    }
    buf.push_back(']');
  }
  buf.push_back('}');
  for (size_t sent = 0; sent < buf.size(); sent += chunk_bytes) {
    DENDRO_RETURN_IF_ERROR(sink(std::string_view(buf).substr(sent, chunk_bytes)));
  }
  return absl::OkStatus();
}

std::string ToJson(const Hierarchy& h, bool include_points) {
  std::string out;
  const absl::Status s =
      WriteJson(h, include_points, size_t{1} << 20, [&](std::string_view chunk) {
        out.append(chunk);
        return absl::OkStatus();
      });
  assert(s.ok());  // the sink above never fails
  (void)s;
  return out;
}

absl::StatusOr<Hierarchy> ParseJson(std::string_view json) {
  OrderedJson doc;
  try {
    doc = OrderedJson::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("hierarchy JSON does not parse: ", e.what()));
  }
  try {
    return ParseJsonImpl(doc);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("hierarchy JSON: ", e.what()));
  }
}

namespace {

// One node of a Newick text as it is read: internal nodes get their leaf
// count once closed.
struct NewickNode {
  int32_t parent = -1;
  double length = 1.0;  // to the parent; 1 when the text gives none
  bool leaf = false;
  int32_t children = 0;
  std::string name;
};

absl::Status NewickError(size_t pos, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("Newick: ", std::string(what), " at character ", pos + 1));
}

}  // namespace

absl::StatusOr<Hierarchy> ParseNewick(std::string_view text) {
  std::vector<NewickNode> nodes;
  std::vector<int32_t> open;  // internal nodes whose ')' is still to come
  int32_t last = -1;          // the node a following name or ':' belongs to
  bool expect_node = true;    // after '(' or ',' (or at the start)
  bool done = false;
  size_t i = 0;
  auto skip_blank = [&] {
    while (i < text.size()) {
      const char c = text[i];
      if (c == '[') {  // a comment
        const size_t end = text.find(']', i);
        if (end == std::string_view::npos) return false;
        i = end + 1;
      } else if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else {
        break;
      }
    }
    return true;
  };
  // A label: quoted ('' is a quote) or bare (an unquoted '_' reads as a blank).
  auto read_label = [&](std::string* out) -> absl::Status {
    if (i < text.size() && text[i] == '\'') {
      const size_t start = i++;
      for (;;) {
        if (i >= text.size()) return NewickError(start, "an unclosed quote");
        if (text[i] == '\'') {
          if (i + 1 < text.size() && text[i + 1] == '\'') {
            out->push_back('\'');
            i += 2;
            continue;
          }
          ++i;
          return absl::OkStatus();
        }
        out->push_back(text[i++]);
      }
    }
    while (i < text.size() && std::string_view("()[]':;,").find(text[i]) == std::string_view::npos &&
           !absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
      out->push_back(text[i] == '_' ? ' ' : text[i]);
      ++i;
    }
    return absl::OkStatus();
  };
  while (!done) {
    if (!skip_blank()) return NewickError(i, "an unclosed comment");
    if (i >= text.size()) return NewickError(i, "the end of the text before ';'");
    const char c = text[i];
    if (c == '(') {
      if (!expect_node) return NewickError(i, "'(' where a ',' or ')' belongs");
      nodes.push_back({open.empty() ? -1 : open.back(), 1.0, false, 0, ""});
      if (!open.empty()) ++nodes[open.back()].children;
      open.push_back(static_cast<int32_t>(nodes.size()) - 1);
      ++i;
      continue;
    }
    if (c == ',' || c == ')') {
      if (expect_node) {
        return NewickError(i, c == ',' ? "an empty leaf before ','" : "an empty leaf before ')'");
      }
      if (open.empty()) return NewickError(i, "an unmatched ')'");
      ++i;
      if (c == ')') {
        last = open.back();
        open.pop_back();
        expect_node = false;
      } else {
        expect_node = true;
      }
      continue;
    }
    if (c == ':') {
      if (last < 0 || expect_node) return NewickError(i, "a branch length with no node");
      ++i;
      if (!skip_blank()) return NewickError(i, "an unclosed comment");
      size_t end = i;
      while (end < text.size() &&
             std::string_view("0123456789+-.eE").find(text[end]) != std::string_view::npos) {
        ++end;
      }
      double length = 0.0;
      if (!absl::SimpleAtod(std::string(text.substr(i, end - i)), &length) || !std::isfinite(length) ||
          length < 0.0) {
        return NewickError(i, "a branch length that is not a finite number >= 0");
      }
      nodes[last].length = length;
      i = end;
      continue;
    }
    if (c == ';') {
      if (!open.empty()) return NewickError(i, "';' before every '(' was closed");
      if (expect_node || last != 0) return NewickError(i, "';' with no tree before it");
      ++i;
      done = true;
      continue;
    }
    // A label: a new leaf, or the name of the node just closed.
    std::string name;
    const size_t start = i;
    DENDRO_RETURN_IF_ERROR(read_label(&name));
    if (i == start) return NewickError(i, absl::StrCat("an unexpected '", std::string(1, c), "'"));
    if (expect_node) {
      nodes.push_back({open.empty() ? -1 : open.back(), 1.0, true, 0, std::move(name)});
      if (!open.empty()) ++nodes[open.back()].children;
      last = static_cast<int32_t>(nodes.size()) - 1;
      expect_node = false;
    } else if (last >= 0 && !nodes[last].leaf && nodes[last].name.empty()) {
      nodes[last].name = std::move(name);  // an internal node's label: not kept
    } else {
      return NewickError(start, "a second label for one node");
    }
  }
  if (!skip_blank() || i != text.size()) return NewickError(i, "text after ';'");
  // Leaves first, in the order they appear; internal nodes after them.
  std::vector<int32_t> id(nodes.size(), -1);
  std::vector<std::string> names;
  for (size_t v = 0; v < nodes.size(); ++v) {
    if (nodes[v].leaf) {
      id[v] = static_cast<int32_t>(names.size());
      names.push_back(nodes[v].name);
    }
  }
  const int32_t num_leaves = static_cast<int32_t>(names.size());
  if (num_leaves < 1) return absl::InvalidArgumentError("Newick: the tree has no leaf");
  int32_t next = num_leaves;
  for (size_t v = 0; v < nodes.size(); ++v) {
    if (nodes[v].leaf) continue;
    if (nodes[v].children < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Newick: an internal node with ", nodes[v].children,
          " child; every internal node needs two or more"));
    }
    id[v] = next++;
  }
  // Leaf names that are exactly 0..L-1 are leaf-cluster ids (as ToNewick
  // writes a tree without names): the leaves take those ids.
  std::vector<int32_t> leaf_id(num_leaves);
  bool numbered = true;
  std::vector<char> seen(num_leaves, 0);
  for (int32_t l = 0; l < num_leaves && numbered; ++l) {
    int32_t k = -1;
    numbered = absl::SimpleAtoi(names[l], &k) && absl::StrCat(k) == names[l] && k >= 0 &&
               k < num_leaves && !seen[k];
    if (numbered) {
      seen[k] = 1;
      leaf_id[l] = k;
    }
  }
  for (size_t v = 0; v < nodes.size(); ++v) {
    if (nodes[v].leaf && numbered) id[v] = leaf_id[id[v]];
  }
  // Heights: leaves 0; a node the longest way down to a leaf (branch lengths
  // of an ultrametric tree, as ToNewick writes, give its heights back).
  std::vector<int32_t> parent(next, -1);
  std::vector<double> height(next, 0.0);
  for (size_t v = nodes.size(); v-- > 0;) {  // children come after their parent
    if (nodes[v].parent < 0) continue;
    const int32_t p = id[nodes[v].parent];
    parent[id[v]] = p;
    height[p] = std::max(height[p], height[id[v]] + nodes[v].length);
  }
  DENDRO_ASSIGN_OR_RETURN(Hierarchy tree, Hierarchy::FromParents(num_leaves, parent, height));
  if (!numbered) {
    for (std::string& n : names) {
      if (n.empty()) return absl::InvalidArgumentError("Newick: a leaf without a name");
    }
    DENDRO_RETURN_IF_ERROR(tree.SetLeafNames(std::move(names)));
  }
  return tree;
}

}  // namespace dendro
