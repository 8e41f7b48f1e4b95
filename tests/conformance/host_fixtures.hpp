// Host-memory pieces for conformance fixtures: a local buffer and a remote region in this process.
#pragma once

#include <sluice/region.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace sluice::testing {

/// Local memory for a fixture: a host vector seen as a pageable region.
class host_buffer {
 public:
  explicit host_buffer(std::size_t size) : bytes_(size) {}
  [[nodiscard]] sluice::region region() { return host_region(bytes_); }
  [[nodiscard]] std::vector<std::byte> contents() const { return bytes_; }
  void fill(std::span<const std::byte> data) { bytes_.assign(data.begin(), data.end()); }
  void fill_at(std::size_t offset, std::span<const std::byte> data) {
    std::copy(data.begin(), data.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(offset));
  }

 private:
  std::vector<std::byte> bytes_;
};

/// A remote that is another host region of this process (loopback's remote_type).
class host_remote {
 public:
  explicit host_remote(std::span<const std::byte> initial) : bytes_(initial.begin(), initial.end()) {}
  [[nodiscard]] sluice::region descriptor() { return host_region(bytes_); }
  [[nodiscard]] std::vector<std::byte> contents() const { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

}  // namespace sluice::testing
