// SPDX-License-Identifier: Apache-2.0
// The server's side of the token protocol as a path: a GET by RDMA is
//
//     path<token_negotiator, mapping_registrar, token_transport>::async_put(mapping)
//
// (from the path's point of view the server puts its local bytes into the client's memory).
// The negotiator is the token the request carried (the peer it names, the memory it grants),
// the registrar registers the store's mapping for this request (fabric::registrar with no
// cache: a cached MR of an unmapped file would name whatever is mapped there next), and the
// transport RMA-writes it, at most `window` pieces in flight, with no thread waiting for them.
// token_transport is the server's one RMA engine: a PUT by RDMA (src/fabric/server_put.hpp)
// reads each of its staging buffers with it too.
// Internal to sluice::fabric (src/fabric/s3_plane.cpp builds it per request).
#pragma once

#include <sluice/detail/registration_cache.hpp>
#include <sluice/fabric/endpoint.hpp>
#include <sluice/fabric/registrar.hpp>
#include <sluice/path.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/rdma.hpp>
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
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

namespace sluice::fabric::detail {

/// The memory a token grants, as this server's endpoint names it: the peer and the segments,
/// in order. Copies share the peer's lease: the transfer's operations keep the peer in the
/// address vector until the last of them completes, whoever else forgets it meanwhile.
/// Invariant (granted_memory keeps it): `length` is the sum of the segments' lengths.
struct token_memory {
  endpoint::peer_lease lease;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::vector<remote_segment> segments;
  std::uint64_t length = 0;  ///< of all segments together
};

/// The memory `token` grants for a transfer of `length` bytes, its peer resolved (and leased) on
/// `ep`. The token's bytes came from the network: nothing of it is trusted that is not checked
/// here. Errors: invalid_rdma_token (a segment whose end or whose total with the others passes
/// 2^64, or segments that hold fewer than `length` bytes), rdma_not_supported (the peer's address
/// is not one this provider takes).
inline token_memory granted_memory(endpoint& ep, const s3::rdma_token& token, std::uint64_t length, error_code& ec) {
  constexpr std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
  token_memory granted;
  for (const auto& s : token.segments) {
    if (s.length > most - s.address || s.length > most - granted.length) {
      ec = s3::errc::invalid_rdma_token;
      return {};
    }
    granted.length += s.length;
    granted.segments.push_back({s.address, s.length, s.key});
  }
  if (granted.length < length) {
    ec = s3::errc::invalid_rdma_token;
    return {};
  }
  granted.lease = ep.lease(token.endpoint, ec);
  if (ec) {
    ec = s3::errc::rdma_not_supported;
    return {};
  }
  granted.peer = granted.lease.address();
  return granted;
}

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

/// A registration that outlives its request while RMAs on it are still in flight: the MR and
/// what keeps its memory valid are shared with the operations that use them. For a GET: a store
/// mapping's MR and the mapping's owner (shared with the mapping_cache, when the registration came
/// from it); for a PUT: a staging buffer's, lent by the staging_pool until the last share is gone.
/// Move-only (one owner among the path's parts); the transport takes a share.
class shared_registration {
 public:
  struct held {
    registration reg;                   // the MR (of the whole mapping, when cached)
    std::shared_ptr<const void> owner;  // keeps the mapping valid and unchanged (null: a staging buffer)
  };
  shared_registration() = default;
  /// The registered bytes `memory`, inside h's MR.
  shared_registration(std::shared_ptr<const held> h, const sluice::region& memory) noexcept
      : held_(std::move(h)), region_(memory) {}
  shared_registration(shared_registration&&) noexcept = default;
  shared_registration& operator=(shared_registration&&) noexcept = default;
  shared_registration(const shared_registration&) = delete;
  shared_registration& operator=(const shared_registration&) = delete;
  ~shared_registration() = default;

  /// The registered memory; empty after a failed registration or a move.
  [[nodiscard]] sluice::region region() const noexcept { return held_ ? region_ : sluice::region{}; }
  /// Where region()'s first byte lies in the MR.
  [[nodiscard]] std::uint64_t offset_in_mr() const noexcept {
    return held_ ? static_cast<std::uint64_t>(region_.bytes() - held_->reg.mr().region().bytes()) : 0;
  }
  /// The share an operation keeps until it completes.
  [[nodiscard]] const std::shared_ptr<const held>& share() const noexcept { return held_; }

 private:
  std::shared_ptr<const held> held_;
  sluice::region region_{};
};

/// Registrations of store mappings kept past their request, keyed by object version, so that
/// GETs of an object that is read again skip fi_mr_reg (on verbs and efa: pinning every page of
/// the object). An entry holds the MR of a whole mapping and the mapping's owner, so the bytes it
/// names stay mapped and unchanged while it is cached, whatever happens to the key: a version id
/// names one file (its device and inode, which the held descriptor keeps from being reused), and
/// a store never changes a published file. A later GET of the same version sends from the cached
/// mapping (the same file bytes) instead of its own.
///
/// Bounded: at most `max_bytes` of mappings and `max_entries` entries (each holds a descriptor);
/// the least recently used entries that no transfer uses are evicted first; a mapping larger than
/// max_bytes is not cached. What the bound costs: a deleted or replaced object's file keeps its
/// disk space until its entry is evicted. Thread-safe.
class mapping_cache {
 public:
  struct statistics {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;  ///< cacheable sources registered and kept
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
  };

  mapping_cache(std::uint64_t max_bytes, std::size_t max_entries,
                std::shared_ptr<pinned_budget> pinned = nullptr) noexcept
      : kept_(max_bytes, max_entries, std::move(pinned)) {}

  /// Whether `source` may be cached: a cache with room, a version id, and its file (bytes are
  /// matched by their place in the file).
  [[nodiscard]] bool takes(const s3::rdma_source& source) const noexcept {
    return source.version.cacheable() && source.file >= 0 && source.mapping.size > 0 &&
           kept_.takes(source.mapping.size);
  }

  /// The cached registration holding bytes [at, at + length) of `version`'s file, with those
  /// bytes' place in its mapping; null when none.
  std::shared_ptr<const shared_registration::held> find(const s3::object_version_id& version, std::uint64_t at,
                                                        std::uint64_t length, sluice::region& memory) {
    std::uint64_t first = 0;  // the found mapping's first byte in the file
    auto found = kept_.find([&](const key& k, const shared_registration::held& h) {
      const std::uint64_t size = h.reg.region().size;
      first = k.file_offset;
      return k.version == version && at >= k.file_offset && length <= size && at - k.file_offset <= size - length;
    });
    if (found) {
      const region& have = found->reg.region();
      memory = {have.bytes() + (at - first), static_cast<std::size_t>(length), have.kind, have.device};
    }
    return found;
  }

  /// Keeps `held`, the registration of a mapping whose first byte is at `file_offset` of
  /// `version`'s file, and evicts what the bounds ask; not when a GET of the same bytes that
  /// missed at the same time kept its own first.
  void insert(const s3::object_version_id& version, std::uint64_t file_offset,
              std::shared_ptr<const shared_registration::held> held) {
    const std::uint64_t size = held->reg.region().size;
    kept_.insert(key{version, file_offset}, std::move(held), size,
                 [&](const key& k, const shared_registration::held& h) {
                   return k.version == version && k.file_offset == file_offset && h.reg.region().size == size;
                 });
  }

  /// Drops every entry (transfers still using one keep it until they complete).
  void clear() { kept_.clear(); }

  [[nodiscard]] statistics stats() const {
    const auto s = kept_.stats();
    return {s.hits, s.insertions, s.entries, s.bytes};
  }

 private:
  struct key {
    s3::object_version_id version;
    std::uint64_t file_offset = 0;
  };
  sluice::detail::registration_cache<key, const shared_registration::held> kept_;
};

/// Registers a store's mapping for RMA writes (access::write_source) on one endpoint, keeping
/// the mapping's owner with the registration. With a cache that takes the source: the
/// registration of the whole mapping, found by version or registered and kept; otherwise the
/// bytes asked for, registered for this request only.
class mapping_registrar {
 public:
  using registration_type = shared_registration;
  mapping_registrar(registrar& sources, s3::rdma_source source, mapping_cache* cache) noexcept
      : sources_(&sources),
        source_(std::move(source)),
        cache_(cache != nullptr && cache->takes(source_) ? cache : nullptr) {}

  /// From the cache when `memory` lies inside the source's mapping (what the server's GET asks
  /// for); anything else is registered alone.
  registration_type register_region(const region& memory, error_code& ec) {
    if (cache_ == nullptr || !inside_mapping(memory)) return register_alone(memory, ec);
    const auto within = static_cast<std::uint64_t>(memory.bytes() - source_.mapping.bytes());
    const std::uint64_t at = source_.file_offset + within;
    sluice::region cached{};
    if (auto held = cache_->find(source_.version, at, memory.size, cached)) {
      ec = {};
      return {std::move(held), cached};
    }
    // access::write_source: the MR is only the source of this endpoint's writes.
    auto held = keep(sources_->register_region(sluice::detail::readable_as_region(source_.mapping), ec));
    if (ec) return {};
    cache_->insert(source_.version, source_.file_offset, held);
    return {std::move(held), memory};
  }

 private:
  [[nodiscard]] bool inside_mapping(const region& memory) const noexcept {
    const const_region& m = source_.mapping;
    return memory.size > 0 && memory.kind == m.kind && memory.device == m.device &&
           std::less_equal<>{}(m.bytes(), memory.bytes()) &&
           std::less_equal<>{}(memory.bytes() + memory.size, m.bytes() + m.size);
  }
  registration_type register_alone(const region& memory, error_code& ec) {
    auto held = keep(sources_->register_region(memory, ec));
    if (ec) return {};
    return {std::move(held), memory};
  }
  std::shared_ptr<const shared_registration::held> keep(registration reg) const {
    return std::make_shared<const shared_registration::held>(shared_registration::held{std::move(reg), source_.owner});
  }

  registrar* sources_;
  s3::rdma_source source_;
  mapping_cache* cache_;
};

/// Whether a transfer's failure leaves its endpoint wedged, so that the plane replaces it: its
/// operations were outstanding past their deadline (timed_out), or a post found the transmit
/// queue full for the whole post deadline (FI_EAGAIN: someone else's operations hold it).
inline bool wedges(const error_code& ec) {
  return ec == boost::asio::error::timed_out || ec == make_fabric_error(-FI_EAGAIN);
}

/// When a transfer gives up: connect_timeout after it starts until it first progresses (an RMA
/// completes), then operation_timeout after its latest progress. The operations of one transfer
/// may share one (a PUT's staging buffers, each read by an operation of its own, and the PUT's
/// sink): progress of any counts for all. Thread-safe.
class transfer_deadline {
 public:
  using steady = std::chrono::steady_clock;
  explicit transfer_deadline(const fabric_config& config) noexcept
      : connect_(steady::now() + config.connect_timeout), operation_timeout_(config.operation_timeout) {}

  /// Something moved: the deadline is operation_timeout from now.
  void progressed() noexcept {
    const steady::rep now = steady::now().time_since_epoch().count();
    steady::rep last = last_.load();
    while (last < now && !last_.compare_exchange_weak(last, now)) {
    }
  }
  /// When the transfer gives up unless it progresses before.
  [[nodiscard]] steady::time_point at() const noexcept {
    const steady::rep last = last_.load();
    return last == never ? connect_ : steady::time_point(steady::duration(last)) + operation_timeout_;
  }

 private:
  static constexpr steady::rep never = std::numeric_limits<steady::rep>::min();
  steady::time_point connect_;
  steady::duration operation_timeout_;
  std::atomic<steady::rep> last_{never};
};

/// The token as a negotiator: agrees to move the request's bytes into (or out of) the memory the
/// token grants, after resolving its peer on the endpoint. Errors: those of granted_memory. Completing after a failure
/// releases what the transfer leaves behind: the peer leaves the address vector (its next request connects afresh) and,
/// when the endpoint wedged (operations outstanding past their deadline, or a transmit queue that stayed full),
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
    token_memory remote = granted_memory(*ep_, *token_, length, ec);
    if (!ec) session.emplace(std::move(remote), transfer_span{0, 0, length});
    boost::asio::post(executor, [h = std::forward<Handler>(handler), ec, s = std::move(session)]() mutable {
      std::move(h)(ec, s ? std::move(*s) : session_type{{}, {}});
    });
  }

  template <class Handler>
  void async_complete(session_type&& /*session*/, error_code ec, std::uint64_t bytes, Handler&& handler) {
    if (ec) {
      // The peer leaves the address vector once no transfer's operations to it are outstanding
      // (this one's, past its deadline, hold their lease until they complete or the endpoint
      // closes): its next request connects afresh.
      ep_->forget(token_->endpoint);
      if (wedges(ec)) wedged_();
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

/// The server's RMA engine: RMA between a shared_registration and the memory a token grants, both
/// ways (a GET's writes from the store's mapping, a PUT's reads into a staging buffer). The span
/// is cut into pieces of at most `piece_bytes` along the token's segments (every RMA lies inside
/// one segment), at most `window` in flight. Posts run on `poster` (never on a network thread or
/// the progress thread); completions come on the progress thread and queue the next posts. No
/// thread waits for a completion. Deadline: a transfer_deadline, the operation's own or one it
/// shares with the other parts of its transfer. Completion: `void(error_code, std::size_t bytes)`,
/// bytes = those of the pieces that completed, once, through the handler's associated executor
/// (dispatched: a handler without one runs on the progress thread, and must be short):
/// - after every posted piece completed, with the first error (a failed post stops posting);
///   the operation's share of `local` is gone by then;
/// - at the deadline, with boost::asio::error::timed_out, while pieces are still outstanding (or
///   the transmit queue stayed full): they keep their share of `local` until they complete (or
///   the endpoint closes).
/// Errors before anything moves: region_too_small (span outside `local`), bad_range (outside the
/// token's memory).
class token_transport {
 public:
  using remote_type = token_memory;
  static constexpr std::string_view name = "fabric";

  token_transport(std::shared_ptr<endpoint> ep, boost::asio::any_io_executor poster, std::uint64_t piece_bytes,
                  std::size_t window)
      : endpoint_(std::move(ep)), poster_(std::move(poster)), piece_bytes_(piece_bytes), window_(window) {}

  template <class CompletionToken>
  auto async_write(const shared_registration& local, const token_memory& remote, transfer_span span,
                   CompletionToken&& token) {
    return initiate(true, local, remote, span, nullptr, std::forward<CompletionToken>(token));
  }
  template <class CompletionToken>
  auto async_read(const shared_registration& local, const token_memory& remote, transfer_span span,
                  CompletionToken&& token) {
    return initiate(false, local, remote, span, nullptr, std::forward<CompletionToken>(token));
  }
  /// async_read as one part of a transfer: `deadline` is shared with its other parts.
  template <class CompletionToken>
  auto async_read(const shared_registration& local, const token_memory& remote, transfer_span span,
                  std::shared_ptr<transfer_deadline> deadline, CompletionToken&& token) {
    return initiate(false, local, remote, span, std::move(deadline), std::forward<CompletionToken>(token));
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
    std::uint64_t local_offset = 0;  // in local's MR
    token_memory remote;
    std::uint64_t length = 0;
    std::uint64_t piece_bytes = 0;
    std::size_t window = 0;
    std::shared_ptr<transfer_deadline> deadline;
    std::function<void(error_code, std::size_t)> complete;

    std::mutex mutex;
    std::shared_ptr<const shared_registration::held> local;  // dropped once nothing is outstanding at the end
    std::unique_ptr<boost::asio::steady_timer> timer;        // reset when finished
    std::unique_ptr<boost::asio::steady_timer> retry;        // a full transmit queue with nothing in flight
    std::optional<steady::time_point> full_since;            // the queue has been full since (unset: not full)
    segment_cursor cursor;                                   // over remote.segments
    std::uint64_t posted = 0;
    std::uint64_t moved = 0;
    std::size_t outstanding = 0;
    bool pumping = false;     // a pump is queued or running
    bool initiating = false;  // the first pump runs inside the initiating call
    bool finished = false;
    error_code failure;

    // On `poster`: posts pieces until the window is full, the span is posted or one failed. A
    // full transmit queue never holds the thread (it serves every transfer): the piece is taken
    // back and posted again by the next completion, or after a short wait when nothing is in
    // flight; a queue that stays full past min(operation_timeout, connect_timeout) fails the
    // transfer with FI_EAGAIN (the endpoint is wedged).
    void pump() {
      std::unique_lock lock(mutex);
      while (!finished && !failure && posted < length && outstanding < window) {
        const segment_cursor before = cursor;
        const remote_segment piece = cursor.next(remote.segments, std::min(piece_bytes, length - posted));
        const std::uint64_t n = piece.length;
        const std::uint64_t at = local_offset + posted;
        posted += n;
        ++outstanding;  // keeps `local` (see finish)
        lock.unlock();
        auto done = [self = shared_from_this(), n](error_code e) { self->completed(e, n); };
        const memory_region& mr = local->reg.mr();
        const error_code ec =
            write ? ep->post_write(mr, at, n, remote.peer, piece.address, piece.key, done, full_queue::report)
                  : ep->post_read(mr, at, n, remote.peer, piece.address, piece.key, done, full_queue::report);
        lock.lock();
        if (!ec) {
          full_since.reset();
          continue;
        }
        --outstanding;
        if (finished) break;  // the deadline passed meanwhile: the timers are gone
        if (ec != make_fabric_error(-FI_EAGAIN)) {
          if (!failure) failure = ec;
          break;
        }
        posted -= n;  // not posted: again later, from the same place
        cursor = before;
        const steady::time_point now = steady::now();
        if (!full_since) full_since = now;
        if (now - *full_since >= std::min(ep->config().operation_timeout, ep->config().connect_timeout)) {
          if (!failure) failure = ec;
          break;
        }
        if (outstanding == 0) {  // no completion will come to post it: after a short wait
          pumping = true;
          retry->expires_after(std::chrono::microseconds(200));
          retry->async_wait([self = shared_from_this()](error_code e) {
            if (!e) self->pump();
          });
          return;
        }
        break;  // the next completion posts it
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
        deadline->progressed();
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
      const steady::time_point at = deadline->at();
      if (steady::now() < at) {
        arm(at);
        return;
      }
      finish(lock, boost::asio::error::timed_out);  // what is outstanding keeps its share
    }

    // Under `mutex`.
    void arm(steady::time_point at) {
      timer->expires_at(at);
      timer->async_wait([self = shared_from_this()](error_code ec) {
        if (!ec) self->check_deadline();
      });
    }

    void finish(std::unique_lock<std::mutex>& lock, error_code ec) {
      finished = true;
      timer.reset();  // cancels the wait: its handler holds `this` and finds it finished
      retry.reset();
      // Nothing outstanding: the share of `local` goes before the caller hears of completion (a
      // staging buffer is back in its pool by then); else the outstanding pieces keep it.
      std::shared_ptr<const shared_registration::held> share;
      if (outstanding == 0) share = std::move(local);
      const auto bytes = static_cast<std::size_t>(moved);
      auto done = std::move(complete);
      const bool defer = initiating;
      lock.unlock();
      share.reset();
      if (defer) {  // never complete inside the initiating call
        boost::asio::post(poster, [done = std::move(done), ec, bytes] { done(ec, bytes); });
        return;
      }
      done(ec, bytes);
    }
  };

  template <class CompletionToken>
  auto initiate(bool write, const shared_registration& local, const token_memory& remote, transfer_span span,
                std::shared_ptr<transfer_deadline> deadline, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [this, write, &local, &remote, span, deadline = std::move(deadline)](auto handler) mutable {
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
          op->local_offset = local.offset_in_mr() + span.local_offset;
          op->remote = remote;
          op->cursor.skip(op->remote.segments, span.remote_offset);
          op->length = span.length;
          op->piece_bytes = piece_bytes_;
          op->window = window_;
          op->deadline = deadline ? std::move(deadline) : std::make_shared<transfer_deadline>(endpoint_->config());
          op->complete = std::move(complete);
          start(op);
        },
        token);
  }

  // Arms the deadline and runs the first posts: here when this thread is one of `poster`'s (a
  // path's step after its negotiator: no second hop onto the same pool), else on `poster` (a post
  // may wait for a full transmit queue).
  void start(const std::shared_ptr<operation>& op) {
    {
      const std::lock_guard lock(op->mutex);
      op->timer = std::make_unique<boost::asio::steady_timer>(poster_);
      op->retry = std::make_unique<boost::asio::steady_timer>(poster_);
      op->arm(op->deadline->at());
      op->pumping = true;
    }
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
  }

  std::shared_ptr<endpoint> endpoint_;
  boost::asio::any_io_executor poster_;
  std::uint64_t piece_bytes_;
  std::size_t window_;
};

}  // namespace sluice::fabric::detail
