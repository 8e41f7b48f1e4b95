// SPDX-License-Identifier: Apache-2.0
// What a path is asked to do and what it reports back.
#pragma once

#include <sluice/error.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

/// Names one object: a key inside a bucket.
struct object_ref {
  std::string bucket;
  std::string key;
  friend bool operator==(const object_ref&, const object_ref&) = default;
};

/// Bytes [offset, offset + length) of an object; no length means "to the end".
struct byte_range {
  std::uint64_t offset = 0;
  std::optional<std::uint64_t> length;
  friend bool operator==(const byte_range&, const byte_range&) = default;
};

/// A resolved range: exact offset and length inside an object of known size.
struct extent {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  friend bool operator==(const extent&, const extent&) = default;
};

/// Resolves `range` against an object of `size` bytes. Strict: a range that starts past
/// the end, or an explicit length that runs past it, is errc::bad_range (the caller asked
/// for bytes that do not exist; nothing is silently shortened).
[[nodiscard]] inline extent resolve(const byte_range& range, std::uint64_t size, error_code& ec) {
  if (range.offset > size) {
    ec = errc::bad_range;
    return {};
  }
  const std::uint64_t available = size - range.offset;
  if (range.length && *range.length > available) {
    ec = errc::bad_range;
    return {};
  }
  ec = {};
  return {range.offset, range.length.value_or(available)};
}

/// Which way the bytes go, seen from the caller's memory.
enum class direction : std::uint8_t {
  get,  ///< object → caller's region
  put,  ///< caller's region → object
};

/// One request to a negotiator. For put, `range` is {0, size of the source}.
struct transfer_request {
  object_ref object;
  byte_range range;
  direction dir = direction::get;
};

/// A path that a fallback_path tried before the one that carried the bytes, and why it did not.
struct skipped_path {
  std::string_view negotiator;  ///< its negotiator's name
  std::string_view transport;   ///< its transport's name
  error_code reason;            ///< what it failed with (for example one equal to condition::declined)
};

/// What a completed transfer reports: bytes moved and the parts that moved them.
struct transfer_result {
  std::uint64_t bytes = 0;      ///< payload bytes delivered
  std::string_view negotiator;  ///< name of the negotiator that agreed the transfer
  std::string_view transport;   ///< name of the transport that carried the bytes
  /// fallback_path: the paths tried first, in order, each with its reason; empty otherwise.
  std::vector<skipped_path> skipped;
  /// The version of the object the transfer read or wrote, when the negotiator knows one (S3: the
  /// ETag); empty otherwise.
  std::string version;
};

/// Attributes a writer publishes with an object.
struct object_attributes {
  std::string etag;                              ///< opaque entity tag (S3: MD5 hex); empty lets the store choose
  std::string content_type;                      ///< MIME type; empty means application/octet-stream
  std::string content_encoding;                  ///< as sent, returned verbatim
  std::string content_disposition;               ///< as sent, returned verbatim
  std::string cache_control;                     ///< as sent, returned verbatim
  std::string content_language;                  ///< as sent, returned verbatim
  std::string expires;                           ///< the Expires header as sent, returned verbatim
  std::map<std::string, std::string> metadata;   ///< user metadata (S3 x-amz-meta-*), lower-case names
  std::map<std::string, std::string> checksums;  ///< "crc32", "crc32c", "sha1", "sha256" → base64 value
  std::map<std::string, std::string> tags;       ///< object tags (S3 tagging): key → value
  std::vector<std::uint64_t> part_sizes;         ///< a multipart object's part sizes in order; empty otherwise
  std::string upload_id;                         ///< the multipart upload that made the object; empty otherwise
  /// A multipart object made with a checksum algorithm: each part's checksum (base64), in part
  /// order; checksums then holds the composite ("<base64>-N") under that algorithm's name.
  std::vector<std::string> part_checksums;
  friend bool operator==(const object_attributes&, const object_attributes&) = default;
};

/// What a conditional write expects of the object it replaces, checked by the store atomically
/// with publishing (S3's If-None-Match: * and If-Match on PUT and CompleteMultipartUpload).
/// A writer that does not meet it publishes nothing and fails with errc::precondition_failed.
struct write_precondition {
  bool if_absent = false;              ///< no object may exist under the key
  std::optional<std::string> if_etag;  ///< an object with exactly this ETag must exist
  [[nodiscard]] bool none() const noexcept { return !if_absent && !if_etag; }
  /// Whether `current` (the object's ETag, or nullptr when there is none) meets it.
  [[nodiscard]] bool met_by(const std::string* current_etag) const noexcept {
    if (if_absent && current_etag != nullptr) return false;
    return !if_etag || (current_etag != nullptr && *current_etag == *if_etag);
  }
};

/// What a store knows about a published object.
struct object_info {
  std::string key;
  std::uint64_t size = 0;
  std::chrono::system_clock::time_point last_modified{};
  object_attributes attributes;
};

/// What a store knows about a bucket.
struct bucket_info {
  std::string name;
  std::chrono::system_clock::time_point created{};
};

/// What a store may keep with a bucket besides its objects (S3's LocationConstraint, bucket tags).
struct bucket_settings {
  std::string location;                     ///< CreateBucket's LocationConstraint; empty when none was given
  std::map<std::string, std::string> tags;  ///< bucket tags (S3 bucket tagging): key → value
  friend bool operator==(const bucket_settings&, const bucket_settings&) = default;
};

/// One page of a listing, in key order.
struct list_request {
  std::string bucket;
  std::string prefix;       ///< only keys that start with this
  std::string start_after;  ///< only keys strictly greater than this
  std::uint32_t max_keys = 1000;
};

/// The answer to a list_request.
struct list_result {
  std::vector<object_info> objects;
  bool truncated = false;  ///< more keys follow; ask again with start_after = last key
};

/// One uploaded part of a multipart upload.
struct part_info {
  std::uint32_t number = 0;  ///< 1..10000
  std::uint64_t size = 0;
  std::string etag;  ///< as given at the part's commit (S3: MD5 hex of the part)
  std::chrono::system_clock::time_point last_modified{};
  std::map<std::string, std::string> checksums;
};

/// A multipart upload in progress.
struct upload_info {
  std::string key;
  std::string upload_id;
  std::chrono::system_clock::time_point initiated{};
  object_attributes attributes;  ///< given at creation, published with the object
};

}  // namespace sluice
