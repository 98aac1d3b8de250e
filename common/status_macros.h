// Early-return macros for absl::Status and absl::StatusOr. Debian 12's Abseil
// (20220623) predates its own RETURN_IF_ERROR/ASSIGN_OR_RETURN.
#ifndef TRAINYARD_COMMON_STATUS_MACROS_H_
#define TRAINYARD_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define YARD_CONCAT_INNER_(a, b) a##b
#define YARD_CONCAT_(a, b) YARD_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::absl::Status yard_status_ = (expr);                  \
    if (!yard_status_.ok()) return yard_status_;           \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(YARD_CONCAT_(yard_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // TRAINYARD_COMMON_STATUS_MACROS_H_
