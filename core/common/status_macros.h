// Propagation helpers for absl::Status / absl::StatusOr.
//
// This Abseil release does not export its internal status macros, so Dendro
// keeps its own two.
#ifndef DENDRO_CORE_COMMON_STATUS_MACROS_H_
#define DENDRO_CORE_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DENDRO_CONCAT_IMPL_(a, b) a##b
#define DENDRO_CONCAT_(a, b) DENDRO_CONCAT_IMPL_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define DENDRO_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status dendro_status_ = (expr);          \
    if (!dendro_status_.ok()) return dendro_status_; \
  } while (0)

// `DENDRO_ASSIGN_OR_RETURN(auto x, MakeX());` assigns the value of a
// StatusOr or returns its status from the enclosing function.
#define DENDRO_ASSIGN_OR_RETURN(lhs, rexpr) \
  DENDRO_ASSIGN_OR_RETURN_IMPL_(DENDRO_CONCAT_(dendro_statusor_, __LINE__), lhs, rexpr)
#define DENDRO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

#endif  // DENDRO_CORE_COMMON_STATUS_MACROS_H_
