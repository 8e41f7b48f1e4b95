// SPDX-License-Identifier: Apache-2.0
// Compiled part of sluice::s3.
#include <sluice/s3/error.hpp>

#include <array>
#include <string>

namespace sluice::s3 {

namespace {

struct code_entry {
  errc value;
  std::string_view code;
  unsigned status;
  std::string_view message;  // S3's general message for the code
};

constexpr std::array codes{
    code_entry{errc::access_denied, "AccessDenied", 403, "Access Denied"},
    code_entry{errc::bad_digest, "BadDigest", 400, "The Content-MD5 you specified did not match what we received."},
    code_entry{errc::bucket_already_exists, "BucketAlreadyExists", 409,
               "The requested bucket name is not available. The bucket namespace is shared by all users of the system. "
               "Please select a different name and try again."},
    code_entry{errc::bucket_already_owned_by_you, "BucketAlreadyOwnedByYou", 409,
               "Your previous request to create the named bucket succeeded and you already own it."},
    code_entry{errc::bucket_not_empty, "BucketNotEmpty", 409, "The bucket you tried to delete is not empty."},
    code_entry{errc::entity_too_large, "EntityTooLarge", 400,
               "Your proposed upload exceeds the maximum allowed object size."},
    code_entry{errc::entity_too_small, "EntityTooSmall", 400,
               "Your proposed upload is smaller than the minimum allowed object size."},
    code_entry{errc::expired_token, "ExpiredToken", 400, "The provided token has expired."},
    code_entry{errc::internal_error, "InternalError", 500, "We encountered an internal error. Please try again."},
    code_entry{errc::invalid_access_key_id, "InvalidAccessKeyId", 403,
               "The AWS Access Key Id you provided does not exist in our records."},
    code_entry{errc::invalid_argument, "InvalidArgument", 400, "Invalid Argument"},
    code_entry{errc::invalid_bucket_name, "InvalidBucketName", 400, "The specified bucket is not valid."},
    code_entry{errc::invalid_digest, "InvalidDigest", 400, "The Content-MD5 you specified is not valid."},
    code_entry{errc::invalid_part, "InvalidPart", 400,
               "One or more of the specified parts could not be found. The part may not have been uploaded, or the "
               "specified entity tag may not match the part's entity tag."},
    code_entry{errc::invalid_part_order, "InvalidPartOrder", 400,
               "The list of parts was not in ascending order. Parts must be ordered by part number."},
    code_entry{errc::invalid_range, "InvalidRange", 416, "The requested range is not satisfiable"},
    code_entry{errc::invalid_request, "InvalidRequest", 400, "Invalid Request"},
    code_entry{errc::invalid_rdma_token, "InvalidRDMAToken", 400,
               "The x-amz-rdma-token is not valid for this request."},
    code_entry{errc::key_too_long, "KeyTooLongError", 400, "Your key is too long"},
    code_entry{errc::malformed_xml, "MalformedXML", 400,
               "The XML you provided was not well-formed or did not validate against our published schema."},
    code_entry{errc::method_not_allowed, "MethodNotAllowed", 405,
               "The specified method is not allowed against this resource."},
    code_entry{errc::missing_content_length, "MissingContentLength", 411,
               "You must provide the Content-Length HTTP header."},
    code_entry{errc::no_such_bucket, "NoSuchBucket", 404, "The specified bucket does not exist"},
    code_entry{errc::no_such_key, "NoSuchKey", 404, "The specified key does not exist."},
    code_entry{errc::no_such_upload, "NoSuchUpload", 404,
               "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted "
               "or completed."},
    code_entry{errc::not_implemented, "NotImplemented", 501,
               "A header or query you provided implies functionality that is not implemented."},
    code_entry{errc::precondition_failed, "PreconditionFailed", 412,
               "At least one of the pre-conditions you specified did not hold"},
    code_entry{errc::rdma_not_supported, "RDMANotSupported", 501,
               "This server does not serve the RDMA transport the token names."},
    code_entry{errc::rdma_transfer_failed, "RDMATransferFailed", 500, "The RDMA transfer failed."},
    code_entry{errc::request_time_too_skewed, "RequestTimeTooSkewed", 403,
               "The difference between the request time and the current time is too large."},
    code_entry{errc::request_timeout, "RequestTimeout", 400,
               "Your socket connection to the server was not read from or written to within the timeout period."},
    code_entry{errc::signature_does_not_match, "SignatureDoesNotMatch", 403,
               "The request signature we calculated does not match the signature you provided. Check your key and "
               "signing method."},
    code_entry{errc::slow_down, "SlowDown", 503, "Please reduce your request rate."},
    code_entry{errc::service_unavailable, "ServiceUnavailable", 503, "Service is unable to handle request."},
    code_entry{errc::not_modified, "NotModified", 304, "Not Modified"},
    code_entry{errc::incomplete_body, "IncompleteBody", 400,
               "You did not provide the number of bytes specified by the Content-Length HTTP header."},
    code_entry{errc::x_amz_content_sha256_mismatch, "XAmzContentSHA256Mismatch", 400,
               "The provided 'x-amz-content-sha256' header does not match what was computed."},
    code_entry{errc::authorization_header_malformed, "AuthorizationHeaderMalformed", 400,
               "The authorization header is malformed."},
    code_entry{errc::authorization_query_parameters_error, "AuthorizationQueryParametersError", 400,
               "The query parameters that carry the signature are malformed."},
    code_entry{errc::insufficient_storage, "InsufficientStorage", 507,
               "The server does not have enough space to store the object."},
    code_entry{errc::invalid_tag, "InvalidTag", 400, "The tag provided was not a valid tag."},
    code_entry{errc::bad_gateway, "BadGateway", 502,
               "The gateway's upstream S3 service sent an answer that breaks the protocol; nothing of it was "
               "served or cached."},
    code_entry{errc::no_such_tag_set, "NoSuchTagSet", 404, "The TagSet does not exist"},
    code_entry{errc::invalid_location_constraint, "InvalidLocationConstraint", 400,
               "The specified location-constraint is not valid"},
};

const code_entry* find(errc e) noexcept {
  for (const auto& entry : codes) {
    if (entry.value == e) return &entry;
  }
  return nullptr;
}

class s3_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "s3"; }
  [[nodiscard]] std::string message(int value) const override {
    const auto* entry = find(static_cast<errc>(value));
    return entry ? std::string(entry->code) : "unknown S3 error " + std::to_string(value);
  }
  [[nodiscard]] bool equivalent(int value, const boost::system::error_condition& cond) const noexcept override {
    if (cond.category() != sluice::condition_category()) return error_category::equivalent(value, cond);
    const auto e = static_cast<errc>(value);
    switch (static_cast<sluice::condition>(cond.value())) {
      case sluice::condition::not_found:
        return e == errc::no_such_bucket || e == errc::no_such_key || e == errc::no_such_upload;
      case sluice::condition::declined: return e == errc::rdma_not_supported;
      case sluice::condition::fabric_failed: return e == errc::rdma_transfer_failed;
    }
    return false;
  }
};

}  // namespace

std::string_view code_string(errc e) noexcept {
  const auto* entry = find(e);
  return entry ? entry->code : std::string_view{};
}

std::string_view default_message(errc e) noexcept {
  const auto* entry = find(e);
  return entry ? entry->message : std::string_view{};
}

unsigned http_status(errc e) noexcept {
  const auto* entry = find(e);
  return entry ? entry->status : 500;
}

errc from_code_string(std::string_view code) noexcept {
  for (const auto& entry : codes) {
    if (entry.code == code) return entry.value;
  }
  return errc::internal_error;
}

const boost::system::error_category& s3_category() noexcept {
  static const s3_category_impl category;
  return category;
}

}  // namespace sluice::s3
