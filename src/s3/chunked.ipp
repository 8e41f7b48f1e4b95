// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/chunked.hpp; included by src/s3/s3.cpp.
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/chunked.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/sigv4.hpp>

#include "common/text.hpp"

#include <algorithm>
#include <utility>

namespace sluice::s3 {

namespace {
namespace chunked_detail {

constexpr std::string_view signature_prefix = "chunk-signature=";
constexpr std::string_view trailer_signature_name = "x-amz-trailer-signature";

using ::sluice::detail::hex_value;
constexpr auto to_lower = ::sluice::detail::to_lower_ascii;

bool is_signature(std::string_view text) noexcept {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) { return hex_value(c) >= 0; });
}

bool is_blank(char c) noexcept { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view text) noexcept {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

bool is_token_char(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Control characters other than tab have no place in a header line.
bool is_control(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\t') || u == 0x7F;
}

error_code invalid() { return make_error_code(errc::invalid_request); }

}  // namespace chunked_detail
}  // namespace

std::optional<payload_mode> parse_payload_mode(std::string_view content_sha256) noexcept {
  if (content_sha256 == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD") return payload_mode::streaming_signed;
  if (content_sha256 == "STREAMING-UNSIGNED-PAYLOAD-TRAILER") return payload_mode::streaming_unsigned_trailer;
  if (content_sha256 == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER") return payload_mode::streaming_signed_trailer;
  return std::nullopt;
}

aws_chunked_decoder::aws_chunked_decoder(options opts)
    : opts_(std::move(opts)), previous_signature_(opts_.seed_signature) {
  if (is_signed()) chunk_hash_.emplace(digest_kind::sha256);
  if (opts_.trailer_checksum) checksum_.emplace(digest_kind_of(*opts_.trailer_checksum));
}

bool aws_chunked_decoder::is_signed() const noexcept { return opts_.mode != payload_mode::streaming_unsigned_trailer; }

bool aws_chunked_decoder::fail(error_code& ec, error_code error) {
  state_ = state::failed;
  error_ = error;
  ec = error;
  return false;
}

std::size_t aws_chunked_decoder::feed(std::span<const std::byte> input,
                                      const std::function<void(std::span<const std::byte>)>& on_payload,
                                      error_code& ec) {
  ec.clear();
  if (state_ == state::failed) {
    ec = error_;
    return 0;
  }
  std::size_t i = 0;
  while (i < input.size() && state_ != state::done) {
    switch (state_) {
      case state::chunk_data: {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, input.size() - i));
        const auto part = input.subspan(i, n);
        if (chunk_hash_) chunk_hash_->update(part);
        if (checksum_) checksum_->update(part);
        on_payload(part);
        decoded_ += n;
        remaining_ -= n;
        i += n;
        if (remaining_ == 0) {
          if (!check_chunk_signature(ec)) return i;
          state_ = state::chunk_cr;
        }
        break;
      }
      case state::chunk_cr:
      case state::chunk_lf: {
        const char expected = state_ == state::chunk_cr ? '\r' : '\n';
        if (static_cast<char>(input[i]) != expected) {
          fail(ec, chunked_detail::invalid());
          return i;
        }
        ++i;
        state_ = state_ == state::chunk_cr ? state::chunk_lf : state::chunk_header;
        break;
      }
      case state::chunk_header:
      case state::trailer: {
        const char c = static_cast<char>(input[i]);
        ++i;
        if (state_ == state::trailer && ++trailer_bytes_ > opts_.max_chunk_header) {
          fail(ec, chunked_detail::invalid());
          return i;
        }
        const bool after_cr = !line_.empty() && line_.back() == '\r';
        if (c == '\n') {
          if (!after_cr) {
            fail(ec, chunked_detail::invalid());  // a bare LF
            return i;
          }
          line_.pop_back();
          const bool ok = state_ == state::chunk_header ? on_header_line(ec) : on_trailer_line(ec);
          line_.clear();
          if (!ok) return i;
          break;
        }
        if (after_cr || (c != '\r' && chunked_detail::is_control(c)) || line_.size() >= opts_.max_chunk_header) {
          fail(ec, chunked_detail::invalid());
          return i;
        }
        line_.push_back(c);
        break;
      }
      case state::done:
      case state::failed: break;
    }
  }
  return i;
}

void aws_chunked_decoder::finish(error_code& ec) const {
  if (state_ == state::failed) {
    ec = error_;
  } else if (state_ != state::done) {
    ec = make_error_code(errc::incomplete_body);
  } else {
    ec.clear();
  }
}

bool aws_chunked_decoder::on_header_line(error_code& ec) {
  const std::string_view line = line_;
  const auto semi = line.find(';');
  const std::string_view size_text = line.substr(0, semi);
  if (size_text.empty() || size_text.size() > 16) return fail(ec, chunked_detail::invalid());
  std::uint64_t size = 0;
  for (const char c : size_text) {
    const int v = chunked_detail::hex_value(c);
    if (v < 0) return fail(ec, chunked_detail::invalid());
    size = size << 4 | static_cast<std::uint64_t>(v);
  }
  if (is_signed()) {
    if (semi == std::string_view::npos) return fail(ec, chunked_detail::invalid());
    const std::string_view extension = line.substr(semi + 1);
    if (!extension.starts_with(chunked_detail::signature_prefix) ||
        !chunked_detail::is_signature(extension.substr(chunked_detail::signature_prefix.size()))) {
      return fail(ec, chunked_detail::invalid());
    }
    chunk_signature_ = extension.substr(chunked_detail::signature_prefix.size());
  }
  // Unsigned chunks may carry extensions; none means anything to S3, so they are ignored.
  if (size > opts_.decoded_length - decoded_) return fail(ec, chunked_detail::invalid());
  if (size != 0) {
    remaining_ = size;
    state_ = state::chunk_data;
    return true;
  }
  if (!check_chunk_signature(ec)) return false;
  if (decoded_ != opts_.decoded_length) return fail(ec, chunked_detail::invalid());
  state_ = state::trailer;
  return true;
}

bool aws_chunked_decoder::check_chunk_signature(error_code& ec) {
  if (!is_signed()) return true;
  std::string to_sign = "AWS4-HMAC-SHA256-PAYLOAD\n";
  to_sign.append(opts_.amz_date).append("\n").append(opts_.scope).append("\n");
  to_sign.append(previous_signature_).append("\n").append(empty_payload_sha256).append("\n");
  to_sign.append(to_hex(chunk_hash_->finish()));
  if (!constant_time_equal(signature(opts_.signing_key, to_sign), chunk_signature_)) {
    return fail(ec, make_error_code(errc::signature_does_not_match));
  }
  previous_signature_ = std::move(chunk_signature_);
  chunk_signature_.clear();
  return true;
}

bool aws_chunked_decoder::on_trailer_line(error_code& ec) {
  const std::string_view line = line_;
  if (line.empty()) {
    // minio-go ends the final chunk with its (empty) data's CRLF before the trailer; where a
    // trailer must follow, one such empty line cannot be the end and is skipped.
    const bool trailer_required = opts_.mode == payload_mode::streaming_signed_trailer ||
                                  (opts_.mode == payload_mode::streaming_unsigned_trailer && opts_.trailer_checksum);
    if (trailer_required && !trailer_lines_seen_ && !skipped_blank_line_) {
      skipped_blank_line_ = true;
      return true;
    }
    return finish_trailer(ec);
  }
  trailer_lines_seen_ = true;
  // No trailer in streaming_signed mode, and nothing after the trailer signature.
  if (opts_.mode == payload_mode::streaming_signed || !trailer_signature_.empty()) {
    return fail(ec, chunked_detail::invalid());
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return fail(ec, chunked_detail::invalid());
  const std::string_view raw_name = chunked_detail::trim(line.substr(0, colon));
  if (raw_name.empty() || !std::all_of(raw_name.begin(), raw_name.end(), chunked_detail::is_token_char)) {
    return fail(ec, chunked_detail::invalid());
  }
  std::string name(raw_name);
  std::transform(name.begin(), name.end(), name.begin(), chunked_detail::to_lower);
  const std::string_view value = chunked_detail::trim(line.substr(colon + 1));
  if (name == chunked_detail::trailer_signature_name) {
    if (opts_.mode != payload_mode::streaming_signed_trailer || !chunked_detail::is_signature(value)) {
      return fail(ec, chunked_detail::invalid());
    }
    trailer_signature_ = value;
    return true;
  }
  if (!trailers_.emplace(std::move(name), std::string(value)).second) return fail(ec, chunked_detail::invalid());
  return true;
}

bool aws_chunked_decoder::finish_trailer(error_code& ec) {
  if (opts_.mode == payload_mode::streaming_signed_trailer) {
    if (trailer_signature_.empty()) return fail(ec, make_error_code(errc::signature_does_not_match));
    // The trailer's canonical form: "name:value\n" for each field, sorted by name (the map's
    // order), without the signature itself; chained from the final chunk's signature.
    std::string canonical;
    for (const auto& [name, value] : trailers_) canonical.append(name).append(":").append(value).append("\n");
    std::string to_sign = "AWS4-HMAC-SHA256-TRAILER\n";
    to_sign.append(opts_.amz_date).append("\n").append(opts_.scope).append("\n");
    to_sign.append(previous_signature_).append("\n").append(sha256_hex(canonical));
    if (!constant_time_equal(signature(opts_.signing_key, to_sign), trailer_signature_)) {
      return fail(ec, make_error_code(errc::signature_does_not_match));
    }
  }
  if (checksum_) {
    const auto it = trailers_.find(std::string(header_name(*opts_.trailer_checksum)));
    if (it == trailers_.end()) return fail(ec, chunked_detail::invalid());
    const auto claimed = base64_decode(it->second);
    if (!claimed) return fail(ec, chunked_detail::invalid());
    if (checksum_->finish() != *claimed) return fail(ec, make_error_code(errc::bad_digest));
  }
  state_ = state::done;
  return true;
}

}  // namespace sluice::s3
