#include "server/transport/http_json.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/status_macros.h"
#include "core/hierarchy/export.h"
#include "core/hierarchy/svg.h"
#include "core/io/npy.h"
#include "core/matrix/matrix.h"
#include "dendro/version.h"
#include "nlohmann/json.hpp"

namespace dendro::server {
namespace {

using nlohmann::json;

// The proto's JSON mapping, with every field present (a job at progress 0
// still has "progress": 0).
absl::StatusOr<HttpBody> ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  HttpBody body;
  auto s = google::protobuf::util::MessageToJsonString(message, &body.content, options);
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat("cannot write JSON: ", s.ToString()));
  }
  return body;
}

HttpBody JsonBody(const json& value) {
  HttpBody body;
  body.content = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return body;
}

const std::string* FindParam(const QueryParams& query, const std::string& name) {
  auto it = query.find(name);
  return it == query.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> IntParam(const QueryParams& query, const std::string& name,
                                 int64_t fallback) {
  const std::string* v = FindParam(query, name);
  if (v == nullptr || v->empty()) return fallback;
  int64_t out = 0;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter ", name, " must be an integer, got '",
                     absl::CHexEscape(v->substr(0, 64)), "'"));
  }
  return out;
}

absl::StatusOr<bool> BoolParam(const QueryParams& query, const std::string& name) {
  const std::string* v = FindParam(query, name);
  if (v == nullptr) return false;
  const std::string lower = absl::AsciiStrToLower(*v);
  if (lower.empty() || lower == "1" || lower == "true") return true;
  if (lower == "0" || lower == "false") return false;
  return absl::InvalidArgumentError(absl::StrCat("query parameter ", name,
                                                 " must be true or false, got '",
                                                 absl::CHexEscape(v->substr(0, 64)), "'"));
}

// A listing request's paging fields from the query (the request layer
// checks them).
template <typename Req>
absl::StatusOr<Req> PageRequest(const QueryParams& query) {
  DENDRO_ASSIGN_OR_RETURN(int64_t size, IntParam(query, "page_size", 0));
  Req req;
  req.set_page_size(static_cast<int32_t>(
      std::clamp<int64_t>(size, std::numeric_limits<int32_t>::min(),
                          std::numeric_limits<int32_t>::max())));
  if (const std::string* token = FindParam(query, "page_token"); token != nullptr) {
    req.set_page_token(*token);
  }
  return req;
}

// The answer sizes of the JSON encoding, in characters with commas. Assign:
// two numbers of at most 11 characters per row, and two of at most 20 with
// stable ids. Predict: per label up to 20
// characters and a score up to 16, per super-class up to 11, and a count
// per row.
constexpr AssignCost kAssignCost{/*per_row=*/24, /*per_row_stable_ids=*/42};
constexpr AnswerCost kPredictCost{/*per_row=*/12, /*per_label=*/38, /*per_superclass=*/12};
constexpr CallWording kInferWording{"infer", "inputs[0]: ", "parameters."};

// ---------------------------------------------------------------------------
// Inference requests.

enum class Op { kUnset, kAssign, kPredict };

struct InferRequest {
  json id;  // echoed when present
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;
  Op op = Op::kUnset;
  int64_t level = 0;
  int64_t top_k = 0;
  int64_t top_t = 0;
  bool flat = false;
  bool stable_ids = false;
};

absl::StatusOr<int64_t> JsonInt(const json& parent, const char* key, const std::string& where) {
  auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return 0;
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(where, key, " must be an integer"));
  }
  return it->get<int64_t>();
}

// Values outside inputs[0].data that one request may hold ("id",
// "parameters", the tensor's name, shape and datatype): a few dozen in
// practice. Their tree is built; the data array's numbers are not.
constexpr int64_t kMaxOtherValues = 4096;

// Reads an inference request in one pass, without a JSON tree of the data:
// the numbers of inputs[0].data go straight into a float vector, and
// everything else (a handful of values) into a small tree. The declared
// shape is checked against the request limit as soon as it is read, so a
// request whose shape comes before its data (the usual order) is refused
// before any of its numbers are kept; data arriving before its shape is
// bounded by the same limit as it is read.
class InferSax : public json::json_sax_t {
 public:
  InferSax(int64_t max_message_bytes, size_t body_bytes)
      : max_floats_(std::max<int64_t>(1, max_message_bytes / 4)),
        max_message_bytes_(max_message_bytes),
        body_bytes_(body_bytes) {}

  const absl::Status& status() const { return status_; }
  json& root() { return root_; }
  std::vector<float>& data() { return data_; }
  bool saw_data() const { return saw_data_; }
  int64_t data_entries() const { return data_entries_; }

  // Checks inputs[0].shape, [rows, cols], against the limits.
  absl::Status CheckShape(const json& shape) {
    if (!shape.is_array() || shape.size() != 2 || !shape[0].is_number_integer() ||
        !shape[1].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[0].shape must be [rows, cols], got ", shape.dump().substr(0, 80)));
    }
    const int64_t rows = shape[0].get<int64_t>();
    const int64_t cols = shape[1].get<int64_t>();
    if (rows < 1 || cols < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[0].shape must be positive, got [", rows, ", ", cols, "]"));
    }
    if (rows > max_floats_ / cols) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "inputs[0].shape [", rows, ", ", cols, "] is ", rows, " x ", cols,
          " float32 values, over the ", max_message_bytes_ >> 20,
          " MiB request limit (--max_message_mb); send at most ",
          std::max<int64_t>(1, max_floats_ / cols), " rows of ", cols, " columns at a time"));
    }
    // Each number takes at least two bytes ("0,"): the body cannot hold more.
    if (rows * cols > static_cast<int64_t>(body_bytes_ / 2) + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[0].shape [", rows, ", ", cols, "] needs ", rows * cols, " numbers; a body of ",
          body_bytes_, " bytes cannot hold them"));
    }
    if (!saw_data_) data_.reserve(static_cast<size_t>(rows * cols));
    return absl::OkStatus();
  }

  bool null() override { return Value(json(nullptr)); }
  bool boolean(bool v) override { return Value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (data_depth_ > 0) return Number(static_cast<double>(v), nullptr);
    return Value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (data_depth_ > 0) return Number(static_cast<double>(v), nullptr);
    return Value(json(v));
  }
  bool number_float(number_float_t v, const string_t& text) override {
    if (data_depth_ > 0) return Number(v, &text);
    return Value(json(v));
  }
  bool string(string_t& v) override { return Value(json(std::move(v))); }
  bool binary(binary_t& /*v*/) override { return Value(json(nullptr)); }
  bool start_object(std::size_t /*elements*/) override {
    if (data_depth_ > 0) return NotANumber();
    bool first_input = false;
    if (InInputs()) {
      if (!stack_.back()->empty()) return TooManyInputs();
      first_input = true;
    }
    if (!Add(json::object())) return false;
    stack_.push_back(last_);
    if (first_input) input0_ = last_;
    return true;
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) override {
    if (data_depth_ == 1) {  // a row of the data
      data_depth_ = 2;
      ++data_entries_;
      col_ = 0;
      return true;
    }
    if (data_depth_ == 2) return NotANumber();
    const bool at_input0 = input0_ != nullptr && !stack_.empty() && stack_.back() == input0_;
    if (at_input0 && key_ == "data") {
      if (saw_data_) {
        status_ = absl::InvalidArgumentError("inputs[0].data is given twice");
        return false;
      }
      saw_data_ = true;
      data_depth_ = 1;
      return true;
    }
    if (InInputs()) return TooManyInputs();
    const bool is_inputs = stack_.size() == 1 && key_ == "inputs";
    const bool is_shape = at_input0 && key_ == "shape";
    if (!Add(json::array())) return false;
    stack_.push_back(last_);
    if (is_inputs) inputs_ = last_;
    if (is_shape) shape_ = last_;
    return true;
  }
  bool end_array() override {
    if (data_depth_ > 0) {
      --data_depth_;
      return true;
    }
    json* done = stack_.back();
    stack_.pop_back();
    if (done == shape_) {
      status_ = CheckShape(*done);
      return status_.ok();
    }
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& /*ex*/) override {
    if (status_.ok()) status_ = absl::InvalidArgumentError("the request body is not valid JSON");
    return false;
  }

 private:
  // The top-level "inputs" array is the innermost open container.
  bool InInputs() const { return inputs_ != nullptr && !stack_.empty() && stack_.back() == inputs_; }
  bool TooManyInputs() {
    status_ = absl::InvalidArgumentError(
        "\"inputs\" must be an array of exactly one tensor {name, shape, datatype, data}");
    return false;
  }
  std::string Where() const {
    return data_depth_ == 2
               ? absl::StrCat("inputs[0].data[", data_entries_ - 1, "][", col_, "]")
               : absl::StrCat("inputs[0].data[", data_entries_, "]");
  }
  bool NotANumber() {
    status_ = absl::InvalidArgumentError(absl::StrCat(Where(), " is not a number"));
    return false;
  }
  bool Number(double v, const string_t* text) {
    const float f = static_cast<float>(v);
    if (!std::isfinite(f)) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          Where(), " = ", text != nullptr ? *text : json(v).dump(), " is not a finite float32"));
      return false;
    }
    if (static_cast<int64_t>(data_.size()) >= max_floats_) {
      status_ = absl::ResourceExhaustedError(absl::StrCat(
          "inputs[0].data holds more than ", max_floats_, " numbers, over the ",
          max_message_bytes_ >> 20, " MiB request limit (--max_message_mb)"));
      return false;
    }
    data_.push_back(f);
    if (data_depth_ == 1) {
      ++data_entries_;
    } else {
      ++col_;
    }
    return true;
  }
  // A scalar outside the data.
  bool Value(json v) {
    if (data_depth_ > 0) return NotANumber();
    if (InInputs()) return TooManyInputs();
    return Add(std::move(v));
  }
  // Adds `v` to the innermost open container (or makes it the root).
  bool Add(json v) {
    if (++other_values_ > kMaxOtherValues) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "the request holds more than ", kMaxOtherValues, " JSON values outside inputs[0].data"));
      return false;
    }
    if (stack_.empty()) {
      root_ = std::move(v);
      last_ = &root_;
      return true;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      // Only the innermost container grows, so the pointers to its open
      // ancestors stay valid.
      parent.push_back(std::move(v));
      last_ = &parent.back();
    } else {
      json& slot = parent[key_];
      slot = std::move(v);
      last_ = &slot;
    }
    return true;
  }

  const int64_t max_floats_;
  const int64_t max_message_bytes_;
  const size_t body_bytes_;
  absl::Status status_;
  json root_;
  json* last_ = nullptr;
  std::vector<json*> stack_;  // the open containers, outermost first
  json* inputs_ = nullptr;    // the top-level "inputs" array
  json* input0_ = nullptr;    // inputs[0]
  json* shape_ = nullptr;     // inputs[0].shape
  std::string key_;
  int64_t other_values_ = 0;
  // 0 outside inputs[0].data, 1 in it, 2 in one of its rows.
  int data_depth_ = 0;
  int64_t data_entries_ = 0;  // entries of the data array so far
  int64_t col_ = 0;           // numbers in the current row so far
  bool saw_data_ = false;
  std::vector<float> data_;
};

absl::StatusOr<InferRequest> ParseInfer(std::string_view body, int64_t max_message_bytes) {
  InferSax sax(max_message_bytes, body.size());
  const bool parsed = json::sax_parse(body.begin(), body.end(), &sax);
  if (!sax.status().ok()) return sax.status();
  if (!parsed) return absl::InvalidArgumentError("the request body is not valid JSON");
  json& doc = sax.root();
  if (!doc.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object with \"inputs\"");
  }
  InferRequest req;
  if (auto it = doc.find("id"); it != doc.end()) req.id = *it;
  auto inputs = doc.find("inputs");
  if (inputs == doc.end() || !inputs->is_array() || inputs->size() != 1) {
    return absl::InvalidArgumentError(
        "\"inputs\" must be an array of exactly one tensor {name, shape, datatype, data}");
  }
  const json& in = (*inputs)[0];
  if (!in.is_object()) return absl::InvalidArgumentError("inputs[0] must be an object");
  if (auto dt = in.find("datatype"); dt != in.end()) {
    if (!dt->is_string() || (*dt != "FP32" && *dt != "FP64")) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[0].datatype must be \"FP32\" (or \"FP64\", read as float32), got ",
                       dt->dump()));
    }
  }
  auto shape = in.find("shape");
  if (shape == in.end()) {
    return absl::InvalidArgumentError("inputs[0].shape must be [rows, cols], got nothing");
  }
  DENDRO_RETURN_IF_ERROR(sax.CheckShape(*shape));
  req.rows = (*shape)[0].get<int64_t>();
  req.cols = (*shape)[1].get<int64_t>();
  if (!sax.saw_data()) {
    return absl::InvalidArgumentError(
        "inputs[0].data must be an array of numbers (flat, row-major, or one array per row)");
  }
  // CheckShape bounds rows x cols.
  if (sax.data_entries() != req.rows && sax.data_entries() != req.rows * req.cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs[0].data has ", sax.data_entries(), " entries; shape [", req.rows, ", ", req.cols,
        "] needs ", req.rows, " rows or ", req.rows, " x ", req.cols, " numbers"));
  }
  req.data = std::move(sax.data());
  if (static_cast<int64_t>(req.data.size()) != req.rows * req.cols) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[0].data holds ", req.data.size(),
                                                   " numbers; shape [", req.rows, ", ",
                                                   req.cols, "] needs ", req.rows * req.cols));
  }
  auto params = doc.find("parameters");
  if (params != doc.end() && !params->is_null()) {
    if (!params->is_object()) return absl::InvalidArgumentError("parameters must be an object");
    if (auto op = params->find("op"); op != params->end()) {
      if (*op == "assign") {
        req.op = Op::kAssign;
      } else if (*op == "predict") {
        req.op = Op::kPredict;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameters.op must be \"assign\" or \"predict\", got ", op->dump().substr(0, 80)));
      }
    }
    DENDRO_ASSIGN_OR_RETURN(req.level, JsonInt(*params, "level", "parameters."));
    DENDRO_ASSIGN_OR_RETURN(req.top_k, JsonInt(*params, "top_k", "parameters."));
    DENDRO_ASSIGN_OR_RETURN(req.top_t, JsonInt(*params, "top_t", "parameters."));
    for (auto [key, field] : {std::pair{"flat", &req.flat}, {"stable_ids", &req.stable_ids}}) {
      if (auto it = params->find(key); it != params->end()) {
        if (!it->is_boolean()) {
          return absl::InvalidArgumentError(
              absl::StrCat("parameters.", key, " must be true or false"));
        }
        *field = it->get<bool>();
      }
    }
  }
  return req;
}

json Tensor(const char* name, const char* datatype, std::vector<int64_t> shape, json data) {
  return json{{"name", name}, {"datatype", datatype}, {"shape", std::move(shape)},
              {"data", std::move(data)}};
}

}  // namespace

absl::StatusOr<HttpBody> JsonApi::ListDatasets(const QueryParams& query) const {
  DENDRO_ASSIGN_OR_RETURN(auto req, PageRequest<v1::ListDatasetsRequest>(query));
  DENDRO_ASSIGN_OR_RETURN(v1::ListDatasetsResponse resp, api_.ListDatasets(req));
  return ProtoJson(resp);
}

absl::StatusOr<HttpBody> JsonApi::GetDataset(const std::string& id) const {
  DENDRO_ASSIGN_OR_RETURN(v1::Dataset d, api_.GetDataset(id));
  return ProtoJson(d);
}

absl::StatusOr<HttpBody> JsonApi::ListJobs(const QueryParams& query) const {
  DENDRO_ASSIGN_OR_RETURN(auto req, PageRequest<v1::ListJobsRequest>(query));
  DENDRO_ASSIGN_OR_RETURN(bool newest_first, BoolParam(query, "newest_first"));
  req.set_newest_first(newest_first);
  // state=queued,running (names as in the JSON records, with or without
  // the JOB_STATE_ prefix, any case).
  if (const std::string* states = FindParam(query, "state"); states != nullptr) {
    for (absl::string_view name : absl::StrSplit(*states, ',', absl::SkipEmpty())) {
      std::string upper = absl::AsciiStrToUpper(name);
      if (!absl::StartsWith(upper, "JOB_STATE_")) upper = absl::StrCat("JOB_STATE_", upper);
      v1::JobState state;
      if (!v1::JobState_Parse(upper, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
        return absl::InvalidArgumentError(absl::StrCat(
            "query parameter state: '", absl::CHexEscape(name.substr(0, 64)),
            "' is not a job state (queued, running, succeeded, failed or cancelled)"));
      }
      req.add_states(state);
    }
  }
  DENDRO_ASSIGN_OR_RETURN(v1::ListJobsResponse resp, api_.ListJobs(req));
  return ProtoJson(resp);
}

absl::StatusOr<HttpBody> JsonApi::GetJob(const std::string& id) const {
  DENDRO_ASSIGN_OR_RETURN(v1::Job job, deps_.jobs->Get(id));
  return ProtoJson(job);
}

absl::StatusOr<HttpBody> JsonApi::ListModels(const QueryParams& query) const {
  DENDRO_ASSIGN_OR_RETURN(auto req, PageRequest<v1::ListModelsRequest>(query));
  if (const std::string* name = FindParam(query, "name"); name != nullptr) {
    req.set_name(*name);
  }
  DENDRO_ASSIGN_OR_RETURN(v1::ListModelsResponse resp, api_.ListModels(req));
  return ProtoJson(resp);
}

absl::StatusOr<HttpBody> JsonApi::GetModel(const v1::ModelRef& ref) const {
  DENDRO_ASSIGN_OR_RETURN(v1::Model m, deps_.models->Get(ref));
  return ProtoJson(m);
}

absl::StatusOr<HttpBody> JsonApi::GetTree(const v1::ModelRef& ref,
                                          const QueryParams& query) const {
  const std::string* format_param = FindParam(query, "format");
  const std::string format = format_param == nullptr ? "json" : *format_param;
  if (format != "json" && format != "newick" && format != "linkage") {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter format must be json, newick or linkage, got '",
                     absl::CHexEscape(format.substr(0, 64)), "' (the SVG is at .../tree.svg)"));
  }
  DENDRO_ASSIGN_OR_RETURN(bool unrefined, BoolParam(query, "unrefined"));
  DENDRO_ASSIGN_OR_RETURN(bool include_points, BoolParam(query, "include_points"));
  if (format == "linkage" && unrefined) {
    return absl::InvalidArgumentError(
        "format=linkage with unrefined: an unrefined tree can be n-ary, which a SciPy linkage "
        "cannot hold; ask for format=json or format=newick");
  }
  DENDRO_ASSIGN_OR_RETURN(auto loaded, api_.Load(ref));
  HttpBody body;
  if (format == "newick") {
    body.content = ToNewick(unrefined ? loaded.model->coarse_tree() : loaded.model->tree());
    body.content_type = "text/plain; charset=utf-8";
  } else if (format == "linkage") {
    // The (L-1) x 4 float64 SciPy linkage as a .npy file, as `dendro tree
    // --out FILE.npy` writes it.
    const std::vector<double> rows = ToLinkage(loaded.model->tree());
    const int64_t shape[2] = {static_cast<int64_t>(rows.size() / 4), 4};
    body.content = MakeNpyHeader(DType::kFloat64, shape);
    body.content.append(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(double));
    body.content_type = "application/octet-stream";
  } else {
    // Written as it is sent: with the points it can be far larger than the
    // tree (10^7 rows make 25 MB or more).
    // The refined tree carries the version's stable ids.
    body.write = [model = std::move(loaded.model), ids = std::move(loaded.stable_ids), unrefined,
                  include_points](absl::FunctionRef<absl::Status(std::string_view)> sink) {
      return WriteJson(unrefined ? model->coarse_tree() : model->tree(), include_points,
                       size_t{1} << 20, sink, ServedStableIds(ids.get(), unrefined));
    };
  }
  return body;
}

absl::StatusOr<HttpBody> JsonApi::GetTreeSvg(const v1::ModelRef& ref,
                                             const QueryParams& query) const {
  SvgOptions options;
  if (const std::string* layout = FindParam(query, "layout"); layout != nullptr) {
    if (*layout == "rectangular") {
      options.layout = SvgOptions::Layout::kRectangular;
    } else if (*layout == "radial") {
      options.layout = SvgOptions::Layout::kRadial;
    } else if (!layout->empty() && *layout != "auto") {
      return absl::InvalidArgumentError(absl::StrCat(
          "query parameter layout must be auto, rectangular or radial, got '",
          absl::CHexEscape(layout->substr(0, 64)), "'"));
    }
  }
  DENDRO_ASSIGN_OR_RETURN(int64_t level, IntParam(query, "color_level", 0));
  if (level < 0 || level > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter color_level must be >= 0, got ", level));
  }
  options.color_level = static_cast<int32_t>(level);
  DENDRO_ASSIGN_OR_RETURN(auto loaded, api_.Load(ref));
  options.title = absl::StrCat(loaded.info().name(), " v", loaded.info().version());
  HttpBody body;
  DENDRO_ASSIGN_OR_RETURN(body.content, ToSvg(loaded.model->tree(), options));
  body.content_type = "image/svg+xml";
  return body;
}

absl::StatusOr<HttpBody> JsonApi::DiffModels(const v1::ModelRef& ref, const QueryParams& query,
                                             bool svg) const {
  const std::string* from = FindParam(query, "from");
  if (from == nullptr) {
    return absl::InvalidArgumentError(
        "query parameter from (the version to compare with: a number, a label or latest) is "
        "required");
  }
  const std::string* from_name = FindParam(query, "from_name");
  v1::DiffModelsRequest req;
  DENDRO_ASSIGN_OR_RETURN(*req.mutable_a(),
                          ModelRefFromText(from_name != nullptr ? *from_name : ref.name(), *from));
  *req.mutable_b() = ref;
  req.set_tanglegram(svg);
  DENDRO_ASSIGN_OR_RETURN(v1::DiffModelsResponse resp, api_.DiffModels(req));
  HttpBody body;
  if (svg) {
    body.content = std::move(*resp.mutable_tanglegram_svg());
    body.content_type = "image/svg+xml";
    return body;
  }
  DENDRO_ASSIGN_OR_RETURN(HttpBody a, ProtoJson(resp.a()));
  DENDRO_ASSIGN_OR_RETURN(HttpBody b, ProtoJson(resp.b()));
  // Three documents this server wrote, put side by side unparsed.
  body.content = absl::StrCat("{\"a\":", a.content, ",\"b\":", b.content,
                              ",\"report\":", resp.report_json(), "}");
  return body;
}

absl::StatusOr<HttpBody> JsonApi::GetClasses(const v1::ModelRef& ref) const {
  DENDRO_ASSIGN_OR_RETURN(v1::GetClassesResponse resp, api_.GetClasses(ref));
  return ProtoJson(resp);
}

HttpBody JsonApi::ServerMetadata() {
  return JsonBody(json{{"name", "dendrod"},
                       {"version", DENDRO_VERSION},
                       {"extensions", json::array({"model_repository_read"})}});
}

absl::StatusOr<HttpBody> JsonApi::ModelMetadata(const v1::ModelRef& ref) const {
  DENDRO_ASSIGN_OR_RETURN(v1::Model model, deps_.models->Get(ref));
  DENDRO_ASSIGN_OR_RETURN(std::vector<v1::Model> versions, api_.AllVersions(ref.name()));
  json version_list = json::array();
  for (const v1::Model& m : versions) version_list.push_back(std::to_string(m.version()));
  DENDRO_ASSIGN_OR_RETURN(HttpBody model_json, ProtoJson(model));
  json out;
  out["name"] = model.name();
  out["versions"] = std::move(version_list);
  out["platform"] = absl::StrCat("dendro_", model.method());
  out["inputs"] = json::array(
      {json{{"name", "input"}, {"datatype", "FP32"}, {"shape", {-1, model.input_dim()}}}});
  out["outputs"] = json::array({
      json{{"name", "leaf"}, {"datatype", "INT32"}, {"shape", {-1}}, {"op", "assign"}},
      json{{"name", "cluster"}, {"datatype", "INT32"}, {"shape", {-1}}, {"op", "assign"}},
      json{{"name", "stable_leaf"}, {"datatype", "INT64"}, {"shape", {-1}}, {"op", "assign"}},
      json{{"name", "stable_cluster"}, {"datatype", "INT64"}, {"shape", {-1}}, {"op", "assign"}},
      json{{"name", "labels"}, {"datatype", "INT64"}, {"shape", {-1, -1}}, {"op", "predict"}},
      json{{"name", "scores"}, {"datatype", "FP32"}, {"shape", {-1, -1}}, {"op", "predict"}},
      json{{"name", "superclasses"}, {"datatype", "INT32"}, {"shape", {-1, -1}}, {"op", "predict"}},
      json{
          {"name", "classes_evaluated"}, {"datatype", "INT32"}, {"shape", {-1}}, {"op", "predict"}},
  });
  out["model"] = json::parse(model_json.content);
  return JsonBody(out);
}

absl::StatusOr<HttpBody> JsonApi::ModelReady(const v1::ModelRef& ref) const {
  DENDRO_ASSIGN_OR_RETURN(auto loaded, api_.Load(ref));
  return JsonBody(json{{"name", loaded.info().name()},
                       {"version", std::to_string(loaded.info().version())},
                       {"ready", true}});
}

absl::StatusOr<HttpBody> JsonApi::Infer(
    const v1::ModelRef& ref, std::string_view body,
    const std::function<absl::Status(Rpc)>& authorize) const {
  DENDRO_ASSIGN_OR_RETURN(InferRequest req, ParseInfer(body, deps_.max_message_bytes));
  if (req.op != Op::kPredict) DENDRO_RETURN_IF_ERROR(authorize(Rpc::kAssign));
  if (req.op != Op::kAssign) DENDRO_RETURN_IF_ERROR(authorize(Rpc::kPredict));
  DENDRO_ASSIGN_OR_RETURN(auto loaded, api_.Load(ref));
  const FittedModel& model = *loaded.model;
  const v1::Model& info = loaded.info();
  Op op = req.op;
  if (op == Op::kUnset) op = model.Classes().ok() ? Op::kPredict : Op::kAssign;
  const MatrixView rows(req.data.data(), req.rows, req.cols);
  DENDRO_RETURN_IF_ERROR(api_.CheckRows(kInferWording, loaded, rows));
  json out;
  out["model_name"] = info.name();
  out["model_version"] = std::to_string(info.version());
  if (!req.id.is_null()) out["id"] = req.id;
  if (op == Op::kAssign) {
    DENDRO_ASSIGN_OR_RETURN(Assignment a,
                            api_.Assign(kInferWording, loaded, rows, req.level, req.stable_ids,
                                        kAssignCost, absl::InfiniteFuture()));
    out["parameters"] = json{{"op", "assign"}, {"level", req.level}};
    out["outputs"] = json::array({Tensor("leaf", "INT32", {req.rows}, a.leaves),
                                  Tensor("cluster", "INT32", {req.rows}, a.clusters)});
    if (req.stable_ids) {
      out["parameters"]["stable_ids"] = true;
      out["outputs"].push_back(Tensor("stable_leaf", "INT64", {req.rows}, a.stable_leaves));
      out["outputs"].push_back(Tensor("stable_cluster", "INT64", {req.rows}, a.stable_clusters));
    }
    return JsonBody(out);
  }
  DENDRO_ASSIGN_OR_RETURN(Prediction p, api_.Predict(kInferWording, loaded, rows, req.top_k,
                                                     req.top_t, req.flat, kPredictCost,
                                                     absl::InfiniteFuture()));
  out["parameters"] = json{{"op", "predict"}, {"top_k", p.top_k}, {"top_t", p.top_t},
                           {"flat", req.flat}};
  out["outputs"] = json::array({
      Tensor("labels", "INT64", {req.rows, p.top_k}, p.labels),
      Tensor("scores", "FP32", {req.rows, p.top_k}, p.scores),
      Tensor("superclasses", "INT32", {req.rows, p.top_t}, p.superclasses),
      Tensor("classes_evaluated", "INT32", {req.rows}, p.classes_evaluated),
  });
  return JsonBody(out);
}

}  // namespace dendro::server
