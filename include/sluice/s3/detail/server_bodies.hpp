// Request bodies: 100-continue, small XML bodies, object metadata from headers, preconditions,
// receiving an object (HTTP body or chunked, or by RDMA through a checked token).
// Part of the S3 server's implementation (include/sluice/s3/server_impl.hpp), each part on top
// of the one before it; embedders include server_impl.hpp, not these.
#pragma once

#include <sluice/s3/detail/server_dispatch.hpp>

namespace sluice::s3::detail {

// ---------------------------------------------------------------------------------------------
// Bodies

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::continue_if_expected(request& req) {
  if (!iequals(req.header("Expect"), "100-continue")) co_return true;
  http::response<http::empty_body> res{http::status::continue_, 11};
  error_code ec;
  co_await http::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

template <class Store, class Stream>
asio::awaitable<std::optional<std::string>> connection<Store, Stream>::read_small_body(request& req,
                                                                                       std::size_t limit) {
  if (!req.body_pending) co_return std::string();
  const auto length = req.parser->content_length();
  if (length && *length > limit) co_return std::nullopt;
  if (!co_await continue_if_expected(req)) co_return std::nullopt;
  http::request_parser<http::string_body> body_parser(std::move(*req.parser));
  body_parser.body_limit(limit);
  error_code ec;
  co_await http::async_read(stream_, buffer_, body_parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return std::nullopt;
  req.body_pending = false;
  std::string body = std::move(body_parser.get().body());
  req.bytes_received += body.size();
  // Signed payloads must hash to what was signed; Content-MD5, when sent, must match.
  if (req.auth && req.auth->payload_hash.size() == 64 &&
      !constant_time_equal(sha256_hex(body), req.auth->payload_hash)) {
    co_return std::nullopt;
  }
  if (auto md5 = req.header("Content-MD5"); !md5.empty()) {
    digest d(digest_kind::md5);
    d.update(std::string_view(body));
    if (base64_encode(d.finish()) != md5) co_return std::nullopt;
  }
  co_return body;
}

template <class Store, class Stream>
object_attributes connection<Store, Stream>::attributes_from(const request& req) const {
  object_attributes a;
  a.content_type = std::string(req.header("Content-Type"));
  // aws-chunked is transfer framing, not part of the object's encoding: it is dropped wherever
  // it stands in the list ("gzip, aws-chunked" stores "gzip").
  std::string_view codings = req.header("Content-Encoding");
  while (!codings.empty()) {
    const auto comma = codings.find(',');
    std::string_view one = codings.substr(0, comma);
    while (!one.empty() && (one.front() == ' ' || one.front() == '\t')) one.remove_prefix(1);
    while (!one.empty() && (one.back() == ' ' || one.back() == '\t')) one.remove_suffix(1);
    if (!one.empty() && !iequals(one, "aws-chunked")) {
      if (!a.content_encoding.empty()) a.content_encoding += ", ";
      a.content_encoding += one;
    }
    if (comma == std::string_view::npos) break;
    codings.remove_prefix(comma + 1);
  }
  a.content_disposition = std::string(req.header("Content-Disposition"));
  a.cache_control = std::string(req.header("Cache-Control"));
  a.content_language = std::string(req.header("Content-Language"));
  a.expires = std::string(req.header("Expires"));
  std::string ignored;
  if (auto tags = header_tags(req, ignored)) a.tags = std::move(*tags);  // checked before the body was read
  for (const auto& field : req.msg()) {
    std::string name(field.name_string().data(), field.name_string().size());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name.starts_with("x-amz-meta-"))
      a.metadata[name.substr(11)] = std::string(field.value().data(), field.value().size());
  }
  return a;
}

template <class Store, class Stream>
std::optional<std::map<std::string, std::string>> connection<Store, Stream>::header_tags(const request& req,
                                                                                         std::string& why) {
  const auto it = req.msg().find("x-amz-tagging");
  if (it == req.msg().end()) return std::map<std::string, std::string>();
  auto pairs = parse_tagging_header(std::string_view(it->value().data(), it->value().size()));
  if (!pairs) {
    why =
        "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag "
        "name duplicates.";
    return std::nullopt;
  }
  return checked_tags(*pairs, why);
}

template <class Store, class Stream>
bool connection<Store, Stream>::copy_source_allows(const request& req, const object_info& source) {
  const auto if_match = req.header("x-amz-copy-source-if-match");
  const auto if_none_match = req.header("x-amz-copy-source-if-none-match");
  const auto modified = std::chrono::time_point_cast<std::chrono::seconds>(source.last_modified);
  if (!if_match.empty() && !etag_list_matches(if_match, source.attributes.etag)) return false;
  if (!if_none_match.empty() && etag_list_matches(if_none_match, source.attributes.etag)) return false;
  // As S3: a matching If-Match overrides If-Unmodified-Since, a failing If-None-Match decides alone.
  if (if_match.empty()) {
    const auto t = xml::parse_http_date(req.header("x-amz-copy-source-if-unmodified-since"));
    if (t && modified > *t) return false;
  }
  if (if_none_match.empty()) {
    const auto t = xml::parse_http_date(req.header("x-amz-copy-source-if-modified-since"));
    if (t && modified <= *t) return false;
  }
  return true;
}

template <class Store, class Stream>
asio::awaitable<std::optional<s3::errc>> connection<Store, Stream>::early_precondition_failure(
    const request& req, const write_precondition& precondition) {
  if (precondition.none()) co_return std::nullopt;
  error_code ec;
  const object_info current = co_await store_call([&] {
    return state_->store->head({req.where.bucket, req.where.key}, ec);
  });
  if (ec && ec != sluice::errc::no_such_object) co_return to_s3(ec);
  if (ec && precondition.if_etag) co_return s3::errc::no_such_key;  // If-Match of a missing object: 404, as S3
  if (!precondition.met_by(ec ? nullptr : &current.attributes.etag)) co_return s3::errc::precondition_failed;
  co_return std::nullopt;
}

/// What a conditional write that S3 does not do is told.
inline constexpr std::string_view unsupported_condition =
    "Conditional writes take If-None-Match: * or If-Match with one ETag.";

/// A Content-MD5 header that is there with an empty value (req.header() cannot tell it from none).
inline bool has_empty_content_md5(const auto& req) {
  const auto it = req.msg().find("Content-MD5");
  return it != req.msg().end() && it->value().empty();
}

template <class Store, class Stream>
void connection<Store, Stream>::object_headers(http::fields& fields, const object_info& info,
                                               bool with_checksums) const {
  fields.set(http::field::etag, "\"" + info.attributes.etag + "\"");
  fields.set(http::field::last_modified, xml::http_date(info.last_modified));
  fields.set(http::field::content_type,
             info.attributes.content_type.empty() ? "binary/octet-stream" : info.attributes.content_type);
  fields.set(http::field::accept_ranges, "bytes");
  if (!info.attributes.content_encoding.empty())
    fields.set(http::field::content_encoding, info.attributes.content_encoding);
  if (!info.attributes.content_disposition.empty())
    fields.set(http::field::content_disposition, info.attributes.content_disposition);
  if (!info.attributes.cache_control.empty()) fields.set(http::field::cache_control, info.attributes.cache_control);
  if (!info.attributes.content_language.empty())
    fields.set(http::field::content_language, info.attributes.content_language);
  if (!info.attributes.expires.empty()) fields.set(http::field::expires, info.attributes.expires);
  if (!info.attributes.tags.empty()) fields.set("x-amz-tagging-count", std::to_string(info.attributes.tags.size()));
  for (const auto& [name, value] : info.attributes.metadata) fields.set("x-amz-meta-" + name, value);
  if (with_checksums) {
    for (const auto& [algorithm, value] : info.attributes.checksums) fields.set("x-amz-checksum-" + algorithm, value);
  }
}

/// Streams the request body into `writer`: decodes aws-chunked framing, verifies the signed
/// payload hash, Content-MD5 and any x-amz-checksum-* (header or trailer). Returns the attributes
/// to publish (ETag and checksums filled in), or nullopt after answering the error itself
/// (the writer is then dropped by the caller: nothing is published).
template <class Store, class Stream>
template <class Writer>
asio::awaitable<std::optional<object_attributes>> connection<Store, Stream>::receive_object(request& req,
                                                                                            Writer& writer,
                                                                                            std::uint64_t limit) {
  const std::string payload_hash = req.auth ? req.auth->payload_hash : std::string("UNSIGNED-PAYLOAD");
  const bool chunked = payload_hash.starts_with("STREAMING-");
  std::uint64_t expected = 0;
  if (chunked) {
    const auto decoded = req.header("x-amz-decoded-content-length");
    if (decoded.empty() ||
        std::from_chars(decoded.data(), decoded.data() + decoded.size(), expected).ec != std::errc{}) {
      co_await send_error(req, s3::errc::missing_content_length);
      co_return std::nullopt;
    }
  } else if (auto length = req.parser->content_length()) {
    expected = *length;
  } else if (req.body_pending) {
    co_await send_error(req, s3::errc::missing_content_length);
    co_return std::nullopt;
  }
  if (expected > limit) {
    co_await send_error(req, s3::errc::entity_too_large);
    co_return std::nullopt;
  }
  payload_digests digests;
  if (has_empty_content_md5(req)) {  // present but empty: S3 answers InvalidDigest, not "no digest"
    co_await send_error(req, s3::errc::invalid_digest);
    co_return std::nullopt;
  }
  if (const auto problem = digests.start(req.header("Content-MD5"), payload_hash,
                                         [&req](std::string_view name) { return req.header(name); })) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  std::optional<checksum_algorithm> trailer;
  if (auto t = req.header("x-amz-trailer"); !t.empty()) {
    trailer = checksum_algorithm_of_header(t);
    if (trailer) digests.expect_trailer(*trailer);
  }

  error_code store_error;
  std::uint64_t received = 0;
  auto on_payload = [&](std::span<const std::byte> data) {
    received += data.size();
    req.bytes_received += data.size();
    if (store_error || received > expected) return;
    digests.update(data);
    writer.write(data, store_error);
  };

  std::optional<aws_chunked_decoder> decoder;
  if (chunked) {
    aws_chunked_decoder::options opt;
    opt.mode = parse_payload_mode(payload_hash).value_or(payload_mode::streaming_signed);
    if (req.auth) {
      opt.signing_key = req.auth->key;
      opt.amz_date = req.auth->amz_date;
      opt.scope = req.auth->scope;
      opt.seed_signature = req.auth->seed_signature;
    }
    opt.decoded_length = expected;
    opt.trailer_checksum = trailer;
    decoder.emplace(std::move(opt));
  }

  if (!co_await continue_if_expected(req)) co_return std::nullopt;
  // Feeds received body bytes through the aws-chunked decoder (when there is one) to on_payload;
  // false after answering a framing error.
  const auto feed = [&](std::span<const std::byte> got, error_code& decode_error) {
    if (!decoder) {
      on_payload(got);
      return true;
    }
    decoder->feed(got, on_payload, decode_error);
    return !decode_error;
  };
  if (req.body_pending && req.parser->content_length()) {
    // A Content-Length body is read straight from the socket into the connection's reused
    // buffer, in reads as large as the kernel has ready (up to body_buffer_bytes): no copy
    // through the parser's buffer and one composed operation per read, not per 64 KiB. What
    // arrived with the header is taken from buffer_ first.
    std::uint64_t left = *req.parser->content_length();
    const std::size_t early = static_cast<std::size_t>(std::min<std::uint64_t>(buffer_.size(), left));
    error_code decode_error;
    if (early > 0) {
      const bool fed = feed(std::span(static_cast<const std::byte*>(buffer_.data().data()), early), decode_error);
      buffer_.consume(early);
      left -= early;
      if (!fed) {
        req.body_pending = left > 0;
        co_await send_error(req, to_s3(decode_error), decode_error.message());
        co_return std::nullopt;
      }
    }
    if (!body_buffer_) body_buffer_ = std::make_unique_for_overwrite<std::byte[]>(body_buffer_bytes);
    while (left > 0) {
      error_code ec;
      lowest().expires_after(state_->config.read_timeout);
      const std::size_t n = co_await stream_.async_read_some(
          asio::buffer(body_buffer_.get(), static_cast<std::size_t>(std::min<std::uint64_t>(body_buffer_bytes, left))),
          asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return std::nullopt;  // the client went away or stalled past the read timeout
      left -= n;
      if (!feed(std::span<const std::byte>(body_buffer_.get(), n), decode_error)) {
        req.body_pending = left > 0;
        co_await send_error(req, to_s3(decode_error), decode_error.message());
        co_return std::nullopt;
      }
    }
    req.body_pending = false;
  } else if (req.body_pending) {  // chunked transfer coding: Beast's parser takes the framing off
    http::request_parser<http::buffer_body> body_parser(std::move(*req.parser));
    if (!body_buffer_) body_buffer_ = std::make_unique_for_overwrite<std::byte[]>(body_buffer_bytes);
    error_code ec;
    while (!body_parser.is_done()) {
      body_parser.get().body().data = body_buffer_.get();
      body_parser.get().body().size = body_buffer_bytes;
      co_await http::async_read(stream_, buffer_, body_parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return std::nullopt;  // the client went away or stalled past the read timeout
      const std::size_t n = body_buffer_bytes - body_parser.get().body().size;
      error_code decode_error;
      if (!feed(std::span<const std::byte>(body_buffer_.get(), n), decode_error)) {
        req.body_pending = !body_parser.is_done();
        co_await send_error(req, to_s3(decode_error), decode_error.message());
        co_return std::nullopt;
      }
      lowest().expires_after(state_->config.read_timeout);
    }
    req.body_pending = false;
  }

  if (store_error) {
    co_await send_error(req, to_s3(store_error));
    co_return std::nullopt;
  }
  if (decoder) {
    error_code incomplete;
    decoder->finish(incomplete);
    if (incomplete) {
      co_await send_error(req, to_s3(incomplete), incomplete.message());
      co_return std::nullopt;
    }
  }
  if (received != expected) {
    co_await send_error(req, s3::errc::incomplete_body, "the body is shorter or longer than announced");
    co_return std::nullopt;
  }
  object_attributes attributes = attributes_from(req);
  const std::map<std::string, std::string>* trailers = decoder ? &decoder->trailers() : nullptr;
  if (const auto problem = digests.finish(attributes, trailers)) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  co_return attributes;
}

template <class Store, class Stream>
typename connection<Store, Stream>::token_verdict connection<Store, Stream>::check_token(request& req, rdma_op op,
                                                                                         std::uint64_t length,
                                                                                         rdma_token& token,
                                                                                         std::string& why) {
  if (!state_->config.rdma) {
    req.decline = rdma_decline_reason::no_plane;
    return token_verdict::decline;
  }
  // The token is a grant to write into (or read from) the client's memory: only a token that the
  // credential holder signed is used, or anyone who saw one could aim the server at that memory.
  const bool signed_token = req.auth && std::find(req.auth->signed_headers.begin(), req.auth->signed_headers.end(),
                                                  "x-amz-rdma-token") != req.auth->signed_headers.end();
  if (!signed_token) {
    why = "the x-amz-rdma-token header is not signed";
    return token_verdict::reject;
  }
  error_code ec;
  token = decode_rdma_token(req.header("x-amz-rdma-token"), ec);
  if (ec) {
    why = "malformed x-amz-rdma-token";
    return token_verdict::reject;
  }
  const auto now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  check_rdma_token(token, op, length, static_cast<std::uint64_t>(now.count()), ec);
  if (ec) {
    why = token.op != op                  ? "the token grants the wrong operation"
          : token.total_length() < length ? "the token's segments are shorter than the transfer"
                                          : "the token has expired";
    return token_verdict::reject;
  }
  if (!state_->config.rdma->serves(token.provider)) {
    req.decline = rdma_decline_reason::provider;
    return token_verdict::decline;
  }
  if (state_->config.rdma_same_host_only) {
    error_code peer_error;
    const auto peer = lowest().socket().remote_endpoint(peer_error);
    const auto self = lowest().socket().local_endpoint(peer_error);
    // A same-host grant (local:*) is only for a client on this host: loopback, or our own address.
    const bool local_grant = token.provider.starts_with("local:");
    const bool on_host = local_grant ? peer.address().is_loopback() || peer.address() == self.address()
                                     : token_names_host(token, peer.address());
    if (peer_error || !on_host) {
      why = "the token's endpoint is not on the host the request came from";
      return token_verdict::reject;
    }
  }
  return token_verdict::accept;
}

template <class Store, class Stream>
template <class Writer>
asio::awaitable<std::optional<object_attributes>> connection<Store, Stream>::receive_via_rdma(request& req,
                                                                                              Writer& writer,
                                                                                              std::uint64_t limit) {
  // The payload's size travels in x-amz-decoded-content-length; the request has no body.
  std::uint64_t expected = 0;
  const auto decoded = req.header("x-amz-decoded-content-length");
  if (decoded.empty() || std::from_chars(decoded.data(), decoded.data() + decoded.size(), expected).ec != std::errc{}) {
    co_await send_error(req, s3::errc::missing_content_length,
                        "a PUT with x-amz-rdma-token needs x-amz-decoded-content-length");
    co_return std::nullopt;
  }
  if (const auto length = req.parser->content_length(); (length && *length != 0) || (!length && req.body_pending)) {
    co_await send_error(req, s3::errc::invalid_request, "a PUT with x-amz-rdma-token carries no body");
    co_return std::nullopt;
  }
  if (expected > limit) {
    co_await send_error(req, s3::errc::entity_too_large);
    co_return std::nullopt;
  }
  rdma_token token;
  std::string why;
  switch (check_token(req, rdma_op::read, expected, token, why)) {
    case token_verdict::reject: co_await send_error(req, s3::errc::invalid_rdma_token, why); co_return std::nullopt;
    case token_verdict::decline:
      req.rdma_reply = "501";
      co_await send_error(req, s3::errc::rdma_not_supported);
      co_return std::nullopt;
    case token_verdict::accept: break;
  }
  payload_digests digests;
  // Without Content-MD5 (a PUT from device memory cannot hash its bytes on the host) the
  // server does not compute one either: a CRC32C is kept and the ETag is opaque.
  if (has_empty_content_md5(req)) {  // present but empty: S3 answers InvalidDigest
    co_await send_error(req, s3::errc::invalid_digest);
    co_return std::nullopt;
  }
  if (req.header("Content-MD5").empty()) digests.skip_md5();
  // The request's own x-amz-content-sha256 covers its empty body, not the payload.
  if (const auto problem =
          digests.start(req.header("Content-MD5"), {}, [&req](std::string_view name) { return req.header(name); })) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  error_code store_error;
  const rdma_requester who = requester(req);
  const rdma_sink sink = [&](std::span<const std::byte> data) {
    digests.update(data);
    writer.write(data, store_error);
    return store_error;
  };
  const error_code moved = co_await rdma_read(who, token, expected, sink);
  if (moved) {
    // The store failed (a full disk, an I/O error): that is the answer, not a decline, even when
    // the plane stopped before its first byte moved.
    // Any other failure carries its own status in x-amz-rdma-reply: the client must not take it
    // for the decline of a server that ignores tokens (an answer without the header).
    const s3::errc code = store_error ? to_s3(store_error) : to_s3(moved);
    req.rdma_reply = moved == s3::errc::rdma_not_supported && !store_error ? "501" : std::to_string(http_status(code));
    if (req.rdma_reply == "501") req.decline = rdma_decline_reason::plane;
    co_await send_error(req, code);
    co_return std::nullopt;
  }
  object_attributes attributes = attributes_from(req);
  if (const auto problem = digests.finish(attributes, nullptr)) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  req.rdma_reply = "200";
  req.bytes_direct = expected;
  req.direct_path = direct_path_of(token.provider);
  co_return attributes;
}

}  // namespace sluice::s3::detail
