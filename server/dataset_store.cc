#include "server/dataset_store.h"

#include <chrono>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "core/common/crash_point.h"
#include "core/common/status_macros.h"
#include "server/checksum.h"
#include "server/ids.h"
#include "server/names.h"

namespace dendro::server {
// --- LoadedDataset ------------------------------------------------------------

MatrixView LoadedDataset::matrix() const {
  return MatrixView(static_cast<const float*>(x_->data()), info_.rows(), info_.cols());
}

absl::Span<const int64_t> LoadedDataset::labels() const {
  if (!y_) return {};
  return absl::Span<const int64_t>(static_cast<const int64_t*>(y_->data()), info_.rows());
}

// --- DatasetUpload ------------------------------------------------------------

DatasetUpload::~DatasetUpload() {
  // An unfinished upload leaves nothing: abandon the unfinished objects, then
  // remove the dataset's prefix (prefix_ is cleared once published).
  x_.reset();
  y_.reset();
  if (!prefix_.empty()) store_->artifacts_->Remove(prefix_).IgnoreError();
}

absl::Status DatasetUpload::Begin(const v1::DatasetHeader& header) {
  DENDRO_RETURN_IF_ERROR(ValidateDisplayName("upload: display_name", header.display_name()));
  DENDRO_RETURN_IF_ERROR(validator_.Begin(header.rows(), header.cols(), header.has_labels(),
                                          store_->max_dataset_bytes_));
  DENDRO_RETURN_IF_ERROR(store_->disk_.Check(validator_.total_bytes(), "upload"));
  if (!header.prepare().empty() && header.prepare() != "l2h") {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload: prepare must be empty or \"l2h\", got \"", header.prepare(), "\""));
  }
  if (header.prepare() == "l2h" && header.cols() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload: prepare \"l2h\" needs at least 2 columns (clusters), got ", header.cols()));
  }
  header_ = header;
  id_ = NewId("ds");
  prefix_ = DatasetStore::KeyFor(id_, header.transient());
  const Durability durability =
      header.transient() ? Durability::kVolatile : Durability::kDurable;
  ArtifactStore* artifacts = store_->artifacts_;
  DENDRO_ASSIGN_OR_RETURN(x_, artifacts->Create(prefix_ + "/X.npy", durability));
  const int64_t shape[2] = {header.rows(), header.cols()};
  DENDRO_RETURN_IF_ERROR(x_->Append(MakeNpyHeader(DType::kFloat32, shape)));
  if (header.has_labels()) {
    DENDRO_ASSIGN_OR_RETURN(y_, artifacts->Create(prefix_ + "/y.npy", durability));
    const int64_t yshape[1] = {header.rows()};
    DENDRO_RETURN_IF_ERROR(y_->Append(MakeNpyHeader(DType::kInt64, yshape)));
  }
  // The validator bounds rows x cols far below 2^62, and cols <= 2^30 with it.
  if (header.prepare() == "l2h" && header.cols() <= (int64_t{1} << 30) &&
      store_->FirstPassFits(header.rows() * int64_t{sizeof(l2h_internal::PointState)})) {
    l2h_pass_ = std::make_unique<L2hUploadPass>(header.rows(), static_cast<int32_t>(header.cols()));
  }
  return absl::OkStatus();
}

absl::Status DatasetUpload::AppendData(std::string_view bytes) {
  DENDRO_RETURN_IF_ERROR(validator_.Data(bytes));
  if (!x_) return absl::FailedPreconditionError("upload: the header was refused");
  return x_->Append(bytes);
}

absl::Status DatasetUpload::TakeData(std::string* bytes) {
  DENDRO_RETURN_IF_ERROR(AppendData(*bytes));
  if (l2h_pass_ != nullptr) l2h_pass_->Take(bytes);
  return absl::OkStatus();
}

absl::Status DatasetUpload::AppendLabels(std::string_view bytes) {
  DENDRO_RETURN_IF_ERROR(validator_.Labels(bytes));
  if (!y_) return absl::FailedPreconditionError("upload: the header was refused");
  return y_->Append(bytes);
}

absl::StatusOr<v1::Dataset> DatasetUpload::Finish() {
  DENDRO_RETURN_IF_ERROR(validator_.Finish());
  if (!x_) return absl::FailedPreconditionError("upload: the header was refused");
  v1::Dataset d;
  d.set_id(id_);
  d.set_display_name(header_.display_name());
  d.set_owner(owner_);
  d.set_rows(header_.rows());
  d.set_cols(header_.cols());
  d.set_has_labels(header_.has_labels());
  d.set_transient(header_.transient());
  d.set_size_bytes(x_->size() + (header_.has_labels() ? y_->size() : 0));
  SetNow(d.mutable_create_time());
  (*d.mutable_checksums())["X.npy"] = x_->checksum();
  if (header_.has_labels()) (*d.mutable_checksums())["y.npy"] = y_->checksum();
  std::shared_ptr<const L2hFirstPass> first_pass;
  if (l2h_pass_ != nullptr) {
    // Optional: without it an L2H job computes the pass itself.
    std::string behind;
    absl::StatusOr<std::shared_ptr<const L2hFirstPass>> done = l2h_pass_->Finish(&behind);
    l2h_pass_.reset();
    if (done.ok()) {
      first_pass = *std::move(done);
      // Expected whenever the upload leaves no CPU over (L2hUploadPass).
      if (!behind.empty()) spdlog::info("upload {}: {}", id_, behind);
      if (first_pass->rows_added() == 0) first_pass.reset();
    } else {
      spdlog::warn("upload {}: no L2H first pass: {}", id_, done.status().ToString());
    }
  }
  CrashPoint("upload.data_received");
  DENDRO_RETURN_IF_ERROR(x_->Commit());
  if (header_.has_labels()) DENDRO_RETURN_IF_ERROR(y_->Commit());
  CrashPoint("upload.files_committed");
  // On an error the destructor removes the files.
  DENDRO_RETURN_IF_ERROR(store_->catalogue_->PutDataset(d));
  prefix_.clear();
  {
    // Its checksums were computed from the bytes as they were written.
    std::lock_guard<std::mutex> lock(store_->mu_);
    store_->verified_.insert(id_);
    if (first_pass != nullptr && store_->FirstPassFitsLocked(first_pass->bytes())) {
      store_->first_pass_bytes_ += first_pass->bytes();
      store_->l2h_first_passes_[id_] = std::move(first_pass);
    }
  }
  CrashPoint("upload.catalogued");
  return d;
}

// --- DatasetStore -------------------------------------------------------------

DatasetStore::DatasetStore(ArtifactStore* artifacts, Catalogue* catalogue, DiskGuard disk,
                           int64_t max_dataset_bytes)
    : artifacts_(artifacts),
      catalogue_(catalogue),
      max_dataset_bytes_(max_dataset_bytes),
      disk_(std::move(disk)) {}

std::string DatasetStore::KeyFor(const std::string& id, bool transient) {
  return absl::StrCat(transient ? "transient/" : "datasets/", id);
}

bool DatasetStore::HasL2hFirstPass(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return l2h_first_passes_.count(id) > 0;
}

bool DatasetStore::FirstPassFits(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return FirstPassFitsLocked(bytes);
}

absl::StatusOr<std::shared_ptr<const LoadedDataset>> DatasetStore::Open(const std::string& id) {
  bool verified;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = open_.find(id); it != open_.end()) {
      if (auto sp = it->second.lock()) return sp;
    }
    verified = verified_.count(id) > 0;
  }
  // Mapping and checksumming run without the lock, so that a large dataset
  // being verified does not hold up opens of other datasets. Two first opens
  // of one dataset may both verify it; the first to finish is kept.
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset info, catalogue_->GetDataset(id));
  auto ds = std::make_shared<LoadedDataset>();
  ds->info_ = info;
  const std::string prefix = KeyFor(id, info.transient());
  DENDRO_ASSIGN_OR_RETURN(const std::string x_path, artifacts_->LocalPath(prefix + "/X.npy"));
  DENDRO_ASSIGN_OR_RETURN(ds->x_, MappedNpy::Open(x_path));
  if (ds->x_->header().dtype != DType::kFloat32 || ds->x_->header().rows() != info.rows() ||
      ds->x_->header().cols() != info.cols()) {
    return absl::DataLossError(absl::StrCat("dataset ", id, ": X.npy does not match metadata"));
  }
  if (info.has_labels()) {
    DENDRO_ASSIGN_OR_RETURN(const std::string y_path, artifacts_->LocalPath(prefix + "/y.npy"));
    DENDRO_ASSIGN_OR_RETURN(ds->y_, MappedNpy::Open(y_path));
    if (ds->y_->header().dtype != DType::kInt64 || ds->y_->header().rows() != info.rows()) {
      return absl::DataLossError(
          absl::StrCat("dataset ", id, ": y.npy does not match metadata"));
    }
  }
  if (!info.checksums().empty() && !verified) {
    ChecksumMap actual;
    for (const auto& [file, recorded] : info.checksums()) {
      absl::StatusOr<std::string> path = artifacts_->LocalPath(absl::StrCat(prefix, "/", file));
      if (absl::IsNotFound(path.status())) continue;  // reported as missing below
      if (!path.ok()) return path.status();
      DENDRO_ASSIGN_OR_RETURN(actual[file], ChecksumFile(*path));
    }
    DENDRO_RETURN_IF_ERROR(
        CompareChecksums(ToChecksumMap(info.checksums()), actual, absl::StrCat("dataset ", id)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = open_.find(id); it != open_.end()) {
    if (auto sp = it->second.lock()) return sp;
  }
  verified_.insert(id);
  if (auto it = l2h_first_passes_.find(id); it != l2h_first_passes_.end()) {
    ds->l2h_first_pass_ = it->second;
  }
  open_[id] = ds;
  return std::shared_ptr<const LoadedDataset>(ds);
}

absl::Status DatasetStore::Delete(const std::string& id, const std::string& except_job) {
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset info, catalogue_->GetDataset(id));
  DENDRO_RETURN_IF_ERROR(catalogue_->DeleteUnusedDataset(id, except_job));
  CrashPoint("dataset_delete.row_removed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(id);
    verified_.erase(id);
    if (auto it = l2h_first_passes_.find(id); it != l2h_first_passes_.end()) {
      first_pass_bytes_ -= it->second->bytes();
      l2h_first_passes_.erase(it);
    }
  }
  // The row is gone, so the dataset is; files left by a failure here are
  // swept as orphans at the next start.
  artifacts_->Remove(KeyFor(id, info.transient())).IgnoreError();
  return absl::OkStatus();
}

absl::Status DatasetStore::RemoveOrphans() {
  const absl::Duration grace = artifacts_->orphan_grace();
  // List the files first: an upload that finishes after the listing is
  // then in the catalogue read below, and is never taken for an orphan.
  std::map<std::string, absl::Time> files;
  for (const char* root : {"transient", "datasets"}) {
    DENDRO_ASSIGN_OR_RETURN(std::vector<ArtifactEntry> entries, artifacts_->List(root));
    for (ArtifactEntry& e : entries) files[std::move(e.key)] = e.modified;
  }
  const auto quiet = [&](const std::string& key) {
    if (grace <= absl::ZeroDuration()) return true;
    auto it = files.find(key);
    return it == files.end() || it->second <= absl::Now() - grace;
  };
  // Read the whole catalogue before removing anything: a catalogue that
  // cannot be read must not make every dataset look like an orphan.
  DENDRO_ASSIGN_OR_RETURN(std::vector<std::string> ids, catalogue_->AllDatasetIds());
  std::vector<v1::Dataset> infos;
  for (const std::string& id : ids) {
    DENDRO_ASSIGN_OR_RETURN(v1::Dataset info, catalogue_->GetDataset(id));
    infos.push_back(std::move(info));
  }
  std::set<std::string> listed;
  for (const v1::Dataset& info : infos) {
    const std::string key = KeyFor(info.id(), info.transient());
    listed.insert(key);
    if (!info.transient()) continue;
    if (grace > absl::ZeroDuration()) {
      // Shared: another replica's job may still read it, or its client may
      // be about to submit one; the check and the delete are one step
      // against any replica's SubmitJob.
      if (!quiet(key)) continue;
      const absl::Status deleted = catalogue_->DeleteUnusedDataset(info.id(), "");
      if (absl::IsFailedPrecondition(deleted) || absl::IsNotFound(deleted)) continue;
      DENDRO_RETURN_IF_ERROR(deleted);
    } else {
      DENDRO_RETURN_IF_ERROR(catalogue_->DeleteDataset(info.id()));
    }
    listed.erase(key);
  }
  for (const auto& [key, modified] : files) {
    // A file that cannot be removed now is retried at the next start.
    if (!listed.count(key) && quiet(key)) artifacts_->Remove(key).IgnoreError();
  }
  return absl::OkStatus();
}

}  // namespace dendro::server
