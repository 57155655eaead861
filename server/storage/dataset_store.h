// DatasetStore: uploaded matrices on disk.
//
// Artifact keys (see server/storage/artifact_store.h): datasets/<id>/X.npy (float32,
// rows x cols) and, when labelled, datasets/<id>/y.npy (int64, rows).
// Transient datasets live under transient/<id>/, are written without fsync,
// and are removed (files and rows) at the next start. An upload streams
// straight into a new artifact (the server never holds a second copy of the
// data in memory), validating every float as it arrives; only a complete,
// valid upload is committed and then recorded in the Catalogue. Opened
// datasets are memory-mapped and shared between concurrent jobs. An upload
// may ask for a preparation (server/storage/upload_preparation.h) that runs beside
// it; its result stays in memory with the dataset.
//
// Generations (v1::Dataset.lineage): an append writes a whole new dataset,
// the previous generation's rows copied from its mapped file and then the
// new ones, under an id of its own, so every generation is as immutable,
// checksummed, mappable and deletable as any upload, and a job reading one
// generation never sees another. The price is that an append writes the
// earlier rows again (a server-side copy, no network).
//
// Imports (v1::ImportDatasetRequest): a file of the server's host, opened
// by ImportRoots, goes through the same validator and checksums as an
// upload's bytes; a transient import is stored as a hard link to the file
// itself (ArtifactStore::Link), anything else as a copy.
#ifndef DENDRO_SERVER_STORAGE_DATASET_STORE_H_
#define DENDRO_SERVER_STORAGE_DATASET_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/common/mutex.h"
#include "core/io/npy.h"
#include "core/matrix/matrix.h"
#include "dendro/v1/dendro.pb.h"
#include "server/catalogue/catalogue.h"
#include "server/storage/artifact_store.h"
#include "server/storage/disk_guard.h"
#include "server/storage/import_roots.h"
#include "server/storage/upload_preparation.h"
#include "server/storage/upload_validator.h"

namespace dendro::server {

// A dataset mapped into memory. Immutable; shared by jobs using it.
class LoadedDataset {
 public:
  const v1::Dataset& info() const { return info_; }
  MatrixView matrix() const;
  // Empty unless info().has_labels().
  absl::Span<const int64_t> labels() const;
  // The upload's preparation (DatasetHeader.prepare), if this server ran it
  // and kept its result; otherwise null.
  const std::shared_ptr<const PreparedData>& prepared() const { return prepared_; }

 private:
  friend class DatasetStore;
  v1::Dataset info_;
  std::shared_ptr<const PreparedData> prepared_;
  std::unique_ptr<MappedNpy> x_;
  std::unique_ptr<MappedNpy> y_;
};

class DatasetStore;

// One in-progress upload. Feed it in protocol order; any error leaves
// nothing behind (the temporary files are removed on destruction).
class DatasetUpload {
 public:
  ~DatasetUpload();
  // Recorded as the dataset's owner; call before Finish().
  void set_owner(std::string owner) { owner_ = std::move(owner); }
  absl::Status Begin(const v1::DatasetHeader& header);
  absl::Status AppendData(std::string_view bytes);
  // As AppendData, and may keep the bytes for work done on the rows while
  // the upload goes on (DatasetHeader.prepare), leaving *bytes empty.
  absl::Status TakeData(std::string* bytes);
  absl::Status AppendLabels(std::string_view bytes);
  // Checks the byte counts, publishes the files and the metadata row.
  absl::StatusOr<v1::Dataset> Finish();

 private:
  friend class DatasetStore;
  explicit DatasetUpload(DatasetStore* store) : store_(store) {}

  // An append: the rows (and labels) of `base_` go first.
  absl::Status BeginAppend(const v1::DatasetHeader& header);
  // A same-host import: checks `file`'s header against `request`, then
  // passes its rows through the validator into a link to it (transient) or
  // a copy (durable, or where it cannot be linked). Labels and Finish() as
  // for an upload.
  absl::Status BeginImport(const v1::ImportDatasetRequest& request, const ImportedFile& file);
  // Feeds the base's labels once, before the client's first label.
  absl::Status AppendBaseLabels();
  // Creates prefix_/X.npy (unless x_ is open already: an import's link)
  // and, for a labelled dataset, prefix_/y.npy, each starting with the .npy
  // header of header_'s shape; the rows and labels follow.
  absl::Status CreateFiles(Durability durability);

  DatasetStore* store_;
  UploadValidator validator_;
  v1::DatasetHeader header_;
  std::string id_;
  std::string prefix_;  // the dataset's key prefix; cleared once published
  std::unique_ptr<ArtifactWriter> x_;
  std::unique_ptr<ArtifactWriter> y_;
  std::string owner_;
  std::unique_ptr<UploadPreparation> preparation_;  // when the header asked for one
  std::shared_ptr<const LoadedDataset> base_;       // an append's previous generation
  bool base_labels_sent_ = false;
  bool linked_ = false;  // an import linked, not copied
};

class DatasetStore {
 public:
  // Uploads whose data and labels together exceed `max_dataset_bytes` are
  // refused at the header, as are uploads that `disk` says would leave too
  // little of the volume free. `preparers` are the preparations an upload
  // may ask for (UploadPreparers() in server/methods/method.h: those of the
  // methods). `artifacts`, `catalogue` and the preparers must outlive the
  // store.
  DatasetStore(ArtifactStore* artifacts, Catalogue* catalogue, DiskGuard disk,
               int64_t max_dataset_bytes = kDefaultMaxDatasetBytes,
               std::vector<const UploadPreparer*> preparers = {});
  // The data volume's guard, shared with the job manager.
  const DiskGuard& disk() const { return disk_; }
  static constexpr int64_t kDefaultMaxDatasetBytes = int64_t{64} << 30;
  // The most memory the results of preparations may hold together; an
  // upload whose result would exceed it is stored without one.
  static constexpr int64_t kMaxPreparedBytes = int64_t{1} << 30;

  std::unique_ptr<DatasetUpload> StartUpload() {
    return std::unique_ptr<DatasetUpload>(new DatasetUpload(this));
  }
  // The directories same-host imports may read (none by default: every
  // import is refused). Set before the store is shared.
  void set_import_roots(ImportRoots roots) { import_roots_ = std::move(roots); }
  // A same-host import by `owner` (v1::ImportDatasetRequest). *linked, if
  // given, says whether the file was linked rather than copied.
  absl::StatusOr<v1::Dataset> Import(const v1::ImportDatasetRequest& request,
                                     const std::string& owner, bool* linked = nullptr);
  // The dataset with this id, exactly.
  absl::StatusOr<v1::Dataset> Get(const std::string& id) { return catalogue_->GetDataset(id); }
  // A dataset as users name it (v1::Dataset.lineage): "LINEAGE" is its
  // newest generation, "LINEAGE:G" generation G, any other id that dataset.
  absl::StatusOr<v1::Dataset> Resolve(const std::string& ref);
  // As Resolve, except that "LINEAGE" is the dataset with that id (what a
  // delete names: one generation, never "whichever is newest").
  absl::StatusOr<v1::Dataset> ResolveExact(const std::string& ref);
  absl::StatusOr<Page<v1::Dataset>> List(int64_t after_seq, int limit) {
    return catalogue_->ListDatasets(after_seq, limit);
  }
  absl::StatusOr<std::shared_ptr<const LoadedDataset>> Open(const std::string& id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Removes the metadata row, then the files, of the dataset `ref` names
  // (ResolveExact); FailedPrecondition (nothing removed) while a queued or
  // running job other than `except_job` uses it. Other generations stay.
  absl::Status Delete(const std::string& ref, const std::string& except_job = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // At start-up: removes dataset artifacts with no metadata row (left by a
  // crash between writing files and recording them) and transient datasets
  // no queued or running job uses. Where the store has an orphan grace (a
  // volume shared by replicas) only those unchanged for that long; without
  // one, every transient dataset (they do not outlive the server that
  // received them). Removes nothing, and fails, if the catalogue cannot be
  // read.
  absl::Status RemoveOrphans();
  // The artifact prefix of a dataset's files (see server/storage/artifact_store.h).
  static std::string KeyFor(const std::string& id, bool transient);
  // Whether this server holds a preparation's result for the dataset.
  bool HasPrepared(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class DatasetUpload;

  ArtifactStore* const artifacts_;
  Catalogue* catalogue_;
  const int64_t max_dataset_bytes_;
  const DiskGuard disk_;
  const std::vector<const UploadPreparer*> preparers_;
  ImportRoots import_roots_;
  // The preparer an upload's header asks for: null for none, InvalidArgument
  // for a name no preparer has.
  absl::StatusOr<const UploadPreparer*> PreparerFor(const v1::DatasetHeader& header) const;
  // Whether a result of `bytes` more fits under kMaxPreparedBytes; the
  // Locked form with mu_ held.
  bool PreparedFits(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  bool PreparedFitsLocked(int64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return prepared_bytes_ + bytes <= kMaxPreparedBytes;
  }

  Mutex mu_;  // never held across I/O
  std::map<std::string, std::weak_ptr<const LoadedDataset>> open_ ABSL_GUARDED_BY(mu_);
  // Datasets whose files this process has checksummed (or written) since it
  // started: Open() verifies each dataset once, not on every job.
  std::set<std::string> verified_ ABSL_GUARDED_BY(mu_);
  // Results of the preparations run during uploads, by dataset id.
  std::map<std::string, std::shared_ptr<const PreparedData>> prepared_ ABSL_GUARDED_BY(mu_);
  int64_t prepared_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_DATASET_STORE_H_
