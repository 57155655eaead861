#include "server/job_manager.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/crash_point.h"
#include "core/common/run_context.h"
#include "core/common/status_macros.h"
#include "server/logging.h"
#include "server/methods/method.h"
#include "spdlog/spdlog.h"

namespace dendro::server {

// Connects a running algorithm to its job entry.
class JobManager::Context final : public RunContext {
 public:
  Context(JobManager* mgr, std::shared_ptr<Entry> entry)
      : mgr_(mgr), entry_(std::move(entry)) {}
  bool Cancelled() const override { return entry_->cancel.load(std::memory_order_relaxed); }
  void Report(double fraction, std::string_view stage) override {
    fraction = std::clamp(fraction, 0.0, 1.0);
    std::lock_guard<std::mutex> lock(mgr_->mu_);
    v1::Job& job = entry_->job;
    const bool stage_changed = job.stage() != stage;
    // Publish at most every 0.5% unless the stage changes: watchers need
    // motion, not a message per inner-loop iteration.
    if (!stage_changed && fraction < job.progress() + 0.005) return;
    job.set_progress(std::max(job.progress(), fraction));
    if (stage_changed) job.set_stage(std::string(stage));
    ++entry_->version;
    mgr_->changed_cv_.notify_all();
  }

 private:
  JobManager* mgr_;
  std::shared_ptr<Entry> entry_;
};

JobManager::JobManager(Options options, Catalogue* meta, DatasetStore* datasets,
                       ModelRegistry* models)
    : options_(std::move(options)), meta_(meta), datasets_(datasets), models_(models) {
  if (!options_.resolve_method) options_.resolve_method = MethodForSpec;
}

JobManager::~JobManager() { Shutdown(absl::ZeroDuration()); }

absl::Status JobManager::PublishLocked(Entry& entry) {
  ++entry.version;
  changed_cv_.notify_all();
  return meta_->PutJob(entry.job);
}

absl::Status JobManager::Start() {
  DENDRO_ASSIGN_OR_RETURN(std::vector<v1::Job> unfinished, meta_->UnfinishedJobs());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (v1::Job& job : unfinished) {
      auto entry = std::make_shared<Entry>();
      if (job.cancel_requested()) {
        // The cancel was recorded but the server stopped before the job did.
        job.set_state(v1::JOB_STATE_CANCELLED);
        job.set_stage("cancelled");
        job.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kCancelled));
        job.mutable_error()->set_message(
            "cancelled by request (the server stopped before the job did)");
        SetNow(job.mutable_end_time());
        entry->job = std::move(job);
        DENDRO_RETURN_IF_ERROR(PublishLocked(*entry));
        continue;
      }
      if (job.attempts() >= options_.max_attempts) {
        // Started this often and never finished: the job itself is the
        // likely reason the server went down. Never run it again.
        job.set_state(v1::JOB_STATE_FAILED);
        job.set_stage("failed");
        job.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kAborted));
        job.mutable_error()->set_message(absl::StrCat(
            "the job was started ", job.attempts(),
            " times and the server stopped before it finished each time; it is not retried "
            "again (dendrod --max_job_attempts)"));
        SetNow(job.mutable_end_time());
        spdlog::warn("job {}: failed after {} attempts", job.id(), job.attempts());
        entry->job = std::move(job);
        DENDRO_RETURN_IF_ERROR(PublishLocked(*entry));
        continue;
      }
      if (absl::IsNotFound(datasets_->Get(job.spec().dataset_id()).status())) {
        // Its dataset was transient (or deleted): nothing to re-run.
        job.set_state(v1::JOB_STATE_FAILED);
        job.set_stage("failed");
        job.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kFailedPrecondition));
        job.mutable_error()->set_message(absl::StrCat(
            "dataset ", job.spec().dataset_id(),
            " no longer exists (transient datasets do not survive a restart)"));
        SetNow(job.mutable_end_time());
        entry->job = std::move(job);
        DENDRO_RETURN_IF_ERROR(PublishLocked(*entry));
        continue;
      }
      job.set_state(v1::JOB_STATE_QUEUED);
      job.set_stage("queued (recovered after restart)");
      job.set_progress(0);
      entry->job = std::move(job);
      DENDRO_RETURN_IF_ERROR(PublishLocked(*entry));
      queue_.push_back(entry->job.id());
      active_[entry->job.id()] = std::move(entry);
    }
    accepting_ = true;
  }
  if (!unfinished.empty()) spdlog::info("recovered {} unfinished job(s)", unfinished.size());
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
  if (options_.retention > absl::ZeroDuration()) {
    retention_thread_ = std::thread([this] { RetentionLoop(); });
  }
  queue_cv_.notify_all();
  return absl::OkStatus();
}

bool JobManager::Shutdown(absl::Duration grace) {
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
  if (workers_.empty()) return !abandoned_;
  const absl::Time deadline = absl::Now() + grace;
  while (running_ > 0 && absl::Now() < deadline) {
    changed_cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
  stopping_ = true;
  retention_cv_.notify_all();
  for (auto& [id, entry] : active_) {
    if (entry->job.state() == v1::JOB_STATE_RUNNING) {
      entry->interrupted = true;
      entry->cancel = true;
    }
  }
  queue_cv_.notify_all();
  const absl::Time stop_deadline = absl::Now() + options_.stop_timeout;
  while (running_ > 0 && absl::Now() < stop_deadline) {
    changed_cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  if (retention_thread_.joinable()) {
    lock.unlock();
    retention_thread_.join();  // wakes on stopping_
    lock.lock();
  }
  if (running_ > 0) {
    // A method that ignores cancellation must not hold the process: record
    // each such job as interrupted (or cancelled), stop publishing for it,
    // and let the caller exit without joining its thread.
    abandoned_ = true;
    for (auto& [id, entry] : active_) {
      if (entry->job.state() != v1::JOB_STATE_RUNNING) continue;
      spdlog::error("job {}: did not stop within {} of the shutdown interrupt; abandoned", id,
                    absl::FormatDuration(options_.stop_timeout));
      RecordStopLocked(*entry, absl::CancelledError("interrupted"));
      absl::Status s = meta_->PutJob(entry->job);
      if (!s.ok()) spdlog::error("job {}: cannot record interruption: {}", id, s.ToString());
    }
    lock.unlock();
    for (auto& t : workers_) t.detach();
    workers_.clear();
    return false;
  }
  lock.unlock();
  for (auto& t : workers_) t.join();
  workers_.clear();
  return true;
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& submitted,
                                           const std::string& owner,
                                           const std::string& request_id) {
  if (!request_id.empty()) {
    DENDRO_RETURN_IF_ERROR(ValidateRequestId(request_id));
    // A retry: answer with the first call's job, before anything else (its
    // transient dataset may be gone by now).
    DENDRO_ASSIGN_OR_RETURN(std::optional<v1::Job> previous,
                            meta_->FindJobByRequest(owner, request_id));
    if (previous.has_value()) return Replay(*previous, submitted);
  }
  v1::JobSpec spec = submitted;
  DENDRO_ASSIGN_OR_RETURN(const Method* method, options_.resolve_method(spec));
  if (spec.dataset_id().empty()) return absl::InvalidArgumentError("job spec: dataset_id is empty");
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset dataset, datasets_->Get(spec.dataset_id()));
  if (spec.leaf_names_size() > 0 && !method->leaf_names_refusal().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("leaf_names do not apply to ",
                                                   std::string(method->name()), ": ",
                                                   std::string(method->leaf_names_refusal())));
  }
  DENDRO_RETURN_IF_ERROR(method->Validate(spec, dataset, options_.limits));
  // A fit writes a model: refuse it while the disk is at its floor.
  DENDRO_RETURN_IF_ERROR(datasets_->disk().Check(0, "job"));
  if (std::optional<v1::ModelRef> base = method->BaseModel(spec)) {
    DENDRO_ASSIGN_OR_RETURN(v1::Model base_model, models_->Get(*base));
    if (base_model.method() != std::string(method->name())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", base_model.name(), "' v", base_model.version(), " is a ",
          base_model.method(), " model; only ", std::string(method->name()),
          " models can be extended this way"));
    }
    if (spec.model_name().empty()) spec.set_model_name(base->name());
  }
  DENDRO_RETURN_IF_ERROR(ValidateModelName(spec.model_name()));
  DENDRO_RETURN_IF_ERROR(CheckMethodChange(spec, *method));

  auto entry = std::make_shared<Entry>();
  v1::Job& job = entry->job;
  job.set_id(NewId("job"));
  job.set_owner(owner);
  job.set_request_id(request_id);
  *job.mutable_spec() = spec;
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_stage("queued");
  SetNow(job.mutable_create_time());

  absl::Status published;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return absl::UnavailableError("server is shutting down; job not accepted");
    if (static_cast<int>(queue_.size()) >= options_.queue_capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "job queue is full (", queue_.size(), " jobs waiting, capacity ",
          options_.queue_capacity, "); retry later"));
    }
    published = PublishLocked(*entry);
    if (published.ok()) {
      queue_.push_back(job.id());
      active_[job.id()] = entry;
      queue_cv_.notify_one();
      return job;
    }
  }
  if (absl::IsAlreadyExists(published) && !request_id.empty()) {
    // The same request raced this one and was recorded first.
    DENDRO_ASSIGN_OR_RETURN(std::optional<v1::Job> previous,
                            meta_->FindJobByRequest(owner, request_id));
    if (previous.has_value()) return Replay(*previous, submitted);
  }
  return published;
}

absl::Status JobManager::ValidateRequestId(const std::string& request_id) {
  bool ok = request_id.size() <= 128;
  for (char c : request_id) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "request_id must be 1 to 128 characters from [A-Za-z0-9._-]");
}

absl::StatusOr<v1::Job> JobManager::Replay(const v1::Job& previous,
                                           const v1::JobSpec& submitted) {
  v1::JobSpec normalised = submitted;
  // The server fills an hppca_add job's model name from its base.
  if (normalised.model_name().empty()) normalised.set_model_name(previous.spec().model_name());
  if (!google::protobuf::util::MessageDifferencer::Equals(normalised, previous.spec())) {
    return absl::AlreadyExistsError(absl::StrCat(
        "request_id '", previous.request_id(), "' was already used for job ", previous.id(),
        " with a different spec"));
  }
  spdlog::info("job {}: returned again for request id {}", previous.id(), previous.request_id());
  return Get(previous.id());
}

absl::Status JobManager::CheckMethodChange(const v1::JobSpec& spec, const Method& method) {
  if (spec.allow_method_change()) return absl::OkStatus();
  v1::ModelRef latest_ref;
  latest_ref.set_name(spec.model_name());
  absl::StatusOr<v1::Model> latest = models_->Get(latest_ref);
  if (absl::IsNotFound(latest.status())) return absl::OkStatus();
  DENDRO_RETURN_IF_ERROR(latest.status());
  if (latest->method() == std::string(method.name())) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "model name '", spec.model_name(), "' holds ", latest->method(), " models (latest v",
      latest->version(), "); refusing to add a ", std::string(method.name()),
      " version under it unless allow_method_change is set"));
}

absl::Status JobManager::Delete(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_.count(id) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", id, "' is queued or running; cancel it first"));
    }
  }
  return meta_->DeleteJob(id);
}

void JobManager::RetentionLoop() {
  // Often enough that a record outlives its retention by at most a tenth
  // of it (and never by more than ten minutes).
  const absl::Duration period =
      std::clamp(options_.retention / 10, absl::Seconds(1), absl::Minutes(10));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const int64_t cutoff = absl::ToUnixSeconds(absl::Now() - options_.retention);
    absl::StatusOr<int> removed = meta_->DeleteJobsEndedBefore(cutoff);
    if (!removed.ok()) {
      spdlog::warn("job retention: {}", removed.status().ToString());
    } else if (*removed > 0) {
      spdlog::info("job retention: removed {} finished job record(s) older than {}", *removed,
                   absl::FormatDuration(options_.retention));
    }
    lock.lock();
    retention_cv_.wait_for(lock, absl::ToChronoNanoseconds(period), [this] { return stopping_; });
  }
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = active_.find(id); it != active_.end()) return it->second->job;
  }
  return meta_->GetJob(id);
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id) {
  absl::StatusOr<v1::Job> job = CancelEntry(id);
  // A job cancelled before it started never reaches a worker: release its
  // transient dataset here.
  if (job.ok() && job->state() == v1::JOB_STATE_CANCELLED) {
    ReleaseTransientDataset(job->spec().dataset_id());
  }
  return job;
}

absl::StatusOr<v1::Job> JobManager::CancelEntry(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return meta_->GetJob(id);  // finished (or NotFound)
  Entry& entry = *it->second;
  entry.cancel = true;
  if (entry.job.state() == v1::JOB_STATE_QUEUED) {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
    entry.job.set_state(v1::JOB_STATE_CANCELLED);
    entry.job.set_stage("cancelled");
    entry.job.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kCancelled));
    entry.job.mutable_error()->set_message("cancelled before it started");
    SetNow(entry.job.mutable_end_time());
    DENDRO_RETURN_IF_ERROR(PublishLocked(entry));
    v1::Job job = entry.job;
    active_.erase(it);
    return job;
  }
  // Running: record the request at once so it survives a shutdown or crash
  // before the algorithm stops; the worker records CANCELLED when it does.
  if (!entry.user_cancel) {
    entry.user_cancel = true;
    entry.job.set_cancel_requested(true);
    entry.job.set_stage("cancelling");
    if (!abandoned_) DENDRO_RETURN_IF_ERROR(PublishLocked(entry));
  }
  return entry.job;
}

absl::StatusOr<v1::Job> JobManager::WaitForChange(const std::string& id, uint64_t* seen,
                                                  absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) {
    lock.unlock();
    DENDRO_ASSIGN_OR_RETURN(v1::Job job, meta_->GetJob(id));
    *seen = UINT64_MAX;  // finished: no further changes
    return job;
  }
  std::shared_ptr<Entry> entry = it->second;
  while (entry->version <= *seen && absl::Now() < deadline) {
    const absl::Duration left = std::min(deadline - absl::Now(), absl::Seconds(1));
    changed_cv_.wait_for(lock, absl::ToChronoNanoseconds(left));
  }
  *seen = entry->version;
  return entry->job;
}

bool JobManager::DatasetInUse(const std::string& dataset_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, entry] : active_) {
    if (entry->job.spec().dataset_id() == dataset_id) return true;
  }
  return false;
}

void JobManager::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Entry> entry;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      const std::string id = queue_.front();
      queue_.pop_front();
      entry = active_.at(id);
      v1::Job& job = entry->job;
      job.set_state(v1::JOB_STATE_RUNNING);
      job.set_stage("starting");
      job.set_progress(0);
      job.set_attempts(job.attempts() + 1);
      SetNow(job.mutable_start_time());
      ++running_;
      absl::Status s = PublishLocked(*entry);
      if (!s.ok()) spdlog::error("job {}: cannot record start: {}", id, s.ToString());
    }
    CrashPoint("job.started");
    Run(entry);
  }
}

void JobManager::ReleaseTransientDataset(const std::string& dataset_id,
                                         const std::string& except_job) {
  auto info = datasets_->Get(dataset_id);
  if (!info.ok() || !info->transient()) return;
  // Under mu_, so no job can be queued on it between the check and the
  // delete (Submit queues under mu_).
  std::lock_guard<std::mutex> lock(mu_);
  if (abandoned_) return;
  for (const auto& [id, entry] : active_) {
    if (id != except_job && entry->job.spec().dataset_id() == dataset_id) return;  // still needed
  }
  absl::Status s = datasets_->Delete(dataset_id);
  if (s.ok()) {
    spdlog::info("dataset {}: transient, removed after its last job", dataset_id);
  } else if (!absl::IsNotFound(s)) {
    spdlog::warn("dataset {}: cannot remove transient dataset: {}", dataset_id, s.ToString());
  }
}

void JobManager::Run(const std::shared_ptr<Entry>& entry) {
  const std::string id = entry->job.id();
  const ScopedJobLogContext log_context(id);
  const v1::JobSpec spec = entry->job.spec();
  spdlog::info("job {}: running for model {} on dataset {}", id, spec.model_name(), spec.dataset_id());
  Context ctx(this, entry);
  absl::StatusOr<std::unique_ptr<FittedModel>> fitted = Fit(spec, ctx);
  // The fit no longer reads its dataset: a transient one goes now, before
  // the outcome is visible, so a client that sees the job end never sees
  // its dataset.
  ReleaseTransientDataset(spec.dataset_id(), id);

  absl::Status outcome = fitted.status();
  v1::Job done;
  bool cancel_requested = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (abandoned_) return;  // its record already says interrupted
    cancel_requested = entry->user_cancel;
    done = entry->job;
  }
  if (fitted.ok() && !cancel_requested) {
    done.set_state(v1::JOB_STATE_SUCCEEDED);
    done.set_stage("done");
    done.set_progress(1.0);
    SetNow(done.mutable_end_time());
    auto model = models_->Commit(**fitted, done);
    if (model.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      done.set_model_name(model->name());
      done.set_model_version(model->version());
      entry->job = std::move(done);
      ++entry->version;
      --running_;
      active_.erase(id);
      changed_cv_.notify_all();
      spdlog::info("job {}: succeeded; model {} v{}", id, model->name(), model->version());
      if (options_.on_finished) options_.on_finished(entry->job);
      return;
    }
    outcome = model.status();
  } else if (fitted.ok()) {
    outcome = absl::CancelledError("job cancelled");  // finished after a cancel: drop the result
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (abandoned_) return;  // its record already says interrupted
  RecordStopLocked(*entry, outcome);
  absl::Status s = PublishLocked(*entry);
  if (!s.ok()) spdlog::error("job {}: cannot record outcome: {}", id, s.ToString());
  --running_;
  active_.erase(id);
  const v1::JobState state = entry->job.state();
  if (options_.on_finished && (state == v1::JOB_STATE_SUCCEEDED ||
                               state == v1::JOB_STATE_FAILED ||
                               state == v1::JOB_STATE_CANCELLED)) {
    options_.on_finished(entry->job);
  }
}

JobManager::Stats JobManager::GetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  return Stats{static_cast<int>(queue_.size()), running_};
}

absl::StatusOr<std::unique_ptr<FittedModel>> JobManager::Fit(const v1::JobSpec& spec,
                                                            RunContext& ctx) {
  try {
    DENDRO_ASSIGN_OR_RETURN(const Method* method, options_.resolve_method(spec));
    DENDRO_ASSIGN_OR_RETURN(auto dataset, datasets_->Open(spec.dataset_id()));
    if (std::optional<v1::ModelRef> base = method->BaseModel(spec)) {
      DENDRO_ASSIGN_OR_RETURN(auto loaded, models_->Load(*base));
      return method->FitFrom(*loaded.first, *dataset, spec, ctx);
    }
    return method->Fit(*dataset, spec, ctx);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "the job ran out of memory; use smaller parameters or a smaller dataset");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the job failed with an internal error: ", e.what()));
  }
}

void JobManager::RecordStopLocked(Entry& entry, const absl::Status& outcome) {
  v1::Job& job = entry.job;
  const std::string& id = job.id();
  if (outcome.code() == absl::StatusCode::kCancelled && entry.user_cancel) {
    // A requested cancel wins over a shutdown interrupt.
    job.set_state(v1::JOB_STATE_CANCELLED);
    job.set_stage("cancelled");
    job.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kCancelled));
    job.mutable_error()->set_message("cancelled by request");
    SetNow(job.mutable_end_time());
    spdlog::info("job {}: cancelled", id);
  } else if (outcome.code() == absl::StatusCode::kCancelled && entry.interrupted) {
    job.set_state(v1::JOB_STATE_QUEUED);
    job.set_stage("interrupted by shutdown; re-queued at next start");
    spdlog::warn("job {}: interrupted by shutdown", id);
  } else {
    job.set_state(v1::JOB_STATE_FAILED);
    job.set_stage("failed");
    job.mutable_error()->set_code(static_cast<int>(outcome.code()));
    job.mutable_error()->set_message(std::string(outcome.message()));
    SetNow(job.mutable_end_time());
    spdlog::warn("job {}: failed: {}", id, outcome.ToString());
  }
}

}  // namespace dendro::server
