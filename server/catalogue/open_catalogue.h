// The factory of catalogues: which implementation a --catalog value names.
// Kept apart from the interface (server/catalogue/catalogue.h) so that the interface
// depends on no implementation; only the process's assembly (server.cc,
// verify.cc) and tests that open catalogues by name include this.
#ifndef DENDRO_SERVER_CATALOGUE_OPEN_CATALOGUE_H_
#define DENDRO_SERVER_CATALOGUE_OPEN_CATALOGUE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/catalogue/catalogue.h"

namespace dendro::server {

// The catalogue `spec` names: "" or "sqlite" for <data_dir>/metadata.db, or
// a libpq URI "postgresql://[user@]host[:port]/dbname[?options]". A password
// comes from the PGPASSWORD environment variable or a ~/.pgpass-style
// PGPASSFILE, never from the URI (one in it is refused, since command lines
// are visible to every user of the machine).
// `connections` bounds the PostgreSQL connections (and so the catalogue
// transactions running at once) of this process; SQLite ignores it.
absl::StatusOr<std::unique_ptr<Catalogue>> OpenCatalogue(const std::string& spec,
                                                         const std::string& data_dir,
                                                         int connections = 4);

}  // namespace dendro::server

#endif  // DENDRO_SERVER_CATALOGUE_OPEN_CATALOGUE_H_
