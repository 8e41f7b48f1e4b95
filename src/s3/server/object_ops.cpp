// Object operations: PutObject, CopyObject, GetObject/HeadObject (HTTP body, sendfile, RDMA,
// same-host grants), DeleteObject, object tagging.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#include "receive.hpp"

namespace sluice::s3::detail {

template <class Stream>
asio::awaitable<bool> connection<Stream>::put_object(request& req) {
  std::string why;
  if (!header_tags(req, why)) co_return co_await send_error(req, s3::errc::invalid_tag, why);
  const auto precondition = write_precondition_of(req.header("If-Match"), req.header("If-None-Match"));
  if (!precondition) co_return co_await send_error(req, s3::errc::not_implemented, std::string(unsupported_condition));
  if (const auto failure = co_await early_precondition_failure(req, *precondition)) {
    co_return co_await send_error(req, *failure);
  }
  error_code ec;
  auto writer = state_->store->begin_put({req.where.bucket, req.where.key}, ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));
  writer.require(*precondition);
  auto attributes = co_await receive_payload(req, writer, state_->config.max_object_bytes);
  if (!attributes) co_return false;  // answered (or the connection is gone); nothing published
  const object_info info = co_await offload([&] { return writer.commit(*attributes, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  string_response res{http::status::ok, 11};
  res.set(http::field::etag, "\"" + info.attributes.etag + "\"");
  for (const auto& [algorithm, value] : info.attributes.checksums) {
    if (!req.header("x-amz-checksum-" + algorithm).empty() ||
        req.header("x-amz-trailer") == "x-amz-checksum-" + algorithm) {
      res.set("x-amz-checksum-" + algorithm, value);
    }
  }
  co_return co_await send(req, std::move(res));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::copy_object(request& req) {
  const auto from = parse_copy_source(req.header("x-amz-copy-source"));
  if (!from) co_return co_await send_error(req, s3::errc::invalid_argument, "invalid x-amz-copy-source");
  if (!owns(req, from->bucket)) co_return co_await send_error(req, s3::errc::access_denied);
  const bool replace = iequals(req.header("x-amz-metadata-directive"), "REPLACE");
  const bool replace_tags = iequals(req.header("x-amz-tagging-directive"), "REPLACE");
  if (from->bucket == req.where.bucket && from->key == req.where.key && !replace && !replace_tags) {
    co_return co_await send_error(req, s3::errc::invalid_request,
                                  "This copy request is illegal because it is trying to copy an object to itself "
                                  "without changing the object's metadata, storage class, website redirect location "
                                  "or encryption attributes.");
  }
  std::string why;
  const auto tags = header_tags(req, why);
  if (!tags) co_return co_await send_error(req, s3::errc::invalid_tag, why);
  error_code ec;
  auto mapping = co_await store_call([&] { return state_->store->map(*from, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  if (!copy_source_allows(req, mapping.info())) co_return co_await send_error(req, s3::errc::precondition_failed);
  auto writer = state_->store->begin_put({req.where.bucket, req.where.key}, ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));
  object_attributes attributes = replace ? attributes_from(req) : mapping.info().attributes;
  attributes.tags = replace_tags ? *tags : mapping.info().attributes.tags;
  attributes.part_sizes.clear();  // the copy is one piece, with the MD5 of its bytes as ETag
  attributes.upload_id.clear();
  attributes.checksums = mapping.info().attributes.checksums;  // the bytes are the same
  const object_info info = co_await offload([&] {
    const const_region bytes = mapping.region();
    digest md5(digest_kind::md5);
    write_from(writer, bytes.bytes(), bytes.size, &md5, ec);
    attributes.etag = to_hex(md5.finish());
    return ec ? object_info{} : writer.commit(attributes, ec);
  });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  co_return co_await send_xml(req, xml::copy_object_result(info.attributes.etag, info.last_modified));
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
  // confirmed version (`unless_unconfirmed`).
  const object_ref object{req.where.bucket, req.where.key};
  bool unconfirmed = false;
  std::shared_ptr<confirmation> asked;  // the upstream's answer for an unconfirmed copy
  speculate = speculate && state_->store->speculates() && !req.head &&
              (!req.header("x-amz-rdma-token").empty() || !req.header("If-Match").empty()) &&
              !req.where.param("partNumber") && req.header("If-Modified-Since").empty() &&
              req.header("If-Unmodified-Since").empty();
  const auto retry = [&]() -> asio::awaitable<bool> {
    req.rdma_reply.clear();
    req.decline = {};
    return get_object(req, false);
  };
  // `answer()`, or the retry when the copy it would be made from is not confirmed.
  const auto unless_unconfirmed = [&](auto answer) -> asio::awaitable<bool> {
    return unconfirmed ? retry() : answer();
  };
  // A HEAD needs the version's info only: a store that can tell it without the bytes (a gateway,
  // which would otherwise fetch the object from its upstream) is asked for that alone.
  // A ranged GET of a store that can map part of an object (a gateway fetches only the range of
  // an uncached object) is asked for that part; the mapping's base() says where it starts.
  // A store that can answer before it has all the bytes (a gateway's miss, map_streaming) is
  // asked so; the bytes are then awaited (mapping.wait_until) before they are sent.
  std::optional<any_mapping> mapped;
  // In place, as a local store's map(): it asks nobody.
  if (speculate) mapped = state_->store->map_unconfirmed(object);
  unconfirmed = mapped.has_value();
  if (!mapped) {
    const auto map = [&] {
      if (req.head) return state_->store->describe(object, ec);
      if (!req.header("Range").empty() && !req.where.param("partNumber")) {
        return state_->store->map_range(object, req.header("Range"), ec);
      }
      return state_->store->map_streaming(object, ec);
    };
    // (store_call's choice, without its coroutine frame for a local store)
    if (state_->store->remote()) {
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
  if (unconfirmed || (!req.head && !req.header("x-amz-rdma-token").empty())) {
    mapping_owner = std::make_shared<const any_mapping>(std::move(*mapped));
  }
  const any_mapping& mapping = mapping_owner ? *mapping_owner : *mapped;
  if (unconfirmed) asked = co_await start_confirmation(object, mapping_owner);
  const object_info& info = mapping.info();
  const auto last_modified = std::chrono::time_point_cast<std::chrono::seconds>(info.last_modified);

  // Preconditions, in the order RFC 7232 section 6 gives.
  auto etag_matches = [&](std::string_view list) { return etag_list_matches(list, info.attributes.etag); };
  const auto if_match = req.header("If-Match");
  const auto if_none_match = req.header("If-None-Match");
  if (!if_match.empty() && !etag_matches(if_match)) {
    co_return co_await unless_unconfirmed([&] { return send_error(req, s3::errc::precondition_failed); });
  }
  if (if_match.empty()) {
    if (auto t = xml::parse_http_date(req.header("If-Unmodified-Since")); t && last_modified > *t) {
      co_return co_await send_error(req, s3::errc::precondition_failed);
    }
  }
  // 304 Not Modified carries the ETag and Last-Modified the client's cache compares (RFC 9110).
  const auto not_modified = [&] {
    string_response res{http::status::not_modified, 11};
    res.set(http::field::etag, "\"" + info.attributes.etag + "\"");
    res.set(http::field::last_modified, xml::http_date(info.last_modified));
    return res;
  };
  if (!if_none_match.empty() && etag_matches(if_none_match)) {
    co_return co_await unless_unconfirmed([&] { return send(req, not_modified()); });
  }
  if (if_none_match.empty()) {
    if (auto t = xml::parse_http_date(req.header("If-Modified-Since")); t && last_modified <= *t) {
      co_return co_await send(req, not_modified());
    }
  }

  // response-* overrides of the answer's headers: signed requests only, as on S3, and only values
  // that are safe to send as a header (they come percent-decoded from the query).
  static constexpr std::array<std::pair<std::string_view, http::field>, 6> overrides = {{
      {"response-content-type", http::field::content_type},
      {"response-content-language", http::field::content_language},
      {"response-expires", http::field::expires},
      {"response-cache-control", http::field::cache_control},
      {"response-content-disposition", http::field::content_disposition},
      {"response-content-encoding", http::field::content_encoding},
  }};
  std::vector<std::pair<http::field, std::string_view>> overridden;
  for (const auto& [name, field] : overrides) {
    const auto value = req.where.param(name);
    if (!value) continue;
    if (!req.auth) {
      co_return co_await unless_unconfirmed([&] {
        return send_error(req, s3::errc::invalid_request,
                          "Request specific response headers cannot be used for anonymous GET requests.");
      });
    }
    if (!is_safe_header_value(*value)) {
      const std::string why = "The " + std::string(name) + " value holds a character a header cannot carry.";
      co_return co_await unless_unconfirmed([&] { return send_error(req, s3::errc::invalid_argument, why); });
    }
    overridden.emplace_back(field, *value);
  }

  const std::uint64_t size = info.size;
  range_result range = parse_range(req.header("Range"), size);
  // ?partNumber=N: that part of a multipart object (206, with x-amz-mp-parts-count), or the
  // whole of any other object as its part 1.
  std::optional<std::size_t> parts_count;
  if (const auto part_param = req.where.param("partNumber")) {
    const auto number = parse_part_number(*part_param);
    if (!number) {
      co_return co_await send_error(req, s3::errc::invalid_argument,
                                    "Part number must be an integer between 1 and 10000");
    }
    if (!req.header("Range").empty()) {
      co_return co_await send_error(req, s3::errc::invalid_request,
                                    "Cannot specify both Range header and partNumber query parameter");
    }
    const auto& sizes = info.attributes.part_sizes;
    if (*number > std::max<std::size_t>(sizes.size(), 1)) {
      co_return co_await send_error(req, s3::errc::invalid_part, "The requested partnumber is not satisfiable");
    }
    range = {};
    if (!sizes.empty()) {
      parts_count = sizes.size();
      std::uint64_t first = 0;
      for (std::uint32_t i = 1; i < *number; ++i) first += sizes[i - 1];
      const std::uint64_t length = sizes[*number - 1];
      if (first > size || length > size - first) co_return co_await send_error(req, s3::errc::internal_error);
      if (length > 0) range = {true, true, first, length};
    }
  }
  // What every successful answer carries beside the object's headers.
  // `head`: answer_head or fields_head. The overrides go first: the object's own value of a
  // field they set stands aside.
  const auto answer_headers = [&](auto& head, std::uint64_t first, std::uint64_t length) {
    for (const auto& [field, value] : overridden) head.set(field, value);
    object_fields(head, info, !range.present && iequals(req.header("x-amz-checksum-mode"), "ENABLED"));
    if (range.present) {
      char text[80] = "bytes ";  // and three numbers of at most 20 digits
      char* end = std::to_chars(text + 6, text + sizeof text, first).ptr;
      *end++ = '-';
      end = std::to_chars(end, text + sizeof text, first + length - 1).ptr;
      *end++ = '/';
      end = std::to_chars(end, text + sizeof text, size).ptr;
      head.set(http::field::content_range, std::string_view(text, static_cast<std::size_t>(end - text)));
    }
    if (parts_count) head.set("x-amz-mp-parts-count", std::uint64_t{*parts_count});
  };
  if (range.present && !range.satisfiable) {
    if (unconfirmed) co_return co_await retry();
    string_response res{http::status::range_not_satisfiable, 11};
    res.set(http::field::content_range, "bytes */" + std::to_string(size));
    res.set(http::field::content_type, "application/xml");
    req.error = "InvalidRange";
    res.body() = xml::error_body("InvalidRange", "The requested range is not satisfiable", req.resource(), req.id);
    co_return co_await send(req, std::move(res));
  }
  const std::uint64_t offset = range.present ? range.offset : 0;
  const std::uint64_t length = range.present ? range.length : size;
  // Where the mapping's region starts in the object (0 but for a part mapped by map_range), and
  // a check that it holds [offset, offset + length).
  const std::uint64_t base = mapping.base();
  if (!req.head &&
      (offset < base || offset - base > mapping.region().size || length > mapping.region().size - (offset - base))) {
    co_return co_await unless_unconfirmed([&] { return send_error(req, s3::errc::internal_error); });
  }

  // A mapping still being filled (a gateway's miss): bytes [0, end) of its region are awaited
  // off the network threads. The RDMA and grant paths wait for the whole range; the HTTP body for
  // its first slice before the answer's headers (so a fetch that fails early still answers with an
  // error), then slice by slice.
  constexpr std::uint64_t slice = 4 * mib;
  const bool growing = mapping.growing();
  if (growing) {
    const std::uint64_t first = req.header("x-amz-rdma-token").empty() ? std::min(length, slice) : length;
    const std::uint64_t end = offset - base + first;
    if (!req.head) {
      co_await await_bytes(mapping, end, ec);
      // A fetch joined before the upstream was asked (map_unconfirmed) that failed (its version
      // replaced during it, say): the retry asks, and answers from what the upstream holds.
      if (ec) co_return co_await unless_unconfirmed([&] { return send_error(req, to_s3(ec)); });
    }
  }

  // With a token, the bytes go by RDMA into the client's memory and the answer has no body;
  // a declined token gets the body over HTTP, marked x-amz-rdma-reply: 501.
  if (!req.head && !req.header("x-amz-rdma-token").empty()) {
    rdma_token token;
    std::string why;
    const token_verdict verdict = check_token(req, rdma_op::write, length, token, why);
    if (unconfirmed && verdict != token_verdict::accept) co_return co_await retry();
    if (verdict == token_verdict::reject) co_return co_await send_error(req, s3::errc::invalid_rdma_token, why);
    req.rdma_reply = "501";
    if (verdict == token_verdict::accept) {
      // Straight from the store's mapping of the object: no staging copy.
      rdma_source source{mapping.region(), offset - base, length, mapping_owner, version_of(mapping)};
      if (mapping.native_handle() >= 0) {
        source.file = mapping.native_handle();
        source.file_offset = mapping.data_offset();
      }
      const rdma_requester who = requester(req);
      const error_code moved = co_await rdma_write(who, token, source);
      if (asked) {  // the upstream's HEAD, asked while the bytes moved
        if (!co_await confirmed(*asked)) co_return co_await retry();
        unconfirmed = false;
        asked.reset();
      }
      if (!moved) {
        string_response res{range.present ? http::status::partial_content : http::status::ok, 11};
        fields_head head(res.base());
        answer_headers(head, offset, length);
        req.rdma_reply = range.present ? "206" : "200";
        req.bytes_direct = length;
        req.direct_path = direct_path_of(token.provider);
        res.set("x-amz-rdma-bytes-transferred", std::to_string(length));
        co_return co_await send(req, std::move(res));
      }
      if (moved == s3::errc::invalid_rdma_token) {  // memory the requester was not granted
        req.rdma_reply.clear();
        co_return co_await send_error(req, s3::errc::invalid_rdma_token,
                                      "the token names memory not granted to this user");
      }
      if (moved != s3::errc::rdma_not_supported) {
        req.rdma_reply.clear();  // not a decline: the transfer failed
        co_return co_await send_error(req, to_s3(moved));
      }
      req.decline = rdma_decline_reason::plane;
    }
  }

  // An unconfirmed copy as an HTTP body (If-Match): retried from a confirmed version if the upstream
  // already said no, or if the body is one slice (its headers wait for the answer, so that no
  // answer is cut short for nothing). The body goes before the answer only when If-Match names
  // the copy's ETag alone: then another version fails it. `*` or a list may hold that version too,
  // which must get a whole answer.
  if (asked && (asked->done || length <= slice || req.header("If-Match") != "\"" + info.attributes.etag + "\"")) {
    if (!co_await confirmed(*asked)) co_return co_await retry();
    unconfirmed = false;
    asked.reset();
  }
  const auto status = range.present ? http::status::partial_content : http::status::ok;
  head_.start(status);
  common_fields(head_, req.id, req.rdma_reply);
  answer_headers(head_, offset, length);
  const bool keep = req.keep_alive && !req.body_pending && !state_->stopping;
  const std::string_view head = head_.finish(length, keep);
  if (!head_.valid()) {  // stored metadata that cannot go out as a header: refused, not injected
    co_return co_await send_error(req, s3::errc::internal_error, "The object's stored headers cannot be sent.");
  }
  const auto code = static_cast<unsigned>(status);
  // Gives back the head's memory when it grew past the ordinary (many metadata fields).
  struct trim_head {
    answer_head& head;
    ~trim_head() { head.trim(4 * kib); }
  } trim{head_};

  // The body straight from the store's mapping, in slices (no copy in user space). Over plain
  // HTTP, from the store's file by sendfile(2) when it has one: no copy into the socket either.
  const const_region bytes = mapping.region();
  const std::byte* first_byte =
      req.head || length == 0 ? nullptr : sluice::detail::readable_as_region(bytes).bytes() + (offset - base);
  int file = -1;
  std::uint64_t file_offset = 0;
  if (!tls && mapping.native_handle() >= 0) {
    const http_sendfile when = state_->config.sendfile;
    if (when == http_sendfile::always || (when == http_sendfile::remote && !peer_on_this_host())) {
      file = mapping.native_handle();
      file_offset = mapping.data_offset() + (offset - base);
    }
  }
  if (!req.head && length > 0 && length <= slice && !growing && !asked && file < 0) {
    // One slice from memory goes with its head in one write: one system call, and for a small
    // object one segment. Over TLS a small body joins the head's buffer: one record, not two.
    if (tls && length <= 16 * kib) {
      const std::string_view whole = head_.append_body(first_byte, static_cast<std::size_t>(length));
      co_await asio::async_write(stream_, asio::buffer(whole.data(), whole.size()),
                                 asio::redirect_error(asio::use_awaitable, ec));
      record(req, code, ec ? 0 : length);
      co_return !ec && keep;
    }
    if constexpr (!tls) {  // (a larger body over TLS goes sealed, below)
      const std::array<asio::const_buffer, 2> parts{asio::buffer(head.data(), head.size()),
                                                    asio::buffer(first_byte, static_cast<std::size_t>(length))};
      co_await asio::async_write(stream_, parts, asio::redirect_error(asio::use_awaitable, ec));
      record(req, code, ec ? 0 : length);
      co_return !ec && keep;
    }
  }
  // Over TLS a body from memory goes as full records sealed in batches, its head in the first.
  const bool sealed = tls && !req.head && length > 0 && file < 0;
  if (!sealed || growing || asked) {
    co_await asio::async_write(stream_, asio::buffer(head.data(), head.size()),
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  const bool head_sent = !sealed || growing || asked;
  if (ec || req.head || length == 0) {
    record(req, code, 0);
    co_return !ec && keep;
  }
  std::uint64_t written = 0;  // acknowledged by the socket
  for (std::uint64_t sent = 0; sent < length;) {
    const std::uint64_t n = std::min(slice, length - sent);
    if (growing) {
      co_await await_bytes(mapping, offset - base + sent + n, ec);
      if (ec) {  // the fetch failed with the answer under way: the body ends short, the connection closes
        record(req, code, written);
        co_return false;
      }
    }
    if (asked && sent + n == length) {  // the last slice goes only from a version the upstream confirms
      if (!co_await confirmed(*asked)) {
        record(req, code, written);
        co_return false;  // the body ends short: the connection closes
      }
      asked.reset();
    }
    if (file >= 0) {
      ec = co_await send_file(file, file_offset + sent, n);
    } else if (sealed) {
      ec = co_await send_sealed(
          sent == 0 && !head_sent ? std::string_view(head.data(), head.size()) : std::string_view(), first_byte + sent,
          n);
    } else {
      lowest().expires_after(state_->config.read_timeout);
      co_await asio::async_write(stream_, asio::buffer(first_byte + sent, static_cast<std::size_t>(n)),
                                 asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec) {
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

template <class Stream>
asio::awaitable<bool> connection<Stream>::delete_object(request& req) {
  error_code ec;
  (void)co_await store_call([&] {
    state_->store->remove({req.where.bucket, req.where.key}, ec);
    return 0;
  });
  if (ec && ec != sluice::errc::no_such_object) co_return co_await send_error(req, to_s3(ec));
  co_return co_await send_empty(req, http::status::no_content);
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::object_tagging(request& req) {
  const object_ref object{req.where.bucket, req.where.key};
  error_code ec;
  if (req.where.op == operation::get_object_tagging) {
    const object_info info = co_await store_call([&] { return state_->store->head(object, ec); });
    if (ec) co_return co_await send_error(req, to_s3(ec));
    co_return co_await send_xml(req, xml::tagging(info.attributes.tags));
  }
  std::map<std::string, std::string> tags;
  if (req.where.op == operation::put_object_tagging) {
    auto body = co_await read_small_body(req, 64 * kib);
    if (!body) co_return co_await send_error(req, s3::errc::malformed_xml);
    auto pairs = xml::parse_tagging(*body, ec);
    if (ec) co_return co_await send_error(req, to_s3(ec));
    std::string why;
    auto checked = checked_tags(pairs, why);
    if (!checked) co_return co_await send_error(req, s3::errc::invalid_tag, why);
    tags = std::move(*checked);
  }
  // Tags live in the object's metadata: the object is written again with the new set (same
  // bytes, ETag and other attributes), published only if it is still the version that was read,
  // so that a PUT meanwhile is never undone. A few tries, then 503 SlowDown.
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto mapping = co_await store_call([&] { return state_->store->map(object, ec); });
    if (ec) co_return co_await send_error(req, to_s3(ec));
    if (mapping.info().attributes.tags == tags) break;  // nothing to change
    auto writer = state_->store->begin_put(object, ec);
    if (ec) co_return co_await send_error(req, to_s3(ec));
    object_attributes attributes = mapping.info().attributes;
    attributes.tags = tags;
    writer.require(write_precondition{false, attributes.etag});
    (void)co_await offload([&] {
      const const_region bytes = mapping.region();
      write_from(writer, bytes.bytes(), bytes.size, nullptr, ec);
      return ec ? object_info{} : writer.commit(attributes, ec);
    });
    if (ec == sluice::errc::precondition_failed) continue;  // replaced meanwhile: tag the new version
    if (ec) co_return co_await send_error(req, to_s3(ec));
    break;
  }
  if (ec) co_return co_await send_error(req, s3::errc::slow_down, "The object kept changing while it was tagged.");
  co_return co_await send_empty(
      req, req.where.op == operation::put_object_tagging ? http::status::ok : http::status::no_content);
}

#define SLUICE_CONNECTION_MEMBERS(S)                                                                                  \
  template asio::awaitable<bool> connection<S>::put_object(connection<S>::request&);                                  \
  template asio::awaitable<bool> connection<S>::copy_object(connection<S>::request&);                                 \
  template asio::awaitable<bool> connection<S>::get_object(connection<S>::request&, bool);                            \
  template asio::awaitable<error_code> connection<S>::send_file(int, std::uint64_t, std::uint64_t);                   \
  template asio::awaitable<error_code> connection<S>::send_sealed(std::string_view, const std::byte*, std::uint64_t); \
  template asio::awaitable<bool> connection<S>::delete_object(connection<S>::request&);                               \
  template asio::awaitable<bool> connection<S>::object_tagging(connection<S>::request&);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
