// The offline integrity check behind `dendrod --verify`: every dataset's and
// model's files against the checksums recorded in the catalogue.
#ifndef DENDRO_SERVER_STORAGE_VERIFY_H_
#define DENDRO_SERVER_STORAGE_VERIFY_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/storage/artifact_store.h"
#include "server/catalogue/catalogue.h"

namespace dendro::server {

struct VerifyReport {
  int64_t datasets = 0;   // checked
  int64_t models = 0;     // model versions checked
  int64_t unchecked = 0;  // stored before checksums were recorded: files only looked for
  // One line per damaged object, naming it and what is wrong.
  std::vector<std::string> damaged;
};

// Reads every object the catalogue lists and checksums its files. Objects
// deleted while the check runs are skipped. Fails only if the catalogue
// cannot be read.
absl::StatusOr<VerifyReport> VerifyArtifacts(Catalogue* catalogue, ArtifactStore* artifacts);

// `dendrod --verify`: opens the catalogue and the data directory as dendrod
// would (without locking out a running server), prints the damaged objects
// and a summary to `out`, and returns the exit status: 0 if everything is
// intact, 1 if something is damaged, 2 if the check could not run.
int RunVerify(const std::string& data_dir, const std::string& catalog, std::ostream& out);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_VERIFY_H_
