// Every numeric parameter of every method has an upper bound: the proto's
// fields are walked by reflection, each set alone to the largest value its
// type holds (and, for floating-point fields, to +inf and NaN), and
// Method::Validate must refuse it with INVALID_ARGUMENT naming the field.
// A new field without a bound fails here unless it is listed below with the
// reason its largest value is harmless.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "server/methods/method.h"

namespace dendro::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Fields whose largest value costs neither time nor memory, and why.
const std::map<std::string, std::string>& Unbounded() {
  static const auto* m = new std::map<std::string, std::string>{
      {"tneb.seed", "any seed is one draw"},
      {"ghhc.seed", "any seed is one draw"},
      {"hppca.seed", "any seed is one draw"},
      {"ghhc.margin_every", "a margin phase every N batches: larger means fewer phases"},
      {"ghhc.validate_every", "a check every N batches: larger means fewer checks"},
      {"tneb.diagnose_k", "the diagnosed cut is clamped to the leaves: larger costs nothing"},
  };
  return *m;
}

v1::Dataset SmallDataset() {
  v1::Dataset d;
  d.set_id("ds-bounds");
  d.set_rows(2000);
  d.set_cols(16);
  d.set_has_labels(true);
  return d;
}

// Sets `field` of `params` to one extreme value; false if `which` does not
// apply to its type.
bool SetExtreme(Message* params, const FieldDescriptor* field, int which) {
  const Reflection* r = params->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      if (which != 0) return false;
      r->SetInt32(params, field, std::numeric_limits<int32_t>::max());
      return true;
    case FieldDescriptor::CPPTYPE_INT64:
      if (which != 0) return false;
      r->SetInt64(params, field, std::numeric_limits<int64_t>::max());
      return true;
    case FieldDescriptor::CPPTYPE_UINT64:
      if (which != 0) return false;
      r->SetUInt64(params, field, std::numeric_limits<uint64_t>::max());
      return true;
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      const double v[] = {std::numeric_limits<double>::max(),
                          std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN()};
      if (which > 2) return false;
      r->SetDouble(params, field, v[which]);
      return true;
    }
    default:
      return false;
  }
}

struct Case {
  const char* prefix;    // the method's name in messages
  const char* oneof;     // JobSpec field holding its parameters
};

class MethodBoundsTest : public ::testing::TestWithParam<Case> {};

TEST_P(MethodBoundsTest, EveryNumericFieldIsBoundedOrListed) {
  const Case c = GetParam();
  const v1::Dataset dataset = SmallDataset();
  JobLimits limits;  // the default 16 GiB
  const FieldDescriptor* holder = v1::JobSpec::descriptor()->FindFieldByName(c.oneof);
  ASSERT_NE(holder, nullptr) << c.oneof;
  int checked = 0;
  for (int i = 0; i < holder->message_type()->field_count(); ++i) {
    const FieldDescriptor* field = holder->message_type()->field(i);
    const std::string name = absl::StrCat(c.prefix, ".", field->name());
    for (int which = 0; which < 3; ++which) {
      v1::JobSpec spec;
      spec.set_dataset_id(dataset.id());
      spec.set_model_name("bounds");
      Message* params = spec.GetReflection()->MutableMessage(&spec, holder);
      if (!SetExtreme(params, field, which)) continue;
      ++checked;
      absl::StatusOr<const Method*> method = MethodForSpec(spec);
      ASSERT_TRUE(method.ok()) << method.status();
      const absl::Status s = (*method)->Validate(spec, dataset, limits);
      SCOPED_TRACE(absl::StrCat(name, " = ", params->ShortDebugString()));
      if (Unbounded().count(name) > 0) {
        EXPECT_TRUE(s.ok()) << s;  // listed because accepted: keep the list true
        continue;
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(field->name())) << s;
    }
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(AllMethods, MethodBoundsTest,
                         ::testing::Values(Case{"tneb", "tneb"}, Case{"ghhc", "ghhc"},
                                           Case{"hppca", "hppca"}),
                         [](const auto& info) { return std::string(info.param.prefix); });

// The bound itself: the largest accepted triple count runs, one more is
// refused with the limit in the message.
TEST(MethodBoundsTest, GhhcTriplesAtTheBound) {
  v1::JobSpec spec;
  spec.set_dataset_id("ds-bounds");
  spec.set_model_name("bounds");
  spec.mutable_ghhc()->set_triples(1000000000);
  const Method* method = *MethodForSpec(spec);
  EXPECT_TRUE(method->Validate(spec, SmallDataset(), JobLimits()).ok());
  spec.mutable_ghhc()->set_triples(1000000001);
  const absl::Status s = method->Validate(spec, SmallDataset(), JobLimits());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("ghhc.triples must be <= 1000000000"));
}

// A job's memory bound is what its method reports, and the limit applies
// to it: accepted at the bound, refused a byte below.
TEST(MethodBoundsTest, TheMemoryLimitAppliesToTheReportedBound) {
  v1::JobSpec spec;
  spec.set_dataset_id("ds-bounds");
  spec.set_model_name("bounds");
  spec.mutable_tneb()->set_components(60);
  spec.mutable_tneb()->set_neighbors(59);
  spec.mutable_tneb()->set_path_points(1000);
  const Method* method = *MethodForSpec(spec);
  const double bound = method->PeakMemoryBytes(spec, SmallDataset());
  // Every pair of 60 components, each path 1000 x 16 points and three
  // buffers of the same size: at least 1,770 x 1000 x 16 x 32 bytes.
  EXPECT_GE(bound, 1770.0 * 1000 * 16 * 32);
  JobLimits limits;
  limits.memory_bytes = static_cast<int64_t>(std::ceil(bound));
  EXPECT_TRUE(method->Validate(spec, SmallDataset(), limits).ok());
  limits.memory_bytes = static_cast<int64_t>(std::floor(bound)) - 1;
  const absl::Status s = method->Validate(spec, SmallDataset(), limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("max_job_memory_mb"));
}

}  // namespace
}  // namespace dendro::server
