// SPDX-License-Identifier: Apache-2.0
// GetObject and HeadObject: the store's mapping, the answer plan_get chooses (get_plan.hpp),
// and the body by RDMA or a same-host grant (a token), sendfile(2), sealed TLS batches or slices
// from memory.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#include "connection.hpp"

namespace sluice::s3::detail {

template <class Stream>
get_request connection<Stream>::get_request_of(const request& req) {
  get_request asked;
  asked.head = req.head;
  asked.signed_request = req.auth.has_value();
  asked.if_match = req.header("If-Match");
  asked.if_none_match = req.header("If-None-Match");
  asked.if_modified_since = req.header("If-Modified-Since");
  asked.if_unmodified_since = req.header("If-Unmodified-Since");
  asked.range = req.header("Range");
  asked.checksum_mode = req.header("x-amz-checksum-mode");
  asked.part_number = req.where.param("partNumber");
  for (std::size_t i = 0; i < response_overrides.size(); ++i) {
    asked.overrides[i] = req.where.param(response_overrides[i].first);
  }
  return asked;
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::get_object(request& req, bool speculate) {
  error_code ec;
  // A store that revalidates its copies against an upstream (a gateway) may send its copy (cached,
  // or a fetch under way) while it asks the upstream whether that copy is current:
  // - into an RDMA or grant token's memory: the answer waits for both, and a copy that is not
  //   current is read again through map(), which writes the client's memory again before any
  //   answer;
  // - as an HTTP body, only for a GET with If-Match (what every part of a parallel download after
  //   the first carries): the body's last slice waits for the upstream's answer, and a copy that
  //   is not current ends the answer short (the connection closes), so no whole answer is made
  //   from it. Its version then fails the client's If-Match, as a confirmed answer would have.
  // Only for a GET whose answer depends on nothing but the copy's ETag and size, which the upstream
  // confirms: no partNumber (the part layout), no If-Modified-Since or If-Unmodified-Since
  // (Last-Modified). Any answer other than the transfer's success is made by the retry, from a
  // confirmed version (retry_get).
  const object_ref object{req.where.bucket, req.where.key};
  const bool by_token = !req.head && !req.header("x-amz-rdma-token").empty();
  speculate = speculate && state_->store->speculates() && !req.head && (by_token || !req.header("If-Match").empty()) &&
              !req.where.param("partNumber") && req.header("If-Modified-Since").empty() &&
              req.header("If-Unmodified-Since").empty();
  // A HEAD needs the version's info only: a store that can tell it without the bytes (a gateway,
  // which would otherwise fetch the object from its upstream) is asked for that alone.
  // A ranged GET of a store that can map part of an object (a gateway fetches only the range of
  // an uncached object) is asked for that part; the mapping's base() says where it starts.
  // A store that can answer before it has all the bytes (a gateway's miss, map_streaming) is
  // asked so; the bytes are then awaited (await_bytes) before they are sent.
  std::optional<any_mapping> mapped;
  // In place, as a local store's map(): it asks nobody.
  if (speculate) mapped = state_->store->map_unconfirmed(object, req.header("If-Match"));
  const bool unconfirmed = mapped.has_value();
  if (!mapped) {
    const bool ranged = !req.header("Range").empty() && !req.where.param("partNumber");
    const auto map = [&] {
      if (req.head) return state_->store->describe(object, ec);
      if (ranged) return state_->store->map_range(object, req.header("Range"), ec);
      return state_->store->map_streaming(object, ec);
    };
    // (store_call's choice, without its coroutine frame for a local store). A GET or HEAD that a
    // store maps asynchronously is awaited: no pool thread waits while its fetch is another's.
    if ((req.head || !ranged) && state_->store->maps_async()) {
      mapped = co_await await_mapping(object, req.head, ec);
    } else if (state_->store->remote()) {
      mapped = co_await offload(map);
    } else {
      mapped = map();
    }
  }
  if (ec) co_return co_await send_error(req, to_s3(ec));
  // Shared when it must outlive this answer: an RDMA write still in flight when its transfer gives
  // up (a peer that vanished) keeps this version of the object mapped until libfabric completes
  // it, and a confirmation in flight holds it too. Otherwise the mapping stays here.
  std::shared_ptr<const any_mapping> mapping_owner;
  if (unconfirmed || by_token) mapping_owner = std::make_shared<const any_mapping>(std::move(*mapped));
  const any_mapping& mapping = mapping_owner ? *mapping_owner : *mapped;
  // The upstream's answer for an unconfirmed copy; reset once it confirmed the copy.
  std::shared_ptr<confirmation> asked;
  if (unconfirmed) asked = co_await start_confirmation(object, mapping_owner);
  const object_info& info = mapping.info();

  const get_plan plan = plan_get(get_request_of(req), {&info, mapping.base(), mapping.region().size});
  const auto* answer = std::get_if<get_answer>(&plan);
  if (answer == nullptr) {
    if (asked) co_return co_await retry_get(req);
    co_return co_await send_refusal(req, plan, info);
  }

  // A mapping still being filled (a gateway's miss): bytes [0, end) of its region are awaited
  // without a thread waiting (await_bytes). The RDMA and grant paths wait for the whole range; the HTTP body for
  // its first slice before the answer's headers (so a fetch that fails early still answers with an
  // error), then slice by slice.
  const std::uint64_t at = answer->offset - mapping.base();  // where the extent starts in the region
  const bool growing = mapping.growing();
  if (growing && !req.head) {
    co_await await_bytes(mapping, at + (by_token ? answer->length : std::min(answer->length, body_slice)), ec);
    // A fetch joined before the upstream was asked (map_unconfirmed) that failed (its version
    // replaced during it, say): the retry asks, and answers from what the upstream holds.
    if (ec && asked) co_return co_await retry_get(req);
    if (ec) co_return co_await send_error(req, to_s3(ec));
  }

  // With a token, the bytes go by RDMA into the client's memory and the answer has no body;
  // a declined token gets the body over HTTP, marked x-amz-rdma-reply: 501.
  if (by_token) {
    rdma_token token;
    std::string why;
    const token_verdict verdict = check_token(req, rdma_op::write, answer->length, token, why);
    if (asked && verdict != token_verdict::accept) co_return co_await retry_get(req);
    if (verdict == token_verdict::reject) co_return co_await send_error(req, s3::errc::invalid_rdma_token, why);
    req.rdma_reply = "501";
    if (verdict == token_verdict::accept) {
      if (const std::optional<bool> keep = co_await send_by_token(req, *answer, token, mapping_owner, asked)) {
        co_return *keep;
      }
    }
  }

  // An unconfirmed copy as an HTTP body (If-Match): retried from a confirmed version if the upstream
  // already said no, or if the body is one slice (its headers wait for the answer, so that no
  // answer is cut short for nothing). The body goes before the answer only when If-Match names
  // the copy's ETag alone: then another version fails it. `*` or a list may hold that version too,
  // which must get a whole answer.
  if (asked &&
      (asked->done || answer->length <= body_slice || req.header("If-Match") != "\"" + info.attributes.etag + "\"")) {
    if (!co_await confirmed(*asked)) co_return co_await retry_get(req);
    asked.reset();
  }
  head_.start(answer->status);
  common_fields(head_, req.id, req.rdma_reply);
  answer->set_fields(head_, info);
  const bool keep = req.keep_alive && !req.body_pending && !state_->stopping && !state_->draining;
  const std::string_view head = head_.finish(answer->length, keep);
  if (!head_.valid()) {  // stored metadata that cannot go out as a header: refused, not injected
    co_return co_await send_error(req, s3::errc::internal_error, "The object's stored headers cannot be sent.");
  }
  // Gives back the head's memory when it grew past the ordinary (many metadata fields).
  struct trim_head {
    answer_head& head;
    ~trim_head() { head.trim(4 * kib); }
  } trim{head_};

  // Over plain HTTP, from the store's file by sendfile(2) when it has one and the server's policy
  // allows it for this peer: no copy into the socket. A copy being fetched (a gateway's miss) goes
  // so to a reader on this host too: its rate is the fetch's, and the server's CPU is the fetch's
  // too (docs/performance.md, "Gateway").
  bool file = false;
  if (!tls && mapping.native_handle() >= 0) {
    const http_sendfile when = state_->config.sendfile;
    file = when == http_sendfile::always || (when == http_sendfile::remote && (growing || !peer_on_this_host()));
  }
  const body_route route = route_body(*answer, {req.head, tls, file, growing, asked != nullptr});
  if (route != body_route::with_head && route != body_route::none) {
    co_return co_await send_body(req, *answer, mapping, route, head, asked, keep);
  }
  // The head alone (a HEAD, an empty body), or one slice from memory in the head's write
  // (get_plan.hpp's route_body): one write, and no further coroutine frame.
  const std::size_t length = route == body_route::none ? 0 : static_cast<std::size_t>(answer->length);
  const std::byte* first_byte =
      length == 0 ? nullptr : sluice::detail::readable_as_region(mapping.region()).bytes() + at;
  if constexpr (tls) {
    const std::string_view whole = length == 0 ? head : head_.append_body(first_byte, length);
    co_await asio::async_write(stream_, asio::buffer(whole.data(), whole.size()),
                               asio::redirect_error(asio::use_awaitable, ec));
  } else {
    const std::array<asio::const_buffer, 2> parts{asio::buffer(head.data(), head.size()),
                                                  asio::buffer(first_byte, length)};
    co_await asio::async_write(stream_, parts, asio::redirect_error(asio::use_awaitable, ec));
  }
  req.short_answer = static_cast<bool>(ec);
  record(req, static_cast<unsigned>(answer->status), ec ? 0 : length);
  co_return !ec && keep;
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::retry_get(request& req) {
  req.rdma_reply.clear();
  req.decline = {};
  return get_object(req, false);
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::send_refusal(request& req, const get_plan& plan, const object_info& info) {
  if (const auto* error = std::get_if<answer_error>(&plan))
    co_return co_await send_error(req, error->code, error->message);
  if (std::holds_alternative<not_modified>(plan)) {
    // 304 Not Modified carries the ETag and Last-Modified the client's cache compares (RFC 9110).
    string_response res{http::status::not_modified, 11};
    res.set(http::field::etag, "\"" + info.attributes.etag + "\"");
    res.set(http::field::last_modified, xml::http_date(info.last_modified));
    co_return co_await send(req, std::move(res));
  }
  const std::uint64_t size = std::get<range_unsatisfiable>(plan).size;
  string_response res{http::status::range_not_satisfiable, 11};
  res.set(http::field::content_range, "bytes */" + std::to_string(size));
  res.set(http::field::content_type, "application/xml");
  req.error = "InvalidRange";
  res.body() = xml::error_body("InvalidRange", "The requested range is not satisfiable", req.resource(), req.id);
  co_return co_await send(req, std::move(res));
}

template <class Stream>
asio::awaitable<std::optional<bool>> connection<Stream>::send_by_token(
    request& req, const get_answer& answer, const rdma_token& token, const std::shared_ptr<const any_mapping>& mapping,
    std::shared_ptr<confirmation>& asked) {
  // Straight from the store's mapping of the object: no staging copy.
  rdma_source source{mapping->region(), answer.offset - mapping->base(), answer.length, mapping, version_of(*mapping)};
  if (mapping->native_handle() >= 0) {
    source.file = mapping->native_handle();
    source.file_offset = mapping->data_offset();
  }
  const error_code moved = co_await rdma_write(requester(req), token, source);
  if (asked) {  // the upstream's HEAD, asked while the bytes moved
    if (!co_await confirmed(*asked)) co_return co_await retry_get(req);
    asked.reset();
  }
  if (!moved) {
    string_response res{answer.status, 11};
    fields_head head(res.base());
    answer.set_fields(head, mapping->info());
    req.rdma_reply = answer.ranged ? "206" : "200";
    req.bytes_direct = answer.length;
    req.direct_path = direct_path_of(token.provider);
    res.set("x-amz-rdma-bytes-transferred", std::to_string(answer.length));
    co_return co_await send(req, std::move(res));
  }
  if (moved == s3::errc::invalid_rdma_token) {  // memory the requester was not granted
    req.rdma_reply.clear();
    co_return co_await send_error(req, s3::errc::invalid_rdma_token, "the token names memory not granted to this user");
  }
  if (moved != s3::errc::rdma_not_supported) {
    req.rdma_reply.clear();  // not a decline: the transfer failed
    co_return co_await send_error(req, to_s3(moved));
  }
  req.decline = rdma_decline_reason::plane;
  co_return std::nullopt;  // declined by the plane: the body goes over HTTP
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::send_body(request& req, const get_answer& answer, const any_mapping& mapping,
                                                    body_route route, std::string_view head,
                                                    std::shared_ptr<confirmation>& asked, bool keep) {
  error_code ec;
  const auto code = static_cast<unsigned>(answer.status);
  const std::uint64_t at = answer.offset - mapping.base();  // in the mapping's region
  const std::uint64_t length = answer.length;
  const bool growing = mapping.growing();
  // Over TLS a body from memory goes as full records sealed in batches, its head in the first
  // unless the body must wait (a growing mapping, a confirmation).
  const bool head_in_batch = route == body_route::sealed && !growing && !asked;
  if (!head_in_batch) {
    co_await asio::async_write(stream_, asio::buffer(head.data(), head.size()),
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  if (ec || route == body_route::none) {
    req.short_answer = static_cast<bool>(ec);
    record(req, code, 0);
    co_return !ec && keep;
  }
  const std::byte* first_byte =
      route == body_route::sendfile ? nullptr : sluice::detail::readable_as_region(mapping.region()).bytes() + at;
  std::uint64_t written = 0;  // acknowledged by the socket
  for (std::uint64_t sent = 0; sent < length;) {
    const std::uint64_t n = std::min(body_slice, length - sent);
    if (growing) {
      co_await await_bytes(mapping, at + sent + n, ec);
      if (ec) {  // the fetch failed with the answer under way: the body ends short, the connection closes
        req.short_answer = true;
        record(req, code, written);
        co_return false;
      }
    }
    if (asked && sent + n == length) {  // the last slice goes only from a version the upstream confirms
      if (!co_await confirmed(*asked)) {
        req.short_answer = true;
        record(req, code, written);
        co_return false;  // the body ends short: the connection closes
      }
      asked.reset();
    }
    if (route == body_route::sendfile) {
      ec = co_await send_file(mapping.native_handle(), mapping.data_offset() + at + sent, n);
    } else if (route == body_route::sealed) {
      ec = co_await send_sealed(sent == 0 && head_in_batch ? head : std::string_view(), first_byte + sent, n);
    } else {
      lowest().expires_after(state_->config.read_timeout);
      const std::size_t partial =
          co_await asio::async_write(stream_, asio::buffer(first_byte + sent, static_cast<std::size_t>(n)),
                                     asio::redirect_error(asio::use_awaitable, ec));
      if (ec) written += partial;  // what the socket took of a slice cut short
    }
    if (ec) {
      req.short_answer = true;
      record(req, code, written);
      co_return false;
    }
    written = sent += n;
  }
  record(req, code, written);
  co_return keep;
}

template <class Stream>
asio::awaitable<error_code> connection<Stream>::send_file(int fd, std::uint64_t position, std::uint64_t length) {
  tcp::socket& socket = lowest().socket();
  error_code ec;
  socket.native_non_blocking(true, ec);
  if (ec) co_return ec;
  // Waits for room in the socket's buffer are bounded by a timer that cancels the wait; `waiting`
  // keeps a timer that fires as the wait ends from cancelling a later operation.
  asio::steady_timer deadline(stream_.get_executor());
  auto waiting = std::make_shared<bool>(false);
  while (length > 0) {
    auto at = static_cast<off_t>(position);
    const ssize_t n =
        sendfile_nosignal(socket.native_handle(), fd, &at, static_cast<std::size_t>(std::min(length, gib)));
    if (n > 0) {
      position += static_cast<std::uint64_t>(n);
      length -= static_cast<std::uint64_t>(n);
      continue;
    }
    if (n == 0) co_return make_error_code(sluice::errc::protocol_violation);  // the file is shorter than its object
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) co_return error_code(errno, boost::system::system_category());
    *waiting = true;
    deadline.expires_after(state_->config.read_timeout);
    deadline.async_wait([self = this->shared_from_this(), waiting](error_code e) {
      if (!e && *waiting) {
        error_code ignored;
        self->lowest().socket().cancel(ignored);
      }
    });
    co_await socket.async_wait(tcp::socket::wait_write, asio::redirect_error(asio::use_awaitable, ec));
    *waiting = false;
    deadline.cancel();
    if (ec) co_return ec;
  }
  co_return error_code{};
}

template <class Stream>
asio::awaitable<error_code> connection<Stream>::send_sealed(std::string_view prefix, const std::byte* body,
                                                            std::uint64_t length) {
  if constexpr (!tls) {
    co_return make_error_code(sluice::errc::invalid_argument);  // plain HTTP has nothing to seal
  } else {
    struct give_back {  // an idle connection keeps no batch buffer
      tls_sealer& sealer;
      ~give_back() { sealer.release(); }
    } release{sealer_};
    constexpr std::uint64_t batch = 256 * kib;
    error_code ec;
    for (std::uint64_t done = 0; done < length;) {
      const auto n = static_cast<std::size_t>(std::min(batch, length - done));
      sealer_.clear();
      if (!prefix.empty() && !sealer_.seal(stream_.native_handle(), std::as_bytes(std::span(prefix)), ec)) co_return ec;
      prefix = {};
      if (!sealer_.seal(stream_.native_handle(), std::span(body + done, n), ec)) co_return ec;
      const auto records = sealer_.sealed();
      lowest().expires_after(state_->config.read_timeout);
      co_await asio::async_write(lowest(), asio::buffer(records.data(), records.size()),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return ec;
      done += n;
    }
    co_return error_code{};
  }
}

#define SLUICE_CONNECTION_MEMBERS(S)                                                                \
  template asio::awaitable<bool> connection<S>::get_object(connection<S>::request&, bool);          \
  template asio::awaitable<error_code> connection<S>::send_file(int, std::uint64_t, std::uint64_t); \
  template asio::awaitable<error_code> connection<S>::send_sealed(std::string_view, const std::byte*, std::uint64_t);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
