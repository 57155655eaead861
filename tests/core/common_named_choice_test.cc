#include <set>
#include <string>

#include "core/common/named_choice.h"
#include "core/ghhc/choices.h"
#include "core/l2h/aggregation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dendro {
namespace {

using ::testing::HasSubstr;

enum class Colour { kRed, kGreen, kBlue };
constexpr NamedChoice<Colour> kColours[] = {
    {Colour::kRed, "red"}, {Colour::kGreen, "green"}, {Colour::kBlue, "blue"}};

TEST(NamedChoiceTest, NamesAndParsesEveryValue) {
  for (const auto& c : kColours) {
    EXPECT_EQ(ChoiceName(kColours, c.value), c.name);
    absl::StatusOr<Colour> parsed = ParseChoice(kColours, "colour", c.name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, c.value);
  }
}

TEST(NamedChoiceTest, RefusalListsTheNamesInTableOrder) {
  for (const char* bad : {"", "Red", " red", "red ", "purple"}) {
    absl::StatusOr<Colour> parsed = ParseChoice(kColours, "colour", bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              "colour must be red, green or blue, got '" + std::string(bad) + "'");
  }
  EXPECT_EQ(ChoiceNames(kColours), "red, green or blue");
}

TEST(NamedChoiceTest, AValueOutsideTheTableNamesTheFirstEntry) {
  EXPECT_EQ(ChoiceName(kColours, static_cast<Colour>(17)), "red");
}

// Every table the CLI and the wire use: names unique, each round-trips.
template <typename E, std::size_t N>
void ExpectRoundTrip(const NamedChoice<E> (&choices)[N], E (*parse_or_die)(std::string_view),
                     std::string_view (*name)(E)) {
  std::set<std::string_view> names;
  std::set<int> values;
  for (const NamedChoice<E>& c : choices) {
    EXPECT_TRUE(names.insert(c.name).second) << "name twice: " << c.name;
    EXPECT_TRUE(values.insert(static_cast<int>(c.value)).second) << c.name;
    EXPECT_EQ(name(c.value), c.name);
    EXPECT_EQ(parse_or_die(c.name), c.value);
  }
}

TEST(NamedChoiceTest, MethodTablesRoundTrip) {
  ExpectRoundTrip(
      kL2hAggregations, +[](std::string_view n) { return *ParseL2hAggregation(n); },
      +[](L2hAggregation a) { return L2hAggregationName(a); });
  ExpectRoundTrip(
      kGhhcLinks, +[](std::string_view n) { return *ParseGhhcLink(n); },
      +[](GhhcLink l) { return GhhcLinkName(l); });
  ExpectRoundTrip(
      kGhhcProjections, +[](std::string_view n) { return *ParseGhhcProjection(n); },
      +[](GhhcProjection p) { return GhhcProjectionName(p); });
  ExpectRoundTrip(
      kGhhcPoints, +[](std::string_view n) { return *ParseGhhcPoints(n); },
      +[](GhhcPoints p) { return GhhcPointsName(p); });
  EXPECT_THAT(ParseL2hAggregation("sum").status().message(),
              HasSubstr("aggregation must be sum_of_means, mean_of_means or sum_of_sums"));
  EXPECT_THAT(ParseGhhcProjection("svd").status().message(),
              HasSubstr("projection must be pca or random, got 'svd'"));
}

}  // namespace
}  // namespace dendro
