// SPDX-License-Identifier: Apache-2.0
// The RDMA data plane as the S3 server and client see it: two small interfaces, so that the S3
// tier needs no libfabric. sluice::fabric implements both (include/sluice/fabric/s3_plane.hpp);
// an embedder hands an instance to server_config::rdma or client_config::rdma.
#pragma once

#include <sluice/error.hpp>
#include <sluice/region.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/rdma_token.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::s3 {

/// Takes the next bytes of what a PUT receives, in order, one call at a time.
using rdma_sink = std::function<error_code(std::span<const std::byte> data)>;

/// What the server knows of a request besides its token: grants bound to a user (the
/// same-host planes) are used only by that user's signed requests.
struct rdma_requester {
  std::string access_key_id;  ///< the S3 user whose signature the request carries
};

/// Identifies one version of an object's bytes for registration caches: two sources with the same
/// non-zero id hold the same bytes while either's owner lives (fs_store: the file's device and
/// inode, which a live mapping keeps from being reused). {0, 0}: not cacheable.
struct object_version_id {
  std::uint64_t high = 0;
  std::uint64_t low = 0;
  [[nodiscard]] bool cacheable() const noexcept { return high != 0 || low != 0; }
  friend bool operator==(const object_version_id&, const object_version_id&) = default;
  friend bool operator<(const object_version_id& a, const object_version_id& b) noexcept {
    return a.high != b.high ? a.high < b.high : a.low < b.low;
  }
};

/// Where a GET's bytes come from: a range of one object version, mapped read-only.
struct rdma_source {
  const_region mapping;      ///< the whole object (host memory, read only)
  std::uint64_t offset = 0;  ///< the range to send, inside mapping
  std::uint64_t length = 0;
  std::shared_ptr<const void> owner;  ///< keeps mapping valid and unchanged while it lives
  object_version_id version;          ///< for caches of registrations of the mapping
  /// The same bytes as a file, when the store has one (fs_store): byte i of the mapping is at
  /// file_offset + i of `file`, which lives as long as `owner`. -1: only the mapping. A plane
  /// that copies with the CPU may pread() instead of touching the fresh mapping's pages.
  int file = -1;
  std::uint64_t file_offset = 0;

  /// The bytes to send. Precondition: [offset, offset + length) lies inside mapping.
  [[nodiscard]] const_region bytes() const noexcept {
    return {mapping.bytes() + offset, static_cast<std::size_t>(length), mapping.kind, mapping.device};
  }
};

/// The server's side: moves bytes between the server's memory and the memory a client granted in
/// a token (libfabric RMA, or a same-host grant). Thread-safe. write_from and read block; the
/// server calls their asynchronous forms, which a plane may implement without a waiting thread. Staging memory is
/// bounded by the implementation, whatever the object size.
class rdma_server_plane {
 public:
  virtual ~rdma_server_plane() = default;
  /// Whether this plane moves bytes for `provider` (a token's provider).
  [[nodiscard]] virtual bool serves(std::string_view provider) const = 0;
  /// Writes all of `source.bytes()` into the token's segments, in order, straight from where they
  /// are (no staging copy where the plane can avoid one), and returns once the bytes are
  /// delivered to the client's memory. The plane keeps `source.owner` until every operation on
  /// the mapping completed, which may be after the call returned (an RMA to a peer that
  /// vanished). Errors: s3::errc::rdma_not_supported when the peer could not be reached before
  /// any byte moved (the server declines and answers over HTTP); s3::errc::invalid_rdma_token
  /// when the token names memory that `who` was not granted; s3::errc::rdma_transfer_failed when
  /// a transfer failed or timed out after the first byte.
  [[nodiscard]] virtual error_code write_from(const rdma_requester& who, const rdma_token& token,
                                              const rdma_source& source) = 0;
  /// write_from without a thread waiting for the bytes: `done` runs once with what write_from
  /// would return, on any thread (a plane's progress thread, or `executor`). `executor` runs what
  /// may block (a libfabric post waiting for a full transmit queue). `who`, `token` and `source`
  /// must stay valid until `done` runs. The default runs write_from on `executor`.
  virtual void async_write_from(const rdma_requester& who, const rdma_token& token, const rdma_source& source,
                                const boost::asio::any_io_executor& executor, std::function<void(error_code)> done) {
    boost::asio::post(executor,
                      [this, &who, &token, &source, done = std::move(done)] { done(write_from(who, token, source)); });
  }
  /// Reads `length` bytes from the token's segments and hands them to `sink` in order.
  /// Errors as write_from, and the sink's (which end the transfer).
  [[nodiscard]] virtual error_code read(const rdma_requester& who, const rdma_token& token, std::uint64_t length,
                                        const rdma_sink& sink) = 0;
  /// read without a thread waiting for the bytes: `sink` and what may block run on `executor`,
  /// `done` runs once with what read would return, on any thread. `who`, `token` and `sink` must
  /// stay valid until `done` runs; `sink` is not called after it. The default runs read on
  /// `executor`.
  virtual void async_read(const rdma_requester& who, const rdma_token& token, std::uint64_t length,
                          const rdma_sink& sink, const boost::asio::any_io_executor& executor,
                          std::function<void(error_code)> done) {
    boost::asio::post(executor, [this, &who, &token, length, &sink, done = std::move(done)] {
      done(read(who, token, length, sink));
    });
  }
  /// Aborts the transfers in flight (their calls return at once, with rdma_transfer_failed or
  /// rdma_not_supported) and declines every later token. server::stop() and a shutdown's cut
  /// call it, so that neither waits out the operation timeout of a transfer to a peer that
  /// vanished.
  virtual void close() noexcept {}
  /// The least size of a new object version that published() wants to hear of; the maximum (the
  /// default): none. The server maps a version only when it is at least this large.
  [[nodiscard]] virtual std::uint64_t published_min_bytes() const noexcept {
    return std::numeric_limits<std::uint64_t>::max();
  }
  /// A store published `source.version` (a PUT, CompleteMultipartUpload or CopyObject; `source`
  /// covers the whole object): a plane that keeps registrations may register it now, so that its
  /// first GET finds it registered. Queues that work and returns; keeps `source.owner` as long as
  /// it needs the mapping.
  virtual void published(const rdma_source& /*source*/) {}
};

/// Several server planes as one: a token goes to the first plane that serves its provider
/// (sluice serve: the same-host grants, then libfabric).
class rdma_server_planes final : public rdma_server_plane {
 public:
  explicit rdma_server_planes(std::vector<std::shared_ptr<rdma_server_plane>> planes) : planes_(std::move(planes)) {}
  [[nodiscard]] bool serves(std::string_view provider) const override { return find(provider) != nullptr; }
  [[nodiscard]] error_code write_from(const rdma_requester& who, const rdma_token& token,
                                      const rdma_source& source) override {
    rdma_server_plane* plane = find(token.provider);
    return plane != nullptr ? plane->write_from(who, token, source) : error_code(errc::rdma_not_supported);
  }
  void async_write_from(const rdma_requester& who, const rdma_token& token, const rdma_source& source,
                        const boost::asio::any_io_executor& executor, std::function<void(error_code)> done) override {
    if (rdma_server_plane* plane = find(token.provider))
      return plane->async_write_from(who, token, source, executor, std::move(done));
    boost::asio::post(executor, [done = std::move(done)] { done(errc::rdma_not_supported); });
  }
  [[nodiscard]] error_code read(const rdma_requester& who, const rdma_token& token, std::uint64_t length,
                                const rdma_sink& sink) override {
    rdma_server_plane* plane = find(token.provider);
    return plane != nullptr ? plane->read(who, token, length, sink) : error_code(errc::rdma_not_supported);
  }
  void async_read(const rdma_requester& who, const rdma_token& token, std::uint64_t length, const rdma_sink& sink,
                  const boost::asio::any_io_executor& executor, std::function<void(error_code)> done) override {
    if (rdma_server_plane* plane = find(token.provider)) {
      return plane->async_read(who, token, length, sink, executor, std::move(done));
    }
    boost::asio::post(executor, [done = std::move(done)] { done(errc::rdma_not_supported); });
  }
  void close() noexcept override {
    for (const auto& p : planes_) p->close();
  }
  [[nodiscard]] std::uint64_t published_min_bytes() const noexcept override {
    std::uint64_t least = std::numeric_limits<std::uint64_t>::max();
    for (const auto& p : planes_) least = std::min(least, p->published_min_bytes());
    return least;
  }
  void published(const rdma_source& source) override {
    for (const auto& p : planes_) {
      if (source.mapping.size >= p->published_min_bytes()) p->published(source);
    }
  }
  [[nodiscard]] const std::vector<std::shared_ptr<rdma_server_plane>>& planes() const noexcept { return planes_; }

 private:
  [[nodiscard]] rdma_server_plane* find(std::string_view provider) const {
    for (const auto& p : planes_) {
      if (p->serves(provider)) return p.get();
    }
    return nullptr;
  }
  std::vector<std::shared_ptr<rdma_server_plane>> planes_;
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
  /// The provider tokens name, e.g. "tcp;ofi_rxm" or "local:memfd".
  [[nodiscard]] virtual std::string_view provider() const noexcept = 0;
  /// Registers `memory` (or reuses a cached registration that covers it) and returns a grant for
  /// `op` (write: the server writes into it, and may read back the bytes it wrote; read: the server
  /// reads it) that expires at `expires`. Errors: unsupported_memory (a kind the provider cannot
  /// register), fabric errors.
  [[nodiscard]] virtual std::unique_ptr<grant> grant_access(const region& memory, rdma_op op,
                                                            std::chrono::system_clock::time_point expires,
                                                            error_code& ec) = 0;
  /// The bytes one request should move into `memory`, or 0 for the client's part_size. A plane
  /// whose server moves a request's bytes by DMA with no staging to bound (a same-host device
  /// grant: several streams and copy threads per request) asks for whole transfers: splitting
  /// one GET into parts only adds round trips and hands the server's scheduler a range at a time
  /// (measured on an H100 host, first GET of 4 GiB: 4 parts of 1 GiB 0.47x pinned H2D, one
  /// request 0.85x).
  [[nodiscard]] virtual std::uint64_t request_bytes(const region& memory) const noexcept {
    (void)memory;
    return 0;
  }
};

/// Several client planes as one: a grant from the first plane that can grant the memory (a
/// same-host plane for its shared buffers and device memory, then libfabric for the rest).
class rdma_client_planes final : public rdma_client_plane {
 public:
  /// Precondition: `planes` is not empty and holds no null.
  explicit rdma_client_planes(std::vector<std::shared_ptr<rdma_client_plane>> planes) : planes_(std::move(planes)) {}
  /// The first plane's provider.
  [[nodiscard]] std::string_view provider() const noexcept override { return planes_.front()->provider(); }
  /// The first plane's grant that succeeds; when none does, the last plane's error.
  [[nodiscard]] std::unique_ptr<grant> grant_access(const region& memory, rdma_op op,
                                                    std::chrono::system_clock::time_point expires,
                                                    error_code& ec) override {
    for (const auto& p : planes_) {
      auto g = p->grant_access(memory, op, expires, ec);
      if (!ec) return g;
    }
    return nullptr;
  }
  /// The first plane's non-zero answer (the plane that would grant the memory asks first).
  [[nodiscard]] std::uint64_t request_bytes(const region& memory) const noexcept override {
    for (const auto& p : planes_) {
      if (const std::uint64_t n = p->request_bytes(memory); n != 0) return n;
    }
    return 0;
  }
  [[nodiscard]] const std::vector<std::shared_ptr<rdma_client_plane>>& planes() const noexcept { return planes_; }

 private:
  std::vector<std::shared_ptr<rdma_client_plane>> planes_;
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
