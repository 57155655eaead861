// dendro::client::Client: a C++ client for the dendro.v1 services.
//
// One Client holds one gRPC channel to one dendrod. It is thread-safe: any
// number of threads may issue calls at once. Every method returns an
// absl::Status with the server's canonical code and message (NOT_FOUND,
// INVALID_ARGUMENT, ...); when the server cannot be reached the status is
// UNAVAILABLE and the message names the target. Local input (files, shapes,
// non-finite values) is checked before anything is sent.
//
// Deadlines: unary calls get ClientOptions::deadline each. Streaming calls
// that may legitimately run long (UploadNpy/UploadMatrix, WatchJob) have no
// deadline; WaitJob's deadline is its timeout plus ClientOptions::deadline.
//
// This header deliberately does not include gRPC; only the generated
// protobuf messages.
#ifndef DENDRO_CLIENT_CLIENT_H_
#define DENDRO_CLIENT_CLIENT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/input/matrix_file.h"
#include "core/matrix/matrix.h"
#include "dendro/v1/dendro.pb.h"

namespace dendro::client {

struct ClientOptions {
  // "HOST:PORT" or any gRPC target URI ("unix:/path", "dns:///host:port",
  // "ipv4:127.0.0.1:50061,127.0.0.1:50062"). Calls are spread round-robin
  // over every address the target resolves to.
  std::string target;
  // Deadline of each unary call.
  std::chrono::milliseconds deadline{60'000};
  // Largest message sent or received. Assign batches are sized to fit.
  int max_message_bytes = 64 << 20;
  // Size of the data/labels chunks of an upload (>= 4096 is sensible).
  size_t upload_chunk_bytes = 1 << 20;
  // TLS: if `tls`, the server certificate is checked against tls_ca_file
  // (PEM), or against the system roots when tls_ca_file is empty.
  bool tls = false;
  std::string tls_ca_file;
  // Client certificate and key (PEM) for servers that require mutual TLS;
  // both or neither, and they imply `tls`.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Sent as "authorization: Bearer <api_key>" on every call (unary and
  // streaming) when non-empty; printable ASCII without spaces.
  std::string api_key;
};

// Called during an upload after each chunk: bytes sent so far and the total
// (data + labels bytes). Called from the calling thread.
using UploadProgress = std::function<void(int64_t bytes_sent, int64_t total_bytes)>;

struct AssignResult {
  std::vector<int32_t> leaf;     // leaf-cluster id per input row
  std::vector<int32_t> cluster;  // cluster at the requested level (= leaf if 0)
  int64_t model_version = 0;     // the version every batch was assigned with
  // With stable_ids: the stable id of each row's leaf and cluster (ids a
  // cluster keeps across versions; empty otherwise).
  std::vector<int64_t> stable_leaf, stable_cluster;
};

struct PredictOptions {
  int32_t top_t = 0;  // super-classes to open; 0 = the model's default
  int32_t top_k = 1;  // classes per row
  bool flat = false;  // score every class
};

// Row-major blocks, as in PredictResponse.
struct PredictResult {
  int32_t top_k = 0;
  int32_t top_t = 0;
  std::vector<int64_t> labels;             // rows x top_k, original labels, best first
  std::vector<float> scores;               // rows x top_k
  std::vector<int32_t> superclasses;       // rows x top_t (empty when flat)
  std::vector<int32_t> classes_evaluated;  // rows
  int64_t model_version = 0;
};

// Parses "NAME" (latest version), "NAME:VERSION" (VERSION >= 1 or
// "latest") or "NAME@LABEL" (the version the label points at).
absl::StatusOr<v1::ModelRef> ParseModelRef(std::string_view text);
// "NAME@LABEL", "NAME:VERSION", or "NAME" for version 0 (latest).
std::string FormatModelRef(const v1::ModelRef& ref);
// Points `ref` at exactly `version` (dropping any label, which may move), so
// that the later calls of one operation all see the version the first used.
void PinVersion(v1::ModelRef* ref, int64_t version);

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsTerminal(v1::JobState state);

class Client {
 public:
  // Creates the channel. Does not wait for the server: an unreachable
  // server shows up as UNAVAILABLE on the first call. Fails only on bad
  // options (empty target, unreadable tls_ca_file, a client certificate
  // without its key, an api_key that is not printable ASCII without
  // spaces, ...), with INVALID_ARGUMENT or the file's error.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const;

  // --- Datasets -------------------------------------------------------------

  // Uploads a matrix file opened with MatrixFile::Open (.npy of any numeric
  // dtype and order, .npz, .csv/.tsv/.txt; see core/input/matrix_file.h),
  // streamed block by block: float32 C-order rows straight from the mapped
  // file, anything else converted one block at a time, never copied whole.
  // `labels` is empty or has one entry per row. Every value is checked to be
  // finite before its chunk is sent (the error names the row and column). A
  // `transient` dataset is not written durably and is dropped when the
  // server restarts (see DatasetHeader.transient): right for one-shot fits.
  // `prepare` names a method whose first pass the server runs while the
  // rows arrive (DatasetHeader.prepare: "" or "l2h"). A non-empty
  // `append_to` ("ds-…" or "ds-…:G") makes the rows the next generation of
  // that dataset (DatasetHeader.append_to).
  absl::StatusOr<v1::Dataset> UploadFile(MatrixFile& file, absl::Span<const int64_t> labels,
                                         std::string_view display_name,
                                         const UploadProgress& progress = nullptr,
                                         bool transient = false, std::string_view prepare = "",
                                         std::string_view append_to = "");
  // UploadFile for a path, with labels read by ReadLabelFile (string labels
  // become ids in sorted order; their names are not sent).
  absl::StatusOr<v1::Dataset> UploadNpy(const std::string& path,
                                        const std::optional<std::string>& labels_path,
                                        std::string_view display_name,
                                        const UploadProgress& progress = nullptr,
                                        bool transient = false, std::string_view prepare = "",
                                        std::string_view append_to = "");
  // Same-host import (v1::ImportDatasetRequest): the server reads `path`
  // (absolute; a float32 C-order .npy under one of its --import_dirs)
  // instead of receiving its bytes. No deadline, as for uploads.
  absl::StatusOr<v1::Dataset> ImportFile(const std::string& path, absl::Span<const int64_t> labels,
                                         std::string_view display_name, bool transient = false);
  // Uploads an in-memory matrix; `labels` is empty or has one entry per row.
  absl::StatusOr<v1::Dataset> UploadMatrix(const MatrixView& matrix,
                                           absl::Span<const int64_t> labels,
                                           std::string_view display_name,
                                           const UploadProgress& progress = nullptr);
  absl::StatusOr<v1::Dataset> GetDataset(const std::string& id);
  absl::StatusOr<v1::ListDatasetsResponse> ListDatasets(int32_t page_size = 0,
                                                        const std::string& page_token = "");
  absl::Status DeleteDataset(const std::string& id);

  // --- Jobs -----------------------------------------------------------------

  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(int32_t page_size = 0,
                                                const std::string& page_token = "");
  // The same with the request's order and state filter.
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req);
  absl::StatusOr<v1::Job> CancelJob(const std::string& id);
  // Removes a finished job's record (admin).
  absl::Status DeleteJob(const std::string& id);
  // The standard grpc.health.v1 check of the whole server (needs no key):
  // OK when it is SERVING, UNAVAILABLE otherwise.
  absl::Status CheckHealth();
  // Follows the job until it reaches a terminal state, calling `on_update`
  // (if set) for every update the server streams, and returns the final job.
  // A FAILED or CANCELLED job is still an OK result: inspect its state. If
  // the stream breaks before the end it is re-opened (a few times), and
  // whenever the server ends it because the job has not changed for the
  // server's idle limit.
  absl::StatusOr<v1::Job> WatchJob(const std::string& id,
                                   const std::function<void(const v1::Job&)>& on_update);
  // Returns when the job is terminal or `timeout` has passed (the job may
  // then still be running).
  absl::StatusOr<v1::Job> WaitJob(const std::string& id, std::chrono::milliseconds timeout);

  // --- Models ---------------------------------------------------------------

  absl::StatusOr<v1::Model> GetModel(const v1::ModelRef& ref);
  // `name` empty: every model.
  absl::StatusOr<v1::ListModelsResponse> ListModels(const std::string& name = "",
                                                    int32_t page_size = 0,
                                                    const std::string& page_token = "");
  // version 0: every version of `name`. Returns how many were deleted.
  absl::StatusOr<int32_t> DeleteModel(const std::string& name, int64_t version);
  // Points `label` at `version` of `name` (0: the latest); returns that
  // version's model.
  absl::StatusOr<v1::Model> SetModelLabel(const std::string& name, const std::string& label,
                                          int64_t version);
  // Removes a label; returns the version it pointed at.
  absl::StatusOr<int64_t> DeleteModelLabel(const std::string& name, const std::string& label);
  // Keeps the newest `keep_versions` unlabelled versions of `name` (0: all)
  // from now on; returns how many versions it deleted now.
  absl::StatusOr<int32_t> SetModelRetention(const std::string& name, int32_t keep_versions);
  // The tree serialised in `format` (JSON text, Newick text, or the bytes of
  // a float64 .npy linkage matrix). `model` (optional) receives the model
  // that was served, which tells the version a "latest" ref resolved to.
  // Read through GetTreeStream, so no message limit applies to the tree.
  // `unrefined`: the method's own n-ary tree (gHHC, hppca) instead of its
  // binary refinement; JSON or Newick only.
  absl::StatusOr<std::string> GetTree(const v1::ModelRef& ref, v1::TreeFormat format,
                                      bool include_points, v1::Model* model = nullptr,
                                      bool unrefined = false);
  // Assigns every row of `rows` (which must be finite) to a leaf cluster and
  // to its cluster at `level` (0 = leaf level). Rows are sent in batches that
  // fit under max_message_bytes; every batch after the first is pinned to
  // the version the first one used, so one call never mixes versions.
  // `stable_ids`: answer the stable ids too.
  absl::StatusOr<AssignResult> Assign(const v1::ModelRef& ref, const MatrixView& rows,
                                      int32_t level = 0, bool stable_ids = false);
  // Classifier models: each class's original label and super-class.
  absl::StatusOr<v1::GetClassesResponse> GetClasses(const v1::ModelRef& ref);
  // Two models' trees compared by the server (v1::DiffModelsRequest).
  absl::StatusOr<v1::DiffModelsResponse> DiffModels(const v1::ModelRef& a, const v1::ModelRef& b,
                                                    bool tanglegram = false);
  // Classifier models: top-k classes per row, batched like Assign.
  absl::StatusOr<PredictResult> Predict(const v1::ModelRef& ref, const MatrixView& rows,
                                        const PredictOptions& options);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dendro::client

#endif  // DENDRO_CLIENT_CLIENT_H_
