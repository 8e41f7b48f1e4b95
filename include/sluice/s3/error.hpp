// SPDX-License-Identifier: Apache-2.0
// S3 errors: the codes S3 puts in its XML error bodies, with their HTTP status.
#pragma once

#include <sluice/error.hpp>

#include <string_view>
#include <type_traits>

namespace sluice::s3 {

/// The S3 error codes sluice's server and client speak (value names follow the S3 "Code").
enum class errc : int {
  access_denied = 1,
  bad_digest,
  bucket_already_exists,
  bucket_already_owned_by_you,
  bucket_not_empty,
  entity_too_large,
  entity_too_small,
  expired_token,
  internal_error,
  invalid_access_key_id,
  invalid_argument,
  invalid_bucket_name,
  invalid_digest,
  invalid_part,
  invalid_part_order,
  invalid_range,
  invalid_request,
  invalid_rdma_token,
  key_too_long,
  malformed_xml,
  method_not_allowed,
  missing_content_length,
  no_such_bucket,
  no_such_key,
  no_such_upload,
  not_implemented,
  precondition_failed,
  rdma_not_supported,
  rdma_transfer_failed,
  request_time_too_skewed,
  request_timeout,
  signature_does_not_match,
  slow_down,
  service_unavailable,
  not_modified,
  incomplete_body,
  x_amz_content_sha256_mismatch,
  authorization_header_malformed,
  authorization_query_parameters_error,  ///< a presigned URL's X-Amz-* parameters are malformed
  insufficient_storage,                  ///< 507: the store is out of space (ENOSPC, EDQUOT)
  invalid_tag,                           ///< object tags S3 refuses (too many, too long, a key twice)
  bad_gateway,                           ///< 502 (sluice's own code): a gateway's upstream answered garbage
  no_such_tag_set,                       ///< 404: a bucket without tags (GetBucketTagging)
  invalid_location_constraint,           ///< 400: a CreateBucket LocationConstraint that is no region name
};

/// The S3 "Code" string ("NoSuchKey"); empty for values outside the enumeration.
[[nodiscard]] std::string_view code_string(errc e) noexcept;
/// S3's general message for the code ("The specified key does not exist."), for error bodies
/// that have nothing more specific to say; empty for values outside the enumeration.
[[nodiscard]] std::string_view default_message(errc e) noexcept;
/// The HTTP status S3 answers with (404 for NoSuchKey, 416 for InvalidRange, ...).
[[nodiscard]] unsigned http_status(errc e) noexcept;
/// The value for an S3 "Code" string; internal_error when unknown.
[[nodiscard]] errc from_code_string(std::string_view code) noexcept;

/// The category of s3::errc values; its name() is "s3", its messages the S3 codes.
[[nodiscard]] const boost::system::error_category& s3_category() noexcept;

inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), s3_category()}; }

}  // namespace sluice::s3

template <>
struct boost::system::is_error_code_enum<sluice::s3::errc> : std::true_type {};
