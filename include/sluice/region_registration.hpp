// SPDX-License-Identifier: Apache-2.0
// region_registration: the registration of registrars that only check a region (host_registrar,
// s3::token_registrar, cuda::device_registrar): nothing was registered, so nothing is undone.
#pragma once

#include <sluice/region.hpp>

#include <utility>

namespace sluice {

/// A checked region with nothing to undo. Move-only, as every registration is: a moved-from or
/// default-constructed one is empty.
class region_registration {
 public:
  region_registration() = default;
  explicit region_registration(const sluice::region& mem) noexcept : region_(mem) {}
  region_registration(region_registration&& other) noexcept : region_(std::exchange(other.region_, {})) {}
  region_registration& operator=(region_registration&& other) noexcept {
    region_ = std::exchange(other.region_, {});
    return *this;
  }
  region_registration(const region_registration&) = delete;
  region_registration& operator=(const region_registration&) = delete;
  ~region_registration() = default;

  /// The registered region; empty after a failed registration or a move.
  [[nodiscard]] const sluice::region& region() const noexcept { return region_; }

 private:
  sluice::region region_{};
};

}  // namespace sluice
