// Method: how the server fits, saves, loads and applies one algorithm.
//
// Each algorithm in core/ gets one Method here that adapts it to the
// service: it checks a JobSpec against a dataset before the job is queued,
// runs the fit inside a job, and turns the result into a FittedModel whose
// artifacts live in one directory. Adding a method = one file in
// server/methods/ plus a line in method.cc.
#ifndef DENDRO_SERVER_METHODS_METHOD_H_
#define DENDRO_SERVER_METHODS_METHOD_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/run_context.h"
#include "core/hierarchy/hierarchy.h"
#include "core/matrix/matrix.h"
#include "dendro/v1/dendro.pb.h"
#include "server/storage/dataset_store.h"
#include "server/storage/upload_preparation.h"

namespace dendro::server {

// Classifier output for a batch of rows (row-major blocks).
struct Prediction {
  int32_t top_k = 1;
  int32_t top_t = 0;                       // 0 when flat
  std::vector<int64_t> labels;             // rows x top_k, original labels
  std::vector<float> scores;               // rows x top_k
  std::vector<int32_t> superclasses;       // rows x top_t
  std::vector<int32_t> classes_evaluated;  // rows
};

// A classifier's classes: original label, super-class (-1 when flat) and
// training rows of each class, in the model's internal order.
struct ClassTable {
  std::vector<int64_t> labels;
  std::vector<int32_t> superclasses;
  std::vector<int64_t> train_counts;
  int32_t num_superclasses = 0;
  std::vector<std::string> names;  // each class's name (its label's digits by default)
};

struct PredictOptions {
  int32_t top_t = 0;  // 0: the model's default
  int32_t top_k = 1;
  bool flat = false;
};

// A fitted model, fresh from a job or loaded from disk. Immutable and
// shareable across threads.
class FittedModel {
 public:
  virtual ~FittedModel() = default;
  virtual std::string_view method() const = 0;
  // The tree exports, cuts and evaluations use: binary wherever the method
  // can refine it, so every cluster count is reachable.
  virtual const Hierarchy& tree() const = 0;
  // The method's own tree before refinement (n-ary for gHHC and hppca); the
  // same as tree() for methods whose trees are binary already.
  virtual const Hierarchy& coarse_tree() const { return tree(); }
  // Number of columns Assign expects.
  virtual int64_t input_dim() const = 0;
  // Human-readable facts stored with the registry entry.
  virtual std::map<std::string, std::string> metadata() const { return {}; }
  // Writes every artifact into the existing directory `dir` (atomically,
  // file by file).
  virtual absl::Status Save(const std::string& dir) const = 0;
  // Leaf cluster of each row; rows.cols() == input_dim() is checked by the
  // caller.
  virtual absl::StatusOr<std::vector<int32_t>> AssignLeaves(const MatrixView& rows) const = 0;
  // Classifiers override this; clustering models answer FailedPrecondition.
  virtual absl::StatusOr<Prediction> Predict(const MatrixView& rows,
                                             const PredictOptions& options) const;
  // Classifiers override this too; clustering models answer
  // FailedPrecondition.
  virtual absl::StatusOr<ClassTable> Classes() const;
  // Whether a few rows evaluated together cost clearly less per row than
  // each alone (they share a pass over the model's data): concurrent small
  // calls are then computed in batches (server/api/batcher.h). `options` is the
  // Predict's, or null for AssignLeaves. False unless measured to pay.
  virtual bool BatchingPays(const PredictOptions* options) const {
    (void)options;
    return false;
  }
};

// Submit-time resource limits. A spec must fit them before it is queued:
// a job that cannot fit would only fail (or take the process down) later.
struct JobLimits {
  // Estimated peak memory one job may use, in bytes.
  int64_t memory_bytes = int64_t{16} << 30;
};

// Threads a fit may run on this machine (the hardware's, which bounds
// OpenMP's), for the per-thread buffers of the memory bounds.
int FitThreads();

// Three quarters of the memory this process may use: the smaller of the
// machine's physical memory and its cgroup's memory.max.
int64_t DefaultJobMemoryBytes();

// InvalidArgument "<field> must be <= <limit> (<why>), got <value>" when
// value > limit.
absl::Status CheckAtMost(std::string_view field, int64_t value, int64_t limit,
                         std::string_view why);
// The same for a floating-point parameter: InvalidArgument unless value <=
// limit (so NaN and infinities are refused too).
absl::Status CheckRealAtMost(std::string_view field, double value, double limit,
                         std::string_view why);
// InvalidArgument naming the method, the estimate and the limit when
// `estimate_bytes` exceeds limits.memory_bytes; `what` says what dominates
// the estimate (e.g. "rows x components responsibilities").
absl::Status CheckMemory(std::string_view method, double estimate_bytes,
                         const JobLimits& limits, std::string_view what);

// Submit-time checks from the statistics the upload kept (Dataset.stats;
// a dataset without them passes). InvalidArgument, in the words the fit
// would use, when a column of `dataset` is constant.
absl::Status CheckNoConstantColumn(std::string_view method, const v1::Dataset& dataset);

// A warm start's metadata: "warm_start" = NAME:VERSION of spec.warm_start.
std::map<std::string, std::string> WarmStartMetadata(const v1::JobSpec& spec);
// Whether a warm start that ended with `warm` falls back to a fit from
// scratch: true for FailedPrecondition (the base cannot be continued), and
// "warm_start_note" in `md` then says why; false for OK; other errors are
// returned as they are.
absl::StatusOr<bool> FitsFromScratch(const absl::Status& warm,
                                     std::map<std::string, std::string>* md);
// InvalidArgument when the labels have fewer than `min_classes` classes or
// a class with fewer than `min_rows` rows.
absl::Status CheckClassSizes(std::string_view method, const v1::Dataset& dataset,
                             int64_t min_classes, int64_t min_rows);

class Method {
 public:
  virtual ~Method() = default;
  virtual std::string_view name() const = 0;
  // Called at submit time: InvalidArgument / FailedPrecondition if `spec`
  // cannot run on `dataset`, including every parameter whose size drives
  // memory or time beyond `limits` (the message names the field and limit).
  virtual absl::Status Validate(const v1::JobSpec& spec, const v1::Dataset& dataset,
                                const JobLimits& limits) const = 0;
  // An upper bound, in bytes, on the memory a fit of `spec` on `dataset`
  // adds to the process at its peak: every buffer it allocates and the
  // dataset's pages it maps and reads. Meaningful for a spec whose other
  // checks Validate passes; Validate refuses a spec whose bound exceeds
  // JobLimits, and the job records it (Job.memory_estimate_bytes).
  virtual double PeakMemoryBytes(const v1::JobSpec& spec, const v1::Dataset& dataset) const = 0;
  // Whether JobSpec.warm_start applies: BaseModel then names it, and FitFrom
  // starts from it (the job manager has checked that it is of this method
  // and was fitted on the dataset's lineage, no later generation).
  virtual bool warm_starts() const { return false; }
  // Whether the fitted tree's leaves are given classes that keep their
  // identity across fits (a pre-trained model's clusters, a classifier's
  // labels), rather than clusters the fit finds: the registry then matches
  // versions' clusters through their leaves, else through their points.
  virtual bool leaves_are_classes() const { return false; }
  // Why JobSpec.leaf_names cannot apply, or "" when the method names its
  // leaves from them (then Validate checks their count).
  virtual std::string_view leaf_names_refusal() const {
    return "its leaves are found by the fit, so they cannot be named beforehand";
  }
  virtual absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset& dataset,
                                                           const v1::JobSpec& spec,
                                                           RunContext& ctx) const = 0;
  virtual absl::StatusOr<std::unique_ptr<FittedModel>> Load(const std::string& dir) const = 0;
  // Artifact files Load leaves on disk (read only on demand, e.g. by a warm
  // start): the model cache does not charge their bytes.
  virtual std::vector<std::string> files_left_on_disk() const { return {}; }

  // The work this method does on an upload's rows while they arrive, for
  // uploads whose DatasetHeader.prepare is its name() (see
  // server/storage/upload_preparation.h); null when it has none. Its result reaches
  // Fit as LoadedDataset::prepared().
  virtual const UploadPreparer* upload_preparer() const { return nullptr; }

  // Methods that extend an existing model (e.g. adding classes to a
  // classifier) name it here. The job manager then checks at submit time
  // that it exists, uses its name when the spec gives none, loads it when the
  // job runs and calls FitFrom instead of Fit. By default: the spec's
  // warm_start, for a method that warm_starts().
  virtual std::optional<v1::ModelRef> BaseModel(const v1::JobSpec& spec) const {
    if (warm_starts() && spec.has_warm_start()) return spec.warm_start();
    return std::nullopt;
  }
  virtual absl::StatusOr<std::unique_ptr<FittedModel>> FitFrom(const FittedModel& base,
                                                               const LoadedDataset& dataset,
                                                               const v1::JobSpec& spec,
                                                               RunContext& ctx) const {
    return absl::UnimplementedError("this method does not extend models");
  }
};

// The method selected by spec's `method` oneof; InvalidArgument if unset.
absl::StatusOr<const Method*> MethodForSpec(const v1::JobSpec& spec);
// By registry name ("l2h"); NotFound if unknown.
absl::StatusOr<const Method*> MethodByName(std::string_view name);
// Every method's upload preparer, for the dataset store.
std::vector<const UploadPreparer*> UploadPreparers();

// Shared by the hierarchy-based methods: tree.json + point_leaf.npy.
absl::Status SaveTree(const Hierarchy& tree, const std::string& dir);
absl::StatusOr<Hierarchy> LoadTree(const std::string& dir);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_METHODS_METHOD_H_
