#include "server/catalogue.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "server/postgres_catalogue.h"
#include "server/sqlite_catalogue.h"

namespace dendro::server {

absl::Status ModelNotFound(const std::string& name, int64_t version) {
  return absl::NotFoundError(version > 0
                                 ? absl::StrCat("model '", name, "' version ", version, " not found")
                                 : absl::StrCat("model '", name, "' not found"));
}

absl::Status LabelNotFound(const std::string& name, const std::string& label) {
  return absl::NotFoundError(absl::StrCat("model '", name, "' has no label '", label, "'"));
}

absl::Status LabelledVersion(const std::string& name, int64_t version,
                             const std::vector<std::string>& labels) {
  return absl::FailedPreconditionError(absl::StrCat(
      "model '", name, "' version ", version, " is labelled '", absl::StrJoin(labels, "', '"),
      "'; move or delete the label first (deleting every version of the name drops its labels "
      "too)"));
}

absl::StatusOr<std::unique_ptr<Catalogue>> OpenCatalogue(const std::string& spec,
                                                         const std::string& data_dir) {
  if (spec.empty() || spec == "sqlite") {
    auto sqlite = SqliteCatalogue::Open(data_dir + "/metadata.db");
    if (!sqlite.ok()) return sqlite.status();
    return std::unique_ptr<Catalogue>(*std::move(sqlite));
  }
  auto postgres = PostgresCatalogue::Open(spec);
  if (!postgres.ok()) return postgres.status();
  return std::unique_ptr<Catalogue>(*std::move(postgres));
}

}  // namespace dendro::server
