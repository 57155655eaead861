#include "core/io/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace dendro {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// Sorted names of the entries of `dir`.
std::vector<std::string> List(const ScopedTempDir& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string Read(const std::string& path) {
  std::string s;
  const absl::Status status = ReadFileToString(path, &s);
  EXPECT_TRUE(status.ok()) << status;
  return s;
}

// Deterministic bytes of every value, `n` long.
std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed);
  for (char& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x & 0xff);
  }
  return s;
}

TEST(WriteFileAtomic, CreatesAndReplaces) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string path = dir.Path("a.bin");
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  EXPECT_EQ(Read(path), "first");
  const std::string big = Pattern(3 << 20, 1);  // larger than the writer's buffer
  ASSERT_TRUE(WriteFileAtomic(path, big).ok());
  EXPECT_EQ(Read(path), big);
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_EQ(Read(path), "");
  std::string with_nuls("a\0b\0", 4);
  ASSERT_TRUE(WriteFileAtomic(path, with_nuls).ok());
  EXPECT_EQ(Read(path), with_nuls);
  EXPECT_THAT(List(dir), ElementsAre("a.bin"));
}

TEST(WriteFileAtomic, RelativePathInCurrentDirectory) {
  ScopedTempDir dir("dendro_atomic_");
  char old_cwd[4096];
  ASSERT_NE(::getcwd(old_cwd, sizeof(old_cwd)), nullptr);
  ASSERT_EQ(::chdir(dir.path().c_str()), 0);
  const absl::Status s = WriteFileAtomic("rel.txt", "relative");
  ASSERT_EQ(::chdir(old_cwd), 0);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Read(dir.Path("rel.txt")), "relative");
  EXPECT_THAT(List(dir), ElementsAre("rel.txt"));
}

TEST(WriteFileAtomic, Errors) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string in_missing_dir = dir.Path("no/such/dir/file");
  const absl::Status s = WriteFileAtomic(in_missing_dir, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(Msg(s), StartsWith(in_missing_dir + ": "));

  EXPECT_EQ(WriteFileAtomic("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteFileAtomic(dir.Path("sub/"), "x").code(), absl::StatusCode::kInvalidArgument);

  // A directory in the way: the rename fails and the temp file is cleaned up.
  ASSERT_TRUE(MakeDirs(dir.Path("d/inner")).ok());
  const absl::Status d = WriteFileAtomic(dir.Path("d"), "x");
  EXPECT_FALSE(d.ok());
  EXPECT_THAT(Msg(d), HasSubstr(dir.Path("d")));
  EXPECT_THAT(List(dir), ElementsAre("d"));
  EXPECT_TRUE(std::filesystem::is_directory(dir.Path("d/inner")));
}

TEST(ReadFileToString, Errors) {
  ScopedTempDir dir("dendro_atomic_");
  std::string out = "stale";
  const absl::Status missing = ReadFileToString(dir.Path("missing"), &out);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(missing), HasSubstr(dir.Path("missing")));
  EXPECT_THAT(Msg(missing), HasSubstr("No such file or directory"));
  EXPECT_TRUE(out.empty());

  const absl::Status is_dir = ReadFileToString(dir.path(), &out);
  EXPECT_EQ(is_dir.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(is_dir), HasSubstr("is a directory"));
}

TEST(ReadFileToString, FileWithoutSizeReadsToEof) {
  std::string out;
  ASSERT_TRUE(ReadFileToString("/proc/self/status", &out).ok());  // st_size is 0
  EXPECT_THAT(out, HasSubstr("Name:"));
  EXPECT_GT(out.size(), 100u);
}

TEST(AtomicFileWriter, NothingVisibleUntilCommit) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string path = dir.Path("upload.bin");
  AtomicFileWriter w;
  ASSERT_TRUE(AtomicFileWriter::Open(path, &w).ok());

  // Small appends (buffered), a large one (direct), then small ones again.
  std::string want;
  for (int i = 0; i < 1000; ++i) {
    const std::string piece = Pattern(static_cast<size_t>(i % 97), i);
    ASSERT_TRUE(w.Append(piece).ok());
    want += piece;
  }
  const std::string big = Pattern((1 << 20) + 12345, 7);
  ASSERT_TRUE(w.Append(big).ok());
  want += big;
  for (int i = 0; i < 50; ++i) {
    const std::string piece = Pattern(40000, 100 + i);  // fills the buffer past 1 MiB
    ASSERT_TRUE(w.Append(piece).ok());
    want += piece;
  }
  EXPECT_EQ(w.size(), static_cast<int64_t>(want.size()));

  EXPECT_FALSE(std::filesystem::exists(path));
  const std::vector<std::string> before = List(dir);
  ASSERT_EQ(before.size(), 1u);
  EXPECT_THAT(before[0], StartsWith("upload.bin.tmp."));
  EXPECT_THAT(before[0], HasSubstr(absl::StrCat(".", ::getpid(), ".")));

  ASSERT_TRUE(w.Commit().ok());
  EXPECT_EQ(Read(path), want);
  EXPECT_THAT(List(dir), ElementsAre("upload.bin"));

  // Committed writers refuse further work.
  EXPECT_EQ(w.Append("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.WriteAt(0, "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Commit().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Read(path), want);
}

TEST(AtomicFileWriter, AbandonLeavesExistingFileUntouched) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string path = dir.Path("keep.txt");
  ASSERT_TRUE(WriteFileAtomic(path, "original").ok());
  {
    AtomicFileWriter w;
    ASSERT_TRUE(AtomicFileWriter::Open(path, &w).ok());
    ASSERT_TRUE(w.Append(Pattern(3 << 20, 3)).ok());
    EXPECT_EQ(List(dir).size(), 2u);
    w.Abandon();
    EXPECT_THAT(List(dir), ElementsAre("keep.txt"));
    EXPECT_EQ(w.Append("x").code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(w.Commit().code(), absl::StatusCode::kFailedPrecondition);
    w.Abandon();  // idempotent
  }
  EXPECT_EQ(Read(path), "original");
  EXPECT_THAT(List(dir), ElementsAre("keep.txt"));
}

TEST(AtomicFileWriter, DestructorAbandons) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string fresh = dir.Path("fresh.bin");
  const std::string existing = dir.Path("existing.bin");
  ASSERT_TRUE(WriteFileAtomic(existing, "old").ok());
  {
    AtomicFileWriter a, b;
    ASSERT_TRUE(AtomicFileWriter::Open(fresh, &a).ok());
    ASSERT_TRUE(AtomicFileWriter::Open(existing, &b).ok());
    ASSERT_TRUE(a.Append("new data").ok());
    ASSERT_TRUE(b.Append("new data").ok());
    EXPECT_EQ(List(dir).size(), 3u);
  }
  EXPECT_FALSE(std::filesystem::exists(fresh));
  EXPECT_EQ(Read(existing), "old");
  EXPECT_THAT(List(dir), ElementsAre("existing.bin"));
}

TEST(AtomicFileWriter, ReopenAbandonsThePreviousFile) {
  ScopedTempDir dir("dendro_atomic_");
  AtomicFileWriter w;
  ASSERT_TRUE(AtomicFileWriter::Open(dir.Path("one"), &w).ok());
  ASSERT_TRUE(w.Append("1").ok());
  ASSERT_TRUE(AtomicFileWriter::Open(dir.Path("two"), &w).ok());
  EXPECT_EQ(w.size(), 0);
  ASSERT_TRUE(w.Append("2").ok());
  ASSERT_TRUE(w.Commit().ok());
  EXPECT_THAT(List(dir), ElementsAre("two"));
  EXPECT_EQ(Read(dir.Path("two")), "2");
}

TEST(AtomicFileWriter, WriteAtPatchesBufferedAndFlushedBytes) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string path = dir.Path("patched.bin");
  AtomicFileWriter w;
  ASSERT_TRUE(AtomicFileWriter::Open(path, &w).ok());
  std::string want = std::string(16, '?');  // placeholder header
  ASSERT_TRUE(w.Append(want).ok());
  // Still in the buffer.
  ASSERT_TRUE(w.WriteAt(4, "ab").ok());
  want.replace(4, 2, "ab");
  // Push the header out to the file, then patch it there.
  const std::string body = Pattern((2 << 20) + 5, 9);
  ASSERT_TRUE(w.Append(body).ok());
  want += body;
  ASSERT_TRUE(w.WriteAt(0, "HEAD").ok());
  want.replace(0, 4, "HEAD");
  // A patch spanning the last flushed bytes and fresh buffered ones.
  ASSERT_TRUE(w.Append("tail").ok());
  want += "tail";
  const int64_t at = w.size() - 6;
  ASSERT_TRUE(w.WriteAt(at, "XXXXXX").ok());
  want.replace(static_cast<size_t>(at), 6, "XXXXXX");
  // Up to the very end is allowed, past it is not.
  ASSERT_TRUE(w.WriteAt(w.size(), "").ok());
  const absl::Status past = w.WriteAt(w.size() - 1, "ab");
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(Msg(past), HasSubstr("patched.bin"));
  EXPECT_EQ(w.WriteAt(-1, "a").code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(w.size(), static_cast<int64_t>(want.size()));

  ASSERT_TRUE(w.Commit().ok());
  EXPECT_EQ(Read(path), want);
}

TEST(AtomicFileWriter, MoveTransfersOwnership) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string path = dir.Path("moved.bin");
  AtomicFileWriter a;
  ASSERT_TRUE(AtomicFileWriter::Open(path, &a).ok());
  ASSERT_TRUE(a.Append("hello ").ok());
  AtomicFileWriter b(std::move(a));
  EXPECT_EQ(b.size(), 6);
  ASSERT_TRUE(b.Append("world").ok());
  EXPECT_EQ(a.Append("x").code(), absl::StatusCode::kFailedPrecondition);  // NOLINT(bugprone-use-after-move)
  a.Abandon();  // must not delete b's temporary file
  AtomicFileWriter c;
  c = std::move(b);
  ASSERT_TRUE(c.Commit().ok());
  EXPECT_EQ(Read(path), "hello world");
  EXPECT_THAT(List(dir), ElementsAre("moved.bin"));
}

TEST(AtomicFileWriter, MoveAssignAbandonsTheTarget) {
  ScopedTempDir dir("dendro_atomic_");
  AtomicFileWriter a, b;
  ASSERT_TRUE(AtomicFileWriter::Open(dir.Path("a"), &a).ok());
  ASSERT_TRUE(AtomicFileWriter::Open(dir.Path("b"), &b).ok());
  ASSERT_TRUE(a.Append("A").ok());
  ASSERT_TRUE(b.Append("B").ok());
  b = std::move(a);  // b's temporary file for "b" is removed
  EXPECT_EQ(List(dir).size(), 1u);
  ASSERT_TRUE(b.Commit().ok());
  EXPECT_THAT(List(dir), ElementsAre("a"));
  EXPECT_EQ(Read(dir.Path("a")), "A");
}

TEST(AtomicFileWriter, UnopenedWriter) {
  AtomicFileWriter w;
  EXPECT_EQ(w.Append("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Commit().code(), absl::StatusCode::kFailedPrecondition);
  w.Abandon();
}

TEST(AtomicFileWriter, ConcurrentWritersGetDistinctTempFiles) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string path = dir.Path("same");
  AtomicFileWriter a, b;
  ASSERT_TRUE(AtomicFileWriter::Open(path, &a).ok());
  ASSERT_TRUE(AtomicFileWriter::Open(path, &b).ok());
  EXPECT_EQ(List(dir).size(), 2u);
  ASSERT_TRUE(a.Append("from a").ok());
  ASSERT_TRUE(b.Append("from b").ok());
  ASSERT_TRUE(a.Commit().ok());
  EXPECT_EQ(Read(path), "from a");
  ASSERT_TRUE(b.Commit().ok());  // the last commit wins
  EXPECT_EQ(Read(path), "from b");
  EXPECT_THAT(List(dir), ElementsAre("same"));
}

TEST(MakeDirs, CreatesParentsAndIsIdempotent) {
  ScopedTempDir dir("dendro_atomic_");
  const std::string deep = dir.Path("a/b//c/d/");
  ASSERT_TRUE(MakeDirs(deep).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir.Path("a/b/c/d")));
  ASSERT_TRUE(MakeDirs(deep).ok());
  ASSERT_TRUE(MakeDirs(dir.Path("a/b/e")).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir.Path("a/b/e")));
  EXPECT_TRUE(MakeDirs("/").ok());
  EXPECT_TRUE(MakeDirs(dir.path()).ok());
}

TEST(MakeDirs, Errors) {
  ScopedTempDir dir("dendro_atomic_");
  EXPECT_EQ(MakeDirs("").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(WriteFileAtomic(dir.Path("file"), "x").ok());
  const absl::Status s = MakeDirs(dir.Path("file/sub"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(Msg(s), HasSubstr(dir.Path("file") + ": exists and is not a directory"));
  EXPECT_EQ(MakeDirs(dir.Path("file")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Read(dir.Path("file")), "x");
}

}  // namespace
}  // namespace dendro
