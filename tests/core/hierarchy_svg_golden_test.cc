// ToSvg against a named reference: scipy.cluster.hierarchy.dendrogram.
//
// tests/golden/svg/make_svg_golden.py records, for fixed linkages (distinct
// heights, ties, operands named larger-first, and 250 leaves), the leaf order
// SciPy draws and its inverted U per merge (icoord / dcoord). Each linkage is
// built here with FromLinkage and drawn in both layouts; the SVG is parsed
// back into geometry and must show
//   * the leaves in SciPy's order, each at its own slot on the leaf axis, and
//   * one leg per child, from the child's height up to its merge height and
//     across to the merge's position, matching SciPy's legs one to one.
// The drawing is mapped into SciPy's units from the SVG alone: leaf slots
// from the leaf labels, heights from the axis ticks (rectangular) or from
// the leaves' circle (radial), so the test does not know the layout's
// margins.
//
// A byte-exact golden (tests/golden/svg/blobs_12.svg) pins the whole output
// of one drawing. After an intended change of the picture, regenerate it with
//   DENDRO_UPDATE_SVG_GOLDEN=1 build/tests/hierarchy_svg_golden_test
// and look at the new file before committing it.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/hierarchy/export.h"
#include "core/hierarchy/svg.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/source_path.h"

namespace dendro {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::string GoldenDir() { return SourcePath("tests/golden/svg/"); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json Goldens() {
  return nlohmann::json::parse(ReadFile(GoldenDir() + "svg_goldens.json"));
}

Hierarchy FromCase(const nlohmann::json& c) {
  std::vector<double> rows;
  for (const auto& row : c["linkage"]) {
    for (double v : row) rows.push_back(v);
  }
  auto h = FromLinkage(c["num_leaves"].get<int32_t>(), rows);
  EXPECT_TRUE(h.ok()) << h.status();
  return *std::move(h);
}

// --- Parsing the SVG -----------------------------------------------------------

std::string Attr(const std::string& element, const std::string& name) {
  const std::regex re("\\s" + name + "=\"([^\"]*)\"");
  std::smatch m;
  return std::regex_search(element, m, re) ? m[1].str() : "";
}

std::vector<double> Numbers(const std::string& text) {
  std::vector<double> out;
  const std::regex num("-?[0-9]+(\\.[0-9]+)?");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), num);
       it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod(it->str()));
  }
  return out;
}

struct Label {
  std::string text;
  double x, y;
};
struct Svg {
  double width = 0, height = 0;
  std::vector<Label> leaves;       // <text class="leaf...">, in document order
  std::vector<std::string> edges;  // the d of every <path class="edge">
  std::vector<std::pair<double, double>> ticks;  // axis: (y of the tick, its value)
};

Svg Parse(const std::string& svg) {
  Svg out;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(svg, m, std::regex("<svg [^>]*>")));
  // The size is the viewBox's ("0 0 W H"); no fixed width or height.
  EXPECT_EQ(m[0].str().find(" width="), std::string::npos) << m[0].str();
  EXPECT_EQ(m[0].str().find(" height="), std::string::npos) << m[0].str();
  std::istringstream box(Attr(m[0].str(), "viewBox"));
  double x0 = -1, y0 = -1;
  box >> x0 >> y0 >> out.width >> out.height;
  EXPECT_EQ(x0, 0);
  EXPECT_EQ(y0, 0);
  const std::regex leaf("<text class=\"leaf[^\"]*\"[^>]*>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), leaf);
       it != std::sregex_iterator(); ++it) {
    const std::string element = it->str();
    out.leaves.push_back({(*it)[1].str(), std::stod(Attr(element, "x")),
                          std::stod(Attr(element, "y"))});
  }
  const std::regex edge("<path class=\"edge\"[^>]*/>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), edge);
       it != std::sregex_iterator(); ++it) {
    out.edges.push_back(Attr(it->str(), "d"));
  }
  const size_t axis = svg.find("<g class=\"axis\"");
  if (axis != std::string::npos) {
    const std::string group = svg.substr(axis, svg.find("</g>", axis) - axis);
    // Each tick: its line, then its label.
    const std::regex tick(
        "<line x1=\"[^\"]*\" y1=\"([^\"]*)\" x2=\"[^\"]*\" y2=\"[^\"]*\"/>"
        "<text[^>]*>([^<]*)</text>");
    for (auto it = std::sregex_iterator(group.begin(), group.end(), tick);
         it != std::sregex_iterator(); ++it) {
      out.ticks.push_back({std::stod((*it)[1].str()), std::stod((*it)[2].str())});
    }
  }
  return out;
}

// --- Geometry in SciPy's units -----------------------------------------------------

// One leg of an inverted U: from a child at (x, h0) up to its merge height
// h1, then across to the merge at x = parent_x (unknown at the centre of a
// radial drawing). x in SciPy's leaf-axis units (leaves at 5, 15, ...),
// heights as a fraction of the root's.
struct Leg {
  double x, h0, h1;
  std::optional<double> parent_x;
  double x_tol;  // how exactly the drawing fixes x and parent_x
};

std::vector<Leg> ScipyLegs(const nlohmann::json& c) {
  double top = 0;
  for (const auto& d : c["dcoord"]) top = std::max(top, d[1].get<double>());
  std::vector<Leg> legs;
  for (size_t i = 0; i < c["icoord"].size(); ++i) {
    const auto& ic = c["icoord"][i];
    const auto& dc = c["dcoord"][i];
    const double mid = (ic[1].get<double>() + ic[2].get<double>()) / 2;
    legs.push_back({ic[0], dc[0].get<double>() / top, dc[1].get<double>() / top, mid, 0});
    legs.push_back({ic[3], dc[3].get<double>() / top, dc[2].get<double>() / top, mid, 0});
  }
  return legs;
}

// Rectangular: "M x y V y' H x'". Leaf slots from the leaf labels' x, heights
// from the axis ticks (the lowest tick is 0, the highest the root height).
std::vector<Leg> RectangularLegs(const Svg& s, double root_height) {
  EXPECT_GE(s.leaves.size(), 2u);
  EXPECT_GE(s.ticks.size(), 2u);
  const double x0 = s.leaves[0].x, slot = s.leaves[1].x - s.leaves[0].x;
  auto to_x = [&](double x) { return 5 + 10 * (x - x0) / slot; };
  auto [y_top, top_value] = *std::min_element(s.ticks.begin(), s.ticks.end());
  auto [y_zero, zero_value] = *std::max_element(s.ticks.begin(), s.ticks.end());
  EXPECT_EQ(zero_value, 0);
  EXPECT_NEAR(top_value, root_height, 5e-3 * root_height);  // printed with 3 digits
  // (Structured bindings are not captured by lambdas before C++20.)
  auto to_h = [y_zero = y_zero, y_top = y_top](double y) {
    return (y_zero - y) / (y_zero - y_top);
  };
  std::vector<Leg> legs;
  for (const std::string& d : s.edges) {
    EXPECT_TRUE(std::regex_match(d, std::regex("M\\S+ \\S+ V\\S+ H\\S+"))) << d;
    const std::vector<double> v = Numbers(d);
    legs.push_back({to_x(v[0]), to_h(v[1]), to_h(v[2]), to_x(v[3]), 0.02 * 10 / slot});
  }
  return legs;
}

// Radial: "M x y L x' y' [A r r 0 large sweep x'' y'']". The centre is the
// mean of the leaves' outer ends (evenly spread over the circle), the
// leaves' radius is height 0 and the centre the root's height; angles are
// measured from the first leaf, in the direction of the second.
std::vector<Leg> RadialLegs(const Svg& s) {
  const size_t n = s.leaves.size();
  std::vector<std::vector<double>> paths;
  for (const std::string& d : s.edges) {
    EXPECT_TRUE(std::regex_match(d, std::regex("M\\S+ \\S+ L\\S+ \\S+( A\\S+ \\S+ 0 [01] [01] "
                                                "\\S+ \\S+)?")))
        << d;
    paths.push_back(Numbers(d));
  }
  // The leaves' legs are the ones starting farthest out.
  double cx = 0, cy = 0;
  // A leaf's leg starts where its label's ray meets the circle: take the n
  // legs whose start is nearest a leaf label.
  std::vector<std::pair<double, double>> starts;
  for (const Label& l : s.leaves) {
    double best = 1e300;
    std::pair<double, double> at;
    for (const auto& p : paths) {
      const double d = std::hypot(p[0] - l.x, p[1] - l.y);
      if (d < best) best = d, at = {p[0], p[1]};
    }
    starts.push_back(at);
  }
  for (const auto& [x, y] : starts) cx += x / n, cy += y / n;
  double radius = 0;
  for (const auto& [x, y] : starts) radius += std::hypot(x - cx, y - cy) / n;
  const double a0 = std::atan2(starts[0].second - cy, starts[0].first - cx);
  const double a1 = std::atan2(starts[1].second - cy, starts[1].first - cx);
  const double sign = std::remainder(a1 - a0, 2 * kPi) > 0 ? 1 : -1;
  auto to_x = [&](double x, double y) {
    const double a = std::atan2(y - cy, x - cx);
    double turn = std::fmod(sign * (a - a0) + 4 * kPi, 2 * kPi);
    if (turn > 2 * kPi - kPi / n) turn -= 2 * kPi;  // the first leaf, rounded below 0
    return 5 + 10 * turn * n / (2 * kPi);
  };
  auto to_h = [&](double x, double y) { return 1 - std::hypot(x - cx, y - cy) / radius; };
  auto tol = [&](double x, double y) {  // 0.02 px of rounding at this radius, in slots
    return 10 * n / (2 * kPi) * 0.02 / std::max(std::hypot(x - cx, y - cy), 1e-9);
  };
  std::vector<Leg> legs;
  for (const auto& p : paths) {
    Leg leg{to_x(p[0], p[1]), to_h(p[0], p[1]), to_h(p[2], p[3]), std::nullopt,
            tol(p[0], p[1])};
    if (p.size() == 11) {
      leg.parent_x = to_x(p[9], p[10]);
      leg.x_tol = std::max(leg.x_tol, tol(p[9], p[10]));
    } else if (to_h(p[2], p[3]) < 1 - 1e-3) {
      // No arc: the merge lies on the child's own ray.
      leg.parent_x = leg.x;
    }
    legs.push_back(leg);
  }
  return legs;
}

// Every SciPy leg matched by exactly one drawn leg.
void ExpectSameLegs(const std::vector<Leg>& scipy, const std::vector<Leg>& drawn,
                    const std::string& what) {
  ASSERT_EQ(drawn.size(), scipy.size()) << what;
  constexpr double kHeightTol = 2e-3;  // of the root height
  std::vector<bool> used(drawn.size(), false);
  int missing = 0;
  for (const Leg& want : scipy) {
    bool found = false;
    for (size_t i = 0; i < drawn.size() && !found; ++i) {
      const Leg& got = drawn[i];
      if (used[i] || std::abs(got.x - want.x) > got.x_tol + 1e-6 ||
          std::abs(got.h0 - want.h0) > kHeightTol || std::abs(got.h1 - want.h1) > kHeightTol) {
        continue;
      }
      if (got.parent_x.has_value() &&
          std::abs(*got.parent_x - *want.parent_x) > got.x_tol + 1e-6) {
        continue;
      }
      used[i] = found = true;
    }
    if (!found && ++missing <= 5) {
      ADD_FAILURE() << what << ": no drawn leg for SciPy's x=" << want.x << " from "
                    << want.h0 << " to " << want.h1 << " towards " << *want.parent_x;
    }
  }
  EXPECT_EQ(missing, 0) << what;
}

void ExpectScipyLeafOrder(const nlohmann::json& c, const Svg& s, const std::string& what) {
  std::vector<std::string> names;
  for (const Label& l : s.leaves) names.push_back(l.text);
  EXPECT_EQ(names, c["ivl"].get<std::vector<std::string>>()) << what;
}

TEST(SvgGoldenTest, GoldensCoverTiesAndARadialTree) {
  const nlohmann::json g = Goldens();
  EXPECT_NE(g["reference"].get<std::string>().find("scipy.cluster.hierarchy.dendrogram"),
            std::string::npos);
  bool ties = false, radial = false;
  for (const auto& c : g["cases"]) {
    std::vector<double> heights;
    for (const auto& row : c["linkage"]) heights.push_back(row[2]);
    std::sort(heights.begin(), heights.end());
    ties |= std::adjacent_find(heights.begin(), heights.end()) != heights.end();
    radial |= c["num_leaves"].get<int>() > 200;
  }
  EXPECT_TRUE(ties);
  EXPECT_TRUE(radial);
}

TEST(SvgGoldenTest, RectangularDrawingIsScipysDendrogram) {
  const nlohmann::json g = Goldens();
  ASSERT_EQ(g["cases"].size(), 4u);
  for (const auto& c : g["cases"]) {
    const std::string name = c["name"];
    const Hierarchy h = FromCase(c);
    SvgOptions o;
    o.layout = SvgOptions::Layout::kRectangular;
    auto svg = ToSvg(h, o);
    ASSERT_TRUE(svg.ok()) << svg.status();
    const Svg s = Parse(*svg);
    ExpectScipyLeafOrder(c, s, name);
    // Each leaf label in its own slot, in order.
    for (size_t i = 1; i < s.leaves.size(); ++i) {
      EXPECT_NEAR(s.leaves[i].x - s.leaves[i - 1].x, s.leaves[1].x - s.leaves[0].x, 0.011)
          << name;
    }
    ExpectSameLegs(ScipyLegs(c), RectangularLegs(s, h.height(h.root())), name + " rectangular");
  }
}

TEST(SvgGoldenTest, RadialDrawingIsScipysDendrogramOnACircle) {
  const nlohmann::json g = Goldens();
  ASSERT_EQ(g["cases"].size(), 4u);
  for (const auto& c : g["cases"]) {
    const std::string name = c["name"];
    const Hierarchy h = FromCase(c);
    SvgOptions o;
    if (h.num_leaves() <= 200) o.layout = SvgOptions::Layout::kRadial;  // else kAuto's choice
    auto svg = ToSvg(h, o);
    ASSERT_TRUE(svg.ok()) << svg.status();
    const Svg s = Parse(*svg);
    EXPECT_EQ(svg->find("class=\"axis\""), std::string::npos) << name;
    ExpectScipyLeafOrder(c, s, name);
    ExpectSameLegs(ScipyLegs(c), RadialLegs(s), name + " radial");
  }
}

// The whole output, byte for byte, for one tree with colours and a title.
TEST(SvgGoldenTest, ByteExactGolden) {
  const nlohmann::json g = Goldens();
  const Hierarchy h = FromCase(g["cases"][0]);
  ASSERT_EQ(g["cases"][0]["name"], "blobs_12");
  SvgOptions o;
  o.color_level = 3;
  o.title = "blobs_12 & three clusters";
  auto svg = ToSvg(h, o);
  ASSERT_TRUE(svg.ok()) << svg.status();
  const std::string path = GoldenDir() + "blobs_12.svg";
  const char* update = std::getenv("DENDRO_UPDATE_SVG_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << *svg;
    GTEST_SKIP() << "wrote " << path;
  }
  EXPECT_EQ(*svg, ReadFile(path)) << "the drawing changed; see the top of this file";
}

}  // namespace
}  // namespace dendro
