#include "server/catalogue/open_catalogue.h"

#include "server/catalogue/postgres_catalogue.h"
#include "server/catalogue/sqlite_catalogue.h"

namespace dendro::server {

absl::StatusOr<std::unique_ptr<Catalogue>> OpenCatalogue(const std::string& spec,
                                                         const std::string& data_dir,
                                                         int connections) {
  if (spec.empty() || spec == "sqlite") {
    auto sqlite = SqliteCatalogue::Open(data_dir + "/metadata.db");
    if (!sqlite.ok()) return sqlite.status();
    return std::unique_ptr<Catalogue>(*std::move(sqlite));
  }
  auto postgres = PostgresCatalogue::Open(spec, connections);
  if (!postgres.ok()) return postgres.status();
  return std::unique_ptr<Catalogue>(*std::move(postgres));
}

}  // namespace dendro::server
