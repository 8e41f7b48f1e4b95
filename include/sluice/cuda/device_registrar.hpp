// SPDX-License-Identifier: Apache-2.0
// The device registrar: device memory for a path whose transport reaches it (the S3 RDMA path,
// whose client plane registers the memory per request with FI_HMEM, or grants it to a same-host
// server through CUDA IPC).
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/cuda/error.hpp>
#include <sluice/region_registration.hpp>

namespace sluice::cuda {

/// A checked device region; nothing to undo (the transport's plane registers it per request
/// and caches that registration). Move-only.
using device_registration = region_registration;

/// Accepts device memory only, after asking the CUDA runtime that the region's first byte is
/// device memory of the region's device (cudaPointerGetAttributes) and the driver that the whole
/// region lies inside the allocation holding that byte (cuMemGetAddressRange, when the driver
/// gives it). Errors: unsupported_memory (host memory: use host_registrar or pinning_registrar),
/// invalid_argument (a null pointer with a size, a pointer that is not device memory of
/// `mem.device`, a region that runs past its allocation), no_device. A region of size 0 passes
/// unchecked. Stateless and thread-safe.
class device_registrar {
 public:
  using registration_type = device_registration;
  registration_type register_region(const region& mem, error_code& ec) const;
};

}  // namespace sluice::cuda
