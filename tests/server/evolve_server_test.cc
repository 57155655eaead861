// Models that evolve, through a real in-process server. Stable cluster ids:
// what Commit stores with each version (matched through leaves for L2H,
// through the points of a dataset lineage for t-NEB, not at all across
// unrelated datasets), what Assign answers with stable_ids, and that the
// ids survive a restart. Warm starts (JobSpec.warm_start): an L2H refit on
// an appended generation reuses the earlier version's first pass and gives
// the tree a fit from scratch gives; t-NEB and gHHC refits start from the
// earlier version and find the same blobs, with the same stable ids; a gHHC
// version with learned points is refitted from scratch and says so; what
// cannot be warm-started is refused at submit.
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/diff/stable_ids.h"
#include "core/metrics/metrics.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

// Three Gaussian blobs in 2-D, point i in blob i % 3.
std::vector<float> Blobs(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  const double centre[3][2] = {{0, 0}, {12, 0}, {6, 10}};
  std::vector<float> x;
  for (int i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(centre[i % 3][0] + nd(rng)));
    x.push_back(static_cast<float>(centre[i % 3][1] + nd(rng)));
  }
  return x;
}

// Three Gaussian blobs in kBlobDim dimensions, row i in blob i % 3, each
// 10 units along its own axis from the origin: blobs that every method
// separates, gHHC (which sees the centred rows' directions) included.
constexpr int kBlobDim = 4;
std::vector<float> AxisBlobs(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::vector<float> x;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < kBlobDim; ++j) {
      x.push_back(static_cast<float>((j == i % 3 ? 10.0 : 0.0) + nd(rng)));
    }
  }
  return x;
}

class EvolveServerTest : public ServerTest {
 protected:
  // A small t-NEB fit of `dataset` named `model`.
  static v1::JobSpec TnebSpec(const std::string& dataset, const std::string& model) {
    v1::JobSpec spec;
    spec.set_dataset_id(dataset);
    spec.set_model_name(model);
    v1::TnebParams* p = spec.mutable_tneb();
    p->set_components(6);
    p->set_restarts(2);
    p->set_path_points(20);
    p->set_path_steps(30);
    p->set_eval_points(64);
    p->set_seed(3);
    return spec;
  }
  // A t-NEB (above) or L2H fit, run to success.
  v1::Job Fit(const std::string& dataset, const std::string& model, bool tneb) {
    v1::JobSpec spec = TnebSpec(dataset, model);
    if (!tneb) spec.mutable_l2h();
    return Run(spec);
  }
  v1::Model Info(const std::string& name, int64_t version) {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.mutable_model()->set_name(name);
    req.mutable_model()->set_version(version);
    v1::Model m;
    EXPECT_TRUE(models_->GetModel(&ctx, req, &m).ok());
    return m;
  }
  v1::AssignResponse AssignStable(const std::string& name, int64_t version,
                                  const std::vector<float>& x, int64_t cols, int level) {
    grpc::ClientContext ctx;
    v1::AssignRequest req;
    req.mutable_model()->set_name(name);
    req.mutable_model()->set_version(version);
    req.set_rows(static_cast<int64_t>(x.size()) / cols);
    req.set_cols(cols);
    req.set_level(level);
    req.set_stable_ids(true);
    req.set_data(std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    v1::AssignResponse resp;
    const grpc::Status st = models_->Assign(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.stable_leaf_size(), req.rows());
    EXPECT_EQ(resp.stable_cluster_size(), req.rows());
    return resp;
  }
  std::string TreeJson(const std::string& name, int64_t version, bool unrefined) {
    grpc::ClientContext ctx;
    v1::GetTreeRequest req;
    req.mutable_model()->set_name(name);
    req.mutable_model()->set_version(version);
    req.set_format(v1::TREE_FORMAT_JSON);
    req.set_unrefined(unrefined);
    v1::GetTreeResponse resp;
    const grpc::Status st = models_->GetTree(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.content();
  }
  // Submits `spec` and waits for it to succeed.
  v1::Job Run(const v1::JobSpec& spec) {
    grpc::Status st;
    v1::Job job = SubmitSpec(spec, &st);
    EXPECT_TRUE(st.ok()) << st.error_message();
    job = Wait(job.id());
    EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
    return job;
  }
  // ARI at level 3 of the version's Assign answers on `x` (AxisBlobs)
  // against the blob of each row.
  double BlobAri(const std::string& name, int64_t version, const std::vector<float>& x) {
    const v1::AssignResponse a = AssignStable(name, version, x, kBlobDim, 3);
    std::vector<int64_t> truth, got;
    for (int i = 0; i < a.stable_cluster_size(); ++i) {
      truth.push_back(i % 3);
      got.push_back(a.stable_cluster(i));
    }
    absl::StatusOr<double> ari = AdjustedRandIndex(truth, got);
    EXPECT_TRUE(ari.ok());
    return ari.ok() ? *ari : -1.0;
  }
  absl::StatusOr<Hierarchy> Tree(const std::string& name, int64_t version) {
    grpc::ClientContext ctx;
    v1::GetTreeRequest req;
    req.mutable_model()->set_name(name);
    req.mutable_model()->set_version(version);
    req.set_format(v1::TREE_FORMAT_JSON);
    v1::GetTreeResponse resp;
    const grpc::Status st = models_->GetTree(&ctx, req, &resp);
    if (!st.ok()) return absl::UnknownError(st.error_message());
    return ParseJson(resp.content());
  }
};

TEST_F(EvolveServerTest, L2hVersionsKeepTheIdsOfTheClustersTheyShare) {
  StartServer();
  const int n = 1500, groups = 3, per = 4, k = groups * per;
  const std::vector<float> x = MakeLogits(n, groups, per, 11);
  v1::Dataset first, second;
  ASSERT_TRUE(Upload(std::vector<float>(x.begin(), x.begin() + 900 * k), 900, k, &first).ok());
  ASSERT_TRUE(Upload(x, n, k, &second).ok());
  Fit(first.id(), "grow", /*tneb=*/false);
  Fit(second.id(), "grow", /*tneb=*/false);

  const v1::Model v1m = Info("grow", 1), v2m = Info("grow", 2);
  EXPECT_EQ(v1m.metadata().at("stable_ids_basis"), "first");
  EXPECT_EQ(v2m.metadata().at("stable_ids_basis"), "leaves");
  EXPECT_EQ(v2m.metadata().at("stable_ids_previous_version"), "1");
  EXPECT_EQ(v2m.checksums().count("stable_ids.json"), 1u);
  int kept = 0;
  ASSERT_TRUE(absl::SimpleAtoi(v2m.metadata().at("stable_ids_kept"), &kept));
  EXPECT_GE(kept, k + 1);  // every leaf (a class keeps its identity) and the root

  absl::StatusOr<Hierarchy> t1 = Tree("grow", 1), t2 = Tree("grow", 2);
  ASSERT_TRUE(t1.ok() && t2.ok());
  // The served JSON tree names every node by its stable id; the unrefined
  // tree (other nodes) has none.
  const nlohmann::json doc = nlohmann::json::parse(TreeJson("grow", 2, false));
  ASSERT_TRUE(doc.contains("stable_ids"));
  ASSERT_EQ(doc["stable_ids"].size(), static_cast<size_t>(t2->num_nodes()));
  EXPECT_FALSE(nlohmann::json::parse(TreeJson("grow", 2, true)).contains("stable_ids"));
  for (int level = 0; level <= k; level += (level == 0 ? 2 : 1)) {
    const v1::AssignResponse a1 = AssignStable("grow", 1, x, k, level);
    const v1::AssignResponse a2 = AssignStable("grow", 2, x, k, level);
    // The first version's ids are its node ids; leaves keep theirs; the
    // tree's ids are Assign's.
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(a1.stable_leaf(i), a1.leaf(i));
      ASSERT_EQ(a2.stable_leaf(i), a1.stable_leaf(i));
      ASSERT_EQ(doc["stable_ids"][a2.leaf(i)].get<int64_t>(), a2.stable_leaf(i));
    }
    if (level < 2) continue;
    // A cluster of the cut found in both versions (the same classes) has
    // one id in both; clusters of either version have distinct ids.
    auto c1 = t1->CutToK(level), c2 = t2->CutToK(level);
    ASSERT_TRUE(c1.ok() && c2.ok());
    std::map<std::set<int>, int> sets1, sets2;  // leaf set -> cut label
    std::map<int, std::set<int>> by1, by2;
    for (int leaf = 0; leaf < k; ++leaf) {
      by1[(*c1)[leaf]].insert(leaf);
      by2[(*c2)[leaf]].insert(leaf);
    }
    for (const auto& [label, leaves] : by1) sets1[leaves] = label;
    std::map<int, int64_t> id1, id2;  // cut label -> stable id
    for (int i = 0; i < n; ++i) {
      id1[a1.cluster(i)] = a1.stable_cluster(i);
      id2[a2.cluster(i)] = a2.stable_cluster(i);
    }
    std::set<int64_t> distinct;
    for (const auto& [label, id] : id2) distinct.insert(id);
    EXPECT_EQ(distinct.size(), id2.size()) << level;
    for (const auto& [label, leaves] : by2) {
      auto same = sets1.find(leaves);
      if (same == sets1.end() || id2.count(label) == 0 || id1.count(same->second) == 0) continue;
      EXPECT_EQ(id2[label], id1[same->second]) << "level " << level;
    }
  }
}

TEST_F(EvolveServerTest, TnebRefitOnAnAppendedGenerationKeepsItsClustersIds) {
  StartServer();
  const int n = 600, extra = 60;
  const std::vector<float> all = Blobs(n + extra, 7);
  const std::vector<float> x(all.begin(), all.begin() + 2 * n);
  const std::vector<float> more(all.begin() + 2 * n, all.end());
  v1::Dataset ds, appended, other;
  ASSERT_TRUE(Upload(x, n, 2, &ds).ok());
  Fit(ds.id(), "blobs", /*tneb=*/true);
  ASSERT_TRUE(Upload(more, extra, 2, &appended, nullptr, 1 << 20, false, "", ds.id()).ok());
  Fit(ds.id(), "blobs", /*tneb=*/true);  // the lineage: its newest generation

  const v1::Model v2m = Info("blobs", 2);
  EXPECT_EQ(v2m.dataset_id(), appended.id());
  EXPECT_EQ(v2m.metadata().at("stable_ids_basis"), "points");
  EXPECT_EQ(v2m.metadata().at("dataset_lineage"), ds.id());

  // The three blobs keep their ids: at k = 3 the original rows are
  // answered with the same ids by both versions.
  const v1::AssignResponse a1 = AssignStable("blobs", 1, x, 2, 3);
  const v1::AssignResponse a2 = AssignStable("blobs", 2, x, 2, 3);
  int same = 0;
  std::set<int64_t> ids;
  for (int i = 0; i < n; ++i) {
    same += a1.stable_cluster(i) == a2.stable_cluster(i);
    ids.insert(a2.stable_cluster(i));
  }
  EXPECT_GE(same, n * 95 / 100);
  EXPECT_EQ(ids.size(), 3u);

  // A fit on data that is not of this lineage shares nothing: every id is
  // new, above every id the name used.
  ASSERT_TRUE(Upload(Blobs(n, 8), n, 2, &other).ok());
  Fit(other.id(), "blobs", /*tneb=*/true);
  const v1::Model v3m = Info("blobs", 3);
  EXPECT_EQ(v3m.metadata().at("stable_ids_basis"), "none");
  EXPECT_THAT(v3m.metadata().at("stable_ids_note"), HasSubstr("different datasets"));
  EXPECT_EQ(v3m.metadata().at("stable_ids_kept"), "0");
  int64_t next2 = 0;
  ASSERT_TRUE(absl::SimpleAtoi(v2m.metadata().at("stable_ids_next"), &next2));
  const v1::AssignResponse a3 = AssignStable("blobs", 3, x, 2, 3);
  for (int i = 0; i < n; ++i) {
    ASSERT_GE(a3.stable_leaf(i), next2);
    ASSERT_GE(a3.stable_cluster(i), next2);
  }

  // Another method under the name: nothing to compare, all ids new.
  {
    v1::JobSpec spec;
    spec.set_dataset_id(ds.id());
    spec.set_model_name("blobs");
    spec.set_allow_method_change(true);
    spec.mutable_l2h();
    grpc::Status st;
    const v1::Job job = Wait(SubmitSpec(spec, &st).id());
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
    const v1::Model v4m = Info("blobs", 4);
    EXPECT_EQ(v4m.metadata().at("stable_ids_basis"), "none");
    EXPECT_THAT(v4m.metadata().at("stable_ids_note"), HasSubstr("the method changed"));
  }

  // Stored with the version: the same answers after a restart.
  StopServer();
  StartServer();
  const v1::AssignResponse again = AssignStable("blobs", 2, x, 2, 3);
  for (int i = 0; i < n; ++i) ASSERT_EQ(again.stable_cluster(i), a2.stable_cluster(i));
}

TEST_F(EvolveServerTest, WithoutTheFlagNoStableIdsAreSent) {
  StartServer();
  FitModel("plain");
  const std::vector<float> x = MakeLogits(10, 3, 4, 1);
  v1::AssignResponse resp;
  ASSERT_TRUE(Assign("plain", x, 10, 12, 2, &resp).ok());
  EXPECT_EQ(resp.stable_leaf_size(), 0);
  EXPECT_EQ(resp.stable_cluster_size(), 0);
}

TEST_F(EvolveServerTest, L2hWarmStartOnAnAppendedGenerationGivesTheColdTree) {
  StartServer();
  const int n = 1500, k = 12;
  const std::vector<float> x = MakeLogits(n, 3, 4, 21);
  v1::Dataset first, appended;
  ASSERT_TRUE(Upload(std::vector<float>(x.begin(), x.begin() + 1000 * k), 1000, k, &first).ok());
  Fit(first.id(), "warm", /*tneb=*/false);
  ASSERT_TRUE(Upload(std::vector<float>(x.begin() + 1000 * k, x.end()), n - 1000, k, &appended,
                     nullptr, 1 << 20, false, "", first.id())
                  .ok());

  v1::JobSpec spec;
  spec.set_dataset_id(first.id());  // the lineage: its newest generation
  spec.mutable_l2h();
  spec.mutable_warm_start()->set_name("warm");  // the latest: pinned at submit
  grpc::Status st;
  v1::Job job = SubmitSpec(spec, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(job.spec().model_name(), "warm");  // the warm start's name
  EXPECT_EQ(job.spec().warm_start().version(), 1);
  job = Wait(job.id());
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
  const v1::Model v2 = Info("warm", 2);
  EXPECT_EQ(v2.metadata().at("warm_start"), "warm:1");
  EXPECT_EQ(v2.metadata().at("warm_start_rows"), "1000");
  EXPECT_EQ(v2.metadata().count("warm_start_note"), 0u);
  EXPECT_EQ(v2.checksums().count("first_pass.bin"), 1u);

  Fit(appended.id(), "cold", /*tneb=*/false);
  absl::StatusOr<Hierarchy> warm = Tree("warm", 2), cold = Tree("cold", 1);
  ASSERT_TRUE(warm.ok() && cold.ok());
  const std::vector<Merge> wm = warm->ToMerges(), cm = cold->ToMerges();
  ASSERT_EQ(wm.size(), cm.size());
  for (size_t t = 0; t < wm.size(); ++t) {
    EXPECT_EQ(wm[t].a, cm[t].a);
    EXPECT_EQ(wm[t].b, cm[t].b);
    EXPECT_EQ(wm[t].height, cm[t].height);
  }
}

TEST_F(EvolveServerTest, TnebAndGhhcWarmStartsFindTheSameBlobsWithTheSameIds) {
  StartServer();
  const int n = 900, extra = 90;
  const std::vector<float> all = AxisBlobs(n + extra, 11);
  const std::vector<float> x(all.begin(), all.begin() + kBlobDim * n);
  v1::Dataset ds, appended;
  ASSERT_TRUE(Upload(x, n, kBlobDim, &ds).ok());
  ASSERT_TRUE(Upload(std::vector<float>(all.begin() + kBlobDim * n, all.end()), extra, kBlobDim,
                     &appended, nullptr, 1 << 20, false, "", ds.id())
                  .ok());
  v1::JobSpec tneb = TnebSpec(ds.id() + ":1", "t");
  v1::JobSpec ghhc;
  ghhc.set_dataset_id(ds.id() + ":1");
  ghhc.set_model_name("g");
  ghhc.mutable_ghhc()->set_internal_nodes(20);
  ghhc.mutable_ghhc()->set_triples(20000);
  ghhc.mutable_ghhc()->set_points("fixed");
  for (v1::JobSpec* spec : {&tneb, &ghhc}) {
    const std::string name = spec->model_name();
    Run(*spec);
    spec->set_dataset_id(ds.id());  // the newest generation
    spec->mutable_warm_start()->set_name(name);
    Run(*spec);
    const v1::Model v2 = Info(name, 2);
    EXPECT_EQ(v2.dataset_id(), appended.id());
    EXPECT_EQ(v2.metadata().at("warm_start"), name + ":1");
    EXPECT_EQ(v2.metadata().count("warm_start_note"), 0u) << v2.metadata().at("warm_start_note");
    EXPECT_EQ(v2.metadata().at("warm_start_rows"), absl::StrCat(extra));
    // The three blobs, found again, keep their ids on the earlier rows.
    EXPECT_GE(BlobAri(name, 1, x), 0.95) << name;
    EXPECT_GE(BlobAri(name, 2, all), 0.95) << name;
    const v1::AssignResponse a1 = AssignStable(name, 1, x, kBlobDim, 3);
    const v1::AssignResponse a2 = AssignStable(name, 2, x, kBlobDim, 3);
    int same = 0;
    for (int i = 0; i < n; ++i) same += a1.stable_cluster(i) == a2.stable_cluster(i);
    EXPECT_GE(same, n * 95 / 100) << name;
  }
  EXPECT_EQ(Info("t", 2).metadata().at("warm_start_components"),
            Info("t", 1).metadata().at("surviving"));
  EXPECT_EQ(Info("g", 2).metadata().at("internal_nodes"), "20");
  EXPECT_EQ(Info("g", 2).metadata().at("warm_start_base_rows"), absl::StrCat(n));

  // A gHHC version with learned points cannot be continued: the refit runs
  // from scratch and says why.
  ghhc.clear_warm_start();
  ghhc.set_dataset_id(ds.id() + ":1");
  ghhc.set_model_name("learned");
  ghhc.mutable_ghhc()->set_points("learned");
  Run(ghhc);
  ghhc.set_dataset_id(ds.id());
  ghhc.mutable_warm_start()->set_name("learned");
  Run(ghhc);
  const v1::Model learned = Info("learned", 2);
  EXPECT_THAT(learned.metadata().at("warm_start_note"),
              HasSubstr("fitted from scratch: the version learned its point embeddings"));
  EXPECT_EQ(learned.metadata().count("warm_start_base_rows"), 0u);
}

TEST_F(EvolveServerTest, WhatCannotBeWarmStartedIsRefusedAtSubmit) {
  StartServer();
  const int k = 12;
  const std::vector<float> x = MakeLogits(600, 3, 4, 3);
  v1::Dataset a, b;
  ASSERT_TRUE(Upload(x, 600, k, &a).ok());
  ASSERT_TRUE(Upload(x, 600, k, &b).ok());
  Fit(a.id(), "base", /*tneb=*/false);
  auto submit = [&](const std::string& dataset, bool tneb, const std::string& from) {
    v1::JobSpec spec;
    spec.set_dataset_id(dataset);
    spec.set_model_name("next");
    if (tneb) {
      spec.mutable_tneb();
    } else {
      spec.mutable_l2h();
    }
    spec.mutable_warm_start()->set_name(from);
    grpc::Status st;
    SubmitSpec(spec, &st);
    return st;
  };
  grpc::Status st = submit(b.id(), false, "base");  // another dataset, same rows
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("not on this dataset's lineage"));
  st = submit(a.id(), true, "base");  // a t-NEB fit from an L2H version
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("a tneb fit can only warm-start from a tneb model"));
  {
    v1::JobSpec spec;
    spec.set_dataset_id(a.id());
    spec.set_model_name("classifier");
    spec.mutable_hppca();
    spec.mutable_warm_start()->set_name("base");
    grpc::Status hst;
    SubmitSpec(spec, &hst);
    EXPECT_EQ(hst.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(hst.error_message(), HasSubstr("warm_start is not available for hppca"));
  }
  st = submit(a.id(), false, "missing");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  // Its own dataset again: nothing new to pass over, and allowed.
  EXPECT_TRUE(submit(a.id(), false, "base").ok());
}

}  // namespace
}  // namespace dendro::server
