// Work done on a dataset's rows while they are uploaded, so that a later job
// on the dataset starts from its result instead of a pass over the data
// (DatasetHeader.prepare names the preparation).
//
// A method offers one (Method::upload_preparer, server/methods/); the
// dataset store runs it beside the upload and keeps its result in memory
// with the dataset, on the server that received the upload, knowing no
// method by name. A preparation is an optimisation only: a job on a dataset
// without its result computes the same thing itself.
#ifndef DENDRO_SERVER_STORAGE_UPLOAD_PREPARATION_H_
#define DENDRO_SERVER_STORAGE_UPLOAD_PREPARATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dendro/v1/dendro.pb.h"

namespace dendro::server {

// A preparation's result. Immutable; shared by the jobs on its dataset.
class PreparedData {
 public:
  virtual ~PreparedData() = default;
  // Memory it holds.
  virtual int64_t bytes() const = 0;
};

// One upload's preparation in progress. Fed the upload's data chunks in
// order, after each has been validated and written.
class UploadPreparation {
 public:
  virtual ~UploadPreparation() = default;
  // Takes the next data chunk, leaving *bytes empty. Never blocks for long.
  virtual void Take(std::string* bytes) = 0;
  // Waits for the chunks taken. The result; null when there is nothing to
  // keep; an error saying why there is none. *note, if given, may say why a
  // result is partial.
  virtual absl::StatusOr<std::shared_ptr<const PreparedData>> Finish(std::string* note) = 0;
};

// What a method offers: the preparation of the uploads that ask for it.
class UploadPreparer {
 public:
  virtual ~UploadPreparer() = default;
  // The value of DatasetHeader.prepare that selects it ("l2h").
  virtual std::string_view name() const = 0;
  // InvalidArgument, naming what is wrong, when the header's data cannot be
  // prepared (it is refused then). Called for headers that pass the
  // store's own checks.
  virtual absl::Status CheckHeader(const v1::DatasetHeader& header) const = 0;
  // The memory a complete result for `header` would hold.
  virtual int64_t ResultBytes(const v1::DatasetHeader& header) const = 0;
  // A preparation for an upload with `header`, or null when this one is
  // better left unprepared (the upload goes on without).
  virtual std::unique_ptr<UploadPreparation> Start(const v1::DatasetHeader& header) const = 0;
};

}  // namespace dendro::server

#endif  // DENDRO_SERVER_STORAGE_UPLOAD_PREPARATION_H_
