// SPDX-License-Identifier: Apache-2.0
// RAII wrappers for libfabric objects and the provider choice: fi_info, fid handles, and the
// typed configuration an endpoint is opened from.
#pragma once

#include <sluice/config.hpp>
#include <sluice/fabric/error.hpp>

#include <rdma/fabric.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::fabric {

/// Which provider an endpoint is opened on, and how it behaves.
struct fabric_config {
  /// A libfabric provider name ("verbs;ofi_rxm", "efa", "shm", "tcp;ofi_rxm", ...) or "auto":
  /// hardware RDMA first, then `shm` when the peer is on this host, then `tcp;ofi_rxm`.
  std::string provider = "auto";
  /// Local address to bind (FI_SOURCE), e.g. "127.0.0.1"; empty: the provider's default.
  std::string node;
  /// Ask for FI_HMEM (GPU memory registration); an endpoint without it reports hmem() false.
  bool hmem = false;
  /// The longest one RMA operation may take before the transfer is failed (its buffer stays
  /// owned by the provider until libfabric completes the operation, then returns to its pool).
  std::chrono::milliseconds operation_timeout{30'000};
  /// Largest single RMA operation; longer transfers are split (0: the provider's max_msg_size).
  std::uint64_t max_operation_bytes = 0;
  /// How long the first operation to a new peer may take to connect before the peer is
  /// called unreachable (the S3 server then declines with x-amz-rdma-reply: 501).
  std::chrono::milliseconds connect_timeout{5'000};

  /// The first problem, or nullopt: provider empty or with characters other than
  /// [A-Za-z0-9_;-], a timeout that is not positive.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// The providers "auto" tries, in order, for a peer on this host (`peer_local`) or elsewhere:
/// the hardware providers, then tcp;ofi_rxm. Never shm: libfabric's shm does not check MR keys,
/// ranges or access, so any local process holding a signed token could aim the server at any
/// other process's memory; same-host clients use grants (s3::local_client_plane) instead. A
/// named provider ("shm" included, for hosts whose users all trust each other) is returned alone,
/// and a comma-separated list ("shm,tcp;ofi_rxm") as its names in order.
[[nodiscard]] std::vector<std::string> candidate_providers(std::string_view choice, bool peer_local);

/// True when libfabric can be used. Built with SLUICE_DLOPEN_FABRIC (the default), the first call
/// (or the first endpoint::open) loads libfabric.so.1 with dlopen, once for the process; false
/// when it is not installed or lacks an entry point sluice calls: errc::unavailable in `ec`, the
/// loader's words in libfabric_unavailable_reason(), and every endpoint::open fails the same way.
/// Built with SLUICE_DLOPEN_FABRIC=OFF, the program links libfabric and this is always true.
[[nodiscard]] bool libfabric_available(error_code& ec) noexcept;

/// Why libfabric_available is false (dlopen's or dlsym's message), "" when it is true.
[[nodiscard]] std::string libfabric_unavailable_reason();

/// fi_info owned (fi_freeinfo on destruction).
struct info_deleter {
  void operator()(fi_info* info) const noexcept { fi_freeinfo(info); }
};
using info_ptr = std::unique_ptr<fi_info, info_deleter>;

/// A libfabric object closed with fi_close on destruction (fid_fabric, fid_domain, fid_cq,
/// fid_av, fid_ep, fid_mr). Move-only.
template <class Fid>
class fid_handle {
 public:
  fid_handle() = default;
  explicit fid_handle(Fid* fid) noexcept : fid_(fid) {}
  fid_handle(fid_handle&& other) noexcept : fid_(std::exchange(other.fid_, nullptr)) {}
  fid_handle& operator=(fid_handle&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fid_, nullptr));
    return *this;
  }
  fid_handle(const fid_handle&) = delete;
  fid_handle& operator=(const fid_handle&) = delete;
  ~fid_handle() { reset(); }

  /// Closes the object held (its close error, if any, cannot be reported from here) and takes `fid`.
  void reset(Fid* fid = nullptr) noexcept {
    if (fid_ != nullptr) static_cast<void>(fi_close(&fid_->fid));
    fid_ = fid;
  }
  [[nodiscard]] Fid* native_handle() const noexcept { return fid_; }
  explicit operator bool() const noexcept { return fid_ != nullptr; }

 private:
  Fid* fid_ = nullptr;
};

/// What an opened endpoint's provider asks for and offers.
struct provider_traits {
  std::string name;               ///< fabric_attr->prov_name, e.g. "tcp;ofi_rxm"
  std::uint64_t mr_mode = 0;      ///< FI_MR_* bits the domain requires
  std::size_t max_msg_size = 0;   ///< longest single RMA
  std::size_t mr_key_size = 0;    ///< bytes of a remote key
  bool hmem = false;              ///< FI_HMEM: device memory can be registered
  bool string_addresses = false;  ///< FI_ADDR_STR: endpoint names are NUL-terminated strings (shm)
  [[nodiscard]] bool virtual_addresses() const noexcept { return (mr_mode & FI_MR_VIRT_ADDR) != 0; }
  [[nodiscard]] bool provider_keys() const noexcept { return (mr_mode & FI_MR_PROV_KEY) != 0; }
  [[nodiscard]] bool local_descriptors() const noexcept { return (mr_mode & FI_MR_LOCAL) != 0; }
  [[nodiscard]] bool endpoint_bound_mrs() const noexcept { return (mr_mode & FI_MR_ENDPOINT) != 0; }
};

}  // namespace sluice::fabric
