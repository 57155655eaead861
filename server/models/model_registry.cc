#include "server/models/model_registry.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/common/crash_point.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
#include "server/base/ids.h"
#include "server/base/names.h"
#include "server/storage/checksum.h"
#include "spdlog/spdlog.h"

namespace dendro::server {
namespace {

// Index of the first byte outside [A-Za-z0-9._-], or npos.
size_t FirstOutsideNameAlphabet(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return i;
  }
  return std::string::npos;
}

constexpr char kStableIdsFile[] = "stable_ids.json";

// The ids stored with a version; its node ids when none are (versions
// stored before stable ids were kept).
absl::StatusOr<StableIds> ReadStableIds(const std::string& dir, const Hierarchy& tree) {
  const std::string path = dir + "/" + kStableIdsFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return FirstStableIds(tree);
  std::string text;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(path, &text));
  return ParseStableIdsJson(text, tree);
}

}  // namespace

absl::Status ValidateModelName(const std::string& name) {
  if (name.empty() || name.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name must be 1-128 characters, got ", name.size()));
  }
  if (name[0] == '.') return absl::InvalidArgumentError("model name must not start with '.'");
  if (const size_t bad = FirstOutsideNameAlphabet(name); bad != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model name '", name, "' has character ", DescribeCharacter(name, bad),
        "; allowed are letters, digits, '.', '_' and '-'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabel(const std::string& label) {
  if (label.empty() || label.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("label must be 1-64 characters, got ", label.size()));
  }
  if (!((label[0] >= 'a' && label[0] <= 'z') || (label[0] >= 'A' && label[0] <= 'Z'))) {
    return absl::InvalidArgumentError(
        absl::StrCat("label '", label, "' must start with a letter"));
  }
  if (label == "latest") {
    return absl::InvalidArgumentError("'latest' is not a label: it means the newest version");
  }
  if (const size_t bad = FirstOutsideNameAlphabet(label); bad != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label '", label, "' has character ", DescribeCharacter(label, bad),
        "; allowed are letters, digits, '.', '_' and '-'"));
  }
  return absl::OkStatus();
}

ModelRegistry::ModelRegistry(ArtifactStore* artifacts, Catalogue* catalogue, int64_t cache_bytes)
    : artifacts_(artifacts), catalogue_(catalogue), cache_(cache_bytes) {}

ModelRegistry::~ModelRegistry() { watch_.reset(); }

void ModelRegistry::StartWatching(absl::Duration reconcile) {
  watch_ = catalogue_->WatchModelChanges(
      [this](const std::string& name) {
        if (name.empty()) {
          Reconcile();
        } else {
          Refresh(name, /*held_only=*/true).IgnoreError();
        }
      },
      reconcile);
}

absl::StatusOr<std::vector<StoredModel>> ModelRegistry::Refresh(const std::string& name,
                                                                bool held_only) {
  if (held_only && !table_.Holds(name)) return std::vector<StoredModel>();
  const uint64_t ticket = table_.NextTicket();
  absl::StatusOr<std::vector<StoredModel>> read = catalogue_->ModelVersions(name);
  if (!read.ok()) {
    table_.Forget(name, ticket);
    return read.status();
  }
  ModelTable::Dropped dropped;
  table_.Install(name, *read, ticket, held_only, &dropped);
  DropFromCache(dropped);
  return read;
}

void ModelRegistry::Reconcile() {
  const uint64_t ticket = table_.NextTicket();
  absl::StatusOr<std::vector<StoredModel>> all = catalogue_->ModelVersions("");
  if (!all.ok()) {
    spdlog::warn("model table: reconciliation with the catalogue failed: {}",
                 std::string(all.status().message()));
    return;
  }
  ModelTable::Dropped dropped;
  table_.InstallAll(*std::move(all), ticket, &dropped);
  DropFromCache(dropped);
}

void ModelRegistry::DropFromCache(const ModelTable::Dropped& dropped) {
  for (const auto& key : dropped) cache_.Erase(key);
}

absl::StatusOr<v1::Model> ModelRegistry::Commit(const FittedModel& model, v1::Job job,
                                                int64_t lease_token) {
  const std::string name = job.spec().model_name();
  DENDRO_RETURN_IF_ERROR(ValidateModelName(name));
  const std::string key = absl::StrCat("models/", name, "/", NewId("m"));
  ChecksumMap sums;
  std::map<std::string, std::string> stable_metadata;
  {
    // Unpublished, the staged directory removes itself.
    DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<StagedDirectory> staged, artifacts_->Stage(key));
    DENDRO_RETURN_IF_ERROR(model.Save(staged->path()));
    StableIdsOutcome stable = StableIdsFor(name, model, job.spec().dataset_id());
    DENDRO_RETURN_IF_ERROR(
        WriteFileAtomic(staged->path() + "/" + kStableIdsFile, StableIdsJson(stable.ids)));
    stable_metadata = std::move(stable.metadata);
    DENDRO_ASSIGN_OR_RETURN(sums, ChecksumTree(staged->path()));
    DENDRO_RETURN_IF_ERROR(staged->Publish());
  }
  CrashPoint("model.files_written");
  v1::Model m;
  m.set_name(name);
  m.set_method(std::string(model.method()));
  m.set_dataset_id(job.spec().dataset_id());
  m.set_job_id(job.id());
  m.set_owner(job.owner());
  m.set_num_leaves(model.tree().num_leaves());
  m.set_input_dim(model.input_dim());
  SetNow(m.mutable_create_time());
  for (const auto& [k, v] : model.metadata()) (*m.mutable_metadata())[k] = v;
  for (const auto& [k, v] : stable_metadata) (*m.mutable_metadata())[k] = v;
  m.mutable_checksums()->insert(sums.begin(), sums.end());
  auto committed = catalogue_->CommitModel(m, key, std::move(job), lease_token);
  if (!committed.ok()) {
    // (An outcome-unknown commit may have landed: the table re-reads.)
    Refresh(name).IgnoreError();
    artifacts_->Remove(key).IgnoreError();
    return committed.status();
  }
  Refresh(name).IgnoreError();
  m.set_version(committed->version);
  CrashPoint("model.committed");
  if (!committed->pruned.empty()) {
    spdlog::info("model '{}': retention removed {} older version(s)", name,
                 committed->pruned.size());
    RemoveFiles(name, committed->pruned);
  }
  return m;
}

std::string ModelRegistry::LineageOf(const std::string& dataset_id) {
  absl::StatusOr<v1::Dataset> d = catalogue_->GetDataset(dataset_id);
  return d.ok() ? DatasetLineage(*d) : dataset_id;
}

namespace {

// The first id above every id a name has used: the newest version's `next`
// (from its ids when they were read, and from its recorded metadata), and
// above the node numbers (< 2 L) of a version stored before ids were kept.
int64_t NextUnusedId(const StableIds* ids, const v1::Model* info) {
  int64_t next = ids != nullptr ? ids->next : 0;
  if (info == nullptr) return next;
  int64_t recorded = 0;
  if (auto it = info->metadata().find("stable_ids_next");
      it != info->metadata().end() && absl::SimpleAtoi(it->second, &recorded)) {
    next = std::max(next, recorded);
  }
  return std::max<int64_t>(next, 2 * int64_t{info->num_leaves()});
}

// All-new ids for `tree`'s nodes, from `next` on.
StableIds FreshIds(const Hierarchy& tree, int64_t next) {
  StableIds ids = FirstStableIds(tree);
  for (int64_t& id : ids.node) id += next;
  ids.next += next;
  return ids;
}

}  // namespace

absl::StatusOr<ModelRegistry::CarriedIds> ModelRegistry::CarryFromPrevious(
    const LoadedModel& previous, const FittedModel& model, const std::string& lineage,
    int64_t next) {
  const v1::Model& info = previous.info();
  const Hierarchy& previous_tree = previous.model->tree();
  absl::StatusOr<ClusterOverlap> overlap;
  absl::StatusOr<const Method*> method = MethodByName(model.method());
  if (info.method() != model.method()) {
    overlap = absl::FailedPreconditionError(absl::StrCat("the method changed (", info.method(),
                                                         " to ", std::string(model.method()),
                                                         "), so the clusters are not comparable"));
  } else if (method.ok() && (*method)->leaves_are_classes()) {
    overlap = OverlapByLeaves(previous_tree, model.tree());
  } else {
    auto it = info.metadata().find("dataset_lineage");
    const std::string previous_lineage =
        it != info.metadata().end() ? it->second : LineageOf(info.dataset_id());
    overlap = previous_lineage == lineage
                  ? OverlapByPoints(previous_tree, model.tree())
                  : absl::FailedPreconditionError(
                        "the versions were fitted on different datasets (not generations of one "
                        "lineage), so they share neither points nor classes");
  }
  if (!overlap.ok()) return overlap.status();
  StableIds from = *previous.stable_ids;
  from.next = next;
  DENDRO_ASSIGN_OR_RETURN(StableIdMatch match,
                          CarryStableIds(previous_tree, from, model.tree(), *overlap));
  return CarriedIds{std::move(match), overlap->basis};
}

ModelRegistry::StableIdsOutcome ModelRegistry::StableIdsFor(const std::string& name,
                                                            const FittedModel& model,
                                                            const std::string& dataset_id) {
  const Hierarchy& tree = model.tree();
  StableIdsOutcome out;
  std::map<std::string, std::string>& md = out.metadata;
  const std::string lineage = LineageOf(dataset_id);
  md["dataset_lineage"] = lineage;
  v1::ModelRef newest;
  newest.set_name(name);
  absl::StatusOr<LoadedModel> previous = Load(newest);
  if (absl::IsNotFound(previous.status())) {
    out.ids = FirstStableIds(tree);
    md["stable_ids_basis"] = "first";
    md["stable_ids_kept"] = "0";
    md["stable_ids_new"] = absl::StrCat(tree.num_nodes());
    md["stable_ids_next"] = absl::StrCat(out.ids.next);
    return out;
  }
  // The newest version's record, even when the version cannot be read.
  std::optional<v1::Model> previous_info;
  if (previous.ok()) {
    previous_info = previous->info();
  } else {
    spdlog::warn("model '{}': stable ids not matched: {}", name, previous.status().ToString());
    if (absl::StatusOr<v1::Model> info = Get(newest); info.ok()) previous_info = *info;
  }
  if (previous_info.has_value()) {
    md["stable_ids_previous_version"] = absl::StrCat(previous_info->version());
  }
  const int64_t next = NextUnusedId(previous.ok() ? previous->stable_ids.get() : nullptr,
                                    previous_info.has_value() ? &*previous_info : nullptr);
  absl::StatusOr<CarriedIds> carried =
      previous.ok() ? CarryFromPrevious(*previous, model, lineage, next)
                    // (The status's message may name the server's files: the log has it.)
                    : absl::FailedPreconditionError(
                          absl::StrCat("the newest version could not be read (",
                                       absl::StatusCodeToString(previous.status().code()), ")"));
  if (carried.ok()) {
    out.ids = std::move(carried->match.ids);
    md["stable_ids_basis"] = carried->basis;
    md["stable_ids_kept"] = absl::StrCat(carried->match.kept);
    md["stable_ids_new"] = absl::StrCat(carried->match.fresh);
  } else {
    const std::string note(carried.status().message());
    out.ids = FreshIds(tree, next);
    md["stable_ids_basis"] = "none";
    md["stable_ids_kept"] = "0";
    md["stable_ids_new"] = absl::StrCat(tree.num_nodes());
    md["stable_ids_note"] = note;
    spdlog::info("model '{}': new stable ids for every cluster: {}", name, note);
  }
  md["stable_ids_next"] = absl::StrCat(out.ids.next);
  return out;
}

namespace {
absl::Status ValidateVersion(int64_t version) {
  if (version >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model version must be >= 0 (0: the latest), got ", version));
}

absl::Status ValidateRef(const v1::ModelRef& ref) {
  // An empty name would otherwise list every model's versions and resolve
  // to one of them.
  DENDRO_RETURN_IF_ERROR(ValidateModelName(ref.name()));
  DENDRO_RETURN_IF_ERROR(ValidateVersion(ref.version()));
  if (!ref.label().empty()) {
    if (ref.version() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", ref.name(), "': give a version or a label, not both (version ",
          ref.version(), ", label '", ref.label(), "')"));
    }
    DENDRO_RETURN_IF_ERROR(ValidateLabel(ref.label()));
  }
  return absl::OkStatus();
}

// `ref` among `versions` (every version of its name, ascending), worded as
// the catalogue words a miss.
absl::StatusOr<ModelTable::Entry> ResolveIn(const std::vector<StoredModel>& versions,
                                            const v1::ModelRef& ref) {
  int64_t version = ref.version();
  if (!ref.label().empty()) {
    version = -1;
    for (const StoredModel& s : versions) {
      for (const std::string& l : s.model.labels()) {
        if (l == ref.label()) version = s.model.version();
      }
    }
    if (version < 0) return LabelNotFound(ref.name(), ref.label());
  }
  for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
    if (version == 0 || it->model.version() == version) {
      return std::make_shared<const StoredModel>(*it);
    }
  }
  return ModelNotFound(ref.name(), version);
}
}  // namespace

absl::StatusOr<ModelTable::Entry> ModelRegistry::Resolve(const v1::ModelRef& ref) {
  DENDRO_RETURN_IF_ERROR(ValidateRef(ref));
  if (std::optional<absl::StatusOr<ModelTable::Entry>> held =
          table_.Find(ref.name(), ref.version(), ref.label());
      held.has_value() && held->ok()) {
    return *std::move(held);
  }
  // Not held, or held without what was asked for: it may have been
  // committed or labelled by another replica a moment ago. Ask the
  // catalogue (misses are errors, rare on the serving path).
  DENDRO_ASSIGN_OR_RETURN(std::vector<StoredModel> versions, Refresh(ref.name()));
  return ResolveIn(versions, ref);
}

absl::StatusOr<v1::Model> ModelRegistry::Get(const v1::ModelRef& ref) {
  DENDRO_ASSIGN_OR_RETURN(ModelTable::Entry entry, Resolve(ref));
  return entry->model;
}

absl::StatusOr<LoadedModel> ModelRegistry::Load(const v1::ModelRef& ref) {
  DENDRO_ASSIGN_OR_RETURN(ModelTable::Entry entry, Resolve(ref));
  const StoredModel& stored = *entry;
  const std::string& name = ref.name();
  const auto key = std::make_pair(name, stored.model.version());
  if (CachedModel hit = cache_.Get(key); hit.model != nullptr) {
    return LoadedModel{std::move(hit.model), std::move(entry), std::move(hit.stable_ids)};
  }
  DENDRO_ASSIGN_OR_RETURN(const Method* method, MethodByName(stored.model.method()));
  const std::string what = absl::StrCat("model '", name, "' version ", stored.model.version());
  absl::StatusOr<std::string> path = artifacts_->LocalPath(stored.dir);
  absl::Status intact = path.status();
  if (intact.ok() && !stored.model.checksums().empty()) {
    absl::StatusOr<ChecksumMap> actual = ChecksumTree(*path);
    intact = actual.ok() ? CompareChecksums(ToChecksumMap(stored.model.checksums()), *actual, what)
                         : actual.status();
  }
  absl::StatusOr<std::unique_ptr<FittedModel>> loaded =
      intact.ok() ? method->Load(*path) : intact;
  if (!loaded.ok()) {
    // This version deleted (here or through another replica) since the
    // lookup: that is not damage. Look for the version, not the ref: a
    // "latest" ref may now find a newer one.
    if (absl::IsNotFound(catalogue_->GetModel(name, stored.model.version()).status())) {
      Refresh(name).IgnoreError();
      return absl::NotFoundError(absl::StrCat(what, " was just deleted"));
    }
    if (absl::IsDataLoss(intact)) return intact;  // CompareChecksums named the model
    return absl::DataLossError(
        absl::StrCat(what, " could not be loaded: ", loaded.status().message()));
  }
  std::shared_ptr<const FittedModel> model = *std::move(loaded);
  absl::StatusOr<StableIds> ids = ReadStableIds(*path, model->tree());
  if (!ids.ok()) {
    return absl::DataLossError(
        absl::StrCat(what, " could not be loaded: ", ids.status().message()));
  }
  CachedModel cached{model, std::make_shared<const StableIds>(*std::move(ids))};
  // What the loaded model holds: its files, less those Load left on disk.
  int64_t bytes = artifacts_->Bytes(stored.dir);
  for (const std::string& file : method->files_left_on_disk()) {
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(*path + "/" + file, ec);
    if (!ec) bytes -= static_cast<int64_t>(size);
  }
  if (!cache_.Put(key, cached, bytes)) {
    // Such a model is reloaded on every request: say so once, not each time.
    static std::atomic<bool> warned{false};
    spdlog::log(warned.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                "model '{}' version {} ({} MiB) is larger than the whole model cache; it is "
                "served but reloaded on every use (raise --model_cache_mb)",
                name, stored.model.version(), bytes >> 20);
  }
  return LoadedModel{std::move(cached.model), std::move(entry), std::move(cached.stable_ids)};
}

absl::StatusOr<int> ModelRegistry::Delete(const std::string& name, int64_t version) {
  DENDRO_RETURN_IF_ERROR(ValidateVersion(version));
  absl::StatusOr<std::vector<StoredModel>> removed = catalogue_->DeleteModels(name, version);
  // Before answering: a version deleted here is not served after this.
  Refresh(name).IgnoreError();
  if (!removed.ok()) return removed.status();
  CrashPoint("model_delete.rows_removed");
  RemoveFiles(name, *removed);
  return static_cast<int>(removed->size());
}

void ModelRegistry::RemoveFiles(const std::string& name, const std::vector<StoredModel>& removed) {
  for (const auto& r : removed) {
    cache_.Erase(std::make_pair(name, r.model.version()));
    // The rows are gone; files left by a failure here are swept at the next
    // start.
    artifacts_->Remove(r.dir).IgnoreError();
  }
}

absl::StatusOr<std::optional<int64_t>> ModelRegistry::RetentionExemptionLost(
    const std::string& name, const std::string& label, int64_t new_version) {
  absl::StatusOr<StoredModel> now = catalogue_->GetModel(name, 0, label);
  if (absl::IsNotFound(now.status())) return std::nullopt;  // a new label protects more
  if (!now.ok()) return now.status();
  if (now->model.keep_versions() <= 0) return std::nullopt;
  const int64_t from = now->model.version();
  if (new_version == 0) {
    DENDRO_ASSIGN_OR_RETURN(StoredModel latest, catalogue_->GetModel(name, 0));
    new_version = latest.model.version();
  }
  if (new_version == from) return std::nullopt;
  return from;
}

absl::StatusOr<v1::Model> ModelRegistry::SetLabel(const std::string& name,
                                                  const std::string& label, int64_t version) {
  DENDRO_RETURN_IF_ERROR(ValidateVersion(version));
  DENDRO_RETURN_IF_ERROR(ValidateLabel(label));
  absl::StatusOr<v1::Model> set = catalogue_->SetModelLabel(name, label, version);
  Refresh(name).IgnoreError();
  return set;
}

absl::StatusOr<int64_t> ModelRegistry::DeleteLabel(const std::string& name,
                                                   const std::string& label) {
  DENDRO_RETURN_IF_ERROR(ValidateLabel(label));
  absl::StatusOr<int64_t> deleted = catalogue_->DeleteModelLabel(name, label);
  Refresh(name).IgnoreError();
  return deleted;
}

absl::StatusOr<int> ModelRegistry::SetRetention(const std::string& name, int64_t keep_versions) {
  if (keep_versions < 0 || keep_versions > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keep_versions must be in [0, 1000000] (0: keep every version), got ", keep_versions));
  }
  absl::StatusOr<std::vector<StoredModel>> removed = catalogue_->SetModelRetention(name, keep_versions);
  Refresh(name).IgnoreError();
  if (!removed.ok()) return removed.status();
  RemoveFiles(name, *removed);
  return static_cast<int>(removed->size());
}

absl::Status ModelRegistry::RemoveOrphans() {
  const absl::Duration grace = artifacts_->orphan_grace();
  // List the files before reading the catalogue: a model committed in
  // between is then listed, never taken for an orphan.
  DENDRO_ASSIGN_OR_RETURN(std::vector<ArtifactEntry> names, artifacts_->List("models"));
  std::vector<ArtifactEntry> versions;
  for (const ArtifactEntry& name : names) {
    DENDRO_ASSIGN_OR_RETURN(std::vector<ArtifactEntry> v, artifacts_->List(name.key));
    versions.insert(versions.end(), v.begin(), v.end());
  }
  DENDRO_ASSIGN_OR_RETURN(std::vector<std::string> dirs, catalogue_->AllModelDirs());
  const std::set<std::string> live(dirs.begin(), dirs.end());
  const absl::Time cutoff = absl::Now() - grace;
  for (const ArtifactEntry& v : versions) {
    if (live.count(v.key)) continue;
    if (grace > absl::ZeroDuration() && v.modified > cutoff) continue;
    artifacts_->Remove(v.key).IgnoreError();  // retried at the next start
  }
  return absl::OkStatus();
}

}  // namespace dendro::server
