#include "server/transport/services.h"

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/hierarchy/export.h"
#include "core/io/npy.h"
#include "dendro/v1/dendro.grpc.pb.h"
#include "server/api/api.h"
#include "server/base/client_status.h"
#include "server/base/logging.h"
#include "server/base/memory.h"
#include "server/security/auth.h"
#include "server/security/caller.h"
#include "spdlog/spdlog.h"

namespace dendro::server {
namespace {

// The status a client sees: paths cut from the message (see ForClient).
// Server-side faults are logged in full first.
grpc::Status ToGrpc(const absl::Status& s, const ServiceDeps& deps) {
  if (s.ok()) return grpc::Status::OK;
  // Every failed call leaves one line (with the request id the client got).
  if (s.code() == absl::StatusCode::kInternal || s.code() == absl::StatusCode::kDataLoss ||
      s.code() == absl::StatusCode::kUnknown) {
    spdlog::error("request failed: {}", s.ToString());
  } else {
    spdlog::info("request failed: {}", s.ToString());
  }
  const absl::Status out = ForClient(s, deps.data_dir);
  return grpc::Status(static_cast<grpc::StatusCode>(out.code()), std::string(out.message()));
}

// Base of the three services: holds the dependencies and converts statuses.
class ServiceBase {
 protected:
  explicit ServiceBase(ServiceDeps deps)
      : deps_(std::move(deps)),
        api_(ApiDeps{deps_.datasets, deps_.jobs, deps_.models, deps_.max_message_bytes,
                     deps_.gate, deps_.batcher}) {}
  grpc::Status ToGrpc(const absl::Status& s) const { return server::ToGrpc(s, deps_); }
  // Who is calling and whether they may call `rpc` (see server/security/auth.h).
  // Refusals are logged for the audit trail, with the peer.
  absl::StatusOr<Principal> Authorize(grpc::ServerContextBase* ctx, Rpc rpc) const {
    // Every call gets a request id, in its trailing metadata and on every
    // log line the handler writes. A client may propose its own.
    LogContext& log = ThreadLogContext();
    log = LogContext();
    const auto& md = ctx->client_metadata();
    if (auto it = md.find("x-request-id"); it != md.end() && IsRequestId(it->second)) {
      log.request_id.assign(it->second.data(), it->second.size());
    } else {
      log.request_id = NewRequestId();
    }
    ctx->AddTrailingMetadata("x-request-id", log.request_id);
    const std::string_view method = RuleFor(rpc).method;
    log.rpc = std::string(method.substr(method.rfind('/') + 1));
    std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    absl::StatusOr<Principal> who = IdentifyCaller(*deps_.auth, md, auth.get());
    if (!who.ok()) {
      spdlog::warn("audit: {} refused: {} (peer {})", method, std::string(who.status().message()),
                   ctx->peer());
      return who.status();
    }
    if (absl::Status allowed = Authenticator::Authorize(*who, rpc); !allowed.ok()) {
      spdlog::warn("audit: {} refused for '{}': {} (peer {})", method, who->name,
                   std::string(allowed.message()), ctx->peer());
      return allowed;
    }
    log.principal = who->name;
    return who;
  }
  // A client-proposed request id: 1 to 64 characters [A-Za-z0-9._-].
  static bool IsRequestId(const grpc::string_ref& v) {
    if (v.empty() || v.size() > 64) return false;
    for (char c : v) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
        return false;
      }
    }
    return true;
  }
  // A label exempts its version from the name's retention policy, which
  // only an admin sets, and deleting a version is an admin's call too. So
  // while a name has a policy, moving or removing a label (which leaves its
  // version to retention) needs the admin role; adding a label, or any label
  // change on a name without a policy, stays a writer's.
  grpc::Status CheckRetentionExemption(const Principal& who, const std::string& name,
                                       const std::string& label, int64_t new_version,
                                       grpc::ServerContext* ctx) const {
    if (who.role >= Role::kAdmin) return grpc::Status::OK;
    absl::StatusOr<std::optional<int64_t>> lost =
        deps_.models->RetentionExemptionLost(name, label, new_version);
    if (!lost.ok()) return ToGrpc(lost.status());
    if (!lost->has_value()) return grpc::Status::OK;
    const std::string why = absl::StrCat(
        new_version == ModelRegistry::kRemoveLabel ? "removing" : "moving", " label '", label,
        "' of model '", name, "' would leave v", **lost,
        " to the name's retention policy, which may delete it; while a retention policy is "
        "set, moving or removing a label needs the admin role (as deleting a version does)");
    Audit(who, "was refused moving label", absl::StrCat(name, "@", label), ctx,
          grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why));
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why);
  }

  // Records a destructive call for the audit trail.
  static void Audit(const Principal& who, const char* what, const std::string& target,
                    grpc::ServerContext* ctx, const grpc::Status& outcome) {
    spdlog::info("audit: '{}' {} {} (peer {}): {}", who.name, what, target, ctx->peer(),
                 outcome.ok() ? std::string("OK") : outcome.error_message());
  }

  // What ends a stream whose client has gone quiet.
  enum class Idle {
    kNone,    // never timed out here (the handler ends it by itself)
    kUpload,  // CANCELLED after --upload_idle_seconds (uploads, tree downloads)
    kStream,  // DEADLINE_EXCEEDED after --stream_idle_seconds (predictions, watches)
  };

  // A slot for a stream (or a WaitJob call), counted against the caps of
  // server/transport/stream_limiter.h for `who`. With an idle kind the call is ended,
  // with a status saying `idle_what` and naming the limit, once its client
  // has sent nothing for the timeout (the slot must be Touch()ed).
  absl::StatusOr<std::unique_ptr<StreamLimiter::Slot>> AcquireStream(
      const std::string& rpc, grpc::ServerContext* ctx, const Principal& who, Idle idle,
      const std::string& idle_what = std::string()) const {
    // With authentication off every caller is an anonymous admin: each
    // connection (gRPC's peer) counts as one caller.
    const std::string caller = deps_.auth->enabled() ? who.name : ctx->peer();
    const bool admin = who.role >= Role::kAdmin;
    std::function<void()> on_idle;
    absl::Duration timeout = absl::ZeroDuration();
    if (idle != Idle::kNone) {
      const bool upload = idle == Idle::kUpload;
      timeout = upload ? deps_.streams->idle_timeout() : deps_.stream_idle_timeout;
      const grpc_status_code code = upload ? GRPC_STATUS_CANCELLED : GRPC_STATUS_DEADLINE_EXCEEDED;
      std::string message = absl::StrCat(rpc, ": ", idle_what, " for ",
                                         absl::FormatDuration(timeout), ", the idle limit (",
                                         upload ? "--upload_idle_seconds" : "--stream_idle_seconds",
                                         "); the server ended the call");
      // ServerContext::TryCancel, with a status that says why: the handler
      // is blocked in Read or Write, so it cannot return one itself.
      on_idle = [ctx, code, message = std::move(message)] {
        grpc_call_cancel_with_status(ctx->c_call(), code, message.c_str(), nullptr);
      };
    }
    return deps_.streams->Acquire(rpc, caller, admin, std::move(on_idle), timeout);
  }

  ServiceDeps deps_;
  // What each call means (server/api/api.h): this file only translates.
  Api api_;
};

// The answer sizes of the gRPC encoding (varints at their longest).
// Assign: two int32 (<= 5 bytes each) per row, and two int64 (<= 10) with
// stable ids. Predict: per row one
// evaluated count (<= 5); per label an int64 (<= 10) and a float (4); per
// super-class an int32 (<= 5).
constexpr AssignCost kAssignCost{/*per_row=*/10, /*per_row_stable_ids=*/20};
constexpr AnswerCost kPredictCost{/*per_row=*/5, /*per_label=*/14, /*per_superclass=*/5};
constexpr CallWording kAssignWording{"assign", "assign: ", "assign: "};
constexpr CallWording kPredictWording{
    "predict", "predict: ", "predict: ",
    " (PredictStream takes them in batches over one stream)"};

// ---------------------------------------------------------------------------

class DatasetServiceImpl final : public v1::DatasetService::Service, private ServiceBase {
 public:
  explicit DatasetServiceImpl(ServiceDeps deps) : ServiceBase(std::move(deps)) {}

  grpc::Status UploadDataset(grpc::ServerContext* ctx,
                             grpc::ServerReader<v1::UploadDatasetRequest>* reader,
                             v1::Dataset* response) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kUploadDataset);
    if (!who.ok()) return ToGrpc(who.status());
    auto slot = AcquireStream("upload", ctx, *who, Idle::kUpload, "nothing received");
    if (!slot.ok()) return ToGrpc(slot.status());
    // The stream's message buffers were freed as it went, into the heaps'
    // reserve (server/base/memory.h); a large upload's go back to the kernel.
    int64_t received = 0;
    absl::Cleanup release_memory = [&received] { ReleaseAfterStream(received); };
    auto upload = deps_.datasets->StartUpload();
    upload->set_owner(who->name);
    v1::UploadDatasetRequest req;
    bool first = true;
    while (reader->Read(&req)) {
      // Only waiting for the next message counts as idle, not the writing.
      const StreamLimiter::Slot::Working working(slot->get());
      const auto bytes = static_cast<int64_t>(req.data().size() + req.labels().size());
      received += bytes;
      if (deps_.metrics != nullptr) deps_.metrics->AddUploadBytes(bytes);
      absl::Status s;
      switch (req.part_case()) {
        case v1::UploadDatasetRequest::kHeader:
          s = upload->Begin(req.header());
          break;
        case v1::UploadDatasetRequest::kData:
          s = first ? absl::InvalidArgumentError("upload: the first message must be a header")
                    : upload->TakeData(req.mutable_data());
          break;
        case v1::UploadDatasetRequest::kLabels:
          s = first ? absl::InvalidArgumentError("upload: the first message must be a header")
                    : upload->AppendLabels(req.labels());
          break;
        case v1::UploadDatasetRequest::PART_NOT_SET:
          s = absl::InvalidArgumentError("upload: message with no part set");
          break;
      }
      first = false;
      if (!s.ok()) return ToGrpc(s);
      if (ctx->IsCancelled()) break;
    }
    if (ctx->IsCancelled()) {
      // The client sees CANCELLED either way (an idle upload is cancelled by
      // the server); the log says which.
      if ((*slot)->timed_out()) {
        spdlog::warn("upload abandoned: nothing received for {}",
                     absl::FormatDuration(deps_.streams->idle_timeout()));
      }
      return grpc::Status(grpc::StatusCode::CANCELLED, "upload cancelled");
    }
    // The file's fsync and the catalogue commit may take a while on a busy
    // disk or database; that is not the client's idling.
    const StreamLimiter::Slot::Working finishing(slot->get());
    auto d = upload->Finish();
    if (!d.ok()) return ToGrpc(d.status());
    spdlog::info("dataset {}: {} x {} uploaded{}{}", d->id(), d->rows(), d->cols(),
                 d->has_labels() ? " with labels" : "",
                 d->generation() > 1
                     ? absl::StrCat(" (generation ", d->generation(), " of ", d->lineage(), ")")
                     : "");
    *response = *std::move(d);
    return grpc::Status::OK;
  }

  grpc::Status ImportDataset(grpc::ServerContext* ctx, const v1::ImportDatasetRequest* req,
                             v1::Dataset* response) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kImportDataset);
    if (!who.ok()) return ToGrpc(who.status());
    bool linked = false;
    auto d = deps_.datasets->Import(*req, who->name, &linked);
    // The server read a file of its host for this caller: logged like a
    // delete, refused or not.
    const grpc::Status out = d.ok() ? grpc::Status::OK : ToGrpc(d.status());
    Audit(*who, "imported", absl::StrCat("'", req->path(), "'", d.ok() ? " as " + d->id() : ""),
          ctx, out);
    if (!d.ok()) return out;
    spdlog::info("dataset {}: {} x {} imported{} ({})", d->id(), d->rows(), d->cols(),
                 d->has_labels() ? " with labels" : "", linked ? "linked" : "copied");
    *response = *std::move(d);
    return grpc::Status::OK;
  }

  grpc::Status GetDataset(grpc::ServerContext* ctx, const v1::GetDatasetRequest* req,
                          v1::Dataset* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kGetDataset);
    if (!who.ok()) return ToGrpc(who.status());
    auto d = api_.GetDataset(req->id());
    if (!d.ok()) return ToGrpc(d.status());
    *resp = *std::move(d);
    return grpc::Status::OK;
  }

  grpc::Status ListDatasets(grpc::ServerContext* ctx, const v1::ListDatasetsRequest* req,
                            v1::ListDatasetsResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kListDatasets);
    if (!who.ok()) return ToGrpc(who.status());
    auto page = api_.ListDatasets(*req);
    if (!page.ok()) return ToGrpc(page.status());
    *resp = *std::move(page);
    return grpc::Status::OK;
  }

  grpc::Status DeleteDataset(grpc::ServerContext* ctx, const v1::DeleteDatasetRequest* req,
                             v1::DeleteDatasetResponse*) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kDeleteDataset);
    if (!who.ok()) return ToGrpc(who.status());
    // Refused while a queued or running job uses it, atomically with
    // SubmitJob on any replica (Catalogue::DeleteUnusedDataset).
    const grpc::Status out = ToGrpc(deps_.datasets->Delete(req->id()));
    Audit(*who, "deleted dataset", req->id(), ctx, out);
    return out;
  }
};

// ---------------------------------------------------------------------------

class JobServiceImpl final : public v1::JobService::Service, private ServiceBase {
 public:
  explicit JobServiceImpl(ServiceDeps deps) : ServiceBase(std::move(deps)) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::Job* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kSubmitJob);
    if (!who.ok()) return ToGrpc(who.status());
    auto job = deps_.jobs->Submit(req->spec(), who->name, req->request_id());
    if (!job.ok()) return ToGrpc(job.status());
    *resp = *std::move(job);
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kGetJob);
    if (!who.ok()) return ToGrpc(who.status());
    auto job = deps_.jobs->Get(req->id());
    if (!job.ok()) return ToGrpc(job.status());
    *resp = *std::move(job);
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kListJobs);
    if (!who.ok()) return ToGrpc(who.status());
    auto page = api_.ListJobs(*req);
    if (!page.ok()) return ToGrpc(page.status());
    *resp = *std::move(page);
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::Job* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kCancelJob);
    if (!who.ok()) return ToGrpc(who.status());
    if (who->role < Role::kAdmin) {
      // Writers cancel only their own jobs.
      auto current = deps_.jobs->Get(req->id());
      if (!current.ok()) return ToGrpc(current.status());
      if (current->owner() != who->name) {
        const grpc::Status denied(
            grpc::StatusCode::PERMISSION_DENIED,
            absl::StrCat("job '", req->id(), "' belongs to '", current->owner(),
                         "'; cancelling another principal's job needs the admin role"));
        Audit(*who, "was refused cancelling job", req->id(), ctx, denied);
        return denied;
      }
    }
    auto job = deps_.jobs->Cancel(req->id());
    const grpc::Status out = ToGrpc(job.status());
    Audit(*who, "cancelled job", req->id(), ctx, out);
    if (!out.ok()) return out;
    *resp = *std::move(job);
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::Job>* writer) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kWatchJob);
    if (!who.ok()) return ToGrpc(who.status());
    // Counted, and ended by the server when the job has not changed for the
    // stream idle limit (a client that still cares watches again) or when
    // the server shuts down.
    // (The handler checks the limit itself, for a clear message; the
    // limiter's timer also ends a watch whose client takes nothing.)
    auto slot = AcquireStream("watch", ctx, *who, Idle::kStream,
                              "nothing sent (the job did not change) or taken");
    if (!slot.ok()) return ToGrpc(slot.status());
    const absl::Duration idle = deps_.stream_idle_timeout;
    absl::Time last_sent = absl::Now();
    uint64_t seen = 0;
    uint64_t sent = 0;
    for (;;) {
      // Returns on a change or after a second, so a client that went away is
      // noticed promptly.
      const absl::Time idle_at = last_sent + idle;
      auto job = deps_.jobs->WaitForChange(req->id(), &seen,
                                           std::min(idle_at, absl::Now() + absl::Seconds(1)));
      if (!job.ok()) return ToGrpc(job.status());
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
      if (seen != sent) {
        sent = seen;
        if (!writer->Write(*job)) return grpc::Status::OK;  // client went away
        if (IsFinished(job->state())) return grpc::Status::OK;
        (*slot)->Touch();
        last_sent = absl::Now();
        continue;
      }
      if (deps_.streams->closing()) return ShuttingDown("watch", req->id());
      if (absl::Now() >= idle_at) {
        return ToGrpc(absl::DeadlineExceededError(absl::StrCat(
            "watch: job '", req->id(), "' did not change for ", absl::FormatDuration(idle),
            ", the idle limit (--stream_idle_seconds); the server ended the watch, watch it "
            "again to keep following it")));
      }
    }
  }

  grpc::Status DeleteJob(grpc::ServerContext* ctx, const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse*) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kDeleteJob);
    if (!who.ok()) return ToGrpc(who.status());
    const grpc::Status out = ToGrpc(deps_.jobs->Delete(req->id()));
    Audit(*who, "deleted job", req->id(), ctx, out);
    return out;
  }

  grpc::Status WaitJob(grpc::ServerContext* ctx, const v1::WaitJobRequest* req,
                       v1::Job* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kWaitJob);
    if (!who.ok()) return ToGrpc(who.status());
    absl::Time deadline = absl::FromChrono(ctx->deadline());
    if (req->has_timeout()) {
      const absl::Duration t =
          absl::Seconds(req->timeout().seconds()) + absl::Nanoseconds(req->timeout().nanos());
      if (t < absl::ZeroDuration()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "timeout must be >= 0");
      }
      deadline = std::min(deadline, absl::Now() + t);
    }
    // A waiting call holds a thread as a stream does: counted like one, and
    // answered (with the job as it is) after the stream idle limit at most.
    auto slot = AcquireStream("wait job", ctx, *who, Idle::kNone);
    if (!slot.ok()) return ToGrpc(slot.status());
    deadline = std::min(deadline, absl::Now() + deps_.stream_idle_timeout);
    uint64_t seen = 0;
    for (;;) {
      auto job = deps_.jobs->WaitForChange(req->id(), &seen,
                                           std::min(deadline, absl::Now() + absl::Seconds(1)));
      if (!job.ok()) return ToGrpc(job.status());
      if (IsFinished(job->state()) || absl::Now() >= deadline || ctx->IsCancelled()) {
        *resp = *std::move(job);
        return grpc::Status::OK;
      }
      if (deps_.streams->closing()) return ShuttingDown("wait job", req->id());
    }
  }

 private:
  // A watch or wait ended by the shutdown: the job lives on (interrupted
  // jobs are queued again), so the client may ask again, here or elsewhere.
  grpc::Status ShuttingDown(const char* rpc, const std::string& id) const {
    return ToGrpc(absl::UnavailableError(absl::StrCat(
        rpc, ": the server is shutting down; job '", id,
        "' is kept (an interrupted job is queued again), ask again")));
  }
};

// ---------------------------------------------------------------------------

// The tree `req` asks for, as text (JSON, Newick) or bytes (a linkage .npy),
// handed to `sink` in consecutive pieces of at most `piece_bytes`.
// The refined tree's JSON carries the version's stable ids.
absl::Status WriteTree(const LoadedModel& loaded, const v1::GetTreeRequest& req, size_t piece_bytes,
                       absl::FunctionRef<absl::Status(std::string_view)> sink) {
  const FittedModel& model = *loaded.model;
  if (req.unrefined() && req.format() == v1::TREE_FORMAT_LINKAGE_NPY) {
    return absl::InvalidArgumentError(
        "an unrefined tree can be n-ary, which a SciPy linkage cannot hold; ask for JSON or "
        "Newick");
  }
  const Hierarchy& tree = req.unrefined() ? model.coarse_tree() : model.tree();
  std::string text;
  switch (req.format()) {
    case v1::TREE_FORMAT_UNSPECIFIED:
    case v1::TREE_FORMAT_JSON:
      // The only form that grows with the rows (point assignments): written
      // piece by piece.
      return WriteJson(tree, req.include_points(), piece_bytes, sink,
                       ServedStableIds(loaded.stable_ids.get(), req.unrefined()));
    case v1::TREE_FORMAT_NEWICK:
      text = ToNewick(tree);
      break;
    case v1::TREE_FORMAT_LINKAGE_NPY: {
      const std::vector<double> rows = ToLinkage(tree);
      const int64_t shape[2] = {static_cast<int64_t>(rows.size() / 4), 4};
      text = MakeNpyHeader(DType::kFloat64, shape);
      text.append(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(double));
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown tree format ", req.format()));
  }
  for (size_t at = 0; at < text.size(); at += piece_bytes) {
    DENDRO_RETURN_IF_ERROR(sink(std::string_view(text).substr(at, piece_bytes)));
  }
  return absl::OkStatus();
}

// Assign and Predict use gRPC's callback API: their handlers run on gRPC's
// own threads, with no hand-over to a thread per call, which costs more than
// a small call's arithmetic. The other methods are synchronous.
using ModelServiceBase = v1::ModelService::WithCallbackMethod_Assign<
    v1::ModelService::WithCallbackMethod_Predict<v1::ModelService::Service>>;

class ModelServiceImpl final : public ModelServiceBase, private ServiceBase {
 public:
  explicit ModelServiceImpl(ServiceDeps deps) : ServiceBase(std::move(deps)) {}

  grpc::Status GetModel(grpc::ServerContext* ctx, const v1::GetModelRequest* req,
                        v1::Model* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kGetModel);
    if (!who.ok()) return ToGrpc(who.status());
    auto m = deps_.models->Get(req->model());
    if (!m.ok()) return ToGrpc(m.status());
    *resp = *std::move(m);
    return grpc::Status::OK;
  }

  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req,
                          v1::ListModelsResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kListModels);
    if (!who.ok()) return ToGrpc(who.status());
    auto page = api_.ListModels(*req);
    if (!page.ok()) return ToGrpc(page.status());
    *resp = *std::move(page);
    return grpc::Status::OK;
  }

  grpc::Status DeleteModel(grpc::ServerContext* ctx, const v1::DeleteModelRequest* req,
                           v1::DeleteModelResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kDeleteModel);
    if (!who.ok()) return ToGrpc(who.status());
    auto n = deps_.models->Delete(req->name(), req->version());
    const grpc::Status out = ToGrpc(n.status());
    Audit(*who, "deleted model",
          req->version() > 0 ? absl::StrCat(req->name(), ":", req->version()) : req->name(), ctx,
          out);
    if (!out.ok()) return out;
    resp->set_deleted(*n);
    return grpc::Status::OK;
  }

  grpc::Status SetModelLabel(grpc::ServerContext* ctx, const v1::SetModelLabelRequest* req,
                             v1::Model* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kSetModelLabel);
    if (!who.ok()) return ToGrpc(who.status());
    if (grpc::Status held = CheckRetentionExemption(*who, req->name(), req->label(),
                                                    req->version(), ctx);
        !held.ok()) {
      return held;
    }
    auto m = deps_.models->SetLabel(req->name(), req->label(), req->version());
    const grpc::Status out = ToGrpc(m.status());
    Audit(*who, "labelled model",
          absl::StrCat(req->name(), "@", req->label(), m.ok() ? absl::StrCat(" -> ", m->version())
                                                             : std::string()),
          ctx, out);
    if (!out.ok()) return out;
    *resp = *std::move(m);
    return grpc::Status::OK;
  }

  grpc::Status DeleteModelLabel(grpc::ServerContext* ctx, const v1::DeleteModelLabelRequest* req,
                                v1::DeleteModelLabelResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kDeleteModelLabel);
    if (!who.ok()) return ToGrpc(who.status());
    if (grpc::Status held =
            CheckRetentionExemption(*who, req->name(), req->label(), ModelRegistry::kRemoveLabel,
                                    ctx);
        !held.ok()) {
      return held;
    }
    auto version = deps_.models->DeleteLabel(req->name(), req->label());
    const grpc::Status out = ToGrpc(version.status());
    Audit(*who, "removed label", absl::StrCat(req->name(), "@", req->label()), ctx, out);
    if (!out.ok()) return out;
    resp->set_version(*version);
    return grpc::Status::OK;
  }

  grpc::Status SetModelRetention(grpc::ServerContext* ctx,
                                 const v1::SetModelRetentionRequest* req,
                                 v1::SetModelRetentionResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kSetModelRetention);
    if (!who.ok()) return ToGrpc(who.status());
    auto deleted = deps_.models->SetRetention(req->name(), req->keep_versions());
    const grpc::Status out = ToGrpc(deleted.status());
    Audit(*who, "set retention of",
          absl::StrCat(req->name(), " to ", req->keep_versions(), " version(s)",
                       deleted.ok() ? absl::StrCat(", deleting ", *deleted) : std::string()),
          ctx, out);
    if (!out.ok()) return out;
    resp->set_deleted(*deleted);
    return grpc::Status::OK;
  }

  grpc::Status GetTree(grpc::ServerContext* ctx, const v1::GetTreeRequest* req,
                       v1::GetTreeResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kGetTree);
    if (!who.ok()) return ToGrpc(who.status());
    auto loaded = api_.Load(req->model());
    if (!loaded.ok()) return ToGrpc(loaded.status());
    // The answer must fit one message with the model beside it; the text is
    // counted to the end so the refusal can say how large the tree is.
    const int64_t room = deps_.max_message_bytes -
                         static_cast<int64_t>(loaded->info().ByteSizeLong()) - 1024;
    std::string* content = resp->mutable_content();
    int64_t total = 0;
    const absl::Status written =
        WriteTree(*loaded, *req, size_t{1} << 20, [&](std::string_view piece) {
          total += static_cast<int64_t>(piece.size());
          if (total <= room) content->append(piece);
          return absl::OkStatus();
        });
    if (!written.ok()) return ToGrpc(written);
    if (total > room) {
      resp->Clear();
      return ToGrpc(absl::ResourceExhaustedError(absl::StrCat(
          "get tree: the tree is ", total, " bytes, over the ", deps_.max_message_bytes >> 20,
          " MiB message limit; GetTreeStream sends it in pieces (the dendro CLI and clients use "
          "it)")));
    }
    *resp->mutable_model() = loaded->info();
    return grpc::Status::OK;
  }

  grpc::Status GetTreeStream(grpc::ServerContext* ctx, const v1::GetTreeRequest* req,
                             grpc::ServerWriter<v1::GetTreeChunk>* writer) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kGetTreeStream);
    if (!who.ok()) return ToGrpc(who.status());
    auto loaded = api_.Load(req->model());
    if (!loaded.ok()) return ToGrpc(loaded.status());
    // A stream slot, like every stream: a reader that stops reading blocks
    // Write below, and is cancelled once the idle timeout passes with no
    // piece taken. (Taken after the load, which is not the reader's doing.)
    auto slot =
        AcquireStream("get tree stream", ctx, *who, Idle::kUpload, "the reader took nothing");
    if (!slot.ok()) return ToGrpc(slot.status());
    // Pieces well under the limit; the first also carries the model.
    const size_t piece_bytes = static_cast<size_t>(
        std::clamp<int64_t>(deps_.max_message_bytes / 2, 64, int64_t{1} << 20));
    bool first = true;
    const absl::Status written =
        WriteTree(*loaded, *req, piece_bytes, [&](std::string_view piece) {
          v1::GetTreeChunk chunk;
          chunk.set_content(piece.data(), piece.size());
          if (first) *chunk.mutable_model() = loaded->info();
          first = false;
          // Write blocks while the reader is behind, so memory stays at one
          // piece in flight; false means the call is over.
          if (!writer->Write(chunk)) {
            return absl::CancelledError(
                (*slot)->timed_out()
                    ? "get tree stream: the reader took nothing for the idle timeout"
                    : "get tree stream: the client went away");
          }
          (*slot)->Touch();
          return absl::OkStatus();
        });
    return ToGrpc(written);
  }

  grpc::ServerUnaryReactor* Assign(grpc::CallbackServerContext* ctx, const v1::AssignRequest* req,
                                   v1::AssignResponse* resp) override {
    const absl::Time deadline = absl::FromChrono(ctx->deadline());
    return Unary(ctx, Rpc::kAssign, kAssignWording, *req,
                 [this, req, resp, deadline](const CheckedRows& in, bool* would_wait) {
                   return AssignAnswer(*req, in, deadline, resp, would_wait);
                 });
  }

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* ctx, const v1::PredictRequest* req,
                                    v1::PredictResponse* resp) override {
    const absl::Time deadline = absl::FromChrono(ctx->deadline());
    return Unary(ctx, Rpc::kPredict, kPredictWording, *req,
                 [this, req, resp, deadline](const CheckedRows& in, bool* would_wait) {
                   return PredictAnswer(*req, in, deadline, resp, would_wait);
                 });
  }

  grpc::Status PredictStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::PredictResponse, v1::PredictRequest>* stream) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kPredictStream);
    if (!who.ok()) return ToGrpc(who.status());
    // Counted, and ended by the server (DEADLINE_EXCEEDED) once the client
    // has sent no request, or taken no answer, for the stream idle limit.
    auto slot = AcquireStream("predict stream", ctx, *who, Idle::kStream,
                              "no request sent or answer taken");
    if (!slot.ok()) return ToGrpc(slot.status());
    v1::PredictRequest req;
    while (stream->Read(&req)) {
      if (ctx->IsCancelled()) break;
      v1::PredictResponse resp;
      absl::Status s;
      {
        // Computing the answer is the server's time, not the client's.
        const StreamLimiter::Slot::Working working(slot->get());
        CheckedRows in;
        s = CheckRows(kPredictWording, req, &in);
        if (s.ok()) s = PredictAnswer(req, in, absl::FromChrono(ctx->deadline()), &resp);
      }
      if (!s.ok()) return ToGrpc(s);
      if (!stream->Write(resp)) break;
      (*slot)->Touch();
    }
    // (What the client sees was set by the cancel; this is for the metrics.)
    if ((*slot)->timed_out()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "predict stream: idle limit");
    }
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    return grpc::Status::OK;
  }

  grpc::Status GetClasses(grpc::ServerContext* ctx, const v1::GetClassesRequest* req,
                          v1::GetClassesResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kGetClasses);
    if (!who.ok()) return ToGrpc(who.status());
    absl::StatusOr<v1::GetClassesResponse> classes = api_.GetClasses(req->model());
    if (!classes.ok()) return ToGrpc(classes.status());
    *resp = *std::move(classes);
    return grpc::Status::OK;
  }

  grpc::Status DiffModels(grpc::ServerContext* ctx, const v1::DiffModelsRequest* req,
                          v1::DiffModelsResponse* resp) override {
    absl::StatusOr<Principal> who = Authorize(ctx, Rpc::kDiffModels);
    if (!who.ok()) return ToGrpc(who.status());
    absl::StatusOr<v1::DiffModelsResponse> diff = api_.DiffModels(*req);
    if (!diff.ok()) return ToGrpc(diff.status());
    *resp = *std::move(diff);
    return grpc::Status::OK;
  }

 private:
  // The model and rows of an Assign or Predict, checked: what its answer is
  // computed from. `rows` views the request's bytes, or `aligned` when they
  // are not float-aligned (a move keeps that buffer, so the view stays valid).
  struct CheckedRows {
    LoadedModel loaded;
    std::vector<float> aligned;
    std::optional<MatrixView> rows;
  };

  template <typename Request>
  absl::Status CheckRows(const CallWording& w, const Request& req, CheckedRows* in) {
    DENDRO_ASSIGN_OR_RETURN(in->loaded, api_.Load(req.model()));
    DENDRO_ASSIGN_OR_RETURN(
        MatrixView rows,
        api_.RowsFromBytes(w, in->loaded, req.rows(), req.cols(), req.data(), &in->aligned));
    in->rows.emplace(rows);
    return absl::OkStatus();
  }

  // A unary Assign or Predict on a callback thread: its model and rows are
  // checked once, then `answer(rows, would_wait)` fills the response (see
  // Api::Assign); when it would have to wait for its turn, the checked rows
  // go with it to a thread of deps_.waiting, which runs it again with
  // would_wait null and finishes the call.
  template <typename Request, typename Answer>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, Rpc rpc, const CallWording& w,
                                  const Request& req, Answer answer) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    absl::StatusOr<Principal> who = Authorize(ctx, rpc);
    if (!who.ok()) {
      reactor->Finish(ToGrpc(who.status()));
      return reactor;
    }
    CheckedRows in;
    if (const absl::Status checked = CheckRows(w, req, &in); !checked.ok()) {
      reactor->Finish(ToGrpc(checked));
      return reactor;
    }
    bool would_wait = false;
    const absl::Status now = answer(in, deps_.waiting != nullptr ? &would_wait : nullptr);
    if (!would_wait) {
      reactor->Finish(ToGrpc(now));
      return reactor;
    }
    // The request id and caller go with the call to the waiting thread.
    const bool moved =
        deps_.waiting->Schedule([this, ctx, reactor, answer = std::move(answer),
                                 in = std::make_shared<const CheckedRows>(std::move(in)),
                                 log = ThreadLogContext()]() mutable {
          ThreadLogContext() = std::move(log);
          // A client that has gone away gets nothing computed for it.
          reactor->Finish(ctx->IsCancelled()
                              ? grpc::Status(grpc::StatusCode::CANCELLED, "cancelled")
                              : ToGrpc(answer(*in, nullptr)));
          ThreadLogContext() = LogContext();
        });
    if (!moved) {
      reactor->Finish(ToGrpc(absl::ResourceExhaustedError(
          absl::StrCat(w.what,
                       ": the server is at its limit: every thread for waiting calls is taken "
                       "(--serving_queue); retry with backoff"))));
    }
    return reactor;
  }

  absl::Status AssignAnswer(const v1::AssignRequest& req, const CheckedRows& in,
                            absl::Time deadline, v1::AssignResponse* resp, bool* would_wait) {
    DENDRO_ASSIGN_OR_RETURN(Assignment a,
                            api_.Assign(kAssignWording, in.loaded, *in.rows, req.level(),
                                        req.stable_ids(), kAssignCost, deadline, would_wait));
    if (would_wait != nullptr && *would_wait) return absl::OkStatus();
    resp->mutable_leaf()->Add(a.leaves.begin(), a.leaves.end());
    resp->mutable_cluster()->Add(a.clusters.begin(), a.clusters.end());
    resp->mutable_stable_leaf()->Add(a.stable_leaves.begin(), a.stable_leaves.end());
    resp->mutable_stable_cluster()->Add(a.stable_clusters.begin(), a.stable_clusters.end());
    resp->set_level(a.level);
    resp->set_model_version(in.loaded.info().version());
    return absl::OkStatus();
  }

  absl::Status PredictAnswer(const v1::PredictRequest& req, const CheckedRows& in,
                             absl::Time deadline, v1::PredictResponse* resp,
                             bool* would_wait = nullptr) {
    DENDRO_ASSIGN_OR_RETURN(
        Prediction p, api_.Predict(kPredictWording, in.loaded, *in.rows, req.top_k(), req.top_t(),
                                   req.flat(), kPredictCost, deadline, would_wait));
    if (would_wait != nullptr && *would_wait) return absl::OkStatus();
    resp->set_rows(req.rows());
    resp->set_top_k(p.top_k);
    resp->set_top_t(p.top_t);
    resp->mutable_labels()->Add(p.labels.begin(), p.labels.end());
    resp->mutable_scores()->Add(p.scores.begin(), p.scores.end());
    resp->mutable_superclasses()->Add(p.superclasses.begin(), p.superclasses.end());
    resp->mutable_classes_evaluated()->Add(p.classes_evaluated.begin(),
                                           p.classes_evaluated.end());
    resp->set_model_version(in.loaded.info().version());
    if (const int64_t size = static_cast<int64_t>(resp->ByteSizeLong());
        size > deps_.max_message_bytes) {
      resp->Clear();
      return api_.AnswerTooLarge(kPredictWording, req.rows(), size);
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::vector<std::unique_ptr<grpc::Service>> MakeServices(ServiceDeps deps) {
  std::vector<std::unique_ptr<grpc::Service>> services;
  services.push_back(std::make_unique<DatasetServiceImpl>(deps));
  services.push_back(std::make_unique<JobServiceImpl>(deps));
  services.push_back(std::make_unique<ModelServiceImpl>(deps));
  return services;
}

std::vector<std::string> CallbackMethodNames() {
  const std::string service = absl::StrCat("/", v1::ModelService::service_full_name(), "/");
  return {service + "Assign", service + "Predict"};
}

std::vector<std::string> ServiceNames() {
  return {v1::DatasetService::service_full_name(), v1::JobService::service_full_name(),
          v1::ModelService::service_full_name()};
}

}  // namespace dendro::server
