// A test fixture parameterised over the two catalogues: GetParam() is
// "sqlite" (a file in a fresh temporary directory) or "postgres" (a fresh
// database of the process-wide PostgreSQL 15, postgres_harness.h; the test
// is skipped, with the reason, when PostgreSQL cannot start). Instantiate
// with
//   INSTANTIATE_TEST_SUITE_P(Both, MyTest, ::testing::Values("sqlite", "postgres"),
//                            [](const auto& info) { return info.param; });
#ifndef DENDRO_TESTS_SERVER_CATALOGUE_FIXTURE_H_
#define DENDRO_TESTS_SERVER_CATALOGUE_FIXTURE_H_

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/catalogue/catalogue.h"
#include "server/catalogue/open_catalogue.h"
#include "tests/server/postgres_harness.h"

namespace dendro::testing {

class BothCataloguesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dendro_catalogue_fixture_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    if (GetParam() == "postgres") {
      auto& pg = PostgresHarness::Get();
      if (!pg.Available()) GTEST_SKIP() << "PostgreSQL not available: " << pg.Why();
      spec_ = pg.NewDatabase();
    }
    auto opened = server::OpenCatalogue(spec_, dir_.string());
    ASSERT_TRUE(opened.ok()) << opened.status();
    cat_ = *std::move(opened);
  }
  void TearDown() override {
    cat_.reset();
    std::filesystem::remove_all(dir_);
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string spec_;  // "" (SQLite in dir_) or the PostgreSQL database's URI
  std::unique_ptr<server::Catalogue> cat_;
};

}  // namespace dendro::testing

#endif  // DENDRO_TESTS_SERVER_CATALOGUE_FIXTURE_H_
