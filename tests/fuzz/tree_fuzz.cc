// Hierarchy JSON (what GetTree serves and `dendro eval` reads) on arbitrary
// bytes. A document that parses must survive every export and come back
// the same: JSON -> tree -> JSON -> tree is the identity on the tree, and the
// SciPy linkage of the tree is itself a valid linkage.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/hierarchy/export.h"
#include "core/hierarchy/hierarchy.h"
#include "tests/fuzz/fuzz_util.h"

using dendro::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto tree = dendro::ParseJson(bytes);
  if (!tree.ok()) return 0;
  const std::string json = dendro::ToJson(*tree);
  auto again = dendro::ParseJson(json);
  Check(again.ok(), "ToJson output parses");
  Check(dendro::ToJson(*again) == json, "JSON round trip is stable");
  Check(dendro::ToNewick(*tree).back() == ';', "Newick ends with ';'");
  auto from_linkage = dendro::FromLinkage(tree->num_leaves(), dendro::ToLinkage(*tree));
  Check(from_linkage.ok(), "ToLinkage output is a valid linkage");
  Check(from_linkage->is_binary(), "a linkage is binary");
  for (int32_t k : tree->ReachableLevels()) {
    Check(tree->CutToK(k).ok(), "every reachable level cuts");
  }
  return 0;
}
