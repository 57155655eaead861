// UploadStats: what an upload's rows and labels say about the methods that
// can fit them, gathered as the bytes arrive (UploadValidator feeds it every
// whole float and label it accepts), so that a job that would fail on them
// is refused when it is submitted rather than after it queued and ran
// (Method::Validate reads Dataset.stats).
//
// Kept: which columns are constant (every row equals row 0, bit for bit:
// t-NEB's scale matrices are singular on them), and with labels each class's
// row count (hPPCA needs two rows per class, and two classes). The cost is
// one comparison per float until every column has varied (usually within
// the first rows; then nothing), and a hash map of at most kMaxClasses
// labels.
#ifndef DENDRO_SERVER_STORAGE_UPLOAD_STATS_H_
#define DENDRO_SERVER_STORAGE_UPLOAD_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "dendro/v1/dendro.pb.h"

namespace dendro::server {

class UploadStats {
 public:
  // More distinct labels than this and the class counts are not kept
  // (DatasetStats.num_classes is then 0: unknown).
  static constexpr int64_t kMaxClasses = int64_t{1} << 20;
  // Constant columns listed by index in DatasetStats (all are counted).
  static constexpr int kMaxListedColumns = 16;

  void Begin(int64_t rows, int64_t cols, bool has_labels);
  // `n` floats that follow each other in row-major order, starting at
  // element `first_index`. Calls must come in order: row 0 first.
  void AddFloats(int64_t first_index, const float* values, int64_t n);
  void AddLabels(const int64_t* labels, int64_t n);
  // The statistics of everything added (meaningful once the upload is complete).
  v1::DatasetStats ToProto() const;

 private:
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  bool has_labels_ = false;
  std::vector<float> first_row_;
  std::vector<uint8_t> varies_;  // per column: some row differs from row 0
  // Every column varies: nothing is left to compare (real data gets here
  // within its first rows, so the upload pays the comparison only briefly).
  bool all_vary_ = false;
  absl::flat_hash_map<int64_t, int64_t> class_rows_;
  bool too_many_classes_ = false;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_UPLOAD_STATS_H_
