// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/checksum.hpp; included by src/s3/s3.cpp.
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/error.hpp>

#include "common/text.hpp"

#include <isa-l/crc.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>
#include <utility>

namespace sluice::s3 {

namespace {
namespace checksum_detail {

const unsigned char* as_uchars(const std::byte* p) noexcept { return reinterpret_cast<const unsigned char*>(p); }

// Fetched once for the process (OpenSSL 3's EVP_md5() and friends are fetched again, by name and
// under a lock, at every EVP_DigestInit_ex: a cost per request). A provider without the
// algorithm (MD5 under FIPS) leaves the legacy handle, which fails at init as before.
const EVP_MD* fetched(const char* name, const EVP_MD* legacy) noexcept {
  const EVP_MD* md = EVP_MD_fetch(nullptr, name, nullptr);
  return md != nullptr ? md : legacy;
}

const EVP_MD* evp_md_of(digest_kind kind) noexcept {
  switch (kind) {
    case digest_kind::md5: {
      static const EVP_MD* const md = fetched("MD5", EVP_md5());
      return md;
    }
    case digest_kind::sha1: {
      static const EVP_MD* const md = fetched("SHA1", EVP_sha1());
      return md;
    }
    case digest_kind::sha256: {
      static const EVP_MD* const md = fetched("SHA256", EVP_sha256());
      return md;
    }
    case digest_kind::crc32:
    case digest_kind::crc32c: return nullptr;
  }
  return nullptr;
}

[[noreturn]] void throw_openssl(const char* what) { throw system_error(make_error_code(errc::internal_error), what); }

// ISA-L's CRC32C entry point continues from the raw register (start 0xFFFFFFFF, final value
// inverted) and takes an int length; its CRC32 (gzip, reflected) takes and returns the finished
// value, as zlib's crc32() does, so it chains from 0.
constexpr std::uint32_t crc32c_init = 0xFFFFFFFFu;

using ::sluice::detail::iequals;

constexpr std::string_view base64_alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The 6-bit value of a base64 character; -1 for anything else ('=' included).
int base64_value(char c) noexcept {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace checksum_detail
}  // namespace

std::size_t digest_size(digest_kind kind) noexcept {
  switch (kind) {
    case digest_kind::md5: return 16;
    case digest_kind::sha1: return 20;
    case digest_kind::sha256: return 32;
    case digest_kind::crc32:
    case digest_kind::crc32c: return 4;
  }
  return 0;
}

digest::digest(digest_kind kind) : kind_(kind) {
  if (checksum_detail::evp_md_of(kind_) != nullptr) {
    ctx_ = EVP_MD_CTX_new();
    if (ctx_ == nullptr) throw std::bad_alloc();
  }
  try {
    reset();
  } catch (...) {
    EVP_MD_CTX_free(ctx_);
    throw;
  }
}

digest::digest(digest&& other) noexcept
    : kind_(other.kind_), ctx_(std::exchange(other.ctx_, nullptr)), crc_(other.crc_) {}

digest& digest::operator=(digest&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(ctx_);
    kind_ = other.kind_;
    ctx_ = std::exchange(other.ctx_, nullptr);
    crc_ = other.crc_;
  }
  return *this;
}

digest::~digest() { EVP_MD_CTX_free(ctx_); }

void digest::reset() {
  switch (kind_) {
    case digest_kind::crc32: crc_ = 0; return;
    case digest_kind::crc32c: crc_ = checksum_detail::crc32c_init; return;
    case digest_kind::md5:
    case digest_kind::sha1:
    case digest_kind::sha256:
      if (EVP_DigestInit_ex(ctx_, checksum_detail::evp_md_of(kind_), nullptr) != 1) {
        checksum_detail::throw_openssl("EVP_DigestInit_ex");
      }
      return;
  }
}

void digest::update(std::span<const std::byte> data) {
  if (data.empty()) return;
  switch (kind_) {
    case digest_kind::crc32: crc_ = crc32_gzip_refl(crc_, checksum_detail::as_uchars(data.data()), data.size()); return;
    case digest_kind::crc32c:
      // crc32_iscsi takes an int length and a non-const pointer (it only reads the buffer).
      while (!data.empty()) {
        const std::size_t n = std::min<std::size_t>(data.size(), std::size_t{1} << 30);
        crc_ =
            crc32_iscsi(const_cast<unsigned char*>(checksum_detail::as_uchars(data.data())), static_cast<int>(n), crc_);
        data = data.subspan(n);
      }
      return;
    case digest_kind::md5:
    case digest_kind::sha1:
    case digest_kind::sha256:
      if (EVP_DigestUpdate(ctx_, data.data(), data.size()) != 1) checksum_detail::throw_openssl("EVP_DigestUpdate");
      return;
  }
}

void digest::update(std::string_view text) { update(std::as_bytes(std::span(text.data(), text.size()))); }

std::vector<std::byte> digest::finish() {
  std::vector<std::byte> out(digest_size(kind_));
  switch (kind_) {
    case digest_kind::crc32:
    case digest_kind::crc32c: {
      const std::uint32_t value = kind_ == digest_kind::crc32c ? (crc_ ^ 0xFFFFFFFFu) : crc_;
      for (std::size_t i = 0; i < 4; ++i) out[i] = static_cast<std::byte>((value >> (24 - 8 * i)) & 0xFFu);
      break;
    }
    case digest_kind::md5:
    case digest_kind::sha1:
    case digest_kind::sha256: {
      unsigned int length = 0;
      if (EVP_DigestFinal_ex(ctx_, reinterpret_cast<unsigned char*>(out.data()), &length) != 1) {
        checksum_detail::throw_openssl("EVP_DigestFinal_ex");
      }
      out.resize(length);
      break;
    }
  }
  reset();
  return out;
}

std::string_view header_name(checksum_algorithm algorithm) noexcept {
  switch (algorithm) {
    case checksum_algorithm::crc32: return "x-amz-checksum-crc32";
    case checksum_algorithm::crc32c: return "x-amz-checksum-crc32c";
    case checksum_algorithm::sha1: return "x-amz-checksum-sha1";
    case checksum_algorithm::sha256: return "x-amz-checksum-sha256";
  }
  return {};
}

std::string_view algorithm_name(checksum_algorithm algorithm) noexcept {
  switch (algorithm) {
    case checksum_algorithm::crc32: return "CRC32";
    case checksum_algorithm::crc32c: return "CRC32C";
    case checksum_algorithm::sha1: return "SHA1";
    case checksum_algorithm::sha256: return "SHA256";
  }
  return {};
}

namespace {
constexpr std::array all_checksum_algorithms{checksum_algorithm::crc32, checksum_algorithm::crc32c,
                                             checksum_algorithm::sha1, checksum_algorithm::sha256};
}  // namespace

std::optional<checksum_algorithm> parse_checksum_algorithm(std::string_view name) noexcept {
  for (const auto algorithm : all_checksum_algorithms) {
    if (checksum_detail::iequals(name, algorithm_name(algorithm))) return algorithm;
  }
  return std::nullopt;
}

std::optional<checksum_algorithm> checksum_algorithm_of_header(std::string_view name) noexcept {
  for (const auto algorithm : all_checksum_algorithms) {
    if (checksum_detail::iequals(name, header_name(algorithm))) return algorithm;
  }
  return std::nullopt;
}

digest_kind digest_kind_of(checksum_algorithm algorithm) noexcept {
  switch (algorithm) {
    case checksum_algorithm::crc32: return digest_kind::crc32;
    case checksum_algorithm::crc32c: return digest_kind::crc32c;
    case checksum_algorithm::sha1: return digest_kind::sha1;
    case checksum_algorithm::sha256: return digest_kind::sha256;
  }
  return digest_kind::sha256;
}

std::string to_hex(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  append_hex(out, bytes);
  return out;
}

void append_hex(std::string& out, std::span<const std::byte> bytes) { ::sluice::detail::append_hex(out, bytes); }

void hex_into(std::span<char, 64> out, const std::array<std::byte, 32>& bytes) noexcept {
  ::sluice::detail::hex_into(out.data(), bytes);
}

std::string base64_encode(std::span<const std::byte> bytes) {
  const auto& alphabet = checksum_detail::base64_alphabet;
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = std::to_integer<std::uint32_t>(bytes[i]) << 16 |
                            std::to_integer<std::uint32_t>(bytes[i + 1]) << 8 |
                            std::to_integer<std::uint32_t>(bytes[i + 2]);
    out.push_back(alphabet[(v >> 18) & 63u]);
    out.push_back(alphabet[(v >> 12) & 63u]);
    out.push_back(alphabet[(v >> 6) & 63u]);
    out.push_back(alphabet[v & 63u]);
  }
  const std::size_t rest = bytes.size() - i;
  if (rest == 1) {
    const std::uint32_t v = std::to_integer<std::uint32_t>(bytes[i]) << 16;
    out.push_back(alphabet[(v >> 18) & 63u]);
    out.push_back(alphabet[(v >> 12) & 63u]);
    out.append("==");
  } else if (rest == 2) {
    const std::uint32_t v =
        std::to_integer<std::uint32_t>(bytes[i]) << 16 | std::to_integer<std::uint32_t>(bytes[i + 1]) << 8;
    out.push_back(alphabet[(v >> 18) & 63u]);
    out.push_back(alphabet[(v >> 12) & 63u]);
    out.push_back(alphabet[(v >> 6) & 63u]);
    out.push_back('=');
  }
  return out;
}

std::optional<std::vector<std::byte>> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = (text[text.size() - 2] == '=') ? 2 : 1;
  std::vector<std::byte> out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const std::size_t data_chars = last ? 4 - padding : 4;
    std::uint32_t v = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      int value = 0;
      if (j < data_chars) {
        value = checksum_detail::base64_value(text[i + j]);
        if (value < 0) return std::nullopt;  // a bad character, or '=' before the end
      }
      v = v << 6 | static_cast<std::uint32_t>(value);
    }
    out.push_back(static_cast<std::byte>((v >> 16) & 0xFFu));
    if (data_chars >= 3) out.push_back(static_cast<std::byte>((v >> 8) & 0xFFu));
    if (data_chars == 4) out.push_back(static_cast<std::byte>(v & 0xFFu));
    // Canonical only: the bits below the last decoded byte must be zero.
    if (data_chars == 2 && (v & 0xFFFFu) != 0) return std::nullopt;
    if (data_chars == 3 && (v & 0xFFu) != 0) return std::nullopt;
  }
  return out;
}

// SHA-256 of small inputs (SigV4's canonical request, HMAC) with OpenSSL's low-level calls: OpenSSL
// 3 deprecates them, but they hash on the stack, while an EVP context frees and makes its provider
// context at every init (3.0): an allocation per digest, several per HMAC, on every request's path.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
std::array<std::byte, 32> sha256(std::span<const std::byte> data) {
  std::array<std::byte, 32> out{};
  SHA256_CTX ctx;
  if (SHA256_Init(&ctx) != 1 || SHA256_Update(&ctx, data.data(), data.size()) != 1 ||
      SHA256_Final(reinterpret_cast<unsigned char*>(out.data()), &ctx) != 1) {
    checksum_detail::throw_openssl("SHA-256");
  }
  return out;
}

std::array<std::byte, 32> hmac_sha256(std::span<const std::byte> key, std::string_view data) {
  // RFC 2104 over SHA-256 (64-byte blocks): H((K ^ opad) || H((K ^ ipad) || data)), a key longer
  // than a block hashed first.
  constexpr std::size_t block_bytes = 64;
  std::array<unsigned char, block_bytes> padded{};
  if (key.size() > block_bytes) {
    const auto hashed = sha256(key);
    std::memcpy(padded.data(), hashed.data(), hashed.size());
  } else if (!key.empty()) {
    std::memcpy(padded.data(), key.data(), key.size());
  }
  std::array<unsigned char, block_bytes> pad{};
  std::array<unsigned char, 32> inner{};
  std::array<std::byte, 32> out{};
  SHA256_CTX ctx;
  const auto xor_into = [&](unsigned char with) {
    for (std::size_t i = 0; i < block_bytes; ++i) pad[i] = static_cast<unsigned char>(padded[i] ^ with);
  };
  xor_into(0x36);
  bool ok = SHA256_Init(&ctx) == 1 && SHA256_Update(&ctx, pad.data(), pad.size()) == 1 &&
            SHA256_Update(&ctx, data.data(), data.size()) == 1 && SHA256_Final(inner.data(), &ctx) == 1;
  xor_into(0x5c);
  ok = ok && SHA256_Init(&ctx) == 1 && SHA256_Update(&ctx, pad.data(), pad.size()) == 1 &&
       SHA256_Update(&ctx, inner.data(), inner.size()) == 1 &&
       SHA256_Final(reinterpret_cast<unsigned char*>(out.data()), &ctx) == 1;
  OPENSSL_cleanse(padded.data(), padded.size());  // the key, and what is derived from it
  OPENSSL_cleanse(pad.data(), pad.size());
  OPENSSL_cleanse(inner.data(), inner.size());
  OPENSSL_cleanse(&ctx, sizeof ctx);
  if (!ok) checksum_detail::throw_openssl("HMAC");
  return out;
}
#pragma GCC diagnostic pop

std::string sha256_hex(std::span<const std::byte> data) { return to_hex(sha256(data)); }

std::string sha256_hex(std::string_view text) { return sha256_hex(std::as_bytes(std::span(text.data(), text.size()))); }

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace sluice::s3
