// Authentication and authorisation: who is calling, and may they.
//
// Identity comes from an API key (`authorization: Bearer <key>` metadata)
// or, with mutual TLS, from the verified client certificate's common name.
// Both are looked up in one keys file:
//
//   # comment
//   <sha256-hex of the key>  <name>  <role>
//   cn:<certificate common name>  <name>  <role>
//
// The file never holds a key in clear (`dendro keys hash` prints a line).
// Roles are ordered: reader < writer < importer < admin. Every RPC of the dendro.v1
// services has exactly one rule (RpcRules); DendroServer refuses to start if
// a service method has none, so a new RPC cannot be left open by accident.
// Health checking and reflection are not dendro.v1 services and stay open
// for probes.
//
// KeyTable is immutable; Authenticator swaps in a new one on Reload() (on
// SIGHUP) and keeps the old one if the file has become unreadable. Key
// lookups hash the presented key and compare it with every entry in
// constant time. Thread-safe.
#ifndef DENDRO_SERVER_SECURITY_AUTH_H_
#define DENDRO_SERVER_SECURITY_AUTH_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/common/mutex.h"

namespace dendro::server {

// An importer is a writer that may also have the server read files of its
// own host (DatasetService.ImportDataset, under --import_dirs).
enum class Role { kNone = 0, kReader = 1, kWriter = 2, kImporter = 3, kAdmin = 4 };

std::string RoleName(Role role);
absl::StatusOr<Role> ParseRole(std::string_view name);

struct Principal {
  std::string name;  // empty when authentication is off
  Role role = Role::kNone;
};

// Lowercase hex SHA-256 of `bytes`.
std::string Sha256Hex(std::string_view bytes);

class KeyTable {
 public:
  // Errors name the line. Duplicate keys or names with two roles are errors.
  static absl::StatusOr<KeyTable> Parse(std::string_view text);
  static absl::StatusOr<KeyTable> Load(const std::string& path);

  std::optional<Principal> FindKey(std::string_view key) const;
  std::optional<Principal> FindCommonName(std::string_view cn) const;
  size_t size() const { return keys_.size() + common_names_.size(); }
  // "3 keys (1 admin, 2 reader), 1 certificate name (1 writer)": counts by
  // role, no names (for the start-up log).
  std::string Describe() const;

 private:
  struct KeyEntry {
    std::array<uint8_t, 32> hash;
    Principal who;
  };
  std::vector<KeyEntry> keys_;
  std::map<std::string, Principal, std::less<>> common_names_;
};

// Every RPC of the dendro.v1 services (the rule table is indexed by this
// enum; kLast names the last one).
enum class Rpc {
  kUploadDataset,
  kImportDataset,
  kGetDataset,
  kListDatasets,
  kDeleteDataset,
  kSubmitJob,
  kGetJob,
  kListJobs,
  kCancelJob,
  kWatchJob,
  kWaitJob,
  kDeleteJob,
  kGetModel,
  kListModels,
  kDeleteModel,
  kGetTree,
  kGetTreeStream,
  kAssign,
  kPredict,
  kPredictStream,
  kGetClasses,
  kSetModelLabel,
  kDeleteModelLabel,
  kSetModelRetention,
  kDiffModels,
  kLast = kDiffModels,
};

struct RpcRule {
  Rpc rpc;
  const char* method;  // "/dendro.v1.ModelService/Predict"
  Role role;           // the least role allowed to call it
};

// The rule table (one place): readers read, writers create and cancel their
// own jobs, admins delete and cancel anyone's.
absl::Span<const RpcRule> RpcRules();
const RpcRule& RuleFor(Rpc rpc);
const RpcRule* FindRule(std::string_view method);

// OK if every method of the named services (fully qualified, e.g.
// "dendro.v1.JobService") has a rule in `rules` and every rule names one of
// their methods.
absl::Status CheckRulesCover(const std::vector<std::string>& services,
                             absl::Span<const RpcRule> rules = RpcRules());

class Authenticator {
 public:
  // Off: every call is an anonymous admin.
  Authenticator() = default;
  // On, with keys from `keys_path` (may be empty when only certificates
  // identify callers: then `table` starts empty).
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(std::string keys_path,
                                                               bool client_certificates);

  bool enabled() const { return enabled_; }
  // "off", or what identifies callers (KeyTable::Describe) and whether a
  // client certificate alone may.
  std::string Describe() const ABSL_LOCKS_EXCLUDED(mu_);
  // Re-reads the keys file; on error the current table stays in force.
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);

  // Who is calling. `bearer` is the authorization metadata value (if any),
  // `common_name` the verified client certificate's CN (if any).
  // UNAUTHENTICATED when neither identifies a principal; the message never
  // repeats the key.
  absl::StatusOr<Principal> Identify(std::optional<std::string_view> bearer,
                                     std::optional<std::string_view> common_name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // PERMISSION_DENIED, naming the role needed, if `who` may not call `rpc`.
  static absl::Status Authorize(const Principal& who, Rpc rpc);

 private:
  bool enabled_ = false;
  std::string keys_path_;
  mutable Mutex mu_;
  std::shared_ptr<const KeyTable> table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_SECURITY_AUTH_H_
