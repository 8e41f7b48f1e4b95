// SPDX-License-Identifier: Apache-2.0
// Receiving an object's payload into a store writer: the HTTP body (plain or aws-chunked), or
// by RDMA through a checked token. Member templates of connection, included by the
// operations that receive a payload (object_ops.cpp, multipart.cpp).
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include "connection.hpp"

namespace sluice::s3::detail {

/// The payload's length a PUT announces: an aws-chunked payload's (payload hash STREAMING-…)
/// x-amz-decoded-content-length, or a plain body's Content-Length (0 without a body). The error
/// to answer when the length is missing or over `limit`.
template <class Request>
std::optional<answer_error> announced_length(const Request& req, bool chunked, std::uint64_t limit,
                                             std::uint64_t& expected) {
  if (chunked) {
    const auto decoded = req.header("x-amz-decoded-content-length");
    if (decoded.empty() ||
        std::from_chars(decoded.data(), decoded.data() + decoded.size(), expected).ec != std::errc{}) {
      return answer_error{s3::errc::missing_content_length, {}};
    }
  } else if (auto length = req.parser->content_length()) {
    expected = *length;
  } else if (req.body_pending) {
    return answer_error{s3::errc::missing_content_length, {}};
  }
  if (expected > limit) return answer_error{s3::errc::entity_too_large, {}};
  return std::nullopt;
}

/// Starts `digests` with what the request promises (Content-MD5, the payload hash, checksum
/// headers) and sets `trailer` to the checksum x-amz-trailer names, if any. The error to answer
/// when a digest is malformed.
template <class Request>
std::optional<answer_error> start_digests(const Request& req, std::string_view payload_hash, payload_digests& digests,
                                          std::optional<checksum_algorithm>& trailer) {
  if (has_empty_content_md5(req)) {  // present but empty: S3 answers InvalidDigest, not "no digest"
    return answer_error{s3::errc::invalid_digest, {}};
  }
  if (auto problem = digests.start(req.header("Content-MD5"), payload_hash,
                                   [&req](std::string_view name) { return req.header(name); })) {
    return problem;
  }
  if (auto t = req.header("x-amz-trailer"); !t.empty()) {
    trailer = checksum_algorithm_of_header(t);
    if (trailer) digests.expect_trailer(*trailer);
  }
  return std::nullopt;
}

/// The aws-chunked decoder's options for a STREAMING-… payload of `decoded_length` bytes: its
/// mode, the request's signature (when signed) to check each chunk's against, the trailer.
template <class Request>
aws_chunked_decoder::options chunked_options(const Request& req, std::string_view payload_hash,
                                             std::uint64_t decoded_length, std::optional<checksum_algorithm> trailer) {
  aws_chunked_decoder::options opt;
  opt.mode = parse_payload_mode(payload_hash).value_or(payload_mode::streaming_signed);
  if (req.auth) {
    opt.signing_key = req.auth->key;
    opt.amz_date = req.auth->amz_date;
    opt.scope = req.auth->scope;
    opt.seed_signature = req.auth->seed_signature;
  }
  opt.decoded_length = decoded_length;
  opt.trailer_checksum = trailer;
  return opt;
}

/// After the whole body was read: the store's error, an aws-chunked payload that ended early,
/// or a payload of another length than announced, as the error to answer.
inline std::optional<answer_error> received_problem(const error_code& store_error,
                                                    std::optional<aws_chunked_decoder>& decoder, std::uint64_t received,
                                                    std::uint64_t expected) {
  if (store_error) return answer_error{to_s3(store_error), {}};
  if (decoder) {
    error_code incomplete;
    decoder->finish(incomplete);
    if (incomplete) return answer_error{to_s3(incomplete), incomplete.message()};
  }
  if (received != expected) {
    return answer_error{s3::errc::incomplete_body, "the body is shorter or longer than announced"};
  }
  return std::nullopt;
}

/// Streams the request body into `writer`: decodes aws-chunked framing, verifies the signed
/// payload hash, Content-MD5 and any x-amz-checksum-* (header or trailer). Returns the attributes
/// to publish (ETag and checksums filled in), or nullopt after answering the error itself
/// (the writer is then dropped by the caller: nothing is published).
template <class Stream>
template <class Writer>
asio::awaitable<std::optional<object_attributes>> connection<Stream>::receive_object(request& req, Writer& writer,
                                                                                     std::uint64_t limit) {
  const std::string payload_hash = req.auth ? req.auth->payload_hash : std::string("UNSIGNED-PAYLOAD");
  const bool chunked = payload_hash.starts_with("STREAMING-");
  std::uint64_t expected = 0;
  if (const auto problem = announced_length(req, chunked, limit, expected)) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  payload_digests digests;
  std::optional<checksum_algorithm> trailer;
  if (const auto problem = start_digests(req, payload_hash, digests, trailer)) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
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
  if (chunked) decoder.emplace(chunked_options(req, payload_hash, expected, trailer));

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
    req.keep_header();
    request_body_parser<http::buffer_body> body_parser(std::move(*req.parser));
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

  if (const auto problem = received_problem(store_error, decoder, received, expected)) {
    co_await send_error(req, problem->code, problem->message);
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

template <class Stream>
template <class Writer>
asio::awaitable<std::optional<object_attributes>> connection<Stream>::receive_via_rdma(request& req, Writer& writer,
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
