// The host registrar: host memory needs no registration for in-process transports, but the
// path still checks that the memory is something its transport can reach.
#pragma once

#include <sluice/concepts.hpp>

namespace sluice {

/// Registration of host memory with nothing to undo; it only carries the region.
class host_registration {
 public:
  host_registration() = default;
  explicit host_registration(const sluice::region& mem) noexcept : region_(mem) {}
  host_registration(host_registration&& other) noexcept : region_(std::exchange(other.region_, {})) {}
  host_registration& operator=(host_registration&& other) noexcept {
    region_ = std::exchange(other.region_, {});
    return *this;
  }
  host_registration(const host_registration&) = delete;
  host_registration& operator=(const host_registration&) = delete;
  ~host_registration() = default;

  /// The registered region; empty after a failed registration or a move.
  [[nodiscard]] const sluice::region& region() const noexcept { return region_; }

 private:
  sluice::region region_{};
};

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
