// The RDMA data plane as the S3 server and client see it: two small interfaces, so that the S3
// tier needs no libfabric. sluice::fabric implements both (include/sluice/fabric/s3_plane.hpp);
// an embedder hands an instance to server_config::rdma or client_config::rdma.
#pragma once

#include <sluice/error.hpp>
#include <sluice/region.hpp>
#include <sluice/s3/rdma_token.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace sluice::s3 {

/// Takes the next bytes of what a PUT receives, in order, one call at a time.
using rdma_sink = std::function<error_code(std::span<const std::byte> data)>;

/// The server's side: RMA between the server's registered staging memory and the memory a
/// client granted in a token. Calls block (the server runs them on its own threads) and are
/// thread-safe. Staging memory is bounded by the implementation, whatever the object size.
class rdma_server_plane {
 public:
  virtual ~rdma_server_plane() = default;
  /// Whether this plane has an endpoint on `provider` (a token's provider).
  [[nodiscard]] virtual bool serves(std::string_view provider) const = 0;
  /// RMA-writes all of `memory` (host memory, e.g. a store's mapping of the object) into the
  /// token's segments, in order, straight from where it is (registered for the call: no staging
  /// copy), and returns once the bytes are delivered to the client's memory. `memory` stays valid
  /// and unchanged while `owner` lives; the plane keeps `owner` until every RMA from `memory`
  /// completed, which may be after the call returned (an RMA to a peer that vanished). Errors:
  /// s3::errc::rdma_not_supported when the peer could not be reached before any byte moved (the server declines and
  /// answers over HTTP); s3::errc::rdma_transfer_failed when an RMA failed or timed out after that.
  [[nodiscard]] virtual error_code write_from(const rdma_token& token, const region& memory,
                                              std::shared_ptr<const void> owner) = 0;
  /// RMA-reads `length` bytes from the token's segments and hands them to `sink` in order.
  /// Errors as write, and the sink's (which end the transfer).
  [[nodiscard]] virtual error_code read(const rdma_token& token, std::uint64_t length, const rdma_sink& sink) = 0;
  /// Aborts the transfers in flight (their calls return at once, with rdma_transfer_failed or
  /// rdma_not_supported) and declines every later token. server::stop() calls it, so that a
  /// stop never waits out the operation timeout of a transfer to a peer that vanished.
  virtual void close() noexcept {}
};

/// The client's side: grants a server access to memory for one request.
class rdma_client_plane {
 public:
  /// Access for one request: the token text and the registration behind it. Destroying it ends
  /// the grant (the memory may be deregistered; a server RMA after that fails).
  class grant {
   public:
    virtual ~grant() = default;
    [[nodiscard]] virtual const std::string& token() const noexcept = 0;
  };

  virtual ~rdma_client_plane() = default;
  /// The provider tokens name, e.g. "shm".
  [[nodiscard]] virtual std::string_view provider() const noexcept = 0;
  /// Registers `memory` (or reuses a cached registration that covers it) and returns a grant for
  /// `op` (write: the server writes into it, and may read back the bytes it wrote; read: the server
  /// reads it) that expires at `expires`. Errors: unsupported_memory (a kind the provider cannot
  /// register), fabric errors.
  [[nodiscard]] virtual std::unique_ptr<grant> grant_access(const region& memory, rdma_op op,
                                                            std::chrono::system_clock::time_point expires,
                                                            error_code& ec) = 0;
};

/// Which path carries an object's bytes.
enum class transfer_via : std::uint8_t {
  automatic,  ///< RDMA when the client has a plane and the server accepts, else HTTP
  rdma,       ///< RDMA only: a server that declines fails the request (s3::errc::rdma_not_supported)
  http,       ///< the HTTP body only
};

/// What carried one transfer's bytes, filled in by the client when the transfer ends.
struct transfer_report {
  std::uint64_t rdma_bytes = 0;     ///< bytes the server moved by RMA
  std::uint64_t http_bytes = 0;     ///< bytes in HTTP bodies
  std::uint32_t rdma_requests = 0;  ///< requests answered over RDMA
  std::uint32_t http_requests = 0;  ///< requests whose bytes went in the body
  std::uint32_t declined = 0;       ///< requests with a token that the server declined
};

}  // namespace sluice::s3
