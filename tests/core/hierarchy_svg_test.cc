// ToSvg: one edge per non-root node, one label per leaf, escaped names,
// colours by cluster at a level, radial above 200 leaves, deterministic.
#include "core/hierarchy/svg.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A caterpillar over n leaves: ((((0, 1), 2), 3) ...), heights 1, 2, ...
Hierarchy Caterpillar(int32_t n) {
  std::vector<Merge> merges;
  int32_t acc = 0;
  for (int32_t i = 1; i < n; ++i) {
    merges.push_back(Merge{acc, i, static_cast<double>(i)});
    acc = n + i - 1;
  }
  return *Hierarchy::FromMerges(n, merges);
}

TEST(SvgTest, OneEdgePerNodeAndOneLabelPerLeaf) {
  Hierarchy h = Caterpillar(6);
  ASSERT_TRUE(h.SetLeafNames({"a<b", "c&d", "e", "f", "g", "h\"i"}).ok());
  auto svg = ToSvg(h);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(Count(*svg, "<path class=\"edge\""), h.num_nodes() - 1);
  EXPECT_EQ(Count(*svg, "<text class=\"leaf\""), 6);
  EXPECT_THAT(*svg, HasSubstr(">a&lt;b</text>"));
  EXPECT_THAT(*svg, HasSubstr(">c&amp;d</text>"));
  EXPECT_THAT(*svg, HasSubstr(">h&quot;i</text>"));
  EXPECT_THAT(*svg, HasSubstr("class=\"axis\""));
  EXPECT_EQ(*svg, *ToSvg(h));  // deterministic
}

TEST(SvgTest, ColoursTheClustersOfACut) {
  Hierarchy h = Caterpillar(5);
  SvgOptions o;
  o.color_level = 3;
  o.title = "t & u";
  auto svg = ToSvg(h, o);
  ASSERT_TRUE(svg.ok()) << svg.status();
  // Cut into 3: {0, 1, 2}, {3}, {4}.
  EXPECT_EQ(Count(*svg, "class=\"leaf cluster-0\""), 3);
  EXPECT_EQ(Count(*svg, "class=\"leaf cluster-1\""), 1);
  EXPECT_EQ(Count(*svg, "class=\"leaf cluster-2\""), 1);
  EXPECT_THAT(*svg, HasSubstr("#8c8c8c"));  // merges above the cut
  EXPECT_THAT(*svg, HasSubstr(">t &amp; u</text>"));
  o.color_level = 6;
  EXPECT_EQ(ToSvg(h, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SvgTest, LargeTreesAreDrawnRadially) {
  Hierarchy big = Caterpillar(250);
  auto svg = ToSvg(big);
  ASSERT_TRUE(svg.ok());
  EXPECT_THAT(*svg, HasSubstr(" A"));  // arcs
  EXPECT_EQ(Count(*svg, "<path class=\"edge\""), big.num_nodes() - 1);
  EXPECT_EQ(Count(*svg, "<text class=\"leaf\""), 250);
  EXPECT_EQ(Count(*svg, "class=\"axis\""), 0);
  SvgOptions rect;
  rect.layout = SvgOptions::Layout::kRectangular;
  EXPECT_THAT(*ToSvg(big, rect), HasSubstr("class=\"axis\""));
}

TEST(SvgTest, NaryTreesAndASingleLeafDraw) {
  const int32_t parent[] = {3, 3, 3, -1};
  const double height[] = {0, 0, 0, 1};
  auto star = Hierarchy::FromParents(3, parent, height);
  ASSERT_TRUE(star.ok());
  auto svg = ToSvg(*star);
  ASSERT_TRUE(svg.ok());
  EXPECT_EQ(Count(*svg, "<path class=\"edge\""), 3);
  const int32_t one_parent[] = {-1};
  const double one_height[] = {0};
  auto one = Hierarchy::FromParents(1, one_parent, one_height);
  ASSERT_TRUE(one.ok());
  auto lone = ToSvg(*one);
  ASSERT_TRUE(lone.ok());
  EXPECT_EQ(Count(*lone, "<text class=\"leaf\""), 1);
}

}  // namespace
}  // namespace dendro
