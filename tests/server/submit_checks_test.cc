// Submit-time checks from the statistics an upload keeps (Dataset.stats):
// what a job would fail on after queueing is refused by Method::Validate,
// in the words the fit would use; datasets without statistics (uploaded
// before they were kept) pass as before.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/methods/method.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

v1::Dataset Dataset(bool labelled) {
  v1::Dataset d;
  d.set_id("ds-checks");
  d.set_rows(400);
  d.set_cols(8);
  d.set_has_labels(labelled);
  d.mutable_stats()->set_computed(true);
  return d;
}

v1::JobSpec Spec(const char* method) {
  v1::JobSpec spec;
  spec.set_dataset_id("ds-checks");
  spec.set_model_name("checks");
  if (std::string(method) == "tneb") spec.mutable_tneb();
  if (std::string(method) == "hppca") spec.mutable_hppca();
  if (std::string(method) == "l2h") spec.mutable_l2h();
  return spec;
}

absl::Status Validate(const v1::JobSpec& spec, const v1::Dataset& d) {
  absl::StatusOr<const Method*> method = MethodForSpec(spec);
  if (!method.ok()) return method.status();
  return (*method)->Validate(spec, d, JobLimits());
}

TEST(SubmitChecksTest, TnebRefusesAConstantColumnAtSubmit) {
  v1::Dataset d = Dataset(false);
  EXPECT_TRUE(Validate(Spec("tneb"), d).ok());
  d.mutable_stats()->set_num_constant_columns(3);
  d.mutable_stats()->add_constant_columns(4);
  d.mutable_stats()->add_constant_values(0.25f);
  const absl::Status s = Validate(Spec("tneb"), d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("column 4 of dataset ds-checks is constant (every value is 0.25) "
                        "(and 2 more constant columns)"));
  // L2H has no trouble with a constant logit.
  EXPECT_TRUE(Validate(Spec("l2h"), d).ok());
  // Without statistics the job is accepted (and the fit reports it).
  d.mutable_stats()->set_computed(false);
  EXPECT_TRUE(Validate(Spec("tneb"), d).ok());
}

TEST(SubmitChecksTest, HppcaRefusesAClassOfOneRowOrOneClass) {
  v1::Dataset d = Dataset(true);
  v1::DatasetStats* st = d.mutable_stats();
  st->set_num_classes(10);
  st->set_smallest_class_label(7);
  st->set_smallest_class_rows(2);
  EXPECT_TRUE(Validate(Spec("hppca"), d).ok());
  st->set_smallest_class_rows(1);
  absl::Status s = Validate(Spec("hppca"), d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("class label 7 of dataset ds-checks has 1 training row"));
  st->set_smallest_class_rows(40);
  st->set_num_classes(1);
  s = Validate(Spec("hppca"), d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("at least 2 classes"));

  // Growing a model: one new class is fine, a class of one row is not.
  v1::JobSpec add;
  add.set_dataset_id("ds-checks");
  add.set_model_name("checks");
  add.mutable_hppca_add()->mutable_base()->set_name("checks");
  EXPECT_TRUE(Validate(add, d).ok());
  st->set_smallest_class_rows(1);
  s = Validate(add, d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("hppca_add: class label 7"));
}

}  // namespace
}  // namespace dendro::server
