// SPDX-License-Identifier: Apache-2.0
// AWS Signature Version 4 for S3, sans I/O: canonicalization, parsing the Authorization header or
// the presigned query, verification (server side), and signing and presigning (client side).
// https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-authenticating-requests.html
//
// Every function works on bytes and strings it is given; the time is always passed in, so that
// tests (and callers with their own clocks) decide what "now" is.
#pragma once

#include <sluice/error.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::s3 {

/// A static access key pair.
struct credentials {
  std::string access_key_id;      ///< the public half ("AKIAIOSFODNN7EXAMPLE")
  std::string secret_access_key;  ///< the secret half; never sent
};

/// The payload hash of a request whose body is not signed (presigned URLs, rclone, curl as told).
inline constexpr std::string_view unsigned_payload = "UNSIGNED-PAYLOAD";
/// The SHA-256 of the empty string: the payload hash of a request without a body.
inline constexpr std::string_view empty_payload_sha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// The longest validity of a presigned URL S3 accepts (seven days), in seconds.
inline constexpr std::uint64_t max_presigned_expiry = 604800;
/// The largest difference between a header-signed request's time and the server's clock.
inline constexpr std::chrono::minutes max_clock_skew{15};

/// `text` percent-encoded as SigV4 wants: the RFC 3986 unreserved characters (A-Z a-z 0-9 - _ . ~)
/// stay, and so does '/' unless `encode_slash`; every other byte becomes %XX in upper-case hex.
[[nodiscard]] std::string uri_encode(std::string_view text, bool encode_slash);
/// `text` with every %XX replaced by its byte; nullopt when a '%' is not followed by two hex
/// digits. '+' stays '+' (S3 does not read it as a space).
[[nodiscard]] std::optional<std::string> percent_decode(std::string_view text);
/// percent_decode() appended to `out`; false (with `out` holding part of it) where that fails.
[[nodiscard]] bool append_percent_decoded(std::string& out, std::string_view text);

/// The canonical URI of a path as received on the wire: decoded, then each byte re-encoded with
/// uri_encode(…, false). "." and ".." segments and repeated slashes are kept, as S3 keeps them.
/// An empty path is "/"; a '%' that does not start a valid escape is taken literally (so it is
/// encoded as %25), which cannot make an invalid request verify.
[[nodiscard]] std::string canonical_uri(std::string_view raw_path);
/// The canonical query string of a raw query (without the '?'): parameters split on '&' (empty
/// ones dropped) into name=value (a missing '=' means an empty value), both decoded and then
/// encoded with uri_encode(…, true), sorted by name then value, joined with '&'. With
/// `drop_signature`, X-Amz-Signature is left out (presigned URLs). Malformed escapes are taken
/// literally, as in canonical_uri().
[[nodiscard]] std::string canonical_query(std::string_view raw_query, bool drop_signature);

/// A request as SigV4 sees it. It refers to the caller's buffers, which must outlive it.
struct request_view {
  std::string_view method;  ///< "GET", "PUT", ...
  std::string_view target;  ///< the request target as on the wire: raw path, then '?' and raw query if any
  /// The header fields in arrival order; names in any case, duplicates allowed (their values are
  /// joined with ',' in the canonical form, in arrival order).
  std::vector<std::pair<std::string_view, std::string_view>> headers;
};

/// The SigV4 canonical request of `request`: method, canonical_uri, canonical_query (without
/// X-Amz-Signature when `presigned`), the canonical headers named by `signed_headers` (in the
/// order given, which SigV4 requires to be sorted; names compared case-insensitively; values
/// trimmed, runs of spaces and tabs collapsed to one space; a listed header that is absent
/// contributes an empty value), the signed header list, and `payload_hash`, joined by '\n'.
[[nodiscard]] std::string canonical_request(const request_view& request, std::span<const std::string> signed_headers,
                                            std::string_view payload_hash, bool presigned);

/// The SigV4 string to sign: "AWS4-HMAC-SHA256\n<amz_date>\n<scope>\n<hex SHA-256 of
/// canonical_request>". `amz_date` is 20130524T000000Z, `scope` 20130524/us-east-1/s3/aws4_request.
[[nodiscard]] std::string string_to_sign(std::string_view amz_date, std::string_view scope,
                                         std::string_view canonical_request);

/// The SigV4 signing key: HMAC chain of "AWS4" + secret over date (20130524), region, service and
/// "aws4_request".
[[nodiscard]] std::array<std::byte, 32> signing_key(std::string_view secret, std::string_view date,
                                                    std::string_view region, std::string_view service);

/// The signature of `string_to_sign` under `key`: HMAC-SHA256 as 64 lower-case hex digits.
[[nodiscard]] std::string signature(const std::array<std::byte, 32>& key, std::string_view string_to_sign);

/// `time` (UTC) in the ISO 8601 basic form SigV4 uses: 20130524T000000Z.
[[nodiscard]] std::string format_amz_date(std::chrono::system_clock::time_point time);
/// The time that `text` names, in the form format_amz_date() writes (exactly 16 characters, a
/// valid calendar date and time); nullopt for anything else.
[[nodiscard]] std::optional<std::chrono::system_clock::time_point> parse_amz_date(std::string_view text);

/// What a request claims about its signature, before anything is verified.
struct authorization {
  std::string access_key_id;                ///< from the credential
  std::string date;                         ///< the credential scope's date, 20130524
  std::string region;                       ///< the credential scope's region
  std::string service;                      ///< the credential scope's service ("s3")
  std::vector<std::string> signed_headers;  ///< lower case, in the order the client listed them
  std::string signature;                    ///< 64 hex digits, as sent
  std::string amz_date;                     ///< the request time, 20130524T000000Z
  /// The payload hash the signature covers: x-amz-content-sha256 (header auth; 64 hex digits,
  /// UNSIGNED-PAYLOAD or a STREAMING-* value), UNSIGNED-PAYLOAD for a presigned URL.
  std::string payload_hash;
  bool presigned = false;     ///< signed in the query string (X-Amz-Signature) rather than a header
  std::uint64_t expires = 0;  ///< X-Amz-Expires of a presigned URL, seconds (1..604800); 0 otherwise

  /// The credential scope, "<date>/<region>/<service>/aws4_request".
  [[nodiscard]] std::string scope() const;
};

/// Parses the SigV4 claims of `request`: the header `Authorization: AWS4-HMAC-SHA256
/// Credential=AK/date/region/service/aws4_request, SignedHeaders=a;b, Signature=hex` (spaces after
/// the commas optional) with x-amz-date (or Date, ISO 8601 basic or IMF-fixdate) and
/// x-amz-content-sha256, or the presigned query parameters X-Amz-Algorithm, X-Amz-Credential,
/// X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders and X-Amz-Signature.
///
/// Errors (s3::errc), with a default-constructed result:
/// - access_denied: neither form is present (the caller decides whether anonymous access is
///   allowed), or the request carries no usable date;
/// - invalid_request: SigV2 ("AWS AK:sig"; S3: "Please use AWS4-HMAC-SHA256") or a missing
///   x-amz-content-sha256;
/// - authorization_header_malformed: a malformed Authorization header (credential, signed
///   headers, signature, duplicate, unknown or missing components) or a credential date that
///   is not the request's date;
/// - invalid_argument: another scheme ("Unsupported Authorization Type"), both forms at once, two
///   Authorization or x-amz-date headers, an x-amz-content-sha256 that is neither a SHA-256 nor a
///   known keyword;
/// - authorization_query_parameters_error: any malformed presigned parameter, X-Amz-Expires
///   outside 1..604800 included (S3's AuthorizationQueryParametersError, a 400).
[[nodiscard]] authorization parse_authorization(const request_view& request, error_code& ec);

/// The outcome of a successful verify(): what the rest of the request needs (the streaming
/// decoder continues the signature chain from `seed_signature` with `key`).
struct verified {
  std::string access_key_id;                ///< who signed
  std::array<std::byte, 32> key{};          ///< the signing key of the credential scope
  std::string scope;                        ///< 20130524/us-east-1/s3/aws4_request
  std::string amz_date;                     ///< 20130524T000000Z
  std::string payload_hash;                 ///< what the body must hash to, or a keyword
  std::string seed_signature;               ///< the request's signature (hex)
  std::vector<std::string> signed_headers;  ///< lower case: check a header is covered before trusting it
};

/// Looks up the secret of an access key id; nullopt when the key is unknown.
using secret_lookup = std::function<std::optional<std::string>(std::string_view access_key_id)>;

/// Verifies the SigV4 signature of `request` at time `now`.
///
/// Besides the errors of parse_authorization():
/// - authorization_header_malformed (header auth) or authorization_query_parameters_error
///   (presigned): the scope's
///   service is not "s3", or `required_region` is given and the scope names another region;
/// - access_denied: host (and, for header auth, x-amz-content-sha256) is not among the signed
///   headers; a presigned URL is used after X-Amz-Date + X-Amz-Expires, or more than
///   max_clock_skew before its X-Amz-Date;
/// - request_time_too_skewed: header auth whose time differs from `now` by more than
///   max_clock_skew;
/// - invalid_access_key_id: `secret_for` does not know the key;
/// - signature_does_not_match: the signature is wrong (compared in constant time).
///
/// Headers the client did not sign are allowed (clients leave out x-amz-* headers such as
/// x-amz-trailer); a caller that relies on a header must check it is in `signed_headers`.
/// `why`, when given, receives S3's message for the failures that have a more specific one than
/// their code ("Missing required header for this request: x-amz-content-sha256").
[[nodiscard]] verified verify(const request_view& request, const secret_lookup& secret_for,
                              std::chrono::system_clock::time_point now,
                              std::optional<std::string_view> required_region, error_code& ec,
                              std::string* why = nullptr);

/// verify() into `out`, whose strings keep their memory from one request to the next (a server
/// lends each connection's requests the same one): a verified request then allocates nothing.
/// `out` holds the outcome when `ec` is clear, and is unspecified otherwise.
void verify(const request_view& request, const secret_lookup& secret_for, std::chrono::system_clock::time_point now,
            std::optional<std::string_view> required_region, verified& out, error_code& ec, std::string* why = nullptr);

/// Signs a request with an Authorization header (client side). `headers` must contain host; any
/// existing x-amz-date, x-amz-content-sha256 and authorization are replaced, and those three are
/// appended. Every header is signed except authorization, user-agent, expect, connection,
/// transfer-encoding and x-amzn-trace-id (which proxies and SDK layers may change). `target` is
/// the path and query as they will be sent. Throws std::invalid_argument when host is missing or
/// a header name is not an HTTP token.
void sign(std::string_view method, std::string_view target, std::vector<std::pair<std::string, std::string>>& headers,
          std::string_view payload_hash, const credentials& creds, std::string_view region,
          std::chrono::system_clock::time_point now);

/// A presigned URL's query string (client side): the X-Amz-* parameters plus `extra_query` (raw,
/// may be empty), canonically encoded and sorted, then "&X-Amz-Signature=<hex>". Only host is
/// signed and the payload is UNSIGNED-PAYLOAD. `path` is the encoded path as it will be sent.
/// Throws std::invalid_argument when `expires` is outside 1 s..7 days.
[[nodiscard]] std::string presign(std::string_view method, std::string_view host, std::string_view path,
                                  std::string_view extra_query, const credentials& creds, std::string_view region,
                                  std::chrono::system_clock::time_point now, std::chrono::seconds expires);

}  // namespace sluice::s3
