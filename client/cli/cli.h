// Shared pieces of the `dendro` command-line tool: argument parsing, the
// per-invocation context, output helpers and the verb entry points.
//
// Conventions every verb follows: results go to stdout (machine-readable
// where it matters: ids, JSON), progress and summaries to stderr. A verb
// returns an absl::Status; main() prints a non-OK one as exactly one line
// "dendro: <message>" and exits 1, or 2 if it is a usage error (see
// UsageError()).
#ifndef DENDRO_CLIENT_CLI_CLI_H_
#define DENDRO_CLIENT_CLI_CLI_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
#include "core/hierarchy/svg.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"

namespace dendro::cli {

// --- Errors -------------------------------------------------------------------

// An InvalidArgument status marked as a usage error (exit code 2).
absl::Status UsageError(std::string_view message);
bool IsUsageError(const absl::Status& status);

// --- Arguments ----------------------------------------------------------------

struct FlagSpec {
  std::string name;          // without "--"
  bool takes_value = false;  // "--name VALUE" / "--name=VALUE"; else a switch
  bool repeated = false;     // may be given more than once
};

// Parsed arguments of one verb. Flags may appear anywhere among the
// positional arguments; "--" ends flag parsing.
class Args {
 public:
  // Unknown flags, a missing value, a repeated non-repeatable flag or a
  // positional count outside [min_positional, max_positional] are usage
  // errors naming `verb`.
  static absl::StatusOr<Args> Parse(std::string_view verb, const std::vector<std::string>& argv,
                                    const std::vector<FlagSpec>& flags, int min_positional,
                                    int max_positional);

  bool Has(const std::string& flag) const { return values_.count(flag) > 0; }
  // The value of a flag given once, if given.
  std::optional<std::string> Get(const std::string& flag) const;
  // All values of a (repeated) flag, in order.
  std::vector<std::string> GetAll(const std::string& flag) const;
  // An integer flag in [min, max]; `fallback` if absent. Out of range or not
  // a number is a usage error.
  absl::StatusOr<int64_t> GetInt(const std::string& flag, int64_t fallback, int64_t min,
                                 int64_t max) const;
  const std::vector<std::string>& positional() const { return positional_; }
  const std::string& verb() const { return verb_; }

 private:
  std::string verb_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// --- Per-invocation context ---------------------------------------------------

struct GlobalOptions {
  std::string server;
  double timeout_seconds = 60;
  bool tls = false;
  std::string tls_ca_file;  // implies tls
  std::string tls_cert_file, tls_key_file;  // client certificate (mutual TLS)
  std::string api_key;  // from DENDRO_API_KEY, never a flag value
  // --api-key-file: read (and checked) when the first call is made; its key
  // takes precedence over DENDRO_API_KEY.
  std::string api_key_file;
};

class Context {
 public:
  explicit Context(GlobalOptions options) : options_(std::move(options)) {}
  // Connects on first use, so verbs that never talk to the server (eval,
  // local validation failures) never need one.
  absl::StatusOr<client::Client*> client();
  const GlobalOptions& options() const { return options_; }

 private:
  GlobalOptions options_;
  std::unique_ptr<client::Client> client_;
};

// --- Output -------------------------------------------------------------------

bool StderrIsTerminal();

// A single self-redrawing progress line on stderr, drawn only when stderr is
// a terminal (otherwise every call is a no-op).
class ProgressBar {
 public:
  ProgressBar();
  ~ProgressBar();  // erases the line unless Done() was called
  // `fraction` in [0, 1]; `text` follows the bar. Redraws are rate-limited.
  void Update(double fraction, std::string_view text);
  // Leaves the last drawn state on screen and ends its line.
  void Done();
  bool active() const { return enabled_; }

 private:
  bool enabled_;
  bool drawn_ = false;
  std::string last_;
  std::chrono::steady_clock::time_point last_draw_;
};

// Left-aligned columns separated by two spaces, header first.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows);
// "key:  value" lines with the values aligned.
void PrintFields(const std::vector<std::pair<std::string, std::string>>& fields);
// Proto3 JSON (snake_case field names, defaults included), one line.
absl::Status PrintMessageJson(const google::protobuf::Message& message);

std::string FormatTime(const google::protobuf::Timestamp& ts);  // "" when unset
std::string FormatBytes(int64_t bytes);                          // "1.5 MiB"
std::string JobStateName(v1::JobState state);                    // "running"
std::string DescribeJob(const v1::Job& job);  // one line: id, state, progress, stage
// The error for a FAILED ("job ID failed: ...") or CANCELLED job; a refused
// method change names --allow-method-change (see WithMethodChangeHint).
absl::Status JobNotSucceeded(const v1::Job& job);

// --- Shared verb helpers ------------------------------------------------------

enum class OutputKind { kLinkageNpy, kNewick, kJson, kSvg };
// By extension (.npy, .nwk/.newick, .json, .svg; case-insensitive); else a
// usage error naming the file.
absl::StatusOr<OutputKind> OutputKindFor(const std::string& path);
// Checks every --out: known extension and an existing, writable directory.
absl::Status CheckOutputs(const std::vector<std::string>& outs);
// --out of a verb that writes one .npy array (assign, predict): a usage
// error naming the verb for any other name.
absl::Status CheckNpyOutput(const std::string& verb, const std::string& path);
// A data file named on the command line (.npy of any numeric dtype, .npz
// with --key, .csv/.tsv/.txt; see core/input/matrix_file.h).
absl::StatusOr<std::unique_ptr<MatrixFile>> OpenMatrix(const Args& args, const std::string& path);
// Stores `file` on the server: read there from its own disk (a same-host
// import) when --import (auto, on or off; see kImportHelp) allows it and the
// file is a float32 C-order .npy, else uploaded; `append_to` uploads.
absl::StatusOr<v1::Dataset> SendFile(const Args& args, client::Client& client, MatrixFile& file,
                                     absl::Span<const int64_t> labels,
                                     std::string_view display_name,
                                     const client::UploadProgress& progress, bool transient,
                                     std::string_view prepare = "",
                                     std::string_view append_to = "");
// Labels (numbers or strings; .npz with --labels-key), by ReadLabelFile.
absl::StatusOr<LabelColumn> ReadLabels(const Args& args, const std::string& path);
// Names, one per line (a final newline and CRLF line ends allowed; a blank
// line is an error, since it would shift every later name). `flag` names
// the option in messages ("--leaf-names").
absl::StatusOr<std::vector<std::string>> ReadNamesFile(const std::string& flag,
                                                      const std::string& path);
// Every row of `file` as row-major float32.
absl::StatusOr<std::vector<float>> ReadAllRows(MatrixFile& file);

// Optional positive, finite number flag --NAME; 0 (the proto's "use the
// default") when absent, a usage error when not a positive number.
absl::StatusOr<double> PositiveFlag(const Args& args, const char* name);

// What a fit verb trains on: a .npy file it uploads, or a dataset already on
// the server, named by a "ds-…" argument or --dataset ID.
struct FitInput {
  std::string path;        // the file to upload; empty for a dataset
  std::string dataset_id;  // the existing dataset; empty for a file
  bool existing() const { return !dataset_id.empty(); }
};
// A "ds-…" argument that is not an existing file names a dataset.
bool IsDatasetId(const std::string& arg);
// The input from the verb's data argument (nullopt when absent) and
// --dataset. Both, neither, or --keep-dataset with a dataset are usage
// errors; `file_arg` ("EMBEDDINGS.npy") names the argument in them.
absl::StatusOr<FitInput> FitInputFrom(const Args& args, const std::optional<std::string>& data_arg,
                                      std::string_view file_arg);
// The usage error for a labels file given with an existing dataset, whose
// labels are the ones uploaded with it. `given` names the argument.
absl::Status LabelsWithDataset(const FitInput& input, std::string_view given);
// The dataset `id`; NOT_FOUND reads "dataset 'ID' not found".
absl::StatusOr<v1::Dataset> GetExistingDataset(client::Client& client, const std::string& id);
// A model name from free text (a file stem, a dataset's display name): every
// character outside [A-Za-z0-9._-] becomes '_', a leading '.' too, at most
// 128 characters; "model" if empty.
std::string ModelNameFrom(std::string text);

// Submits `spec`. `upload` is the dataset the verb has just uploaded, or
// null when the job uses an existing dataset. If the server refuses the job
// and the upload was transient, the upload is deleted (best effort) so a
// rejected command leaves nothing behind; an existing dataset is never
// touched. A refused method change names --allow-method-change.
absl::StatusOr<v1::Job> SubmitFit(client::Client& client, const v1::JobSpec& spec,
                                  const v1::Dataset* upload);
// `status` unchanged, unless it is the server's refusal to register a
// different method under an existing name (FAILED_PRECONDITION naming the
// method) for a spec without allow_method_change: then it also names the
// flag that allows it.
absl::Status WithMethodChangeHint(const absl::Status& status, const v1::JobSpec& spec);
// How tree outputs are drawn: the method's own n-ary tree instead of its
// refinement (`unrefined`; refused for a .npy linkage), and for .svg the
// clusters to colour and the layout (see core/hierarchy/svg.h).
struct TreeOutputOptions {
  bool unrefined = false;
  int32_t color_level = 0;
  SvgOptions::Layout layout = SvgOptions::Layout::kAuto;
};
// From --unrefined, --color-level K and --layout auto|rectangular|radial.
absl::StatusOr<TreeOutputOptions> TreeOutputOptionsFrom(const Args& args);
// Fetches the tree in the format each output's extension asks for and writes
// the files atomically. Returns the model that was served.
absl::StatusOr<v1::Model> FetchTrees(client::Client& client, const v1::ModelRef& ref,
                                     const std::vector<std::string>& outs,
                                     const TreeOutputOptions& options = {});

// Each verb's entry point. `args` were parsed with the verb's flag specs.
absl::Status RunUpload(Context& ctx, const Args& args);
absl::Status RunL2h(Context& ctx, const Args& args);
absl::Status RunTneb(Context& ctx, const Args& args);
absl::Status RunGhhc(Context& ctx, const Args& args);
absl::Status RunHppcaTrain(Context& ctx, const Args& args);
absl::Status RunHppcaAdd(Context& ctx, const Args& args);
absl::Status RunPredict(Context& ctx, const Args& args);
absl::Status RunTree(Context& ctx, const Args& args);
absl::Status RunAssign(Context& ctx, const Args& args);
absl::Status RunEval(Context& ctx, const Args& args);
absl::Status RunDiff(Context& ctx, const Args& args);
absl::Status RunJobsList(Context& ctx, const Args& args);
absl::Status RunJobsGet(Context& ctx, const Args& args);
absl::Status RunJobsCancel(Context& ctx, const Args& args);
absl::Status RunJobsWatch(Context& ctx, const Args& args);
absl::Status RunModelsList(Context& ctx, const Args& args);
absl::Status RunModelsGet(Context& ctx, const Args& args);
absl::Status RunModelsDelete(Context& ctx, const Args& args);
absl::Status RunModelsLabel(Context& ctx, const Args& args);
absl::Status RunModelsUnlabel(Context& ctx, const Args& args);
absl::Status RunModelsRetain(Context& ctx, const Args& args);
absl::Status RunDatasetsList(Context& ctx, const Args& args);
absl::Status RunDatasetsGet(Context& ctx, const Args& args);
absl::Status RunDatasetsDelete(Context& ctx, const Args& args);
absl::Status RunJobsDelete(Context& ctx, const Args& args);
absl::Status RunKeysHash(Context& ctx, const Args& args);
absl::Status RunCertsNew(Context& ctx, const Args& args);
// Appends a keys-file line ("<sha256>|cn:<common name>  NAME  ROLE") to the
// keys file at `path` (created 0600 if missing; its permissions kept
// otherwise), atomically. Refuses a key or certificate name already listed
// and a name the file gives another role.
absl::Status AppendKeysLine(const std::string& path, const std::string& line);
absl::Status RunKeysNew(Context& ctx, const Args& args);
absl::Status RunHealth(Context& ctx, const Args& args);

}  // namespace dendro::cli

#endif  // DENDRO_CLIENT_CLI_CLI_H_
