// The keys file, the rule table and the authenticator, without a server
// (every RPC x role over gRPC is in tests/blackbox/auth_test.py).
#include "server/security/auth.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/transport/services.h"

namespace dendro::server {
namespace {

using ::testing::HasSubstr;

std::string Line(const std::string& key, const std::string& name, const std::string& role) {
  return Sha256Hex(key) + "  " + name + "\t" + role + "\n";
}

TEST(Sha256HexTest, KnownVector) {
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(KeyTableTest, FindsKeysAndCommonNames) {
  auto table = KeyTable::Parse("# keys\n\n" + Line("k-reader", "ann", "reader") +
                               Line("k-admin", "bob", "admin") + "cn:svc-a  svc  writer\n");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 3u);
  auto ann = table->FindKey("k-reader");
  ASSERT_TRUE(ann.has_value());
  EXPECT_EQ(ann->name, "ann");
  EXPECT_EQ(ann->role, Role::kReader);
  EXPECT_EQ(table->FindKey("k-admin")->role, Role::kAdmin);
  EXPECT_FALSE(table->FindKey("k-reade").has_value());
  EXPECT_FALSE(table->FindKey("").has_value());
  EXPECT_EQ(table->FindCommonName("svc-a")->role, Role::kWriter);
  EXPECT_FALSE(table->FindCommonName("svc-b").has_value());
}

TEST(KeyTableTest, DescribesCountsByRoleWithoutNames) {
  auto table = KeyTable::Parse(Line("k1", "ann", "reader") + Line("k2", "bob", "admin") +
                               Line("k3", "cat", "reader") + "cn:svc-a  svc  writer\n");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->Describe(), "3 keys (1 admin, 2 reader), 1 certificate name (1 writer)");
  EXPECT_EQ(KeyTable().Describe(), "0 keys, 0 certificate names");
  EXPECT_EQ(Authenticator().Describe(), "off");
}

TEST(KeyTableTest, ErrorsNameTheLine) {
  struct Case {
    std::string text;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"abc  ann  reader\n", "line 1: the first column"},
      {"\n" + Line("k", "ann", "root"), "line 2: unknown role 'root'"},
      {Sha256Hex("k") + "  ann\n", "line 1: expected"},
      {Line("k", "ann", "reader") + Line("k", "bob", "reader"), "line 2: a key listed twice"},
      {Line("k1", "ann", "reader") + Line("k2", "ann", "admin"), "'ann' has two roles"},
      {"cn:  x  reader\n", "line 1: empty common name"},
      {"cn:a  x  reader\ncn:a  y  reader\n", "listed twice"},
  };
  for (const Case& c : cases) {
    auto table = KeyTable::Parse(c.text);
    ASSERT_FALSE(table.ok()) << c.text;
    EXPECT_THAT(std::string(table.status().message()), HasSubstr(c.want)) << c.text;
  }
}

TEST(RuleTableTest, EveryServiceMethodHasExactlyOneRule) {
  EXPECT_TRUE(CheckRulesCover(ServiceNames()).ok());
  // Each enum value has its row, named after a real method.
  for (const RpcRule& rule : RpcRules()) {
    EXPECT_EQ(FindRule(rule.method), &rule);
    EXPECT_EQ(&RuleFor(rule.rpc), &rule);
  }
  // A method without a rule (here: a table missing one) stops the start.
  std::vector<RpcRule> missing(RpcRules().begin(), RpcRules().end());
  missing.erase(missing.begin() + static_cast<int>(Rpc::kDeleteDataset));
  absl::Status s = CheckRulesCover(ServiceNames(), missing);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("/dendro.v1.DatasetService/DeleteDataset"));
}

TEST(AuthenticatorTest, IdentifiesAndAuthorises) {
  const std::string path = ::testing::TempDir() + "/auth_test_keys";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    const std::string text = Line("wkey", "w", "writer");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  auto auth = Authenticator::Create(path, false);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->enabled());
  auto w = (*auth)->Identify("Bearer wkey", std::nullopt);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->name, "w");
  EXPECT_EQ((*auth)->Identify("wkey", std::nullopt).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*auth)->Identify(std::nullopt, std::nullopt).status().code(),
            absl::StatusCode::kUnauthenticated);
  absl::Status bad = (*auth)->Identify("Bearer wkeyX", std::nullopt).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(bad.message()), ::testing::Not(HasSubstr("wkey")));
  EXPECT_TRUE(Authenticator::Authorize(*w, Rpc::kSubmitJob).ok());
  absl::Status denied = Authenticator::Authorize(*w, Rpc::kDeleteModel);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.message()), HasSubstr("DeleteModel needs the admin role"));
  // Off: everyone is an anonymous admin.
  Authenticator off;
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.Identify(std::nullopt, std::nullopt)->role, Role::kAdmin);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dendro::server
