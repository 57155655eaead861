// The "hppca" classifier through dendrod in-process over real gRPC, on a
// synthetic two-level class hierarchy: training job, super-class recovery,
// unary and streaming Predict at T = 1..5 and flat (against the core model),
// growing a model (hppca_add) vs training on all classes at once, reload
// after a restart, concurrent single-row calls computed in batches, and
// clean errors for bad input.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/hierarchy/export.h"
#include "core/hppca/hppca.h"
#include "core/hppca/synthetic.h"
#include "core/metrics/metrics.h"
#include "dendro/v1/dendro.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/api/api.h"
#include "tests/server/server_fixture.h"

// Last: it brings <resolv.h>, whose `_res` macro breaks Eigen's headers.
#include <httplib.h>

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

TwoLevelSpec Spec() {
  TwoLevelSpec spec;
  spec.groups = 8;
  spec.classes_per_group = 8;
  spec.dim = 32;
  spec.group_rank = 4;
  spec.class_rank = 4;
  spec.group_spread = 0.12;
  spec.class_spread = 0.12;
  spec.group_scale = 0.6;
  spec.class_scale = 0.3;
  spec.noise = 0.2;
  spec.seed = 3;
  spec.label_offset = 500;
  spec.label_stride = 11;
  return spec;
}

v1::HppcaTrainParams Params() {
  v1::HppcaTrainParams p;
  p.set_superclasses(8);
  p.set_q(8);
  p.set_r(8);
  p.set_seed(1);
  return p;
}

HppcaOptions CoreOptions() {
  HppcaOptions o;
  o.superclasses = 8;
  o.q = 8;
  o.r = 8;
  o.seed = 1;
  return o;
}

class HppcaServerTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    gen_ = std::make_unique<TwoLevelGenerator>(Spec());
    train_ = gen_->Sample(50, 1);
    test_ = gen_->Sample(20, 2);
  }

  grpc::Status Upload(const RowMatrixF& x, const std::vector<int64_t>* labels, v1::Dataset* out) {
    const std::vector<float> rows(x.data(), x.data() + x.size());
    return ServerTest::Upload(rows, x.rows(), x.cols(), out, labels);
  }

  // Submits `spec` and waits for it to end.
  v1::Job Run(const v1::JobSpec& spec, grpc::Status* st) {
    v1::Job job = SubmitSpec(spec, st);
    return st->ok() ? Wait(job.id()) : job;
  }

  v1::Job Train(const std::string& dataset, const std::string& name, grpc::Status* st) {
    v1::JobSpec spec;
    spec.set_dataset_id(dataset);
    spec.set_model_name(name);
    *spec.mutable_hppca() = Params();
    return Run(spec, st);
  }

  // Starts the server with `opts` and trains the model "clf" on train_.
  void StartWithClassifier(const ServerOptions& opts) {
    StartServer(opts);
    v1::Dataset ds;
    ASSERT_TRUE(Upload(train_.x, &train_.labels, &ds).ok());
    grpc::Status st;
    ASSERT_EQ(Train(ds.id(), "clf", &st).state(), v1::JOB_STATE_SUCCEEDED) << st.error_message();
  }

  static v1::PredictRequest Request(const std::string& model, const RowMatrixF& x, int64_t r0,
                                    int64_t n, int32_t top_t, int32_t top_k, bool flat) {
    v1::PredictRequest req;
    req.mutable_model()->set_name(model);
    req.set_rows(n);
    req.set_cols(x.cols());
    req.set_data(std::string(reinterpret_cast<const char*>(x.data() + r0 * x.cols()),
                             n * x.cols() * sizeof(float)));
    req.set_top_t(top_t);
    req.set_top_k(top_k);
    req.set_flat(flat);
    return req;
  }

  grpc::Status Predict(const v1::PredictRequest& req, v1::PredictResponse* resp) {
    grpc::ClientContext ctx;
    return models_->Predict(&ctx, req, resp);
  }

  double Accuracy(const v1::PredictResponse& resp) const {
    int64_t ok = 0;
    for (int64_t i = 0; i < resp.rows(); ++i) ok += resp.labels(i * resp.top_k()) == test_.labels[i];
    return static_cast<double>(ok) / static_cast<double>(resp.rows());
  }

  std::unique_ptr<TwoLevelGenerator> gen_;
  LabelledData train_, test_;
};

TEST_F(HppcaServerTest, TrainPredictStreamAndReload) {
  StartServer();
  v1::Dataset ds;
  ASSERT_TRUE(Upload(train_.x, &train_.labels, &ds).ok());
  grpc::Status st;
  v1::Job job = Train(ds.id(), "clf", &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();

  // The model in the registry.
  grpc::ClientContext gctx;
  v1::GetModelRequest greq;
  greq.mutable_model()->set_name("clf");
  v1::Model info;
  ASSERT_TRUE(models_->GetModel(&gctx, greq, &info).ok());
  EXPECT_EQ(info.method(), "hppca");
  EXPECT_EQ(info.num_leaves(), 64);
  EXPECT_EQ(info.input_dim(), 32);
  EXPECT_EQ(info.metadata().at("superclasses"), "8");

  // Super-class recovery from the served unrefined tree (classes under
  // super-classes under the root): leaves' parents vs groups.
  auto get_tree = [&](bool unrefined) -> absl::StatusOr<Hierarchy> {
    grpc::ClientContext tctx;
    v1::GetTreeRequest treq;
    treq.mutable_model()->set_name("clf");
    treq.set_format(v1::TREE_FORMAT_JSON);
    treq.set_unrefined(unrefined);
    v1::GetTreeResponse tresp;
    grpc::Status s = models_->GetTree(&tctx, treq, &tresp);
    if (!s.ok()) return absl::InternalError(s.error_message());
    return ParseJson(tresp.content());
  };
  auto tree = get_tree(/*unrefined=*/true);
  ASSERT_TRUE(tree.ok()) << tree.status();
  ASSERT_EQ(tree->num_leaves(), 64);
  EXPECT_FALSE(tree->is_binary());
  // The default tree is its binary refinement: every cut is reachable, and
  // cutting it into the 8 super-classes gives exactly the unrefined tree's.
  auto refined = get_tree(/*unrefined=*/false);
  ASSERT_TRUE(refined.ok()) << refined.status();
  EXPECT_TRUE(refined->is_binary());
  EXPECT_EQ(refined->ReachableLevels().size(), 64u);
  auto cut = refined->CutToK(8);
  ASSERT_TRUE(cut.ok()) << cut.status();
  std::vector<int64_t> truth(64), parent(64);
  for (int32_t c = 0; c < 64; ++c) {
    // Leaf c is the c-th smallest label; labels ascend with the generator's class.
    truth[c] = gen_->group_of(c);
    parent[c] = tree->parent(c);
  }
  auto ari = AdjustedRandIndex(truth, parent);
  ASSERT_TRUE(ari.ok());
  std::printf("super-class ARI vs generating groups: %.4f\n", *ari);
  EXPECT_GT(*ari, 0.6);

  // The same model fitted in-process.
  NullRunContext null_ctx;
  auto core = FitHppca(MatrixView(train_.x.data(), train_.x.rows(), train_.x.cols()),
                       train_.labels, CoreOptions(), null_ctx);
  ASSERT_TRUE(core.ok());

  // GetClasses: the core model's labels, super-classes and counts; classes
  // that share a super-class share a parent in the served tree.
  {
    grpc::ClientContext cctx;
    v1::GetClassesRequest creq;
    creq.mutable_model()->set_name("clf");
    v1::GetClassesResponse classes;
    ASSERT_TRUE(models_->GetClasses(&cctx, creq, &classes).ok());
    EXPECT_EQ(classes.model_version(), 1);
    EXPECT_EQ(classes.num_superclasses(), 8);
    ASSERT_EQ(classes.labels_size(), 64);
    ASSERT_EQ(classes.superclasses_size(), 64);
    ASSERT_EQ(classes.train_counts_size(), 64);
    for (int32_t c = 0; c < 64; ++c) {
      EXPECT_EQ(classes.labels(c), core->labels()[c]);
      EXPECT_EQ(classes.superclasses(c), core->superclass_of(c));
      EXPECT_EQ(classes.train_counts(c), core->class_count(c));
      for (int32_t o = 0; o < c; ++o) {
        const bool same = classes.superclasses(o) == classes.superclasses(c);
        if (same) {
          EXPECT_EQ(tree->parent(o), tree->parent(c)) << "classes " << o << ", " << c;
        }
        EXPECT_EQ((*cut)[o] == (*cut)[c], same) << "classes " << o << ", " << c;
      }
    }
  }
  const MatrixView xtest(test_.x.data(), test_.x.rows(), test_.x.cols());
  const int64_t n = test_.x.rows();

  v1::PredictResponse flat;
  ASSERT_TRUE(Predict(Request("clf", test_.x, 0, n, 0, 2, true), &flat).ok());
  EXPECT_EQ(flat.top_t(), 0);
  EXPECT_EQ(flat.top_k(), 2);
  EXPECT_EQ(flat.superclasses_size(), 0);
  const double flat_acc = Accuracy(flat);
  double prev_agree = 0.0, acc_t1 = 0.0, acc_t5 = 0.0;
  for (int32_t t = 1; t <= 5; ++t) {
    v1::PredictResponse resp;
    ASSERT_TRUE(Predict(Request("clf", test_.x, 0, n, t, 2, false), &resp).ok());
    ASSERT_EQ(resp.rows(), n);
    EXPECT_EQ(resp.top_t(), t);
    ASSERT_EQ(resp.labels_size(), 2 * n);
    ASSERT_EQ(resp.superclasses_size(), t * n);
    ASSERT_EQ(resp.classes_evaluated_size(), n);
    HppcaPredictOptions po;
    po.top_t = t;
    po.top_k = 2;
    auto want = core->Predict(xtest, po);
    ASSERT_TRUE(want.ok());
    int64_t agree = 0;
    for (int64_t i = 0; i < 2 * n; ++i) {
      EXPECT_EQ(resp.labels(i), want->labels[i]);
      EXPECT_NEAR(resp.scores(i), want->scores[i], 1e-4 * std::fabs(want->scores[i]) + 1e-3);
    }
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(resp.classes_evaluated(i), want->classes_evaluated[i]);
      agree += resp.labels(i * 2) == flat.labels(i * 2);
    }
    const double agree_frac = static_cast<double>(agree) / n;
    std::printf("T=%d: accuracy %.4f (flat %.4f), agreement with flat %.4f\n", t, Accuracy(resp),
                flat_acc, agree_frac);
    EXPECT_GE(agree_frac, prev_agree);
    prev_agree = agree_frac;
    if (t == 1) acc_t1 = Accuracy(resp);
    if (t == 5) acc_t5 = Accuracy(resp);
  }
  EXPECT_LE(acc_t1, flat_acc + 0.02);
  EXPECT_NEAR(acc_t5, flat_acc, 0.01);

  // Streaming: rows in, predictions out, in order.
  {
    grpc::ClientContext sctx;
    auto stream = models_->PredictStream(&sctx);
    const int64_t chunk = 200;
    int64_t sent = 0;
    std::vector<v1::PredictResponse> got;
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
      const int64_t m = std::min(chunk, n - r0);
      ASSERT_TRUE(stream->Write(Request("clf", test_.x, r0, m, 3, 1, false)));
      ++sent;
    }
    stream->WritesDone();
    v1::PredictResponse resp;
    while (stream->Read(&resp)) got.push_back(resp);
    ASSERT_TRUE(stream->Finish().ok());
    ASSERT_EQ(static_cast<int64_t>(got.size()), sent);
    v1::PredictResponse whole;
    ASSERT_TRUE(Predict(Request("clf", test_.x, 0, n, 3, 1, false), &whole).ok());
    int64_t row = 0;
    for (const auto& r : got) {
      for (int64_t i = 0; i < r.rows(); ++i, ++row) EXPECT_EQ(r.labels(i), whole.labels(row));
    }
    EXPECT_EQ(row, n);
  }

  // Assign: the top-1 class (the leaf) at the default T.
  {
    grpc::ClientContext actx;
    v1::AssignRequest areq;
    areq.mutable_model()->set_name("clf");
    areq.set_rows(n);
    areq.set_cols(32);
    areq.set_data(std::string(reinterpret_cast<const char*>(test_.x.data()), n * 32 * 4));
    v1::AssignResponse aresp;
    ASSERT_TRUE(models_->Assign(&actx, areq, &aresp).ok());
    auto want = core->Predict(xtest, {});
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(aresp.leaf_size(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(aresp.leaf(i), want->classes[i]);
  }

  // After a restart the model is read back from disk and predicts the same.
  StopServer();
  StartServer();
  v1::PredictResponse again;
  ASSERT_TRUE(Predict(Request("clf", test_.x, 0, n, 0, 2, true), &again).ok());
  for (int64_t i = 0; i < 2 * n; ++i) {
    EXPECT_EQ(again.labels(i), flat.labels(i));
    EXPECT_EQ(again.scores(i), flat.scores(i));
  }
}

// A counter from the server's /metrics page (-1 when absent).
double MetricValue(int port, const std::string& name) {
  httplib::Client cli("127.0.0.1", port);
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return -1;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

// Dynamic batching (server/api/batcher.h): single-row flat Predict calls (where
// hierarchical PPCA says batching pays) from concurrent callers, computed in
// batches behind a one-slot gate, get the answers each row gets alone: the
// same classes and classes scored; scores equal up to float rounding (a
// batch's rows are scored by one matrix product, whose sums may round
// differently from a single row's). Hierarchical Predict and Assign calls
// made at the same time are batched too where the model screens rows in
// binary16 (HppcaModel::screens_rows), and their answers, scores included,
// are exactly those of each row alone.
TEST_F(HppcaServerTest, ConcurrentSingleRowCallsAreBatchedAndAnswerAsAlone) {
  ServerOptions opts;
  opts.serving_concurrency = 1;
  opts.batch_max_rows = 16;
  opts.metrics_listen = "127.0.0.1:0";
  StartWithClassifier(opts);
  ASSERT_FALSE(HasFatalFailure());
  const int64_t n = 480;
  auto assign_one = [&](int64_t row, v1::AssignResponse* out) {
    v1::AssignRequest req;
    req.mutable_model()->set_name("clf");
    req.set_rows(1);
    req.set_cols(test_.x.cols());
    req.set_data(std::string(reinterpret_cast<const char*>(test_.x.data() + row * test_.x.cols()),
                             test_.x.cols() * sizeof(float)));
    req.set_level(8);
    grpc::ClientContext ctx;
    return models_->Assign(&ctx, req, out);
  };
  // Alone: one call at a time, so nothing to batch with.
  std::vector<v1::PredictResponse> alone(n), alone_hier(n);
  std::vector<v1::AssignResponse> alone_assign(n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(Predict(Request("clf", test_.x, i, 1, 0, 3, true), &alone[i]).ok());
    ASSERT_TRUE(Predict(Request("clf", test_.x, i, 1, 2, 3, false), &alone_hier[i]).ok());
    ASSERT_TRUE(assign_one(i, &alone_assign[i]).ok());
  }
  ASSERT_EQ(MetricValue(server_->metrics_port(), "dendro_serving_batches_total"), 0);
  // Together: eight callers, each its share of the rows.
  std::vector<v1::PredictResponse> together(n), together_hier(n);
  std::vector<v1::AssignResponse> together_assign(n);
  std::vector<std::thread> callers;
  std::atomic<int> failed{0};
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += 8) {
        if (!Predict(Request("clf", test_.x, i, 1, 0, 3, true), &together[i]).ok()) ++failed;
        if (!Predict(Request("clf", test_.x, i, 1, 2, 3, false), &together_hier[i]).ok()) {
          ++failed;
        }
        if (!assign_one(i, &together_assign[i]).ok()) ++failed;
      }
    });
  }
  for (std::thread& c : callers) c.join();
  ASSERT_EQ(failed.load(), 0);
  const double batched =
      MetricValue(server_->metrics_port(), "dendro_serving_batched_calls_total");
  std::printf("calls answered in batches: %.0f of %lld\n", batched,
              static_cast<long long>(3 * n));
  EXPECT_GT(batched, 0);
  // Unary calls wait for their batch on threads of their own, not on gRPC's
  // callback threads (idle ones retire only after 10 s).
  EXPECT_GE(MetricValue(server_->metrics_port(), "dendro_serving_wait_threads"), 1);
  double max_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    const v1::PredictResponse& a = alone[i];
    const v1::PredictResponse& b = together[i];
    ASSERT_EQ(b.rows(), 1);
    EXPECT_EQ(b.top_k(), a.top_k());
    EXPECT_EQ(b.top_t(), a.top_t());
    EXPECT_THAT(b.labels(), ::testing::ElementsAreArray(a.labels())) << "row " << i;
    EXPECT_THAT(b.superclasses(), ::testing::ElementsAreArray(a.superclasses())) << "row " << i;
    EXPECT_THAT(b.classes_evaluated(), ::testing::ElementsAreArray(a.classes_evaluated()));
    ASSERT_EQ(b.scores_size(), a.scores_size());
    for (int j = 0; j < a.scores_size(); ++j) {
      EXPECT_NEAR(b.scores(j), a.scores(j), 1e-5 * std::fabs(a.scores(j)) + 1e-4) << "row " << i;
      max_diff = std::max<double>(max_diff, std::fabs(b.scores(j) - a.scores(j)) /
                                                (1e-5 * std::fabs(a.scores(j)) + 1e-4));
    }
    EXPECT_THAT(together_hier[i].labels(), ::testing::ElementsAreArray(alone_hier[i].labels()));
    EXPECT_THAT(together_hier[i].scores(), ::testing::ElementsAreArray(alone_hier[i].scores()));
    EXPECT_THAT(together_hier[i].superclasses(),
                ::testing::ElementsAreArray(alone_hier[i].superclasses()));
    EXPECT_THAT(together_assign[i].leaf(), ::testing::ElementsAreArray(alone_assign[i].leaf()));
    EXPECT_THAT(together_assign[i].cluster(),
                ::testing::ElementsAreArray(alone_assign[i].cluster()));
  }
  std::printf("largest score difference, batched vs alone: %.3g of the tolerance\n", max_diff);
}

// Unary Predict and Assign run on gRPC's callback threads, which must not
// block: a small call with a slot free computes there and starts no thread;
// a call of more than kMaxRowsInline rows is handed to a waiting thread
// (the elastic pool), so that it does not hold up the small calls behind
// it, with the model and rows it was checked with (one model load for the
// call, not one per thread); both answer as before, each row as it is
// answered alone.
TEST_F(HppcaServerTest, SmallCallsComputeOnTheCallbackThreadAndLargeOnesAreHandedOn) {
  ServerOptions opts;
  opts.metrics_listen = "127.0.0.1:0";
  StartWithClassifier(opts);
  ASSERT_FALSE(HasFatalFailure());
  const int64_t n = kMaxRowsInline + 1;
  ASSERT_LE(n, test_.x.rows());
  std::vector<v1::PredictResponse> one(n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(Predict(Request("clf", test_.x, i, 1, 2, 3, false), &one[i]).ok());
  }
  EXPECT_EQ(MetricValue(server_->metrics_port(), "dendro_serving_wait_threads"), 0);
  auto loads = [&] {
    return MetricValue(server_->metrics_port(), "dendro_model_cache_hits_total") +
           MetricValue(server_->metrics_port(), "dendro_model_cache_misses_total");
  };
  const double loads_before = loads();
  v1::PredictResponse all;
  ASSERT_TRUE(Predict(Request("clf", test_.x, 0, n, 2, 3, false), &all).ok());
  EXPECT_EQ(MetricValue(server_->metrics_port(), "dendro_serving_wait_threads"), 1);
  EXPECT_EQ(loads() - loads_before, 1);
  ASSERT_EQ(all.labels_size(), 3 * n);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(all.labels(3 * i + j), one[i].labels(j)) << "row " << i;
  }
}

TEST_F(HppcaServerTest, GrowingMatchesTrainingOnAllClassesAtOnce) {
  StartServer();
  const LabelledData old_part = gen_->Sample(50, 1, 0, 48);
  const LabelledData new_part = gen_->Sample(50, 1, 48, 64);
  v1::Dataset all, base_ds, add_ds;
  ASSERT_TRUE(Upload(train_.x, &train_.labels, &all).ok());
  ASSERT_TRUE(Upload(old_part.x, &old_part.labels, &base_ds).ok());
  ASSERT_TRUE(Upload(new_part.x, &new_part.labels, &add_ds).ok());
  grpc::Status st;
  ASSERT_EQ(Train(all.id(), "full", &st).state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(Train(base_ds.id(), "grow", &st).state(), v1::JOB_STATE_SUCCEEDED);
  v1::JobSpec spec;
  spec.set_dataset_id(add_ds.id());
  spec.mutable_hppca_add()->mutable_base()->set_name("grow");
  v1::Job job = Run(spec, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error().message();
  EXPECT_EQ(job.model_name(), "grow");
  EXPECT_EQ(job.model_version(), 2);
  const int64_t n = test_.x.rows();
  for (int32_t t : {1, 3, 5}) {
    v1::PredictResponse a, b;
    ASSERT_TRUE(Predict(Request("full", test_.x, 0, n, t, 1, false), &a).ok());
    ASSERT_TRUE(Predict(Request("grow", test_.x, 0, n, t, 1, false), &b).ok());
    EXPECT_NEAR(Accuracy(b), Accuracy(a), t == 1 ? 0.03 : 0.015) << "T=" << t;
  }
  // The grown model knows all 64 classes; version 1 still only 48.
  v1::PredictResponse flat_full, flat_grown, flat_v1;
  ASSERT_TRUE(Predict(Request("full", test_.x, 0, n, 0, 1, true), &flat_full).ok());
  ASSERT_TRUE(Predict(Request("grow", test_.x, 0, n, 0, 1, true), &flat_grown).ok());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(flat_grown.labels(i), flat_full.labels(i));
  auto v1_req = Request("grow", test_.x, 0, n, 0, 1, true);
  v1_req.mutable_model()->set_version(1);
  ASSERT_TRUE(Predict(v1_req, &flat_v1).ok());
  std::set<int64_t> v1_labels(flat_v1.labels().begin(), flat_v1.labels().end());
  EXPECT_LE(v1_labels.size(), 48u);

  // Adding labels the model already has fails the job with a clear error.
  spec.set_dataset_id(base_ds.id());
  job = Run(spec, &st);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.error().message(), HasSubstr("already a class of the model"));
  // Unknown base model: refused at submit.
  spec.mutable_hppca_add()->mutable_base()->set_name("nope");
  Run(spec, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(HppcaServerTest, BadInputGetsCleanErrors) {
  StartServer();
  grpc::Status st;
  // Unlabelled dataset: refused at submit.
  v1::Dataset unlabelled;
  ASSERT_TRUE(Upload(train_.x, nullptr, &unlabelled).ok());
  Train(unlabelled.id(), "x", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("labelled dataset"));
  // q larger than d: refused at submit.
  v1::Dataset ds;
  ASSERT_TRUE(Upload(train_.x, &train_.labels, &ds).ok());
  {
    v1::JobSpec spec;
    spec.set_dataset_id(ds.id());
    spec.set_model_name("x");
    *spec.mutable_hppca() = Params();
    spec.mutable_hppca()->set_q(40);
    Run(spec, &st);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("q = 40"));
  }
  // A class with a single point: refused at submit from the upload's
  // statistics, naming the label.
  {
    std::vector<int64_t> labels = train_.labels;
    labels[7] = 424242;
    v1::Dataset one;
    ASSERT_TRUE(Upload(train_.x, &labels, &one).ok());
    EXPECT_EQ(one.stats().smallest_class_label(), 424242);
    Train(one.id(), "x", &st);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("class label 424242 of dataset " + one.id() +
                                              " has 1 training row"));
  }
  ASSERT_EQ(Train(ds.id(), "clf", &st).state(), v1::JOB_STATE_SUCCEEDED);
  v1::PredictResponse resp;
  // Wrong d.
  RowMatrixF narrow = RowMatrixF::Zero(3, 31);
  st = Predict(Request("clf", narrow, 0, 3, 0, 1, false), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // NaN.
  RowMatrixF bad = test_.x.topRows(4);
  bad(1, 6) = std::numeric_limits<float>::quiet_NaN();
  st = Predict(Request("clf", bad, 0, 4, 0, 1, false), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("NaN"));
  // Unknown model.
  st = Predict(Request("nope", test_.x, 0, 4, 0, 1, false), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  // Streaming: a bad request ends the stream with its error.
  {
    grpc::ClientContext sctx;
    auto stream = models_->PredictStream(&sctx);
    ASSERT_TRUE(stream->Write(Request("clf", test_.x, 0, 4, 0, 1, false)));
    v1::PredictResponse first;
    ASSERT_TRUE(stream->Read(&first));
    EXPECT_EQ(first.rows(), 4);
    stream->Write(Request("clf", narrow, 0, 3, 0, 1, false));
    stream->WritesDone();
    v1::PredictResponse ignored;
    while (stream->Read(&ignored)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Growing a model that is not a classifier.
  {
    std::vector<float> logits(40 * 4);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7) % 5);
    RowMatrixF lx = Eigen::Map<RowMatrixF>(logits.data(), 40, 4);
    v1::Dataset lds;
    ASSERT_TRUE(Upload(lx, nullptr, &lds).ok());
    v1::JobSpec l2h;
    l2h.set_dataset_id(lds.id());
    l2h.set_model_name("tree");
    l2h.mutable_l2h();
    ASSERT_EQ(Run(l2h, &st).state(), v1::JOB_STATE_SUCCEEDED);
    // Predict on a clustering model.
    st = Predict(Request("tree", lx, 0, 4, 0, 1, false), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    // ... and its class table.
    grpc::ClientContext cctx;
    v1::GetClassesRequest creq;
    creq.mutable_model()->set_name("tree");
    v1::GetClassesResponse classes;
    st = models_->GetClasses(&cctx, creq, &classes);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(st.error_message(), HasSubstr("not a classifier"));
    v1::JobSpec add;
    add.set_dataset_id(ds.id());
    add.mutable_hppca_add()->mutable_base()->set_name("tree");
    // Refused at submit: the base's method is known from the catalogue.
    Run(add, &st);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(st.error_message(), HasSubstr("only hppca models can be extended"));
  }
}

}  // namespace
}  // namespace dendro::server
