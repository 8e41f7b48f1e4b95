// libfabric errors as error_code values: the value is the positive FI_E* / errno number
// libfabric returns (negated), the message is fi_strerror's.
#pragma once

#include <sluice/error.hpp>

namespace sluice::fabric {

/// The category of libfabric return codes; its name() is "fabric".
[[nodiscard]] const boost::system::error_category& fabric_category() noexcept;

/// The error_code for a libfabric return value (`ret` < 0, as fi_* functions return it);
/// success for ret >= 0.
[[nodiscard]] inline error_code make_fabric_error(long ret) noexcept {
  if (ret >= 0) return {};
  return {static_cast<int>(-ret), fabric_category()};
}

}  // namespace sluice::fabric
