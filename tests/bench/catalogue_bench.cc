// Catalogue operations per second, SQLite vs PostgreSQL: the operations the
// server makes per job (put_job x3, commit_model, get_model) and per
// request (get_model), each timed over many repetitions on one thread.
//
//   build/tests/bench/catalogue_bench [--ops N]
//
// SQLite runs in a temporary directory on the same disk; PostgreSQL is a
// real postgres 15 the bench starts itself (tests/server/postgres_harness.h)
// with its default durability (fsync on, synchronous_commit on), reached over
// loopback TCP; SQLite runs with the catalogue's own WAL + synchronous=FULL.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "server/catalogue/catalogue.h"
#include "server/catalogue/open_catalogue.h"
#include "tests/server/postgres_harness.h"

namespace {

using dendro::server::Catalogue;
namespace v1 = dendro::v1;

double OpsPerSecond(int n, const std::function<void(int)>& op) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) op(i);
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return n / s;
}

void Bench(const char* label, Catalogue& cat, int n) {
  v1::Job job;
  job.mutable_spec()->set_dataset_id("ds-1");
  job.mutable_spec()->set_model_name("bench");
  const double put = OpsPerSecond(n, [&](int i) {
    job.set_id("job-" + std::to_string(i));
    if (!cat.PutJob(job).ok()) std::abort();
  });
  const double get_job = OpsPerSecond(n, [&](int i) {
    if (!cat.GetJob("job-" + std::to_string(i)).ok()) std::abort();
  });
  v1::Model model;
  model.set_name("bench");
  model.set_method("l2h");
  const double commit = OpsPerSecond(n, [&](int i) {
    job.set_id("job-" + std::to_string(i));
    job.set_state(v1::JOB_STATE_SUCCEEDED);
    if (!cat.CommitModel(model, "models/bench/" + std::to_string(i), job, 0).ok()) std::abort();
  });
  const double get_model = OpsPerSecond(n, [&](int) {
    if (!cat.GetModel("bench", 0, "").ok()) std::abort();
  });
  const double list = OpsPerSecond(n / 10 + 1, [&](int) {
    if (!cat.ListModels("bench", 0, 100).ok()) std::abort();
  });
  std::printf("%-10s  put_job %8.0f/s  get_job %8.0f/s  commit_model %8.0f/s  "
              "get_model %8.0f/s  list_models(100) %7.0f/s\n",
              label, put, get_job, commit, get_model, list);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--ops") == 0) n = std::atoi(argv[i + 1]);
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dendro_catalogue_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    auto sqlite = dendro::server::OpenCatalogue("", dir.string());
    if (!sqlite.ok()) {
      std::fprintf(stderr, "%s\n", sqlite.status().ToString().c_str());
      return 1;
    }
    Bench("sqlite", **sqlite, n);
  }
  auto& pg = dendro::testing::PostgresHarness::Get(/*durable=*/true);
  if (!pg.Available()) {
    std::fprintf(stderr, "postgres: skipped: %s\n", pg.Why().c_str());
  } else {
    auto postgres = dendro::server::OpenCatalogue(pg.NewDatabase(), dir.string());
    if (!postgres.ok()) {
      std::fprintf(stderr, "%s\n", postgres.status().ToString().c_str());
      return 1;
    }
    Bench("postgres", **postgres, n);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
