// L2H, "Logits to Hierarchies" (Palumbo et al., Algorithm 1 and appendix A).
//
// Given the N x K logits of a pre-trained flat model, builds a binary
// hierarchy over the K clusters in K-1 merges. At each step the group with
// the lowest score s(G) (eq. 1) is merged with the group G' that maximises
// the mean over c in G' of rp(c) (eq. 2), the predicted probability the
// points of the lowest-scoring group would re-assign to c if its clusters
// were unavailable.
//
// Faithfulness: on every input in which every cluster receives at least one
// point, the merge sequence equals that of the appendix reference code,
// including its tie rules:
//   * groups live in a list in which the survivors keep their order and a
//     merged group (lowest-scoring group's clusters first, then the other
//     group's) is appended last;
//   * on equal scores the first group in list order wins (both argmin and
//     argmax);
//   * argmax over clusters breaks ties towards the lowest index.
//
// Empty clusters (no point has them as argmax) make the reference compute
// NaN means. Dendro's rule: the mean over an empty set is 0, so an empty
// cluster contributes nothing to a group's score and is merged early; when
// the lowest-scoring group has no points at all, its relatedness to a group
// G' is taken from the other direction: the mean over c in G' of the total
// softmax mass that the points of c put on the empty group's clusters.
//
// Heights: merge t (0-based) gets height t + 1, so the tree is ordered the
// way the algorithm built it and cutting to k clusters undoes the last k-1
// merges. The score of each merged group is kept in the result as well.
#ifndef DENDRO_CORE_L2H_L2H_H_
#define DENDRO_CORE_L2H_L2H_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/run_context.h"
#include "core/hierarchy/hierarchy.h"
#include "core/l2h/aggregation.h"
#include "core/l2h/first_pass.h"
#include "core/matrix/matrix.h"

namespace dendro {

struct L2hOptions {
  L2hAggregation aggregation = L2hAggregation::kSumOfMeans;
  int num_threads = 0;  // 0: DefaultThreads() (core/common/cpus.h)
  // Return the finished first pass (L2hResult::first_pass), e.g. to save it
  // for a later fit on these rows and more: a copy of 32 bytes per row.
  bool keep_first_pass = false;
};

struct L2hStep {
  // Groups as ordered cluster lists, exactly as the reference's tuples.
  std::vector<int32_t> lowest;      // G*
  std::vector<int32_t> most_related;  // G-dagger
  double lowest_score = 0.0;  // s(G*), eq. 1
  // mean over c in G-dagger of rp(c) (eq. 2), or of the reverse-direction
  // mass when G* has no points
  double relatedness = 0.0;
  double merged_score = 0.0;  // s(G* + G-dagger), the merged group's score
};

struct L2hResult {
  Hierarchy hierarchy;          // leaves = clusters 0..K-1, point_leaf = argmax
  std::vector<L2hStep> steps;   // K-1 merges in order
  std::vector<int64_t> cluster_sizes;  // |D^c|
  int32_t empty_clusters = 0;
  // With L2hOptions::keep_first_pass: the complete first pass of the logits.
  std::shared_ptr<const L2hFirstPass> first_pass;
};

// Validates (N >= 1, K >= 2, finite) and runs L2H. With `first_pass`, an
// L2hFirstPass of these same logits (first_pass.h), complete or holding the
// first rows only, the rows it holds are not passed over again (nor checked
// for finiteness, which AddRows did); the rest are; the result is the same.
// A first pass of another shape is InvalidArgument.
absl::StatusOr<L2hResult> RunL2h(const MatrixView& logits,
                                 const L2hOptions& options, RunContext& ctx,
                                 const L2hFirstPass* first_pass = nullptr);

// argmax per row, ties to the lowest index: the leaf a new point lands in.
std::vector<int32_t> ArgmaxRows(const MatrixView& logits);

}  // namespace dendro

#endif  // DENDRO_CORE_L2H_L2H_H_
