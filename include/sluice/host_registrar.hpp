// The host registrar: host memory needs no registration for in-process transports, but the
// path still checks that the memory is something its transport can reach.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/region_registration.hpp>

namespace sluice {

/// Registration of host memory: the region, nothing to undo.
using host_registration = region_registration;

/// Accepts host pageable and host pinned memory (pinned memory stays pinned: its owner
/// pinned it). Device memory is errc::unsupported_memory (use sluice::cuda's registrar); a
/// null pointer with a non-zero size is errc::invalid_argument.
class host_registrar {
 public:
  using registration_type = host_registration;

  registration_type register_region(const region& mem, error_code& ec) const {
    if (!mem.host_accessible()) {
      ec = errc::unsupported_memory;
      return {};
    }
    if (mem.data == nullptr && mem.size != 0) {
      ec = errc::invalid_argument;
      return {};
    }
    ec = {};
    return registration_type{mem};
  }
};

}  // namespace sluice
