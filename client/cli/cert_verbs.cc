// dendro certs new: a private CA, a server certificate for the names clients
// reach dendrod by, and client certificates for mutual TLS, with OpenSSL.
//
// DIR holds ca.pem/ca.key (made on first use, reused after), server.pem/
// server.key and NAME.pem/NAME.key per client. Keys are P-256 ECDSA, written
// 0600; certificates are signed with SHA-256. Nothing is overwritten: an
// existing server or client file is an error naming it.
#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"

namespace dendro::cli {
namespace {

using PKey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Cert = std::unique_ptr<X509, decltype(&X509_free)>;

constexpr int kCaDays = 3650;

absl::Status OpenSslError(const std::string& what) {
  char buf[256] = {0};
  ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
  ERR_clear_error();
  return absl::InternalError(absl::StrCat(what, " failed (OpenSSL: ", std::string(buf), ")"));
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// What a certificate is for.
enum class Kind { kCa, kServer, kClient };

absl::StatusOr<PKey> NewKey() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) return OpenSslError("making a P-256 key");
  return PKey(key, EVP_PKEY_free);
}

// A BIO's bytes.
std::string Drain(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, n > 0 ? static_cast<size_t>(n) : 0);
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return OpenSslError("writing a PEM");
  return Drain(bio.get());
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslError("writing a PEM key");
  }
  return Drain(bio.get());
}

absl::StatusOr<std::unique_ptr<BIO, decltype(&BIO_free)>> ReadBio(const std::string& path) {
  std::string text;
  DENDRO_RETURN_IF_ERROR(ReadFileToString(path, &text));
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (!bio || BIO_write(bio.get(), text.data(), static_cast<int>(text.size())) < 0) {
    return OpenSslError("reading a PEM file");
  }
  return bio;
}

absl::StatusOr<Cert> ReadCert(const std::string& path) {
  DENDRO_ASSIGN_OR_RETURN(auto bio, ReadBio(path));
  X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a PEM certificate"));
  }
  return Cert(cert, X509_free);
}

absl::StatusOr<PKey> ReadKey(const std::string& path) {
  DENDRO_ASSIGN_OR_RETURN(auto bio, ReadBio(path));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(path, " is not an unencrypted PEM private key"));
  }
  return PKey(key, EVP_PKEY_free);
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(absl::StrCat("the extension '", value, "'"));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return OpenSslError("adding an extension");
  return absl::OkStatus();
}

// "DNS:name" or "IP:address" for one --host.
std::string SubjectAltName(const std::string& host) {
  unsigned char buf[16];
  const bool ip =
      inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
  return absl::StrCat(ip ? "IP:" : "DNS:", host);
}

// A certificate for `key`, signed by `issuer_key` (self-signed when `issuer`
// is null). `hosts` become subjectAltNames (server certificates).
absl::StatusOr<Cert> Issue(Kind kind, const std::string& common_name,
                           const std::vector<std::string>& hosts, int days, EVP_PKEY* key,
                           X509* issuer, EVP_PKEY* issuer_key) {
  Cert cert(X509_new(), X509_free);
  if (!cert || X509_set_version(cert.get(), 2) != 1) return OpenSslError("a new certificate");
  // A random positive 127-bit serial.
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return OpenSslError("a random serial");
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  const bool serial_set =
      bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) != nullptr;
  BN_free(bn);
  if (!serial_set) return OpenSslError("setting the serial");
  // Valid from an hour ago: a client whose clock is a little behind still
  // accepts a certificate made just now.
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError("setting the validity and key");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                 -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name) !=
          1) {
    return OpenSslError("setting the names");
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  DENDRO_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash"));
  switch (kind) {
    case Kind::kCa:
      DENDRO_RETURN_IF_ERROR(
          AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
      DENDRO_RETURN_IF_ERROR(
          AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign"));
      break;
    case Kind::kServer:
    case Kind::kClient: {
      DENDRO_RETURN_IF_ERROR(
          AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid:always"));
      DENDRO_RETURN_IF_ERROR(
          AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE"));
      DENDRO_RETURN_IF_ERROR(
          AddExtension(cert.get(), signer, NID_key_usage, "critical,digitalSignature"));
      DENDRO_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_ext_key_usage,
                                          kind == Kind::kServer ? "serverAuth" : "clientAuth"));
      if (kind == Kind::kServer) {
        std::vector<std::string> sans;
        for (const std::string& h : hosts) sans.push_back(SubjectAltName(h));
        DENDRO_RETURN_IF_ERROR(
            AddExtension(cert.get(), signer, NID_subject_alt_name, absl::StrJoin(sans, ",")));
      }
      break;
    }
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) <= 0) return OpenSslError("signing");
  return cert;
}

// Writes the key (0600) and then the certificate (0644), each atomically.
absl::Status WritePair(const std::string& stem, EVP_PKEY* key, X509* cert) {
  DENDRO_ASSIGN_OR_RETURN(std::string key_pem, KeyPem(key));
  DENDRO_ASSIGN_OR_RETURN(std::string cert_pem, CertPem(cert));
  const mode_t old_umask = ::umask(077);
  absl::Status wrote = WriteFileAtomic(stem + ".key", key_pem);
  ::umask(022);
  if (wrote.ok()) wrote = WriteFileAtomic(stem + ".pem", cert_pem);
  ::umask(old_umask);
  return wrote;
}

// The CA of `dir`: read if both its files exist, made if neither does.
absl::Status LoadOrMakeCa(const std::string& dir, PKey* key, Cert* cert, bool* made) {
  const std::string pem = dir + "/ca.pem";
  const std::string key_path = dir + "/ca.key";
  const bool have_pem = Exists(pem);
  if (have_pem != Exists(key_path)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " holds ", have_pem ? "ca.pem but not ca.key" : "ca.key but not ca.pem",
                     "; restore the missing file, or remove both to make a new CA"));
  }
  *made = !have_pem;
  if (have_pem) {
    DENDRO_ASSIGN_OR_RETURN(*cert, ReadCert(pem));
    DENDRO_ASSIGN_OR_RETURN(*key, ReadKey(key_path));
    if (X509_check_private_key(cert->get(), key->get()) != 1) {
      ERR_clear_error();
      return absl::FailedPreconditionError(absl::StrCat(key_path, " is not the key of ", pem));
    }
    return absl::OkStatus();
  }
  DENDRO_ASSIGN_OR_RETURN(*key, NewKey());
  unsigned char tag[4];
  if (RAND_bytes(tag, sizeof(tag)) != 1) return OpenSslError("a random CA name");
  const std::string name = absl::StrCat(
      "Dendro private CA ", absl::AsciiStrToLower(absl::BytesToHexString(absl::string_view(
                                reinterpret_cast<const char*>(tag), sizeof(tag)))));
  DENDRO_ASSIGN_OR_RETURN(*cert,
                          Issue(Kind::kCa, name, {}, kCaDays, key->get(), nullptr, key->get()));
  return WritePair(dir + "/ca", key->get(), cert->get());
}

absl::Status CheckClientName(const std::string& name) {
  if (name.empty() || name == "ca" || name == "server" ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos ||
      name[0] == '.' || name[0] == '-') {
    return UsageError(absl::StrCat("--client '", name,
                                   "': a client name is letters, digits, '.', '_' and '-' (not "
                                   "starting with '.' or '-'), and not 'ca' or 'server'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunCertsNew(Context&, const Args& args) {
  const std::optional<std::string> dir_flag = args.Get("ca-dir");
  if (!dir_flag.has_value() || dir_flag->empty()) {
    return UsageError("--ca-dir DIR is required (where the CA and certificates are kept)");
  }
  const std::string dir = *dir_flag;
  const std::vector<std::string> hosts = args.GetAll("host");
  const std::vector<std::string> clients = args.GetAll("client");
  DENDRO_ASSIGN_OR_RETURN(int64_t days, args.GetInt("days", 365, 1, kCaDays));
  const std::optional<std::string> role = args.Get("role");
  const std::optional<std::string> append = args.Get("append");
  if ((role.has_value() || append.has_value()) && clients.empty()) {
    return UsageError("--role and --append are for --client certificates");
  }
  if (append.has_value() && !role.has_value()) {
    return UsageError("--append needs --role (reader, writer, importer or admin)");
  }
  if (role.has_value() && *role != "reader" && *role != "writer" && *role != "importer" &&
      *role != "admin") {
    return UsageError(
        absl::StrCat("--role must be reader, writer, importer or admin, got '", *role, "'"));
  }
  for (const std::string& h : hosts) {
    if (h.empty() || h.find_first_of(" ,\t/") != std::string::npos) {
      return UsageError(absl::StrCat("--host '", h, "' is not a host name or address"));
    }
  }
  for (const std::string& c : clients) DENDRO_RETURN_IF_ERROR(CheckClientName(c));
  // Refuse before writing anything.
  std::vector<std::string> taken;
  if (!hosts.empty()) {
    for (const char* f : {"/server.pem", "/server.key"}) {
      if (Exists(dir + f)) taken.push_back(dir + f);
    }
  }
  for (const std::string& c : clients) {
    for (const char* ext : {".pem", ".key"}) {
      if (Exists(absl::StrCat(dir, "/", c, ext))) taken.push_back(absl::StrCat(dir, "/", c, ext));
    }
  }
  if (!taken.empty()) {
    return absl::AlreadyExistsError(
        absl::StrCat(absl::StrJoin(taken, ", "), " already exist(s); remove to issue anew"));
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir));
  }

  PKey ca_key(nullptr, EVP_PKEY_free);
  Cert ca(nullptr, X509_free);
  bool made = false;
  DENDRO_RETURN_IF_ERROR(LoadOrMakeCa(dir, &ca_key, &ca, &made));
  std::cout << (made ? "made " : "using ") << dir << "/ca.pem and ca.key (the CA: give ca.pem "
            << "to clients as --tls-ca, and to dendrod as --tls_client_ca for mutual TLS; keep "
            << "ca.key private)" << std::endl;
  if (!hosts.empty()) {
    DENDRO_ASSIGN_OR_RETURN(PKey key, NewKey());
    DENDRO_ASSIGN_OR_RETURN(
        Cert cert, Issue(Kind::kServer, hosts.front(), hosts, static_cast<int>(days), key.get(),
                         ca.get(), ca_key.get()));
    DENDRO_RETURN_IF_ERROR(WritePair(dir + "/server", key.get(), cert.get()));
    std::cout << "made " << dir << "/server.pem and server.key for " << absl::StrJoin(hosts, ", ")
              << ", valid " << days << " days (dendrod --tls_cert, --tls_key)" << std::endl;
  }
  for (const std::string& c : clients) {
    DENDRO_ASSIGN_OR_RETURN(PKey key, NewKey());
    DENDRO_ASSIGN_OR_RETURN(Cert cert, Issue(Kind::kClient, c, {}, static_cast<int>(days),
                                             key.get(), ca.get(), ca_key.get()));
    DENDRO_RETURN_IF_ERROR(WritePair(absl::StrCat(dir, "/", c), key.get(), cert.get()));
    std::cout << "made " << dir << "/" << c << ".pem and " << c << ".key, common name '" << c
              << "', valid " << days << " days (dendro --tls-cert, --tls-key)" << std::endl;
    const std::string line = absl::StrCat("cn:", c, "  ", c, "  ", role.value_or("ROLE"));
    if (append.has_value()) {
      DENDRO_RETURN_IF_ERROR(AppendKeysLine(*append, line));
      std::cout << "added " << c << " (" << *role << ") to " << *append
                << "; send SIGHUP to dendrod to load it" << std::endl;
    } else {
      std::cout << "its keys-file line: " << line << std::endl;
    }
  }
  return absl::OkStatus();
}

}  // namespace dendro::cli
