// SPDX-License-Identifier: Apache-2.0
// S3 XML bodies as a client sees them, sans-I/O: parsers for the response bodies a client
// receives (ListObjectsV2, ListBuckets, InitiateMultipartUpload, CompleteMultipartUpload, CopyObject,
// UploadPartCopy, Error)
// and writers for the request bodies it sends (CompleteMultipartUpload, CreateBucketConfiguration).
// The server-side counterparts live in xml.hpp.
//
// Parsers take the whole body (its size bounded by the caller), report every invalid input
// through `error_code&` and never throw anything but std::bad_alloc. They are lenient where
// servers differ: any namespace (or a namespace prefix) on the elements, any whitespace between
// them, and elements they do not know are ignored. XML that is not well formed, a wrong root
// element, a missing required element or a number that does not parse is
// s3::errc::malformed_xml, with a default-constructed result.
#pragma once

#include <sluice/error.hpp>
#include <sluice/request.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/xml.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::s3::xml {

// ---------------------------------------------------------------------------------------------
// Response bodies (parsers)
// ---------------------------------------------------------------------------------------------

/// One page of ListObjectsV2, as ListBucketResult carries it. When the body says
/// <EncodingType>url</EncodingType>, the keys, prefixes, delimiter and start-after are returned
/// decoded.
struct list_bucket_result {
  std::string bucket;                        ///< <Name>
  std::string prefix;                        ///< <Prefix>
  std::string delimiter;                     ///< <Delimiter>; empty when absent
  std::string start_after;                   ///< <StartAfter>, echoed
  std::string continuation_token;            ///< <ContinuationToken>, echoed
  std::string next_continuation_token;       ///< <NextContinuationToken>: pass it to get the next page
  std::uint32_t max_keys = 0;                ///< <MaxKeys>, as echoed (0 when absent)
  bool truncated = false;                    ///< <IsTruncated>: more keys follow
  std::vector<object_info> objects;          ///< each <Contents>: key, size, last_modified, attributes.etag
  std::vector<std::string> common_prefixes;  ///< each <CommonPrefixes><Prefix>, in body order
  friend bool operator==(const list_bucket_result&, const list_bucket_result&) = default;
};

/// Parses a ListBucketResult (ListObjectsV2; a v1 body parses too, without the tokens). Each
/// <Contents> needs a <Key>; ETags are returned without their quotes; LastModified is ISO 8601
/// (parse_iso8601). Errors: errc::malformed_xml.
[[nodiscard]] list_bucket_result parse_list_objects_v2(std::string_view body, error_code& ec);

/// Parses a ListAllMyBucketsResult (ListBuckets): each bucket's Name and CreationDate, in body
/// order. Errors: errc::malformed_xml.
[[nodiscard]] std::vector<bucket_info> parse_list_buckets(std::string_view body, error_code& ec);

/// One page of ListMultipartUploads.
struct list_multipart_uploads_result {
  std::vector<upload_info> uploads;   ///< each <Upload>: Key, UploadId, Initiated (no attributes)
  bool truncated = false;             ///< <IsTruncated>: more uploads follow
  std::string next_key_marker;        ///< <NextKeyMarker>: the next page's key-marker
  std::string next_upload_id_marker;  ///< <NextUploadIdMarker>: the next page's upload-id-marker
  friend bool operator==(const list_multipart_uploads_result& a, const list_multipart_uploads_result& b) {
    if (a.truncated != b.truncated || a.next_key_marker != b.next_key_marker ||
        a.next_upload_id_marker != b.next_upload_id_marker || a.uploads.size() != b.uploads.size())
      return false;
    for (std::size_t i = 0; i < a.uploads.size(); ++i) {
      if (a.uploads[i].key != b.uploads[i].key || a.uploads[i].upload_id != b.uploads[i].upload_id ||
          a.uploads[i].initiated != b.uploads[i].initiated)
        return false;
    }
    return true;
  }
};

/// Parses a ListMultipartUploadsResult. Each <Upload> needs a <Key> and an <UploadId>; Initiated
/// is ISO 8601 (parse_iso8601) when present. With <EncodingType>url</EncodingType> the keys and
/// markers are returned decoded. Errors: errc::malformed_xml.
[[nodiscard]] list_multipart_uploads_result parse_list_multipart_uploads(std::string_view body, error_code& ec);

/// The answer to CreateMultipartUpload.
struct initiate_multipart_upload_result {
  std::string bucket;     ///< <Bucket>
  std::string key;        ///< <Key>
  std::string upload_id;  ///< <UploadId>, never empty on success
  friend bool operator==(const initiate_multipart_upload_result&, const initiate_multipart_upload_result&) = default;
};

/// Parses an InitiateMultipartUploadResult. Errors: errc::malformed_xml (an empty or missing
/// UploadId included).
[[nodiscard]] initiate_multipart_upload_result parse_initiate_multipart_upload(std::string_view body, error_code& ec);

/// The answer to CompleteMultipartUpload.
struct complete_multipart_upload_result {
  std::string location;  ///< <Location>
  std::string bucket;    ///< <Bucket>
  std::string key;       ///< <Key>
  std::string etag;      ///< <ETag>, without its quotes
  friend bool operator==(const complete_multipart_upload_result&, const complete_multipart_upload_result&) = default;
};

/// Parses a CompleteMultipartUploadResult. S3 may answer 200 OK with an <Error> body when the
/// completion failed after the response started: such a body sets `ec` to the S3 error its
/// <Code> names (parse_error(), error_result::value()). Otherwise errc::malformed_xml for a body
/// that is neither, or a result without an ETag.
[[nodiscard]] complete_multipart_upload_result parse_complete_multipart_upload_result(std::string_view body,
                                                                                      error_code& ec);

/// The answer to CopyObject (<CopyObjectResult>) or UploadPartCopy (<CopyPartResult>).
struct copy_result_body {
  std::string etag;                                                    ///< <ETag>, without its quotes
  std::optional<std::chrono::system_clock::time_point> last_modified;  ///< <LastModified>, when it parses
  friend bool operator==(const copy_result_body&, const copy_result_body&) = default;
};

/// Parses a CopyObjectResult or CopyPartResult. S3 answers 200 OK before a long copy is done, so
/// a copy that fails then comes as a 200 with an <Error> body: such a body sets `ec` to the S3
/// error its <Code> names, as parse_complete_multipart_upload_result does. Otherwise
/// errc::malformed_xml for a body that is neither, or a result without an ETag.
[[nodiscard]] copy_result_body parse_copy_result(std::string_view body, error_code& ec);

/// An S3 error body.
struct error_result {
  std::string code;        ///< <Code>, "NoSuchKey"
  std::string message;     ///< <Message>
  std::string resource;    ///< <Resource>
  std::string request_id;  ///< <RequestId>
  /// The s3::errc of `code` (from_code_string): internal_error for a code sluice does not know.
  [[nodiscard]] errc value() const noexcept { return from_code_string(code); }
  friend bool operator==(const error_result&, const error_result&) = default;
};

/// Parses an <Error> body. Errors: errc::malformed_xml, also for an error without a <Code>.
[[nodiscard]] error_result parse_error(std::string_view body, error_code& ec);

/// Parses an ISO 8601 UTC time as S3 bodies write it: "2013-09-17T18:07:53.000Z", with any
/// number of fraction digits (kept to the millisecond) or none, and "Z" or "+00:00". nullopt for
/// anything else or an invalid calendar date.
[[nodiscard]] std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view text);

// ---------------------------------------------------------------------------------------------
// Request bodies (writers)
// ---------------------------------------------------------------------------------------------

/// The CompleteMultipartUpload body: `<CompleteMultipartUpload xmlns="…"><Part><PartNumber>1
/// </PartNumber><ETag>"…"</ETag></Part>…`, the parts in the order given (S3 wants them
/// ascending), ETags quoted, checksums as <ChecksumCRC32> and friends.
[[nodiscard]] std::string complete_multipart_upload_request(std::span<const completed_part> parts);

/// The CreateBucket body for `region`: empty for us-east-1 (and an empty region), as S3 wants,
/// else `<CreateBucketConfiguration xmlns="…"><LocationConstraint>region</LocationConstraint>…`.
[[nodiscard]] std::string create_bucket_configuration(std::string_view region);

}  // namespace sluice::s3::xml
