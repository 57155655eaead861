#include "server/security/auth.h"

#include <google/protobuf/descriptor.h>
#include <openssl/evp.h>

#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/common/status_macros.h"

namespace dendro::server {
namespace {

constexpr RpcRule kRules[] = {
    {Rpc::kUploadDataset, "/dendro.v1.DatasetService/UploadDataset", Role::kWriter},
    // Reads files of the server's host (under --import_dirs).
    {Rpc::kImportDataset, "/dendro.v1.DatasetService/ImportDataset", Role::kImporter},
    {Rpc::kGetDataset, "/dendro.v1.DatasetService/GetDataset", Role::kReader},
    {Rpc::kListDatasets, "/dendro.v1.DatasetService/ListDatasets", Role::kReader},
    {Rpc::kDeleteDataset, "/dendro.v1.DatasetService/DeleteDataset", Role::kAdmin},
    {Rpc::kSubmitJob, "/dendro.v1.JobService/SubmitJob", Role::kWriter},
    {Rpc::kGetJob, "/dendro.v1.JobService/GetJob", Role::kReader},
    {Rpc::kListJobs, "/dendro.v1.JobService/ListJobs", Role::kReader},
    // Writers cancel their own jobs; the handler requires admin for others'.
    {Rpc::kCancelJob, "/dendro.v1.JobService/CancelJob", Role::kWriter},
    {Rpc::kWatchJob, "/dendro.v1.JobService/WatchJob", Role::kReader},
    {Rpc::kWaitJob, "/dendro.v1.JobService/WaitJob", Role::kReader},
    {Rpc::kDeleteJob, "/dendro.v1.JobService/DeleteJob", Role::kAdmin},
    {Rpc::kGetModel, "/dendro.v1.ModelService/GetModel", Role::kReader},
    {Rpc::kListModels, "/dendro.v1.ModelService/ListModels", Role::kReader},
    {Rpc::kDeleteModel, "/dendro.v1.ModelService/DeleteModel", Role::kAdmin},
    {Rpc::kGetTree, "/dendro.v1.ModelService/GetTree", Role::kReader},
    {Rpc::kGetTreeStream, "/dendro.v1.ModelService/GetTreeStream", Role::kReader},
    {Rpc::kAssign, "/dendro.v1.ModelService/Assign", Role::kReader},
    {Rpc::kPredict, "/dendro.v1.ModelService/Predict", Role::kReader},
    {Rpc::kPredictStream, "/dendro.v1.ModelService/PredictStream", Role::kReader},
    {Rpc::kGetClasses, "/dendro.v1.ModelService/GetClasses", Role::kReader},
    // Labels steer which version readers get; retention deletes versions.
    {Rpc::kSetModelLabel, "/dendro.v1.ModelService/SetModelLabel", Role::kWriter},
    {Rpc::kDeleteModelLabel, "/dendro.v1.ModelService/DeleteModelLabel", Role::kWriter},
    {Rpc::kSetModelRetention, "/dendro.v1.ModelService/SetModelRetention", Role::kAdmin},
    {Rpc::kDiffModels, "/dendro.v1.ModelService/DiffModels", Role::kReader},
};

// RuleFor indexes kRules by the enum: keep the rows in its order.
constexpr bool RulesInEnumOrder() {
  for (size_t i = 0; i < std::size(kRules); ++i) {
    if (static_cast<size_t>(kRules[i].rpc) != i) return false;
  }
  return std::size(kRules) == static_cast<size_t>(Rpc::kLast) + 1;
}
static_assert(RulesInEnumOrder(), "kRules must list every Rpc once, in enum order");

bool HexDigest(std::string_view hex, std::array<uint8_t, 32>* out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + k];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return false;
      }
      v = v * 16 + d;
    }
    (*out)[i] = static_cast<uint8_t>(v);
  }
  return true;
}

std::array<uint8_t, 32> Sha256(std::string_view bytes) {
  std::array<uint8_t, 32> digest{};
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest.data(), &len, EVP_sha256(), nullptr);
  return digest;
}

}  // namespace

std::string RoleName(Role role) {
  switch (role) {
    case Role::kReader: return "reader";
    case Role::kWriter: return "writer";
    case Role::kImporter:
      return "importer";
    case Role::kAdmin: return "admin";
    default: return "none";
  }
}

absl::StatusOr<Role> ParseRole(std::string_view name) {
  if (name == "reader") return Role::kReader;
  if (name == "writer") return Role::kWriter;
  if (name == "importer") return Role::kImporter;
  if (name == "admin") return Role::kAdmin;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", std::string(name), "' (reader, writer, importer or admin)"));
}

std::string Sha256Hex(std::string_view bytes) {
  const std::array<uint8_t, 32> digest = Sha256(bytes);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

absl::StatusOr<KeyTable> KeyTable::Parse(std::string_view text) {
  KeyTable table;
  std::set<std::array<uint8_t, 32>> seen;
  std::map<std::string, Role> roles;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<absl::string_view> cols =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys file line ", line_no, ": ", std::string(why)));
    };
    if (cols.size() != 3) {
      return bad("expected '<sha256-hex>|cn:<common name>  <name>  <role>'");
    }
    absl::StatusOr<Role> role = ParseRole(std::string(cols[2]));
    if (!role.ok()) return bad(std::string(role.status().message()));
    Principal who{std::string(cols[1]), *role};
    if (auto [it, fresh] = roles.emplace(who.name, who.role); !fresh && it->second != who.role) {
      return bad(absl::StrCat("'", who.name, "' has two roles"));
    }
    if (absl::StartsWith(cols[0], "cn:")) {
      std::string cn(cols[0].substr(3));
      if (cn.empty()) return bad("empty common name");
      if (!table.common_names_.emplace(cn, who).second) {
        return bad(absl::StrCat("common name '", cn, "' listed twice"));
      }
      continue;
    }
    KeyEntry entry;
    if (!HexDigest(std::string(cols[0]), &entry.hash)) {
      return bad("the first column must be the 64 hex digits of a key's SHA-256 "
                 "(see 'dendro keys hash') or cn:<common name>");
    }
    if (!seen.insert(entry.hash).second) return bad("a key listed twice");
    entry.who = std::move(who);
    table.keys_.push_back(std::move(entry));
  }
  return table;
}

std::string KeyTable::Describe() const {
  auto counted = [](size_t n, const char* one, const char* many,
                    const std::map<Role, int>& by_role) {
    std::string out = absl::StrCat(n, " ", n == 1 ? one : many);
    if (n == 0) return out;
    std::vector<std::string> parts;
    for (auto it = by_role.rbegin(); it != by_role.rend(); ++it) {
      parts.push_back(absl::StrCat(it->second, " ", RoleName(it->first)));
    }
    return absl::StrCat(out, " (", absl::StrJoin(parts, ", "), ")");
  };
  std::map<Role, int> key_roles, cn_roles;
  for (const KeyEntry& k : keys_) ++key_roles[k.who.role];
  for (const auto& [cn, who] : common_names_) ++cn_roles[who.role];
  return absl::StrCat(
      counted(keys_.size(), "key", "keys", key_roles), ", ",
      counted(common_names_.size(), "certificate name", "certificate names", cn_roles));
}

absl::StatusOr<KeyTable> KeyTable::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read keys file ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<KeyTable> table = Parse(text.str());
  if (!table.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", table.status().message()));
  }
  return table;
}

std::optional<Principal> KeyTable::FindKey(std::string_view key) const {
  const std::array<uint8_t, 32> digest = Sha256(key);
  // Every entry is compared, all 32 bytes each, whatever matches: the time
  // taken says nothing about which key (or how much of one) was right.
  const KeyEntry* found = nullptr;
  for (const KeyEntry& e : keys_) {
    uint8_t diff = 0;
    for (size_t i = 0; i < digest.size(); ++i) diff |= digest[i] ^ e.hash[i];
    const bool match = diff == 0;
    found = match ? &e : found;
  }
  if (found == nullptr) return std::nullopt;
  return found->who;
}

std::optional<Principal> KeyTable::FindCommonName(std::string_view cn) const {
  auto it = common_names_.find(cn);
  if (it == common_names_.end()) return std::nullopt;
  return it->second;
}

absl::Span<const RpcRule> RpcRules() { return kRules; }

const RpcRule& RuleFor(Rpc rpc) {
  // kRules is in enum order (checked at compile time above).
  return kRules[static_cast<size_t>(rpc)];
}

const RpcRule* FindRule(std::string_view method) {
  for (const RpcRule& r : kRules) {
    if (method == r.method) return &r;
  }
  return nullptr;
}

absl::Status CheckRulesCover(const std::vector<std::string>& services,
                             absl::Span<const RpcRule> rules) {
  auto has_rule = [&](const std::string& method) {
    for (const RpcRule& r : rules) {
      if (method == r.method) return true;
    }
    return false;
  };
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  std::set<std::string> methods;
  std::vector<std::string> missing;
  for (const std::string& name : services) {
    const google::protobuf::ServiceDescriptor* svc = pool->FindServiceByName(name);
    if (svc == nullptr) return absl::InternalError(absl::StrCat("no service ", name));
    for (int i = 0; i < svc->method_count(); ++i) {
      const std::string method = absl::StrCat("/", name, "/", svc->method(i)->name());
      methods.insert(method);
      if (!has_rule(method)) missing.push_back(method);
    }
  }
  if (!missing.empty()) {
    return absl::InternalError(absl::StrCat("no authorisation rule for ",
                                            absl::StrJoin(missing, ", "),
                                            " (add it to server/security/auth.cc)"));
  }
  for (const RpcRule& r : rules) {
    if (methods.count(r.method) == 0) {
      return absl::InternalError(absl::StrCat("authorisation rule for unknown method ",
                                              r.method));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(std::string keys_path,
                                                                     bool client_certificates) {
  auto auth = std::make_unique<Authenticator>();
  auth->enabled_ = !keys_path.empty() || client_certificates;
  auth->keys_path_ = std::move(keys_path);
  {
    MutexLock lock(&auth->mu_);  // not yet shared: the analysis asks for the lock all the same
    auth->table_ = std::make_shared<KeyTable>();
  }
  if (!auth->keys_path_.empty()) DENDRO_RETURN_IF_ERROR(auth->Reload());
  return auth;
}

std::string Authenticator::Describe() const {
  if (!enabled_) return "off";
  MutexLock lock(&mu_);
  return absl::StrCat("on, ", table_->Describe());
}

absl::Status Authenticator::Reload() {
  if (keys_path_.empty()) return absl::OkStatus();
  DENDRO_ASSIGN_OR_RETURN(KeyTable table, KeyTable::Load(keys_path_));
  auto fresh = std::make_shared<const KeyTable>(std::move(table));
  MutexLock lock(&mu_);
  table_ = std::move(fresh);
  return absl::OkStatus();
}

absl::StatusOr<Principal> Authenticator::Identify(
    std::optional<std::string_view> bearer, std::optional<std::string_view> common_name) const {
  if (!enabled_) return Principal{"", Role::kAdmin};
  std::shared_ptr<const KeyTable> table;
  {
    MutexLock lock(&mu_);
    table = table_;
  }
  if (bearer.has_value()) {
    std::string_view value = *bearer;
    constexpr std::string_view kScheme = "Bearer ";
    if (value.substr(0, kScheme.size()) != kScheme) {
      return absl::UnauthenticatedError(
          "the authorization metadata must be 'Bearer <API key>'");
    }
    value.remove_prefix(kScheme.size());
    if (std::optional<Principal> who = table->FindKey(value)) return *who;
    return absl::UnauthenticatedError("unknown API key");
  }
  if (common_name.has_value()) {
    if (std::optional<Principal> who = table->FindCommonName(*common_name)) return *who;
    return absl::UnauthenticatedError(absl::StrCat(
        "client certificate '", std::string(*common_name), "' is not in the keys file"));
  }
  return absl::UnauthenticatedError(
      "this server requires an API key (authorization: Bearer <key>) or a client certificate");
}

absl::Status Authenticator::Authorize(const Principal& who, Rpc rpc) {
  const RpcRule& rule = RuleFor(rpc);
  if (who.role >= rule.role) return absl::OkStatus();
  std::string_view method = rule.method;
  method.remove_prefix(method.rfind('/') + 1);
  return absl::PermissionDeniedError(absl::StrCat(
      std::string(method), " needs the ", RoleName(rule.role), " role; '", who.name,
      "' is a ", RoleName(who.role)));
}

}  // namespace dendro::server
