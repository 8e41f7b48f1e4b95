// SPDX-License-Identifier: Apache-2.0
// AWS Signature Version 2 for S3, sans I/O: the string to sign, parsing the `Authorization: AWS
// AK:signature` header or the presigned query (AWSAccessKeyId, Expires, Signature), verification
// (server side), and signing and presigning (client side, for tests and old peers).
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/RESTAuthentication.html
//
// SigV2 signs neither the payload nor the Host header: a verified request's body is checked only
// against its Content-MD5 (if any), and x-amz-content-sha256 means nothing under it. The time is
// always passed in, as in sigv4.hpp.
#pragma once

#include <sluice/error.hpp>
#include <sluice/s3/sigv4.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::s3::sigv2 {

/// Whether `name` (a decoded query parameter name, case-sensitive) is a sub-resource that the
/// canonical resource carries: acl, cors, delete, lifecycle, location, logging, notification,
/// partNumber, policy, requestPayment, restore, tagging, torrent, uploadId, uploads, versionId,
/// versioning, versions, website, the response-* overrides, and the others botocore signs
/// (accelerate, analytics, inventory, metrics, object-lock, replication, select, select-type, ...).
[[nodiscard]] bool is_subresource(std::string_view name) noexcept;

/// The CanonicalizedResource of a request target (raw path, then '?' and the raw query): "/" +
/// `virtual_host_bucket` when the bucket came from the Host header (empty for path style), the
/// path exactly as on the wire (still percent-encoded; "/" when empty; a path-style "/bucket" and
/// nothing more gets a trailing '/', as S3 wants it and botocore signs it), then the sub-resources
/// of the query sorted by name (stable), "name" or "name=value" as the wire has an '=' or not,
/// values percent-decoded ('+' stays '+'), after a '?' and joined with '&'.
[[nodiscard]] std::string canonical_resource(std::string_view target, std::string_view virtual_host_bucket);

/// The CanonicalizedAmzHeaders of `request`: every header whose name starts with x-amz-
/// (case-insensitively), its name in lower case, its values unfolded (a line break with the blanks
/// around it becomes one space) and trimmed, the values of one name joined with ',' in arrival
/// order, "name:values\n" each, sorted by name. Empty when there is none.
[[nodiscard]] std::string canonical_amz_headers(const request_view& request);

/// The StringToSign: method, Content-MD5, Content-Type, the date and the canonical headers and
/// resource. The date is `expires` for a presigned request; otherwise the Date header, or empty
/// when an x-amz-date header is present (it is then among the canonical x-amz- headers).
[[nodiscard]] std::string string_to_sign(const request_view& request, std::string_view virtual_host_bucket,
                                         std::optional<std::string_view> expires);

/// The signature of `string_to_sign` under `secret`: Base64(HMAC-SHA1(secret, string_to_sign)).
[[nodiscard]] std::string signature(std::string_view secret, std::string_view string_to_sign);

/// The time an HTTP date names: RFC 1123 ("Tue, 27 Mar 2007 19:36:42 GMT", with GMT, UTC, Z or a
/// numeric zone such as +0000), RFC 850 ("Tuesday, 27-Mar-07 19:36:42 GMT"), asctime ("Tue Mar
/// 27 19:36:42 2007"), or ISO 8601 basic (20070327T193642Z). The weekday is not checked against
/// the date. nullopt for anything else. A valid date in a year outside 1970..2200 stands as the
/// first or the last second of that span (a time far from now, never a wrapped one).
[[nodiscard]] std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text);

/// Whether `request` claims SigV2: an Authorization header "AWS <key>:<signature>", or an
/// AWSAccessKeyId or Signature query parameter. (A request may claim both versions;
/// verify() refuses it.)
[[nodiscard]] bool claims(const request_view& request);

/// What a SigV2 request claims, before anything is verified.
struct authorization {
  std::string access_key_id;
  std::string signature;         ///< base64, as sent (decoded from the query for a presigned URL)
  bool presigned = false;        ///< signed in the query string rather than a header
  std::string expires;           ///< the Expires parameter as sent (decimal seconds since the epoch)
  std::uint64_t expires_at = 0;  ///< Expires as a number; 0 for header auth
};

/// Parses the SigV2 claims of `request`. Errors (s3::errc), with a default-constructed result:
/// - access_denied: no SigV2 claim at all;
/// - invalid_argument: two Authorization headers, or SigV2 and SigV4 in one request (S3: "Only
///   one auth mechanism allowed");
/// - authorization_header_malformed: an Authorization header that is not "AWS key:signature"
///   with both parts non-empty;
/// - authorization_query_parameters_error: AWSAccessKeyId, Signature or Expires missing, empty,
///   repeated, or an Expires that is not a decimal number of at most 19 digits.
[[nodiscard]] authorization parse_authorization(const request_view& request, error_code& ec);

/// Verifies the SigV2 signature of `request` at `now`. `virtual_host_bucket` is the bucket the
/// Host header named (virtual-hosted style), empty for path style.
///
/// Besides the errors of parse_authorization():
/// - access_denied: header auth without a Date or x-amz-date header that parse_http_date()
///   reads (x-amz-date wins when both are present); a presigned URL used after its Expires;
/// - request_time_too_skewed: header auth whose time differs from `now` by more than
///   max_clock_skew;
/// - invalid_access_key_id: `secret_for` does not know the key;
/// - signature_does_not_match: the signature is wrong (compared in constant time; for a
///   path-style "/bucket", the resource "/bucket" as sent is accepted as well as "/bucket/");
/// - invalid_request: x-amz-content-sha256 announces an aws-chunked (STREAMING-*) payload, which
///   needs SigV4's signing key.
///
/// On success the result has access_key_id, payload_hash = UNSIGNED-PAYLOAD (SigV2 does not sign
/// the payload), seed_signature (the base64 signature) and signed_headers: the lower-case names
/// of the x-amz-* headers, and of content-md5 and content-type when present, that the signature
/// covered. key, scope and amz_date stay empty (no aws-chunked decoding follows SigV2). When
/// `message` is not null and verification fails, it receives the sentence S3 answers with
/// ("Request has expired", ...).
[[nodiscard]] verified verify(const request_view& request, std::string_view virtual_host_bucket,
                              const secret_lookup& secret_for, std::chrono::system_clock::time_point now,
                              error_code& ec, std::string* message = nullptr);

/// Signs a request with an `Authorization: AWS` header (client side): replaces any Date and
/// Authorization in `headers` with a Date of `now` (RFC 1123, GMT) and the signature. `target`
/// is the path and query as they will be sent. Throws std::invalid_argument when a header name is
/// not an HTTP token.
void sign(std::string_view method, std::string_view target, std::vector<std::pair<std::string, std::string>>& headers,
          std::string_view virtual_host_bucket, const credentials& creds, std::chrono::system_clock::time_point now);

/// A presigned URL's query string (client side): `extra_query` (raw, may be empty), then
/// AWSAccessKeyId, Expires (`expires_at` in seconds since the epoch) and the URL-encoded
/// Signature. No header is signed. `path` is the encoded path as it will be sent.
[[nodiscard]] std::string presign(std::string_view method, std::string_view path, std::string_view extra_query,
                                  std::string_view virtual_host_bucket, const credentials& creds,
                                  std::chrono::system_clock::time_point expires_at);

}  // namespace sluice::s3::sigv2
