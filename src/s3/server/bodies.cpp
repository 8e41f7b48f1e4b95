// SPDX-License-Identifier: Apache-2.0
// Request bodies: 100-continue, small XML bodies, object metadata from headers, preconditions,
// checking a token (receive.hpp receives an object's payload).
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#include "connection.hpp"

namespace sluice::s3::detail {

// ---------------------------------------------------------------------------------------------
// Bodies

template <class Stream>
asio::awaitable<bool> connection<Stream>::continue_if_expected(request& req) {
  if (!iequals(req.header("Expect"), "100-continue")) co_return true;
  http::response<http::empty_body> res{http::status::continue_, 11};
  error_code ec;
  co_await http::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

template <class Stream>
asio::awaitable<std::optional<std::string>> connection<Stream>::read_small_body(request& req, std::size_t limit) {
  if (!req.body_pending) co_return std::string();
  const auto length = req.parser->content_length();
  if (length && *length > limit) co_return std::nullopt;
  if (!co_await continue_if_expected(req)) co_return std::nullopt;
  req.keep_header();
  request_body_parser<http::string_body> body_parser(std::move(*req.parser));
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

template <class Stream>
object_attributes connection<Stream>::attributes_from(const request& req) const {
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
    if (name.starts_with("x-amz-meta-")) {
      const std::string_view value(field.value().data(), field.value().size());
      auto decoded = rfc2047_decoded(value);  // non-ASCII metadata as SDKs must send it
      a.metadata[name.substr(11)] = decoded ? std::move(*decoded) : std::string(value);
    }
  }
  return a;
}

template <class Stream>
std::optional<std::map<std::string, std::string>> connection<Stream>::header_tags(const request& req,
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

template <class Stream>
bool connection<Stream>::copy_source_allows(const request& req, const object_info& source) {
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

template <class Stream>
asio::awaitable<std::optional<s3::errc>> connection<Stream>::early_precondition_failure(
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

template <class Stream>
typename connection<Stream>::token_verdict connection<Stream>::check_token(request& req, rdma_op op,
                                                                           std::uint64_t length, rdma_token& token,
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

#define SLUICE_CONNECTION_MEMBERS(S)                                                                                   \
  template asio::awaitable<bool> connection<S>::continue_if_expected(connection<S>::request&);                         \
  template asio::awaitable<std::optional<std::string>> connection<S>::read_small_body(connection<S>::request&,         \
                                                                                      std::size_t);                    \
  template object_attributes connection<S>::attributes_from(const connection<S>::request&) const;                      \
  template std::optional<std::map<std::string, std::string>> connection<S>::header_tags(const connection<S>::request&, \
                                                                                        std::string&);                 \
  template bool connection<S>::copy_source_allows(const connection<S>::request&, const object_info&);                  \
  template asio::awaitable<std::optional<s3::errc>> connection<S>::early_precondition_failure(                         \
      const connection<S>::request&, const write_precondition&);                                                       \
  template connection<S>::token_verdict connection<S>::check_token(connection<S>::request&, rdma_op, std::uint64_t,    \
                                                                   rdma_token&, std::string&);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
