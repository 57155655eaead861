// dendro keys hash|new: lines for dendrod's --auth_keys file. A keys file
// holds the SHA-256 of each key, never the key itself.
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli/cli.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"

namespace dendro::cli {
namespace {

constexpr size_t kMinKeyLength = 16;

absl::Status CheckNameAndRole(const Args& args) {
  const std::string& name = args.positional()[0];
  const std::string& role = args.positional()[1];
  if (role != "reader" && role != "writer" && role != "importer" && role != "admin") {
    return UsageError(
        absl::StrCat("role must be reader, writer, importer or admin, got '", role, "'"));
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

absl::Status AppendKeysLine(const std::string& path, const std::string& line) {
  std::string text;
  if (absl::Status read = ReadFileToString(path, &text); !read.ok() && !absl::IsNotFound(read)) {
    return read;
  }
  // The name must keep one role: dendrod refuses a file that gives it two.
  const std::vector<std::string> mine = absl::StrSplit(line, ' ', absl::SkipEmpty());
  int line_no = 0;
  for (absl::string_view existing : absl::StrSplit(text, '\n')) {
    ++line_no;
    existing = absl::StripAsciiWhitespace(existing);
    if (existing.empty() || existing[0] == '#') continue;
    const std::vector<std::string> cols =
        absl::StrSplit(existing, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (cols.size() != 3) continue;  // dendrod names such a line when it reads the file
    if (cols[0] == mine[0]) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, " line ", line_no, " already holds this ",
                       absl::StartsWith(mine[0], "cn:") ? "certificate name" : "key"));
    }
    if (cols[1] == mine[1] && cols[2] != mine[2]) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " line ", line_no, " gives '", mine[1], "' the role ", cols[2],
                       "; a name has one role (choose another name, or edit that line)"));
    }
  }
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += line + "\n";
  // The new file replaces the old one: keep its permissions (0600 for a
  // new file: it names every caller).
  struct stat st;
  const mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0600;
  const mode_t old_umask = ::umask(static_cast<mode_t>(~mode & 0777));
  absl::Status written = WriteFileAtomic(path, text);
  ::umask(old_umask);
  return written;
}

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
  if (std::optional<std::string> file = args.Get("append")) {
    DENDRO_RETURN_IF_ERROR(AppendKeysLine(*file, line));
    std::cerr << "added " << args.positional()[0] << " (" << args.positional()[1] << ") to "
              << *file << "; send SIGHUP to dendrod to load it" << std::endl;
    return absl::OkStatus();
  }
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
  if (std::optional<std::string> file = args.Get("append")) {
    DENDRO_RETURN_IF_ERROR(AppendKeysLine(*file, line));
    std::cout << key << std::endl;
    std::cerr << "added " << args.positional()[0] << " (" << args.positional()[1] << ") to "
              << *file << "; send SIGHUP to dendrod to load it" << std::endl;
    return absl::OkStatus();
  }
  std::cout << key << "\n" << line << std::endl;
  return absl::OkStatus();
}

}  // namespace dendro::cli
