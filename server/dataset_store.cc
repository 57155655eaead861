#include "server/dataset_store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/crash_point.h"
#include "core/common/status_macros.h"
#include "server/sweep.h"

namespace dendro::server {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;

}  // namespace

std::string NewId(std::string_view prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^
                                          static_cast<uint64_t>(std::chrono::steady_clock::now()
                                                                    .time_since_epoch()
                                                                    .count()));
  static const char* kHex = "0123456789abcdef";
  std::string id(prefix);
  id += '-';
  uint64_t r = rng();
  for (int i = 0; i < 12; ++i, r >>= 4) id += kHex[r & 15];
  return id;
}

void SetNow(google::protobuf::Timestamp* ts) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const int64_t nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  ts->set_seconds(nanos / 1000000000);
  ts->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

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
  // An unfinished upload leaves nothing: abandon the temporary files, then
  // remove the dataset's directory (dir_ is cleared once published).
  x_.Abandon();
  y_.Abandon();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

absl::Status DatasetUpload::Begin(const v1::DatasetHeader& header) {
  if (begun_) return absl::InvalidArgumentError("upload: header sent twice");
  if (header.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload header: rows must be >= 1, got ", header.rows()));
  }
  if (header.cols() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload header: cols must be >= 1, got ", header.cols()));
  }
  if (header.rows() > kMaxElements / header.cols()) {
    return absl::InvalidArgumentError(absl::StrCat("upload header: ", header.rows(), " x ",
                                                   header.cols(), " is too large"));
  }
  // kMaxElements keeps these products far from overflow.
  const int64_t total_bytes =
      header.rows() * header.cols() * 4 + (header.has_labels() ? header.rows() * 8 : 0);
  if (total_bytes > store_->max_dataset_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload header: ", header.rows(), " x ", header.cols(), " is ", RoundUpMiB(total_bytes),
        " MiB, over this server's limit of ", RoundUpMiB(store_->max_dataset_bytes_),
        " MiB per dataset (dendrod --max_dataset_mb)"));
  }
  const std::string parent = header.transient() ? store_->transient_root_ : store_->root_;
  DENDRO_RETURN_IF_ERROR(MakeDirs(parent));
  DENDRO_RETURN_IF_ERROR(store_->disk_.Check(total_bytes, "upload"));
  begun_ = true;
  header_ = header;
  expected_data_bytes_ = header.rows() * header.cols() * 4;
  id_ = NewId("ds");
  dir_ = store_->DirFor(id_, header.transient());
  DENDRO_RETURN_IF_ERROR(MakeDirs(dir_));
  const Durability durability =
      header.transient() ? Durability::kVolatile : Durability::kDurable;
  DENDRO_RETURN_IF_ERROR(AtomicFileWriter::Open(dir_ + "/X.npy", &x_, durability));
  const int64_t shape[2] = {header.rows(), header.cols()};
  DENDRO_RETURN_IF_ERROR(x_.Append(MakeNpyHeader(DType::kFloat32, shape)));
  if (header.has_labels()) {
    DENDRO_RETURN_IF_ERROR(AtomicFileWriter::Open(dir_ + "/y.npy", &y_, durability));
    const int64_t yshape[1] = {header.rows()};
    DENDRO_RETURN_IF_ERROR(y_.Append(MakeNpyHeader(DType::kInt64, yshape)));
  }
  return absl::OkStatus();
}

absl::Status DatasetUpload::ValidateFloats(std::string_view bytes) {
  const int64_t cols = header_.cols();
  // Index of the first float that starts in `bytes` (after completing carry).
  size_t pos = 0;
  if (!carry_.empty()) {
    const size_t need = 4 - carry_.size();
    const size_t take = std::min(need, bytes.size());
    carry_.append(bytes.data(), take);
    pos = take;
    if (carry_.size() < 4) return absl::OkStatus();
    float f;
    std::memcpy(&f, carry_.data(), 4);
    const int64_t index = (data_bytes_ - (4 - take)) / 4;  // float index of carry
    if (!std::isfinite(f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", index / cols, ", column ", index % cols, " is ",
          std::isnan(f) ? "NaN" : (f > 0 ? "+inf" : "-inf"), "; all values must be finite"));
    }
    carry_.clear();
  }
  const size_t whole = (bytes.size() - pos) / 4;
  const int64_t first_index = (data_bytes_ + static_cast<int64_t>(pos)) / 4;
  const char* p = bytes.data() + pos;
  // Validate in aligned float blocks; copy when the chunk is misaligned.
  std::vector<float> buf;
  const float* floats = reinterpret_cast<const float*>(p);
  if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) {
    buf.resize(whole);
    std::memcpy(buf.data(), p, whole * 4);
    floats = buf.data();
  }
  // ValidateFinite reports positions relative to a row-major block; present
  // the block as one long row and translate the column back.
  absl::Status s = ValidateFinite(floats, 1, static_cast<int64_t>(whole), 0);
  if (!s.ok()) {
    for (size_t i = 0; i < whole; ++i) {
      if (!std::isfinite(floats[i])) {
        const int64_t index = first_index + static_cast<int64_t>(i);
        return absl::InvalidArgumentError(
            absl::StrCat("row ", index / cols, ", column ", index % cols, " is ",
                         std::isnan(floats[i]) ? "NaN" : (floats[i] > 0 ? "+inf" : "-inf"),
                         "; all values must be finite"));
      }
    }
  }
  carry_.assign(p + whole * 4, bytes.size() - pos - whole * 4);
  return absl::OkStatus();
}

absl::Status DatasetUpload::AppendData(std::string_view bytes) {
  if (!begun_) return absl::InvalidArgumentError("upload: the first message must be a header");
  if (label_bytes_ > 0) {
    return absl::InvalidArgumentError("upload: data chunk after labels started");
  }
  if (data_bytes_ + static_cast<int64_t>(bytes.size()) > expected_data_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload: more data than the header's ", header_.rows(), " x ", header_.cols(),
        " float32 (", expected_data_bytes_, " bytes)"));
  }
  DENDRO_RETURN_IF_ERROR(ValidateFloats(bytes));
  DENDRO_RETURN_IF_ERROR(x_.Append(bytes));
  data_bytes_ += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::Status DatasetUpload::AppendLabels(std::string_view bytes) {
  if (!begun_) return absl::InvalidArgumentError("upload: the first message must be a header");
  if (!header_.has_labels()) {
    return absl::InvalidArgumentError("upload: labels sent but header.has_labels is false");
  }
  if (data_bytes_ != expected_data_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("upload: labels sent after only ",
                                                   data_bytes_, " of ", expected_data_bytes_,
                                                   " data bytes"));
  }
  if (label_bytes_ + static_cast<int64_t>(bytes.size()) > header_.rows() * 8) {
    return absl::InvalidArgumentError(absl::StrCat("upload: more than ", header_.rows(),
                                                   " int64 labels"));
  }
  DENDRO_RETURN_IF_ERROR(y_.Append(bytes));
  label_bytes_ += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<v1::Dataset> DatasetUpload::Finish() {
  if (!begun_) return absl::InvalidArgumentError("upload: empty stream (no header)");
  if (data_bytes_ != expected_data_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload: shape mismatch: header says ", header_.rows(), " x ", header_.cols(),
        " float32 = ", expected_data_bytes_, " bytes, received ", data_bytes_));
  }
  if (header_.has_labels() && label_bytes_ != header_.rows() * 8) {
    return absl::InvalidArgumentError(absl::StrCat("upload: expected ", header_.rows(),
                                                   " int64 labels (", header_.rows() * 8,
                                                   " bytes), received ", label_bytes_,
                                                   " bytes"));
  }
  v1::Dataset d;
  d.set_id(id_);
  d.set_display_name(header_.display_name());
  d.set_owner(owner_);
  d.set_rows(header_.rows());
  d.set_cols(header_.cols());
  d.set_has_labels(header_.has_labels());
  d.set_transient(header_.transient());
  d.set_size_bytes(x_.size() + (header_.has_labels() ? y_.size() : 0));
  SetNow(d.mutable_create_time());
  CrashPoint("upload.data_received");
  DENDRO_RETURN_IF_ERROR(x_.Commit());
  if (header_.has_labels()) DENDRO_RETURN_IF_ERROR(y_.Commit());
  CrashPoint("upload.files_committed");
  absl::Status s = store_->meta_->PutDataset(d);
  if (!s.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    return s;
  }
  dir_.clear();
  CrashPoint("upload.catalogued");
  return d;
}

// --- DatasetStore -------------------------------------------------------------

DatasetStore::DatasetStore(std::string data_dir, Catalogue* meta, int64_t max_dataset_bytes,
                           MinFreeDisk min_free)
    : root_(data_dir + "/datasets"),
      transient_root_(data_dir + "/transient"),
      meta_(meta),
      max_dataset_bytes_(max_dataset_bytes),
      disk_(data_dir, min_free) {}

std::string DatasetStore::DirFor(const std::string& id, bool transient) const {
  return absl::StrCat(transient ? transient_root_ : root_, "/", id);
}

absl::StatusOr<std::shared_ptr<const LoadedDataset>> DatasetStore::Open(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = open_.find(id); it != open_.end()) {
    if (auto sp = it->second.lock()) return sp;
  }
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset info, meta_->GetDataset(id));
  auto ds = std::make_shared<LoadedDataset>();
  ds->info_ = info;
  const std::string dir = DirFor(id, info.transient());
  DENDRO_ASSIGN_OR_RETURN(ds->x_, MappedNpy::Open(dir + "/X.npy"));
  if (ds->x_->header().dtype != DType::kFloat32 || ds->x_->header().rows() != info.rows() ||
      ds->x_->header().cols() != info.cols()) {
    return absl::DataLossError(absl::StrCat("dataset ", id, ": X.npy does not match metadata"));
  }
  if (info.has_labels()) {
    DENDRO_ASSIGN_OR_RETURN(ds->y_, MappedNpy::Open(dir + "/y.npy"));
    if (ds->y_->header().dtype != DType::kInt64 || ds->y_->header().rows() != info.rows()) {
      return absl::DataLossError(
          absl::StrCat("dataset ", id, ": y.npy does not match metadata"));
    }
  }
  open_[id] = ds;
  return std::shared_ptr<const LoadedDataset>(ds);
}

absl::Status DatasetStore::Delete(const std::string& id) {
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset info, meta_->GetDataset(id));
  DENDRO_RETURN_IF_ERROR(meta_->DeleteDataset(id));
  CrashPoint("dataset_delete.row_removed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(id);
  }
  std::error_code ec;
  std::filesystem::remove_all(DirFor(id, info.transient()), ec);
  return absl::OkStatus();
}

absl::Status DatasetStore::RemoveOrphans(absl::Duration grace) {
  // Read the whole catalogue before touching a file: a catalogue that cannot
  // be read must not make every dataset look like an orphan.
  DENDRO_ASSIGN_OR_RETURN(std::vector<std::string> ids, meta_->AllDatasetIds());
  std::set<std::string> listed;
  for (const std::string& id : ids) {
    DENDRO_ASSIGN_OR_RETURN(v1::Dataset info, meta_->GetDataset(id));
    listed.insert(id);
    if (!info.transient()) continue;
    if (grace > absl::ZeroDuration()) {
      // Shared: another replica's job may still read it, or its client may
      // be about to submit one.
      DENDRO_ASSIGN_OR_RETURN(bool in_use, meta_->DatasetInUse(id, ""));
      if (in_use || !QuietFor(DirFor(id, true), grace)) continue;
    }
    DENDRO_RETURN_IF_ERROR(meta_->DeleteDataset(id));
    listed.erase(id);
  }
  std::error_code ec;
  for (const std::string& root : {transient_root_, root_}) {
    if (!std::filesystem::exists(root, ec)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
      if (!listed.count(entry.path().filename().string()) &&
          QuietFor(entry.path().string(), grace)) {
        std::filesystem::remove_all(entry.path(), ec);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace dendro::server
