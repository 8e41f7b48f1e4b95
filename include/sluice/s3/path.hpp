// SPDX-License-Identifier: Apache-2.0
// An S3 server as the far end of a path<N, R, T>: the negotiator and the transports that
// compose sluice::s3::client into the pipeline negotiate → register → move → complete.
//
//   path<s3::negotiator, host_registrar, s3::http_transport>   bytes in HTTP bodies
//   path<s3::negotiator, host_registrar, s3::rdma_transport>   bytes by RDMA (x-amz-rdma-token)
//   path<s3::negotiator, host_registrar, s3::auto_transport>   RDMA, or the body when the server
//                                                              declines (a GET: in the same request)
//
// The negotiator asks the server what the object is (HEAD: size and ETag) and resolves the range
// against it; the transports move the bytes with the client's GET and PUT, every GET conditional
// on that ETag, so a transfer read in several moves stays one version of the object. With
// negotiator_options::skip_head_for_ranges a get of an explicit range is agreed without the HEAD
// (one round trip less; the GET itself then says what a HEAD would have). The same
// test body runs against these paths and against the in-process one
// (examples/compose_path_in_test).
//
// Registration. An S3 token grants the server one operation on a range until an expiry, so the
// client's RDMA plane makes it per request (rdma_client_plane::grant_access, whose registration
// cache makes a repeat free); the path's registrar only checks that the memory is memory the
// request can carry (host_registrar: host memory; token_registrar: device memory too, by token).
//
// s3::client's own GET and PUT from memory are this pipeline too:
//   path<s3::negotiator, s3::token_registrar, s3::object_transport<Via>>
// with a negotiator that never HEADs (negotiator_options::never_head: the first GET answers what
// a HEAD would, so a GET of a small object stays one request) and a transport that carries the
// call's options (progress, report, a PUT's attributes). The transports move the bytes with the
// client's request machinery (parallel ranged GETs, multipart PUTs, tokens per request).
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/detail/completion.hpp>
#include <sluice/region_registration.hpp>
#include <sluice/s3/client.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::s3 {

/// The far end of an S3 path: one object, and the version of it a get reads.
struct object_remote {
  std::string bucket;
  std::string key;
  std::uint64_t size = 0;  ///< the object's size (get), or the size the put writes
  std::string etag;        ///< get: the version every move reads (If-Match); put: empty
  /// put: where the transport leaves the ETag the server gave the new object (the negotiator makes
  /// it and reports it as transfer_result::version); null for a get.
  std::shared_ptr<std::string> created;
  /// get: agreed without a HEAD, so `size` only bounds the span: the GET that moves the bytes
  /// checks the range against the object, a read of no bytes included.
  bool unchecked = false;
  /// get: the span's length is the most to read (the size of the local memory): the object may
  /// end sooner, and the move says how many bytes it read.
  bool up_to = false;
};

/// The checks every S3 transport makes before any request, in this order: errc::region_too_small
/// (the span runs outside the local region), errc::bad_range (outside the remote object),
/// errc::invalid_argument (a put that is not the whole object: an S3 object is written whole).
[[nodiscard]] inline error_code check_object_span(const region& local, const object_remote& remote, transfer_span span,
                                                  direction dir) noexcept {
  if (!local.contains(span.local_offset, span.length)) return sluice::errc::region_too_small;
  const bool inside = span.remote_offset <= remote.size && span.length <= remote.size - span.remote_offset;
  if (!inside) return sluice::errc::bad_range;
  const bool whole = span.remote_offset == 0 && span.length == remote.size;
  if (dir == direction::put && !whole) return sluice::errc::invalid_argument;
  return {};
}

/// The completion a PUT of `length` bytes hands the client: leaves the ETag in `created` and
/// completes `handler` with the transport's signature, on the handler's executor (else `fallback`).
template <class Handler, class Executor>
auto report_created(Handler handler, const Executor& fallback, std::shared_ptr<std::string> created,
                    std::uint64_t length) {
  const auto executor = boost::asio::get_associated_executor(handler, fallback);
  return boost::asio::bind_executor(
      executor, [h = std::move(handler), c = std::move(created), length](error_code e, std::string etag) mutable {
        if (!e && c) *c = std::move(etag);
        std::move(h)(e, e ? std::size_t{0} : static_cast<std::size_t>(length));
      });
}

/// How an s3::negotiator agrees a get.
struct negotiator_options {
  /// A get of an explicit, non-empty range (offset and length given) is agreed without asking
  /// the server: no HEAD, one round trip less per ranged read. The GET that moves the bytes then
  /// answers what the HEAD would have (s3::errc::no_such_key, errc::bad_range for a range that
  /// does not lie inside the object), it is not conditional on a version, and the result carries
  /// no version (transfer_result::version empty). A get of the whole object, of a range to the
  /// end or of no bytes still HEADs: the object's size decides its span.
  bool skip_head_for_ranges = false;
  /// No get is ever agreed by a HEAD (s3::client's own GET): an explicit range, empty or not, is
  /// agreed as asked; a get without a length (the whole object, or to its end) is agreed as up to
  /// `up_to` bytes, the size of the memory it reads into, and its result's bytes say how many the
  /// object held. The first GET answers what a HEAD would (size, ETag, errors), and the parts after
  /// it are conditional on its ETag. The result's version is if_match (empty when not given).
  /// Overrides skip_head_for_ranges.
  bool never_head = false;
  std::uint64_t up_to = 0;  ///< with never_head: the most a get without a length reads
  /// When not empty, every GET of a get agreed without a HEAD is conditional on this ETag
  /// (If-Match): s3::errc::precondition_failed when the object has another.
  std::string if_match;
};

/// Negotiates transfers with an S3 server through `client`: a get HEADs the object (size,
/// ETag) and resolves the range against it (see negotiator_options for a get that need not); a
/// put agrees to write the whole source. The transport's PUT publishes the object atomically
/// (the server's rule), so completing only checks that every byte moved. The client must outlive
/// the negotiator and its sessions.
class negotiator {
 public:
  using remote_type = object_remote;
  static constexpr std::string_view name = "s3";

  /// One agreed transfer: the object version and the span to move.
  class session {
   public:
    [[nodiscard]] const object_remote& remote() const noexcept { return remote_; }
    [[nodiscard]] transfer_span span() const noexcept { return span_; }

   private:
    friend class negotiator;
    object_remote remote_;
    transfer_span span_{};
  };
  using session_type = session;

  explicit negotiator(client& c, negotiator_options options = {}) noexcept
      : client_(&c), options_(std::move(options)) {}

  /// Completion: `void(error_code, session_type)`. Errors of a get: what the HEAD answered
  /// (s3::errc::no_such_key, access_denied, ...; a missing object compares equal to
  /// sluice::condition::not_found), errc::bad_range for a range outside the object (a skipped
  /// HEAD: only a range whose end passes 2^64). A put's range must be {0, size}: else
  /// errc::invalid_argument.
  template <class CompletionToken>
  auto async_negotiate(const transfer_request& request, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, session_type)>(
        [owner = this](auto handler, transfer_request req) { owner->start(std::move(req), std::move(handler)); }, token,
        request);
  }

  /// Ends `s` after the transport finished with `transport_error` having moved `bytes`: a
  /// transport that succeeded but moved fewer bytes than agreed is sluice::errc::protocol_violation.
  /// Completion: `void(error_code, transfer_result)`.
  template <class CompletionToken>
  auto async_complete(session_type&& s, error_code transport_error, std::uint64_t bytes, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, transfer_result)>(
        [](auto handler, const session_type& owned, error_code ec, std::uint64_t n) {
          const bool whole = n == owned.span_.length || (owned.remote_.up_to && n < owned.span_.length);
          if (!ec && !whole) ec = sluice::errc::protocol_violation;
          transfer_result result{n, name, {}, {}, {}};
          if (!ec) result.version = owned.remote_.created ? *owned.remote_.created : owned.remote_.etag;
          sluice::detail::post_completion(std::move(handler), ec, std::move(result));
        },
        token, std::move(s), transport_error, bytes);
  }

 private:
  template <class Handler>
  void start(transfer_request request, Handler handler) {
    session_type s;
    s.remote_.bucket = std::move(request.object.bucket);
    s.remote_.key = std::move(request.object.key);
    if (request.dir == direction::put) {
      error_code ec;
      if (request.range.offset != 0 || !request.range.length) {
        ec = sluice::errc::invalid_argument;  // a put names the whole source: {0, size}
      } else {
        s.remote_.size = *request.range.length;
        s.remote_.created = std::make_shared<std::string>();
        s.span_ = {0, 0, s.remote_.size};
      }
      sluice::detail::post_completion(std::move(handler), ec, std::move(s));
      return;
    }
    if (options_.never_head) {
      const error_code ec = agree_unseen(request.range, s);
      sluice::detail::post_completion(std::move(handler), ec, std::move(s));
      return;
    }
    if (options_.skip_head_for_ranges && request.range.length && *request.range.length != 0) {
      // The span as asked; the remote's size only bounds it (the GET checks it against the object).
      error_code ec;
      const std::uint64_t offset = request.range.offset;
      const std::uint64_t length = *request.range.length;
      if (length > std::numeric_limits<std::uint64_t>::max() - offset) {
        ec = sluice::errc::bad_range;
      } else {
        s.remote_.size = offset + length;
        s.remote_.unchecked = true;
        s.span_ = {0, offset, length};
      }
      sluice::detail::post_completion(std::move(handler), ec, std::move(s));
      return;
    }
    const auto executor = boost::asio::get_associated_executor(handler, client_->get_executor());
    std::string bucket = s.remote_.bucket;
    std::string key = s.remote_.key;
    client_->async_head_object(
        std::move(bucket), std::move(key),
        boost::asio::bind_executor(executor, [h = std::move(handler), s = std::move(s), range = request.range](
                                                 error_code ec, const object_info& info) mutable {
          if (!ec) {
            const extent e = resolve(range, info.size, ec);
            s.remote_.size = info.size;
            s.remote_.etag = info.attributes.etag;
            s.span_ = {0, e.offset, e.length};
          }
          std::move(h)(ec, std::move(s));
        }));
  }

  // A get agreed without asking the server (never_head): the range as asked (bad_range when its
  // end passes 2^64), or up to up_to bytes from its offset. The GET checks it against the object.
  [[nodiscard]] error_code agree_unseen(const byte_range& range, session_type& s) const {
    const std::uint64_t offset = range.offset;
    const std::uint64_t room = std::numeric_limits<std::uint64_t>::max() - offset;
    if (range.length && *range.length > room) return sluice::errc::bad_range;
    const std::uint64_t length = range.length ? *range.length : std::min(options_.up_to, room);
    s.remote_.size = offset + length;
    s.remote_.etag = options_.if_match;
    s.remote_.unchecked = true;
    s.remote_.up_to = !range.length;
    s.span_ = {0, offset, length};
    return {};
  }

  client* client_;
  negotiator_options options_;
};

/// Moves the bytes of an S3 path with `client`'s GET (async_read: a ranged GET into the
/// local bytes, If-Match the remote's ETag) and PUT (async_write: the whole object, multipart
/// when it is larger than the client's multipart_threshold), by the path `Via` names:
/// transfer_via::http (the body), transfer_via::rdma (a token; a server that declines fails
/// the move with s3::errc::rdma_not_supported, so a caller can fall back to HTTP) or
/// transfer_via::automatic (a token when the client has a plane; a server that declines a GET's
/// token answers with the body in the same request, a declined PUT is sent again with its body:
/// what the client's own GET and PUT do).
///
/// An S3 object is written whole: a write's span must start at remote offset 0 and cover the
/// remote's size, else errc::invalid_argument (`writes_whole_objects`, see
/// docs/requirements/transport.md). Errors checked before any request, in this order (nothing
/// moves): region_too_small (span outside the local region), bad_range (outside the remote
/// object), invalid_argument. Then the client's errors. The client must outlive the transport.
template <transfer_via Via>
class object_transport {
 public:
  using remote_type = object_remote;
  static constexpr std::string_view name = Via == transfer_via::rdma   ? "s3-rdma"
                                           : Via == transfer_via::http ? "s3-http"
                                                                       : "s3-auto";
  static constexpr bool writes_whole_objects = true;

  /// `progress`, when given, is passed to every GET and PUT (the client calls it as bytes move).
  explicit object_transport(client& c, progress_callback progress = {}) : client_(&c) {
    get_.progress = progress;
    put_.progress = std::move(progress);
  }
  /// Every GET with `get`'s progress and report, every PUT with `put`'s attributes, progress and
  /// report (s3::client's own GET and PUT: a transport per call). Their range, via and if_match
  /// come from the path and `Via`. Every request is aborted with `cancellation`, the call's
  /// cancellation group (when its handler has a connected cancellation slot).
  object_transport(client& c, get_options get, put_options put, detail::op_cancellation_ptr cancellation = {})
      : client_(&c), get_(std::move(get)), put_(std::move(put)), cancellation_(std::move(cancellation)) {}

  /// Reads `span.length` bytes of `remote` at `span.remote_offset` into `local` at
  /// `span.local_offset` (a remote agreed `up_to`: at most that many, as many as the object
  /// holds). Completion: `void(error_code, std::size_t bytes)`; a remote replaced since it was
  /// negotiated is s3::errc::precondition_failed (a remote without an ETag, agreed without a
  /// HEAD: the GET is not conditional).
  template <registration G, class CompletionToken>
  auto async_read(const G& local, const object_remote& remote, transfer_span span, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [this](auto handler, region here, object_remote there, transfer_span s) {
          error_code ec = check_object_span(here, there, s, direction::get);
          // A read of nothing moves nothing, unless no HEAD checked it (the GET answers where it lies).
          if (ec || (s.length == 0 && !there.unchecked)) {
            sluice::detail::post_completion(std::move(handler), ec, std::size_t{0});
            return;
          }
          get_options options = get_;
          options.range = there.up_to ? byte_range{s.remote_offset} : byte_range{s.remote_offset, s.length};
          options.via = Via;
          options.if_match = std::move(there.etag);
          const region into = here.subregion(s.local_offset, s.length, ec);
          detail::client_handler<std::uint64_t> read(forward_bytes(std::move(handler)), client_->get_executor());
          read.join(cancellation_);
          client_->start_read_object(std::move(there.bucket), std::move(there.key), into, std::move(options),
                                     std::move(read));
        },
        token, local.region(), remote, span);
  }

  /// Writes `local` at `span.local_offset` as the whole of `remote`, published atomically when
  /// the server acknowledges. Completion: `void(error_code, std::size_t bytes)`.
  template <registration G, class CompletionToken>
  auto async_write(const G& local, const object_remote& remote, transfer_span span, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [this](auto handler, region here, object_remote there, transfer_span s) {
          error_code ec = check_object_span(here, there, s, direction::put);
          if (ec) {
            sluice::detail::post_completion(std::move(handler), ec, std::size_t{0});
            return;
          }
          put_options options = put_;
          options.via = Via;
          const region from = here.subregion(s.local_offset, s.length, ec);
          detail::client_handler<std::string> write(
              report_created(std::move(handler), client_->get_executor(), std::move(there.created), s.length),
              client_->get_executor());
          write.join(cancellation_);
          client_->start_write_object(std::move(there.bucket), std::move(there.key), from, std::move(options),
                                      std::move(write));
        },
        token, local.region(), remote, span);
  }

 private:
  // The client completes with the bytes as std::uint64_t; a transport's completion has std::size_t.
  template <class Handler>
  auto forward_bytes(Handler handler) {
    const auto executor = boost::asio::get_associated_executor(handler, client_->get_executor());
    return boost::asio::bind_executor(executor, [h = std::move(handler)](error_code ec, std::uint64_t n) mutable {
      std::move(h)(ec, static_cast<std::size_t>(n));
    });
  }

  client* client_;
  get_options get_;
  put_options put_;
  detail::op_cancellation_ptr cancellation_;
};

/// What a token_registrar hands out: the region, checked; nothing to undo (the client's plane
/// registers the memory per request, and caches the registration). Move-only.
using token_registration = region_registration;

/// The registrar of s3::client's own GET and PUT: memory a request can carry. Host memory goes by
/// token or in the body; device memory only by token (the plane registers it: FI_HMEM, or a
/// same-host grant), so with transfer_via::http it is errc::unsupported_memory. A null pointer with
/// a size is errc::invalid_argument. Stateless and thread-safe.
class token_registrar {
 public:
  using registration_type = token_registration;

  explicit token_registrar(transfer_via via = transfer_via::automatic) noexcept : via_(via) {}

  registration_type register_region(const region& mem, error_code& ec) const {
    if (!mem.host_accessible() && via_ == transfer_via::http) {
      ec = sluice::errc::unsupported_memory;
      return {};
    }
    if (mem.data == nullptr && mem.size != 0) {
      ec = sluice::errc::invalid_argument;
      return {};
    }
    ec = {};
    return registration_type{mem};
  }

 private:
  transfer_via via_;
};

/// The bytes in HTTP bodies.
using http_transport = object_transport<transfer_via::http>;
/// The bytes by RDMA: the client's configured plane (client_config::rdma) grants a token per request.
using rdma_transport = object_transport<transfer_via::rdma>;
/// RDMA when the client has a plane and the server takes the token, else the body; a GET decides
/// in one request (a fallback_path of rdma_transport then http_transport costs a second request
/// after a decline). The name says only that the client chose; client::statistics() says which.
using auto_transport = object_transport<transfer_via::automatic>;

}  // namespace sluice::s3
