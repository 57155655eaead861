// Logging set-up and the per-thread context stamped on structured lines.
//
// dendrod logs through spdlog. With --log_format json every line is one JSON
// object: {"time", "level", "message"} plus, when known on the logging
// thread, "request_id", "principal", "rpc" (set for the duration of an RPC
// handler) and "job_id" (set while a job runs). Text lines carry the same
// context in brackets. The context is thread-local: a handler or job runs on
// one thread from start to end.
#ifndef DENDRO_SERVER_BASE_LOGGING_H_
#define DENDRO_SERVER_BASE_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace dendro::server {

struct LogContext {
  std::string request_id;
  std::string principal;
  std::string rpc;
  std::string job_id;
};

// The calling thread's context (mutable: handlers and workers fill it).
LogContext& ThreadLogContext();

// Sets the thread's job id for the lifetime of the scope and restores the
// previous value after.
class ScopedJobLogContext {
 public:
  explicit ScopedJobLogContext(std::string job_id);
  ~ScopedJobLogContext();
  ScopedJobLogContext(const ScopedJobLogContext&) = delete;
  ScopedJobLogContext& operator=(const ScopedJobLogContext&) = delete;

 private:
  std::string previous_;
};

// `format`: "text" or "json"; `level`: trace, debug, info, warn, error.
absl::Status SetupLogging(const std::string& format, const std::string& level);

// A fresh request id (16 lowercase hex digits).
std::string NewRequestId();

}  // namespace dendro::server

#endif  // DENDRO_SERVER_BASE_LOGGING_H_
