#include "server/storage/dataset_store.h"

#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/crash_point.h"
#include "core/common/status_macros.h"
#include "core/io/whole_read.h"
#include "server/base/ids.h"
#include "server/base/names.h"
#include "server/storage/checksum.h"
#include "spdlog/spdlog.h"

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
  if (!header.append_to().empty()) return BeginAppend(header);
  DENDRO_RETURN_IF_ERROR(validator_.Begin(header.rows(), header.cols(), header.has_labels(),
                                          store_->max_dataset_bytes_));
  DENDRO_RETURN_IF_ERROR(store_->disk_.Check(validator_.total_bytes(), "upload"));
  DENDRO_ASSIGN_OR_RETURN(const UploadPreparer* preparer, store_->PreparerFor(header));
  header_ = header;
  id_ = NewId("ds");
  prefix_ = DatasetStore::KeyFor(id_, header.transient());
  DENDRO_RETURN_IF_ERROR(
      CreateFiles(header.transient() ? Durability::kVolatile : Durability::kDurable));
  if (preparer != nullptr && store_->PreparedFits(preparer->ResultBytes(header))) {
    preparation_ = preparer->Start(header);
  }
  return absl::OkStatus();
}

absl::Status DatasetUpload::BeginAppend(const v1::DatasetHeader& header) {
  if (header.transient()) {
    return absl::InvalidArgumentError(
        "upload: append_to and transient do not go together (generations are durable)");
  }
  if (!header.prepare().empty()) {
    return absl::InvalidArgumentError("upload: prepare does not apply to an append");
  }
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset base, store_->Resolve(header.append_to()));
  const std::string& lineage = DatasetLineage(base);
  if (base.transient()) {
    return absl::FailedPreconditionError(
        absl::StrCat("upload: dataset '", header.append_to(),
                     "' is transient; only durable datasets take appends"));
  }
  absl::StatusOr<v1::Dataset> newest = store_->catalogue_->GetDatasetGeneration(lineage, 0);
  if (newest.ok() && newest->id() != base.id()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "upload: append_to '", header.append_to(), "' is generation ", DatasetGeneration(base),
        " of dataset '", lineage, "', whose newest is generation ", DatasetGeneration(*newest),
        "; append to '", lineage, "' to follow the newest"));
  }
  if (!newest.ok() && !absl::IsNotFound(newest.status())) return newest.status();
  if (header.cols() != base.cols()) {
    return absl::InvalidArgumentError(absl::StrCat("upload: dataset '", header.append_to(),
                                                   "' has ", base.cols(),
                                                   " columns, the appended rows ", header.cols()));
  }
  if (header.has_labels() != base.has_labels()) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload: dataset '", header.append_to(), "' is ",
                     base.has_labels() ? "labelled" : "unlabelled", "; the appended rows must ",
                     base.has_labels() ? "have labels too" : "have none"));
  }
  if (header.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload: an append needs rows >= 1, got ", header.rows()));
  }
  const int64_t rows = base.rows() + header.rows();
  DENDRO_RETURN_IF_ERROR(
      validator_.Begin(rows, header.cols(), header.has_labels(), store_->max_dataset_bytes_));
  DENDRO_RETURN_IF_ERROR(store_->disk_.Check(validator_.total_bytes(), "upload"));
  DENDRO_ASSIGN_OR_RETURN(base_, store_->Open(base.id()));
  header_ = header;
  header_.set_rows(rows);
  if (header_.display_name().empty()) header_.set_display_name(base.display_name());
  id_ = NewId("ds");
  prefix_ = DatasetStore::KeyFor(id_, false);
  DENDRO_RETURN_IF_ERROR(CreateFiles(Durability::kDurable));
  // The earlier rows, through the same checks as the new ones (they pass:
  // they passed once), so the statistics cover every row.
  const MatrixView x = base_->matrix();
  const std::string_view all(reinterpret_cast<const char*>(x.data()),
                             static_cast<size_t>(x.rows() * x.cols()) * sizeof(float));
  constexpr size_t kChunk = size_t{8} << 20;
  for (size_t at = 0; at < all.size(); at += kChunk) {
    DENDRO_RETURN_IF_ERROR(AppendData(all.substr(at, kChunk)));
  }
  return absl::OkStatus();
}

absl::Status DatasetUpload::BeginImport(const v1::ImportDatasetRequest& request,
                                        const ImportedFile& file) {
  const v1::DatasetHeader& asked = request.header();
  const std::string what = absl::StrCat("import: '", request.path(), "'");
  DENDRO_RETURN_IF_ERROR(ValidateDisplayName("import: display_name", asked.display_name()));
  if (!asked.append_to().empty()) {
    return absl::InvalidArgumentError("import: append_to is for uploads (append by upload)");
  }
  if (!asked.prepare().empty()) {
    return absl::InvalidArgumentError(
        "import: prepare is for uploads (a job on an imported file reads it itself)");
  }
  if (file.size() == 0) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  const auto size = static_cast<size_t>(file.size());
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | WholeReadMapFlags(size), file.fd(), 0);
  if (map == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot map it: ", std::strerror(errno)));
  }
  absl::Cleanup unmap = [map, size] { ::munmap(map, size); };
  ::madvise(map, size, MADV_SEQUENTIAL);
  const std::string_view bytes(static_cast<const char*>(map), size);

  // Float32 in C order is what a dataset is stored as; anything else the
  // clients convert while they upload it.
  absl::StatusOr<NpyLayout> layout = ParseNpyLayout(bytes);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", layout.status().message()));
  }
  const NpyElementType& e = layout->element;
  if (e.kind != NpyElementType::Kind::kFloat || e.size != 4 || e.big_endian ||
      layout->fortran_order || layout->shape.size() != 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " holds a ", layout->shape.size(), "-D ", e.Name(),
        e.big_endian ? " (big-endian)" : "", " array",
        layout->fortran_order ? " in Fortran order" : "",
        "; imports take 2-D float32 in C order, as datasets are stored (upload it instead: the "
        "clients convert)"));
  }
  DENDRO_ASSIGN_OR_RETURN(const NpyHeader npy, ParseNpyHeader(bytes));
  const auto expected = static_cast<size_t>(npy.num_bytes());
  if (size - npy.data_offset != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, size - npy.data_offset < expected ? ": truncated: " : ": corrupt: ",
                     "the header says ", npy.rows(), " x ", npy.cols(), " float32, the file holds ",
                     size - npy.data_offset, " data bytes"));
  }
  header_ = asked;
  for (const auto& [given, actual, name] : {std::tuple{asked.rows(), npy.rows(), "rows"},
                                            std::tuple{asked.cols(), npy.cols(), "cols"}}) {
    if (given != 0 && given != actual) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has ", actual, " ", name, ", the request says ", given));
    }
  }
  header_.set_rows(npy.rows());
  header_.set_cols(npy.cols());
  DENDRO_RETURN_IF_ERROR(validator_.Begin(header_.rows(), header_.cols(), header_.has_labels(),
                                          store_->max_dataset_bytes_));
  id_ = NewId("ds");
  prefix_ = DatasetStore::KeyFor(id_, header_.transient());
  if (header_.transient()) {
    absl::StatusOr<std::unique_ptr<ArtifactWriter>> link =
        store_->artifacts_->Link(prefix_ + "/X.npy", file.fd());
    if (link.ok()) {
      x_ = *std::move(link);
      linked_ = true;
    } else if (!absl::IsFailedPrecondition(link.status()) &&
               !absl::IsUnimplemented(link.status())) {
      return link.status();
    }
  }
  if (linked_) {
    // A link's bytes are the file's own, header included.
    DENDRO_RETURN_IF_ERROR(x_->Append(bytes.substr(0, npy.data_offset)));
  } else {
    DENDRO_RETURN_IF_ERROR(store_->disk_.Check(validator_.total_bytes(), "import"));
  }
  DENDRO_RETURN_IF_ERROR(
      CreateFiles(header_.transient() ? Durability::kVolatile : Durability::kDurable));
  const std::string_view data = bytes.substr(npy.data_offset);
  constexpr size_t kChunk = size_t{8} << 20;
  for (size_t at = 0; at < data.size(); at += kChunk) {
    if (absl::Status s = AppendData(data.substr(at, kChunk)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status DatasetUpload::CreateFiles(Durability durability) {
  ArtifactStore* artifacts = store_->artifacts_;
  if (x_ == nullptr) {
    DENDRO_ASSIGN_OR_RETURN(x_, artifacts->Create(prefix_ + "/X.npy", durability));
    const int64_t shape[2] = {header_.rows(), header_.cols()};
    DENDRO_RETURN_IF_ERROR(x_->Append(MakeNpyHeader(DType::kFloat32, shape)));
  }
  if (header_.has_labels()) {
    DENDRO_ASSIGN_OR_RETURN(y_, artifacts->Create(prefix_ + "/y.npy", durability));
    const int64_t yshape[1] = {header_.rows()};
    DENDRO_RETURN_IF_ERROR(y_->Append(MakeNpyHeader(DType::kInt64, yshape)));
  }
  return absl::OkStatus();
}

absl::Status DatasetUpload::AppendBaseLabels() {
  if (base_ == nullptr || base_labels_sent_ || !y_) return absl::OkStatus();
  base_labels_sent_ = true;
  const absl::Span<const int64_t> y = base_->labels();
  const std::string_view bytes(reinterpret_cast<const char*>(y.data()), y.size() * sizeof(int64_t));
  DENDRO_RETURN_IF_ERROR(validator_.Labels(bytes));
  return y_->Append(bytes);
}

absl::Status DatasetUpload::AppendData(std::string_view bytes) {
  DENDRO_RETURN_IF_ERROR(validator_.Data(bytes));
  if (!x_) return absl::FailedPreconditionError("upload: the header was refused");
  return x_->Append(bytes);
}

absl::Status DatasetUpload::TakeData(std::string* bytes) {
  DENDRO_RETURN_IF_ERROR(AppendData(*bytes));
  if (preparation_ != nullptr) preparation_->Take(bytes);
  return absl::OkStatus();
}

absl::Status DatasetUpload::AppendLabels(std::string_view bytes) {
  DENDRO_RETURN_IF_ERROR(AppendBaseLabels());
  DENDRO_RETURN_IF_ERROR(validator_.Labels(bytes));
  if (!y_) return absl::FailedPreconditionError("upload: the header was refused");
  return y_->Append(bytes);
}

absl::StatusOr<v1::Dataset> DatasetUpload::Finish() {
  DENDRO_RETURN_IF_ERROR(AppendBaseLabels());
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
  *d.mutable_stats() = validator_.stats().ToProto();
  if (base_ != nullptr) {
    d.set_lineage(DatasetLineage(base_->info()));
    d.set_generation(DatasetGeneration(base_->info()) + 1);
  } else {
    d.set_lineage(id_);
    d.set_generation(1);
  }
  std::shared_ptr<const PreparedData> prepared;
  if (preparation_ != nullptr) {
    // Optional: without it a job computes the same itself.
    std::string note;
    absl::StatusOr<std::shared_ptr<const PreparedData>> done = preparation_->Finish(&note);
    preparation_.reset();
    if (done.ok()) {
      prepared = *std::move(done);
      if (!note.empty()) spdlog::info("upload {}: {}", id_, note);
    } else {
      spdlog::warn("upload {}: not prepared ({}): {}", id_, header_.prepare(),
                   done.status().ToString());
    }
  }
  CrashPoint("upload.data_received");
  DENDRO_RETURN_IF_ERROR(x_->Commit());
  if (header_.has_labels()) DENDRO_RETURN_IF_ERROR(y_->Commit());
  CrashPoint("upload.files_committed");
  // On an error the destructor removes the files.
  if (absl::Status put = store_->catalogue_->PutDataset(d); !put.ok()) {
    if (base_ != nullptr && absl::IsAlreadyExists(put)) {
      return absl::AbortedError(
          absl::StrCat("upload: another append made generation ", d.generation(), " of dataset '",
                       d.lineage(), "' while this one ran; nothing was stored, append again"));
    }
    return put;
  }
  prefix_.clear();
  {
    // Its checksums were computed from the bytes as they were written.
    MutexLock lock(&store_->mu_);
    store_->verified_.insert(id_);
    if (prepared != nullptr && store_->PreparedFitsLocked(prepared->bytes())) {
      store_->prepared_bytes_ += prepared->bytes();
      store_->prepared_[id_] = std::move(prepared);
    }
  }
  CrashPoint("upload.catalogued");
  return d;
}

// --- DatasetStore -------------------------------------------------------------

absl::StatusOr<v1::Dataset> DatasetStore::Import(const v1::ImportDatasetRequest& request,
                                                 const std::string& owner, bool* linked) {
  DENDRO_ASSIGN_OR_RETURN(const ImportedFile file, import_roots_.OpenFile(request.path()));
  std::unique_ptr<DatasetUpload> upload = StartUpload();
  upload->set_owner(owner);
  DENDRO_RETURN_IF_ERROR(upload->BeginImport(request, file));
  if (request.header().has_labels()) {
    DENDRO_RETURN_IF_ERROR(upload->AppendLabels(request.labels()));
  } else if (!request.labels().empty()) {
    return absl::InvalidArgumentError("import: labels given, but header.has_labels is false");
  }
  if (linked != nullptr) *linked = upload->linked_;
  return upload->Finish();
}

DatasetStore::DatasetStore(ArtifactStore* artifacts, Catalogue* catalogue, DiskGuard disk,
                           int64_t max_dataset_bytes,
                           std::vector<const UploadPreparer*> preparers)
    : artifacts_(artifacts),
      catalogue_(catalogue),
      max_dataset_bytes_(max_dataset_bytes),
      disk_(std::move(disk)),
      preparers_(std::move(preparers)) {}

std::string DatasetStore::KeyFor(const std::string& id, bool transient) {
  return absl::StrCat(transient ? "transient/" : "datasets/", id);
}

bool DatasetStore::HasPrepared(const std::string& id) {
  MutexLock lock(&mu_);
  return prepared_.count(id) > 0;
}

bool DatasetStore::PreparedFits(int64_t bytes) {
  MutexLock lock(&mu_);
  return PreparedFitsLocked(bytes);
}

absl::StatusOr<const UploadPreparer*> DatasetStore::PreparerFor(
    const v1::DatasetHeader& header) const {
  if (header.prepare().empty()) return nullptr;
  std::string names;
  for (const UploadPreparer* p : preparers_) {
    if (p->name() == header.prepare()) {
      DENDRO_RETURN_IF_ERROR(p->CheckHeader(header));
      return p;
    }
    absl::StrAppend(&names, " or \"", std::string(p->name()), "\"");
  }
  return absl::InvalidArgumentError(absl::StrCat("upload: prepare must be empty", names,
                                                 ", got \"", header.prepare(), "\""));
}

absl::StatusOr<std::shared_ptr<const LoadedDataset>> DatasetStore::Open(const std::string& id) {
  bool verified;
  {
    MutexLock lock(&mu_);
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
  DENDRO_ASSIGN_OR_RETURN(ds->x_, MappedNpy::Open(x_path, MappedNpy::Pages::kWholeRead));
  if (ds->x_->header().dtype != DType::kFloat32 || ds->x_->header().rows() != info.rows() ||
      ds->x_->header().cols() != info.cols()) {
    return absl::DataLossError(absl::StrCat("dataset ", id, ": X.npy does not match metadata"));
  }
  if (info.has_labels()) {
    DENDRO_ASSIGN_OR_RETURN(const std::string y_path, artifacts_->LocalPath(prefix + "/y.npy"));
    DENDRO_ASSIGN_OR_RETURN(ds->y_, MappedNpy::Open(y_path, MappedNpy::Pages::kWholeRead));
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
  MutexLock lock(&mu_);
  if (auto it = open_.find(id); it != open_.end()) {
    if (auto sp = it->second.lock()) return sp;
  }
  verified_.insert(id);
  if (auto it = prepared_.find(id); it != prepared_.end()) ds->prepared_ = it->second;
  open_[id] = ds;
  return std::shared_ptr<const LoadedDataset>(ds);
}

namespace {
// "LINEAGE:G" split; generation 0 when the reference has no ":".
struct DatasetRef {
  std::string id;
  int generation = 0;
};

absl::StatusOr<DatasetRef> ParseDatasetRef(const std::string& ref) {
  const size_t colon = ref.rfind(':');
  if (colon == std::string::npos) return DatasetRef{ref, 0};
  int g = 0;
  if (colon == 0 || !absl::SimpleAtoi(absl::string_view(ref).substr(colon + 1), &g) || g < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", ref, "': write LINEAGE:G with a generation G >= 1 after the ':'"));
  }
  return DatasetRef{ref.substr(0, colon), g};
}
}  // namespace

absl::StatusOr<v1::Dataset> DatasetStore::Resolve(const std::string& ref) {
  DENDRO_ASSIGN_OR_RETURN(DatasetRef r, ParseDatasetRef(ref));
  if (r.generation > 0) return ResolveExact(ref);
  absl::StatusOr<v1::Dataset> newest = catalogue_->GetDatasetGeneration(r.id, 0);
  // Not a lineage: a later generation's own id, or a row written by a
  // binary that knew no generations.
  if (absl::IsNotFound(newest.status())) return catalogue_->GetDataset(r.id);
  return newest;
}

absl::StatusOr<v1::Dataset> DatasetStore::ResolveExact(const std::string& ref) {
  DENDRO_ASSIGN_OR_RETURN(DatasetRef r, ParseDatasetRef(ref));
  if (r.generation == 0) return catalogue_->GetDataset(r.id);
  absl::StatusOr<v1::Dataset> found = catalogue_->GetDatasetGeneration(r.id, r.generation);
  if (absl::IsNotFound(found.status()) && r.generation == 1) {
    // The first generation is the dataset whose id is the lineage's.
    absl::StatusOr<v1::Dataset> first = catalogue_->GetDataset(r.id);
    if (first.ok() && DatasetLineage(*first) == r.id && DatasetGeneration(*first) == 1) {
      return first;
    }
  }
  return found;
}

absl::Status DatasetStore::Delete(const std::string& ref, const std::string& except_job) {
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset info, ResolveExact(ref));
  const std::string& id = info.id();
  DENDRO_RETURN_IF_ERROR(catalogue_->DeleteUnusedDataset(id, except_job));
  CrashPoint("dataset_delete.row_removed");
  {
    MutexLock lock(&mu_);
    open_.erase(id);
    verified_.erase(id);
    if (auto it = prepared_.find(id); it != prepared_.end()) {
      prepared_bytes_ -= it->second->bytes();
      prepared_.erase(it);
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
