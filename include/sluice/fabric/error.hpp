// SPDX-License-Identifier: Apache-2.0
// libfabric errors as error_code values: the value is the positive FI_E* / errno number
// libfabric returns (negated), the message is fi_strerror's.
#pragma once

#include <sluice/error.hpp>

#include <limits>

namespace sluice::fabric {

/// The category of libfabric return codes; its name() is "fabric".
[[nodiscard]] const boost::system::error_category& fabric_category() noexcept;

/// The error_code for a libfabric return value (`ret` < 0, as fi_* functions return it);
/// success for ret >= 0.
[[nodiscard]] inline error_code make_fabric_error(long ret) noexcept {
  if (ret >= 0) return {};
  // Values libfabric never returns (beyond int) map to FI_EOTHER (256) rather than overflowing.
  constexpr long fi_eother = 256;
  const long value = ret < -static_cast<long>(std::numeric_limits<int>::max()) ? fi_eother : -ret;
  return {static_cast<int>(value), fabric_category()};
}

}  // namespace sluice::fabric
