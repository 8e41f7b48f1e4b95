// SPDX-License-Identifier: Apache-2.0
// Which CUDA devices this host has. Every GPU path asks here first, so a host without a GPU
// (or without a driver) gets sluice::errc::no_device instead of a crash.
#pragma once

#include <sluice/error.hpp>

#include <cstddef>
#include <string>

namespace sluice::cuda {

/// What a caller may want to print about a device.
struct device_properties {
  int ordinal = -1;
  std::string name;
  std::size_t total_memory = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

/// Number of usable CUDA devices. No GPU or no driver: 0 and errc::no_device, with the CUDA
/// runtime's reason available from no_device_reason().
[[nodiscard]] int device_count(error_code& ec) noexcept;

/// Why device_count found no device ("no CUDA-capable device is detected", "CUDA driver
/// version is insufficient...", or "" when devices exist).
[[nodiscard]] std::string no_device_reason();

/// Properties of device `ordinal`; cuda errors for a bad ordinal.
[[nodiscard]] device_properties properties(int ordinal, error_code& ec);

}  // namespace sluice::cuda
