#include "client/client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/client_interceptor.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/raw_call.h"
#include "client/tls_probe.h"
#include "core/common/status_macros.h"
#include "core/input/matrix_file.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "dendro/v1/dendro.grpc.pb.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "dendro_client sends host floats as little-endian bytes; big-endian hosts are unsupported"
#endif

namespace dendro::client {
namespace {

// Room left in every message for everything but the payload bytes.
constexpr int64_t kMessageOverhead = 64 << 10;
// Assign's response costs at most ~12 bytes per row (two varint int32s).
constexpr int64_t kAssignResponseBytesPerRow = 12;
// With stable ids: two varint int64s more (<= 10 bytes each).
constexpr int64_t kStableIdBytesPerRow = 22;
constexpr int kWatchReconnects = 3;

std::string StatusCodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// Whether `target` completes a TLS handshake when no certificate is checked:
// the reason a plaintext connection was dropped. Waits at most 3 s.
bool SpeaksTls(const std::string& target) {
  grpc::experimental::TlsChannelCredentialsOptions tls;
  tls.set_verify_server_certs(false);
  tls.set_check_call_host(false);
  tls.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  std::shared_ptr<grpc::Channel> probe =
      grpc::CreateChannel(target, grpc::experimental::TlsCredentials(tls));
  return probe->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(3));
}

// grpc::Status -> absl::Status with the same code. The server's message is
// kept as is; transport failures name the target and, where it can be told,
// why (a TLS server reached in plaintext, an untrusted certificate). Messages
// never name RPCs: callers (and the CLI's users) know what they asked for.
absl::Status FromGrpc(const grpc::Status& s, const ClientOptions& opts) {
  if (s.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(s.error_code());
  std::string msg = s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (!opts.tls && absl::StrContains(msg, "Socket closed") && SpeaksTls(opts.target)) {
        msg = absl::StrCat("dendrod at ", opts.target, " expects TLS but this client connected ",
                           "in plaintext: enable TLS (dendro --tls or --tls-ca FILE; ",
                           "ClientOptions::tls)");
      } else if (opts.tls && opts.tls_cert_file.empty() &&
                 absl::StrContains(msg, "Socket closed") && AsksForClientCertificate(opts.target)) {
        msg = absl::StrCat("dendrod at ", opts.target, " requires a client certificate (mutual ",
                           "TLS) and this client sent none: give one signed by the server's ",
                           "--tls_client_ca (dendro --tls-cert FILE --tls-key FILE; ",
                           "ClientOptions::tls_cert_file and tls_key_file)");
      } else if (opts.tls && !opts.tls_cert_file.empty() &&
                 absl::StrContains(msg, "Socket closed") && AsksForClientCertificate(opts.target)) {
        msg = absl::StrCat("dendrod at ", opts.target, " closed the connection after asking for ",
                           "a client certificate: it did not accept this client's (is it signed ",
                           "by the CA the server names with --tls_client_ca, and still valid?)");
      } else if (opts.tls && absl::StrContains(msg, "certificate verify failed")) {
        msg = absl::StrCat("cannot reach dendrod at ", opts.target, ": its TLS certificate is not ",
                           "signed by a trusted CA (dendro --tls-ca FILE; ",
                           "ClientOptions::tls_ca_file)");
      } else if (opts.tls &&
                 absl::StrContains(absl::AsciiStrToLower(msg), "wrong version number")) {
        msg = absl::StrCat("cannot reach dendrod at ", opts.target, ": it does not speak TLS ",
                           "(drop --tls/--tls-ca, or start dendrod with --tls_cert and --tls_key)");
      } else {
        msg = absl::StrCat("cannot reach dendrod at ", opts.target, ": ",
                           msg.empty() ? "unavailable" : msg);
      }
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      msg = absl::StrCat("no answer from dendrod at ", opts.target, " within ",
                         absl::StrFormat("%g", opts.deadline.count() / 1000.0),
                         " s (deadline exceeded; see --timeout)");
      break;
    default:
      if (msg.empty()) msg = absl::StrCat("the server answered ", StatusCodeName(s.error_code()));
      break;
  }
  return absl::Status(code, msg);
}

// Adds the API key to every call and, to every failed call's message, the
// request id the server returned, so that an error can be matched with
// the server's log line.
class CallInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit CallInterceptor(const std::string* api_key) : api_key_(api_key) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA) &&
        !api_key_->empty()) {
      methods->GetSendInitialMetadata()->emplace("authorization",
                                                 absl::StrCat("Bearer ", *api_key_));
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
      grpc::Status* status = methods->GetRecvStatus();
      auto* trailers = methods->GetRecvTrailingMetadata();
      if (status != nullptr && !status->ok() && trailers != nullptr) {
        if (auto it = trailers->find("x-request-id"); it != trailers->end()) {
          *status = grpc::Status(status->error_code(),
                                 absl::StrCat(status->error_message(), " [request ",
                                              std::string(it->second.data(), it->second.size()),
                                              "]"),
                                 status->error_details());
        }
      }
    }
    methods->Proceed();
  }

 private:
  const std::string* api_key_;
};

class CallInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit CallInterceptorFactory(const std::string* api_key) : api_key_(api_key) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new CallInterceptor(api_key_);
  }

 private:
  const std::string* api_key_;
};

// Rows [begin, end) of an upload as contiguous float32, row-major.
using RowSource = std::function<absl::StatusOr<const float*>(int64_t begin, int64_t end)>;

absl::Status WithPrefix(std::string_view prefix, const absl::Status& s) {
  if (s.ok() || prefix.empty()) return s;
  return absl::Status(s.code(), absl::StrCat(std::string(prefix), ": ", std::string(s.message())));
}

}  // namespace

absl::StatusOr<v1::ModelRef> ParseModelRef(std::string_view text) {
  v1::ModelRef ref;
  std::string_view name = text;
  if (const size_t at = text.rfind('@'); at != std::string_view::npos) {
    name = text.substr(0, at);
    const std::string label(text.substr(at + 1));
    if (label.empty() || name.find(':') != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", std::string(text), "': expected NAME, NAME:VERSION or NAME@LABEL"));
    }
    ref.set_label(label);
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    name = text.substr(0, colon);
    const std::string version(text.substr(colon + 1));
    int64_t v = 0;
    if (version == "latest") {
      v = 0;
    } else if (!absl::SimpleAtoi(version, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", std::string(text), "': version must be a number >= 1 or 'latest', got '",
          version, "'"));
    }
    ref.set_version(v);
  }
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", std::string(text), "': expected NAME, NAME:VERSION or NAME@LABEL"));
  }
  ref.set_name(std::string(name));
  return ref;
}

std::string FormatModelRef(const v1::ModelRef& ref) {
  if (!ref.label().empty()) return absl::StrCat(ref.name(), "@", ref.label());
  if (ref.version() == 0) return ref.name();
  return absl::StrCat(ref.name(), ":", ref.version());
}

void PinVersion(v1::ModelRef* ref, int64_t version) {
  ref->set_version(version);
  ref->clear_label();
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

// -----------------------------------------------------------------------------

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::DatasetService::Stub> datasets;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::ModelService::Stub> models;

  void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds extra = {}) const {
    ctx->set_deadline(std::chrono::system_clock::now() + options.deadline + extra);
  }

  // Runs one unary call with the default deadline.
  template <typename Fn>
  absl::Status Unary(Fn&& fn) const {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return FromGrpc(fn(&ctx), options);
  }

  absl::StatusOr<v1::Dataset> Upload(const v1::DatasetHeader& header, const RowSource& rows,
                                     std::string_view source_name,
                                     absl::Span<const int64_t> labels,
                                     const UploadProgress& progress);
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->options; }

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("no server address given");
  if (options.deadline.count() <= 0) {
    return absl::InvalidArgumentError("the call deadline must be positive");
  }
  if (options.max_message_bytes < (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be at least 1 MiB, got ", options.max_message_bytes));
  }
  if (options.upload_chunk_bytes < 8 ||
      static_cast<int64_t>(options.upload_chunk_bytes) >
          options.max_message_bytes - kMessageOverhead) {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload_chunk_bytes must be in [8, max_message_bytes - 64 KiB], got ",
        options.upload_chunk_bytes));
  }
  // The key travels in an HTTP/2 header: printable ASCII only, no spaces.
  for (char c : options.api_key) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) {
      return absl::InvalidArgumentError(
          "the API key contains whitespace or non-printable characters");
    }
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both its file and its key");
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls || !options.tls_cert_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      DENDRO_RETURN_IF_ERROR(
          WithPrefix("TLS CA file", ReadFileToString(options.tls_ca_file, &ssl.pem_root_certs)));
    }
    if (!options.tls_cert_file.empty()) {
      DENDRO_RETURN_IF_ERROR(WithPrefix(
          "client certificate", ReadFileToString(options.tls_cert_file, &ssl.pem_cert_chain)));
      DENDRO_RETURN_IF_ERROR(WithPrefix(
          "client key", ReadFileToString(options.tls_key_file, &ssl.pem_private_key)));
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  // Spread calls over every address the target resolves to (all replicas
  // behind a headless Service, or an "ipv4:a:p,b:q" list). Each call, and
  // so each streamed upload, stays on one connection.
  args.SetLoadBalancingPolicyName("round_robin");
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> hooks;
  // The options live in the Impl, which outlives the channel's calls.
  hooks.push_back(std::make_unique<CallInterceptorFactory>(&impl->options.api_key));
  impl->channel = grpc::experimental::CreateCustomChannelWithInterceptors(
      options.target, creds, args, std::move(hooks));
  impl->datasets = v1::DatasetService::NewStub(impl->channel);
  impl->jobs = v1::JobService::NewStub(impl->channel);
  impl->models = v1::ModelService::NewStub(impl->channel);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

// --- Datasets -----------------------------------------------------------------

absl::StatusOr<v1::Dataset> Client::Impl::Upload(const v1::DatasetHeader& header,
                                                 const RowSource& rows,
                                                 std::string_view source_name,
                                                 absl::Span<const int64_t> labels,
                                                 const UploadProgress& progress) {
  const int64_t cols = header.cols();
  const int64_t row_bytes = cols * 4;
  const int64_t data_bytes = header.rows() * row_bytes;
  const int64_t total = data_bytes + static_cast<int64_t>(labels.size()) * 8;
  const int64_t chunk = static_cast<int64_t>(options.upload_chunk_bytes);
  const int64_t rows_per_block = std::max<int64_t>(1, chunk / row_bytes);

  grpc::ClientContext ctx;  // no deadline: an upload takes as long as it takes
  v1::Dataset response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadDatasetRequest>> writer =
      datasets->UploadDataset(&ctx, &response);
  // A local error after the stream opened: cancel it so that the server
  // discards the partial upload.
  auto abort_with = [&](absl::Status s) {
    ctx.TryCancel();
    writer->Finish().ok();  // the server's view does not matter any more
    return s;
  };

  v1::UploadDatasetRequest req;
  *req.mutable_header() = header;
  bool stream_ok = writer->Write(req);
  int64_t sent = 0;
  if (progress) progress(0, total);
  for (int64_t begin = 0; stream_ok && begin < header.rows(); begin += rows_per_block) {
    const int64_t end = std::min(header.rows(), begin + rows_per_block);
    absl::StatusOr<const float*> block = rows(begin, end);
    if (!block.ok()) return abort_with(block.status());
    absl::Status finite = ValidateFinite(*block, end - begin, cols, begin);
    if (!finite.ok()) return abort_with(WithPrefix(source_name, finite));
    const char* bytes = reinterpret_cast<const char*>(*block);
    const int64_t n = (end - begin) * row_bytes;
    for (int64_t off = 0; off < n; off += chunk) {
      req.mutable_data()->assign(bytes + off, std::min(chunk, n - off));
      if (!writer->Write(req)) {
        stream_ok = false;
        break;
      }
      sent += req.data().size();
      if (progress) progress(sent, total);
    }
  }
  const char* label_bytes = reinterpret_cast<const char*>(labels.data());
  const int64_t n_label_bytes = static_cast<int64_t>(labels.size()) * 8;
  for (int64_t off = 0; stream_ok && off < n_label_bytes; off += chunk) {
    req.mutable_labels()->assign(label_bytes + off, std::min(chunk, n_label_bytes - off));
    if (!writer->Write(req)) {
      stream_ok = false;
      break;
    }
    sent += req.labels().size();
    if (progress) progress(sent, total);
  }
  if (stream_ok) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpc(status, options);
  if (!stream_ok) {
    return absl::UnknownError("UploadDataset: the stream broke but the server reported success");
  }
  return response;
}

absl::StatusOr<v1::Dataset> Client::UploadFile(MatrixFile& file, absl::Span<const int64_t> labels,
                                               std::string_view display_name,
                                               const UploadProgress& progress, bool transient,
                                               std::string_view prepare,
                                               std::string_view append_to) {
  if (!labels.empty() && static_cast<int64_t>(labels.size()) != file.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("there are ", labels.size(),
                                                   " labels but ", file.path(), " has ",
                                                   file.rows(), " rows"));
  }
  v1::DatasetHeader header;
  header.set_display_name(std::string(display_name));
  header.set_rows(file.rows());
  header.set_cols(file.cols());
  header.set_has_labels(!labels.empty());
  header.set_transient(transient);
  header.set_prepare(std::string(prepare));
  header.set_append_to(std::string(append_to));

  const int64_t cols = file.cols();
  // Blocks are asked for once each, in order: the rows before a block have
  // been sent, and their pages are released as the upload goes, so that
  // unmapping a file of gigabytes does not hold up what comes after it (for
  // `dendro l2h`, the job). A file that is not float32 rows already is
  // converted one block at a time.
  std::vector<float> converted;
  RowSource source = [&file, &converted, cols](int64_t begin,
                                               int64_t end) -> absl::StatusOr<const float*> {
    file.ReleaseRowsBefore(begin);
    if (const float* direct = file.Float32Rows(begin, end); direct != nullptr) return direct;
    converted.resize(static_cast<size_t>((end - begin) * cols));
    DENDRO_RETURN_IF_ERROR(file.ReadRows(begin, end, converted.data()));
    return converted.data();
  };
  return impl_->Upload(header, source, file.path(), labels, progress);
}

absl::StatusOr<v1::Dataset> Client::UploadNpy(const std::string& path,
                                              const std::optional<std::string>& labels_path,
                                              std::string_view display_name,
                                              const UploadProgress& progress, bool transient,
                                              std::string_view prepare,
                                              std::string_view append_to) {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MatrixFile> file, MatrixFile::Open(path));
  LabelColumn labels;
  if (labels_path.has_value()) {
    DENDRO_ASSIGN_OR_RETURN(labels, ReadLabelFile(*labels_path));
  }
  return UploadFile(*file, labels.ids, display_name, progress, transient, prepare, append_to);
}

absl::StatusOr<v1::Dataset> Client::ImportFile(const std::string& path,
                                               absl::Span<const int64_t> labels,
                                               std::string_view display_name, bool transient) {
  v1::ImportDatasetRequest req;
  req.set_path(path);
  v1::DatasetHeader* header = req.mutable_header();
  header->set_display_name(std::string(display_name));
  header->set_transient(transient);
  header->set_has_labels(!labels.empty());
  if (!labels.empty()) {
    std::string* bytes = req.mutable_labels();
    bytes->resize(labels.size() * sizeof(int64_t));
    std::memcpy(bytes->data(), labels.data(), bytes->size());  // little-endian hosts only
  }
  v1::Dataset resp;
  grpc::ClientContext ctx;  // no deadline: the server reads the whole file
  DENDRO_RETURN_IF_ERROR(
      FromGrpc(impl_->datasets->ImportDataset(&ctx, req, &resp), impl_->options));
  return resp;
}

absl::StatusOr<v1::Dataset> Client::UploadMatrix(const MatrixView& matrix,
                                                 absl::Span<const int64_t> labels,
                                                 std::string_view display_name,
                                                 const UploadProgress& progress) {
  if (matrix.rows() < 1 || matrix.cols() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("upload: the matrix is empty (",
                                                   matrix.rows(), " x ", matrix.cols(), ")"));
  }
  if (!labels.empty() && static_cast<int64_t>(labels.size()) != matrix.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("upload: ", labels.size(),
                                                   " labels for a matrix of ", matrix.rows(),
                                                   " rows"));
  }
  v1::DatasetHeader header;
  header.set_display_name(std::string(display_name));
  header.set_rows(matrix.rows());
  header.set_cols(matrix.cols());
  header.set_has_labels(!labels.empty());
  const float* base = matrix.data();
  const int64_t cols = matrix.cols();
  RowSource source = [base, cols](int64_t begin, int64_t) -> absl::StatusOr<const float*> {
    return base + begin * cols;
  };
  return impl_->Upload(header, source, "upload", labels, progress);
}

absl::StatusOr<v1::Dataset> Client::GetDataset(const std::string& id) {
  v1::GetDatasetRequest req;
  req.set_id(id);
  v1::Dataset resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) { return impl_->datasets->GetDataset(c, req, &resp); }));
  return resp;
}

absl::StatusOr<v1::ListDatasetsResponse> Client::ListDatasets(int32_t page_size,
                                                              const std::string& page_token) {
  v1::ListDatasetsRequest req;
  req.set_page_size(page_size);
  req.set_page_token(page_token);
  v1::ListDatasetsResponse resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) {
    return impl_->datasets->ListDatasets(c, req, &resp);
  }));
  return resp;
}

absl::Status Client::DeleteDataset(const std::string& id) {
  v1::DeleteDatasetRequest req;
  req.set_id(id);
  v1::DeleteDatasetResponse resp;
  return impl_->Unary([&](grpc::ClientContext* c) {
    return impl_->datasets->DeleteDataset(c, req, &resp);
  });
}

// --- Jobs ---------------------------------------------------------------------

absl::StatusOr<v1::Job> Client::SubmitJob(const v1::JobSpec& spec) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::Job resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) { return impl_->jobs->SubmitJob(c, req, &resp); }));
  return resp;
}

absl::StatusOr<v1::Job> Client::GetJob(const std::string& id) {
  v1::GetJobRequest req;
  req.set_id(id);
  v1::Job resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) { return impl_->jobs->GetJob(c, req, &resp); }));
  return resp;
}

absl::StatusOr<v1::ListJobsResponse> Client::ListJobs(int32_t page_size,
                                                      const std::string& page_token) {
  v1::ListJobsRequest req;
  req.set_page_size(page_size);
  req.set_page_token(page_token);
  return ListJobs(req);
}

absl::StatusOr<v1::ListJobsResponse> Client::ListJobs(const v1::ListJobsRequest& req) {
  v1::ListJobsResponse resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) { return impl_->jobs->ListJobs(c, req, &resp); }));
  return resp;
}

absl::Status Client::DeleteJob(const std::string& id) {
  v1::DeleteJobRequest req;
  req.set_id(id);
  v1::DeleteJobResponse resp;
  return impl_->Unary([&](grpc::ClientContext* c) { return impl_->jobs->DeleteJob(c, req, &resp); });
}

absl::Status Client::CheckHealth() {
  // grpc.health.v1.Health/Check with an empty HealthCheckRequest (service
  // "" = the whole server), as raw bytes: the health protos are not part of
  // this library. The answer's field 1 is the status; SERVING = 1.
  grpc::ClientContext ctx;
  impl_->SetDeadline(&ctx);
  std::string answer;
  DENDRO_RETURN_IF_ERROR(
      FromGrpc(RawUnaryCall(impl_->channel, &ctx, "/grpc.health.v1.Health/Check", "", &answer),
               impl_->options));
  if (answer == std::string("\x08\x01", 2)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("dendrod at ", impl_->options.target,
                                             " answers but is not serving"));
}

absl::StatusOr<v1::Job> Client::CancelJob(const std::string& id) {
  v1::CancelJobRequest req;
  req.set_id(id);
  v1::Job resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) { return impl_->jobs->CancelJob(c, req, &resp); }));
  return resp;
}

absl::StatusOr<v1::Job> Client::WatchJob(const std::string& id,
                                         const std::function<void(const v1::Job&)>& on_update) {
  v1::WatchJobRequest req;
  req.set_id(id);
  bool heard_from_server = false;
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;  // no deadline: jobs run as long as they run
    std::unique_ptr<grpc::ClientReader<v1::Job>> reader = impl_->jobs->WatchJob(&ctx, req);
    v1::Job job;
    std::optional<v1::Job> last;
    bool heard_this_time = false;
    while (reader->Read(&job)) {
      heard_from_server = true;
      heard_this_time = true;
      if (on_update) on_update(job);
      last = job;
      if (IsTerminal(job.state())) break;
    }
    if (last.has_value() && IsTerminal(last->state())) {
      ctx.TryCancel();  // in case the server has not closed the stream yet
      reader->Finish().ok();
      return *std::move(last);
    }
    const grpc::Status status = reader->Finish();
    // The server ends a watch whose job has not changed for its idle limit
    // (--stream_idle_seconds; this context has no deadline of its own):
    // watch again at once, as often as that happens.
    if (heard_this_time && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      --attempt;
      continue;
    }
    // A stream that broke after it worked (server restart, proxy timeout) is
    // re-opened; a server that never answered is reported at once.
    const bool retryable =
        status.ok() || (heard_from_server && status.error_code() == grpc::StatusCode::UNAVAILABLE);
    if (!retryable || attempt >= kWatchReconnects) {
      if (!status.ok()) return FromGrpc(status, impl_->options);
      return absl::UnavailableError(absl::StrCat("WatchJob: the stream for job '", id,
                                                 "' ended before the job finished"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250 << attempt));
  }
}

absl::StatusOr<v1::Job> Client::WaitJob(const std::string& id, std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) return absl::InvalidArgumentError("WaitJob: timeout must be >= 0");
  v1::WaitJobRequest req;
  req.set_id(id);
  req.mutable_timeout()->set_seconds(timeout.count() / 1000);
  req.mutable_timeout()->set_nanos(static_cast<int32_t>(timeout.count() % 1000) * 1'000'000);
  v1::Job resp;
  grpc::ClientContext ctx;
  impl_->SetDeadline(&ctx, timeout);
  DENDRO_RETURN_IF_ERROR(
      FromGrpc(impl_->jobs->WaitJob(&ctx, req, &resp), impl_->options));
  return resp;
}

// --- Models -------------------------------------------------------------------

absl::StatusOr<v1::Model> Client::GetModel(const v1::ModelRef& ref) {
  v1::GetModelRequest req;
  *req.mutable_model() = ref;
  v1::Model resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) { return impl_->models->GetModel(c, req, &resp); }));
  return resp;
}

absl::StatusOr<v1::DiffModelsResponse> Client::DiffModels(const v1::ModelRef& a,
                                                          const v1::ModelRef& b, bool tanglegram) {
  v1::DiffModelsRequest req;
  *req.mutable_a() = a;
  *req.mutable_b() = b;
  req.set_tanglegram(tanglegram);
  v1::DiffModelsResponse resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary(
      [&](grpc::ClientContext* c) { return impl_->models->DiffModels(c, req, &resp); }));
  return resp;
}

absl::StatusOr<v1::GetClassesResponse> Client::GetClasses(const v1::ModelRef& ref) {
  v1::GetClassesRequest req;
  *req.mutable_model() = ref;
  v1::GetClassesResponse resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) {
    return impl_->models->GetClasses(c, req, &resp);
  }));
  if (resp.superclasses_size() != resp.labels_size()) {
    return absl::InternalError(absl::StrCat("GetClasses: ", resp.labels_size(), " labels but ",
                                            resp.superclasses_size(), " super-classes"));
  }
  return resp;
}

absl::StatusOr<v1::ListModelsResponse> Client::ListModels(const std::string& name,
                                                          int32_t page_size,
                                                          const std::string& page_token) {
  v1::ListModelsRequest req;
  req.set_name(name);
  req.set_page_size(page_size);
  req.set_page_token(page_token);
  v1::ListModelsResponse resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) {
    return impl_->models->ListModels(c, req, &resp);
  }));
  return resp;
}

absl::StatusOr<v1::Model> Client::SetModelLabel(const std::string& name, const std::string& label,
                                                int64_t version) {
  v1::SetModelLabelRequest req;
  req.set_name(name);
  req.set_label(label);
  req.set_version(version);
  v1::Model resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) {
    return impl_->models->SetModelLabel(c, req, &resp);
  }));
  return resp;
}

absl::StatusOr<int64_t> Client::DeleteModelLabel(const std::string& name,
                                                 const std::string& label) {
  v1::DeleteModelLabelRequest req;
  req.set_name(name);
  req.set_label(label);
  v1::DeleteModelLabelResponse resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) {
    return impl_->models->DeleteModelLabel(c, req, &resp);
  }));
  return resp.version();
}

absl::StatusOr<int32_t> Client::SetModelRetention(const std::string& name,
                                                  int32_t keep_versions) {
  v1::SetModelRetentionRequest req;
  req.set_name(name);
  req.set_keep_versions(keep_versions);
  v1::SetModelRetentionResponse resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) {
    return impl_->models->SetModelRetention(c, req, &resp);
  }));
  return resp.deleted();
}

absl::StatusOr<int32_t> Client::DeleteModel(const std::string& name, int64_t version) {
  v1::DeleteModelRequest req;
  req.set_name(name);
  req.set_version(version);
  v1::DeleteModelResponse resp;
  DENDRO_RETURN_IF_ERROR(impl_->Unary([&](grpc::ClientContext* c) {
    return impl_->models->DeleteModel(c, req, &resp);
  }));
  return resp.deleted();
}

absl::StatusOr<std::string> Client::GetTree(const v1::ModelRef& ref, v1::TreeFormat format,
                                            bool include_points, v1::Model* model,
                                            bool unrefined) {
  v1::GetTreeRequest req;
  *req.mutable_model() = ref;
  req.set_format(format);
  req.set_include_points(include_points);
  req.set_unrefined(unrefined);
  // Always the streaming form: it serves a tree of any size, and a small one
  // in a single piece.
  grpc::ClientContext ctx;
  impl_->SetDeadline(&ctx);
  std::unique_ptr<grpc::ClientReader<v1::GetTreeChunk>> reader =
      impl_->models->GetTreeStream(&ctx, req);
  std::string content;
  v1::GetTreeChunk chunk;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first && model != nullptr) *model = chunk.model();
    first = false;
    content.append(chunk.content());
  }
  DENDRO_RETURN_IF_ERROR(FromGrpc(reader->Finish(), impl_->options));
  if (first) return absl::DataLossError("GetTreeStream: the server sent no part of the tree");
  return content;
}

namespace {

// Sends `rows` in consecutive blocks that fit under the message limit (the
// request carries cols x 4 bytes a row, the response `response_row_bytes`),
// halving the block when the server answers RESOURCE_EXHAUSTED. `send`
// performs one call for rows [begin, begin + count) and returns its status.
absl::Status ForEachBatch(
    const char* what, const MatrixView& rows, int64_t response_row_bytes,
    int64_t max_message_bytes,
    const std::function<grpc::Status(const float* block, int64_t begin, int64_t count)>& send,
    const ClientOptions& options) {
  const int64_t n = rows.rows();
  const int64_t cols = rows.cols();
  if (n < 1 || cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the input is empty (", n, " x ", cols, ")"));
  }
  const int64_t budget = max_message_bytes - kMessageOverhead;
  const int64_t per_row = std::max(cols * 4, response_row_bytes);
  if (per_row > budget) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": one row of ", cols,
                                                   " float32 values does not fit in a message of ",
                                                   max_message_bytes, " bytes"));
  }
  int64_t batch = std::max<int64_t>(1, budget / per_row);
  for (int64_t begin = 0; begin < n;) {
    const int64_t count = std::min(batch, n - begin);
    const float* block = rows.data() + begin * cols;
    DENDRO_RETURN_IF_ERROR(
        WithPrefix(absl::StrCat(what, " input"), ValidateFinite(block, count, cols, begin)));
    const grpc::Status status = send(block, begin, count);
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && count > 1) {
      batch = count / 2;  // the server accepts smaller messages than we do
      continue;
    }
    DENDRO_RETURN_IF_ERROR(FromGrpc(status, options));
    begin += count;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AssignResult> Client::Assign(const v1::ModelRef& ref, const MatrixView& rows,
                                            int32_t level, bool stable_ids) {
  if (level < 0) {
    return absl::InvalidArgumentError(absl::StrCat("assign: level must be >= 0, got ", level));
  }
  AssignResult result;
  v1::AssignRequest req;
  *req.mutable_model() = ref;
  req.set_cols(rows.cols());
  req.set_level(level);
  req.set_stable_ids(stable_ids);
  absl::Status mismatch;
  DENDRO_RETURN_IF_ERROR(ForEachBatch(
      "assign", rows, kAssignResponseBytesPerRow + (stable_ids ? kStableIdBytesPerRow : 0),
      impl_->options.max_message_bytes,
      [&](const float* block, int64_t begin, int64_t count) {
        req.set_rows(count);
        req.mutable_data()->assign(reinterpret_cast<const char*>(block),
                                   count * rows.cols() * 4);
        v1::AssignResponse resp;
        grpc::ClientContext ctx;
        impl_->SetDeadline(&ctx);
        grpc::Status status = impl_->models->Assign(&ctx, req, &resp);
        if (!status.ok()) return status;
        if (resp.leaf_size() != count || resp.cluster_size() != count) {
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              absl::StrCat("sent ", count, " rows but got ", resp.leaf_size(),
                                           " leaf and ", resp.cluster_size(), " cluster ids back"));
        }
        if (stable_ids &&
            (resp.stable_leaf_size() != count || resp.stable_cluster_size() != count)) {
          return grpc::Status(
              grpc::StatusCode::UNIMPLEMENTED,
              absl::StrCat("sent ", count, " rows but got ", resp.stable_leaf_size(),
                           " stable ids back: the server may predate stable ids"));
        }
        if (begin == 0) {
          // Pin every later batch to the version the first one used.
          result.model_version = resp.model_version();
          PinVersion(req.mutable_model(), resp.model_version());
        }
        result.leaf.insert(result.leaf.end(), resp.leaf().begin(), resp.leaf().end());
        result.cluster.insert(result.cluster.end(), resp.cluster().begin(),
                              resp.cluster().end());
        result.stable_leaf.insert(result.stable_leaf.end(), resp.stable_leaf().begin(),
                                  resp.stable_leaf().end());
        result.stable_cluster.insert(result.stable_cluster.end(), resp.stable_cluster().begin(),
                                     resp.stable_cluster().end());
        return grpc::Status::OK;
      },
      impl_->options));
  return result;
}

absl::StatusOr<PredictResult> Client::Predict(const v1::ModelRef& ref, const MatrixView& rows,
                                              const PredictOptions& options) {
  if (options.top_k < 1 || options.top_t < 0) {
    return absl::InvalidArgumentError("predict: top_k must be >= 1 and top_t >= 0");
  }
  PredictResult result;
  v1::PredictRequest req;
  *req.mutable_model() = ref;
  req.set_cols(rows.cols());
  req.set_top_t(options.top_t);
  req.set_top_k(options.top_k);
  req.set_flat(options.flat);
  // Per row: top_k labels (<= 10 bytes) and scores (4), top_t super-classes
  // (<= 5 each) and one count; a generous 64 bytes of framing for the rest.
  const int64_t response_row_bytes = 14 * options.top_k + 5 * options.top_t + 64;
  DENDRO_RETURN_IF_ERROR(ForEachBatch(
      "predict", rows, response_row_bytes, impl_->options.max_message_bytes,
      [&](const float* block, int64_t begin, int64_t count) {
        req.set_rows(count);
        req.mutable_data()->assign(reinterpret_cast<const char*>(block),
                                   count * rows.cols() * 4);
        v1::PredictResponse resp;
        grpc::ClientContext ctx;
        impl_->SetDeadline(&ctx);
        grpc::Status status = impl_->models->Predict(&ctx, req, &resp);
        if (!status.ok()) return status;
        if (begin == 0) {
          result.top_k = resp.top_k();
          result.top_t = resp.top_t();
          result.model_version = resp.model_version();
          PinVersion(req.mutable_model(), resp.model_version());
        }
        result.labels.insert(result.labels.end(), resp.labels().begin(), resp.labels().end());
        result.scores.insert(result.scores.end(), resp.scores().begin(), resp.scores().end());
        result.superclasses.insert(result.superclasses.end(), resp.superclasses().begin(),
                                   resp.superclasses().end());
        result.classes_evaluated.insert(result.classes_evaluated.end(),
                                        resp.classes_evaluated().begin(),
                                        resp.classes_evaluated().end());
        return grpc::Status::OK;
      },
      impl_->options));
  return result;
}

}  // namespace dendro::client
