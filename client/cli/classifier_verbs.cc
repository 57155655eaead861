// Verbs for classifier models: hppca train, hppca add, predict.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli.h"
#include "core/common/status_macros.h"
#include "core/hppca/choices.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "nlohmann/json.hpp"

namespace dendro::cli {
namespace {

// String labels for `hppca add`: the base model's classes keep their labels
// (matched by name), names it does not have get labels after its largest.
// Rewrites y.ids to those labels and returns the names by label.
absl::StatusOr<std::vector<std::string>> MapToBaseClasses(client::Client& client,
                                                          const v1::ModelRef& base,
                                                          LabelColumn& y) {
  DENDRO_ASSIGN_OR_RETURN(v1::GetClassesResponse classes, client.GetClasses(base));
  absl::flat_hash_map<std::string, int64_t> label_of;
  int64_t next = 0;
  for (int i = 0; i < classes.labels_size(); ++i) {
    if (i < classes.names_size()) label_of.emplace(classes.names(i), classes.labels(i));
    next = std::max(next, classes.labels(i) + 1);
  }
  std::vector<int64_t> label_of_id(y.names.size());
  for (size_t id = 0; id < y.names.size(); ++id) {
    auto [it, added] = label_of.emplace(y.names[id], next);
    if (added) ++next;
    label_of_id[id] = it->second;
  }
  constexpr int64_t kMaxNamedLabel = 1000000;
  if (next > kMaxNamedLabel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the base model's labels reach ", next - 1, "; string labels can extend models whose "
        "labels are below ", kMaxNamedLabel));
  }
  for (int64_t& id : y.ids) id = label_of_id[id];
  std::vector<std::string> names(static_cast<size_t>(next));
  for (int64_t v = 0; v < next; ++v) names[v] = absl::StrCat(v);
  for (const auto& [name, label] : label_of) names[label] = name;
  return names;
}

// Uploads features + labels (transient unless --keep-dataset) or looks up
// the existing dataset, submits `spec`, waits, and prints the registered
// model. `labels` is the labels file of an upload. Classes are named by
// --class-names (line v names label v) or by string labels.
absl::Status TrainAndReport(Context& ctx, const Args& args, const FitInput& input,
                            const std::optional<std::string>& labels, v1::JobSpec spec) {
  spec.set_allow_method_change(args.Has("allow-method-change"));
  std::unique_ptr<MatrixFile> file;
  LabelColumn y;
  if (!input.existing()) {
    DENDRO_ASSIGN_OR_RETURN(file, OpenMatrix(args, input.path));
    DENDRO_ASSIGN_OR_RETURN(y, ReadLabels(args, *labels));
    if (static_cast<int64_t>(y.ids.size()) != file->rows()) {
      return absl::InvalidArgumentError(absl::StrCat(*labels, " has ", y.ids.size(),
                                                     " labels but ", input.path, " has ",
                                                     file->rows(), " rows"));
    }
  }
  std::vector<std::string> names;
  if (std::optional<std::string> path = args.Get("class-names")) {
    if (!y.names.empty()) {
      return UsageError(absl::StrCat(*labels, " holds strings, which name the classes "
                                     "themselves; drop --class-names"));
    }
    DENDRO_ASSIGN_OR_RETURN(names, ReadNamesFile("--class-names", *path));
  }
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  if (!y.names.empty()) {
    if (spec.has_hppca_add()) {
      DENDRO_ASSIGN_OR_RETURN(names, MapToBaseClasses(*client, spec.hppca_add().base(), y));
    } else {
      names = y.names;
    }
  }
  for (std::string& n : names) spec.add_leaf_names(std::move(n));
  v1::Dataset ds;
  if (input.existing()) {
    DENDRO_ASSIGN_OR_RETURN(ds, GetExistingDataset(*client, input.dataset_id));
  } else {
    DENDRO_ASSIGN_OR_RETURN(ds, SendFile(args, *client, *file, y.ids, spec.model_name(), nullptr,
                                         !args.Has("keep-dataset")));
  }
  spec.set_dataset_id(ds.id());
  DENDRO_ASSIGN_OR_RETURN(v1::Job job,
                          SubmitFit(*client, spec, input.existing() ? nullptr : &ds));
  ProgressBar bar;
  DENDRO_ASSIGN_OR_RETURN(job, client->WatchJob(job.id(), [&](const v1::Job& j) {
    bar.Update(j.progress(), absl::StrCat(j.id(), "  ", JobStateName(j.state()),
                                          j.stage().empty() ? "" : "  ", j.stage()));
  }));
  bar.Done();
  if (job.state() != v1::JOB_STATE_SUCCEEDED) return JobNotSucceeded(job);
  if (args.Has("json")) {
    nlohmann::ordered_json j;
    j["model"] = job.model_name();
    j["version"] = job.model_version();
    j["job"] = job.id();
    if (input.existing() || args.Has("keep-dataset")) j["dataset"] = ds.id();
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << "model " << job.model_name() << " version " << job.model_version() << std::endl;
  }
  return absl::OkStatus();
}

// What a classifier verb trains on: FEATURES.npy with LABELS.npy, or a
// dataset id (or --dataset ID) whose labels were uploaded with it.
struct TrainingData {
  FitInput input;
  std::optional<std::string> labels;  // the labels file of an upload
};

absl::StatusOr<TrainingData> TrainingDataFrom(const Args& args,
                                              const std::vector<std::string>& data_args) {
  std::optional<std::string> first;
  if (!data_args.empty()) first = data_args[0];
  DENDRO_ASSIGN_OR_RETURN(FitInput input, FitInputFrom(args, first, "FEATURES.npy LABELS.npy"));
  if (input.existing()) {
    if (data_args.size() > 1) {
      return LabelsWithDataset(input, absl::StrCat("LABELS.npy '", data_args[1], "'"));
    }
    return TrainingData{std::move(input), std::nullopt};
  }
  if (data_args.size() < 2) {
    return UsageError(absl::StrCat("'", args.verb(), "' needs LABELS.npy after ", input.path,
                                   " (or a dataset id uploaded with labels; see 'dendro ",
                                   args.verb(), " --help')"));
  }
  return TrainingData{std::move(input), data_args[1]};
}

// Rows to predict, as float32: the file's own pages when it holds exactly
// that, else a converted copy.
struct Features {
  std::unique_ptr<MatrixFile> file;
  std::vector<float> converted;
  const float* data = nullptr;
  int64_t rows = 0, cols = 0;
};

absl::StatusOr<Features> ReadFeatures(const Args& args, const std::string& path) {
  Features f;
  DENDRO_ASSIGN_OR_RETURN(f.file, OpenMatrix(args, path));
  f.rows = f.file->rows();
  f.cols = f.file->cols();
  f.data = f.file->Float32Rows(0, f.rows);
  if (f.data == nullptr) {
    DENDRO_ASSIGN_OR_RETURN(f.converted, ReadAllRows(*f.file));
    f.data = f.converted.data();
  }
  return f;
}

// Writes predictions by --out's extension: .npy the labels (rows, or rows x
// top-k), .txt/.csv the class names, one row per line (top-k separated by
// commas).
absl::Status WritePredictions(const std::string& out, const client::PredictResult& pred,
                              int64_t rows, const v1::GetClassesResponse* classes) {
  if (classes == nullptr) {
    std::vector<int64_t> shape = {rows};
    if (pred.top_k > 1) shape.push_back(pred.top_k);
    return WriteNpy(out, absl::MakeConstSpan(pred.labels), shape);
  }
  absl::flat_hash_map<int64_t, std::string> name_of;
  for (int i = 0; i < classes->labels_size() && i < classes->names_size(); ++i) {
    name_of.emplace(classes->labels(i), classes->names(i));
  }
  std::string text;
  for (int64_t i = 0; i < rows; ++i) {
    for (int32_t j = 0; j < pred.top_k; ++j) {
      const int64_t label = pred.labels[i * pred.top_k + j];
      auto it = name_of.find(label);
      absl::StrAppend(&text, j > 0 ? "," : "", it != name_of.end() ? it->second
                                                                     : absl::StrCat(label));
    }
    text.push_back('\n');
  }
  return WriteFileAtomic(out, text);
}

}  // namespace

absl::Status RunHppcaTrain(Context& ctx, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(TrainingData data, TrainingDataFrom(args, args.positional()));
  const std::optional<std::string> name = args.Get("name");
  if (!name.has_value()) return UsageError("'hppca train' needs --name NAME");
  v1::JobSpec spec;
  spec.set_model_name(*name);
  v1::HppcaTrainParams* p = spec.mutable_hppca();
  DENDRO_ASSIGN_OR_RETURN(int64_t s, args.GetInt("superclasses", 0, -1, 1000000));
  DENDRO_ASSIGN_OR_RETURN(int64_t q, args.GetInt("q", 0, 0, 100000));
  DENDRO_ASSIGN_OR_RETURN(int64_t r, args.GetInt("r", 0, 0, 100000));
  DENDRO_ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed", 0, 0, 1 << 30));
  p->set_superclasses(static_cast<int32_t>(s));
  p->set_q(static_cast<int32_t>(q));
  p->set_r(static_cast<int32_t>(r));
  p->set_seed(static_cast<uint64_t>(seed));
  DENDRO_ASSIGN_OR_RETURN(int64_t top_t, args.GetInt("top-t", 0, 1, 1000000));
  p->set_default_top_t(static_cast<int32_t>(top_t));
  DENDRO_ASSIGN_OR_RETURN(int64_t seeding_rank, args.GetInt("seeding-rank", 0, -1, 100000));
  p->set_seeding_rank(static_cast<int32_t>(seeding_rank));
  DENDRO_ASSIGN_OR_RETURN(double lambda, PositiveFlag(args, "lambda"));
  p->set_lambda(lambda);
  p->set_log_det_score(args.Has("log-det"));
  p->set_raw_data_clustering(args.Has("raw-data"));
  if (args.Has("flat")) p->set_superclasses(-1);
  if (std::optional<std::string> scoring = args.Get("scoring")) {
    if (absl::Status s = ParseHppcaScoring(*scoring).status(); !s.ok()) {
      return UsageError(absl::StrCat("--", s.message()));
    }
    p->set_scoring(*scoring);
  }
  return TrainAndReport(ctx, args, data.input, data.labels, std::move(spec));
}

absl::Status RunHppcaAdd(Context& ctx, const Args& args) {
  absl::StatusOr<v1::ModelRef> base = client::ParseModelRef(args.positional()[0]);
  if (!base.ok()) return UsageError(std::string(base.status().message()));
  const std::vector<std::string> data_args(args.positional().begin() + 1,
                                           args.positional().end());
  DENDRO_ASSIGN_OR_RETURN(TrainingData data, TrainingDataFrom(args, data_args));
  v1::JobSpec spec;
  spec.set_model_name(base->name());
  *spec.mutable_hppca_add()->mutable_base() = *base;
  spec.mutable_hppca_add()->set_recluster(args.Has("recluster"));
  return TrainAndReport(ctx, args, data.input, data.labels, std::move(spec));
}

absl::Status RunPredict(Context& ctx, const Args& args) {
  const std::optional<std::string> model_flag = args.Get("model");
  if (!model_flag.has_value()) return UsageError("'predict' needs --model NAME[:VERSION]");
  absl::StatusOr<v1::ModelRef> ref = client::ParseModelRef(*model_flag);
  if (!ref.ok()) return UsageError(std::string(ref.status().message()));
  const std::optional<std::string> out = args.Get("out");
  if (!out.has_value()) return UsageError("'predict' needs --out PRED.npy (or PRED.txt)");
  const std::string out_ext =
      absl::AsciiStrToLower(std::filesystem::path(*out).extension().string());
  const bool names_out = out_ext == ".txt" || out_ext == ".csv";
  if (!names_out && !CheckNpyOutput("predict", *out).ok()) {
    return UsageError(absl::StrCat("--out ", *out, ": 'predict' writes labels to a .npy file or "
                                   "class names to a .txt or .csv file"));
  }
  client::PredictOptions options;
  DENDRO_ASSIGN_OR_RETURN(int64_t t, args.GetInt("top-t", 0, 0, 1000000));
  DENDRO_ASSIGN_OR_RETURN(int64_t k, args.GetInt("top-k", 1, 1, 1000000));
  options.top_t = static_cast<int32_t>(t);
  options.top_k = static_cast<int32_t>(k);
  options.flat = args.Has("flat");

  const std::string path = args.positional()[0];
  DENDRO_ASSIGN_OR_RETURN(Features f, ReadFeatures(args, path));
  LabelColumn truth_column;
  if (std::optional<std::string> y = args.Get("labels")) {
    DENDRO_ASSIGN_OR_RETURN(truth_column, ReadLabels(args, *y));
    if (static_cast<int64_t>(truth_column.ids.size()) != f.rows) {
      return absl::InvalidArgumentError(absl::StrCat(*y, " has ", truth_column.ids.size(),
                                                     " labels but ", path, " has ", f.rows,
                                                     " rows"));
    }
  }
  std::vector<int64_t>& truth = truth_column.ids;
  DENDRO_ASSIGN_OR_RETURN(client::Client * client, ctx.client());
  // Class names, when the output or the labels are names.
  const MatrixView rows(f.data, f.rows, f.cols);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<client::PredictResult> predicted = client->Predict(*ref, rows, options);
  if (absl::IsFailedPrecondition(predicted.status()) &&
      absl::StrContains(predicted.status().message(), "not a classifier")) {
    // The server names the RPCs; here the verbs.
    return absl::FailedPreconditionError(
        absl::StrCat("model '", *model_flag,
                     "' is a clustering, not a classifier: 'dendro assign' places rows in its "
                     "clusters"));
  }
  DENDRO_ASSIGN_OR_RETURN(client::PredictResult pred, std::move(predicted));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The class table of the version that answered, once: for names (of the
  // output or of the labels) and for the super-class report.
  const bool superclass_report = !truth.empty() && !options.flat && pred.top_t > 0;
  std::optional<v1::GetClassesResponse> classes;
  if (names_out || !truth_column.names.empty() || superclass_report) {
    v1::ModelRef pinned = *ref;
    client::PinVersion(&pinned, pred.model_version);
    absl::StatusOr<v1::GetClassesResponse> c = client->GetClasses(pinned);
    if (absl::IsFailedPrecondition(c.status())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", *model_flag, "' has no classes to name: ", c.status().message()));
    }
    DENDRO_RETURN_IF_ERROR(c.status());
    classes = *std::move(c);
  }
  if (!truth_column.names.empty()) {
    // String labels are class names: compare them by the model's labels; a
    // name the model does not know never matches.
    absl::flat_hash_map<std::string, int64_t> label_of;
    for (int i = 0; i < classes->labels_size() && i < classes->names_size(); ++i) {
      label_of.emplace(classes->names(i), classes->labels(i));
    }
    for (int64_t& id : truth) {
      auto it = label_of.find(truth_column.names[id]);
      id = it != label_of.end() ? it->second : std::numeric_limits<int64_t>::min();
    }
  }
  DENDRO_RETURN_IF_ERROR(
      WritePredictions(*out, pred, f.rows, names_out ? &*classes : nullptr));
  std::cout << "model " << ref->name() << " version " << pred.model_version << std::endl;
  if (truth.empty()) return absl::OkStatus();

  // Accuracy of the best class; then the same rows flat, for the measured
  // and the operation-count speed-up.
  int64_t correct = 0;
  double evaluated = 0;
  for (int64_t i = 0; i < f.rows; ++i) {
    correct += pred.labels[i * pred.top_k] == truth[i];
    evaluated += pred.classes_evaluated[i];
  }
  nlohmann::ordered_json report;
  report["rows"] = f.rows;
  report["accuracy"] = static_cast<double>(correct) / f.rows;
  report["top_t"] = pred.top_t;
  report["classes_evaluated_per_row"] = evaluated / f.rows;
  report["seconds"] = seconds;
  if (superclass_report) {
    // Super-class accuracy: the true class's super-class is among the T
    // opened (and, separately, is the first one).
    absl::flat_hash_map<int64_t, int32_t> super_of;
    for (int i = 0; i < classes->labels_size(); ++i) {
      super_of[classes->labels(i)] = classes->superclasses(i);
    }
    int64_t known = 0, in_top_t = 0, first = 0;
    for (int64_t i = 0; i < f.rows; ++i) {
      auto it = super_of.find(truth[i]);
      if (it == super_of.end()) continue;
      ++known;
      const int32_t* opened = pred.superclasses.data() + i * pred.top_t;
      first += opened[0] == it->second;
      in_top_t += std::find(opened, opened + pred.top_t, it->second) != opened + pred.top_t;
    }
    report["superclass_accuracy"] = known > 0 ? static_cast<double>(in_top_t) / known : 0.0;
    report["superclass_top1_accuracy"] = known > 0 ? static_cast<double>(first) / known : 0.0;
    if (known < f.rows) report["rows_with_unknown_label"] = f.rows - known;
  }
  if (!options.flat) {
    client::PredictOptions flat = options;
    flat.flat = true;
    const auto flat_start = std::chrono::steady_clock::now();
    DENDRO_ASSIGN_OR_RETURN(client::PredictResult fp, client->Predict(*ref, rows, flat));
    const double flat_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - flat_start).count();
    int64_t flat_correct = 0;
    double flat_evaluated = 0;
    for (int64_t i = 0; i < f.rows; ++i) {
      flat_correct += fp.labels[i * fp.top_k] == truth[i];
      flat_evaluated += fp.classes_evaluated[i];
    }
    report["flat_accuracy"] = static_cast<double>(flat_correct) / f.rows;
    report["flat_seconds"] = flat_seconds;
    report["measured_speedup"] = seconds > 0 ? flat_seconds / seconds : 0.0;
    report["class_evaluation_ratio"] = evaluated > 0 ? flat_evaluated / evaluated : 0.0;
  }
  std::cout << report.dump() << std::endl;
  return absl::OkStatus();
}

}  // namespace dendro::cli
