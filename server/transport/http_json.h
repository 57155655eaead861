// JsonApi: the JSON answers of dendrod's HTTP listener (see
// server/transport/http_console.h for the listener, docs/http.md for the endpoints).
//
// Each method answers one GET-style endpoint, or inference, with a JSON (or
// SVG, Newick) body, calling the same in-process stores the gRPC services
// call. Nothing here knows about HTTP: failures are absl::Status values the
// listener turns into an HTTP status and {"error": ...}. Authorisation is
// the listener's job too, except for Infer, whose RPC (Assign or Predict)
// is known only once the request is read (see its `authorize`).
//
// Messages are written with protobuf's JSON mapping of dendro.v1 (field
// names as in the .proto, enums by name, int64 as strings, timestamps in
// RFC 3339), so a JSON answer carries the same fields as the gRPC one.
//
// Thread-safe: holds only pointers to thread-safe stores.
#ifndef DENDRO_SERVER_TRANSPORT_HTTP_JSON_H_
#define DENDRO_SERVER_TRANSPORT_HTTP_JSON_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/api/api.h"
#include "server/security/auth.h"
#include "server/storage/dataset_store.h"
#include "server/jobs/job_manager.h"
#include "server/models/model_registry.h"

namespace dendro::server {

// A body and its media type.
struct HttpBody {
  std::string content;
  std::string content_type = "application/json";
  // When set, the body is produced by `write`, which hands its pieces to
  // the sink in order and is sent chunked (`content` is then unused); a
  // sink error means the client went away.
  std::function<absl::Status(absl::FunctionRef<absl::Status(std::string_view)> sink)> write =
      nullptr;
};

// Decoded query parameters (a repeated name keeps its first value).
using QueryParams = std::multimap<std::string, std::string>;

class JsonApi {
 public:
  // The stores, limits and serving gate it answers from: the request
  // layer's (server/api/api.h), shared with gRPC.
  explicit JsonApi(ApiDeps deps) : deps_(deps), api_(deps) {}

  // dendro.v1 mirrors (/api/v1/...). Lists take page_size and page_token
  // as the gRPC calls do; ListModels also `name`.
  absl::StatusOr<HttpBody> ListDatasets(const QueryParams& query) const;
  absl::StatusOr<HttpBody> GetDataset(const std::string& id) const;
  // Queued and running jobs carry their live progress and stage.
  absl::StatusOr<HttpBody> ListJobs(const QueryParams& query) const;
  absl::StatusOr<HttpBody> GetJob(const std::string& id) const;
  absl::StatusOr<HttpBody> ListModels(const QueryParams& query) const;
  absl::StatusOr<HttpBody> GetModel(const v1::ModelRef& ref) const;
  // format=json (default; include_points, unrefined), newick (unrefined) or linkage (the
  // refined tree's SciPy linkage as a float64 .npy).
  absl::StatusOr<HttpBody> GetTree(const v1::ModelRef& ref, const QueryParams& query) const;
  // ToSvg's picture: layout=auto|rectangular|radial, color_level=k.
  absl::StatusOr<HttpBody> GetTreeSvg(const v1::ModelRef& ref, const QueryParams& query) const;
  absl::StatusOr<HttpBody> GetClasses(const v1::ModelRef& ref) const;
  // The diff of version `from` (query: from=VERSION|LABEL|latest, and
  // from_name=NAME, default `ref`'s name) to `ref`, as DiffModels answers:
  // {"a", "b": the two dendro.v1 Models, "report": the dendro.diff report};
  // with `svg`, the tanglegram picture instead.
  absl::StatusOr<HttpBody> DiffModels(const v1::ModelRef& ref, const QueryParams& query,
                                      bool svg) const;

  // KServe-v2-like (/v2/...).
  // Server metadata: name, version, extensions.
  static HttpBody ServerMetadata();
  // Model metadata: name, versions, platform, inputs, outputs, and the
  // dendro.v1 Model of the version asked for.
  absl::StatusOr<HttpBody> ModelMetadata(const v1::ModelRef& ref) const;
  // {"name", "version", "ready": true} once the version's files load.
  absl::StatusOr<HttpBody> ModelReady(const v1::ModelRef& ref) const;
  // An inference request (one FP32 input of shape [rows, cols]) answered
  // by Assign or Predict; see docs/http.md. Before any model is read,
  // `authorize` is called with the RPC the request names (parameters.op),
  // or with both when it names none (the model's kind then decides); its
  // error is returned as is.
  absl::StatusOr<HttpBody> Infer(const v1::ModelRef& ref, std::string_view body,
                                 const std::function<absl::Status(Rpc)>& authorize) const;

 private:
  ApiDeps deps_;
  // What each call means (server/api/api.h): this file only translates.
  Api api_;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_TRANSPORT_HTTP_JSON_H_
