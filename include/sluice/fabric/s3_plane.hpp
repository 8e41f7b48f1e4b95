// SPDX-License-Identifier: Apache-2.0
// The S3 tier's RDMA data plane over libfabric: the server side (bounded pools of registered
// staging buffers, one endpoint per provider) and the client side (registration cache, tokens).
// Built into sluice::fabric when the S3 tier is built too.
#pragma once

#include <sluice/fabric/endpoint.hpp>
#include <sluice/fabric/registrar.hpp>
#include <sluice/pinned_budget.hpp>
#include <sluice/s3/rdma.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::fabric {

/// How a server plane is opened.
struct server_plane_config {
  /// provider "auto" opens every provider that works here (hardware, shm, tcp;ofi_rxm), so that
  /// each client may use the one its token names; a name opens that one only.
  fabric_config fabric;
  /// One staging buffer (PUT: RMA reads land here); also the longest single RMA write of a GET.
  std::size_t staging_buffer_bytes = 4 * mib;
  std::size_t staging_buffers = 16;      ///< per provider: staging memory = count × size (PUT only)
  std::size_t buffers_per_transfer = 4;  ///< RMAs in flight for one request
  /// Registrations of GET sources kept for the next GET of the same object version, per
  /// provider: at most this many bytes of mappings (0: each GET registers its bytes for itself,
  /// as with a store whose mappings have no version) and registration_cache_entries entries.
  /// Each entry keeps its object's file open and mapped, so a deleted or replaced object's disk
  /// space comes back only when its entry is evicted (least recently used first).
  std::uint64_t registration_cache_bytes = std::uint64_t{1} << 30;
  std::size_t registration_cache_entries = 64;  ///< each holds a file descriptor
  /// The host's pinned-memory budget, shared with the other caches that pin (`sluice serve`
  /// shares one with the CUDA grant opener): a kept registration takes its bytes from it
  /// (evicting this cache's unused entries until they fit, else it is not kept) and gives them
  /// back when it leaves the cache. Null: registration_cache_bytes alone bounds the cache.
  std::shared_ptr<pinned_budget> pinned;

  /// The first problem, or nullopt: fabric invalid, a size or count 0, buffers_per_transfer
  /// more than staging_buffers.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// What one provider of a server plane did since it opened (for a host's /metrics).
struct server_plane_statistics {
  std::string provider;                         ///< e.g. "tcp;ofi_rxm"
  endpoint_statistics endpoint;                 ///< RMAs posted, their bytes and errors; fi_mr_reg calls
  std::size_t staging_buffers = 0;              ///< registered staging buffers (the PUT pool)
  std::size_t staging_buffers_free = 0;         ///< of them, free now
  std::uint64_t reopened = 0;                   ///< times the endpoint was replaced (server_plane::reopened)
  std::uint64_t registration_cache_hits = 0;    ///< GETs sent from a kept registration
  std::uint64_t registration_cache_misses = 0;  ///< GET sources registered and kept
  std::size_t registration_cache_entries = 0;   ///< kept now
  std::uint64_t registration_cache_bytes = 0;   ///< of mappings kept now
};

/// The server side of the token protocol. Thread-safe; hold it by shared_ptr (server_config::rdma).
class server_plane final : public s3::rdma_server_plane {
 public:
  /// Opens the endpoints and registers the staging buffers. Errors: invalid_config, or the
  /// error of the last provider tried when none could be opened.
  [[nodiscard]] static std::shared_ptr<server_plane> open(const server_plane_config& config, error_code& ec);
  ~server_plane() override;

  /// The providers opened, e.g. {"shm", "tcp;ofi_rxm"}.
  [[nodiscard]] std::vector<std::string> providers() const;
  /// The endpoint of `provider`, or null.
  [[nodiscard]] std::shared_ptr<endpoint> endpoint_for(std::string_view provider) const;
  /// The counters of each provider opened, in the order of providers(). Thread-safe.
  [[nodiscard]] std::vector<server_plane_statistics> statistics() const;

  [[nodiscard]] bool serves(std::string_view provider) const override;
  /// The blocking form of async_write_from (its posts run on Asio's system executor).
  [[nodiscard]] error_code write_from(const s3::rdma_requester& who, const s3::rdma_token& token,
                                      const s3::rdma_source& source) override;
  /// A GET's bytes as a path built for the request (src/fabric/server_path.hpp): the token as
  /// negotiator, the store's mapping registered (from the registration cache when its version
  /// is there, else for this request only, or kept in the cache), RMA writes of at most
  /// staging_buffer_bytes each, buffers_per_transfer in flight, posted on `executor`; no thread
  /// waits for them.
  void async_write_from(const s3::rdma_requester& who, const s3::rdma_token& token, const s3::rdma_source& source,
                        const boost::asio::any_io_executor& executor, std::function<void(error_code)> done) override;
  /// The blocking form of async_read (its posts and the sink run on Asio's system executor).
  [[nodiscard]] error_code read(const s3::rdma_requester& who, const s3::rdma_token& token, std::uint64_t length,
                                const s3::rdma_sink& sink) override;
  /// A PUT's bytes: RMA reads by the GET's engine into the provider's staging buffers
  /// (src/fabric/server_put.hpp), at most buffers_per_transfer at once, each handed to `sink` in
  /// order on `executor` (which also runs the posts); buffers are lent by the pool as they come
  /// back, read completions come on the progress thread: no thread waits.
  void async_read(const s3::rdma_requester& who, const s3::rdma_token& token, std::uint64_t length,
                  const s3::rdma_sink& sink, const boost::asio::any_io_executor& executor,
                  std::function<void(error_code)> done) override;
  /// Closes every endpoint (endpoint::close): transfers in flight end with an error now.
  void close() noexcept override;
  /// How many times an endpoint was replaced: a transfer whose operations did not complete
  /// within its deadline (a peer that vanished, a token naming memory the provider never
  /// answers for), or whose post found the transmit queue full for the whole post deadline,
  /// leaves its endpoint to a fresh one of the same provider, so one bad token
  /// never wedges the provider for later requests; the old endpoint closes once no call uses it.
  [[nodiscard]] std::uint64_t reopened() const noexcept;

  struct provider_state;

 private:
  server_plane() = default;
  [[nodiscard]] std::shared_ptr<provider_state> open_provider(const std::string& name, error_code& ec) const;
  /// The provider serving `token`, counted as in use (the caller's provider_use gives it back);
  /// retired endpoints that no call uses any more are closed on `executor` (reap).
  [[nodiscard]] std::shared_ptr<provider_state> find_provider(const s3::rdma_token& token,
                                                              const boost::asio::any_io_executor& executor);
  void reopen(const std::shared_ptr<provider_state>& wedged);
  /// Closes retired endpoints no call uses any more, on `executor`: closing joins the endpoint's
  /// progress thread and may wait in libfabric, never on the network thread that asks.
  void reap(const boost::asio::any_io_executor& executor);

  server_plane_config config_;
  mutable std::mutex providers_mutex_;  // providers_, retired_, closed_
  std::vector<std::shared_ptr<provider_state>> providers_;
  std::vector<std::shared_ptr<provider_state>> retired_;                       // replaced, closed when idle
  std::map<std::string, server_plane_statistics, std::less<>> closed_totals_;  // of closed retired endpoints
  bool closed_ = false;
  std::atomic<std::uint64_t> reopened_{0};
};

/// How a client plane is opened.
struct client_plane_config {
  fabric_config fabric;  ///< "auto": see candidate_providers
  /// MRs kept for reuse after their request ended (see fabric::registrar). 0 (the default):
  /// each request registers its memory and deregisters it when it ends. More: repeated
  /// transfers into the same buffers skip registration, and the caller must invalidate() memory
  /// before freeing it (providers that pin pages would otherwise keep the old pages).
  std::size_t cached_registrations = 0;
  /// Endpoints the grants are spread over, round robin (1..64). With shm and tcp;ofi_rxm the
  /// bytes of a server's RMA write are copied by the receiving endpoint's progress thread, one
  /// transfer after another: several endpoints let the parts of a transfer land in parallel.
  std::size_t endpoints = 1;
  [[nodiscard]] std::optional<config_error> validate() const {
    if (endpoints == 0 || endpoints > 64) return config_error{"endpoints", "must be 1..64"};
    return fabric.validate();
  }
};

/// The client side: registers memory and writes tokens. Thread-safe; hold it by shared_ptr
/// (client_config::rdma).
class client_plane final : public s3::rdma_client_plane {
 public:
  /// Opens an endpoint on the configured provider; for "auto", the first candidate that opens
  /// (`peer_local`: the server is on this host, so shm is a candidate).
  [[nodiscard]] static std::shared_ptr<client_plane> open(const client_plane_config& config, bool peer_local,
                                                          error_code& ec);

  [[nodiscard]] std::string_view provider() const noexcept override;
  [[nodiscard]] std::unique_ptr<grant> grant_access(const region& memory, s3::rdma_op op,
                                                    std::chrono::system_clock::time_point expires,
                                                    error_code& ec) override;
  /// The first endpoint (all of them share its provider and attributes).
  [[nodiscard]] const std::shared_ptr<fabric::endpoint>& get_endpoint() const noexcept { return lanes_.front()->ep; }
  /// How many endpoints grants are spread over.
  [[nodiscard]] std::size_t endpoint_count() const noexcept { return lanes_.size(); }
  /// Drops cached registrations overlapping `memory`; call it before freeing memory that was
  /// used for transfers when the provider pins pages (verbs, efa).
  void invalidate(const region& memory);

 private:
  struct lane {
    lane(const std::shared_ptr<fabric::endpoint>& e, std::size_t cached)
        : ep(e), write_cache(e, access::remote_write, cached), read_cache(e, access::remote_read, cached) {}
    std::shared_ptr<fabric::endpoint> ep;
    registrar write_cache;  // GET targets: the server writes into them
    registrar read_cache;   // PUT sources: the server reads
  };
  client_plane() = default;
  std::vector<std::unique_ptr<lane>> lanes_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace sluice::fabric
