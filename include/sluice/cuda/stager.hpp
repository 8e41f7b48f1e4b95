// SPDX-License-Identifier: Apache-2.0
// The stager: a bounded ring of pinned host slots between a host-side producer (an RDMA or HTTP
// GET, a file read) and device memory. A slot is filled, its bytes are copied to the device
// with cudaMemcpyAsync on the slot's own stream, and the slot is handed out again only once that
// copy finished, so the next slot fills while the previous one crosses PCIe. Pinned memory is
// slots × slot_bytes whatever the transfer size.
//
// Two ways to wait: acquire()/drain() block the calling thread (acquire waits for async_acquire);
// async_acquire()/async_drain()
// complete on the handler's executor and block no thread (a CUDA host callback queued behind the
// slot's copy hands the wait on), so a transport can run the ring on its caller's executor.
#pragma once

#include <sluice/config.hpp>
#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/pinned.hpp>
#include <sluice/region.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
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

  /// As acquire(), without blocking: completes with `void(error_code, slot)` on the handler's
  /// executor once a slot is free and its last copy finished. Waiters (blocked acquire() calls
  /// among them) are served in order. On error no slot is held.
  template <class CompletionToken>
  auto async_acquire(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, slot)>(
        [this](auto handler) {
          acquire_then(make_waiter(std::move(handler), [](stager& owner, std::size_t index, auto h) {
            error_code ec;
            const std::optional<slot> s = owner.claim(index, ec);
            std::move(h)(ec, s.value_or(slot{}));
          }));
        },
        token);
  }

  /// As drain(), without blocking: completes with `void(error_code)` on the handler's executor
  /// once every copy enqueued so far finished; the error is the first a slot's last copy reported.
  /// Slots stay where they are (held or in the ring).
  template <class CompletionToken>
  auto async_drain(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [this](auto handler) {
          drain_then(make_waiter(std::move(handler),
                                 [](stager& owner, std::size_t, auto h) { std::move(h)(owner.copy_errors()); }));
        },
        token);
  }

  /// All slots as one host_pinned region (to register with a fabric domain once).
  [[nodiscard]] region memory() const noexcept { return memory_.region(); }
  [[nodiscard]] const stager_config& config() const noexcept { return config_; }
  /// Pinned bytes this stager holds (slots × slot_bytes).
  [[nodiscard]] std::size_t pinned_bytes() const noexcept { return memory_.size(); }

 private:
  // Told once, possibly on a CUDA callback thread: it only posts to an executor.
  class waiter {
   public:
    waiter() = default;
    waiter(const waiter&) = delete;
    waiter& operator=(const waiter&) = delete;
    virtual ~waiter() = default;
    virtual void ready(stager& owner, std::size_t index) = 0;
  };

  // A waiter that keeps the handler's executor busy (so an io_context run() does not return
  // while a copy is still running) and runs `then(owner, index, handler)` there.
  template <class Handler, class Then>
  static std::unique_ptr<waiter> make_waiter(Handler handler, Then then) {
    class posting final : public waiter {
     public:
      posting(Handler h, Then t)
          : work_(boost::asio::prefer(boost::asio::get_associated_executor(h),
                                      boost::asio::execution::outstanding_work.tracked)),
            handler_(std::move(h)),
            then_(std::move(t)) {}
      // The work guard travels with the posted function and ends on the executor's thread, after
      // the handler ran: ending it here (a CUDA thread) could let the executor's run() return and
      // its owner destroy it while this thread still touches it.
      void ready(stager& owner, std::size_t index) override {
        const auto to = boost::asio::prefer(work_, boost::asio::execution::outstanding_work.untracked);
        boost::asio::post(to, [o = &owner, index, h = std::move(handler_), t = std::move(then_),
                               w = std::move(work_)]() mutable { t(*o, index, std::move(h)); });
      }

     private:
      // decay: prefer() returns its argument itself (a reference) when it is already tracked.
      std::decay_t<decltype(boost::asio::prefer(boost::asio::get_associated_executor(std::declval<Handler&>()),
                                                boost::asio::execution::outstanding_work.tracked))>
          work_;
      Handler handler_;
      Then then_;
    };
    return std::make_unique<posting>(std::move(handler), std::move(then));
  }

  void acquire_then(std::unique_ptr<waiter> w);
  void drain_then(std::unique_ptr<waiter> w);
  void hand(std::size_t index, std::unique_ptr<waiter> w);
  void give_back(std::size_t index);
  std::optional<slot> claim(std::size_t index, error_code& ec);
  [[nodiscard]] error_code copy_errors() const noexcept;
  [[nodiscard]] slot make_slot(std::size_t index) const noexcept;

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
  std::deque<std::size_t> ring_;                 // slots not held by a caller, oldest copy first
  std::deque<std::unique_ptr<waiter>> waiters_;  // async_acquire calls waiting for a slot
};

}  // namespace sluice::cuda
