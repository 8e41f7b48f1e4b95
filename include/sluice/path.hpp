// SPDX-License-Identifier: Apache-2.0
// path<Negotiator, Registrar, Transport>: one of each part, composed at compile time into
// the pipeline negotiate → register → move → complete.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/detail/blocking.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/system_executor.hpp>

#include <memory>
#include <optional>
#include <utility>

namespace sluice {

/// A transfer pipeline. `async_get`/`async_put` run: the negotiator agrees what moves
/// (object size, range, remote descriptor); the registrar registers exactly the local bytes
/// that will move; the transport moves them; the negotiator completes (publishes a put,
/// releases a get). Every step's error ends the transfer with that error, and the negotiator
/// is always given the chance to release what it agreed. Operations on one path may run
/// concurrently when its parts allow it (all shipped parts do).
template <negotiator N, registrar R, transport<typename R::registration_type> T,
          class Executor = boost::asio::any_io_executor>
requires negotiates_for<N, T>
class path : public detail::blocking_transfers<path<N, R, T, Executor>> {
 public:
  using executor_type = Executor;
  using negotiator_type = N;
  using registrar_type = R;
  using transport_type = T;

  /// Completion handlers without an associated executor of their own run on `executor`.
  path(executor_type executor, N negotiator, R registrar, T transport)
      : executor_(std::move(executor)),
        negotiator_(std::move(negotiator)),
        registrar_(std::move(registrar)),
        transport_(std::move(transport)) {}

  /// A path whose default executor is the system executor (fine for blocking use).
  path(N negotiator, R registrar, T transport)
      : path(executor_type(boost::asio::system_executor()), std::move(negotiator), std::move(registrar),
             std::move(transport)) {}

  [[nodiscard]] executor_type get_executor() const noexcept { return executor_; }
  [[nodiscard]] N& get_negotiator() noexcept { return negotiator_; }
  [[nodiscard]] R& get_registrar() noexcept { return registrar_; }
  [[nodiscard]] T& get_transport() noexcept { return transport_; }

  /// Reads `range` of `object` into the start of `destination`.
  /// Completion: `void(error_code, transfer_result)`; errors from every part (no_such_object,
  /// bad_range, region_too_small when `destination` is smaller than the range, ...).
  /// `destination` must stay valid until completion; bytes past the range are never written.
  template <class CompletionToken>
  auto async_get(const object_ref& object, const region& destination, const byte_range& range,
                 CompletionToken&& token) {
    return start({object, range, direction::get}, destination, std::forward<CompletionToken>(token));
  }

  /// Writes all of `source` as `object`, published atomically at completion.
  /// Completion: `void(error_code, transfer_result)`. `source` must stay valid and unchanged
  /// until completion.
  template <class CompletionToken>
  auto async_put(const object_ref& object, const const_region& source, CompletionToken&& token) {
    // The registrar and transport take a region for both directions; a put only reads it.
    return start({object, byte_range{0, source.size}, direction::put}, detail::readable_as_region(source),
                 std::forward<CompletionToken>(token));
  }

 private:
  using session_type = typename N::session_type;
  using registration_type = typename R::registration_type;

  // Heap state: its address stays put while a transport or negotiator holds references
  // into it, however often the composed operation itself is moved.
  struct state {
    path* owner;
    transfer_request request;
    region local;
    std::optional<session_type> session{};
    std::optional<registration_type> registration{};
    error_code failure{};
  };

  struct operation {
    std::unique_ptr<state> s;

    template <class Self>
    void operator()(Self& self) {
      s->owner->negotiator_.async_negotiate(s->request, std::move(self));
    }

    template <class Self>
    void operator()(Self& self, error_code ec, session_type session) {
      if (ec) {
        self.complete(ec, transfer_result{});
        return;
      }
      s->session.emplace(std::move(session));
      const transfer_span span = s->session->span();
      if (!s->local.contains(span.local_offset, span.length)) {
        finish(self, errc::region_too_small, 0);
        return;
      }
      region moving = s->local.subregion(span.local_offset, span.length, ec);
      registration_type reg = s->owner->registrar_.register_region(moving, ec);
      if (ec) {
        finish(self, ec, 0);
        return;
      }
      s->registration.emplace(std::move(reg));
      // The registration covers exactly the moving bytes, so the transport's local offset is 0.
      const transfer_span moved{0, span.remote_offset, span.length};
      if (s->request.dir == direction::get) {
        s->owner->transport_.async_read(*s->registration, s->session->remote(), moved, std::move(self));
      } else {
        s->owner->transport_.async_write(*s->registration, s->session->remote(), moved, std::move(self));
      }
    }

    template <class Self>
    void operator()(Self& self, error_code ec, std::size_t bytes) {
      finish(self, ec, bytes);
    }

    template <class Self>
    void operator()(Self& self, error_code ec, transfer_result result) {
      s->registration.reset();  // deregister before the caller hears of completion
      if (s->failure) ec = s->failure;
      result.transport = T::name;
      self.complete(ec, std::move(result));
    }

    // Hands the session back to the negotiator, successful or not, so it can publish or release.
    template <class Self>
    void finish(Self& self, error_code ec, std::uint64_t bytes) {
      if (ec) s->failure = ec;
      s->owner->negotiator_.async_complete(std::move(*s->session), ec, bytes, std::move(self));
    }
  };

  template <class CompletionToken>
  auto start(transfer_request request, const region& local, CompletionToken&& token) {
    return boost::asio::async_compose<CompletionToken, void(error_code, transfer_result)>(
        operation{std::make_unique<state>(state{this, std::move(request), local})}, token, executor_);
  }

  executor_type executor_;
  N negotiator_;
  R registrar_;
  T transport_;
};

}  // namespace sluice
