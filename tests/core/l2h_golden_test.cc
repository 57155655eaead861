// RunL2h against the paper's reference code (appendix A), on the cases of
// tests/golden/l2h/gen_l2h_goldens.py: random logits with K = 5..20,
// hierarchical logits with K = 27 and K = 120, exact ties resolved by list
// order and near-ties (relative gap ~1e-6) that go against list order, each
// under all three aggregations. The merge sequences must be identical.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/common/run_context.h"
#include "core/l2h/l2h.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/source_path.h"

namespace dendro {
namespace {

// Just enough of the .npy format for the goldens (numpy's np.save of a
// little-endian float32 C-order 2-D array), so that this test links only
// dendro_l2h.
struct Float32Array {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;
};

Float32Array ReadGoldenNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Float32Array a;
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    ADD_FAILURE() << path << " is not a .npy file";
    return a;
  }
  const bool v1 = bytes[6] == 1;
  size_t header_len;
  size_t offset;
  if (v1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    offset = 10;
  } else {
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t{static_cast<uint8_t>(bytes[8 + i])} << (8 * i);
    offset = 12;
  }
  const std::string header = bytes.substr(offset, header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << path << ": " << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << path;
  const size_t open = header.find("'shape': (");
  EXPECT_NE(open, std::string::npos) << path;
  if (open == std::string::npos) return a;
  a.rows = std::stoll(header.substr(open + 10));
  a.cols = std::stoll(header.substr(header.find(',', open) + 1));
  const size_t data_at = offset + header_len;
  const size_t want = static_cast<size_t>(a.rows * a.cols) * sizeof(float);
  EXPECT_EQ(bytes.size(), data_at + want) << path;
  if (bytes.size() != data_at + want) return a;
  a.data.resize(static_cast<size_t>(a.rows * a.cols));
  std::memcpy(a.data.data(), bytes.data() + data_at, want);
  return a;
}

std::string GoldenDir() { return SourcePath("tests/golden/l2h/"); }

nlohmann::json LoadGoldens() {
  std::ifstream in(GoldenDir() + "l2h_goldens.json");
  EXPECT_TRUE(in.good()) << "missing " << GoldenDir() << "l2h_goldens.json";
  return nlohmann::json::parse(in);
}

std::string Tuple(const std::vector<int32_t>& g) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < g.size(); ++i) s << (i ? "," : "") << g[i];
  s << ")";
  return s.str();
}

void ExpectSameSteps(const nlohmann::json& expected, const std::vector<L2hStep>& got,
                     const std::string& what) {
  ASSERT_EQ(expected.size(), got.size()) << what;
  for (size_t t = 0; t < got.size(); ++t) {
    const auto want_lowest = expected[t][0].get<std::vector<int32_t>>();
    const auto want_related = expected[t][1].get<std::vector<int32_t>>();
    ASSERT_EQ(want_lowest, got[t].lowest)
        << what << " step " << t << ": reference merges " << Tuple(want_lowest) << " + "
        << Tuple(want_related) << ", got " << Tuple(got[t].lowest) << " + "
        << Tuple(got[t].most_related);
    ASSERT_EQ(want_related, got[t].most_related)
        << what << " step " << t << ": reference merges " << Tuple(want_lowest) << " + "
        << Tuple(want_related) << ", got " << Tuple(got[t].lowest) << " + "
        << Tuple(got[t].most_related);
  }
}

TEST(L2hGolden, MatchesReferenceOnEveryCaseAndAggregation) {
  const nlohmann::json golden = LoadGoldens();
  ASSERT_GE(golden["cases"].size(), 8u);
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["name"];
    const Float32Array arr = ReadGoldenNpy(GoldenDir() + c["logits"].get<std::string>());
    ASSERT_EQ(arr.rows, c["rows"].get<int64_t>()) << name;
    ASSERT_EQ(arr.cols, c["cols"].get<int64_t>()) << name;
    const MatrixView logits(arr.data.data(), arr.rows, arr.cols);
    for (const auto& [agg_name, result] : c["results"].items()) {
      auto agg = ParseL2hAggregation(agg_name);
      ASSERT_TRUE(agg.ok()) << agg.status();
      for (int threads : {1, 2}) {
        L2hOptions options;
        options.aggregation = *agg;
        options.num_threads = threads;
        NullRunContext ctx;
        auto r = RunL2h(logits, options, ctx);
        ASSERT_TRUE(r.ok()) << r.status();
        ExpectSameSteps(result["steps"], r->steps,
                        name + "/" + agg_name + " threads=" + std::to_string(threads));
        ++checked;
      }
      // The first pass fed in uneven pieces, as an upload delivers rows.
      L2hFirstPass first(arr.rows, static_cast<int32_t>(arr.cols));
      for (int64_t row = 0, piece = 1; row < arr.rows; row += piece, piece = piece * 3 + 1) {
        const int64_t n = std::min(piece, arr.rows - row);
        ASSERT_TRUE(first.AddRows(arr.data.data() + row * arr.cols, n).ok());
      }
      L2hOptions options;
      options.aggregation = *agg;
      NullRunContext ctx;
      auto r = RunL2h(logits, options, ctx, &first);
      ASSERT_TRUE(r.ok()) << r.status();
      ExpectSameSteps(result["steps"], r->steps, name + "/" + agg_name + " first pass in pieces");
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(golden["cases"].size()) * 3 * 3);
}

// The deliberate tie cases must be what the goldens claim (so that a change
// of the generator cannot silently drop them).
TEST(L2hGolden, GoldensContainExactTiesAndNearTies) {
  const nlohmann::json golden = LoadGoldens();
  bool score_tie = false;
  bool rp_tie = false;
  bool near_tie = false;
  for (const auto& c : golden["cases"]) {
    for (const auto& [agg, r] : c["results"].items()) {
      score_tie |= r["exact_score_ties"].get<int>() > 0;
      rp_tie |= r["exact_rp_ties"].get<int>() > 0;
      if (!r["min_nonzero_gap"].is_null()) {
        near_tie |= r["min_nonzero_gap"].get<double>() < 1e-5;
      }
    }
  }
  EXPECT_TRUE(score_tie);
  EXPECT_TRUE(rp_tie);
  EXPECT_TRUE(near_tie);
}

}  // namespace
}  // namespace dendro
