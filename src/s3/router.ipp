// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/router.hpp; included by src/s3/s3.cpp.
#include <sluice/names.hpp>
#include <sluice/s3/router.hpp>
#include <sluice/s3/sigv4.hpp>

#include <algorithm>
#include <array>

namespace sluice::s3 {

namespace {

// Sub-resources S3 has and this server does not implement: a request naming one gets 501,
// never a wrong answer from the operation that would otherwise match.
constexpr std::array unimplemented_subresources = {"accelerate",
                                                   "acl",
                                                   "analytics",
                                                   "attributes",
                                                   "cors",
                                                   "encryption",
                                                   "intelligent-tiering",
                                                   "inventory",
                                                   "legal-hold",
                                                   "lifecycle",
                                                   "logging",
                                                   "metrics",
                                                   "notification",
                                                   "object-lock",
                                                   "ownershipControls",
                                                   "policy",
                                                   "policyStatus",
                                                   "publicAccessBlock",
                                                   "replication",
                                                   "requestPayment",
                                                   "restore",
                                                   "retention",
                                                   "select",
                                                   "tagging",
                                                   "torrent",
                                                   "versioning",
                                                   "website",
                                                   "session"};

// How unimplemented_operation_name() names the operation of a sub-resource: the method's verb
// (Get, Put, Delete, Post) then the noun for a bucket or an object; a fixed name wins.
struct subresource_name {
  std::string_view sub;
  std::string_view bucket_noun;
  std::string_view object_noun;
  std::string_view fixed;
};
constexpr std::array subresource_names = {
    subresource_name{"accelerate", "BucketAccelerateConfiguration", {}, {}},
    subresource_name{"acl", "BucketAcl", "ObjectAcl", {}},
    subresource_name{"analytics", "BucketAnalyticsConfiguration", {}, {}},
    subresource_name{"attributes", {}, {}, "GetObjectAttributes"},
    subresource_name{"cors", "BucketCors", {}, {}},
    subresource_name{"encryption", "BucketEncryption", {}, {}},
    subresource_name{"intelligent-tiering", "BucketIntelligentTieringConfiguration", {}, {}},
    subresource_name{"inventory", "BucketInventoryConfiguration", {}, {}},
    subresource_name{"legal-hold", {}, "ObjectLegalHold", {}},
    subresource_name{"lifecycle", "BucketLifecycleConfiguration", {}, {}},
    subresource_name{"logging", "BucketLogging", {}, {}},
    subresource_name{"metrics", "BucketMetricsConfiguration", {}, {}},
    subresource_name{"notification", "BucketNotificationConfiguration", {}, {}},
    subresource_name{"object-lock", "ObjectLockConfiguration", {}, {}},
    subresource_name{"ownershipControls", "BucketOwnershipControls", {}, {}},
    subresource_name{"policy", "BucketPolicy", {}, {}},
    subresource_name{"policyStatus", {}, {}, "GetBucketPolicyStatus"},
    subresource_name{"publicAccessBlock", "PublicAccessBlock", {}, {}},
    subresource_name{"replication", "BucketReplication", {}, {}},
    subresource_name{"requestPayment", "BucketRequestPayment", {}, {}},
    subresource_name{"restore", {}, {}, "RestoreObject"},
    subresource_name{"retention", {}, "ObjectRetention", {}},
    subresource_name{"select", {}, {}, "SelectObjectContent"},
    subresource_name{"tagging", "BucketTagging", "ObjectTagging", {}},
    subresource_name{"torrent", {}, {}, "GetObjectTorrent"},
    subresource_name{"versioning", "BucketVersioning", {}, {}},
    subresource_name{"website", "BucketWebsite", {}, {}},
    subresource_name{"session", {}, {}, "CreateSession"},
};

struct method_is {
  std::string_view m;
  bool operator()(std::string_view name) const noexcept { return m == name; }
};

std::string_view host_without_port(std::string_view host) noexcept {
  if (host.starts_with('[')) return host.substr(0, host.find(']') + 1);  // IPv6 literal
  return host.substr(0, host.rfind(':') == std::string_view::npos ? host.size() : host.rfind(':'));
}

}  // namespace

std::string_view operation_name(operation op) noexcept {
  switch (op) {
    case operation::not_implemented: return "NotImplemented";
    case operation::list_buckets: return "ListBuckets";
    case operation::create_bucket: return "CreateBucket";
    case operation::head_bucket: return "HeadBucket";
    case operation::delete_bucket: return "DeleteBucket";
    case operation::get_bucket_location: return "GetBucketLocation";
    case operation::get_bucket_versioning: return "GetBucketVersioning";
    case operation::list_objects_v1: return "ListObjects";
    case operation::list_objects_v2: return "ListObjectsV2";
    case operation::list_object_versions: return "ListObjectVersions";
    case operation::list_multipart_uploads: return "ListMultipartUploads";
    case operation::delete_objects: return "DeleteObjects";
    case operation::put_object: return "PutObject";
    case operation::copy_object: return "CopyObject";
    case operation::get_object: return "GetObject";
    case operation::head_object: return "HeadObject";
    case operation::delete_object: return "DeleteObject";
    case operation::create_multipart_upload: return "CreateMultipartUpload";
    case operation::upload_part: return "UploadPart";
    case operation::upload_part_copy: return "UploadPartCopy";
    case operation::complete_multipart_upload: return "CompleteMultipartUpload";
    case operation::abort_multipart_upload: return "AbortMultipartUpload";
    case operation::list_parts: return "ListParts";
    case operation::get_object_tagging: return "GetObjectTagging";
    case operation::put_object_tagging: return "PutObjectTagging";
    case operation::delete_object_tagging: return "DeleteObjectTagging";
    case operation::get_object_attributes: return "GetObjectAttributes";
    case operation::get_object_acl: return "GetObjectAcl";
    case operation::put_object_acl: return "PutObjectAcl";
    case operation::get_bucket_acl: return "GetBucketAcl";
    case operation::put_bucket_acl: return "PutBucketAcl";
    case operation::get_bucket_tagging: return "GetBucketTagging";
    case operation::put_bucket_tagging: return "PutBucketTagging";
    case operation::delete_bucket_tagging: return "DeleteBucketTagging";
  }
  return "NotImplemented";
}

std::optional<std::string_view> route::param(std::string_view name) const noexcept {
  for (const auto& [k, v] : query) {
    if (k == name) return std::string_view(v);
  }
  return std::nullopt;
}

void parse_route(route& r, std::string_view method, std::string_view target, std::string_view host,
                 std::span<const std::string> virtual_host_suffixes, bool has_copy_source, error_code& ec) {
  // Everything is assigned into r's storage: a route reused for the next request keeps its
  // strings' capacity.
  r.op = operation::not_implemented;
  r.bucket.clear();
  r.key.clear();
  r.virtual_host = false;
  std::size_t params = 0;
  const auto finish_query = [&] { r.query.resize(params); };
  ec = {};
  if (target.empty() || target.front() != '/') {
    finish_query();
    ec = errc::invalid_argument;
    return;
  }
  const auto qpos = target.find('?');
  const std::string_view raw_path = target.substr(0, qpos);
  const std::string_view raw_query = qpos == std::string_view::npos ? std::string_view{} : target.substr(qpos + 1);

  // Query: name[=value] pairs separated by '&', each percent-decoded.
  for (std::size_t start = 0; start <= raw_query.size() && !raw_query.empty();) {
    const auto amp = raw_query.find('&', start);
    const std::string_view item = raw_query.substr(start, amp == std::string_view::npos ? amp : amp - start);
    if (!item.empty()) {
      const auto eq = item.find('=');
      if (params == r.query.size()) r.query.emplace_back();
      auto& [name, value] = r.query[params++];
      name.clear();
      value.clear();
      if (!append_percent_decoded(name, item.substr(0, eq)) ||
          (eq != std::string_view::npos && !append_percent_decoded(value, item.substr(eq + 1)))) {
        finish_query();
        ec = errc::invalid_argument;
        return;
      }
    }
    if (amp == std::string_view::npos) break;
    start = amp + 1;
  }
  finish_query();

  thread_local std::string path;
  path.clear();
  if (!append_percent_decoded(path, raw_path)) {
    ec = errc::invalid_argument;
    return;
  }
  std::string_view rest = std::string_view(path).substr(1);  // after the leading '/'

  // Virtual-host style: "<bucket>.<suffix>[:port]".
  const std::string_view hostname = host_without_port(host);
  for (const auto& suffix : virtual_host_suffixes) {
    if (hostname.size() > suffix.size() + 1 && hostname.ends_with(suffix) &&
        hostname[hostname.size() - suffix.size() - 1] == '.') {
      r.bucket.assign(hostname.substr(0, hostname.size() - suffix.size() - 1));
      r.virtual_host = true;
      r.key.assign(rest);
      break;
    }
  }
  if (!r.virtual_host) {
    const auto slash = rest.find('/');
    r.bucket.assign(rest.substr(0, slash));
    if (slash != std::string_view::npos) r.key.assign(rest.substr(slash + 1));
  }
  if (r.key.size() > max_key_bytes) {
    ec = errc::key_too_long;
    return;
  }

  // GetBucketVersioning is answered (versioning is never enabled here); PutBucketVersioning is not.
  if (method == "GET" && !r.bucket.empty() && r.key.empty() && r.param("versioning")) {
    r.op = operation::get_bucket_versioning;
    return;
  }
  // Object and bucket tagging are answered.
  if (!r.bucket.empty() && r.param("tagging")) {
    const bool object = !r.key.empty();
    if (method == "GET") r.op = object ? operation::get_object_tagging : operation::get_bucket_tagging;
    if (method == "PUT") r.op = object ? operation::put_object_tagging : operation::put_bucket_tagging;
    if (method == "DELETE") r.op = object ? operation::delete_object_tagging : operation::delete_bucket_tagging;
    return;
  }
  // ACLs: read as the owner's FULL_CONTROL; set only to that (the canned ACL private).
  if (!r.bucket.empty() && r.param("acl") && (method == "GET" || method == "PUT")) {
    const bool object = !r.key.empty();
    if (method == "GET") r.op = object ? operation::get_object_acl : operation::get_bucket_acl;
    if (method == "PUT") r.op = object ? operation::put_object_acl : operation::put_bucket_acl;
    return;
  }
  if (!r.bucket.empty() && !r.key.empty() && method == "GET" && r.param("attributes")) {
    r.op = operation::get_object_attributes;
    return;
  }
  for (const char* sub : unimplemented_subresources) {
    if (r.param(sub)) return;  // not_implemented
  }

  const method_is is{method};
  const bool has_upload_id = r.param("uploadId").has_value();
  if (r.bucket.empty()) {
    if (is("GET")) r.op = operation::list_buckets;
    return;
  }
  if (r.key.empty()) {
    if (is("PUT")) {
      r.op = operation::create_bucket;
      if (!is_valid_bucket_name(r.bucket)) ec = errc::invalid_bucket_name;
    } else if (is("HEAD")) {
      r.op = operation::head_bucket;
    } else if (is("DELETE")) {
      r.op = operation::delete_bucket;
    } else if (is("POST") && r.param("delete")) {
      r.op = operation::delete_objects;
    } else if (is("GET")) {
      if (r.param("location")) {
        r.op = operation::get_bucket_location;
      } else if (r.param("versions")) {
        r.op = operation::list_object_versions;
      } else if (r.param("uploads")) {
        r.op = operation::list_multipart_uploads;
      } else if (r.param("list-type") == std::optional<std::string_view>("2")) {
        r.op = operation::list_objects_v2;
      } else {
        r.op = operation::list_objects_v1;
      }
    }
    return;
  }
  if (is("PUT")) {
    if (has_upload_id && r.param("partNumber")) {
      r.op = has_copy_source ? operation::upload_part_copy : operation::upload_part;
    } else if (!has_upload_id) {
      r.op = has_copy_source ? operation::copy_object : operation::put_object;
    }
  } else if (is("GET")) {
    r.op = has_upload_id ? operation::list_parts : operation::get_object;
  } else if (is("HEAD")) {
    if (!has_upload_id) r.op = operation::head_object;
  } else if (is("DELETE")) {
    r.op = has_upload_id ? operation::abort_multipart_upload : operation::delete_object;
  } else if (is("POST")) {
    if (r.param("uploads")) {
      r.op = operation::create_multipart_upload;
    } else if (has_upload_id) {
      r.op = operation::complete_multipart_upload;
    }
  }
  return;
}

std::string unimplemented_operation_name(std::string_view method, const route& r) {
  const bool object = !r.key.empty();
  std::string_view verb;
  if (method == "GET") verb = "Get";
  if (method == "PUT") verb = "Put";
  if (method == "DELETE") verb = "Delete";
  if (method == "POST") verb = "Post";
  for (const subresource_name& s : subresource_names) {
    if (!r.param(s.sub)) continue;
    if (!s.fixed.empty()) return std::string(s.fixed);
    const std::string_view noun = object ? s.object_noun : s.bucket_noun;
    if (!verb.empty() && !noun.empty()) return std::string(verb) + std::string(noun);
    return "?" + std::string(s.sub) + (object ? " on an object" : " on a bucket") + " with " + std::string(method);
  }
  if (r.bucket.empty()) return std::string(method) + " on the service";
  return std::string(method) + (object ? " on an object" : " on a bucket");
}

route parse_route(std::string_view method, std::string_view target, std::string_view host,
                  std::span<const std::string> virtual_host_suffixes, bool has_copy_source, error_code& ec) {
  route r;
  parse_route(r, method, target, host, virtual_host_suffixes, has_copy_source, ec);
  return r;
}

}  // namespace sluice::s3
