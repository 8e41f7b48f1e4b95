// SPDX-License-Identifier: Apache-2.0
// Routing of S3 requests, sans-I/O: method + request target + Host header → which S3 operation,
// on which bucket and key, with which (decoded) query parameters.
#pragma once

#include <sluice/error.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::s3 {

/// The S3 operations the server implements; anything else is not_implemented (501).
enum class operation {
  not_implemented,
  list_buckets,
  create_bucket,
  head_bucket,
  delete_bucket,
  get_bucket_location,
  get_bucket_versioning,
  list_objects_v1,
  list_objects_v2,
  list_object_versions,
  list_multipart_uploads,
  delete_objects,
  put_object,
  copy_object,
  get_object,
  head_object,
  delete_object,
  create_multipart_upload,
  upload_part,
  upload_part_copy,
  complete_multipart_upload,
  abort_multipart_upload,
  list_parts,
  get_object_tagging,
  put_object_tagging,
  delete_object_tagging,
  get_object_attributes,
  get_object_acl,
  put_object_acl,
  get_bucket_acl,
  put_bucket_acl,
  get_bucket_tagging,
  put_bucket_tagging,
  delete_bucket_tagging,
};

/// The operation's name as S3 documents it ("GetObject").
[[nodiscard]] std::string_view operation_name(operation op) noexcept;

/// A routed request.
struct route {
  operation op = operation::not_implemented;
  std::string bucket;                                      ///< empty for the service (ListBuckets)
  std::string key;                                         ///< decoded object key; empty for bucket operations
  std::vector<std::pair<std::string, std::string>> query;  ///< decoded, in request order
  bool virtual_host = false;                               ///< bucket came from the Host header

  /// The value of query parameter `name`, if present (a bare `?uploads` has the value "").
  [[nodiscard]] std::optional<std::string_view> param(std::string_view name) const noexcept;
};

/// Routes a request. `virtual_host_suffixes` are the domains under which "bucket.<suffix>"
/// names a bucket (virtual-host style); any other Host means path style. `has_copy_source`
/// tells PUT object/part from CopyObject/UploadPartCopy. Errors (s3::errc): invalid_argument for a malformed
/// target or query, key_too_long for keys over 1024 bytes, invalid_bucket_name for a bucket
/// name that can never exist. An unknown sub-resource is not an error: op = not_implemented.
[[nodiscard]] route parse_route(std::string_view method, std::string_view target, std::string_view host,
                                std::span<const std::string> virtual_host_suffixes, bool has_copy_source,
                                error_code& ec);
/// parse_route() into `out`, reusing its storage: a server that keeps one route per connection
/// allocates nothing for a request no longer than the ones before it.
void parse_route(route& out, std::string_view method, std::string_view target, std::string_view host,
                 std::span<const std::string> virtual_host_suffixes, bool has_copy_source, error_code& ec);

/// The S3 name of the operation a request asks for that this server does not implement
/// (route::op is not_implemented): "PutBucketCors", "GetObjectRetention", "RestoreObject", or,
/// for a method no operation of that resource takes, "PATCH on an object". For error messages.
[[nodiscard]] std::string unimplemented_operation_name(std::string_view method, const route& r);

}  // namespace sluice::s3
