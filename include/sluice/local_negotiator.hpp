// SPDX-License-Identifier: Apache-2.0
// The local negotiator: the other end is an object_store in this process. It resolves the
// request against the store, hands the transport a region to move from or into, and
// publishes (put) or releases (get) when the transport is done.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/detail/completion.hpp>

#include <boost/asio/async_result.hpp>

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

namespace detail {
// What a session keeps to pin a mapped object: the mapping for mappable stores, nothing otherwise.
template <class Store, bool = mappable_store<Store>>
struct mapping_holder {
  struct type {};
};
template <class Store>
struct mapping_holder<Store, true> {
  using type = std::optional<typename Store::mapping_type>;
};
}  // namespace detail

/// Negotiates transfers with an in-process object store; its remote descriptors are host
/// regions, so it pairs with loopback_transport. A get from a mappable_store lends the
/// object's bytes in place (zero copy); other stores are read into a staging buffer first.
/// A put stages the bytes and publishes them atomically at completion. The store must
/// outlive the negotiator and its sessions.
template <object_store Store>
class local_negotiator {
 public:
  using remote_type = region;
  static constexpr std::string_view name = "local";

  /// One agreed transfer: what the transport moves, and what keeps it valid until completed.
  class session {
   public:
    [[nodiscard]] const region& remote() const noexcept { return remote_; }
    [[nodiscard]] transfer_span span() const noexcept { return span_; }

   private:
    friend class local_negotiator;
    transfer_request request_;
    region remote_{};
    transfer_span span_{};
    std::optional<typename Store::writer_type> writer_;
    std::vector<std::byte> staging_;
    [[no_unique_address]] typename detail::mapping_holder<Store>::type mapping_{};
  };
  using session_type = session;

  explicit local_negotiator(Store& store) noexcept : store_(&store) {}

  /// Resolves `request` against the store. Completion: `void(error_code, session_type)`.
  /// Errors: no_such_bucket, no_such_object, bad_range (get); no_such_bucket, invalid_name (put).
  template <class CompletionToken>
  auto async_negotiate(const transfer_request& request, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, session_type)>(
        [this](auto handler, transfer_request req) {
          error_code ec;
          session_type s = negotiate(std::move(req), ec);
          detail::post_completion(std::move(handler), ec, std::move(s));
        },
        token, request);
  }

  /// Ends `s` after the transport finished with `transport_error` having moved `bytes`.
  /// A put publishes the staged bytes only when the transport succeeded and moved all of them;
  /// otherwise nothing is published. Completion: `void(error_code, transfer_result)`.
  template <class CompletionToken>
  auto async_complete(session_type&& s, error_code transport_error, std::uint64_t bytes, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, transfer_result)>(
        [this](auto handler, session_type owned, error_code terr, std::uint64_t n) {
          error_code ec = terr;
          transfer_result result = complete(owned, ec, n);
          detail::post_completion(std::move(handler), ec, result);
        },
        token, std::move(s), transport_error, bytes);
  }

 private:
  session_type negotiate(transfer_request request, error_code& ec) {
    session_type s;
    if (request.dir == direction::get) {
      negotiate_get(s, request, ec);
    } else {
      negotiate_put(s, request, ec);
    }
    s.request_ = std::move(request);
    return s;
  }

  void negotiate_get(session_type& s, const transfer_request& request, error_code& ec) {
    if constexpr (mappable_store<Store>) {
      auto mapped = store_->map(request.object, ec);
      if (ec) return;
      const extent e = resolve(request.range, mapped.info().size, ec);
      if (ec) return;
      s.remote_ = detail::readable_as_region(mapped.region());  // a get only reads it
      s.span_ = {0, e.offset, e.length};
      s.mapping_.emplace(std::move(mapped));
    } else {
      const object_info info = store_->head(request.object, ec);
      if (ec) return;
      const extent e = resolve(request.range, info.size, ec);
      if (ec) return;
      s.staging_.resize(static_cast<std::size_t>(e.length));
      const std::size_t got = store_->read(request.object, e.offset, s.staging_, ec);
      if (ec) return;
      if (got != e.length) {  // the object changed between head and read
        ec = errc::bad_range;
        return;
      }
      s.remote_ = host_region(s.staging_);
      s.span_ = {0, 0, e.length};
    }
  }

  void negotiate_put(session_type& s, const transfer_request& request, error_code& ec) {
    if (request.range.offset != 0 || !request.range.length) {
      ec = errc::invalid_argument;  // a put names the whole source: {0, size}
      return;
    }
    s.writer_.emplace(store_->begin_put(request.object, ec));
    if (ec) return;
    s.staging_.resize(static_cast<std::size_t>(*request.range.length));
    s.remote_ = host_region(s.staging_);
    s.span_ = {0, 0, *request.range.length};
  }

  transfer_result complete(session_type& s, error_code& ec, std::uint64_t bytes) {
    transfer_result result{bytes, name, {}};
    if (!ec && bytes != s.span_.length) ec = errc::protocol_violation;  // a short move is a failure
    if (ec || s.request_.dir == direction::get) return result;          // get: releasing is all
    s.writer_->write(s.staging_, ec);
    if (!ec) s.writer_->commit({}, ec);
    return result;
  }

  Store* store_;
};

}  // namespace sluice
