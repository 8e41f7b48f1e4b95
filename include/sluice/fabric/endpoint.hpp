// SPDX-License-Identifier: Apache-2.0
// An RDM endpoint on one libfabric provider, with its fabric, domain, completion queue and
// address vector, memory registration, and a progress thread that completes operations.
//
// Progress. Providers such as tcp;ofi_rxm and shm make progress only while someone reads the
// completion queue (FI_PROGRESS_MANUAL), on the side that starts an RMA and on the side whose
// memory it targets. Each endpoint therefore runs one progress thread: while nothing is in
// flight it sleeps on the CQ's file descriptor (FI_WAIT_FD, once fi_trywait allows; a provider
// without one is polled every 1-10 ms, or continuously while a remote_access_window is open,
// and a window that opens or a post wakes it at once);
// while operations are outstanding it polls. It runs each operation's completion function;
// those must be short and must not block.
#pragma once

#include <sluice/fabric/domain.hpp>
#include <sluice/region.hpp>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::fabric {

/// What a memory registration lets peers do (local use is always allowed).
enum class access : std::uint8_t {
  local = 0,              ///< only this endpoint's own operations use it (staging buffers)
  remote_read = 1,        ///< peers may RMA-read it
  remote_write = 2,       ///< peers may RMA-write it
  remote_read_write = 3,  ///< both
  write_source = 4,       ///< only the source of this endpoint's RMA writes (may be read-only memory)
};

class endpoint;

/// A memory region registered on an endpoint's domain (fi_mr_reg), closed on destruction.
/// Move-only; keeps its endpoint alive.
class memory_region {
 public:
  memory_region() = default;

  /// The registered memory; empty when default-constructed or moved from.
  [[nodiscard]] const sluice::region& region() const noexcept { return region_; }
  /// fi_mr_desc: the local descriptor passed with operations on this memory.
  [[nodiscard]] void* descriptor() const noexcept;
  /// fi_mr_key: the key a peer names this memory with.
  [[nodiscard]] std::uint64_t key() const noexcept;
  /// The address a peer names byte `offset` of this region with: the virtual address when the
  /// provider uses FI_MR_VIRT_ADDR, otherwise the offset itself.
  [[nodiscard]] std::uint64_t remote_address(std::uint64_t offset) const noexcept;
  /// What peers may do with it.
  [[nodiscard]] fabric::access access() const noexcept { return access_; }
  [[nodiscard]] fid_mr* native_handle() const noexcept { return mr_.native_handle(); }

 private:
  friend class endpoint;
  std::shared_ptr<endpoint> owner_;
  fid_handle<fid_mr> mr_;
  sluice::region region_{};
  fabric::access access_ = access::local;
  bool virtual_addresses_ = true;
};

/// A peer's memory as an RMA names it: address (virtual or offset, as the peer's provider
/// says), length and key.
struct remote_segment {
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::uint64_t key = 0;
  friend bool operator==(const remote_segment&, const remote_segment&) = default;
};

/// What a post does when the provider's transmit queue is full (FI_EAGAIN).
enum class full_queue : std::uint8_t {
  wait,    ///< retry until the queue drains or min(operation_timeout, connect_timeout) passed
  report,  ///< try once: FI_EAGAIN comes back at once (done never runs); the caller retries later
};

/// Called once when an operation completes: success, a fabric error from fi_cq_readerr, or
/// operation_aborted when the endpoint closes first. Runs on the progress thread.
using completion_function = std::function<void(error_code)>;

/// Per-endpoint counters, for tests and monitoring.
struct endpoint_statistics {
  std::uint64_t operations = 0;     ///< RMA operations posted (after splitting)
  std::uint64_t bytes = 0;          ///< bytes those operations moved
  std::uint64_t errors = 0;         ///< operations completed with an error
  std::uint64_t registrations = 0;  ///< fi_mr_reg calls that succeeded
};

/// An RDM endpoint (FI_EP_RDM) with RMA, bound to its own CQ and AV. Not copyable or movable:
/// memory regions and the progress thread refer to it; hold it by shared_ptr.
class endpoint : public std::enable_shared_from_this<endpoint> {
 public:
  /// Opens an endpoint on `provider` (one name; "auto" is resolved by the caller with
  /// candidate_providers) and starts its progress thread. Errors: FI_ENODATA when the provider
  /// is not available or cannot do RMA with the required attributes; errc::unavailable when
  /// libfabric itself cannot be loaded (libfabric_available).
  [[nodiscard]] static std::shared_ptr<endpoint> open(std::string_view provider, const fabric_config& config,
                                                      error_code& ec);
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;
  /// close(), then closes the remaining libfabric objects.
  ~endpoint();
  /// Closes the libfabric endpoint now: the progress thread stops, no byte moves after this
  /// returns, what is still outstanding completes with operation_aborted and later posts fail
  /// with it. Memory regions stay valid (the domain lives on). Idempotent; not from a
  /// completion function.
  void close() noexcept;

  /// The provider's name and the modes it asked for.
  [[nodiscard]] const provider_traits& traits() const noexcept { return traits_; }
  /// This endpoint's address (fi_getname), what a peer inserts into its address vector.
  [[nodiscard]] std::span<const std::byte> name() const noexcept { return name_; }
  [[nodiscard]] const fabric_config& config() const noexcept { return config_; }
  [[nodiscard]] endpoint_statistics statistics() const noexcept;

  /// Registers `memory` with `what` access for peers (bound to this endpoint when the provider
  /// wants FI_MR_ENDPOINT; with a key of our choosing unless FI_MR_PROV_KEY). Device memory
  /// needs an endpoint with hmem(); otherwise errc::unsupported_memory.
  [[nodiscard]] memory_region register_memory(const region& memory, access what, error_code& ec);

  /// The fi_addr_t of a peer, inserting its name into the address vector on first use. A name
  /// that is not of this provider's address format (length, or a string without its NUL) is
  /// FI_EINVAL.
  [[nodiscard]] fi_addr_t resolve(std::span<const std::byte> peer_name, error_code& ec);

  /// A peer's entry in the address vector, held by a transfer for as long as operations it
  /// posted to the peer may be outstanding (keep it with them: their completion functions hold
  /// a copy). forget() takes a peer out of the address vector only once no lease holds it:
  /// fi_av_remove frees the connection that another transfer's outstanding operations use
  /// (ofi_rxm then crashes in a later post or completion). Copies share one hold.
  class peer_lease {
   public:
    peer_lease() = default;
    /// The peer's address; FI_ADDR_UNSPEC when empty.
    [[nodiscard]] fi_addr_t address() const noexcept { return hold_ ? hold_->address : FI_ADDR_UNSPEC; }
    [[nodiscard]] explicit operator bool() const noexcept { return hold_ != nullptr; }

   private:
    friend class endpoint;
    struct hold {
      hold(std::shared_ptr<endpoint> e, std::string n, fi_addr_t a) noexcept
          : ep(std::move(e)), name(std::move(n)), address(a) {}
      hold(const hold&) = delete;
      hold& operator=(const hold&) = delete;
      ~hold() { ep->release(name); }
      std::shared_ptr<endpoint> ep;
      std::string name;
      fi_addr_t address;
    };
    std::shared_ptr<const hold> hold_;
  };
  /// resolve(), held: the peer stays in the address vector while the lease (or a copy) lives.
  [[nodiscard]] peer_lease lease(std::span<const std::byte> peer_name, error_code& ec);
  /// Drops a peer from the address vector (after a failure), so that its next use reconnects:
  /// at once when no lease holds it, else when the last lease is gone.
  void forget(std::span<const std::byte> peer_name);

  /// Starts an RMA write of `length` bytes from `local` at `local_offset` to the peer's memory
  /// named by (`remote_address`, `key`). Transfers longer than the provider's max_msg_size are
  /// split; `done` runs once, after the last piece. Returns an error (and never runs `done`)
  /// when nothing could be posted: the span outside `local` (region_too_small) or a posting
  /// error. A full transmit queue (FI_EAGAIN) is waited out for up to
  /// min(operation_timeout, connect_timeout) with full_queue::wait (the calling thread sleeps in
  /// 20 µs steps meanwhile); with full_queue::report the first piece's FI_EAGAIN is returned at
  /// once, so that a thread shared by many transfers never waits on one peer. `local` must
  /// outlive the completion.
  [[nodiscard]] error_code post_write(const memory_region& local, std::uint64_t local_offset, std::uint64_t length,
                                      fi_addr_t peer, std::uint64_t remote_address, std::uint64_t key,
                                      completion_function done, full_queue when_full = full_queue::wait);
  /// Starts an RMA read of `length` bytes from the peer's memory into `local` at `local_offset`;
  /// as post_write.
  [[nodiscard]] error_code post_read(const memory_region& local, std::uint64_t local_offset, std::uint64_t length,
                                     fi_addr_t peer, std::uint64_t remote_address, std::uint64_t key,
                                     completion_function done, full_queue when_full = full_queue::wait);

  /// While a window is open, peers may be moving bytes into or out of this endpoint's memory:
  /// a provider with manual progress and no wait object needs the progress thread polling
  /// rather than napping. Open one for the life of each request that hands out a token.
  class remote_access_window {
   public:
    explicit remote_access_window(std::shared_ptr<endpoint> ep) : ep_(std::move(ep)) {
      ++ep_->remote_access_;
      ep_->wake();  // a napping progress thread would leave the peer's first RMAs waiting
    }
    remote_access_window(const remote_access_window&) = delete;
    remote_access_window& operator=(const remote_access_window&) = delete;
    ~remote_access_window() { --ep_->remote_access_; }

   private:
    std::shared_ptr<endpoint> ep_;
  };
  /// Whether the CQ has a wait object the progress thread sleeps on when idle (FI_WAIT_FD).
  [[nodiscard]] bool can_wait() const noexcept { return cq_can_wait_; }

  [[nodiscard]] fid_ep* native_handle() const noexcept { return ep_.native_handle(); }
  [[nodiscard]] fid_domain* domain_handle() const noexcept { return domain_.native_handle(); }
  [[nodiscard]] fid_fabric* fabric_handle() const noexcept { return fabric_.native_handle(); }

 private:
  struct operation;
  struct split_state;
  endpoint() = default;
  error_code post(bool write, const memory_region& local, std::uint64_t local_offset, std::uint64_t length,
                  fi_addr_t peer, std::uint64_t remote_address, std::uint64_t key, completion_function done,
                  full_queue when_full);
  error_code post_one(bool write, const memory_region& local, std::uint64_t local_offset, std::uint64_t length,
                      fi_addr_t peer, std::uint64_t remote_address, std::uint64_t key, operation* op,
                      full_queue when_full);
  void progress_loop();
  void finish(operation* op, error_code ec);
  /// Ends the progress thread's nap (no wait object) at once: a window opened, an operation was
  /// posted, or the endpoint closes.
  void wake();

  fabric_config config_;
  provider_traits traits_;
  info_ptr info_;
  fid_handle<fid_fabric> fabric_;
  fid_handle<fid_domain> domain_;
  fid_handle<fid_cq> cq_;
  fid_handle<fid_av> av_;
  fid_handle<fid_ep> ep_;
  std::vector<std::byte> name_;
  bool cq_can_wait_ = false;
  int wait_fd_ = -1;
  std::atomic<std::size_t> remote_access_{0};
  std::mutex nap_mutex_;
  std::condition_variable nap_;
  bool woken_ = false;  // guarded by nap_mutex_: wake() came since the last nap

  /// A peer in the address vector.
  struct known_peer {
    fi_addr_t address = FI_ADDR_UNSPEC;
    std::size_t leases = 0;  // peer_lease holds
    bool stale = false;      // forgotten while leased: removed when the last lease goes
  };
  /// Under peers_mutex_: the entry of a well-formed name, inserted on first use.
  known_peer* find_or_insert(std::span<const std::byte> peer_name, std::string& key, error_code& ec);
  /// A lease of `name` ended.
  void release(const std::string& name) noexcept;
  /// Under peers_mutex_: fi_av_remove and out of the map.
  void remove(std::map<std::string, known_peer>::iterator at) noexcept;
  std::mutex peers_mutex_;
  std::map<std::string, known_peer> peers_;  // peer name bytes → entry

  std::mutex operations_mutex_;
  std::vector<operation*> outstanding_;  // what the destructor aborts
  std::atomic<std::size_t> in_flight_{0};
  std::uint64_t random_key();
  std::mutex key_mutex_;
  std::mt19937_64 key_engine_{std::random_device{}()};
  std::atomic<bool> stopping_{false};
  std::shared_mutex close_mutex_;  // posts hold it shared; close() exclusively
  bool closed_ = false;            // guarded by close_mutex_
  std::atomic<std::uint64_t> operations_{0}, bytes_{0}, errors_{0}, registrations_{0};
  std::thread progress_;
};

}  // namespace sluice::fabric
