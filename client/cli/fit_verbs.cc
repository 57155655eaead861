// Verbs that move data: upload, the fit verbs (l2h, tneb, ghhc), tree, assign,
// eval, diff.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/cli.h"
#include "core/common/status_macros.h"
#include "core/diff/diff.h"
#include "core/diff/tanglegram.h"
#include "core/ghhc/choices.h"
#include "core/hierarchy/export.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "core/l2h/aggregation.h"
#include "core/metrics/metrics.h"
#include "nlohmann/json.hpp"

namespace dendro::cli {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// An upload progress callback drawing on `bar` (a no-op off a terminal).
client::UploadProgress UploadBar(ProgressBar* bar, const std::string& what) {
  if (!bar->active()) return nullptr;
  return [bar, what](int64_t sent, int64_t total) {
    bar->Update(total > 0 ? static_cast<double>(sent) / total : 1.0,
                absl::StrCat("uploading ", what, "  ", FormatBytes(sent), " / ",
                             FormatBytes(total)));
  };
}

bool ValidModelName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

nlohmann::ordered_json MetricsJson(const MetricsReport& r) {
  nlohmann::ordered_json j;
  j["level"] = r.level;
  j["nmi"] = r.nmi;
  j["ari"] = r.ari;
  j["acc"] = r.acc;
  j["leaf_purity"] = r.leaf_purity;
  j["dendrogram_purity"] = r.dendrogram_purity;
  j["lhd"] = r.lhd;
  return j;
}

absl::StatusOr<int32_t> LevelFlag(const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(int64_t level, args.GetInt("level", 0, 1, kMaxInt32));
  return static_cast<int32_t>(level);
}

// A t-NEB model's own account of its diagnosed cut, from the diag_* keys of
// its metadata (core/tneb/tneb.h, TnebDiagnostics); null when it has none.
nlohmann::ordered_json TnebDiagnosticsJson(const v1::Model& model) {
  const auto& md = model.metadata();
  auto text = [&](const char* key) -> std::string {
    const auto it = md.find(key);
    return it == md.end() ? std::string() : it->second;
  };
  int64_t k = 0;
  if (!absl::SimpleAtoi(text("diag_k"), &k)) return nullptr;
  nlohmann::ordered_json j;
  j["k"] = k;
  std::vector<int64_t> sizes;
  for (absl::string_view part :
       absl::StrSplit(text("diag_cluster_sizes"), ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (absl::SimpleAtoi(part, &v)) sizes.push_back(v);
  }
  j["cluster_sizes"] = sizes;
  double share = 0.0;
  if (absl::SimpleAtod(text("diag_largest_share"), &share)) j["largest_share"] = share;
  for (const char* key : {"filtered_small", "filtered_elongated"}) {
    int64_t v = 0;
    if (absl::SimpleAtoi(text(absl::StrCat("diag_", key).c_str()), &v)) j[key] = v;
  }
  nlohmann::ordered_json bics = nlohmann::ordered_json::object();
  for (absl::string_view pair :
       absl::StrSplit(text("diag_candidate_bic"), ',', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits(':', 1));
    double bic = 0.0;
    if (absl::SimpleAtod(kv.second, &bic)) bics[kv.first] = bic;
  }
  if (!bics.empty()) j["candidate_bic"] = bics;
  j["degenerate"] = text("diag_degenerate") == "true";
  if (j["degenerate"]) j["degenerate_reason"] = text("diag_degenerate_reason");
  return j;
}

}  // namespace

absl::Status RunUpload(Context& ctx, const Args& args) {
  const std::string path = args.positional()[0];
  const std::optional<std::string> labels = args.Get("labels");
  const std::string name =
      args.Get("name").value_or(std::filesystem::path(path).filename().string());
  const std::string prepare = args.Get("prepare").value_or("");
  if (!prepare.empty() && prepare != "l2h") {
    return UsageError(absl::StrCat("--prepare '", prepare, "': the one choice is l2h"));
  }
  const std::string append_to = args.Get("append").value_or("");
  if (!append_to.empty() && (args.Has("transient") || !prepare.empty())) {
    return UsageError("--append makes a durable generation: drop --transient and --prepare");
  }
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MatrixFile> file, OpenMatrix(args, path));
  LabelColumn y;
  if (labels.has_value()) {
    DENDRO_ASSIGN_OR_RETURN(y, ReadLabels(args, *labels));
  }
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  const auto start = std::chrono::steady_clock::now();
  ProgressBar bar;
  DENDRO_ASSIGN_OR_RETURN(
      v1::Dataset ds, SendFile(args, *client, *file, y.ids,
                               append_to.empty() ? name : args.Get("name").value_or(""),
                               UploadBar(&bar, path), args.Has("transient"), prepare, append_to));
  bar.Done();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << ds.id() << std::endl;
  const std::string what =
      append_to.empty()
          ? absl::StrFormat("uploaded %s (%s) as %s", path, file->description(), ds.id())
          : absl::StrFormat("appended %s (%s, %d rows) to %s as generation %d (%s:%d, id %s)", path,
                            file->description(), file->rows(), ds.lineage(), ds.generation(),
                            ds.lineage(), ds.generation(), ds.id());
  std::fprintf(stderr, "%s: %lld x %lld float32%s, %s in %.1f s\n", what.c_str(),
               static_cast<long long>(ds.rows()), static_cast<long long>(ds.cols()),
               ds.has_labels() ? " with labels" : "", FormatBytes(ds.size_bytes()).c_str(),
               seconds);
  if (!y.names.empty()) {
    std::fprintf(stderr,
                 "the %zu label strings were sent as 0..%zu in sorted order (%s = 0); to name a "
                 "classifier's classes after them, train with --class-names FILE (one per "
                 "line, in that order)\n",
                 y.names.size(), y.names.size() - 1, y.names[0].c_str());
  }
  return absl::OkStatus();
}

namespace {

// The common tail of every fit verb: checks the flags all of them share,
// uploads the file (transient unless --keep-dataset) or looks up the
// existing dataset, submits `spec`, waits with a progress bar (unless
// --no-wait), writes every --out, prints the model and, with --labels, the
// metrics at --level (default: the number of distinct labels). `spec` carries
// the method's parameters already.
absl::Status FitAndReport(Context& ctx, const Args& args, v1::JobSpec spec,
                          int64_t min_cols, const char* what, const char* file_arg) {
  std::optional<std::string> data_arg;
  if (!args.positional().empty()) data_arg = args.positional()[0];
  DENDRO_ASSIGN_OR_RETURN(FitInput input, FitInputFrom(args, data_arg, file_arg));
  const std::vector<std::string> outs = args.GetAll("out");
  const bool wait = !args.Has("no-wait");
  const std::optional<std::string> labels_path = args.Get("labels");

  // Everything that can be checked locally is checked before uploading.
  if (input.existing() && labels_path.has_value()) {
    return LabelsWithDataset(input, absl::StrCat("--labels ", *labels_path));
  }
  std::optional<std::string> model_name = args.Get("name");
  // A warm start continues its model's versions unless told otherwise.
  if (!model_name.has_value() && spec.has_warm_start()) model_name = spec.warm_start().name();
  if (model_name.has_value() && !ValidModelName(*model_name)) {
    return UsageError(absl::StrCat("--name '", *model_name,
                                   "': a model name is 1-128 letters, digits, '.', '_' or '-' "
                                   "and does not start with '.'"));
  }
  if (!input.existing() && !model_name.has_value()) {
    model_name = ModelNameFrom(std::filesystem::path(input.path).stem().string());
  }
  spec.set_allow_method_change(args.Has("allow-method-change"));
  DENDRO_ASSIGN_OR_RETURN(int32_t level, LevelFlag(args));
  if (level > 0 && !labels_path.has_value() && !spec.has_tneb()) {
    return UsageError("--level only applies with --labels (it sets the metrics' cut)");
  }
  if (wait) DENDRO_RETURN_IF_ERROR(CheckOutputs(outs));
  DENDRO_ASSIGN_OR_RETURN(const TreeOutputOptions tree_options, TreeOutputOptionsFrom(args));
  std::unique_ptr<MatrixFile> file;
  if (!input.existing()) {
    DENDRO_ASSIGN_OR_RETURN(file, OpenMatrix(args, input.path));
    if (file->cols() < min_cols) {
      return absl::InvalidArgumentError(absl::StrCat(input.path, ": ", what, " at least ",
                                                     min_cols, " columns, got ", file->cols()));
    }
  }
  std::vector<int64_t> labels;
  if (labels_path.has_value()) {
    DENDRO_ASSIGN_OR_RETURN(LabelColumn y, ReadLabels(args, *labels_path));
    labels = std::move(y.ids);
    if (file != nullptr && static_cast<int64_t>(labels.size()) != file->rows()) {
      return absl::InvalidArgumentError(absl::StrCat(*labels_path, " has ", labels.size(),
                                                     " labels but ", input.path, " has ",
                                                     file->rows(), " rows"));
    }
  }

  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  v1::Dataset ds;
  if (input.existing()) {
    DENDRO_ASSIGN_OR_RETURN(ds, GetExistingDataset(*client, input.dataset_id));
    if (ds.cols() < min_cols) {
      return absl::InvalidArgumentError(absl::StrCat("dataset ", ds.id(), ": ", what,
                                                     " at least ", min_cols, " columns, got ",
                                                     ds.cols()));
    }
    if (!model_name.has_value()) {
      model_name = ModelNameFrom(ds.display_name().empty() ? ds.id() : ds.display_name());
    }
  } else {
    ProgressBar bar;
    // The input only matters until the model exists: upload it as a
    // transient dataset unless asked to keep it.
    // L2H's first pass runs on the server while the logits arrive.
    DENDRO_ASSIGN_OR_RETURN(
        ds, SendFile(args, *client, *file, labels, *model_name, UploadBar(&bar, input.path),
                     !args.Has("keep-dataset"), spec.has_l2h() ? "l2h" : ""));
  }
  spec.set_model_name(*model_name);
  spec.set_dataset_id(ds.id());
  DENDRO_ASSIGN_OR_RETURN(v1::Job job,
                          SubmitFit(*client, spec, input.existing() ? nullptr : &ds));
  const bool json = args.Has("json");
  if (!wait) {
    if (json) {
      nlohmann::ordered_json j;
      j["job"] = job.id();
      j["dataset"] = ds.id();
      std::cout << j.dump() << std::endl;
    } else {
      std::cout << job.id() << std::endl;
    }
    if (!outs.empty()) {
      std::fprintf(stderr,
                   "--no-wait: --out files are not written; fetch them when the job is done "
                   "with 'dendro tree %s --out FILE'\n",
                   model_name->c_str());
    }
    return absl::OkStatus();
  }

  ProgressBar bar;
  DENDRO_ASSIGN_OR_RETURN(job, client->WatchJob(job.id(), [&](const v1::Job& j) {
    bar.Update(j.progress(), absl::StrCat(j.id(), "  ", JobStateName(j.state()),
                                          j.stage().empty() ? "" : "  ", j.stage()));
  }));
  bar.Done();
  if (job.state() != v1::JOB_STATE_SUCCEEDED) return JobNotSucceeded(job);

  v1::ModelRef ref;
  ref.set_name(job.model_name());
  ref.set_version(job.model_version());
  DENDRO_ASSIGN_OR_RETURN(v1::Model model, FetchTrees(*client, ref, outs, tree_options));
  nlohmann::ordered_json result;
  result["model"] = model.name();
  result["version"] = model.version();
  result["job"] = job.id();
  if (input.existing() || args.Has("keep-dataset")) result["dataset"] = ds.id();
  result["leaves"] = model.num_leaves();
  if (!json) std::cout << "model " << model.name() << " version " << model.version() << std::endl;
  if (model.method() == "tneb") {
    nlohmann::ordered_json diagnostics = TnebDiagnosticsJson(model);
    if (!diagnostics.is_null()) result["diagnostics"] = std::move(diagnostics);
    // A degenerate tree is said on stderr too, where a pipeline's log sees it.
    if (const auto it = model.metadata().find("warning"); it != model.metadata().end()) {
      std::cerr << "warning: " << it->second << std::endl;
    }
  }

  if (labels_path.has_value()) {
    DENDRO_ASSIGN_OR_RETURN(std::string tree_json,
                            client->GetTree(ref, v1::TREE_FORMAT_JSON, /*include_points=*/true));
    DENDRO_ASSIGN_OR_RETURN(Hierarchy tree, ParseJson(tree_json));
    DENDRO_ASSIGN_OR_RETURN(MetricsReport report,
                            EvaluateHierarchy(tree, tree.point_leaf(), labels, level));
    if (json) {
      result["metrics"] = MetricsJson(report);
    } else {
      std::cout << MetricsJson(report).dump() << std::endl;
    }
  }
  if (json) std::cout << result.dump() << std::endl;
  return absl::OkStatus();
}

// Optional integer flag in [lo, hi]; 0 (the proto's "default") if absent.
absl::StatusOr<int64_t> IntFlag(const Args& args, const char* name, int64_t lo, int64_t hi) {
  return args.GetInt(name, 0, lo, hi);
}

// --warm-start REF into spec.warm_start (l2h, tneb, ghhc).
absl::Status SetWarmStart(const Args& args, v1::JobSpec* spec) {
  if (std::optional<std::string> warm = args.Get("warm-start")) {
    absl::StatusOr<v1::ModelRef> ref = client::ParseModelRef(*warm);
    if (!ref.ok()) return UsageError(absl::StrCat("--warm-start: ", ref.status().message()));
    *spec->mutable_warm_start() = *ref;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunL2h(Context& ctx, const Args& args) {
  v1::JobSpec spec;
  if (std::optional<std::string> agg = args.Get("aggregation")) {
    if (!ParseL2hAggregation(*agg).ok()) {
      return UsageError(absl::StrCat(
          "--aggregation must be sum_of_means, mean_of_means or sum_of_sums, got '", *agg, "'"));
    }
    spec.mutable_l2h()->set_aggregation(*agg);
  } else {
    spec.mutable_l2h();
  }
  if (std::optional<std::string> path = args.Get("leaf-names")) {
    DENDRO_ASSIGN_OR_RETURN(std::vector<std::string> names, ReadNamesFile("--leaf-names", *path));
    for (std::string& n : names) spec.add_leaf_names(std::move(n));
  }
  DENDRO_RETURN_IF_ERROR(SetWarmStart(args, &spec));
  return FitAndReport(ctx, args, std::move(spec), 2, "l2h needs logits with", "LOGITS.npy");
}

absl::Status RunTneb(Context& ctx, const Args& args) {
  v1::JobSpec spec;
  v1::TnebParams* p = spec.mutable_tneb();
  DENDRO_ASSIGN_OR_RETURN(int64_t m, IntFlag(args, "components", 2, 100000));
  DENDRO_ASSIGN_OR_RETURN(int64_t restarts, IntFlag(args, "restarts", 1, 10000));
  DENDRO_ASSIGN_OR_RETURN(int64_t seed, IntFlag(args, "seed", 0, kMaxInt32));
  p->set_components(static_cast<int32_t>(m));
  p->set_restarts(static_cast<int32_t>(restarts));
  DENDRO_ASSIGN_OR_RETURN(int32_t level, LevelFlag(args));
  p->set_diagnose_k(level);  // 0: the auto k
  p->set_seed(static_cast<uint64_t>(seed));
  if (args.Has("standardize") && args.Has("no-standardize")) {
    return UsageError("--standardize and --no-standardize exclude each other");
  }
  p->set_standardize(args.Has("standardize"));
  if (args.Has("no-standardize")) p->set_standardize_mode("off");
  p->set_gaussian(args.Has("gaussian"));
  p->set_learn_dof(args.Has("learn-dof"));
  DENDRO_ASSIGN_OR_RETURN(int64_t neighbors, IntFlag(args, "neighbors", 1, 100000));
  p->set_neighbors(static_cast<int32_t>(neighbors));
  if (args.Get("dof") == std::optional<std::string>("auto")) {
    if (args.Has("learn-dof")) return UsageError("--dof auto and --learn-dof exclude each other");
    p->set_auto_dof(true);
  } else {
    DENDRO_ASSIGN_OR_RETURN(double dof, PositiveFlag(args, "dof"));
    p->set_dof(dof);
  }
  DENDRO_ASSIGN_OR_RETURN(double ridge, PositiveFlag(args, "ridge"));
  p->set_ridge(ridge);
  if (std::optional<std::string> merge = args.Get("merge")) {
    if (*merge != "density" && *merge != "persistence" && *merge != "graph") {
      return UsageError(
          absl::StrCat("--merge must be density, persistence or graph, got '", *merge, "'"));
    }
    p->set_merge(*merge);
  }
  if (std::optional<std::string> rank = args.Get("rank-restarts-by")) {
    if (*rank != "kept_log_likelihood" && *rank != "log_likelihood") {
      return UsageError(absl::StrCat(
          "--rank-restarts-by must be kept_log_likelihood or log_likelihood, got '", *rank, "'"));
    }
    p->set_rank_restarts_by(*rank);
  }
  DENDRO_RETURN_IF_ERROR(SetWarmStart(args, &spec));
  return FitAndReport(ctx, args, std::move(spec), 2, "t-NEB needs embeddings with",
                      "EMBEDDINGS.npy");
}

absl::Status RunGhhc(Context& ctx, const Args& args) {
  v1::JobSpec spec;
  v1::GhhcParams* p = spec.mutable_ghhc();
  DENDRO_ASSIGN_OR_RETURN(int64_t m, IntFlag(args, "internal-nodes", 2, 10000000));
  DENDRO_ASSIGN_OR_RETURN(int64_t triples, IntFlag(args, "triples", 1, int64_t{1} << 40));
  DENDRO_ASSIGN_OR_RETURN(int64_t seed, IntFlag(args, "seed", 0, kMaxInt32));
  DENDRO_ASSIGN_OR_RETURN(int64_t validation, IntFlag(args, "validation-triples", 0, 1000000));
  DENDRO_ASSIGN_OR_RETURN(double point_lr, PositiveFlag(args, "point-learning-rate"));
  DENDRO_ASSIGN_OR_RETURN(int64_t projection, IntFlag(args, "projection-dim", 1, kMaxInt32));
  DENDRO_ASSIGN_OR_RETURN(int64_t batch, IntFlag(args, "batch-size", 1, kMaxInt32));
  DENDRO_ASSIGN_OR_RETURN(int64_t k, IntFlag(args, "neighbors", 1, 100000));
  DENDRO_ASSIGN_OR_RETURN(int64_t margin_every, IntFlag(args, "margin-every", 1, kMaxInt32));
  DENDRO_ASSIGN_OR_RETURN(double lr, PositiveFlag(args, "learning-rate"));
  DENDRO_ASSIGN_OR_RETURN(double margin, PositiveFlag(args, "margin"));
  p->set_internal_nodes(static_cast<int32_t>(m));
  p->set_triples(triples);
  if (args.Has("seed")) p->set_seed(static_cast<uint64_t>(seed));  // 0 is a seed too
  if (args.Has("validation-triples")) {
    p->set_validation_triples(validation == 0 ? -1 : static_cast<int32_t>(validation));
  }
  p->set_learn_points(args.Has("learn-points"));
  p->set_constant_step_size(args.Has("constant-step-size"));
  if (std::optional<std::string> points = args.Get("points")) {
    const absl::Status parsed = ParseGhhcPoints(*points).status();
    if (!parsed.ok()) return UsageError(absl::StrCat("--", parsed.message()));
    p->set_points(*points);
  }
  if (std::optional<std::string> standardize = args.Get("standardize")) {
    const absl::Status parsed = ParseGhhcStandardize(*standardize).status();
    if (!parsed.ok()) return UsageError(absl::StrCat("--", parsed.message()));
    p->set_standardize(*standardize);
  }
  if (std::optional<std::string> tree = args.Get("tree")) {
    const absl::Status parsed = ParseGhhcTree(*tree).status();
    if (!parsed.ok()) return UsageError(absl::StrCat("--", parsed.message()));
    p->set_tree(*tree);
  }
  p->set_point_learning_rate(point_lr);
  if (args.Has("no-gumbel")) p->set_gumbel_temperature(-1);
  p->set_projection_dim(static_cast<int32_t>(projection));
  p->set_batch_size(static_cast<int32_t>(batch));
  p->set_neighbors(static_cast<int32_t>(k));
  p->set_margin_every(args.Has("no-margin") ? -1 : static_cast<int32_t>(margin_every));
  p->set_learning_rate(lr);
  p->set_margin(margin);
  p->set_no_center(args.Has("no-center"));
  if (std::optional<std::string> kind = args.Get("projection")) {
    const absl::Status parsed = ParseGhhcProjection(*kind).status();
    if (!parsed.ok()) return UsageError(absl::StrCat("--", parsed.message()));
    p->set_projection(*kind);
  }
  if (std::optional<std::string> link = args.Get("link")) {
    const absl::Status parsed = ParseGhhcLink(*link).status();
    if (!parsed.ok()) return UsageError(absl::StrCat("--", parsed.message()));
    p->set_link(*link);
  }
  DENDRO_RETURN_IF_ERROR(SetWarmStart(args, &spec));
  return FitAndReport(ctx, args, std::move(spec), 1, "gHHC needs embeddings with",
                      "EMBEDDINGS.npy");
}

absl::Status RunTree(Context& ctx, const Args& args) {
  absl::StatusOr<v1::ModelRef> ref = client::ParseModelRef(args.positional()[0]);
  if (!ref.ok()) return UsageError(std::string(ref.status().message()));
  const std::vector<std::string> outs = args.GetAll("out");
  if (outs.empty()) return UsageError("'tree' needs at least one --out FILE");
  DENDRO_RETURN_IF_ERROR(CheckOutputs(outs));
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  DENDRO_ASSIGN_OR_RETURN(TreeOutputOptions tree_options, TreeOutputOptionsFrom(args));
  DENDRO_ASSIGN_OR_RETURN(v1::Model model, FetchTrees(*client, *ref, outs, tree_options));
  std::cout << "model " << model.name() << " version " << model.version() << std::endl;
  return absl::OkStatus();
}

absl::Status RunAssign(Context& ctx, const Args& args) {
  const std::optional<std::string> model_flag = args.Get("model");
  if (!model_flag.has_value()) return UsageError("'assign' needs --model NAME[:VERSION]");
  absl::StatusOr<v1::ModelRef> ref = client::ParseModelRef(*model_flag);
  if (!ref.ok()) return UsageError(std::string(ref.status().message()));
  const std::optional<std::string> out = args.Get("out");
  if (!out.has_value()) return UsageError("'assign' needs --out A.npy");
  DENDRO_RETURN_IF_ERROR(CheckNpyOutput("assign", *out));
  DENDRO_ASSIGN_OR_RETURN(int32_t level, LevelFlag(args));

  const std::string path = args.positional()[0];
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MatrixFile> file, OpenMatrix(args, path));
  std::vector<float> converted;
  const float* data = file->Float32Rows(0, file->rows());
  if (data == nullptr) {
    DENDRO_ASSIGN_OR_RETURN(converted, ReadAllRows(*file));
    data = converted.data();
  }
  const MatrixView rows(data, file->rows(), file->cols());
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  const bool stable_ids = args.Has("stable-ids");
  absl::StatusOr<client::AssignResult> result = client->Assign(*ref, rows, level, stable_ids);
  if (!result.ok()) {
    // Local validation reports positions in the input; name the file.
    if (absl::StartsWith(result.status().message(), "assign input:")) {
      return absl::Status(result.status().code(),
                          absl::StrCat(path, result.status().message().substr(12)));
    }
    return result.status();
  }
  const int64_t shape[1] = {file->rows()};
  if (stable_ids) {
    DENDRO_RETURN_IF_ERROR(WriteNpy(*out, result->stable_cluster, shape));
  } else {
    DENDRO_RETURN_IF_ERROR(WriteNpy(*out, result->cluster, shape));
  }
  std::cout << "model " << ref->name() << " version " << result->model_version << std::endl;
  return absl::OkStatus();
}

namespace {

// The tree `eval` scores: a file by its extension (.json as 'dendro tree'
// writes it, .nwk/.newick, a SciPy linkage .npy), or a model reference,
// whose tree (with its training points' leaves) comes from the server.
absl::StatusOr<Hierarchy> TreeForEval(Context& ctx, const std::string& source) {
  std::error_code ec;
  if (!std::filesystem::exists(source, ec)) {
    absl::StatusOr<v1::ModelRef> ref = client::ParseModelRef(source);
    if (!ref.ok() || absl::StrContains(source, "/") || OutputKindFor(source).ok()) {
      return absl::NotFoundError(absl::StrCat(
          source, ": no such file, and not a model reference (NAME[:VERSION|@LABEL])"));
    }
    DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
    DENDRO_ASSIGN_OR_RETURN(std::string json,
                            client->GetTree(*ref, v1::TREE_FORMAT_JSON, /*include_points=*/true));
    return ParseJson(json);
  }
  absl::StatusOr<Hierarchy> tree;
  // The extensions 'dendro tree' writes; anything else is read as JSON.
  const OutputKind kind = OutputKindFor(source).value_or(OutputKind::kJson);
  if (kind == OutputKind::kLinkageNpy) {
    DENDRO_ASSIGN_OR_RETURN(NpyArrayF64 z, ReadNpyFloat64(source));
    if (z.shape.size() != 2 || z.shape[1] != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": a SciPy linkage matrix has 4 columns (shape (L-1, 4))"));
    }
    tree = FromLinkage(static_cast<int32_t>(z.shape[0] + 1), z.data);
  } else {
    std::string text;
    DENDRO_RETURN_IF_ERROR(ReadFileToString(source, &text));
    tree = kind == OutputKind::kNewick ? ParseNewick(text) : ParseJson(text);
  }
  if (!tree.ok()) {
    return absl::Status(tree.status().code(), absl::StrCat(source, ": ", tree.status().message()));
  }
  return tree;
}

}  // namespace

absl::Status RunEval(Context& ctx, const Args& args) {
  const std::string tree_path = args.positional()[0];
  const std::optional<std::string> labels_path = args.Get("labels");
  if (!labels_path.has_value()) return UsageError("'eval' needs --labels Y.npy");
  DENDRO_ASSIGN_OR_RETURN(int32_t level, LevelFlag(args));
  absl::StatusOr<Hierarchy> tree = TreeForEval(ctx, tree_path);
  if (!tree.ok()) return tree.status();
  DENDRO_ASSIGN_OR_RETURN(LabelColumn y, ReadLabels(args, *labels_path));
  const std::vector<int64_t>& labels = y.ids;

  std::vector<int32_t> leaves;
  if (std::optional<std::string> a = args.Get("assignments")) {
    InputFileOptions whole_file;
    DENDRO_ASSIGN_OR_RETURN(LabelColumn assigned, ReadLabelFile(*a, whole_file));
    if (!assigned.names.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(*a, ": assignments are leaf-cluster ids (integers), not strings"));
    }
    const std::vector<int64_t>& raw = assigned.ids;
    leaves.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] < 0 || raw[i] >= tree->num_leaves()) {
        return absl::InvalidArgumentError(absl::StrCat(
            *a, ": entry ", i, " is ", raw[i], ", not a leaf-cluster id of ", tree_path, " (0..",
            tree->num_leaves() - 1, ")"));
      }
      leaves.push_back(static_cast<int32_t>(raw[i]));
    }
  } else if (!tree->point_leaf().empty()) {
    leaves = tree->point_leaf();
  } else if (static_cast<int64_t>(labels.size()) == tree->num_leaves()) {
    // A tree over the points themselves (a SciPy linkage of the rows, or a
    // Newick with a leaf per row): point i is leaf i.
    leaves.resize(labels.size());
    std::iota(leaves.begin(), leaves.end(), 0);
  } else {
    return UsageError(absl::StrCat(tree_path, " has no point assignments and ",
                                   tree->num_leaves(), " leaves for ", labels.size(),
                                   " labels; pass --assignments A.npy"));
  }
  if (leaves.size() != labels.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        labels.size(), " labels in ", *labels_path, " but ", leaves.size(), " assignments in ",
        args.Get("assignments").value_or(tree_path)));
  }
  DENDRO_ASSIGN_OR_RETURN(MetricsReport report, EvaluateHierarchy(*tree, leaves, labels, level));
  std::cout << MetricsJson(report).dump() << std::endl;
  return absl::OkStatus();
}


namespace {

std::string Fixed(double x, int digits) {
  return std::isnan(x) ? std::string("undefined") : absl::StrFormat("%.*f", digits, x);
}

std::string DescribeParts(const ClusterEvent& e, const char* tree) {
  std::vector<std::string> parts;
  for (const ClusterEvent::Part& p : e.parts) {
    parts.push_back(absl::StrFormat("%s %d (%d)", tree, p.node, p.leaves));
  }
  return absl::StrJoin(parts, ", ");
}

// One line per event: what happened to which node, its size, an example.
std::string DescribeEvent(const ClusterEvent& e) {
  const bool in_a = e.a_node >= 0;
  std::string line = absl::StrFormat("  %-7s %s %d", ClusterEventName(e.type), in_a ? "A" : "B",
                                     in_a ? e.a_node : e.b_node);
  const int64_t points = in_a ? e.a_points : e.b_points;
  absl::StrAppend(&line, " (", e.leaves, " leaves",
                  points >= 0 ? absl::StrCat(", ", points, " points") : "", ")");
  switch (e.type) {
    case ClusterEvent::Type::kStayed:
    case ClusterEvent::Type::kMoved:
      absl::StrAppend(&line, " = B ", e.b_node);
      break;
    case ClusterEvent::Type::kSplit:
      absl::StrAppend(&line, " into ", DescribeParts(e, "B"));
      break;
    case ClusterEvent::Type::kMerged:
      absl::StrAppend(&line, " from ", DescribeParts(e, "A"));
      break;
    case ClusterEvent::Type::kGone:
    case ClusterEvent::Type::kNew:
      if (e.best_match >= 0) {
        absl::StrAppend(&line, absl::StrFormat(", closest %s %d (Jaccard %.2f)", in_a ? "B" : "A",
                                               e.best_match, e.best_jaccard));
      }
      break;
  }
  if (!e.example_leaves.empty()) {
    absl::StrAppend(&line, "; e.g. ", absl::StrJoin(e.example_leaves, ", "));
  }
  return line;
}

void PrintDiffSummary(const DiffReport& r) {
  constexpr size_t kBiggest = 5;
  std::vector<std::pair<std::string, std::string>> fields = {
      {"shared leaves", absl::StrFormat("%d (matched by %s; A has %d, B has %d)", r.shared_leaves,
                                        r.matching.by == LeafMatching::By::kName ? "name" : "id",
                                        r.a_leaves, r.b_leaves)},
      {"robinson-foulds",
       absl::StrFormat("%d, normalised %s (%d and %d clusters, %d shared)", r.rf,
                       Fixed(r.rf_normalized, 3), r.a_clusters, r.b_clusters, r.shared_clusters)},
      {"cophenetic corr.",
       absl::StrCat(Fixed(r.cophenetic_correlation, 4), " over ", r.cophenetic_pairs,
                    r.cophenetic_sampled ? " sampled pairs" : " pairs")},
      {"ARI over k",
       absl::StrCat("mean ", Fixed(r.ari_mean, 3), ", min ", Fixed(r.ari_min, 3), " (", r.ari_basis,
                    ", ", (r.has_point_ari ? r.ari_points : r.ari_leaves).levels.size(),
                    " levels)")},
      {"events", absl::StrFormat("stayed %d, moved %d, split %d, merged %d, new %d, gone %d",
                                 r.event_counts[0], r.event_counts[1], r.event_counts[2],
                                 r.event_counts[3], r.event_counts[4], r.event_counts[5])},
      {"crossings",
       absl::StrFormat("%d (before reduction: %d)", r.crossings_after, r.crossings_before)},
  };
  PrintFields(fields);
  std::vector<std::string> lines;
  for (size_t i : EventsBySize(r)) {
    if (lines.size() == kBiggest || r.events[i].type == ClusterEvent::Type::kStayed) break;
    lines.push_back(DescribeEvent(r.events[i]));
  }
  if (!lines.empty()) {
    std::cout << "largest changes:\n" << absl::StrJoin(lines, "\n") << "\n";
  }
  std::cout.flush();
}

}  // namespace

absl::Status RunDiff(Context& ctx, const Args& args) {
  const std::string a_source = args.positional()[0];
  const std::string b_source = args.positional()[1];
  const std::optional<std::string> out = args.Get("out");
  if (out.has_value()) {
    absl::StatusOr<OutputKind> kind = OutputKindFor(*out);
    if (!kind.ok() || *kind != OutputKind::kSvg) {
      return UsageError(
          absl::StrCat("'diff' --out writes a tanglegram: give a .svg file, not '", *out, "'"));
    }
    DENDRO_RETURN_IF_ERROR(CheckOutputs({*out}));
  }
  DENDRO_ASSIGN_OR_RETURN(Hierarchy a, TreeForEval(ctx, a_source));
  DENDRO_ASSIGN_OR_RETURN(Hierarchy b, TreeForEval(ctx, b_source));
  absl::StatusOr<DiffReport> report = DiffHierarchies(a, b);
  if (!report.ok()) {
    return absl::Status(report.status().code(),
                        absl::StrCat(a_source, " vs ", b_source, ": ", report.status().message()));
  }
  if (out.has_value()) {
    TanglegramOptions options;
    options.a_label = absl::StrCat("A: ", a_source);
    options.b_label = absl::StrCat("B: ", b_source);
    DENDRO_ASSIGN_OR_RETURN(std::string svg, DiffTanglegramSvg(a, b, *report, options));
    DENDRO_RETURN_IF_ERROR(WriteFileAtomic(*out, svg));
  }
  if (args.Has("json")) {
    std::cout << DiffReportJson(*report) << std::endl;
  } else {
    PrintDiffSummary(*report);
  }
  return absl::OkStatus();
}

}  // namespace dendro::cli
