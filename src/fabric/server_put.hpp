// SPDX-License-Identifier: Apache-2.0
// The server's PUT by RDMA on its RMA engine: the token's bytes are RMA-read by token_transport
// (src/fabric/server_path.hpp) into staging buffers lent by the provider's staging_pool, and
// handed to the store's writer (the sink) in order. Internal to sluice::fabric
// (src/fabric/s3_plane.cpp starts one per request).
#pragma once

#include <sluice/fabric/endpoint.hpp>
#include <sluice/fabric/registrar.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/rdma.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "server_path.hpp"

namespace sluice::fabric::detail {

/// Page-aligned host memory for one staging buffer.
struct aligned_bytes {
  struct deleter {
    void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{4096}); }
  };
  std::unique_ptr<std::byte[], deleter> bytes;
  explicit aligned_bytes(std::size_t n) : bytes(static_cast<std::byte*>(::operator new[](n, std::align_val_t{4096}))) {}
};

/// A provider's staging buffers for PUTs: page-aligned host memory registered once for the
/// endpoint's own reads (access::local: no peer reaches it), lent one buffer at a time, first
/// come, first served. A lent buffer is a shared_registration: it comes back to the pool when its
/// last share is gone (the transfer's, and those of reads still outstanding on it), on the thread
/// that drops that share. Thread-safe; hold it by shared_ptr (a lent buffer keeps the pool).
class staging_pool : public std::enable_shared_from_this<staging_pool> {
 public:
  /// Called with a lent buffer; must be short and must not block.
  using lend_function = std::function<void(shared_registration)>;

  /// `count` buffers of `bytes` each, registered with `staging`; null on an error (those of
  /// registering).
  static std::shared_ptr<staging_pool> open(registrar& staging, std::size_t count, std::size_t bytes, error_code& ec) {
    std::shared_ptr<staging_pool> pool(new staging_pool());
    pool->memory_.reserve(count);
    pool->buffers_.reserve(count);  // never reallocated: lent buffers point into it
    for (std::size_t i = 0; i < count; ++i) {
      pool->memory_.emplace_back(bytes);
      registration reg =
          staging.register_region({pool->memory_.back().bytes.get(), bytes, memory_kind::host_pageable, -1}, ec);
      if (ec) return nullptr;
      pool->buffers_.push_back({std::move(reg), nullptr});
      pool->free_.push_back(i);
    }
    return pool;
  }
  staging_pool(const staging_pool&) = delete;
  staging_pool& operator=(const staging_pool&) = delete;
  ~staging_pool() = default;

  /// Hands a buffer to `got`: at once (on this thread) when one is free, else when one comes back
  /// (on the thread that gives it back).
  void async_lend(lend_function got) {
    std::unique_lock lock(mutex_);
    if (free_.empty()) {
      waiting_.push_back(std::move(got));
      return;
    }
    const std::size_t slot = free_.back();
    free_.pop_back();
    lock.unlock();
    got(lend(slot));
  }

  /// How many buffers the pool has.
  [[nodiscard]] std::size_t size() const noexcept { return buffers_.size(); }
  /// How many of them are free now.
  [[nodiscard]] std::size_t free_count() const {
    const std::lock_guard lock(mutex_);
    return free_.size();
  }

 private:
  // The control block of a lent buffer's shares: gives the buffer back when the last goes.
  class loan {
   public:
    loan(std::shared_ptr<staging_pool> pool, std::size_t slot) noexcept : pool_(std::move(pool)), slot_(slot) {}
    loan(const loan&) = delete;
    loan& operator=(const loan&) = delete;
    ~loan() { pool_->give_back(slot_); }

   private:
    std::shared_ptr<staging_pool> pool_;
    std::size_t slot_;
  };

  staging_pool() = default;

  shared_registration lend(std::size_t slot) {
    const shared_registration::held& buffer = buffers_[slot];
    auto shares = std::make_shared<const loan>(shared_from_this(), slot);
    return {std::shared_ptr<const shared_registration::held>(std::move(shares), &buffer), buffer.reg.region()};
  }

  void give_back(std::size_t slot) {
    std::unique_lock lock(mutex_);
    if (waiting_.empty()) {
      free_.push_back(slot);
      return;
    }
    auto next = std::move(waiting_.front());
    waiting_.pop_front();
    lock.unlock();
    next(lend(slot));
  }

  std::vector<aligned_bytes> memory_;               // outlives the MRs on it
  std::vector<shared_registration::held> buffers_;  // each one's MR
  mutable std::mutex mutex_;
  std::vector<std::size_t> free_;
  std::deque<lend_function> waiting_;  // first come, first served
};

/// One PUT by RDMA: `length` bytes of the token's memory read into staging buffers and handed to
/// the sink in order. At most `window` buffers at once, lent by the pool as they come back; each
/// is read by the engine (token_transport::async_read, an operation per buffer, all sharing the
/// transfer's deadline) and handed to the sink on `executor` once it and every buffer before it
/// arrived. No thread waits: a transfer waiting for the pool holds none, reads complete on the
/// progress thread.
///
/// Completion (`done`, once, on `executor`): success once the sink took every byte; the sink's
/// error; rdma_not_supported before the first buffer reached the sink and rdma_transfer_failed
/// after it, for a read that failed or the deadline (a transfer waiting for the pool waits against
/// it too; one that passes while the sink runs ends the transfer when the sink returns, unless
/// that was the last buffer). After those two the peer leaves the address vector and, when reads
/// were still in flight or the endpoint wedged (`wedges`), `wedged` runs (the plane replaces the
/// endpoint). A buffer whose read is still in flight at the end goes back when the read completes.
class staged_read : public std::enable_shared_from_this<staged_read> {
 public:
  /// What a PUT by RDMA runs with.
  struct setup {
    std::shared_ptr<endpoint> ep;
    std::shared_ptr<staging_pool> pool;
    std::uint64_t buffer_bytes = 0;         ///< of each of the pool's buffers
    std::size_t window = 0;                 ///< buffers at once (> 0)
    boost::asio::any_io_executor executor;  ///< the posts, the sink, the deadline's timer
    token_memory remote;                    ///< granted_memory(token, length)
    std::vector<std::byte> peer_name;       ///< the token's endpoint (forgotten after a failure)
    const s3::rdma_sink* sink = nullptr;    ///< valid until `done` runs; not called after it
    std::uint64_t length = 0;               ///< > 0
    std::function<void()> wedged;           ///< replaces the endpoint
    std::shared_ptr<const void> hold;       ///< released before `done` runs
  };

  /// Starts the transfer; `done` as above. Runs nothing that blocks (the first reads are posted
  /// on `executor`), so a network thread may call it.
  static void start(setup what, std::function<void(error_code)> done) {
    std::shared_ptr<staged_read> self(new staged_read(std::move(what), std::move(done)));
    std::unique_lock lock(self->mutex_);
    self->timer_ = std::make_unique<boost::asio::steady_timer>(self->s_.executor);
    self->arm(self->deadline_->at());
    self->plan(lock);
  }

 private:
  struct chunk {
    std::uint64_t offset = 0;  // in the transfer
    std::uint64_t length = 0;
    shared_registration buffer;  // once lent
    bool reading = false;        // its read is in flight
    bool arrived = false;        // its read completed
    error_code failure;
  };

  staged_read(setup what, std::function<void(error_code)> done)
      : s_(std::move(what)),
        engine_(s_.ep, s_.executor, s_.buffer_bytes, s_.window),
        deadline_(std::make_shared<transfer_deadline>(s_.ep->config())),
        done_(std::move(done)) {}

  using lock_type = std::unique_lock<std::mutex>;

  // Under the lock: asks the pool for buffers for the next chunks, up to the window.
  void plan(lock_type& lock) {
    std::size_t asked = 0;
    while (!finished_ && !stopped_ && planned_ < s_.length && chunks_.size() < s_.window) {
      const std::uint64_t n = std::min<std::uint64_t>(s_.buffer_bytes, s_.length - planned_);
      chunks_.push_back({planned_, n, {}, false, false, {}});
      planned_ += n;
      ++asked;
    }
    if (asked == 0) return;
    lock.unlock();
    for (std::size_t k = 0; k < asked; ++k) {
      s_.pool->async_lend([self = shared_from_this()](shared_registration b) { self->lent(std::move(b)); });
    }
    lock.lock();
  }

  // A buffer from the pool (any thread, short): the first chunk without one takes it and is read
  // into it, unless a read failed already (then it waits for the end).
  void lent(shared_registration buffer) {
    lock_type lock(mutex_);
    chunk* c = nullptr;
    for (auto& k : chunks_) {
      if (!k.buffer.share()) {
        c = &k;
        break;
      }
    }
    if (finished_ || c == nullptr) {
      lock.unlock();
      return;  // `buffer` goes back now
    }
    c->buffer = std::move(buffer);
    if (stopped_) return;
    c->reading = true;
    const shared_registration local(c->buffer.share(), c->buffer.region());
    const transfer_span span{0, c->offset, c->length};
    lock.unlock();
    engine_.async_read(
        local, s_.remote, span, deadline_,
        [self = shared_from_this(), at = span.remote_offset](error_code ec, std::size_t) { self->arrived(at, ec); });
  }

  // A chunk's read completed (on the progress thread, or the thread that closes the endpoint).
  void arrived(std::uint64_t offset, error_code ec) {
    lock_type lock(mutex_);
    chunk* c = nullptr;
    for (auto& k : chunks_) {
      if (k.offset == offset) c = &k;  // a chunk is not removed while it is read
    }
    if (c == nullptr) return;  // not possible
    c->reading = false;
    c->arrived = true;
    c->failure = ec;
    if (ec) {
      stopped_ = true;  // no later chunk is read
      endpoint_wedged_ = endpoint_wedged_ || wedges(ec);
    }
    if (finished_) {  // abandoned: its buffer goes back now
      const shared_registration abandoned = std::move(c->buffer);
      lock.unlock();
      return;
    }
    if (&chunks_.front() == c && !delivering_) {
      delivering_ = true;
      boost::asio::post(s_.executor, [self = shared_from_this()] { self->deliver(); });
    }
  }

  // On the executor: hands the buffers that arrived to the sink, in order.
  void deliver() {
    lock_type lock(mutex_);
    while (!finished_ && !chunks_.empty() && chunks_.front().arrived) {
      if (chunks_.front().failure) {
        end(lock, failure());
        return;
      }
      shared_registration buffer = std::move(chunks_.front().buffer);
      const auto n = static_cast<std::size_t>(chunks_.front().length);
      chunks_.pop_front();
      lock.unlock();
      const error_code e = (*s_.sink)(std::span<const std::byte>(buffer.region().bytes(), n));
      buffer = {};  // back to the pool
      lock.lock();
      reached_ = true;
      deadline_->progressed();
      if (e) {
        end(lock, e);
        return;
      }
      if (expired_ && !(chunks_.empty() && planned_ == s_.length)) {
        end(lock, s3::errc::rdma_transfer_failed);
        return;
      }
      plan(lock);
    }
    delivering_ = false;
    if (!finished_ && chunks_.empty() && planned_ == s_.length) end(lock, {});
  }

  // On the executor, when the timer fires: the deadline passed, or not yet (armed again).
  void check_deadline() {
    lock_type lock(mutex_);
    if (finished_) return;
    const auto at = deadline_->at();
    if (std::chrono::steady_clock::now() < at) {
      arm(at);
      return;
    }
    if (delivering_) {
      expired_ = true;  // the sink is running: deliver() ends the transfer when it returns
      return;
    }
    end(lock, failure());
  }

  // Under the lock.
  void arm(std::chrono::steady_clock::time_point at) {
    timer_->expires_at(at);
    timer_->async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->check_deadline();
    });
  }

  [[nodiscard]] error_code failure() const {
    return reached_ ? s3::errc::rdma_transfer_failed : s3::errc::rdma_not_supported;
  }

  // Under the lock, once: gives back the buffers nothing reads into, releases what a failure
  // leaves behind (the peer, a wedged endpoint) and completes.
  void end(lock_type& lock, error_code ec) {
    finished_ = true;
    timer_.reset();
    std::vector<shared_registration> idle;
    bool quiet = true;
    for (auto& c : chunks_) {
      if (c.reading) {
        quiet = false;
      } else if (c.buffer.share()) {
        idle.push_back(std::move(c.buffer));
      }
    }
    const bool failed = ec == s3::errc::rdma_transfer_failed || ec == s3::errc::rdma_not_supported;
    const bool replace = (failed && !quiet) || endpoint_wedged_;  // reads that never completed, a full queue
    auto done = std::move(done_);
    lock.unlock();
    idle.clear();
    // The peer leaves the address vector once no operation to it is outstanding.
    if (failed) s_.ep->forget(s_.peer_name);
    if (replace) s_.wedged();
    s_.hold.reset();
    done(ec);
  }

  setup s_;
  token_transport engine_;
  std::shared_ptr<transfer_deadline> deadline_;
  std::function<void(error_code)> done_;

  std::mutex mutex_;  // the rest
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::deque<chunk> chunks_;   // in order; front is the next for the sink
  std::uint64_t planned_ = 0;  // bytes assigned to chunks
  bool delivering_ = false;    // deliver() is queued or running
  bool expired_ = false;       // the deadline passed while the sink ran
  bool finished_ = false;
  bool reached_ = false;          // a buffer reached the sink
  bool stopped_ = false;          // a read failed: no more are started
  bool endpoint_wedged_ = false;  // a read timed out or found the queue full for good
};

}  // namespace sluice::fabric::detail
