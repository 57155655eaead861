// dendro keys hash|new: lines for dendrod's --auth_keys file. A keys file
// holds the SHA-256 of each key, never the key itself.
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <iostream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli.h"
#include "core/common/status_macros.h"

namespace dendro::cli {
namespace {

constexpr size_t kMinKeyLength = 16;

absl::Status CheckNameAndRole(const Args& args) {
  const std::string& name = args.positional()[0];
  const std::string& role = args.positional()[1];
  if (role != "reader" && role != "writer" && role != "admin") {
    return UsageError(absl::StrCat("role must be reader, writer or admin, got '", role, "'"));
  }
  if (name.empty() || name.find_first_of(" \t\n#") != std::string::npos) {
    return UsageError("the name must be one word");
  }
  return absl::OkStatus();
}

std::string Sha256Hex(const std::string& key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(key.data(), key.size(), digest, &len, EVP_sha256(), nullptr);
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(digest), len));
}

std::string KeysLine(const std::string& key, const Args& args) {
  return absl::StrCat(Sha256Hex(key), "  ", args.positional()[0], "  ", args.positional()[1]);
}

}  // namespace

absl::Status RunKeysHash(Context&, const Args& args) {
  DENDRO_RETURN_IF_ERROR(CheckNameAndRole(args));
  std::string key;
  std::getline(std::cin, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (key.size() < kMinKeyLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the key on stdin is ", key.size(), " characters; use at least ", kMinKeyLength,
        " (or 'dendro keys new')"));
  }
  for (char c : key) {
    if (c <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError("the key contains whitespace or control characters");
    }
  }
  std::cout << KeysLine(key, args) << std::endl;
  return absl::OkStatus();
}

absl::Status RunKeysNew(Context&, const Args& args) {
  DENDRO_RETURN_IF_ERROR(CheckNameAndRole(args));
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    return absl::InternalError("the system random generator failed");
  }
  std::string key;
  absl::WebSafeBase64Escape(std::string(reinterpret_cast<const char*>(raw), sizeof(raw)), &key);
  std::cout << key << "\n" << KeysLine(key, args) << std::endl;
  return absl::OkStatus();
}

}  // namespace dendro::cli
