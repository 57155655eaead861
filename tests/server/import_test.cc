// Same-host import (DatasetService.ImportDataset) against a real in-process
// server: what is read and how it is stored (linked or copied), and every
// way out of the allowed directories the kernel must refuse.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/io/npy.h"
#include "gmock/gmock.h"
#include "server/storage/checksum.h"
#include "tests/server/server_fixture.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ImportTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    if (IsSkipped()) return;
    root_ = dir_.string() + "-in";
    outside_ = dir_.string() + "-out";
    std::filesystem::remove_all(root_);
    std::filesystem::remove_all(outside_);
    std::filesystem::create_directories(root_ + "/sub");
    std::filesystem::create_directories(outside_);
  }
  void TearDown() override {
    ServerTest::TearDown();
    std::filesystem::remove_all(root_);
    std::filesystem::remove_all(outside_);
  }
  void StartImporting() {
    ServerOptions o;
    o.import_dirs = {root_};
    StartServer(o);
  }

  // rows x cols, element (r, c) = r + c / 10, as float32 .npy at `path`.
  static std::vector<float> WriteMatrix(const std::string& path, int64_t rows, int64_t cols) {
    std::vector<float> x;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) x.push_back(static_cast<float>(r) + 0.1f * c);
    }
    const int64_t shape[2] = {rows, cols};
    EXPECT_TRUE(WriteNpy(path, absl::MakeConstSpan(x), shape).ok());
    return x;
  }
  // A .npy with a header dict written by hand (dtype and order numpy may
  // write but datasets are not stored as), and `data_bytes` zero bytes.
  static void WriteRaw(const std::string& path, const std::string& dict, size_t data_bytes) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string out = "\x93NUMPY\x01";
    out += '\0';
    out += static_cast<char>(header.size() & 0xff);
    out += static_cast<char>(header.size() >> 8);
    out += header;
    out += std::string(data_bytes, '\0');
    std::ofstream(path, std::ios::binary) << out;
  }
  static int Links(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_nlink) : -1;
  }

  grpc::Status Import(const std::string& path, v1::Dataset* out, bool transient = true,
                      const std::vector<int64_t>* labels = nullptr, int64_t rows = 0) {
    grpc::ClientContext ctx;
    v1::ImportDatasetRequest req;
    req.set_path(path);
    req.mutable_header()->set_transient(transient);
    req.mutable_header()->set_rows(rows);
    if (labels != nullptr) {
      req.mutable_header()->set_has_labels(true);
      req.set_labels(std::string(reinterpret_cast<const char*>(labels->data()),
                                 labels->size() * sizeof(int64_t)));
    }
    return datasets_->ImportDataset(&ctx, req, out);
  }
  std::string Newick(const v1::Job& job) {
    grpc::ClientContext ctx;
    v1::GetTreeRequest req;
    req.mutable_model()->set_name(job.model_name());
    req.mutable_model()->set_version(job.model_version());
    req.set_format(v1::TREE_FORMAT_NEWICK);
    v1::GetTreeResponse resp;
    EXPECT_TRUE(models_->GetTree(&ctx, req, &resp).ok());
    return resp.content();
  }

  std::string root_;
  std::string outside_;
};

TEST_F(ImportTest, RefusedWithoutImportDirs) {
  StartServer();
  const std::string path = root_ + "/x.npy";
  WriteMatrix(path, 10, 3);
  v1::Dataset ds;
  const grpc::Status st = Import(path, &ds);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("--import_dirs"));
}

TEST_F(ImportTest, TransientImportIsALinkAndFitsLikeAnUpload) {
  StartImporting();
  const std::string path = root_ + "/sub/x.npy";
  const std::vector<float> x = WriteMatrix(path, 300, 6);
  v1::Dataset imported;
  ASSERT_TRUE(Import(path, &imported).ok());
  EXPECT_EQ(imported.rows(), 300);
  EXPECT_EQ(imported.cols(), 6);
  EXPECT_TRUE(imported.transient());
  EXPECT_TRUE(imported.stats().computed());
  // The same file, not a copy: one more link, and its own checksum.
  EXPECT_EQ(Links(path), 2);
  absl::StatusOr<std::string> sum = ChecksumFile(path);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(imported.checksums().at("X.npy"), *sum);

  v1::Dataset uploaded;
  ASSERT_TRUE(Upload(x, 300, 6, &uploaded).ok());
  grpc::Status st;
  const v1::Job a = Wait(Submit(imported.id(), "imported", &st).id());
  ASSERT_TRUE(st.ok()) << st.error_message();
  const v1::Job b = Wait(Submit(uploaded.id(), "uploaded", &st).id());
  ASSERT_EQ(a.state(), v1::JOB_STATE_SUCCEEDED) << a.error().message();
  ASSERT_EQ(b.state(), v1::JOB_STATE_SUCCEEDED) << b.error().message();
  EXPECT_EQ(Newick(a), Newick(b));
  // The transient dataset, and so the link, goes with its job.
  for (int i = 0; i < 100 && Links(path) != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Links(path), 1);
}

TEST_F(ImportTest, DurableImportIsACopyWithLabels) {
  StartImporting();
  const std::string path = root_ + "/x.npy";
  WriteMatrix(path, 40, 3);
  std::vector<int64_t> y(40);
  for (int i = 0; i < 40; ++i) y[i] = i % 4;
  v1::Dataset ds;
  ASSERT_TRUE(Import(path, &ds, /*transient=*/false, &y).ok());
  EXPECT_FALSE(ds.transient());
  EXPECT_TRUE(ds.has_labels());
  EXPECT_EQ(ds.stats().num_classes(), 4);
  EXPECT_EQ(Links(path), 1);
  // Rewriting the source leaves the stored rows alone.
  WriteMatrix(path, 40, 3 + 1);
  absl::StatusOr<std::string> stored =
      ChecksumFile(dir_.string() + "/datasets/" + ds.id() + "/X.npy");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(*stored, ds.checksums().at("X.npy"));
  v1::Dataset again;
  grpc::ClientContext ctx;
  v1::GetDatasetRequest get;
  get.set_id(ds.id());
  ASSERT_TRUE(datasets_->GetDataset(&ctx, get, &again).ok());
  EXPECT_EQ(again.rows(), 40);
}

TEST_F(ImportTest, NoPathLeadsOutOfTheDirectories) {
  StartImporting();
  WriteMatrix(outside_ + "/secret.npy", 5, 2);
  WriteMatrix(root_ + "/ok.npy", 5, 2);
  std::filesystem::create_symlink(outside_ + "/secret.npy", root_ + "/absolute_link.npy");
  std::filesystem::create_symlink(
      "../" + std::filesystem::path(outside_).filename().string() + "/secret.npy",
      root_ + "/climbing_link.npy");
  std::filesystem::create_symlink("/proc/self/root" + outside_ + "/secret.npy",
                                  root_ + "/proc_link.npy");
  std::filesystem::create_symlink("../ok.npy", root_ + "/sub/inside_link.npy");
  ASSERT_EQ(::mkfifo((root_ + "/fifo.npy").c_str(), 0600), 0);
  struct Case {
    std::string path;
    grpc::StatusCode code;
    std::string says;
  };
  const std::string leaf = std::filesystem::path(outside_).filename().string();
  const std::vector<Case> cases = {
      {outside_ + "/secret.npy", grpc::StatusCode::PERMISSION_DENIED, "not under a directory"},
      {root_ + "/../" + leaf + "/secret.npy", grpc::StatusCode::PERMISSION_DENIED,
       "not under a directory"},
      {root_ + "/sub/../../" + leaf + "/secret.npy", grpc::StatusCode::PERMISSION_DENIED,
       "not under a directory"},
      {root_ + "/absolute_link.npy", grpc::StatusCode::PERMISSION_DENIED, "not under a directory"},
      {root_ + "/climbing_link.npy", grpc::StatusCode::PERMISSION_DENIED, "not under a directory"},
      {root_ + "/proc_link.npy", grpc::StatusCode::PERMISSION_DENIED, "not under a directory"},
      {root_, grpc::StatusCode::PERMISSION_DENIED, "not under a directory"},
      {root_ + "/", grpc::StatusCode::PERMISSION_DENIED, "not under a directory"},
      {root_ + "/missing.npy", grpc::StatusCode::NOT_FOUND, "no such file"},
      {root_ + "/sub", grpc::StatusCode::INVALID_ARGUMENT, "is a directory"},
      {root_ + "/fifo.npy", grpc::StatusCode::INVALID_ARGUMENT, "not a regular file"},
      {"ok.npy", grpc::StatusCode::INVALID_ARGUMENT, "not absolute"},
      {"", grpc::StatusCode::INVALID_ARGUMENT, "not absolute"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    v1::Dataset ds;
    const grpc::Status st = Import(c.path, &ds);
    EXPECT_EQ(st.error_code(), c.code) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.says));
    // Messages name the caller's path, never the server's own files.
    EXPECT_THAT(st.error_message(), Not(HasSubstr(dir_.string() + "/")));
  }
  // A link that stays beneath the directory is the file it names.
  v1::Dataset ds;
  const grpc::Status st = Import(root_ + "/sub/inside_link.npy", &ds);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ds.rows(), 5);
}

TEST_F(ImportTest, WhatIsNotStoredAsIsIsRefused) {
  StartImporting();
  const std::string f64 = root_ + "/f64.npy";
  const std::vector<double> d(12, 1.0);
  const int64_t shape[2] = {4, 3};
  ASSERT_TRUE(WriteNpy(f64, absl::MakeConstSpan(d), shape).ok());
  WriteRaw(root_ + "/fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }",
           48);
  WriteRaw(root_ + "/big_endian.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (4, 3), }",
           48);
  WriteRaw(root_ + "/one_d.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (12,), }", 48);
  WriteRaw(root_ + "/short.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", 40);
  WriteRaw(root_ + "/long.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", 52);
  std::ofstream(root_ + "/text.npy") << "1,2,3\n4,5,6\n";
  std::ofstream(root_ + "/empty.npy");
  std::vector<float> nan(12, 1.0f);
  nan[7] = std::nanf("");
  ASSERT_TRUE(WriteNpy(root_ + "/nan.npy", absl::MakeConstSpan(nan), shape).ok());
  WriteMatrix(root_ + "/fine.npy", 4, 3);
  struct Case {
    std::string file;
    grpc::StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"f64.npy", grpc::StatusCode::FAILED_PRECONDITION, "float64"},
      {"fortran.npy", grpc::StatusCode::FAILED_PRECONDITION, "Fortran order"},
      {"big_endian.npy", grpc::StatusCode::FAILED_PRECONDITION, "float32 (big-endian)"},
      {"one_d.npy", grpc::StatusCode::FAILED_PRECONDITION, "1-D"},
      {"short.npy", grpc::StatusCode::INVALID_ARGUMENT, "truncated"},
      {"long.npy", grpc::StatusCode::INVALID_ARGUMENT, "corrupt"},
      {"text.npy", grpc::StatusCode::INVALID_ARGUMENT, "text.npy"},
      {"empty.npy", grpc::StatusCode::INVALID_ARGUMENT, "is empty"},
      {"nan.npy", grpc::StatusCode::INVALID_ARGUMENT, "nan.npy': row 2, column 1 is NaN"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    v1::Dataset ds;
    const grpc::Status st = Import(root_ + "/" + c.file, &ds);
    EXPECT_EQ(st.error_code(), c.code) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.says));
    EXPECT_EQ(Links(root_ + "/" + c.file), 1) << "a refused import left a link";
  }
  v1::Dataset ds;
  grpc::Status st = Import(root_ + "/fine.npy", &ds, true, nullptr, /*rows=*/5);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("has 4 rows, the request says 5"));
  grpc::ClientContext ctx;
  v1::ImportDatasetRequest req;
  req.set_path(root_ + "/fine.npy");
  req.mutable_header()->set_prepare("l2h");
  st = datasets_->ImportDataset(&ctx, req, &ds);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("prepare"));
}

}  // namespace
}  // namespace dendro::server
