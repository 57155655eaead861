#include "server/api/api.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/diff/diff.h"
#include "core/diff/tanglegram.h"

namespace dendro::server {
namespace {

constexpr int kDefaultPageSize = 50;
constexpr int kMaxPageSize = 1000;

// No request can carry more rows than this many bytes of float32 (gRPC's own
// ceiling is 2 GiB).
constexpr int64_t kMaxRequestBytes = int64_t{2} << 30;

absl::StatusOr<int> PageLimit(int64_t requested) {
  if (requested < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must be >= 0 (0: ", kDefaultPageSize, "), got ", requested));
  }
  if (requested == 0) return kDefaultPageSize;
  return static_cast<int>(std::min<int64_t>(requested, kMaxPageSize));
}

// Opaque AIP-158 token: web-safe base64 of "<kind>:<scope>:<last seq>". The
// scope ties a token to its listing's filter (a model name).
std::string MakeToken(const char* kind, const std::string& scope, int64_t seq) {
  return absl::WebSafeBase64Escape(absl::StrCat(kind, ":", scope, ":", seq));
}

absl::StatusOr<int64_t> ParseToken(const std::string& token, const char* kind,
                                   const std::string& scope) {
  if (token.empty()) return 0;
  std::string raw;
  const std::string prefix = absl::StrCat(kind, ":", scope, ":");
  int64_t seq = 0;
  if (!absl::WebSafeBase64Unescape(token, &raw) || !absl::StartsWith(raw, prefix) ||
      !absl::SimpleAtoi(raw.substr(prefix.size()), &seq) || seq < 0) {
    return absl::InvalidArgumentError("page_token is not valid for this request");
  }
  return seq;
}

// One listing page into `resp`: the items by `add`, and a token when more
// remain.
template <typename T, typename Resp, typename AddFn>
void FillPage(Page<T>& page, const char* kind, const std::string& scope, Resp* resp, AddFn add) {
  for (T& item : page.items) *add(resp) = std::move(item);
  if (page.more) resp->set_next_page_token(MakeToken(kind, scope, page.last_seq));
}

absl::Status CheckColumns(const CallWording& w, const LoadedModel& model, int64_t cols) {
  if (cols == model.model->input_dim()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(w.rows, "model '", model.info().name(), "' v",
                                                 model.info().version(), " expects ",
                                                 model.model->input_dim(), " columns, got ",
                                                 cols));
}

// What a batch computes (Batcher::Key::kind).
constexpr int32_t kAssignLeaves = 0;
constexpr int32_t kPredict = 1;

// Rows [first, first + count) of a prediction.
Prediction SliceRows(const Prediction& p, int64_t first, int64_t count) {
  Prediction out;
  out.top_k = p.top_k;
  out.top_t = p.top_t;
  auto slice = [first, count](const auto& all, int64_t per_row, auto& part) {
    part.assign(all.begin() + first * per_row, all.begin() + (first + count) * per_row);
  };
  slice(p.labels, p.top_k, out.labels);
  slice(p.scores, p.top_k, out.scores);
  slice(p.superclasses, p.top_t, out.superclasses);
  slice(p.classes_evaluated, 1, out.classes_evaluated);
  return out;
}

}  // namespace

absl::StatusOr<v1::ModelRef> ModelRefFromText(const std::string& name,
                                              const std::string& version) {
  v1::ModelRef ref;
  ref.set_name(name);
  DENDRO_RETURN_IF_ERROR(ValidateModelName(ref.name()));
  if (version.empty() || version == "latest") return ref;
  if (absl::ascii_isdigit(static_cast<unsigned char>(version[0]))) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(version, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model version must be a number >= 1, a label or 'latest', got '",
          absl::CHexEscape(version.substr(0, 64)), "'"));
    }
    ref.set_version(v);
    return ref;
  }
  DENDRO_RETURN_IF_ERROR(ValidateLabel(version));
  ref.set_label(version);
  return ref;
}

absl::StatusOr<v1::Dataset> Api::GetDataset(const std::string& ref) const {
  return deps_.datasets->Resolve(ref);
}

absl::StatusOr<v1::ListDatasetsResponse> Api::ListDatasets(
    const v1::ListDatasetsRequest& req) const {
  DENDRO_ASSIGN_OR_RETURN(int64_t after, ParseToken(req.page_token(), "ds", ""));
  DENDRO_ASSIGN_OR_RETURN(int limit, PageLimit(req.page_size()));
  DENDRO_ASSIGN_OR_RETURN(Page<v1::Dataset> page, deps_.datasets->List(after, limit));
  v1::ListDatasetsResponse resp;
  FillPage(page, "ds", "", &resp, [](auto* r) { return r->add_datasets(); });
  return resp;
}

namespace {

// The catalogue's listing for a request: its order, and its states as a
// mask (INVALID_ARGUMENT for a value that is not a state).
absl::StatusOr<JobListing> JobListingOf(const v1::ListJobsRequest& req) {
  JobListing listing;
  listing.newest_first = req.newest_first();
  for (int state : req.states()) {
    if (state <= v1::JOB_STATE_UNSPECIFIED || state > v1::JobState_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "states: ", state, " is not a job state (QUEUED, RUNNING, SUCCEEDED, FAILED or "
          "CANCELLED)"));
    }
    listing.state_mask |= 1u << state;
  }
  return listing;
}

}  // namespace

absl::StatusOr<v1::ListJobsResponse> Api::ListJobs(const v1::ListJobsRequest& req) const {
  DENDRO_ASSIGN_OR_RETURN(const JobListing listing, JobListingOf(req));
  // A token continues only the listing it came from: same order, same states.
  const std::string scope =
      absl::StrCat(listing.newest_first ? "new" : "old", ".", listing.state_mask);
  DENDRO_ASSIGN_OR_RETURN(int64_t cursor, ParseToken(req.page_token(), "job", scope));
  DENDRO_ASSIGN_OR_RETURN(int limit, PageLimit(req.page_size()));
  DENDRO_ASSIGN_OR_RETURN(Page<v1::Job> page, deps_.jobs->List(cursor, limit, listing));
  for (v1::Job& job : page.items) {
    // The catalogue holds states, not progress: the manager has the live
    // record of an unfinished job.
    if (IsFinished(job.state())) continue;
    if (absl::StatusOr<v1::Job> live = deps_.jobs->Get(job.id()); live.ok()) {
      job = *std::move(live);
    }
  }
  v1::ListJobsResponse resp;
  FillPage(page, "job", scope, &resp, [](auto* r) { return r->add_jobs(); });
  return resp;
}

absl::StatusOr<v1::GetClassesResponse> Api::GetClasses(const v1::ModelRef& ref) const {
  DENDRO_ASSIGN_OR_RETURN(LoadedModel loaded, Load(ref));
  DENDRO_ASSIGN_OR_RETURN(ClassTable table, loaded.model->Classes());
  v1::GetClassesResponse resp;
  resp.set_model_version(loaded.info().version());
  resp.mutable_labels()->Add(table.labels.begin(), table.labels.end());
  resp.mutable_superclasses()->Add(table.superclasses.begin(), table.superclasses.end());
  resp.mutable_train_counts()->Add(table.train_counts.begin(), table.train_counts.end());
  resp.set_num_superclasses(table.num_superclasses);
  for (std::string& name : table.names) resp.add_names(std::move(name));
  return resp;
}

namespace {

// "name:3" for messages and the tanglegram's captions.
std::string RefName(const v1::Model& m) { return absl::StrCat(m.name(), ":", m.version()); }

}  // namespace

absl::StatusOr<v1::DiffModelsResponse> Api::DiffModels(const v1::DiffModelsRequest& req) const {
  DENDRO_ASSIGN_OR_RETURN(LoadedModel a, Load(req.a()));
  DENDRO_ASSIGN_OR_RETURN(LoadedModel b, Load(req.b()));
  const Hierarchy& ta = a.model->tree();
  const Hierarchy& tb = b.model->tree();
  absl::StatusOr<DiffReport> report = DiffHierarchies(ta, tb);
  if (!report.ok()) {
    return absl::Status(report.status().code(),
                        absl::StrCat("diff ", RefName(a.info()), " vs ", RefName(b.info()), ": ",
                                     report.status().message()));
  }
  v1::DiffModelsResponse resp;
  resp.set_report_json(DiffReportJson(*report));
  if (req.tanglegram()) {
    TanglegramOptions options;
    options.a_label = absl::StrCat("A: ", RefName(a.info()));
    options.b_label = absl::StrCat("B: ", RefName(b.info()));
    DENDRO_ASSIGN_OR_RETURN(std::string svg, DiffTanglegramSvg(ta, tb, *report, options));
    resp.set_tanglegram_svg(std::move(svg));
  }
  *resp.mutable_a() = a.info();
  *resp.mutable_b() = b.info();
  const auto bytes = static_cast<int64_t>(resp.ByteSizeLong());
  if (bytes > deps_.max_message_bytes - 1024) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "diff: the answer is ", bytes, " bytes, over the ", deps_.max_message_bytes >> 20,
        " MiB message limit", req.tanglegram() ? "; ask without the tanglegram" : ""));
  }
  return resp;
}

absl::StatusOr<v1::ListModelsResponse> Api::ListModels(const v1::ListModelsRequest& req) const {
  if (!req.name().empty()) DENDRO_RETURN_IF_ERROR(ValidateModelName(req.name()));
  DENDRO_ASSIGN_OR_RETURN(int64_t after, ParseToken(req.page_token(), "model", req.name()));
  DENDRO_ASSIGN_OR_RETURN(int limit, PageLimit(req.page_size()));
  DENDRO_ASSIGN_OR_RETURN(Page<v1::Model> page, deps_.models->List(req.name(), after, limit));
  v1::ListModelsResponse resp;
  FillPage(page, "model", req.name(), &resp, [](auto* r) { return r->add_models(); });
  return resp;
}

absl::StatusOr<std::vector<v1::Model>> Api::AllVersions(const std::string& name) const {
  std::vector<v1::Model> out;
  int64_t after = 0;
  for (;;) {
    DENDRO_ASSIGN_OR_RETURN(Page<v1::Model> page, deps_.models->List(name, after, kMaxPageSize));
    for (v1::Model& m : page.items) out.push_back(std::move(m));
    if (!page.more) return out;
    after = page.last_seq;
  }
}

absl::StatusOr<MatrixView> Api::RowsFromBytes(const CallWording& w, const LoadedModel& model,
                                              int64_t rows, int64_t cols,
                                              const std::string& data,
                                              std::vector<float>* aligned) const {
  if (rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat(w.rows, "rows must be >= 1, got ", rows));
  }
  DENDRO_RETURN_IF_ERROR(CheckColumns(w, model, cols));
  // cols >= 1 here (it equals the model's input dimension).
  if (rows > kMaxRequestBytes / 4 / cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(w.rows, rows, " rows x ", cols, " columns is over the ",
                     kMaxRequestBytes >> 30, " GiB a request can carry"));
  }
  if (static_cast<int64_t>(data.size()) != rows * cols * 4) {
    return absl::InvalidArgumentError(absl::StrCat(w.rows, "data has ", data.size(),
                                                   " bytes, expected rows x cols x 4 = ",
                                                   rows * cols * 4));
  }
  const float* p = reinterpret_cast<const float*>(data.data());
  if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) {
    aligned->resize(rows * cols);
    std::memcpy(aligned->data(), data.data(), data.size());
    p = aligned->data();
  }
  DENDRO_RETURN_IF_ERROR(ValidateFinite(p, rows, cols));
  return MatrixView(p, rows, cols);
}

absl::Status Api::CheckRows(const CallWording& w, const LoadedModel& model,
                            const MatrixView& rows) const {
  DENDRO_RETURN_IF_ERROR(CheckColumns(w, model, rows.cols()));
  return ValidateFinite(rows);
}

absl::Status Api::AnswerTooLarge(const CallWording& w, int64_t rows, int64_t bytes) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      w.rows, "the answer for ", rows, " rows would be about ", bytes >> 20, " MiB, over the ",
      deps_.max_message_bytes >> 20, " MiB message limit; send fewer rows per request",
      w.too_large_hint));
}

absl::StatusOr<Assignment> Api::Assign(const CallWording& w, const LoadedModel& model,
                                       const MatrixView& rows, int64_t level, bool stable_ids,
                                       const AssignCost& cost, absl::Time deadline,
                                       bool* would_wait) const {
  const Hierarchy& tree = model.model->tree();
  const int64_t per_row = cost.per_row + (stable_ids ? cost.per_row_stable_ids : 0);
  if (level < 0 || level > tree.num_leaves()) {
    return absl::InvalidArgumentError(absl::StrCat(w.params, "level must be in [0, ",
                                                   tree.num_leaves(), "], got ", level));
  }
  if (rows.rows() > deps_.max_message_bytes / per_row) {
    return absl::ResourceExhaustedError(absl::StrCat(
        w.rows, "the answer for ", rows.rows(), " rows could exceed the ",
        deps_.max_message_bytes >> 20, " MiB message limit; send at most ",
        deps_.max_message_bytes / per_row, " rows per request", w.too_large_hint));
  }
  Assignment out;
  out.level = static_cast<int32_t>(level);
  const FittedModel& fitted = *model.model;
  auto compute = [&fitted](const MatrixView& all,
                           absl::Span<const Batcher::Share> shares) -> absl::Status {
    DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> leaves, fitted.AssignLeaves(all));
    if (shares.size() == 1) {
      *static_cast<std::vector<int32_t>*>(shares[0].out) = std::move(leaves);
      return absl::OkStatus();
    }
    for (const Batcher::Share& s : shares) {
      static_cast<std::vector<int32_t>*>(s.out)->assign(leaves.begin() + s.offset,
                                                         leaves.begin() + s.offset + s.rows);
    }
    return absl::OkStatus();
  };
  DENDRO_RETURN_IF_ERROR(Compute(w, Batcher::Key{&fitted, kAssignLeaves},
                                 fitted.BatchingPays(nullptr), rows, deadline, &out.leaves, compute,
                                 would_wait));
  if (would_wait != nullptr && *would_wait) return Assignment{};
  out.clusters = out.leaves;
  if (level > 0) {
    DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> cut, tree.CutToK(out.level));
    for (int32_t& c : out.clusters) c = cut[c];
  }
  if (stable_ids) {
    const StableIds& ids = *model.stable_ids;
    DENDRO_ASSIGN_OR_RETURN(std::vector<int64_t> at_level, StableIdsAtLevel(tree, ids, out.level));
    out.stable_leaves.reserve(out.leaves.size());
    out.stable_clusters.reserve(out.leaves.size());
    for (int32_t leaf : out.leaves) {
      out.stable_leaves.push_back(ids.node[leaf]);
      out.stable_clusters.push_back(at_level[leaf]);
    }
  }
  return out;
}

absl::StatusOr<Prediction> Api::Predict(const CallWording& w, const LoadedModel& model,
                                        const MatrixView& rows, int64_t top_k, int64_t top_t,
                                        bool flat, const AnswerCost& cost, absl::Time deadline,
                                        bool* would_wait) const {
  if (top_k < 0 || top_t < 0 || top_k > std::numeric_limits<int32_t>::max() ||
      top_t > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(w.params, "top_k and top_t must be >= 0"));
  }
  PredictOptions options;
  options.top_t = static_cast<int32_t>(top_t);
  options.top_k = top_k == 0 ? 1 : static_cast<int32_t>(top_k);
  options.flat = flat;
  // Refuse before computing an answer that could not be sent.
  const int64_t classes = std::max<int64_t>(1, model.model->tree().num_leaves());
  const int64_t per_row = std::min<int64_t>(options.top_k, classes) * cost.per_label +
                          std::min<int64_t>(options.top_t, classes) * cost.per_superclass +
                          cost.per_row;
  if (rows.rows() > deps_.max_message_bytes / per_row) {
    return absl::ResourceExhaustedError(absl::StrCat(
        w.rows, "the answer for ", rows.rows(), " rows could exceed the ",
        deps_.max_message_bytes >> 20, " MiB message limit; send at most ",
        deps_.max_message_bytes / per_row, " rows per request", w.too_large_hint));
  }
  const FittedModel& fitted = *model.model;
  auto compute = [&fitted, &options](const MatrixView& all,
                                     absl::Span<const Batcher::Share> shares) -> absl::Status {
    DENDRO_ASSIGN_OR_RETURN(Prediction p, fitted.Predict(all, options));
    if (shares.size() == 1) {
      *static_cast<Prediction*>(shares[0].out) = std::move(p);
      return absl::OkStatus();
    }
    for (const Batcher::Share& s : shares) {
      *static_cast<Prediction*>(s.out) = SliceRows(p, s.offset, s.rows);
    }
    return absl::OkStatus();
  };
  Prediction out;
  const Batcher::Key key{&fitted, kPredict, options.top_k, options.top_t, options.flat ? 1 : 0};
  DENDRO_RETURN_IF_ERROR(
      Compute(w, key, fitted.BatchingPays(&options), rows, deadline, &out, compute, would_wait));
  return out;
}

absl::Status Api::Compute(const CallWording& w, const Batcher::Key& key, bool batch,
                          const MatrixView& rows, absl::Time deadline, void* out,
                          Batcher::Compute compute, bool* would_wait) const {
  const Batcher::Share share{0, rows.rows(), out};
  if (would_wait != nullptr) {
    // A batch that waits for company is formed on threads that may wait;
    // and a large call computes on one too, so that it does not hold up the
    // small calls behind it on the caller's thread.
    const Batcher* b = deps_.batcher;
    *would_wait = (batch && b != nullptr && rows.rows() < b->options().max_rows &&
                   b->options().max_delay > absl::ZeroDuration()) ||
                  rows.rows() > kMaxRowsInline;
    if (*would_wait) return absl::OkStatus();
    std::optional<ServingGate::Slot> slot;
    if (deps_.gate != nullptr) {
      DENDRO_ASSIGN_OR_RETURN(std::optional<ServingGate::Slot> free_now,
                              deps_.gate->TryEnter(w.what, deadline));
      *would_wait = !free_now.has_value();
      if (*would_wait) return absl::OkStatus();
      slot.emplace(std::move(*free_now));
    }
    // Nobody waits for a slot, so no batch is open that this call could join.
    return compute(rows, absl::MakeConstSpan(&share, 1));
  }
  if (batch && deps_.batcher != nullptr) {
    return deps_.batcher->Run(w.what, key, rows, deadline, out, compute);
  }
  std::optional<ServingGate::Slot> slot;
  if (deps_.gate != nullptr) {
    DENDRO_ASSIGN_OR_RETURN(ServingGate::Slot s, deps_.gate->Enter(w.what, deadline));
    slot.emplace(std::move(s));
  }
  return compute(rows, absl::MakeConstSpan(&share, 1));
}

}  // namespace dendro::server
