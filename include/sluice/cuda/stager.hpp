// The stager: a bounded ring of pinned host slots between a host-side producer (an RDMA or HTTP
// GET, a file read) and device memory. A slot is filled, its bytes are copied to the device
// with cudaMemcpyAsync on the slot's own stream, and the slot is handed out again only once that
// copy finished, so the next slot fills while the previous one crosses PCIe. Pinned memory is
// slots × slot_bytes whatever the transfer size.
#pragma once

#include <sluice/config.hpp>
#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/pinned.hpp>
#include <sluice/region.hpp>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace sluice::cuda {

/// The ring's shape. The default holds 64 MiB pinned.
struct stager_config {
  std::size_t slot_bytes = std::size_t{8} << 20;  ///< one part; a multiple of 4096
  std::size_t slots = 8;                          ///< at least 2 (one filling, one copying)
  int device = 0;                                 ///< the device the copies go to and come from
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// Thread-safe: several producers may hold slots at once.
class stager {
 public:
  /// One slot, held by the caller between acquire() and to_device() or release().
  struct slot {
    std::size_t index = 0;
    region host;  ///< host_pinned, slot_bytes long, 4096-aligned
  };

  /// Allocates the slots (one cudaMallocHost block), a stream and an event per slot.
  /// Errors: invalid_config, no_device, a cuda error.
  [[nodiscard]] static std::unique_ptr<stager> create(const stager_config& config, error_code& ec);
  stager(const stager&) = delete;
  stager& operator=(const stager&) = delete;
  ~stager();  ///< waits for the copies still running

  /// The next free slot, waiting for its last copy to the device to finish. An error of that
  /// copy is returned here (the slot is returned to the ring).
  [[nodiscard]] std::optional<slot> acquire(error_code& ec);
  /// Enqueues the copy of the slot's first `dst.size` bytes into `dst` (device memory) and puts
  /// the slot back in the ring; it is handed out again once the copy finished. `dst` must stay
  /// valid until drain() (or the next acquire of this slot) returns.
  [[nodiscard]] error_code to_device(const slot& s, const region& dst);
  /// Copies `src` (device memory, at most slot_bytes) into the slot's first bytes and waits;
  /// the slot stays held.
  [[nodiscard]] error_code from_device(const slot& s, const region& src);
  /// Puts a slot back without copying.
  void release(const slot& s);
  /// Waits for every copy enqueued so far; the first error among them.
  [[nodiscard]] error_code drain();

  /// All slots as one host_pinned region (to register with a fabric domain once).
  [[nodiscard]] region memory() const noexcept { return memory_.region(); }
  [[nodiscard]] const stager_config& config() const noexcept { return config_; }
  /// Pinned bytes this stager holds (slots × slot_bytes).
  [[nodiscard]] std::size_t pinned_bytes() const noexcept { return memory_.size(); }

 private:
  struct slot_state {
    stream copies;
    void* done = nullptr;  // cudaEvent_t recorded after the slot's last copy
    bool pending = false;  // a copy was enqueued since the slot was last waited for
  };
  stager() = default;
  error_code wait(slot_state& s) noexcept;

  stager_config config_;
  pinned_buffer memory_;
  std::vector<slot_state> slots_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::deque<std::size_t> ring_;  // slots not held by a caller, oldest copy first
};

}  // namespace sluice::cuda
