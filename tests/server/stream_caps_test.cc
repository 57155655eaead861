// The stream caps of a real in-process server (server/transport/stream_limiter.h):
// one caller cannot take the whole pool, admins keep a reserve, idle
// prediction streams and job watches are ended by the server, and WaitJob
// calls count against the same caps (each held a thread, unbounded).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dendro/v1/dendro.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/security/auth.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

class StreamCapsTest : public ServerTest {
 protected:
  // Starts a server with keys "reader-a", "reader-b" (readers) and "admin"
  // (each key is its own name), and a job that runs until cancelled.
  void StartWithKeys(ServerOptions opts) {
    std::filesystem::create_directories(dir_);
    const std::string keys = (dir_ / "keys").string();
    {
      std::ofstream f(keys);
      f << Sha256Hex("reader-a") << "  reader-a  reader\n"
        << Sha256Hex("reader-b") << "  reader-b  reader\n"
        << Sha256Hex("writer") << "  writer  writer\n"
        << Sha256Hex("admin") << "  admin  admin\n";
    }
    opts.auth_keys_file = keys;
    opts.resolve_method = [this](const v1::JobSpec&) -> absl::StatusOr<const Method*> {
      return &method_;
    };
    StartServer(opts);
    // A dataset and a job that runs (and so can be watched) until cancelled.
    const std::vector<float> x = MakeLogits(50, 3, 4, 9);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer writer");
    v1::Dataset ds;
    auto writer = datasets_->UploadDataset(&ctx, &ds);
    v1::UploadDatasetRequest req;
    req.mutable_header()->set_rows(50);
    req.mutable_header()->set_cols(12);
    ASSERT_TRUE(writer->Write(req));
    req.set_data(std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    ASSERT_TRUE(writer->Write(req));
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
    grpc::ClientContext sctx;
    sctx.AddMetadata("authorization", "Bearer writer");
    v1::SubmitJobRequest sreq;
    sreq.mutable_spec()->set_dataset_id(ds.id());
    sreq.mutable_spec()->set_model_name("held");
    sreq.mutable_spec()->mutable_l2h();
    v1::Job job;
    ASSERT_TRUE(jobs_->SubmitJob(&sctx, sreq, &job).ok());
    job_id_ = job.id();
    Eventually([&] { return method_.started.load() > 0; });
  }

  // Waits until `done` holds, for a minute at most (a bound, not a timing).
  template <typename Pred>
  static void Eventually(Pred done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // A watch of the running job opened with `key`: its first message has
  // arrived (the server holds a slot for it), or it was refused.
  struct Watch {
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReader<v1::Job>> reader;
    grpc::Status refused;  // set when the first Read failed
    bool open() const { return refused.ok(); }
  };
  Watch OpenWatch(const std::string& key) {
    Watch w;
    w.ctx->AddMetadata("authorization", "Bearer " + key);
    v1::WatchJobRequest req;
    req.set_id(job_id_);
    w.reader = jobs_->WatchJob(w.ctx.get(), req);
    v1::Job first;
    if (!w.reader->Read(&first)) {
      w.refused = w.reader->Finish();
      if (w.refused.ok()) w.refused = grpc::Status(grpc::StatusCode::UNKNOWN, "ended at once");
    }
    return w;
  }

  // Ends a watch from the client's side.
  static void Close(Watch& w) {
    if (!w.open()) return;
    w.ctx->TryCancel();
    v1::Job msg;
    while (w.reader->Read(&msg)) {
    }
    (void)w.reader->Finish();
    w.refused = grpc::Status(grpc::StatusCode::CANCELLED, "closed");
  }

  BlockingMethod method_;
  std::string job_id_;
};

// Before the per-caller cap, one reader could hold every slot and writers
// and admins got RESOURCE_EXHAUSTED until it left.
TEST_F(StreamCapsTest, OneCallerCannotTakeThePoolWhileAnotherStillGetsAStream) {
  ServerOptions opts;
  opts.max_streams = 4;             // per caller: half, 2
  opts.admin_reserved_streams = 0;  // this test is about the per-caller cap
  ASSERT_NO_FATAL_FAILURE(StartWithKeys(opts));
  std::vector<Watch> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(OpenWatch("reader-a"));
    ASSERT_TRUE(held.back().open()) << held.back().refused.error_message();
  }
  Watch third = OpenWatch("reader-a");
  EXPECT_EQ(third.refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(third.refused.error_message(), HasSubstr("--max_streams_per_caller"));
  EXPECT_THAT(third.refused.error_message(), HasSubstr("reader-a"));
  // Another caller still gets one, with slots left in the pool.
  Watch other = OpenWatch("reader-b");
  EXPECT_TRUE(other.open()) << other.refused.error_message();
  // A slot comes back when its stream ends; the first caller may open again.
  Close(held[0]);
  Watch again;
  for (int attempt = 0; attempt < 200; ++attempt) {  // the handler may still be unwinding
    again = OpenWatch("reader-a");
    if (again.open()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(again.open()) << again.refused.error_message();
  for (Watch* w : {&held[1], &other, &again}) Close(*w);
}

// The last slots are kept for admins: readers filling the rest cannot lock
// an admin out, and the refusal names the reserve.
TEST_F(StreamCapsTest, AnAdminGetsAStreamWhenReadersFilledTheRest) {
  ServerOptions opts;
  opts.max_streams = 4;
  opts.max_streams_per_caller = 2;
  opts.admin_reserved_streams = 1;
  ASSERT_NO_FATAL_FAILURE(StartWithKeys(opts));
  std::vector<Watch> held;
  for (const char* key : {"reader-a", "reader-a", "reader-b"}) {
    held.push_back(OpenWatch(key));
    ASSERT_TRUE(held.back().open()) << held.back().refused.error_message();
  }
  Watch reader = OpenWatch("reader-b");  // under its own cap, but the rest is reserved
  EXPECT_EQ(reader.refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(reader.refused.error_message(), HasSubstr("--admin_reserved_streams"));
  Watch writer = OpenWatch("writer");
  EXPECT_EQ(writer.refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  Watch admin = OpenWatch("admin");
  EXPECT_TRUE(admin.open()) << admin.refused.error_message();
  // Now the whole pool is taken, admins included.
  Watch second_admin = OpenWatch("admin");
  EXPECT_EQ(second_admin.refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(second_admin.refused.error_message(), HasSubstr("--max_streams"));
  for (Watch& w : held) Close(w);
  Close(admin);
}

// A prediction stream that sends nothing used to hold its slot for ever.
// The server ends it after the idle limit, with a status naming the limit,
// and the slot is free again.
TEST_F(StreamCapsTest, AnIdlePredictionStreamIsEndedAfterTheIdleLimit) {
  ServerOptions opts;
  opts.max_streams = 1;
  opts.stream_idle_timeout = absl::Milliseconds(300);
  StartServer(opts);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));  // a guard
  auto stream = models_->PredictStream(&ctx);
  v1::PredictResponse resp;
  EXPECT_FALSE(stream->Read(&resp));  // returns once the server ends the call
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("--stream_idle_seconds"));
  EXPECT_THAT(s.error_message(), HasSubstr("idle limit"));
  // The slot is freed (max_streams = 1).
  grpc::Status next;
  for (int attempt = 0; attempt < 200; ++attempt) {
    grpc::ClientContext ctx2;
    auto again = models_->PredictStream(&ctx2);
    again->WritesDone();
    EXPECT_FALSE(again->Read(&resp));
    next = again->Finish();
    if (next.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(next.ok()) << next.error_message();
}

// A watch whose job does not change (here: queued behind a job that never
// ends) is ended by the server after the idle limit, naming it.
TEST_F(StreamCapsTest, AWatchOfAnUnchangingJobIsEndedAfterTheIdleLimit) {
  ServerOptions opts;
  opts.stream_idle_timeout = absl::Milliseconds(500);
  ASSERT_NO_FATAL_FAILURE(StartWithKeys(opts));
  // The one worker is busy: a second job stays queued, unchanged.
  grpc::ClientContext sctx;
  sctx.AddMetadata("authorization", "Bearer writer");
  grpc::ClientContext gctx;
  gctx.AddMetadata("authorization", "Bearer writer");
  v1::Job running;
  v1::GetJobRequest greq;
  greq.set_id(job_id_);
  ASSERT_TRUE(jobs_->GetJob(&gctx, greq, &running).ok());
  v1::SubmitJobRequest sreq;
  *sreq.mutable_spec() = running.spec();
  v1::Job queued;
  ASSERT_TRUE(jobs_->SubmitJob(&sctx, sreq, &queued).ok());
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer reader-a");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));  // a guard
  v1::WatchJobRequest req;
  req.set_id(queued.id());
  auto reader = jobs_->WatchJob(&ctx, req);
  v1::Job msg;
  int messages = 0;
  while (reader->Read(&msg)) ++messages;
  const grpc::Status s = reader->Finish();
  EXPECT_GE(messages, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("--stream_idle_seconds"));
}

// 4,000 concurrent WaitJob calls made 4,033 server threads: each held a
// thread, uncounted. Now they take stream slots, and the calls beyond the
// cap are refused at once.
TEST_F(StreamCapsTest, WaitJobCallsBeyondTheStreamCapAreRefused) {
  ServerOptions opts;
  opts.max_streams = 4;
  opts.max_streams_per_caller = 4;
  opts.admin_reserved_streams = 0;
  ASSERT_NO_FATAL_FAILURE(StartWithKeys(opts));
  constexpr int kCalls = 12;
  std::atomic<int> done{0};
  std::vector<grpc::Status> statuses(kCalls);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", "Bearer reader-a");
      v1::WaitJobRequest req;
      req.set_id(job_id_);
      req.mutable_timeout()->set_seconds(300);
      v1::Job job;
      statuses[i] = jobs_->WaitJob(&ctx, req, &job);
      done.fetch_add(1);
    });
  }
  // Those beyond the cap come back at once; the others wait for the job.
  Eventually([&] { return done.load() >= kCalls - opts.max_streams; });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(done.load(), kCalls - opts.max_streams);
  grpc::ClientContext cctx;
  cctx.AddMetadata("authorization", "Bearer admin");
  v1::CancelJobRequest creq;
  creq.set_id(job_id_);
  v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&cctx, creq, &cancelled).ok());
  for (auto& t : callers) t.join();
  int ok = 0, refused = 0;
  for (const grpc::Status& s : statuses) {
    if (s.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("wait job"));
      EXPECT_THAT(s.error_message(), HasSubstr("--max_streams"));
      ++refused;
    }
  }
  EXPECT_EQ(ok, opts.max_streams);
  EXPECT_EQ(refused, kCalls - opts.max_streams);
}

}  // namespace
}  // namespace dendro::server
