// Argument parsing, context and output helpers shared by the verbs.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "core/hierarchy/export.h"
#include "core/io/npy.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
#include "google/protobuf/util/json_util.h"

namespace dendro::cli {
namespace {

constexpr char kUsagePayload[] = "dendro.cli/usage";

}  // namespace

absl::Status UsageError(std::string_view message) {
  absl::Status s = absl::InvalidArgumentError(std::string(message));
  s.SetPayload(kUsagePayload, absl::Cord("1"));
  return s;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

// --- Args ---------------------------------------------------------------------

absl::StatusOr<Args> Args::Parse(std::string_view verb, const std::vector<std::string>& argv,
                                 const std::vector<FlagSpec>& flags, int min_positional,
                                 int max_positional) {
  Args args;
  args.verb_ = std::string(verb);
  const std::string v(verb);
  bool flags_done = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (flags_done || a.size() < 2 || a[0] != '-' ) {
      args.positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    if (a[1] != '-') {
      return UsageError(absl::StrCat("unknown option '", a, "' for '", v, "' (see 'dendro ", v,
                                     " --help')"));
    }
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto spec = std::find_if(flags.begin(), flags.end(),
                             [&](const FlagSpec& f) { return f.name == name; });
    if (spec == flags.end()) {
      return UsageError(absl::StrCat("unknown flag '--", name, "' for '", v, "' (see 'dendro ",
                                     v, " --help')"));
    }
    if (spec->takes_value) {
      if (!value.has_value()) {
        if (i + 1 >= argv.size()) {
          return UsageError(absl::StrCat("flag '--", name, "' of '", v, "' needs a value"));
        }
        value = argv[++i];
      }
    } else if (value.has_value()) {
      return UsageError(absl::StrCat("flag '--", name, "' of '", v, "' takes no value"));
    } else {
      value = "";
    }
    std::vector<std::string>& slot = args.values_[name];
    if (!slot.empty() && !spec->repeated) {
      return UsageError(absl::StrCat("flag '--", name, "' of '", v, "' given more than once"));
    }
    slot.push_back(*std::move(value));
  }
  const int n = static_cast<int>(args.positional_.size());
  if (n < min_positional) {
    return UsageError(absl::StrCat("'", v, "' needs ",
                                   min_positional == max_positional ? "" : "at least ",
                                   min_positional, " argument", min_positional == 1 ? "" : "s",
                                   ", got ", n, " (see 'dendro ", v, " --help')"));
  }
  if (n > max_positional) {
    return UsageError(absl::StrCat("unexpected argument '", args.positional_[max_positional],
                                   "' for '", v, "' (see 'dendro ", v, " --help')"));
  }
  return args;
}

std::optional<std::string> Args::Get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::GetAll(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return {};
  return it->second;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& flag, int64_t fallback, int64_t min,
                                     int64_t max) const {
  std::optional<std::string> v = Get(flag);
  if (!v.has_value()) return fallback;
  int64_t n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < min || n > max) {
    return UsageError(absl::StrCat("flag '--", flag, "' of '", verb_, "' must be an integer in [",
                                   min, ", ", max, "], got '", *v, "'"));
  }
  return n;
}

// --- Context ------------------------------------------------------------------

namespace {
// The first line of `path`, without trailing whitespace (and line end).
absl::StatusOr<std::string> ReadApiKeyFile(const std::string& path) {
  std::string text;
  if (!ReadFileToString(path, &text).ok()) {
    return absl::NotFoundError(absl::StrCat("cannot read the API key file ", path));
  }
  text.resize(std::min(text.size(), text.find('\n')));
  text = std::string(absl::StripTrailingAsciiWhitespace(text));
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the API key file ", path, " holds no key on its first line"));
  }
  return text;
}
}  // namespace

absl::StatusOr<client::Client*> Context::client() {
  if (client_ == nullptr) {
    if (!options_.api_key_file.empty()) {
      DENDRO_ASSIGN_OR_RETURN(options_.api_key, ReadApiKeyFile(options_.api_key_file));
    }
    client::ClientOptions opts;
    opts.target = options_.server;
    opts.deadline = std::chrono::milliseconds(
        static_cast<int64_t>(std::ceil(options_.timeout_seconds * 1000.0)));
    opts.tls = options_.tls;
    opts.tls_ca_file = options_.tls_ca_file;
    opts.tls_cert_file = options_.tls_cert_file;
    opts.tls_key_file = options_.tls_key_file;
    opts.api_key = options_.api_key;
    DENDRO_ASSIGN_OR_RETURN(client_, client::Client::Connect(opts));
  }
  return client_.get();
}

// --- Output -------------------------------------------------------------------

bool StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

namespace {

int TerminalWidth() {
  struct winsize ws;
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
  return 80;
}

}  // namespace

ProgressBar::ProgressBar() : enabled_(StderrIsTerminal()) {}

ProgressBar::~ProgressBar() {
  // Not finished with Done(): the operation failed or moved on; erase the bar
  // so that what follows (an error line) starts on a clean line.
  if (drawn_) {
    std::fputs("\r\x1b[K", stderr);
    std::fflush(stderr);
  }
}

void ProgressBar::Update(double fraction, std::string_view text) {
  if (!enabled_) return;
  if (!(fraction >= 0)) fraction = 0;  // also NaN
  fraction = std::min(fraction, 1.0);
  constexpr int kBarWidth = 30;
  const int filled = static_cast<int>(fraction * kBarWidth);
  std::string line = absl::StrFormat("[%s%s] %3d%%  ", std::string(filled, '#'),
                                     std::string(kBarWidth - filled, '.'),
                                     static_cast<int>(fraction * 100));
  line += std::string(text);
  const size_t width = static_cast<size_t>(TerminalWidth() - 1);
  if (line.size() > width) line.resize(width);
  if (line == last_) return;
  // Redraw at most ~10 times a second, but always draw completion.
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && fraction < 1.0 && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  last_ = line;
  std::fprintf(stderr, "\r\x1b[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Done() {
  if (drawn_) {
    std::fputc('\n', stderr);
    std::fflush(stderr);
  }
  drawn_ = false;
  last_.clear();
}

void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      line += cell;
      if (c + 1 < width.size()) line += std::string(width[c] - cell.size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  };
  print_row(header);
  for (const auto& row : rows) print_row(row);
  std::cout.flush();
}

void PrintFields(const std::vector<std::pair<std::string, std::string>>& fields) {
  size_t width = 0;
  for (const auto& [key, value] : fields) width = std::max(width, key.size());
  for (const auto& [key, value] : fields) {
    std::cout << key << ":" << std::string(width - key.size() + 2, ' ') << value << "\n";
  }
  std::cout.flush();
}

absl::Status PrintMessageJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::string out;
  const auto s = google::protobuf::util::MessageToJsonString(message, &out, opts);
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat("cannot print JSON: ", std::string(s.message())));
  }
  std::cout << out << "\n";
  std::cout.flush();
  return absl::OkStatus();
}

std::string FormatTime(const google::protobuf::Timestamp& ts) {
  if (ts.seconds() == 0 && ts.nanos() == 0) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(ts.seconds()),
                          absl::UTCTimeZone());
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

std::string JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_QUEUED:
      return "queued";
    case v1::JOB_STATE_RUNNING:
      return "running";
    case v1::JOB_STATE_SUCCEEDED:
      return "succeeded";
    case v1::JOB_STATE_FAILED:
      return "failed";
    case v1::JOB_STATE_CANCELLED:
      return "cancelled";
    default:
      return "unspecified";
  }
}

std::string DescribeJob(const v1::Job& job) {
  std::string line = absl::StrFormat("%s  %s  %5.1f%%", job.id(), JobStateName(job.state()),
                                     job.progress() * 100);
  if (!job.stage().empty()) absl::StrAppend(&line, "  ", job.stage());
  if (job.state() == v1::JOB_STATE_SUCCEEDED) {
    absl::StrAppend(&line, "  model ", job.model_name(), " version ", job.model_version());
  }
  if (!job.error().message().empty()) absl::StrAppend(&line, "  error: ", job.error().message());
  return line;
}

absl::Status JobNotSucceeded(const v1::Job& job) {
  absl::StatusCode code = static_cast<absl::StatusCode>(job.error().code());
  if (code == absl::StatusCode::kOk) code = absl::StatusCode::kUnknown;
  const std::string msg = job.error().message().empty() ? "no reason given" : job.error().message();
  if (job.state() == v1::JOB_STATE_CANCELLED) {
    return absl::Status(absl::StatusCode::kCancelled,
                        absl::StrCat("job ", job.id(), " was cancelled: ", msg));
  }
  return WithMethodChangeHint(absl::Status(code, absl::StrCat("job ", job.id(), " failed: ", msg)),
                              job.spec());
}

absl::StatusOr<double> PositiveFlag(const Args& args, const char* name) {
  std::optional<std::string> v = args.Get(name);
  if (!v.has_value()) return 0.0;
  double x = 0;
  if (!absl::SimpleAtod(*v, &x) || !(x > 0) || !std::isfinite(x)) {
    return UsageError(absl::StrCat("--", name, " must be a positive number, got '", *v, "'"));
  }
  return x;
}

// --- Fit inputs ---------------------------------------------------------------

bool IsDatasetId(const std::string& arg) {
  std::error_code ec;
  return absl::StartsWith(arg, "ds-") && !std::filesystem::exists(arg, ec);
}

absl::StatusOr<FitInput> FitInputFrom(const Args& args, const std::optional<std::string>& data_arg,
                                      std::string_view file_arg) {
  FitInput input;
  if (std::optional<std::string> id = args.Get("dataset")) {
    if (data_arg.has_value()) {
      return UsageError(absl::StrCat("'", args.verb(), "' takes ", std::string(file_arg),
                                     " or --dataset, not both (got '", *data_arg,
                                     "' and --dataset ", *id, ")"));
    }
    if (id->empty()) return UsageError("--dataset needs a dataset id (ds-...)");
    input.dataset_id = *id;
  } else if (!data_arg.has_value()) {
    return UsageError(absl::StrCat("'", args.verb(), "' needs ", std::string(file_arg),
                                   ", a dataset id or --dataset ID (see 'dendro ", args.verb(),
                                   " --help')"));
  } else if (IsDatasetId(*data_arg)) {
    input.dataset_id = *data_arg;
  } else {
    input.path = *data_arg;
  }
  if (input.existing() && args.Has("keep-dataset")) {
    return UsageError(absl::StrCat("--keep-dataset applies to uploads; dataset ", input.dataset_id,
                                   " is already on the server"));
  }
  return input;
}

absl::Status LabelsWithDataset(const FitInput& input, std::string_view given) {
  return UsageError(absl::StrCat(std::string(given), " cannot be used with dataset ",
                                 input.dataset_id, ": its labels are the ones uploaded with it "
                                 "('dendro upload X.npy --labels Y.npy')"));
}

absl::StatusOr<v1::Dataset> GetExistingDataset(client::Client& client, const std::string& id) {
  absl::StatusOr<v1::Dataset> ds = client.GetDataset(id);
  if (absl::IsNotFound(ds.status())) {
    return absl::NotFoundError(absl::StrCat("dataset '", id, "' not found"));
  }
  return ds;
}

std::string ModelNameFrom(std::string text) {
  for (char& c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (!text.empty() && text[0] == '.') text[0] = '_';
  if (text.size() > 128) text.resize(128);
  return text.empty() ? "model" : text;
}

absl::Status WithMethodChangeHint(const absl::Status& status, const v1::JobSpec& spec) {
  if (spec.allow_method_change() || status.code() != absl::StatusCode::kFailedPrecondition ||
      !absl::StrContains(status.message(), "method") ||
      absl::StrContains(status.message(), "--allow-method-change")) {
    return status;
  }
  // The server names the proto field; the CLI's spelling of it is the flag.
  if (absl::StrContains(status.message(), "allow_method_change")) {
    return absl::Status(status.code(), absl::StrReplaceAll(status.message(),
                                                           {{"allow_method_change",
                                                             "--allow-method-change"}}));
  }
  return absl::Status(status.code(),
                      absl::StrCat(status.message(),
                                   "; rerun with --allow-method-change to register it under '",
                                   spec.model_name(), "' anyway"));
}

absl::StatusOr<v1::Job> SubmitFit(client::Client& client, const v1::JobSpec& spec,
                                  const v1::Dataset* upload) {
  absl::StatusOr<v1::Job> job = client.SubmitJob(spec);
  if (job.ok()) return job;
  if (upload != nullptr && upload->transient()) client.DeleteDataset(upload->id()).IgnoreError();
  return WithMethodChangeHint(job.status(), spec);
}

// --- Tree outputs -------------------------------------------------------------

absl::StatusOr<OutputKind> OutputKindFor(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".npy") return OutputKind::kLinkageNpy;
  if (ext == ".nwk" || ext == ".newick") return OutputKind::kNewick;
  if (ext == ".json") return OutputKind::kJson;
  if (ext == ".svg") return OutputKind::kSvg;
  return UsageError(absl::StrCat("--out ", path, ": unknown extension '", ext,
                                 "' (expected .npy for a SciPy linkage matrix, .nwk/.newick, "
                                 ".json or .svg for a picture)"));
}

absl::Status CheckNpyOutput(const std::string& verb, const std::string& path) {
  absl::StatusOr<OutputKind> kind = OutputKindFor(path);
  if (!kind.ok() || *kind != OutputKind::kLinkageNpy) {
    return UsageError(absl::StrCat("--out ", path, ": '", verb,
                                   "' writes one .npy array; give a file name ending in .npy"));
  }
  return CheckOutputs({path});
}

absl::Status CheckOutputs(const std::vector<std::string>& outs) {
  for (const std::string& out : outs) {
    DENDRO_RETURN_IF_ERROR(OutputKindFor(out).status());
    std::filesystem::path dir = std::filesystem::path(out).parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      return absl::NotFoundError(
          absl::StrCat("--out ", out, ": directory '", dir.string(), "' does not exist"));
    }
    if (::access(dir.c_str(), W_OK) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("--out ", out, ": directory '", dir.string(), "' is not writable"));
    }
    if (std::filesystem::is_directory(out, ec)) {
      return absl::InvalidArgumentError(absl::StrCat("--out ", out, " is a directory"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Model> FetchTrees(client::Client& client, const v1::ModelRef& ref,
                                     const std::vector<std::string>& outs,
                                     const TreeOutputOptions& options) {
  v1::ModelRef pinned = ref;
  v1::Model model;
  for (const std::string& out : outs) {
    DENDRO_ASSIGN_OR_RETURN(OutputKind kind, OutputKindFor(out));
    v1::TreeFormat format = v1::TREE_FORMAT_JSON;
    if (kind == OutputKind::kLinkageNpy) format = v1::TREE_FORMAT_LINKAGE_NPY;
    if (kind == OutputKind::kNewick) format = v1::TREE_FORMAT_NEWICK;
    if (options.unrefined && kind == OutputKind::kLinkageNpy) {
      return UsageError(absl::StrCat("--out ", out, ": an unrefined tree can be n-ary, which a "
                                     "SciPy linkage cannot hold; use .json, .nwk or .svg"));
    }
    DENDRO_ASSIGN_OR_RETURN(std::string content,
                            client.GetTree(pinned, format, kind == OutputKind::kJson, &model,
                                           options.unrefined));
    if (kind == OutputKind::kSvg) {
      // Drawn here from the JSON tree: the server serves data, not pictures.
      DENDRO_ASSIGN_OR_RETURN(Hierarchy tree, ParseJson(content));
      SvgOptions svg;
      svg.color_level = options.color_level;
      svg.layout = options.layout;
      svg.title = absl::StrCat(model.name(), " v", model.version(), " (", model.method(), ", ",
                               tree.num_leaves(), " leaves",
                               options.unrefined ? ", unrefined" : "", ")");
      absl::StatusOr<std::string> drawn = ToSvg(tree, svg);
      if (!drawn.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--out ", out, ": ", drawn.status().message()));
      }
      content = *std::move(drawn);
    }
    // Every file of one command describes the same version.
    client::PinVersion(&pinned, model.version());
    DENDRO_RETURN_IF_ERROR(WriteFileAtomic(out, content));
  }
  if (outs.empty()) {
    DENDRO_ASSIGN_OR_RETURN(model, client.GetModel(ref));
  }
  return model;
}

absl::StatusOr<TreeOutputOptions> TreeOutputOptionsFrom(const Args& args) {
  TreeOutputOptions o;
  o.unrefined = args.Has("unrefined");
  DENDRO_ASSIGN_OR_RETURN(int64_t level, args.GetInt("color-level", 0, 0, 1 << 30));
  o.color_level = static_cast<int32_t>(level);
  if (std::optional<std::string> layout = args.Get("layout")) {
    if (*layout == "rectangular") {
      o.layout = SvgOptions::Layout::kRectangular;
    } else if (*layout == "radial") {
      o.layout = SvgOptions::Layout::kRadial;
    } else if (*layout != "auto") {
      return UsageError(absl::StrCat("--layout must be auto, rectangular or radial, got '",
                                     *layout, "'"));
    }
  }
  return o;
}

// 1-D (or N x 1) integer labels.
absl::StatusOr<std::unique_ptr<MatrixFile>> OpenMatrix(const Args& args,
                                                       const std::string& path) {
  InputFileOptions options;
  options.npz_key = args.Get("key").value_or("");
  return MatrixFile::Open(path, options);
}

namespace {

// Whether the target is this host: the server can then see our files.
bool LocalTarget(const std::string& target) {
  for (const char* prefix : {"127.", "localhost:", "[::1]:", "unix:", "ipv4:127.", "ipv6:[::1]"}) {
    if (absl::StartsWith(target, prefix)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<v1::Dataset> SendFile(const Args& args, client::Client& client, MatrixFile& file,
                                     absl::Span<const int64_t> labels,
                                     std::string_view display_name,
                                     const client::UploadProgress& progress, bool transient,
                                     std::string_view prepare, std::string_view append_to) {
  const std::string mode = args.Get("import").value_or("auto");
  if (mode != "auto" && mode != "on" && mode != "off") {
    return UsageError(absl::StrCat("--import must be auto, on or off, got '", mode, "'"));
  }
  const bool npy = absl::EndsWithIgnoreCase(file.path(), ".npy");
  const bool float32 = file.rows() > 0 && file.Float32Rows(0, 1) != nullptr;
  if (mode == "on") {
    if (!append_to.empty()) return UsageError("--import on does not go with --append");
    if (!npy || !float32) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), " is ", file.description(),
          "; only float32 .npy files in C order are imported (drop --import on to upload it)"));
    }
  }
  const bool try_import = mode == "on" || (mode == "auto" && npy && float32 && append_to.empty() &&
                                           LocalTarget(client.options().target));
  if (try_import) {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::canonical(file.path(), ec);
    if (!ec) {
      absl::StatusOr<v1::Dataset> ds =
          client.ImportFile(absolute.string(), labels, display_name, transient);
      if (ds.ok() || mode == "on") return ds;
      // The server cannot or may not read it: send the bytes instead.
      const absl::StatusCode code = ds.status().code();
      if (code != absl::StatusCode::kFailedPrecondition &&
          code != absl::StatusCode::kPermissionDenied && code != absl::StatusCode::kNotFound &&
          code != absl::StatusCode::kUnimplemented) {
        return ds;
      }
    } else if (mode == "on") {
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", ec.message()));
    }
  }
  return client.UploadFile(file, labels, display_name, progress, transient, prepare, append_to);
}

absl::StatusOr<LabelColumn> ReadLabels(const Args& args, const std::string& path) {
  InputFileOptions options;
  options.npz_key = args.Get("labels-key").value_or("");
  absl::StatusOr<LabelColumn> labels = ReadLabelFile(path, options);
  if (!labels.ok() && absl::StrContains(labels.status().message(), "--key NAME")) {
    return absl::Status(labels.status().code(),
                        absl::StrReplaceAll(labels.status().message(),
                                            {{"--key NAME", "--labels-key NAME"}}));
  }
  return labels;
}

absl::StatusOr<std::vector<float>> ReadAllRows(MatrixFile& file) {
  std::vector<float> rows(static_cast<size_t>(file.rows() * file.cols()));
  DENDRO_RETURN_IF_ERROR(file.ReadRows(0, file.rows(), rows.data()));
  return rows;
}

// One name per line (a final newline and CRLF line ends allowed); a blank
// line is an error, since it would shift every later name.
absl::StatusOr<std::vector<std::string>> ReadNamesFile(const std::string& flag,
                                                      const std::string& path) {
  std::string text;
  if (absl::Status s = ReadFileToString(path, &text); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": ", s.message()));
  }
  std::vector<std::string> names = absl::StrSplit(text, '\n');
  if (!names.empty() && names.back().empty()) names.pop_back();
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i].empty() && names[i].back() == '\r') names[i].pop_back();
    if (names[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", path, ": line ", i + 1, " is empty (one name per line)"));
    }
  }
  if (names.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": no names"));
  }
  return names;
}

}  // namespace dendro::cli
