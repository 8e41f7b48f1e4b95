// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/xml.hpp; included by src/s3/s3.cpp.
// Parsing goes through pugixml (a private dependency of sluice::s3); writing is by hand, because
// S3 escapes more than pugixml's writer does (" and ' in text, CR and LF as references).
#include <sluice/s3/xml.hpp>

#include <pugixml.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace sluice::s3::xml {

namespace {

constexpr std::string_view xml_declaration = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
constexpr std::string_view s3_xmlns = "http://s3.amazonaws.com/doc/2006-03-01/";
constexpr std::uint32_t max_part_number = 10000;

// ------------------------------------------------------------------------------------------
// Parsing
// ------------------------------------------------------------------------------------------

bool is_xml_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool all_xml_space(std::string_view text) noexcept {
  for (const char c : text) {
    if (!is_xml_space(c)) return false;
  }
  return true;
}

std::string_view trim_xml_space(std::string_view text) noexcept {
  while (!text.empty() && is_xml_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_xml_space(text.back())) text.remove_suffix(1);
  return text;
}

// Whitespace-only text between elements is layout; every other kind of node that pugixml keeps
// with our options (non-blank text, CDATA, a DOCTYPE) has no place outside a leaf element.
bool is_layout(const pugi::xml_node& node) { return node.type() == pugi::node_pcdata && all_xml_space(node.value()); }

// Loads `body` and returns its single root element when it is named `root_name`; a null node
// for anything else. `doc` owns the tree.
pugi::xml_node load_root(pugi::xml_document& doc, std::string_view body, std::string_view root_name) {
  // pugixml stops at a NUL byte as at the end of the buffer, which would hide what follows;
  // NUL is not an XML character anyway.
  if (body.find('\0') != std::string_view::npos) return {};
  // parse_ws_pcdata keeps whitespace-only text, so that a key of spaces survives;
  // parse_fragment keeps text outside the root and parse_doctype the DOCTYPE, so both can be
  // refused below instead of being dropped silently.
  constexpr unsigned options = pugi::parse_default | pugi::parse_ws_pcdata | pugi::parse_fragment | pugi::parse_doctype;
  const pugi::xml_parse_result result = doc.load_buffer(body.data(), body.size(), options, pugi::encoding_utf8);
  if (result.status != pugi::status_ok) return {};
  pugi::xml_node root;
  for (const pugi::xml_node& child : doc.children()) {
    if (child.type() == pugi::node_element) {
      if (root) return {};  // a second root element
      root = child;
    } else if (!is_layout(child)) {
      return {};
    }
  }
  if (!root || std::string_view(root.name()) != root_name) return {};
  return root;
}

// The text of a leaf element (its text and CDATA children joined); nullopt when it holds an
// element.
std::optional<std::string> leaf_text(const pugi::xml_node& element) {
  std::string text;
  for (const pugi::xml_node& child : element.children()) {
    if (child.type() != pugi::node_pcdata && child.type() != pugi::node_cdata) return std::nullopt;
    text += child.value();
  }
  return text;
}

// Stores the text of `element` into `slot`; false when the slot is taken (a repeated element)
// or the element is not a leaf.
bool take_once(std::optional<std::string>& slot, const pugi::xml_node& element) {
  if (slot) return false;
  slot = leaf_text(element);
  return slot.has_value();
}

// Calls `on_element(child)` for each element child of `parent` (stopping at the first false);
// false when on_element refused one or `parent` holds anything but elements and layout.
template <typename F>
bool for_each_element(const pugi::xml_node& parent, F&& on_element) {
  for (const pugi::xml_node& child : parent.children()) {
    if (child.type() == pugi::node_element) {
      if (!on_element(child)) return false;
    } else if (!is_layout(child)) {
      return false;
    }
  }
  return true;
}

// The checksum elements of a part, under the names object_attributes::checksums uses.
std::string_view checksum_name(std::string_view element) noexcept {
  if (element == "ChecksumCRC32") return "crc32";
  if (element == "ChecksumCRC32C") return "crc32c";
  if (element == "ChecksumSHA1") return "sha1";
  if (element == "ChecksumSHA256") return "sha256";
  if (element == "ChecksumCRC64NVME") return "crc64nvme";
  return {};
}

// The element that carries a checksum named as object_attributes::checksums names it.
std::string_view checksum_element(std::string_view name) noexcept {
  if (name == "crc32") return "ChecksumCRC32";
  if (name == "crc32c") return "ChecksumCRC32C";
  if (name == "sha1") return "ChecksumSHA1";
  if (name == "sha256") return "ChecksumSHA256";
  if (name == "crc64nvme") return "ChecksumCRC64NVME";
  return {};
}

// The upper-case algorithm name S3 lists in <ChecksumAlgorithm>.
std::string_view checksum_algorithm(std::string_view name) noexcept {
  if (name == "crc32") return "CRC32";
  if (name == "crc32c") return "CRC32C";
  if (name == "sha1") return "SHA1";
  if (name == "sha256") return "SHA256";
  if (name == "crc64nvme") return "CRC64NVME";
  return {};
}

struct raw_part {
  std::uint64_t number = 0;  // saturated at the uint64 maximum
  completed_part part;
};

// One <Part>; nullopt when malformed.
std::optional<raw_part> parse_part(const pugi::xml_node& element) {
  std::optional<std::string> number_text;
  std::optional<std::string> etag;
  raw_part out;
  const bool ok = for_each_element(element, [&](const pugi::xml_node& child) {
    const std::string_view name = child.name();
    if (name == "PartNumber") return take_once(number_text, child);
    if (name == "ETag") return take_once(etag, child);
    if (const std::string_view checksum = checksum_name(name); !checksum.empty()) {
      std::optional<std::string> value = leaf_text(child);
      return value && out.part.checksums.emplace(checksum, trim_xml_space(*value)).second;
    }
    return true;  // an element of a newer API revision
  });
  if (!ok || !number_text || !etag) return std::nullopt;

  const std::string_view digits = trim_xml_space(*number_text);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), out.number);
  if (error == std::errc::result_out_of_range) {
    out.number = std::numeric_limits<std::uint64_t>::max();
  } else if (error != std::errc{} || end != digits.data() + digits.size()) {
    return std::nullopt;
  }

  std::string_view tag = trim_xml_space(*etag);
  if (tag.size() >= 2 && tag.front() == '"' && tag.back() == '"') tag = tag.substr(1, tag.size() - 2);
  out.part.etag = tag;
  return out;
}

// "true" / "false" in any case, as S3 accepts them.
std::optional<bool> parse_bool(std::string_view text) noexcept {
  text = trim_xml_space(text);
  const auto equals = [text](std::string_view word) {
    if (text.size() != word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      char c = text[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != word[i]) return false;
    }
    return true;
  };
  if (equals("true")) return true;
  if (equals("false")) return false;
  return std::nullopt;
}

// ------------------------------------------------------------------------------------------
// Writing
// ------------------------------------------------------------------------------------------

void append_escaped(std::string& out, std::string_view text) {
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      // A literal CR or CRLF would reach the reader as LF (XML end-of-line handling).
      case '\r': out += "&#13;"; break;
      case '\n': out += "&#10;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
          // Not an XML 1.0 character even as a reference; S3 writes it so all the same, and a
          // client that cannot read it asks for encoding-type=url.
          out += "&#";
          out += std::to_string(static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += ';';
        } else {
          out += c;
        }
    }
  }
}

// S3's encoding-type=url: RFC 3986 percent-encoding of every byte but the unreserved
// characters and '/'.
std::string url_encoded(std::string_view text) {
  constexpr std::string_view hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '.' || c == '_' || c == '~' || c == '/';
    if (keep) {
      out += c;
    } else {
      const auto byte = static_cast<unsigned char>(c);
      out += '%';
      out += hex[byte >> 4U];
      out += hex[byte & 0x0FU];
    }
  }
  return out;
}

std::string quoted_etag(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') return std::string(etag);
  std::string out;
  out.reserve(etag.size() + 2);
  out += '"';
  out += etag;
  out += '"';
  return out;
}

// Builds one response body: the declaration, the root element, its children in call order.
class body_writer {
 public:
  explicit body_writer(std::string_view root, bool s3_namespace = true) : root_(root) {
    out_ += xml_declaration;
    out_ += '<';
    out_ += root;
    if (s3_namespace) {
      out_ += " xmlns=\"";
      out_ += s3_xmlns;
      out_ += '"';
    }
    out_ += '>';
  }

  void open(std::string_view name) {
    out_ += '<';
    out_ += name;
    out_ += '>';
  }
  void close(std::string_view name) {
    out_ += "</";
    out_ += name;
    out_ += '>';
  }
  void text(std::string_view value) { append_escaped(out_, value); }
  void element(std::string_view name, std::string_view value) {
    open(name);
    text(value);
    close(name);
  }
  // A key-like value, url-encoded when the request asked for encoding-type=url.
  void element(std::string_view name, std::string_view value, bool url_encode) {
    if (url_encode) {
      element(name, url_encoded(value));
    } else {
      element(name, value);
    }
  }
  void number(std::string_view name, std::uint64_t value) { element(name, std::to_string(value)); }
  void flag(std::string_view name, bool value) { element(name, value ? "true" : "false"); }
  void time(std::string_view name, std::chrono::system_clock::time_point value) { element(name, iso8601(value)); }
  void etag(std::string_view value) { element("ETag", quoted_etag(value)); }
  void owner(std::string_view element_name, std::string_view id, std::string_view display_name) {
    open(element_name);
    element("ID", id);
    element("DisplayName", display_name);
    close(element_name);
  }

  [[nodiscard]] std::string finish() && {
    close(root_);
    return std::move(out_);
  }

 private:
  std::string out_;
  std::string_view root_;
};

void write_common_prefixes(body_writer& w, const list_page& page) {
  for (const auto& prefix : page.common_prefixes) {
    w.open("CommonPrefixes");
    w.element("Prefix", prefix, page.url_encode);
    w.close("CommonPrefixes");
  }
}

void write_checksum_algorithms(body_writer& w, const object_info& object) {
  for (const auto& [name, value] : object.attributes.checksums) {
    if (const auto algorithm = checksum_algorithm(name); !algorithm.empty()) w.element("ChecksumAlgorithm", algorithm);
  }
}

void write_contents(body_writer& w, const list_page& page, bool with_owner) {
  for (const auto& object : page.contents) {
    w.open("Contents");
    w.element("Key", object.key, page.url_encode);
    w.time("LastModified", object.last_modified);
    w.etag(object.attributes.etag);
    write_checksum_algorithms(w, object);
    w.number("Size", object.size);
    w.element("StorageClass", "STANDARD");
    if (with_owner) w.owner("Owner", page.owner_id, page.owner_name);
    w.close("Contents");
  }
}

void write_encoding_type(body_writer& w, const list_page& page) {
  if (page.url_encode) w.element("EncodingType", "url");
}

std::string copy_result(std::string_view root, std::string_view etag,
                        std::chrono::system_clock::time_point last_modified) {
  body_writer w(root);
  w.time("LastModified", last_modified);
  w.etag(etag);
  return std::move(w).finish();
}

}  // namespace

// --------------------------------------------------------------------------------------------
// Parsers
// --------------------------------------------------------------------------------------------

std::vector<completed_part> parse_complete_multipart_upload(std::string_view body, error_code& ec) {
  ec = errc::malformed_xml;
  pugi::xml_document doc;
  const pugi::xml_node root = load_root(doc, body, "CompleteMultipartUpload");
  if (!root) return {};

  std::vector<raw_part> raw;
  const bool ok = for_each_element(root, [&](const pugi::xml_node& child) {
    if (std::string_view(child.name()) != "Part") return true;
    auto part = parse_part(child);
    if (!part) return false;
    raw.push_back(std::move(*part));
    return true;
  });
  if (!ok || raw.empty()) return {};

  // Every part is well formed; now whether the numbers are acceptable, then their order.
  for (const auto& part : raw) {
    if (part.number < 1 || part.number > max_part_number) {
      ec = errc::invalid_argument;
      return {};
    }
  }
  for (std::size_t i = 1; i < raw.size(); ++i) {
    if (raw[i].number <= raw[i - 1].number) {
      ec = errc::invalid_part_order;
      return {};
    }
  }

  std::vector<completed_part> parts;
  parts.reserve(raw.size());
  for (auto& part : raw) {
    part.part.number = static_cast<std::uint32_t>(part.number);
    parts.push_back(std::move(part.part));
  }
  ec = {};
  return parts;
}

delete_objects parse_delete_objects(std::string_view body, error_code& ec) {
  ec = errc::malformed_xml;
  pugi::xml_document doc;
  const pugi::xml_node root = load_root(doc, body, "Delete");
  if (!root) return {};

  delete_objects result;
  std::optional<std::string> quiet;
  const bool ok = for_each_element(root, [&](const pugi::xml_node& child) {
    const std::string_view name = child.name();
    if (name == "Quiet") return take_once(quiet, child);
    if (name != "Object") return true;
    if (result.objects.size() == max_delete_objects) return false;
    std::optional<std::string> key;
    std::optional<std::string> version_id;
    const bool object_ok = for_each_element(child, [&](const pugi::xml_node& field) {
      const std::string_view field_name = field.name();
      if (field_name == "Key") return take_once(key, field);
      if (field_name == "VersionId") return take_once(version_id, field);
      return true;  // ETag, LastModifiedTime, Size: conditions of newer API revisions
    });
    if (!object_ok || !key) return false;
    result.objects.emplace_back(std::move(*key), version_id.value_or(std::string()));
    return true;
  });
  if (!ok || result.objects.empty()) return {};
  if (quiet) {
    const auto value = parse_bool(*quiet);
    if (!value) return {};
    result.quiet = *value;
  }
  ec = {};
  return result;
}

std::vector<std::pair<std::string, std::string>> parse_tagging(std::string_view body, error_code& ec) {
  ec = errc::malformed_xml;
  pugi::xml_document doc;
  const pugi::xml_node root = load_root(doc, body, "Tagging");
  if (!root) return {};
  std::vector<std::pair<std::string, std::string>> tags;
  bool have_set = false;
  const bool ok = for_each_element(root, [&](const pugi::xml_node& child) {
    if (std::string_view(child.name()) != "TagSet") return true;
    if (have_set) return false;
    have_set = true;
    return for_each_element(child, [&](const pugi::xml_node& tag) {
      if (std::string_view(tag.name()) != "Tag") return false;
      std::optional<std::string> key;
      std::optional<std::string> value;
      const bool tag_ok = for_each_element(tag, [&](const pugi::xml_node& field) {
        const std::string_view name = field.name();
        if (name == "Key") return take_once(key, field);
        if (name == "Value") return take_once(value, field);
        return false;
      });
      if (!tag_ok || !key || !value) return false;
      tags.emplace_back(std::move(*key), std::move(*value));
      return true;
    });
  });
  if (!ok || !have_set) return {};
  ec = {};
  return tags;
}

std::string parse_create_bucket_configuration(std::string_view body, error_code& ec) {
  ec = {};
  if (all_xml_space(body)) return {};
  ec = errc::malformed_xml;
  pugi::xml_document doc;
  const pugi::xml_node root = load_root(doc, body, "CreateBucketConfiguration");
  if (!root) return {};
  std::optional<std::string> location;
  const bool ok = for_each_element(root, [&](const pugi::xml_node& child) {
    if (std::string_view(child.name()) == "LocationConstraint") return take_once(location, child);
    return true;  // Location, Bucket (directory buckets)
  });
  if (!ok) return {};
  ec = {};
  return location ? std::string(trim_xml_space(*location)) : std::string();
}

// --------------------------------------------------------------------------------------------
// Writers
// --------------------------------------------------------------------------------------------

std::string error_body(std::string_view code, std::string_view message, std::string_view resource,
                       std::string_view request_id) {
  body_writer w("Error", false);
  w.element("Code", code);
  w.element("Message", message);
  w.element("Resource", resource);
  w.element("RequestId", request_id);
  return std::move(w).finish();
}

std::string list_buckets(std::string_view owner_id, std::string_view owner_name, std::span<const bucket_info> buckets) {
  body_writer w("ListAllMyBucketsResult");
  w.owner("Owner", owner_id, owner_name);
  w.open("Buckets");
  for (const auto& bucket : buckets) {
    w.open("Bucket");
    w.element("Name", bucket.name);
    w.time("CreationDate", bucket.created);
    w.close("Bucket");
  }
  w.close("Buckets");
  return std::move(w).finish();
}

std::string list_objects_v1(const list_page& page) {
  body_writer w("ListBucketResult");
  w.element("Name", page.bucket);
  // Prefix as the request gave it, even with encoding-type=url: S3's v1 does not encode it (botocore,
  // which asks for url encoding by itself, decodes Delimiter, Marker, NextMarker, keys and common
  // prefixes of a v1 answer, but not Prefix; v2 and ListObjectVersions encode it).
  w.element("Prefix", page.prefix);
  w.element("Marker", page.marker, page.url_encode);
  if (!page.next_marker.empty()) w.element("NextMarker", page.next_marker, page.url_encode);
  w.number("MaxKeys", page.max_keys);
  if (!page.delimiter.empty()) w.element("Delimiter", page.delimiter, page.url_encode);
  w.flag("IsTruncated", page.truncated);
  write_encoding_type(w, page);
  write_contents(w, page, true);
  write_common_prefixes(w, page);
  return std::move(w).finish();
}

std::string list_objects_v2(const list_page& page) {
  body_writer w("ListBucketResult");
  w.element("Name", page.bucket);
  w.element("Prefix", page.prefix, page.url_encode);
  if (page.has_continuation_token || !page.continuation_token.empty()) {
    w.element("ContinuationToken", page.continuation_token);
  }
  if (!page.next_continuation_token.empty()) w.element("NextContinuationToken", page.next_continuation_token);
  if (!page.start_after.empty()) w.element("StartAfter", page.start_after, page.url_encode);
  w.number("KeyCount", page.contents.size() + page.common_prefixes.size());
  w.number("MaxKeys", page.max_keys);
  if (!page.delimiter.empty()) w.element("Delimiter", page.delimiter, page.url_encode);
  w.flag("IsTruncated", page.truncated);
  write_encoding_type(w, page);
  write_contents(w, page, page.fetch_owner);
  write_common_prefixes(w, page);
  return std::move(w).finish();
}

std::string list_object_versions(const list_page& page) {
  body_writer w("ListVersionsResult");
  w.element("Name", page.bucket);
  w.element("Prefix", page.prefix, page.url_encode);
  w.element("KeyMarker", page.marker, page.url_encode);
  w.element("VersionIdMarker", "");
  if (!page.next_marker.empty()) {
    w.element("NextKeyMarker", page.next_marker, page.url_encode);
    w.element("NextVersionIdMarker", "null");
  }
  w.number("MaxKeys", page.max_keys);
  if (!page.delimiter.empty()) w.element("Delimiter", page.delimiter, page.url_encode);
  w.flag("IsTruncated", page.truncated);
  write_encoding_type(w, page);
  for (const auto& object : page.contents) {
    w.open("Version");
    w.element("Key", object.key, page.url_encode);
    w.element("VersionId", "null");
    w.flag("IsLatest", true);
    w.time("LastModified", object.last_modified);
    w.etag(object.attributes.etag);
    write_checksum_algorithms(w, object);
    w.number("Size", object.size);
    w.owner("Owner", page.owner_id, page.owner_name);
    w.element("StorageClass", "STANDARD");
    w.close("Version");
  }
  write_common_prefixes(w, page);
  return std::move(w).finish();
}

std::string tagging(const std::map<std::string, std::string>& tags) {
  body_writer w("Tagging");
  w.open("TagSet");
  for (const auto& [key, value] : tags) {
    w.open("Tag");
    w.element("Key", key);
    w.element("Value", value);
    w.close("Tag");
  }
  w.close("TagSet");
  return std::move(w).finish();
}

std::string initiate_multipart_upload(std::string_view bucket, std::string_view key, std::string_view upload_id) {
  body_writer w("InitiateMultipartUploadResult");
  w.element("Bucket", bucket);
  w.element("Key", key);
  w.element("UploadId", upload_id);
  return std::move(w).finish();
}

std::string complete_multipart_upload(std::string_view location, std::string_view bucket, std::string_view key,
                                      std::string_view etag, const std::map<std::string, std::string>& checksums) {
  body_writer w("CompleteMultipartUploadResult");
  w.element("Location", location);
  w.element("Bucket", bucket);
  w.element("Key", key);
  w.etag(etag);
  for (const auto& [name, value] : checksums) {
    if (const auto element = checksum_element(name); !element.empty() && !value.empty()) w.element(element, value);
  }
  return std::move(w).finish();
}

std::string list_parts(std::string_view bucket, std::string_view key, std::string_view upload_id,
                       std::span<const part_info> parts, std::uint32_t max_parts, bool truncated,
                       std::uint32_t next_marker, std::uint32_t part_number_marker) {
  body_writer w("ListPartsResult");
  w.element("Bucket", bucket);
  w.element("Key", key);
  w.element("UploadId", upload_id);
  w.element("StorageClass", "STANDARD");
  w.number("PartNumberMarker", part_number_marker);
  w.number("NextPartNumberMarker", next_marker);
  w.number("MaxParts", max_parts);
  w.flag("IsTruncated", truncated);
  for (const auto& part : parts) {
    w.open("Part");
    w.number("PartNumber", part.number);
    w.time("LastModified", part.last_modified);
    w.etag(part.etag);
    w.number("Size", part.size);
    for (const auto& [name, value] : part.checksums) {
      if (const auto element = checksum_element(name); !element.empty()) w.element(element, value);
    }
    w.close("Part");
  }
  return std::move(w).finish();
}

std::string list_multipart_uploads(std::string_view bucket, std::string_view prefix,
                                   std::span<const upload_info> uploads, std::string_view owner_id,
                                   std::string_view owner_name) {
  body_writer w("ListMultipartUploadsResult");
  w.element("Bucket", bucket);
  w.element("KeyMarker", "");
  w.element("UploadIdMarker", "");
  w.element("NextKeyMarker", "");
  w.element("NextUploadIdMarker", "");
  w.element("Prefix", prefix);
  w.number("MaxUploads", 1000);
  w.flag("IsTruncated", false);
  for (const auto& upload : uploads) {
    w.open("Upload");
    w.element("Key", upload.key);
    w.element("UploadId", upload.upload_id);
    // minio-js reads Initiator.ID and Owner.ID unconditionally: both are always written.
    w.owner("Initiator", owner_id, owner_name);
    w.owner("Owner", owner_id, owner_name);
    w.element("StorageClass", "STANDARD");
    w.time("Initiated", upload.initiated);
    w.close("Upload");
  }
  return std::move(w).finish();
}

std::string copy_object_result(std::string_view etag, std::chrono::system_clock::time_point last_modified) {
  return copy_result("CopyObjectResult", etag, last_modified);
}

std::string copy_part_result(std::string_view etag, std::chrono::system_clock::time_point last_modified) {
  return copy_result("CopyPartResult", etag, last_modified);
}

std::string delete_result(std::span<const std::string> deleted, std::span<const delete_outcome> errors, bool quiet) {
  body_writer w("DeleteResult");
  if (!quiet) {
    for (const auto& key : deleted) {
      w.open("Deleted");
      w.element("Key", key);
      w.close("Deleted");
    }
  }
  for (const auto& error : errors) {
    w.open("Error");
    w.element("Key", error.key);
    w.element("Code", error.code);
    w.element("Message", error.message);
    w.close("Error");
  }
  return std::move(w).finish();
}

std::string location_constraint(std::string_view region) {
  body_writer w("LocationConstraint");
  if (region != "us-east-1") w.text(region);
  return std::move(w).finish();
}

}  // namespace sluice::s3::xml
