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
};

constexpr std::array codes{
    code_entry{errc::access_denied, "AccessDenied", 403},
    code_entry{errc::bad_digest, "BadDigest", 400},
    code_entry{errc::bucket_already_exists, "BucketAlreadyExists", 409},
    code_entry{errc::bucket_already_owned_by_you, "BucketAlreadyOwnedByYou", 409},
    code_entry{errc::bucket_not_empty, "BucketNotEmpty", 409},
    code_entry{errc::entity_too_large, "EntityTooLarge", 400},
    code_entry{errc::entity_too_small, "EntityTooSmall", 400},
    code_entry{errc::expired_token, "ExpiredToken", 400},
    code_entry{errc::internal_error, "InternalError", 500},
    code_entry{errc::invalid_access_key_id, "InvalidAccessKeyId", 403},
    code_entry{errc::invalid_argument, "InvalidArgument", 400},
    code_entry{errc::invalid_bucket_name, "InvalidBucketName", 400},
    code_entry{errc::invalid_digest, "InvalidDigest", 400},
    code_entry{errc::invalid_part, "InvalidPart", 400},
    code_entry{errc::invalid_part_order, "InvalidPartOrder", 400},
    code_entry{errc::invalid_range, "InvalidRange", 416},
    code_entry{errc::invalid_request, "InvalidRequest", 400},
    code_entry{errc::invalid_rdma_token, "InvalidRDMAToken", 400},
    code_entry{errc::key_too_long, "KeyTooLongError", 400},
    code_entry{errc::malformed_xml, "MalformedXML", 400},
    code_entry{errc::method_not_allowed, "MethodNotAllowed", 405},
    code_entry{errc::missing_content_length, "MissingContentLength", 411},
    code_entry{errc::no_such_bucket, "NoSuchBucket", 404},
    code_entry{errc::no_such_key, "NoSuchKey", 404},
    code_entry{errc::no_such_upload, "NoSuchUpload", 404},
    code_entry{errc::not_implemented, "NotImplemented", 501},
    code_entry{errc::precondition_failed, "PreconditionFailed", 412},
    code_entry{errc::rdma_not_supported, "RDMANotSupported", 501},
    code_entry{errc::rdma_transfer_failed, "RDMATransferFailed", 500},
    code_entry{errc::request_time_too_skewed, "RequestTimeTooSkewed", 403},
    code_entry{errc::request_timeout, "RequestTimeout", 400},
    code_entry{errc::signature_does_not_match, "SignatureDoesNotMatch", 403},
    code_entry{errc::slow_down, "SlowDown", 503},
    code_entry{errc::service_unavailable, "ServiceUnavailable", 503},
    code_entry{errc::not_modified, "NotModified", 304},
    code_entry{errc::incomplete_body, "IncompleteBody", 400},
    code_entry{errc::x_amz_content_sha256_mismatch, "XAmzContentSHA256Mismatch", 400},
    code_entry{errc::authorization_header_malformed, "AuthorizationHeaderMalformed", 400},
    code_entry{errc::authorization_query_parameters_error, "AuthorizationQueryParametersError", 400},
    code_entry{errc::insufficient_storage, "InsufficientStorage", 507},
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
};

}  // namespace

std::string_view code_string(errc e) noexcept {
  const auto* entry = find(e);
  return entry ? entry->code : std::string_view{};
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
