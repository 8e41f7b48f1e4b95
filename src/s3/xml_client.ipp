// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/xml_client.hpp; included by src/s3/s3.cpp.
// Parsing goes through pugixml, as in xml.ipp. The helpers live in their own namespace
// (xml::reply) because s3.cpp is one translation unit that also holds xml.ipp's helpers.
#include <sluice/s3/sigv4.hpp>
#include <sluice/s3/xml_client.hpp>

#include <pugixml.hpp>

#include <charconv>
#include <string>
#include <string_view>

#include "common/text.hpp"

namespace sluice::s3::xml {

namespace reply {
namespace {

constexpr std::string_view declaration = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
constexpr std::string_view namespace_uri = "http://s3.amazonaws.com/doc/2006-03-01/";

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view text) noexcept {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// The element's name without a namespace prefix ("s3:Key" → "Key").
std::string_view local_name(const pugi::xml_node& node) {
  std::string_view name = node.name();
  if (const auto colon = name.find(':'); colon != std::string_view::npos) name.remove_prefix(colon + 1);
  return name;
}

// The document's root element when it is well formed and named `root` (ignoring any prefix).
pugi::xml_node load_root(pugi::xml_document& doc, std::string_view body, std::string_view root) {
  if (body.find('\0') != std::string_view::npos) return {};  // pugixml would stop there
  constexpr unsigned options = pugi::parse_default | pugi::parse_ws_pcdata;
  if (doc.load_buffer(body.data(), body.size(), options, pugi::encoding_utf8).status != pugi::status_ok) return {};
  pugi::xml_node element = doc.document_element();
  if (!element || local_name(element) != root) return {};
  return element;
}

// The text of a leaf element: its text and CDATA children joined (whitespace kept: a key may be
// all spaces).
std::string text_of(const pugi::xml_node& element) {
  std::string text;
  for (const pugi::xml_node& child : element.children()) {
    if (child.type() == pugi::node_pcdata || child.type() == pugi::node_cdata) text += child.value();
  }
  return text;
}

// The first child element named `name`, or a null node.
pugi::xml_node child_named(const pugi::xml_node& parent, std::string_view name) {
  for (const pugi::xml_node& child : parent.children()) {
    if (child.type() == pugi::node_element && local_name(child) == name) return child;
  }
  return {};
}

std::optional<std::string> child_text(const pugi::xml_node& parent, std::string_view name) {
  const pugi::xml_node child = child_named(parent, name);
  if (!child) return std::nullopt;
  return text_of(child);
}

template <class Unsigned>
bool parse_number(std::string_view text, Unsigned& out) {
  text = trim(text);
  if (text.empty()) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc{} && end == text.data() + text.size();
}

bool parse_flag(std::string_view text, bool& out) {
  text = trim(text);
  if (text == "true" || text == "True" || text == "TRUE") {
    out = true;
  } else if (text == "false" || text == "False" || text == "FALSE") {
    out = false;
  } else {
    return false;
  }
  return true;
}

std::string unquote(std::string_view etag) { return std::string(::sluice::detail::unquote_etag(trim(etag))); }

void append_escaped(std::string& out, std::string_view text) {
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\r': out += "&#13;"; break;
      case '\n': out += "&#10;"; break;
      default: out += c;
    }
  }
}

void append_element(std::string& out, std::string_view name, std::string_view value) {
  out += '<';
  out += name;
  out += '>';
  append_escaped(out, value);
  out += "</";
  out += name;
  out += '>';
}

std::string_view checksum_element(std::string_view name) noexcept {
  if (name == "crc32") return "ChecksumCRC32";
  if (name == "crc32c") return "ChecksumCRC32C";
  if (name == "sha1") return "ChecksumSHA1";
  if (name == "sha256") return "ChecksumSHA256";
  if (name == "crc64nvme") return "ChecksumCRC64NVME";
  return {};
}

}  // namespace
}  // namespace reply

std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00)
  if (text.size() < 20 || text[4] != '-' || text[7] != '-' || (text[10] != 'T' && text[10] != 't') || text[13] != ':' ||
      text[16] != ':') {
    return std::nullopt;
  }
  const auto digits = [text](std::size_t at, std::size_t count, int& out) {
    out = 0;
    for (std::size_t i = at; i < at + count; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      out = out * 10 + (text[i] - '0');
    }
    return true;
  };
  int year = 0;
  int month = 0;
  int day = 0;
  int hour = 0;
  int minute = 0;
  int second = 0;
  if (!digits(0, 4, year) || !digits(5, 2, month) || !digits(8, 2, day) || !digits(11, 2, hour) ||
      !digits(14, 2, minute) || !digits(17, 2, second)) {
    return std::nullopt;
  }
  std::size_t at = 19;
  int millis = 0;
  if (at < text.size() && text[at] == '.') {
    ++at;
    const std::size_t first = at;
    int scale = 100;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      millis += (text[at] - '0') * scale;
      scale /= 10;
      ++at;
    }
    if (at == first) return std::nullopt;
  }
  const std::string_view zone = text.substr(at);
  if (zone != "Z" && zone != "z" && zone != "+00:00") return std::nullopt;
  if (hour > 23 || minute > 59 || second > 60) return std::nullopt;
  using namespace std::chrono;
  const year_month_day date{std::chrono::year(year), std::chrono::month(static_cast<unsigned>(month)),
                            std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok()) return std::nullopt;
  return time_point_cast<system_clock::duration>(sys_days(date) + hours(hour) + minutes(minute) + seconds(second) +
                                                 milliseconds(millis));
}

list_bucket_result parse_list_objects_v2(std::string_view body, error_code& ec) {
  ec = {};
  pugi::xml_document doc;
  const pugi::xml_node root = reply::load_root(doc, body, "ListBucketResult");
  list_bucket_result out;
  const auto fail = [&ec] {
    ec = errc::malformed_xml;
    return list_bucket_result{};
  };
  if (!root) return fail();
  bool url = false;
  if (auto encoding = reply::child_text(root, "EncodingType")) url = reply::trim(*encoding) == "url";
  // A field as sent, decoded when the server url-encoded it.
  bool decode_failed = false;
  const auto field = [&](const std::string& raw) {
    if (!url) return raw;
    auto decoded = percent_decode(raw);
    if (!decoded) decode_failed = true;
    return decoded.value_or(std::string());
  };
  for (const pugi::xml_node& child : root.children()) {
    if (child.type() != pugi::node_element) continue;
    const std::string_view name = reply::local_name(child);
    if (name == "Name") {
      out.bucket = reply::text_of(child);
    } else if (name == "Prefix") {
      out.prefix = field(reply::text_of(child));
    } else if (name == "Delimiter") {
      out.delimiter = field(reply::text_of(child));
    } else if (name == "StartAfter") {
      out.start_after = field(reply::text_of(child));
    } else if (name == "ContinuationToken") {
      out.continuation_token = reply::text_of(child);
    } else if (name == "NextContinuationToken") {
      out.next_continuation_token = reply::text_of(child);
    } else if (name == "MaxKeys") {
      if (!reply::parse_number(reply::text_of(child), out.max_keys)) return fail();
    } else if (name == "IsTruncated") {
      if (!reply::parse_flag(reply::text_of(child), out.truncated)) return fail();
    } else if (name == "Contents") {
      object_info info;
      auto key = reply::child_text(child, "Key");
      if (!key) return fail();
      info.key = field(*key);
      if (auto size = reply::child_text(child, "Size"); size && !reply::parse_number(*size, info.size)) return fail();
      if (auto etag = reply::child_text(child, "ETag")) info.attributes.etag = reply::unquote(*etag);
      if (auto modified = reply::child_text(child, "LastModified")) {
        auto time = parse_iso8601(reply::trim(*modified));
        if (!time) return fail();
        info.last_modified = *time;
      }
      out.objects.push_back(std::move(info));
    } else if (name == "CommonPrefixes") {
      for (const pugi::xml_node& prefix : child.children()) {
        if (prefix.type() == pugi::node_element && reply::local_name(prefix) == "Prefix") {
          out.common_prefixes.push_back(field(reply::text_of(prefix)));
        }
      }
    }
  }
  if (decode_failed) return fail();
  return out;
}

std::vector<bucket_info> parse_list_buckets(std::string_view body, error_code& ec) {
  ec = {};
  pugi::xml_document doc;
  const pugi::xml_node root = reply::load_root(doc, body, "ListAllMyBucketsResult");
  if (!root) {
    ec = errc::malformed_xml;
    return {};
  }
  std::vector<bucket_info> out;
  const pugi::xml_node buckets = reply::child_named(root, "Buckets");
  for (const pugi::xml_node& bucket : buckets.children()) {
    if (bucket.type() != pugi::node_element || reply::local_name(bucket) != "Bucket") continue;
    bucket_info info;
    auto name = reply::child_text(bucket, "Name");
    if (!name) {
      ec = errc::malformed_xml;
      return {};
    }
    info.name = *name;
    if (auto created = reply::child_text(bucket, "CreationDate")) {
      auto time = parse_iso8601(reply::trim(*created));
      if (!time) {
        ec = errc::malformed_xml;
        return {};
      }
      info.created = *time;
    }
    out.push_back(std::move(info));
  }
  return out;
}

list_multipart_uploads_result parse_list_multipart_uploads(std::string_view body, error_code& ec) {
  ec = {};
  pugi::xml_document doc;
  const pugi::xml_node root = reply::load_root(doc, body, "ListMultipartUploadsResult");
  list_multipart_uploads_result out;
  const auto fail = [&ec] {
    ec = errc::malformed_xml;
    return list_multipart_uploads_result{};
  };
  if (!root) return fail();
  bool url = false;
  if (auto encoding = reply::child_text(root, "EncodingType")) url = reply::trim(*encoding) == "url";
  bool decode_failed = false;
  const auto field = [&](const std::string& raw) {
    if (!url) return raw;
    auto decoded = percent_decode(raw);
    if (!decoded) decode_failed = true;
    return decoded.value_or(std::string());
  };
  for (const pugi::xml_node& child : root.children()) {
    if (child.type() != pugi::node_element) continue;
    const std::string_view name = reply::local_name(child);
    if (name == "IsTruncated") {
      if (!reply::parse_flag(reply::text_of(child), out.truncated)) return fail();
    } else if (name == "NextKeyMarker") {
      out.next_key_marker = field(reply::text_of(child));
    } else if (name == "NextUploadIdMarker") {
      out.next_upload_id_marker = reply::text_of(child);
    } else if (name == "Upload") {
      upload_info upload;
      auto key = reply::child_text(child, "Key");
      auto id = reply::child_text(child, "UploadId");
      if (!key || !id || reply::trim(*id).empty()) return fail();
      upload.key = field(*key);
      upload.upload_id = std::string(reply::trim(*id));
      if (auto initiated = reply::child_text(child, "Initiated")) {
        auto time = parse_iso8601(reply::trim(*initiated));
        if (!time) return fail();
        upload.initiated = *time;
      }
      out.uploads.push_back(std::move(upload));
    }
  }
  if (decode_failed) return fail();
  return out;
}

initiate_multipart_upload_result parse_initiate_multipart_upload(std::string_view body, error_code& ec) {
  ec = {};
  pugi::xml_document doc;
  const pugi::xml_node root = reply::load_root(doc, body, "InitiateMultipartUploadResult");
  initiate_multipart_upload_result out;
  auto id = root ? reply::child_text(root, "UploadId") : std::nullopt;
  if (!id || reply::trim(*id).empty()) {
    ec = errc::malformed_xml;
    return {};
  }
  out.upload_id = std::string(reply::trim(*id));
  out.bucket = reply::child_text(root, "Bucket").value_or("");
  out.key = reply::child_text(root, "Key").value_or("");
  return out;
}

namespace reply {
namespace {

// An <Error> body where a result was expected (S3's 200 OK of a request that failed after its
// answer started): sets `ec` to the error its <Code> names and returns true.
bool failed_in_body(std::string_view body, error_code& ec) {
  pugi::xml_document doc;
  if (!load_root(doc, body, "Error")) return false;
  error_code parse_ec;
  const error_result error = parse_error(body, parse_ec);
  ec = parse_ec ? error_code(errc::malformed_xml) : error_code(error.value());
  return true;
}

}  // namespace
}  // namespace reply

complete_multipart_upload_result parse_complete_multipart_upload_result(std::string_view body, error_code& ec) {
  ec = {};
  if (reply::failed_in_body(body, ec)) return {};
  pugi::xml_document doc;
  const pugi::xml_node root = reply::load_root(doc, body, "CompleteMultipartUploadResult");
  auto etag = root ? reply::child_text(root, "ETag") : std::nullopt;
  if (!etag) {
    ec = errc::malformed_xml;
    return {};
  }
  complete_multipart_upload_result out;
  out.etag = reply::unquote(*etag);
  out.location = reply::child_text(root, "Location").value_or("");
  out.bucket = reply::child_text(root, "Bucket").value_or("");
  out.key = reply::child_text(root, "Key").value_or("");
  return out;
}

copy_result_body parse_copy_result(std::string_view body, error_code& ec) {
  ec = {};
  if (reply::failed_in_body(body, ec)) return {};
  pugi::xml_document doc;
  pugi::xml_node root = reply::load_root(doc, body, "CopyObjectResult");
  if (!root) root = reply::load_root(doc, body, "CopyPartResult");
  auto etag = root ? reply::child_text(root, "ETag") : std::nullopt;
  if (!etag || reply::unquote(*etag).empty()) {
    ec = errc::malformed_xml;
    return {};
  }
  copy_result_body out;
  out.etag = reply::unquote(*etag);
  if (auto modified = reply::child_text(root, "LastModified"))
    out.last_modified = parse_iso8601(reply::trim(*modified));
  return out;
}

error_result parse_error(std::string_view body, error_code& ec) {
  ec = {};
  pugi::xml_document doc;
  const pugi::xml_node root = reply::load_root(doc, body, "Error");
  auto code = root ? reply::child_text(root, "Code") : std::nullopt;
  if (!code || reply::trim(*code).empty()) {
    ec = errc::malformed_xml;
    return {};
  }
  error_result out;
  out.code = std::string(reply::trim(*code));
  out.message = reply::child_text(root, "Message").value_or("");
  out.resource = reply::child_text(root, "Resource").value_or("");
  out.request_id = reply::child_text(root, "RequestId").value_or("");
  return out;
}

std::string complete_multipart_upload_request(std::span<const completed_part> parts) {
  std::string out(reply::declaration);
  out += "<CompleteMultipartUpload xmlns=\"";
  out += reply::namespace_uri;
  out += "\">";
  for (const auto& part : parts) {
    out += "<Part>";
    reply::append_element(out, "PartNumber", std::to_string(part.number));
    reply::append_element(out, "ETag", "\"" + part.etag + "\"");
    for (const auto& [name, value] : part.checksums) {
      if (const auto element = reply::checksum_element(name); !element.empty())
        reply::append_element(out, element, value);
    }
    out += "</Part>";
  }
  out += "</CompleteMultipartUpload>";
  return out;
}

std::string create_bucket_configuration(std::string_view region) {
  if (region.empty() || region == "us-east-1") return {};
  std::string out(reply::declaration);
  out += "<CreateBucketConfiguration xmlns=\"";
  out += reply::namespace_uri;
  out += "\">";
  reply::append_element(out, "LocationConstraint", region);
  out += "</CreateBucketConfiguration>";
  return out;
}

}  // namespace sluice::s3::xml
