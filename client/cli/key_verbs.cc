// dendro keys hash|new: lines for dendrod's --auth_keys file. A keys file
// holds the SHA-256 of each key, never the key itself.
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <iostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
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

// Lowercase hex SHA-256 of the key's bytes, as dendrod's keys file holds it.
absl::StatusOr<std::string> Sha256Hex(const std::string& key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(key.data(), key.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("SHA-256 failed (OpenSSL)");
  }
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(digest), len));
}

// "<sha256hex>  NAME  ROLE".
absl::StatusOr<std::string> KeysLine(const std::string& key, const Args& args) {
  DENDRO_ASSIGN_OR_RETURN(std::string hex, Sha256Hex(key));
  return absl::StrCat(hex, "  ", args.positional()[0], "  ", args.positional()[1]);
}

}  // namespace

absl::Status RunKeysHash(Context&, const Args& args) {
  DENDRO_RETURN_IF_ERROR(CheckNameAndRole(args));
  std::string key;
  if (!std::getline(std::cin, key)) {
    return absl::InvalidArgumentError("no key on stdin (e.g. 'dendro keys hash NAME ROLE < FILE')");
  }
  key = std::string(absl::StripTrailingAsciiWhitespace(key));
  if (key.empty()) return absl::InvalidArgumentError("the key on stdin is empty");
  if (key.size() < kMinKeyLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the key on stdin is ", key.size(), " characters; use at least ", kMinKeyLength,
        " (or 'dendro keys new')"));
  }
  // Clients send the key in a header: printable ASCII without spaces.
  for (char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) {
      return absl::InvalidArgumentError(
          "the key contains whitespace or non-printable characters");
    }
  }
  DENDRO_ASSIGN_OR_RETURN(std::string line, KeysLine(key, args));
  std::cout << line << std::endl;
  return absl::OkStatus();
}

absl::Status RunKeysNew(Context&, const Args& args) {
  DENDRO_RETURN_IF_ERROR(CheckNameAndRole(args));
  // 32 bytes from OpenSSL's CSPRNG, as URL-safe base64 without padding
  // (43 characters): safe in a header, a shell variable or a file.
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    return absl::InternalError("the system random generator failed");
  }
  std::string key;
  absl::WebSafeBase64Escape(std::string(reinterpret_cast<const char*>(raw), sizeof(raw)), &key);
  DENDRO_ASSIGN_OR_RETURN(std::string line, KeysLine(key, args));
  std::cout << key << "\n" << line << std::endl;
  return absl::OkStatus();
}

}  // namespace dendro::cli
