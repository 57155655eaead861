// The request layer: what a call means, whichever transport carried it.
//
// The gRPC services (server/transport/services.cc) and the HTTP JSON API
// (server/transport/http_json.cc) translate a request into a call here and the answer
// back, and decide nothing else: listing pages and their tokens, model
// references written as text, the rows of an Assign or Predict, how large
// an answer may grow, and whether a job has finished are decided here once.
// The vocabulary is the dendro.v1 messages, which both transports share; no
// gRPC or HTTP type appears, so a further transport is one more translation.
// Authorisation stays with the transports (they know who is calling).
#ifndef DENDRO_SERVER_API_API_H_
#define DENDRO_SERVER_API_API_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/matrix/matrix.h"
#include "dendro/v1/dendro.pb.h"
#include "server/api/batcher.h"
#include "server/storage/dataset_store.h"
#include "server/jobs/job_manager.h"
#include "server/base/job_lifecycle.h"
#include "server/methods/method.h"
#include "server/models/model_registry.h"
#include "server/api/serving_gate.h"

namespace dendro::server {

// A model reference from the text forms of URLs and the CLI: `version`
// empty or "latest" (the newest), a number >= 1, or a label.
absl::StatusOr<v1::ModelRef> ModelRefFromText(const std::string& name,
                                              const std::string& version);

// The most rows an Assign or Predict asked with `would_wait` computes on
// the calling thread (see Api::Assign): larger calls take long enough that a
// hand-over costs them nothing, and they would hold up the calls behind them.
inline constexpr int64_t kMaxRowsInline = 64;

// What an answer costs its transport, in encoded bytes: per row, and per
// label/score pair and super-class of a prediction. The request layer
// refuses, before computing, an answer that could exceed the message limit.
struct AnswerCost {
  int64_t per_row = 0;
  int64_t per_label = 0;
  int64_t per_superclass = 0;
};

// What an Assign answer costs its transport, in encoded bytes a row: the
// leaf and cluster, and with stable ids their ids too.
struct AssignCost {
  int64_t per_row = 0;
  int64_t per_row_stable_ids = 0;
};

// An Assign answer: each row's leaf and its cluster at `level` (the leaf
// itself at level 0).
struct Assignment {
  std::vector<int32_t> leaves;
  std::vector<int32_t> clusters;
  int32_t level = 0;
  // When asked for: the stable ids (core/diff/stable_ids.h) of the same.
  std::vector<int64_t> stable_leaves, stable_clusters;
};

// How a transport names a call and its parts in messages: the call
// ("predict"), and as prefixes the rows ("predict: ", "inputs[0]: ") and the
// parameters ("predict: ", "parameters."); and what it offers a caller whose
// answer would be too large (appended to that message; may be empty).
struct CallWording {
  const char* what;  // the call, for messages about it as a whole ("predict")
  const char* rows;
  const char* params;
  const char* too_large_hint = "";
};

struct ApiDeps {
  DatasetStore* datasets = nullptr;
  JobManager* jobs = nullptr;
  ModelRegistry* models = nullptr;
  // The largest answer a call may return (--max_message_mb).
  int64_t max_message_bytes = 64 << 20;
  // Bounds the Assign and Predict computations at once and the calls
  // waiting for one; null: no bound.
  ServingGate* gate = nullptr;
  // Coalesces concurrent small Assign and Predict calls on one model (it
  // asks `gate` itself); null: every call is computed alone.
  Batcher* batcher = nullptr;
};

class Api {
 public:
  explicit Api(ApiDeps deps) : deps_(deps) {}

  // Listings. page_size 0 means 50 and is capped at 1,000; a negative one
  // is INVALID_ARGUMENT. Page tokens are opaque (AIP-158) and the same for
  // both transports: a token from one works with the other. Unfinished jobs
  // are listed as the job manager sees them now (progress, stage).
  absl::StatusOr<v1::ListDatasetsResponse> ListDatasets(const v1::ListDatasetsRequest& req) const;
  // A dataset as users name it: its id, "LINEAGE" (the newest generation)
  // or "LINEAGE:G" (DatasetStore::Resolve).
  absl::StatusOr<v1::Dataset> GetDataset(const std::string& ref) const;
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req) const;
  absl::StatusOr<v1::ListModelsResponse> ListModels(const v1::ListModelsRequest& req) const;
  // Every version of `name`, oldest first.
  absl::StatusOr<std::vector<v1::Model>> AllVersions(const std::string& name) const;

  absl::StatusOr<LoadedModel> Load(const v1::ModelRef& ref) const {
    return deps_.models->Load(ref);
  }

  // A classifier's classes (labels, super-classes, counts, names), for
  // both transports; FAILED_PRECONDITION for a model that has none.
  absl::StatusOr<v1::GetClassesResponse> GetClasses(const v1::ModelRef& ref) const;
  // Two models' trees compared (core/diff/diff.h); RESOURCE_EXHAUSTED when
  // the answer (the tanglegram, mostly) would not fit one message.
  absl::StatusOr<v1::DiffModelsResponse> DiffModels(const v1::DiffModelsRequest& req) const;

  // Rows sent as rows x cols little-endian float32 bytes: checked against
  // the model (shape, size, finite values) and viewed in place, copied into
  // `aligned` only when `data` is not float-aligned.
  absl::StatusOr<MatrixView> RowsFromBytes(const CallWording& w, const LoadedModel& model,
                                           int64_t rows, int64_t cols, const std::string& data,
                                           std::vector<float>* aligned) const;
  // Rows a transport has already decoded into floats: the same checks.
  absl::Status CheckRows(const CallWording& w, const LoadedModel& model,
                         const MatrixView& rows) const;

  // Assign and Predict compute once the request is checked and the serving
  // gate lets them in before `deadline` (the client's; absl::InfiniteFuture()
  // for none): see server/api/serving_gate.h for the refusals. Small calls may be
  // computed together with others on the same model, where the model says
  // that pays (FittedModel::BatchingPays, server/api/batcher.h).
  //
  // They wait on the calling thread for their turn (a computing slot, a
  // batch filling up) unless `would_wait` is given. Then a call computes
  // only if it can start at once (a slot is free, nobody waits for one, and
  // no batch delay applies) and has at most kMaxRowsInline rows;
  // otherwise it sets *would_wait, computes nothing
  // and returns an empty answer, and the caller repeats it, with
  // `would_wait` null, on a thread that may wait. Refusals (bad requests,
  // a deadline already past) are returned either way.
  // Assign: `level` in [0, leaves].
  absl::StatusOr<Assignment> Assign(const CallWording& w, const LoadedModel& model,
                                    const MatrixView& rows, int64_t level, bool stable_ids,
                                    const AssignCost& cost, absl::Time deadline,
                                    bool* would_wait = nullptr) const;
  // Predict: top_k 0 means 1; top_k and top_t >= 0.
  absl::StatusOr<Prediction> Predict(const CallWording& w, const LoadedModel& model,
                                     const MatrixView& rows, int64_t top_k, int64_t top_t,
                                     bool flat, const AnswerCost& cost, absl::Time deadline,
                                     bool* would_wait = nullptr) const;

  // RESOURCE_EXHAUSTED for an answer of `rows` rows found to be `bytes`
  // long once built, over the message limit.
  absl::Status AnswerTooLarge(const CallWording& w, int64_t rows, int64_t bytes) const;

  int64_t max_message_bytes() const { return deps_.max_message_bytes; }

 private:
  // Runs `compute` for `rows` through the batcher when `batch` (the model
  // says batching pays) and there is one, else alone after the gate; with
  // `would_wait`, only if it can start at once (see Assign).
  absl::Status Compute(const CallWording& w, const Batcher::Key& key, bool batch,
                       const MatrixView& rows, absl::Time deadline, void* out,
                       Batcher::Compute compute, bool* would_wait) const;

  ApiDeps deps_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_API_API_H_
