// The server's side of the token protocol as a path: a GET by RDMA is
//
//     path<token_negotiator, mapping_registrar, token_transport>::async_put(mapping)
//
// (from the path's point of view the server puts its local bytes into the client's memory).
// The negotiator is the token the request carried (the peer it names, the memory it grants),
// the registrar registers the store's mapping for this request (fabric::registrar with no
// cache: a cached MR of an unmapped file would name whatever is mapped there next), and the
// transport RMA-writes it, at most `window` pieces in flight, with no thread waiting for them.
// Internal to sluice::fabric (src/fabric/s3_plane.cpp builds it per request).
#pragma once

#include <sluice/fabric/endpoint.hpp>
#include <sluice/fabric/registrar.hpp>
#include <sluice/path.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/rdma_token.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

namespace sluice::fabric::detail {

/// The memory a token grants, as this server's endpoint names it: the peer and the segments,
/// in order.
struct token_memory {
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::vector<remote_segment> segments;
  std::uint64_t length = 0;  ///< of all segments together
};

/// Walks a token's segments in order, piece by piece. Precondition of skip and next: the
/// segments hold the bytes asked for (the callers check the token's length first).
struct segment_cursor {
  std::size_t segment = 0;
  std::uint64_t within = 0;  // bytes of segments[segment] already passed

  void skip(const std::vector<remote_segment>& segments, std::uint64_t n) {
    while (n > 0) {
      if (within == segments[segment].length) {
        ++segment;
        within = 0;
      }
      const std::uint64_t step = std::min(n, segments[segment].length - within);
      within += step;
      n -= step;
    }
  }
  /// The next piece of at most `want` bytes (want > 0): peer address, length and key.
  remote_segment next(const std::vector<remote_segment>& segments, std::uint64_t want) {
    while (within == segments[segment].length) {
      ++segment;
      within = 0;
    }
    const remote_segment& seg = segments[segment];
    const remote_segment piece{seg.address + within, std::min(want, seg.length - within), seg.key};
    within += piece.length;
    return piece;
  }
};

/// A registration of a store's mapping that outlives its request while RMAs on it are still in
/// flight: the MR and the mapping's owner are shared with the operations that use them. Move-only
/// (one owner among the path's parts); the transport takes a share.
class mapping_registration {
 public:
  struct held {
    registration reg;
    std::shared_ptr<const void> owner;  // keeps the mapping valid and unchanged
  };
  mapping_registration() = default;
  explicit mapping_registration(std::shared_ptr<const held> h) noexcept : held_(std::move(h)) {}
  mapping_registration(mapping_registration&&) noexcept = default;
  mapping_registration& operator=(mapping_registration&&) noexcept = default;
  mapping_registration(const mapping_registration&) = delete;
  mapping_registration& operator=(const mapping_registration&) = delete;
  ~mapping_registration() = default;

  /// The registered memory; empty after a failed registration or a move.
  [[nodiscard]] sluice::region region() const noexcept { return held_ ? held_->reg.region() : sluice::region{}; }
  /// The share an operation keeps until it completes.
  [[nodiscard]] const std::shared_ptr<const held>& share() const noexcept { return held_; }

 private:
  std::shared_ptr<const held> held_;
};

/// Registers a store's mapping for RMA writes (access::write_source) on one endpoint, for one
/// request, keeping `owner` (the mapping's) with the registration.
class mapping_registrar {
 public:
  using registration_type = mapping_registration;
  mapping_registrar(registrar& sources, std::shared_ptr<const void> owner) noexcept
      : sources_(&sources), owner_(std::move(owner)) {}

  registration_type register_region(const region& mem, error_code& ec) {
    registration reg = sources_->register_region(mem, ec);
    if (ec) return {};
    return mapping_registration{
        std::make_shared<const mapping_registration::held>(mapping_registration::held{std::move(reg), owner_})};
  }

 private:
  registrar* sources_;
  std::shared_ptr<const void> owner_;
};

/// The token as a negotiator: agrees to move the request's bytes into (or out of) the memory the
/// token grants, after resolving its peer on the endpoint. Errors: invalid_rdma_token (the
/// segments hold fewer bytes than asked), rdma_not_supported (the peer's address is not one
/// this provider takes). Completing after a failure releases what the transfer leaves behind: the
/// peer leaves the address vector (its next request connects afresh) and, when the endpoint
/// wedged (operations outstanding past their deadline, or a transmit queue that stayed full),
/// `wedged` runs (the plane replaces the endpoint).
class token_negotiator {
 public:
  using remote_type = token_memory;
  static constexpr std::string_view name = "token";

  class session_type {
   public:
    session_type(token_memory remote, transfer_span span) : remote_(std::move(remote)), span_(span) {}
    [[nodiscard]] const token_memory& remote() const noexcept { return remote_; }
    [[nodiscard]] transfer_span span() const noexcept { return span_; }

   private:
    token_memory remote_;
    transfer_span span_;
  };

  token_negotiator(std::shared_ptr<endpoint> ep, const s3::rdma_token& token, std::function<void()> wedged)
      : ep_(std::move(ep)), token_(&token), wedged_(std::move(wedged)) {}

  template <class Handler>
  void async_negotiate(const transfer_request& request, Handler&& handler) {
    // Posted: the path's caller (a network thread) goes on; the rest runs on the path's executor.
    auto executor = boost::asio::get_associated_executor(handler);
    error_code ec;
    std::optional<session_type> session;
    const std::uint64_t length = request.range.length.value_or(0);
    if (token_->total_length() < length) {
      ec = s3::errc::invalid_rdma_token;
    } else {
      token_memory remote{ep_->resolve(token_->endpoint, ec), {}, token_->total_length()};
      if (ec) {
        ec = s3::errc::rdma_not_supported;
      } else {
        for (const auto& s : token_->segments) remote.segments.push_back({s.address, s.length, s.key});
        session.emplace(std::move(remote), transfer_span{0, 0, length});
      }
    }
    boost::asio::post(executor, [h = std::forward<Handler>(handler), ec, s = std::move(session)]() mutable {
      std::move(h)(ec, s ? std::move(*s) : session_type{{}, {}});
    });
  }

  template <class Handler>
  void async_complete(session_type&& /*session*/, error_code ec, std::uint64_t bytes, Handler&& handler) {
    if (ec) {
      const bool outstanding = ec == boost::asio::error::timed_out;
      // Not under outstanding operations: removing a peer then is not safe on every provider.
      if (!outstanding) ep_->forget(token_->endpoint);
      if (outstanding || ec == make_fabric_error(-FI_EAGAIN)) wedged_();
    }
    transfer_result result;
    result.bytes = bytes;
    result.negotiator = name;
    auto executor = boost::asio::get_associated_executor(handler);
    boost::asio::dispatch(executor, [h = std::forward<Handler>(handler), ec, r = std::move(result)]() mutable {
      std::move(h)(ec, std::move(r));
    });
  }

 private:
  std::shared_ptr<endpoint> ep_;
  const s3::rdma_token* token_;
  std::function<void()> wedged_;
};

/// RMA between a mapping_registration and the memory a token grants: the span cut into pieces of
/// at most `piece_bytes` along the token's segments, at most `window` in flight. Posts run on
/// `poster` (a post may wait up to connect_timeout for a full transmit queue: never on a network
/// thread or the progress thread); completions come on the progress thread and queue the next
/// posts. No thread waits for a completion. Deadlines as the plane's: connect_timeout until the first
/// piece completes, then operation_timeout since the last one. Completion:
/// `void(error_code, std::size_t bytes)`, bytes = those of the pieces that completed, once:
/// - after every posted piece completed, with the first error (a failed post stops posting);
/// - at the deadline, with boost::asio::error::timed_out, while pieces are still outstanding:
///   they keep their share of the registration until they complete (or the endpoint closes).
class token_transport {
 public:
  using remote_type = token_memory;
  static constexpr std::string_view name = "fabric";

  token_transport(std::shared_ptr<endpoint> ep, boost::asio::any_io_executor poster, std::uint64_t piece_bytes,
                  std::size_t window)
      : endpoint_(std::move(ep)), poster_(std::move(poster)), piece_bytes_(piece_bytes), window_(window) {}

  template <class CompletionToken>
  auto async_write(const mapping_registration& local, const token_memory& remote, transfer_span span,
                   CompletionToken&& token) {
    return initiate(true, local, remote, span, std::forward<CompletionToken>(token));
  }
  template <class CompletionToken>
  auto async_read(const mapping_registration& local, const token_memory& remote, transfer_span span,
                  CompletionToken&& token) {
    return initiate(false, local, remote, span, std::forward<CompletionToken>(token));
  }

 private:
  using steady = std::chrono::steady_clock;

  // One transfer's state, shared with its posts' completion functions. Everything under
  // `mutex`, the timer too (no strand: an operation may outlive the executor's owner while pieces
  // to a vanished peer stay outstanding, and a strand or timer must not).
  struct operation : std::enable_shared_from_this<operation> {
    operation(bool w, std::shared_ptr<endpoint> e, boost::asio::any_io_executor p)
        : write(w), ep(std::move(e)), poster(std::move(p)) {}
    const bool write;
    std::shared_ptr<endpoint> ep;
    boost::asio::any_io_executor poster;
    std::shared_ptr<const mapping_registration::held> local;
    std::uint64_t local_offset = 0;  // in local's MR
    token_memory remote;
    std::uint64_t length = 0;
    std::uint64_t piece_bytes = 0;
    std::size_t window = 0;
    std::function<void(error_code, std::size_t)> complete;

    std::mutex mutex;
    std::unique_ptr<boost::asio::steady_timer> timer;  // reset when finished
    segment_cursor cursor;                             // over remote.segments
    std::uint64_t posted = 0;
    std::uint64_t moved = 0;
    std::size_t outstanding = 0;
    bool pumping = false;     // a pump is queued or running
    bool initiating = false;  // the first pump runs inside the initiating call
    bool finished = false;
    error_code failure;
    steady::time_point connect_deadline;
    steady::time_point last_completion;

    // On `poster`: posts pieces until the window is full, the span is posted or one failed.
    void pump() {
      std::unique_lock lock(mutex);
      while (!finished && !failure && posted < length && outstanding < window) {
        const remote_segment piece = cursor.next(remote.segments, std::min(piece_bytes, length - posted));
        const std::uint64_t n = piece.length;
        const std::uint64_t at = local_offset + posted;
        const std::uint64_t address = piece.address;
        const std::uint64_t key = piece.key;
        posted += n;
        ++outstanding;
        lock.unlock();
        auto done = [self = shared_from_this(), n](error_code e) { self->completed(e, n); };
        const error_code ec = write ? ep->post_write(local->reg.mr(), at, n, remote.peer, address, key, done)
                                    : ep->post_read(local->reg.mr(), at, n, remote.peer, address, key, done);
        lock.lock();
        if (ec) {
          --outstanding;
          if (!failure) failure = ec;
        }
      }
      pumping = false;
      settle(lock);
    }

    // On the progress thread (or the thread that closes the endpoint).
    void completed(error_code ec, std::uint64_t n) {
      std::unique_lock lock(mutex);
      --outstanding;
      if (ec) {
        if (!failure) failure = ec;
      } else {
        moved += n;
        last_completion = steady::now();
      }
      if (!finished && !failure && posted < length && !pumping) {
        pumping = true;  // never posts from here: a full transmit queue would stall the progress thread
        boost::asio::post(poster, [self = shared_from_this()] { self->pump(); });
      }
      settle(lock);
    }

    // Completes when nothing is outstanding and nothing more will be posted.
    void settle(std::unique_lock<std::mutex>& lock) {
      if (finished || pumping || outstanding != 0 || (!failure && posted < length)) return;
      finish(lock, failure);
    }

    // On `poster`, when the timer fires: the deadline passed, or not yet (armed again).
    void check_deadline() {
      std::unique_lock lock(mutex);
      if (finished) return;
      const steady::time_point deadline =
          moved > 0 ? last_completion + ep->config().operation_timeout : connect_deadline;
      if (steady::now() < deadline) {
        arm(deadline);
        return;
      }
      finish(lock, boost::asio::error::timed_out);  // what is outstanding keeps its share
    }

    // Under `mutex`.
    void arm(steady::time_point deadline) {
      timer->expires_at(deadline);
      timer->async_wait([self = shared_from_this()](error_code ec) {
        if (!ec) self->check_deadline();
      });
    }

    void finish(std::unique_lock<std::mutex>& lock, error_code ec) {
      finished = true;
      timer.reset();  // cancels the wait: its handler holds `this` and finds it finished
      const auto bytes = static_cast<std::size_t>(moved);
      auto done = std::move(complete);
      const bool defer = initiating;
      lock.unlock();
      if (defer) {  // never complete inside the initiating call
        boost::asio::post(poster, [done = std::move(done), ec, bytes] { done(ec, bytes); });
        return;
      }
      done(ec, bytes);
    }
  };

  template <class CompletionToken>
  auto initiate(bool write, const mapping_registration& local, const token_memory& remote, transfer_span span,
                CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [this, write, &local, &remote, span](auto handler) {
          auto executor = boost::asio::get_associated_executor(handler);
          using handler_type = decltype(handler);
          struct pending {
            handler_type handler;
            boost::asio::executor_work_guard<decltype(executor)> work;
          };
          auto holder = std::make_shared<pending>(pending{std::move(handler), boost::asio::make_work_guard(executor)});
          // Dispatched, as Asio completes its own operations: posted unless already on the
          // handler's executor.
          auto complete = [holder](error_code ec, std::size_t bytes) {
            boost::asio::dispatch(holder->work.get_executor(), [holder, ec, bytes] {
              std::move(holder->handler)(ec, bytes);
              holder->work.reset();
            });
          };
          error_code bad;
          if (!local.region().contains(span.local_offset, span.length)) {
            bad = errc::region_too_small;
          } else if (span.remote_offset > remote.length || span.length > remote.length - span.remote_offset) {
            bad = errc::bad_range;
          }
          if (bad || span.length == 0) {
            boost::asio::post(holder->work.get_executor(), [complete, bad] { complete(bad, 0); });
            return;
          }
          auto op = std::make_shared<operation>(write, endpoint_, poster_);
          op->local = local.share();
          op->local_offset = op->local->reg.offset_in_mr() + span.local_offset;
          op->remote = remote;
          op->cursor.skip(op->remote.segments, span.remote_offset);
          op->length = span.length;
          op->piece_bytes = piece_bytes_;
          op->window = window_;
          op->complete = std::move(complete);
          op->connect_deadline = steady::now() + endpoint_->config().connect_timeout;
          {
            const std::lock_guard lock(op->mutex);
            op->timer = std::make_unique<boost::asio::steady_timer>(poster_);
            op->arm(op->connect_deadline);
            op->pumping = true;
          }
          // The first posts run here when this thread is one of `poster`'s (a path's step after
          // its negotiator: no second hop onto the same pool), else are posted there: a post may
          // wait for a full transmit queue.
          // (target() of Boost 1.74's any_executor does not check the type: target_type() first.)
          using pool_executor = boost::asio::thread_pool::executor_type;
          const auto* pool = poster_.target_type() == typeid(pool_executor) ? poster_.target<pool_executor>() : nullptr;
          if (pool != nullptr && pool->running_in_this_thread()) {
            {
              const std::lock_guard lock(op->mutex);
              op->initiating = true;
            }
            op->pump();
            const std::lock_guard lock(op->mutex);
            op->initiating = false;
            return;
          }
          boost::asio::post(poster_, [op] { op->pump(); });
        },
        token);
  }

  std::shared_ptr<endpoint> endpoint_;
  boost::asio::any_io_executor poster_;
  std::uint64_t piece_bytes_;
  std::size_t window_;
};

}  // namespace sluice::fabric::detail
