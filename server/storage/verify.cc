#include "server/storage/verify.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "server/storage/checksum.h"
#include "server/storage/dataset_store.h"
#include "server/storage/open_artifact_store.h"
#include "server/catalogue/open_catalogue.h"

namespace dendro::server {
namespace {

// The files of one object against its recorded checksums; "" if intact.
std::string Check(ArtifactStore* artifacts, const std::string& prefix,
                  const ChecksumMap& recorded, const std::string& what) {
  absl::StatusOr<std::string> dir = artifacts->LocalPath(prefix);
  if (!dir.ok()) return absl::StrCat(what, ": its files are missing (", dir.status().message(), ")");
  absl::StatusOr<ChecksumMap> actual = ChecksumTree(*dir);
  if (!actual.ok()) return absl::StrCat(what, ": cannot read it: ", actual.status().message());
  if (recorded.empty()) return "";  // stored before checksums; present is all we can say
  absl::Status same = CompareChecksums(recorded, *actual, what);
  return same.ok() ? "" : std::string(same.message());
}

}  // namespace

absl::StatusOr<VerifyReport> VerifyArtifacts(Catalogue* catalogue, ArtifactStore* artifacts) {
  VerifyReport report;
  DENDRO_ASSIGN_OR_RETURN(std::vector<std::string> ids, catalogue->AllDatasetIds());
  for (const std::string& id : ids) {
    absl::StatusOr<v1::Dataset> d = catalogue->GetDataset(id);
    if (absl::IsNotFound(d.status())) continue;  // deleted meanwhile
    if (!d.ok()) return d.status();
    ++report.datasets;
    if (d->checksums().empty()) ++report.unchecked;
    std::string problem = Check(artifacts, DatasetStore::KeyFor(id, d->transient()),
                                ToChecksumMap(d->checksums()),
                                absl::StrCat("dataset ", id));
    // A row deleted while its files were being read is not damage.
    if (!problem.empty() && catalogue->GetDataset(id).ok()) report.damaged.push_back(problem);
  }
  int64_t after = 0;
  while (true) {
    DENDRO_ASSIGN_OR_RETURN(Page<v1::Model> page, catalogue->ListModels("", after, 500));
    for (const v1::Model& m : page.items) {
      absl::StatusOr<StoredModel> stored = catalogue->GetModel(m.name(), m.version());
      if (absl::IsNotFound(stored.status())) continue;
      if (!stored.ok()) return stored.status();
      ++report.models;
      if (m.checksums().empty()) ++report.unchecked;
      std::string problem =
          Check(artifacts, stored->dir, ToChecksumMap(stored->model.checksums()),
                absl::StrCat("model '", m.name(), "' version ", m.version()));
      if (!problem.empty() && catalogue->GetModel(m.name(), m.version()).ok()) {
        report.damaged.push_back(problem);
      }
    }
    if (!page.more) break;
    after = page.last_seq;
  }
  return report;
}

int RunVerify(const std::string& data_dir, const std::string& catalog, std::ostream& out) {
  // Opening an SQLite catalogue creates it: a mistyped --data_dir would
  // otherwise check an empty catalogue and pass.
  if ((catalog.empty() || catalog == "sqlite") &&
      ::access((data_dir + "/metadata.db").c_str(), F_OK) != 0) {
    out << "dendrod --verify: no catalogue in " << data_dir
        << " (no metadata.db): is --data_dir the server's data directory, or does the server "
           "use --catalog postgresql://...?\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Catalogue>> catalogue = OpenCatalogue(catalog, data_dir);
  if (!catalogue.ok()) {
    out << "dendrod --verify: " << catalogue.status().message() << "\n";
    return 2;
  }
  std::unique_ptr<ArtifactStore> artifacts = OpenArtifactStore(data_dir, (*catalogue)->shared());
  absl::StatusOr<VerifyReport> report = VerifyArtifacts(catalogue->get(), artifacts.get());
  if (!report.ok()) {
    out << "dendrod --verify: " << report.status().message() << "\n";
    return 2;
  }
  for (const std::string& line : report->damaged) out << "DAMAGED " << line << "\n";
  out << "checked " << report->datasets << " dataset(s) and " << report->models
      << " model version(s): " << report->damaged.size() << " damaged";
  if (report->unchecked > 0) {
    out << ", " << report->unchecked << " stored before checksums (only looked for)";
  }
  out << "\n";
  return report->damaged.empty() ? 0 : 1;
}

}  // namespace dendro::server
