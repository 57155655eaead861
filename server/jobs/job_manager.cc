#include "server/jobs/job_manager.h"

#include <google/protobuf/util/message_differencer.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/crash_point.h"
#include "core/common/run_context.h"
#include "core/common/status_macros.h"
#include "server/base/client_status.h"
#include "server/base/ids.h"
#include "server/base/job_lifecycle.h"
#include "server/base/logging.h"
#include "server/methods/method.h"
#include "spdlog/spdlog.h"

namespace dendro::server {
namespace {

// What WaitForChange compares: never 0 (the callers' start value) nor
// UINT64_MAX (finished).
uint64_t Fingerprint(const v1::Job& job) {
  const uint64_t h = std::hash<std::string>{}(job.SerializeAsString());
  return std::min<uint64_t>(h | 1, UINT64_MAX - 1);
}

}  // namespace

// Connects a running algorithm to its job entry.
class JobManager::Context final : public RunContext {
 public:
  Context(JobManager* mgr, std::shared_ptr<Entry> entry)
      : mgr_(mgr), entry_(std::move(entry)) {}
  bool Cancelled() const override { return entry_->cancel.load(std::memory_order_relaxed); }
  void Report(double fraction, std::string_view stage) override {
    fraction = std::clamp(fraction, 0.0, 1.0);
    const absl::Time now = absl::Now();
    MutexLock lock(&mgr_->mu_);
    v1::Job& job = mgr_->Guarded(*entry_).job;
    const bool stage_changed = job.stage() != stage;
    // A new stage is published at once; progress within a stage at most
    // every 0.5% and every kProgressInterval. Watchers need motion, not a
    // message per inner-loop iteration: each message wakes every watcher's
    // thread and its client, and on a 2-core machine those take the job's
    // cores (a 30 ms L2H job sent 20 of them). The catalogue gets the latest
    // value at the next lease renewal.
    if (!stage_changed &&
        (fraction < job.progress() + 0.005 || now < last_published_ + kProgressInterval)) {
      return;
    }
    job.set_progress(std::max(job.progress(), fraction));
    if (stage_changed && !job.cancel_requested()) job.set_stage(std::string(stage));
    last_published_ = now;
    mgr_->changed_cv_.SignalAll();
  }

 private:
  static constexpr absl::Duration kProgressInterval = absl::Milliseconds(100);

  JobManager* mgr_;
  std::shared_ptr<Entry> entry_;
  absl::Time last_published_ ABSL_GUARDED_BY(mgr_->mu_) = absl::InfinitePast();
};

JobManager::JobManager(Options options, Catalogue* catalogue, DatasetStore* datasets,
                       ModelRegistry* models)
    : options_(std::move(options)), catalogue_(catalogue), datasets_(datasets), models_(models) {
  if (!options_.resolve_method) options_.resolve_method = MethodForSpec;
}

JobManager::~JobManager() { Shutdown(absl::ZeroDuration()); }

absl::Status JobManager::Start() {
  DENDRO_ASSIGN_OR_RETURN(std::vector<v1::Job> requeued,
                          catalogue_->RequeueLostJobs(options_.replica_id));
  if (!requeued.empty()) {
    spdlog::info("re-queued {} job(s) left running by an earlier start", requeued.size());
  }
  {
    MutexLock lock(&mu_);
    accepting_ = true;
  }
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
  maintenance_thread_ = std::thread([this] { MaintenanceLoop(); });
  // A job queued through another replica wakes an idle worker here at once
  // (PostgreSQL's NOTIFY), not at its next poll.
  queue_watch_ = catalogue_->WatchQueue([this] {
    MutexLock lock(&mu_);
    ++submissions_;
    wake_cv_.SignalAll();
  });
  return absl::OkStatus();
}

bool JobManager::Shutdown(absl::Duration grace) {
  bool clean = true;
  // Before mu_ is taken: the watch's thread takes it to wake the workers.
  queue_watch_.reset();
  {
    MutexLock lock(&mu_);
    accepting_ = false;
    wake_cv_.SignalAll();
    if (workers_.empty()) return !abandoned_;
    const absl::Time deadline = absl::Now() + grace;
    while (running_ + claiming_ > 0 && absl::Now() < deadline) {
      changed_cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
    }
    stopping_ = true;
    for (auto& [id, entry] : active_) {
      entry->interrupted = true;
      entry->cancel = true;
    }
    wake_cv_.SignalAll();
    const absl::Time stop_deadline = absl::Now() + options_.stop_timeout;
    // A claim in flight ends registered (then interrupted at once, since
    // stopping_ is set) or empty: wait for it like for a running job.
    while (running_ + claiming_ > 0 && absl::Now() < stop_deadline) {
      changed_cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(20));
      for (auto& [id, entry] : active_) {
        entry->interrupted = true;
        entry->cancel = true;
      }
    }
    if (running_ + claiming_ > 0) {
      // A method that ignores cancellation must not hold the process: record
      // each such job as interrupted (or cancelled), stop publishing for it,
      // and let the caller exit without joining its thread.
      abandoned_ = true;
      clean = false;
      for (auto& [id, entry] : active_) {
        if (Guarded(*entry).unrecorded) continue;  // ended already; its record is retried below
        spdlog::error("job {}: did not stop within {} of the shutdown interrupt; abandoned", id,
                      absl::FormatDuration(options_.stop_timeout));
        RecordStopLocked(*entry, absl::CancelledError("interrupted"));
        ReleaseLocked(*entry).IgnoreError();  // logged; the lease expires and re-queues it
      }
    }
    maintenance_stop_ = true;
    maintenance_cv_.SignalAll();
  }
  if (maintenance_thread_.joinable()) maintenance_thread_.join();
  for (auto& t : workers_) {
    if (clean) {
      t.join();
    } else {
      t.detach();
    }
  }
  workers_.clear();
  return clean;
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& submitted,
                                           const std::string& owner,
                                           const std::string& request_id) {
  if (!request_id.empty()) {
    DENDRO_RETURN_IF_ERROR(ValidateRequestId(request_id));
    // A retry: answer with the first call's job, before anything else (its
    // transient dataset may be gone by now).
    DENDRO_ASSIGN_OR_RETURN(std::optional<v1::Job> previous,
                            catalogue_->FindJobByRequest(owner, request_id));
    if (previous.has_value()) return Replay(*previous, submitted);
  }
  v1::JobSpec spec = submitted;
  DENDRO_ASSIGN_OR_RETURN(const Method* method, options_.resolve_method(spec));
  if (spec.dataset_id().empty()) return absl::InvalidArgumentError("job spec: dataset_id is empty");
  // "LINEAGE" is its newest generation now: the job records which.
  absl::StatusOr<v1::Dataset> found = datasets_->Resolve(spec.dataset_id());
  if (!found.ok() && !request_id.empty()) {
    // A concurrent duplicate may have created the job, run it and removed
    // its transient dataset since the lookup above: answer with that job.
    DENDRO_ASSIGN_OR_RETURN(std::optional<v1::Job> previous,
                            catalogue_->FindJobByRequest(owner, request_id));
    if (previous.has_value()) return Replay(*previous, submitted);
  }
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset dataset, std::move(found));
  std::string dataset_ref;
  if (dataset.id() != spec.dataset_id()) {
    dataset_ref = spec.dataset_id();
    spec.set_dataset_id(dataset.id());
  }
  if (spec.leaf_names_size() > 0 && !method->leaf_names_refusal().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("leaf_names do not apply to ",
                                                   std::string(method->name()), ": ",
                                                   std::string(method->leaf_names_refusal())));
  }
  if (spec.has_warm_start() && !method->warm_starts()) {
    return absl::InvalidArgumentError(
        absl::StrCat("warm_start is not available for ", std::string(method->name()),
                     " (l2h, tneb and ghhc refits can warm-start); fit without it"));
  }
  DENDRO_RETURN_IF_ERROR(method->Validate(spec, dataset, options_.limits));
  // A fit writes a model: refuse it while the disk is at its floor.
  DENDRO_RETURN_IF_ERROR(datasets_->disk().Check(0, "job"));
  if (std::optional<v1::ModelRef> base = method->BaseModel(spec)) {
    DENDRO_ASSIGN_OR_RETURN(v1::Model base_model, models_->Get(*base));
    if (base_model.method() != std::string(method->name())) {
      const std::string m(method->name());
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", base_model.name(), "' v", base_model.version(), " is a ", base_model.method(),
          " model; ",
          spec.has_warm_start() ? absl::StrCat("a ", m, " fit can only warm-start from a ", m)
                                : absl::StrCat("only ", m, " models can be extended this way"),
          spec.has_warm_start() ? " model" : ""));
    }
    if (spec.model_name().empty()) spec.set_model_name(base->name());
    if (spec.has_warm_start()) {
      DENDRO_RETURN_IF_ERROR(CheckWarmStart(base_model, dataset));
      // What runs is the version this named now, not a newer one.
      spec.mutable_warm_start()->set_version(base_model.version());
      spec.mutable_warm_start()->clear_label();
    }
  }
  DENDRO_RETURN_IF_ERROR(ValidateModelName(spec.model_name()));
  DENDRO_RETURN_IF_ERROR(CheckMethodChange(spec, *method));

  v1::Job job;
  job.set_id(NewId("job"));
  job.set_owner(owner);
  job.set_request_id(request_id);
  job.set_dataset_ref(dataset_ref);
  job.set_memory_estimate_bytes(static_cast<int64_t>(method->PeakMemoryBytes(spec, dataset)));
  *job.mutable_spec() = spec;
  MarkQueued(job);

  absl::Status enqueued;
  {
    MutexLock lock(&mu_);
    if (!accepting_) return absl::UnavailableError("server is shutting down; job not accepted");
    // Under mu_, so this replica cannot delete the (transient) dataset
    // between the check above and the insert.
    enqueued = catalogue_->EnqueueJob(job, options_.queue_capacity);
    if (enqueued.ok()) {
      ++submissions_;
      wake_cv_.Signal();
      return job;
    }
  }
  if ((absl::IsAlreadyExists(enqueued) || absl::IsNotFound(enqueued)) && !request_id.empty()) {
    // The same request raced this one and was recorded first (and may
    // have run and removed its transient dataset since the lookup above,
    // which the catalogue reports before the duplicate).
    DENDRO_ASSIGN_OR_RETURN(std::optional<v1::Job> previous,
                            catalogue_->FindJobByRequest(owner, request_id));
    if (previous.has_value()) return Replay(*previous, submitted);
  }
  return enqueued;
}

absl::Status JobManager::CheckWarmStart(const v1::Model& base, const v1::Dataset& dataset) {
  const std::string what = absl::StrCat("warm_start: model '", base.name(), "' v", base.version());
  const std::string& lineage = DatasetLineage(dataset);
  // The generation the version was fitted on, or why it cannot be compared.
  absl::StatusOr<v1::Dataset> fitted_on = datasets_->ResolveExact(base.dataset_id());
  if (absl::IsNotFound(fitted_on.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " was fitted on dataset ", base.dataset_id(),
        ", which is gone, so its rows cannot be matched to this dataset's; fit without "
        "warm_start"));
  }
  if (!fitted_on.ok()) return fitted_on.status();
  const std::string& base_lineage = DatasetLineage(*fitted_on);
  if (base_lineage != lineage) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " was fitted on dataset ", base.dataset_id(), " (lineage ", base_lineage,
                     "), not on this dataset's lineage ", lineage,
                     ": a warm start needs the same rows followed by appended ones"));
  }
  if (fitted_on->rows() > dataset.rows()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " was fitted on ", fitted_on->rows(), " rows (generation ",
                     DatasetGeneration(*fitted_on), "), more than dataset ", dataset.id(), " has (",
                     dataset.rows(), "): warm-start from a version of an older generation"));
  }
  return absl::OkStatus();
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
  // The server records the generation a "LINEAGE" reference resolved to.
  if (!previous.dataset_ref().empty() && normalised.dataset_id() == previous.dataset_ref()) {
    normalised.set_dataset_id(previous.spec().dataset_id());
  }
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
  DENDRO_ASSIGN_OR_RETURN(v1::Job job, catalogue_->GetJob(id));
  if (!IsFinished(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", id, "' is queued or running; cancel it first"));
  }
  return catalogue_->DeleteJob(id);
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) {
  {
    MutexLock lock(&mu_);
    if (auto it = active_.find(id); it != active_.end()) return Guarded(*it->second).job;
  }
  return catalogue_->GetJob(id);
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id) {
  {
    // Running here: tell the algorithm now rather than at the next renewal.
    MutexLock lock(&mu_);
    if (auto it = active_.find(id); it != active_.end()) {
      Entry& entry = *it->second;
      Entry::Guarded& guarded = Guarded(entry);
      entry.cancel = true;
      if (!guarded.user_cancel) {
        guarded.user_cancel = true;
        MarkCancelRequested(guarded.job);
        changed_cv_.SignalAll();
      }
    }
  }
  // Recorded at once in the catalogue, so the request survives a crash and
  // reaches whichever replica holds the job.
  DENDRO_ASSIGN_OR_RETURN(v1::Job job, catalogue_->UpdateJob(id, [](v1::Job& j) {
    if (j.state() == v1::JOB_STATE_QUEUED) {
      MarkCancelled(j, "cancelled before it started");
      return true;
    }
    if (j.state() == v1::JOB_STATE_RUNNING && !j.cancel_requested()) {
      MarkCancelRequested(j);
      return true;
    }
    return false;
  }));
  if (job.state() == v1::JOB_STATE_CANCELLED && job.start_time().seconds() == 0) {
    // Cancelled before it started: no worker will release its dataset.
    ReleaseTransientDataset(job.spec().dataset_id());
  }
  MutexLock lock(&mu_);
  if (auto it = active_.find(id); it != active_.end()) {
    // Claimed here while the request was being recorded.
    Entry& entry = *it->second;
    Entry::Guarded& guarded = Guarded(entry);
    if (job.cancel_requested() && !guarded.user_cancel) {
      entry.cancel = true;
      guarded.user_cancel = true;
      MarkCancelRequested(guarded.job);
      changed_cv_.SignalAll();
    }
    return guarded.job;
  }
  return job;
}

absl::StatusOr<v1::Job> JobManager::WaitForChange(const std::string& id, uint64_t* seen,
                                                  absl::Time deadline) {
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (auto it = active_.find(id); it != active_.end()) {
        std::shared_ptr<Entry> entry = it->second;
        while (Fingerprint(Guarded(*entry).job) == *seen && absl::Now() < deadline &&
               active_.count(id) != 0) {
          const absl::Duration left = std::min(deadline - absl::Now(), absl::Seconds(1));
          changed_cv_.WaitUntil(&mu_,
                                std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(left));
        }
        if (active_.count(id) != 0 || absl::Now() >= deadline) {
          *seen = Fingerprint(Guarded(*entry).job);
          return Guarded(*entry).job;
        }
        // Finished meanwhile: read the outcome from the catalogue.
      }
    }
    DENDRO_ASSIGN_OR_RETURN(v1::Job job, catalogue_->GetJob(id));
    if (IsFinished(job.state())) {
      *seen = UINT64_MAX;  // no further changes
      return job;
    }
    const uint64_t fingerprint = Fingerprint(job);
    if (fingerprint != *seen || absl::Now() >= deadline) {
      *seen = fingerprint;
      return job;
    }
    // Queued, or running on another replica: poll (a claim here wakes us).
    MutexLock lock(&mu_);
    const absl::Duration pause = std::min(deadline - absl::Now(), options_.poll_interval);
    if (pause > absl::ZeroDuration()) {
      changed_cv_.WaitUntil(&mu_,
                            std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(pause));
    }
  }
}


JobManager::Stats JobManager::GetStats() {
  absl::StatusOr<JobCounts> counts = catalogue_->CountJobs();
  MutexLock lock(&mu_);
  return Stats{counts.ok() ? static_cast<int>(counts->queued) : -1, running_};
}

JobManager::LeaseStats JobManager::GetLeaseStats() {
  MutexLock lock(&mu_);
  return lease_stats_;
}

void JobManager::WorkerLoop() {
  // Linux gives each thread its own nice value, and threads inherit it from
  // the thread that starts them: a job's OpenMP team too. Raising it needs
  // no privilege; failing leaves the worker at the process's priority.
  if (options_.nice > 0) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), options_.nice);
  }
  // The scheduling policy is per thread and inherited the same way.
  if (options_.idle_scheduling) {
    const sched_param param{};
    if (const int err = pthread_setschedparam(pthread_self(), SCHED_IDLE, &param); err != 0) {
      spdlog::warn("job threads: SCHED_IDLE refused ({}); they keep nice {}", std::strerror(err),
                   options_.nice);
    }
  }
  for (;;) {
    uint64_t submissions;
    {
      MutexLock lock(&mu_);
      if (stopping_ || !accepting_) return;
      submissions = submissions_;
      ++claiming_;
    }
    absl::StatusOr<std::optional<ClaimedJob>> claimed =
        catalogue_->ClaimJob(options_.replica_id, options_.lease_ttl);
    if (!claimed.ok() || !claimed->has_value()) {
      if (!claimed.ok()) spdlog::warn("cannot claim a job: {}", claimed.status().ToString());
      MutexLock lock(&mu_);
      --claiming_;
      changed_cv_.SignalAll();
      const auto wake_by =
          std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(options_.poll_interval);
      while (!(stopping_ || !accepting_ || submissions_ != submissions) &&
             wake_cv_.WaitUntil(&mu_, wake_by)) {
      }
      continue;
    }
    const std::string id = (*claimed)->job.id();
    auto entry = std::make_shared<Entry>(std::move((*claimed)->job), (*claimed)->token);
    {
      MutexLock lock(&mu_);
      --claiming_;
      changed_cv_.SignalAll();
      if (!Admit(*entry)) continue;
      // The catalogue already shows it RUNNING: from here it is this
      // replica's to run, or (claimed as a drain passed its grace) to
      // interrupt and hand back.
      if (stopping_) {
        entry->interrupted = true;
        entry->cancel = true;
      }
      active_[id] = entry;
      ++running_;
      changed_cv_.SignalAll();
      if (options_.on_started) options_.on_started(Guarded(*entry).job);
    }
    CrashPoint("job.started");
    Run(entry);
  }
}

bool JobManager::Admit(Entry& entry) {
  v1::Job& job = Guarded(entry).job;
  if (job.cancel_requested()) {
    // The cancel was recorded but the job's last run stopped before it did.
    MarkCancelled(job, "cancelled by request (the server stopped before the job did)");
  } else if (job.attempts() > options_.max_attempts) {
    // Started this often and never finished: the job itself is the likely
    // reason its servers went down. Never run it again.
    job.set_attempts(options_.max_attempts);
    MarkFailed(job, absl::StatusCode::kAborted,
               absl::StrCat("the job was started ", job.attempts(),
                            " times and the server stopped before it finished each time; it is "
                            "not retried again (dendrod --max_job_attempts)"));
    spdlog::warn("job {}: failed after {} attempts", job.id(), job.attempts());
  } else if (absl::IsNotFound(datasets_->Get(job.spec().dataset_id()).status())) {
    // Its dataset was transient (or deleted): nothing to re-run.
    MarkFailed(job, absl::StatusCode::kFailedPrecondition,
               absl::StrCat("dataset ", job.spec().dataset_id(),
                            " no longer exists (transient datasets do not survive a restart)"));
  } else {
    return true;
  }
  // (A record refused here is logged; the job's lease then expires and it
  // is claimed again, which decides it the same way.)
  ReleaseLocked(entry).IgnoreError();
  if (options_.on_finished) options_.on_finished(job);
  return false;
}

void JobManager::MaintenanceLoop() {
  // Re-queue checks a few times per lease: a dead replica's job waits at
  // most about a quarter of lease_ttl beyond its expiry.
  const absl::Duration requeue_period = std::max(options_.lease_ttl / 4, absl::Milliseconds(100));
  // Retention often enough that a record outlives its retention by at most
  // a tenth of it (and never by more than ten minutes).
  const absl::Duration retention_period =
      std::clamp(options_.retention / 10, absl::Seconds(1), absl::Minutes(10));
  absl::Time next_requeue = absl::Now() + requeue_period;
  absl::Time next_retention = absl::Now();
  MutexLock lock(&mu_);
  while (!maintenance_stop_) {
    mu_.Unlock();
    RenewLeases();
    const absl::Time now = absl::Now();
    if (now >= next_requeue) {
      next_requeue = now + requeue_period;
      absl::StatusOr<std::vector<v1::Job>> requeued = catalogue_->RequeueLostJobs("");
      if (!requeued.ok()) {
        spdlog::warn("cannot re-queue jobs with expired leases: {}", requeued.status().ToString());
      } else {
        for (const v1::Job& job : *requeued) {
          spdlog::warn("job {}: its lease expired (the replica running it stopped); re-queued",
                       job.id());
        }
        if (!requeued->empty()) {
          MutexLock counted(&mu_);
          lease_stats_.takeovers += static_cast<int64_t>(requeued->size());
          wake_cv_.SignalAll();
        }
      }
    }
    if (options_.retention > absl::ZeroDuration() && now >= next_retention) {
      next_retention = now + retention_period;
      const int64_t cutoff = absl::ToUnixSeconds(now - options_.retention);
      absl::StatusOr<int> removed = catalogue_->DeleteJobsEndedBefore(cutoff);
      if (!removed.ok()) {
        spdlog::warn("job retention: {}", removed.status().ToString());
      } else if (*removed > 0) {
        spdlog::info("job retention: removed {} finished job record(s) older than {}", *removed,
                     absl::FormatDuration(options_.retention));
      }
    }
    mu_.Lock();
    const auto renew_by =
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(options_.renew_interval);
    while (!maintenance_stop_ && maintenance_cv_.WaitUntil(&mu_, renew_by)) {
    }
  }
}

void JobManager::RenewLeases() {
  struct Lease {
    std::shared_ptr<Entry> entry;
    std::string id;
    int64_t token;
    double progress;
    std::string stage;
  };
  std::vector<Lease> leases;
  {
    MutexLock lock(&mu_);
    if (abandoned_) return;
    RetryUnrecordedLocked();
    for (const auto& [id, entry] : active_) {
      const Entry::Guarded& guarded = Guarded(*entry);
      if (guarded.lost) continue;
      leases.push_back({entry, id, entry->token, guarded.job.progress(), guarded.job.stage()});
    }
  }
  for (const Lease& l : leases) {
    absl::StatusOr<v1::Job> stored =
        catalogue_->RenewJobLease(l.id, l.token, options_.lease_ttl, l.progress, l.stage);
    MutexLock lock(&mu_);
    Entry& entry = *l.entry;
    Entry::Guarded& guarded = Guarded(entry);
    if (guarded.finishing) continue;  // the outcome, not a lost lease, ended it
    if (absl::IsAborted(stored.status())) {
      if (!guarded.lost) {
        ++lease_stats_.lost;
        spdlog::error("job {}: lease lost (not renewed within {}); stopping this run, whose "
                      "result will be dropped",
                      l.id, absl::FormatDuration(options_.lease_ttl));
      }
      guarded.lost = true;
      entry.cancel = true;
    } else if (!stored.ok()) {
      spdlog::warn("job {}: cannot renew its lease: {}", l.id, stored.status().ToString());
    } else if (stored->cancel_requested() && !guarded.user_cancel) {
      // Cancelled through another replica.
      guarded.user_cancel = true;
      entry.cancel = true;
      MarkCancelRequested(guarded.job);
      changed_cv_.SignalAll();
    }
  }
}

void JobManager::ReleaseTransientDataset(const std::string& dataset_id,
                                         const std::string& except_job) {
  auto info = datasets_->Get(dataset_id);
  if (!info.ok() || !info->transient()) return;
  MutexLock lock(&mu_);
  if (abandoned_) return;
  // Refused, atomically with any Submit on any replica, while another job
  // still needs it.
  absl::Status s = datasets_->Delete(dataset_id, except_job);
  if (s.ok()) {
    spdlog::info("dataset {}: transient, removed after its last job", dataset_id);
  } else if (!absl::IsNotFound(s) && !absl::IsFailedPrecondition(s)) {
    spdlog::warn("dataset {}: cannot remove transient dataset: {}", dataset_id, s.ToString());
  }
}

void JobManager::Run(const std::shared_ptr<Entry>& entry) {
  v1::Job started;
  {
    MutexLock lock(&mu_);
    started = Guarded(*entry).job;
  }
  const std::string id = started.id();
  const ScopedJobLogContext log_context(id);
  const v1::JobSpec spec = started.spec();
  spdlog::info("job {}: running for model {} on dataset {} (attempt {})", id, spec.model_name(),
               spec.dataset_id(), started.attempts());
  Context ctx(this, entry);
  absl::StatusOr<std::unique_ptr<FittedModel>> fitted = Fit(spec, ctx);
  bool lost;
  {
    MutexLock lock(&mu_);
    lost = Guarded(*entry).lost;
  }
  // The fit no longer reads its dataset: a transient one goes now, before
  // the outcome is visible, so a client that sees the job end never sees
  // its dataset. (Unless the job has passed to another replica.)
  if (!lost) ReleaseTransientDataset(spec.dataset_id(), id);

  absl::Status outcome = fitted.status();
  v1::Job done;
  bool cancel_requested = false;
  {
    MutexLock lock(&mu_);
    if (abandoned_) return;  // its record already says interrupted
    Entry::Guarded& guarded = Guarded(*entry);
    cancel_requested = guarded.user_cancel;
    lost = guarded.lost;
    done = guarded.job;
    guarded.finishing = true;
  }
  if (fitted.ok() && !cancel_requested && !lost) {
    MarkSucceeded(done);
    // A method's warning about its own result (e.g. a degenerate t-NEB
    // tree) goes into the job's final stage.
    if (const auto md = (*fitted)->metadata(); md.count("warning") != 0) {
      done.set_stage(absl::StrCat("done; warning: ", md.at("warning")));
      spdlog::warn("job {}: {}", id, md.at("warning"));
    }
    auto model = models_->Commit(**fitted, done, entry->token);
    if (model.ok()) {
      MutexLock lock(&mu_);
      done.set_model_name(model->name());
      done.set_model_version(model->version());
      Guarded(*entry).job = std::move(done);
      spdlog::info("job {}: succeeded; model {} v{}", id, model->name(), model->version());
      ForgetLocked(entry);
      return;
    }
    outcome = model.status();
    MutexLock lock(&mu_);
    if (absl::IsAborted(outcome)) Guarded(*entry).lost = true;
    if (absl::IsCancelled(outcome)) {
      Guarded(*entry).user_cancel = true;  // cancelled through another replica
    }
  } else if (fitted.ok()) {
    outcome = absl::CancelledError("job cancelled");  // finished after a cancel: drop the result
  }

  MutexLock lock(&mu_);
  if (abandoned_) return;  // its record already says interrupted
  if (Guarded(*entry).lost) {
    spdlog::warn("job {}: this run's lease ended; its result is dropped (another replica owns "
                 "the job now)",
                 id);
    --running_;
    active_.erase(id);
    changed_cv_.SignalAll();
    return;
  }
  RecordStopLocked(*entry, outcome);
  if (absl::Status recorded = ReleaseLocked(*entry); !recorded.ok()) {
    KeepUnrecordedLocked(entry, recorded);
    return;
  }
  ForgetLocked(entry);
}

absl::Status JobManager::ReleaseLocked(Entry& entry) {
  const v1::Job& job = Guarded(entry).job;
  absl::Status s = catalogue_->ReleaseJob(job, entry.token);
  if (absl::IsAborted(s)) {
    spdlog::warn("job {}: not recorded as {}: {}", job.id(), v1::JobState_Name(job.state()),
                 std::string(s.message()));
    return absl::OkStatus();
  }
  if (!s.ok()) {
    spdlog::error("job {}: cannot record its state (retrying): {}", job.id(), s.ToString());
  }
  return s;
}

void JobManager::RetryUnrecordedLocked() {
  std::vector<std::shared_ptr<Entry>> pending;
  for (const auto& [id, entry] : active_) {
    if (Guarded(*entry).unrecorded) pending.push_back(entry);
  }
  for (const std::shared_ptr<Entry>& entry : pending) {
    Entry::Guarded& guarded = Guarded(*entry);
    // The stage said what was pending; the record carries the outcome alone.
    v1::Job shown = guarded.job;
    guarded.job.set_stage(guarded.final_stage);
    if (absl::Status recorded = ReleaseLocked(*entry); !recorded.ok()) {
      guarded.job = std::move(shown);
      KeepUnrecordedLocked(entry, recorded);
      continue;
    }
    spdlog::info("job {}: outcome recorded", guarded.job.id());
    active_.erase(guarded.job.id());
    changed_cv_.SignalAll();
    if (options_.on_finished) options_.on_finished(guarded.job);
  }
}

void JobManager::KeepUnrecordedLocked(const std::shared_ptr<Entry>& entry,
                                      const absl::Status& why) {
  Entry::Guarded& guarded = Guarded(*entry);
  if (!guarded.unrecorded) {
    guarded.unrecorded = true;
    guarded.final_stage = guarded.job.stage();
    --running_;  // the run is over; only its record is pending
  }
  guarded.job.set_stage(absl::StrCat(guarded.final_stage,
                                     " (recording the outcome: retrying after: ",
                                     ScrubPaths(std::string(why.message()), ""), ")"));
  changed_cv_.SignalAll();
}

void JobManager::ForgetLocked(const std::shared_ptr<Entry>& entry) {
  const v1::Job& job = Guarded(*entry).job;
  --running_;
  active_.erase(job.id());
  changed_cv_.SignalAll();
  if (options_.on_finished && IsFinished(job.state())) options_.on_finished(job);
}

absl::StatusOr<std::unique_ptr<FittedModel>> JobManager::Fit(const v1::JobSpec& spec,
                                                            RunContext& ctx) {
  try {
    DENDRO_ASSIGN_OR_RETURN(const Method* method, options_.resolve_method(spec));
    DENDRO_ASSIGN_OR_RETURN(auto dataset, datasets_->Open(spec.dataset_id()));
    if (std::optional<v1::ModelRef> base = method->BaseModel(spec)) {
      DENDRO_ASSIGN_OR_RETURN(auto loaded, models_->Load(*base));
      return method->FitFrom(*loaded.model, *dataset, spec, ctx);
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
  v1::Job& job = Guarded(entry).job;
  const std::string& id = job.id();
  if (outcome.code() == absl::StatusCode::kCancelled && Guarded(entry).user_cancel) {
    // A requested cancel wins over a shutdown interrupt.
    MarkCancelled(job, "cancelled by request");
    spdlog::info("job {}: cancelled", id);
  } else if (outcome.code() == absl::StatusCode::kCancelled && entry.interrupted) {
    MarkRequeued(job, Requeue::kShutdown);
    spdlog::warn("job {}: interrupted by shutdown", id);
  } else {
    MarkFailed(job, outcome.code(), std::string(outcome.message()));
    spdlog::warn("job {}: failed: {}", id, outcome.ToString());
  }
}

}  // namespace dendro::server
