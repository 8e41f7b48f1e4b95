// SPDX-License-Identifier: Apache-2.0
// The host registrar: host memory needs no registration for in-process transports, but the
// path still checks that the memory is something its transport can reach.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/region_registration.hpp>

namespace sluice {

/// Registration of host memory: the region, nothing to undo.
using host_registration = region_registration;

/// Whether a registrar of host memory can take `mem`: not when it is not host memory
/// (ec = errc::unsupported_memory) or a null pointer with a non-zero size (errc::invalid_argument).
[[nodiscard]] inline bool host_region_usable(const region& mem, error_code& ec) noexcept {
  if (!mem.host_accessible()) {
    ec = errc::unsupported_memory;
    return false;
  }
  if (mem.data == nullptr && mem.size != 0) {
    ec = errc::invalid_argument;
    return false;
  }
  ec = {};
  return true;
}

/// Accepts host pageable and host pinned memory (pinned memory stays pinned: its owner
/// pinned it). Device memory is errc::unsupported_memory (use sluice::cuda's registrar); a
/// null pointer with a non-zero size is errc::invalid_argument.
class host_registrar {
 public:
  using registration_type = host_registration;

  registration_type register_region(const region& mem, error_code& ec) const {
    if (!host_region_usable(mem, ec)) return {};
    return registration_type{mem};
  }
};

}  // namespace sluice
