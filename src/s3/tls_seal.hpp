// SPDX-License-Identifier: Apache-2.0
// TLS records sealed in bulk for one write: the large-body path of an HTTPS answer.
#pragma once

#include <openssl/ssl.h>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace sluice::s3::detail {

/// Encrypts plaintext into full-size TLS records (16 KiB each) in a buffer of its own, for one
/// write to the socket. Asio's ssl::stream passes each record through a 17 KiB BIO pair and
/// sends it on its own (one copy, one system call and one timer per 16 KiB); a batch sealed here
/// is one send, with one copy less. Between complete operations of the stream only (no read or
/// write of it in flight): the batch's records follow what the stream wrote before and precede
/// what it writes after, so the TLS sequence stays whole.
class tls_sealer {
 public:
  tls_sealer() = default;
  tls_sealer(const tls_sealer&) = delete;
  tls_sealer& operator=(const tls_sealer&) = delete;
  ~tls_sealer();

  /// Appends the records carrying `plain` to sealed(). False, with `ec` from OpenSSL's error
  /// queue, when the session cannot write (the connection must close then).
  bool seal(SSL* ssl, std::span<const std::byte> plain, boost::system::error_code& ec);
  /// The records sealed since clear().
  [[nodiscard]] std::span<const std::byte> sealed() const noexcept { return out_; }
  /// Empties sealed(), keeping its memory for the next batch.
  void clear() noexcept { out_.clear(); }
  /// Gives the memory back (an idle connection keeps none).
  void release() noexcept { std::vector<std::byte>().swap(out_); }

 private:
  BIO* bio_ = nullptr;  // writes append to out_; made at the first seal()
  std::vector<std::byte> out_;
};

}  // namespace sluice::s3::detail
