// SPDX-License-Identifier: Apache-2.0
// The status line and header fields of a GET's or HEAD's answer, written as text into one buffer
// the connection reuses, and the object headers every such answer carries.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include "support.hpp"

#include <bitset>
#include <charconv>

namespace sluice::s3::detail {

/// What Beast's http::fields and serializer make of an answer's header, without a node per field:
/// "HTTP/1.1 <status> <reason>", one "Name: value" line per set(), Content-Length, Connection:
/// close when the connection ends, the blank line. A value a header cannot carry (a control
/// character: header injection) or a name that is not an HTTP token makes the head invalid, and
/// its answer is not sent. set() appends: a field set twice appears twice, so the overrides of
/// an answer are set first and has() tells the object's own value to stand aside.
class answer_head {
 public:
  void start(http::status status) {
    text_.clear();
    named_.reset();
    valid_ = true;
    text_.append("HTTP/1.1 ");
    append_number(static_cast<unsigned>(status));
    text_.push_back(' ');
    const auto reason = http::obsolete_reason(status);
    text_.append(reason.data(), reason.size()).append("\r\n");
  }
  void set(http::field name, std::string_view value) {
    if (const auto i = static_cast<std::size_t>(name); i < named_.size()) named_.set(i);
    const auto spelled = http::to_string(name);
    line({spelled.data(), spelled.size()}, {}, value);
  }
  void set(std::string_view name, std::string_view value) { line(name, {}, value); }
  /// `prefix` + `name`: x-amz-meta-<name>, x-amz-checksum-<algorithm>.
  void set(std::string_view prefix, std::string_view name, std::string_view value) { line(prefix, name, value); }
  void set(std::string_view name, std::uint64_t number) {
    char digits[20];
    const auto end = std::to_chars(digits, digits + sizeof digits, number).ptr;
    line(name, {}, std::string_view(digits, static_cast<std::size_t>(end - digits)));
  }
  /// Whether set(name, …) was called since start().
  [[nodiscard]] bool has(http::field name) const {
    const auto i = static_cast<std::size_t>(name);
    return i < named_.size() && named_.test(i);
  }
  /// Ends the head; the text to send.
  [[nodiscard]] std::string_view finish(std::uint64_t content_length, bool keep_alive) {
    text_.append("Content-Length: ");
    append_number(content_length);
    text_.append(keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
    return text_;
  }
  /// After finish(): the head followed by `body`, as one piece. For a small body over TLS, where
  /// each buffer written becomes a record of its own.
  [[nodiscard]] std::string_view append_body(const std::byte* body, std::size_t size) {
    text_.append(reinterpret_cast<const char*>(body), size);
    return text_;
  }
  /// False when a name or value could not be sent as it is (see the class comment).
  [[nodiscard]] bool valid() const noexcept { return valid_; }
  /// Gives back the memory of an unusually large head (many metadata fields) once it is sent.
  void trim(std::size_t keep_bytes) {
    if (text_.capacity() > keep_bytes) std::string().swap(text_);
  }

 private:
  static bool is_token_char(unsigned char c) {
    return std::isalnum(c) != 0 ||
           std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
  }
  void line(std::string_view name, std::string_view name_tail, std::string_view value) {
    const auto token = [](std::string_view s) {
      return std::all_of(s.begin(), s.end(), [](char c) { return is_token_char(static_cast<unsigned char>(c)); });
    };
    if (name.empty() || !token(name) || !token(name_tail) || !is_safe_header_value(value)) valid_ = false;
    text_.append(name).append(name_tail).append(": ").append(value).append("\r\n");
  }
  void append_number(std::uint64_t n) {
    char digits[20];
    const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
    text_.append(digits, static_cast<std::size_t>(end - digits));
  }

  std::string text_;
  std::bitset<512> named_;  // the http::field values set since start()
  bool valid_ = true;
};

/// answer_head's interface over Beast's fields, for the answers built as http::response.
class fields_head {
 public:
  explicit fields_head(http::fields& fields) : fields_(fields) {}
  void set(http::field name, std::string_view value) { fields_.set(name, view(value)); }
  void set(std::string_view name, std::string_view value) { fields_.set(view(name), view(value)); }
  void set(std::string_view prefix, std::string_view name, std::string_view value) {
    std::string full;
    full.reserve(prefix.size() + name.size());
    full.append(prefix).append(name);
    fields_.set(full, view(value));
  }
  void set(std::string_view name, std::uint64_t number) { fields_.set(view(name), std::to_string(number)); }
  [[nodiscard]] bool has(http::field name) const { return fields_.count(name) > 0; }

 private:
  static beast::string_view view(std::string_view s) { return {s.data(), s.size()}; }
  http::fields& fields_;
};

/// The fields every answer of the server carries: Server, x-amz-request-id, Date (formatted
/// once a second per thread), x-amz-rdma-reply when there is one. `Head`: answer_head or
/// fields_head.
template <class Head>
void common_fields(Head& fields, std::string_view request_id, std::string_view rdma_reply) {
  fields.set(http::field::server, "sluice");
  fields.set("x-amz-request-id", request_id);
  struct formatted_date {
    std::chrono::sys_seconds second{};
    std::array<char, 29> text{};
  };
  thread_local formatted_date date;
  const auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  if (now != date.second) date = {now, xml::http_date_chars(now)};
  fields.set(http::field::date, std::string_view(date.text.data(), date.text.size()));
  if (!rdma_reply.empty()) fields.set("x-amz-rdma-reply", rdma_reply);
}

/// The object's own headers on a GET or HEAD answer: ETag, Last-Modified, Content-Type, the
/// stored Content-* / Cache-Control / Expires (unless the answer already has that field: a
/// response-* override), the tag count, the user metadata, and the checksums when asked for.
template <class Head>
void object_fields(Head& fields, const object_info& info, bool with_checksums) {
  thread_local std::string etag;  // quoted in a reused buffer: a GET's headers allocate no text
  etag.assign("\"").append(info.attributes.etag).push_back('"');
  fields.set(http::field::etag, std::string_view(etag));
  const auto last_modified = xml::http_date_chars(info.last_modified);
  fields.set(http::field::last_modified, std::string_view(last_modified.data(), last_modified.size()));
  fields.set(http::field::accept_ranges, "bytes");
  const auto stored = [&](http::field name, std::string_view value) {
    if (!value.empty() && !fields.has(name)) fields.set(name, value);
  };
  const std::string_view type = info.attributes.content_type;
  stored(http::field::content_type, type.empty() ? std::string_view("binary/octet-stream") : type);
  stored(http::field::content_encoding, info.attributes.content_encoding);
  stored(http::field::content_disposition, info.attributes.content_disposition);
  stored(http::field::cache_control, info.attributes.cache_control);
  stored(http::field::content_language, info.attributes.content_language);
  stored(http::field::expires, info.attributes.expires);
  if (!info.attributes.tags.empty()) {
    fields.set("x-amz-tagging-count", std::uint64_t{info.attributes.tags.size()});
  }
  thread_local std::string encoded;  // non-ASCII metadata as an RFC 2047 word, in a reused buffer
  for (const auto& [name, value] : info.attributes.metadata) {
    fields.set("x-amz-meta-", name, header_safe_metadata(value, encoded));
  }
  if (with_checksums && !info.attributes.checksums.empty()) {
    bool composite = false;  // a multipart object's "<base64>-N"
    for (const auto& [algorithm, value] : info.attributes.checksums) {
      fields.set("x-amz-checksum-", algorithm, value);
      composite = composite || value.find('-') != std::string::npos;
    }
    fields.set("x-amz-checksum-type", composite ? std::string_view("COMPOSITE") : std::string_view("FULL_OBJECT"));
  }
}

}  // namespace sluice::s3::detail
