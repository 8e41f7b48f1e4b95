// SPDX-License-Identifier: Apache-2.0
// S3 XML bodies, sans-I/O: parsers for the request bodies a server receives
// (CompleteMultipartUpload, Delete, CreateBucketConfiguration) and writers for the response
// bodies it sends, as AWS S3 writes them; plus the time formats those bodies and headers use.
//
// Parsers take the whole body (its size bounded by the caller), report every invalid input
// through `error_code&` (s3::errc) and never throw anything but std::bad_alloc. They accept
// bodies with or without the S3 xmlns attribute, with any whitespace between elements, and
// ignore elements they do not know (newer SDKs add optional ones); a DOCTYPE, text outside
// the expected elements, a missing or repeated known element, or XML that is not well formed
// is errc::malformed_xml.
//
// Writers return `<?xml version="1.0" encoding="UTF-8"?>` and one root element in the
// http://s3.amazonaws.com/doc/2006-03-01/ namespace (the error body has none, as in S3).
// Text is escaped as S3 escapes it (& < > " ' and CR, LF as character references), ETags are
// written quoted, timestamps as iso8601().
#pragma once

#include <sluice/error.hpp>
#include <sluice/request.hpp>
#include <sluice/s3/error.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::s3::xml {

// ---------------------------------------------------------------------------------------------
// Request bodies (parsers)
// ---------------------------------------------------------------------------------------------

/// One <Part> of a CompleteMultipartUpload body.
struct completed_part {
  std::uint32_t number = 0;  ///< <PartNumber>, 1..10000
  std::string etag;          ///< <ETag> with surrounding quotes (and whitespace) stripped
  /// <ChecksumCRC32>, <ChecksumCRC32C>, <ChecksumSHA1>, <ChecksumSHA256>, <ChecksumCRC64NVME>
  /// under the names object_attributes::checksums uses ("crc32", ..., "crc64nvme"); base64 as sent.
  std::map<std::string, std::string> checksums;
  friend bool operator==(const completed_part&, const completed_part&) = default;
};

/// Parses a CompleteMultipartUpload body:
/// `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"…"</ETag>…</Part>…`.
/// Errors (the result is then empty): errc::malformed_xml for invalid XML, a wrong root, a
/// part without exactly one PartNumber and one ETag, a part number that is not a decimal
/// number, or no part at all; errc::invalid_argument for a part number outside 1..10000;
/// errc::invalid_part_order when the part numbers are not strictly ascending.
[[nodiscard]] std::vector<completed_part> parse_complete_multipart_upload(std::string_view body, error_code& ec);

/// The content of a DeleteObjects (multi-object delete) body.
struct delete_objects {
  bool quiet = false;  ///< <Quiet>true</Quiet>: report only the failures
  /// (key, version id) of each <Object>, in body order; the version id is empty when absent.
  /// Keys are returned verbatim (whitespace included, possibly empty: the caller reports a
  /// per-key error for a key it refuses).
  std::vector<std::pair<std::string, std::string>> objects;
  friend bool operator==(const delete_objects&, const delete_objects&) = default;
};

/// The most objects one DeleteObjects request may name (S3's limit).
inline constexpr std::size_t max_delete_objects = 1000;

/// Parses a DeleteObjects body: `<Delete><Quiet>true</Quiet><Object><Key>k</Key>
/// <VersionId>v</VersionId></Object>…</Delete>`. errc::malformed_xml (and an empty result)
/// for invalid XML, a wrong root, an <Object> without exactly one <Key>, a <Quiet> that is not
/// true or false, no object, or more than max_delete_objects objects.
[[nodiscard]] delete_objects parse_delete_objects(std::string_view body, error_code& ec);

/// Parses a CreateBucket body, `<CreateBucketConfiguration><LocationConstraint>eu-west-1
/// </LocationConstraint></CreateBucketConfiguration>`, and returns the LocationConstraint
/// (trimmed). An empty (or all-whitespace) body, or one without LocationConstraint, is ""
/// (us-east-1) with no error; invalid XML or a wrong root is errc::malformed_xml.
[[nodiscard]] std::string parse_create_bucket_configuration(std::string_view body, error_code& ec);

/// Parses a PutObjectTagging body, `<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag>…
/// </TagSet></Tagging>`, into (key, value) pairs in body order (repeats kept: the caller judges
/// the set). errc::malformed_xml for invalid XML, a wrong root, no TagSet or two, or a <Tag>
/// without exactly one Key and one Value. An empty TagSet is valid (no tags).
[[nodiscard]] std::vector<std::pair<std::string, std::string>> parse_tagging(std::string_view body, error_code& ec);

/// One <Grant> of an AccessControlPolicy.
struct acl_grant {
  std::string type;        ///< the Grantee's xsi:type: "CanonicalUser", "Group", "AmazonCustomerByEmail"
  std::string id;          ///< <ID> (CanonicalUser)
  std::string uri;         ///< <URI> (Group)
  std::string email;       ///< <EmailAddress>
  std::string permission;  ///< <Permission>: FULL_CONTROL, READ, WRITE, READ_ACP, WRITE_ACP
  friend bool operator==(const acl_grant&, const acl_grant&) = default;
};
/// A PutObjectAcl / PutBucketAcl body.
struct access_control_policy {
  std::string owner_id;  ///< <Owner><ID>; empty when absent
  std::vector<acl_grant> grants;
  friend bool operator==(const access_control_policy&, const access_control_policy&) = default;
};
/// The most grants an AccessControlPolicy may hold (S3's limit is 100).
inline constexpr std::size_t max_acl_grants = 100;
/// Parses `<AccessControlPolicy><Owner><ID>…</ID></Owner><AccessControlList><Grant><Grantee
/// xsi:type="…"><ID>…</ID></Grantee><Permission>…</Permission></Grant>…</AccessControlList>
/// </AccessControlPolicy>`. errc::malformed_xml for invalid XML, a wrong root, no
/// AccessControlList or two, an unknown element, a Grant without exactly one Grantee and one
/// Permission, or more than max_acl_grants grants.
[[nodiscard]] access_control_policy parse_access_control_policy(std::string_view body, error_code& ec);

// ---------------------------------------------------------------------------------------------
// Response bodies (writers)
// ---------------------------------------------------------------------------------------------

/// An S3 error body: `<Error><Code>…</Code><Message>…</Message><Resource>…</Resource>
/// <RequestId>…</RequestId></Error>`, with no namespace, as S3 writes it.
[[nodiscard]] std::string error_body(std::string_view code, std::string_view message, std::string_view resource,
                                     std::string_view request_id);

/// ListAllMyBucketsResult (ListBuckets): the owner, then each bucket's Name and CreationDate.
[[nodiscard]] std::string list_buckets(std::string_view owner_id, std::string_view owner_name,
                                       std::span<const bucket_info> buckets);

/// One page of a listing, as the list writers render it. Strings that are empty are left out
/// where S3 leaves them out (Delimiter, NextMarker, tokens, StartAfter), written empty where S3
/// always writes them (Prefix, Marker, KeyMarker).
struct list_page {
  std::string bucket;                   ///< <Name>
  std::string prefix;                   ///< the request's prefix, echoed
  std::string delimiter;                ///< the request's delimiter, echoed
  std::string marker;                   ///< v1 Marker; KeyMarker for list_object_versions
  std::string next_marker;              ///< v1 NextMarker; NextKeyMarker for list_object_versions
  std::string continuation_token;       ///< v2, echoed (when has_continuation_token, even empty)
  bool has_continuation_token = false;  ///< v2: the request carried continuation-token
  std::string next_continuation_token;  ///< v2
  std::string start_after;              ///< v2, echoed
  std::uint32_t max_keys = 1000;
  bool truncated = false;
  /// encoding-type=url was asked for: Key, Prefix, Delimiter, Marker, NextMarker, StartAfter,
  /// KeyMarker, NextKeyMarker and each common prefix are url-encoded (RFC 3986 unreserved
  /// characters and '/' kept, every other byte %XX), and <EncodingType>url</EncodingType> is added.
  bool url_encode = false;
  std::vector<object_info> contents;         ///< in key order
  std::vector<std::string> common_prefixes;  ///< in key order
  bool fetch_owner = false;                  ///< v2: fetch-owner=true, each entry gets its <Owner>
  std::string owner_id;                      ///< the <Owner> of each entry (v1, versions, v2 with fetch_owner)
  std::string owner_name;                    ///< its <DisplayName>
};

/// ListBucketResult of ListObjects (v1): Name, Prefix, Marker, [NextMarker], MaxKeys,
/// [Delimiter], IsTruncated, [EncodingType], Contents (Key, LastModified, ETag, Size,
/// StorageClass STANDARD, Owner), CommonPrefixes.
[[nodiscard]] std::string list_objects_v1(const list_page& page);

/// ListBucketResult of ListObjectsV2: Name, Prefix, [ContinuationToken],
/// [NextContinuationToken], [StartAfter], KeyCount (contents + common prefixes), MaxKeys,
/// [Delimiter], IsTruncated, [EncodingType], Contents (Owner only with fetch_owner),
/// CommonPrefixes.
[[nodiscard]] std::string list_objects_v2(const list_page& page);

/// ListVersionsResult of ListObjectVersions for a bucket without versioning: every object is
/// one <Version> with VersionId "null" and IsLatest true. KeyMarker is page.marker,
/// NextKeyMarker page.next_marker (with NextVersionIdMarker "null" beside it).
[[nodiscard]] std::string list_object_versions(const list_page& page);

/// InitiateMultipartUploadResult: Bucket, Key, UploadId.
[[nodiscard]] std::string initiate_multipart_upload(std::string_view bucket, std::string_view key,
                                                    std::string_view upload_id);

/// CompleteMultipartUploadResult: Location, Bucket, Key, ETag (quoted here; pass it bare), then
/// the object's checksums (ChecksumCRC32, ...: a composite "<base64>-N").
[[nodiscard]] std::string complete_multipart_upload(std::string_view location, std::string_view bucket,
                                                    std::string_view key, std::string_view etag,
                                                    const std::map<std::string, std::string>& checksums = {});

/// ListPartsResult: Bucket, Key, UploadId, StorageClass, PartNumberMarker (the request's),
/// NextPartNumberMarker, MaxParts, IsTruncated, then each part's PartNumber, LastModified,
/// ETag, Size and its checksums (ChecksumCRC32, ...).
[[nodiscard]] std::string list_parts(std::string_view bucket, std::string_view key, std::string_view upload_id,
                                     std::span<const part_info> parts, std::uint32_t max_parts, bool truncated,
                                     std::uint32_t next_marker, std::uint32_t part_number_marker = 0);

/// ListMultipartUploadsResult of one complete (untruncated) page: Bucket, empty key and
/// upload-id markers, Prefix, MaxUploads 1000, IsTruncated false, then each upload's Key,
/// UploadId, Initiator and Owner (both the given owner), StorageClass, Initiated.
[[nodiscard]] std::string list_multipart_uploads(std::string_view bucket, std::string_view prefix,
                                                 std::span<const upload_info> uploads, std::string_view owner_id = {},
                                                 std::string_view owner_name = {});

/// CopyObjectResult: LastModified, ETag (quoted here; pass it bare).
[[nodiscard]] std::string copy_object_result(std::string_view etag,
                                             std::chrono::system_clock::time_point last_modified);

/// CopyPartResult (UploadPartCopy): LastModified, ETag (quoted here; pass it bare).
[[nodiscard]] std::string copy_part_result(std::string_view etag, std::chrono::system_clock::time_point last_modified);

/// One key a DeleteObjects request failed to delete.
struct delete_outcome {
  std::string key;      ///< the key as the request named it
  std::string code;     ///< S3 error code, e.g. "AccessDenied"
  std::string message;  ///< human-readable reason
};

/// DeleteResult: a <Deleted><Key>…</Key></Deleted> per deleted key (none when quiet), then an
/// <Error><Key/><Code/><Message/></Error> per failure (always).
[[nodiscard]] std::string delete_result(std::span<const std::string> deleted, std::span<const delete_outcome> errors,
                                        bool quiet);

/// Tagging (GetObjectTagging): a TagSet with a Tag (Key, Value) per entry, in key order.
[[nodiscard]] std::string tagging(const std::map<std::string, std::string>& tags);

/// LocationConstraint (GetBucketLocation): the region as text; empty for us-east-1 (and for
/// an empty region), as S3 answers.
[[nodiscard]] std::string location_constraint(std::string_view region);

// ---------------------------------------------------------------------------------------------
// Time formats
// ---------------------------------------------------------------------------------------------

/// ISO 8601 UTC with milliseconds, as S3 bodies write times: "2013-09-17T18:07:53.000Z"
/// (truncated to the millisecond).
[[nodiscard]] std::string iso8601(std::chrono::system_clock::time_point t);

/// AccessControlPolicy (GetObjectAcl, GetBucketAcl): the owner, and one grant, FULL_CONTROL to it.
[[nodiscard]] std::string access_control_policy_body(std::string_view owner_id, std::string_view owner_name);

/// What GetObjectAttributes answers; each element only when asked for (and, for ObjectParts, when
/// the object is a multipart one).
struct object_attributes_page {
  std::optional<std::string> etag;               ///< <ETag>, bare (S3 does not quote it here)
  std::map<std::string, std::string> checksums;  ///< <Checksum>: object_attributes::checksums' names
  std::string checksum_type;                     ///< <ChecksumType>: COMPOSITE or FULL_OBJECT
  bool object_parts = false;                     ///< write <ObjectParts>
  std::uint32_t parts_count = 0;
  std::uint32_t part_number_marker = 0;
  std::uint32_t next_part_number_marker = 0;
  std::uint32_t max_parts = 1000;
  bool truncated = false;
  std::vector<part_info> parts;  ///< PartNumber, Size and checksums of each part of the page
  std::optional<std::string> storage_class;
  std::optional<std::uint64_t> object_size;
};
/// GetObjectAttributesResponse: ETag, Checksum (ChecksumCRC32, ..., ChecksumType), ObjectParts
/// (PartsCount, PartNumberMarker, NextPartNumberMarker, MaxParts, IsTruncated, Part...),
/// StorageClass, ObjectSize, as `page` holds them.
[[nodiscard]] std::string get_object_attributes(const object_attributes_page& page);

/// RFC 7231 IMF-fixdate, as Last-Modified and Date carry it: "Sun, 06 Nov 1994 08:49:37 GMT"
/// (truncated to the second).
[[nodiscard]] std::string http_date(std::chrono::system_clock::time_point t);
/// http_date() into a fixed buffer, without allocating: its 29 characters (system_clock's years,
/// 1677-2262, all have four digits).
[[nodiscard]] std::array<char, 29> http_date_chars(std::chrono::system_clock::time_point t) noexcept;

/// Parses an HTTP date (If-Modified-Since and friends) in any of the three forms RFC 7231
/// §7.1.1.1 makes recipients accept: IMF-fixdate, RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT";
/// a two-digit year more than 50 years ahead of now is taken in the previous century) and
/// asctime ("Sun Nov  6 08:49:37 1994"). Exact syntax, case-sensitive; the day name must be
/// a real one but is not checked against the date. nullopt when the text is none of them,
/// names no valid date and time, or a time system_clock cannot represent.
[[nodiscard]] std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text);

}  // namespace sluice::s3::xml
