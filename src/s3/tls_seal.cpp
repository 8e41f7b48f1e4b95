// SPDX-License-Identifier: Apache-2.0
// TLS records sealed in bulk (tls_seal.hpp).
#include "tls_seal.hpp"

#include <openssl/err.h>

#include <boost/asio/ssl/error.hpp>

#include <cstring>
#include <new>

namespace sluice::s3::detail {
namespace {

// A sink BIO: every write appends to the std::vector<std::byte> in its data pointer.
int sink_write(BIO* bio, const char* data, std::size_t size, std::size_t* written) {
  auto* out = static_cast<std::vector<std::byte>*>(BIO_get_data(bio));
  const auto* first = reinterpret_cast<const std::byte*>(data);
  try {
    out->insert(out->end(), first, first + size);
  } catch (const std::bad_alloc&) {
    return 0;
  }
  *written = size;
  return 1;
}

long sink_ctrl(BIO*, int command, long, void*) {
  return command == BIO_CTRL_FLUSH ? 1 : 0;  // nothing is buffered; no other control applies
}

int sink_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* sink_method() {
  static const BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice tls seal");
    if (m == nullptr) return static_cast<BIO_METHOD*>(nullptr);
    BIO_meth_set_write_ex(m, sink_write);
    BIO_meth_set_ctrl(m, sink_ctrl);
    BIO_meth_set_create(m, sink_create);
    return m;
  }();
  return method;
}

boost::system::error_code openssl_error() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return boost::asio::ssl::error::stream_truncated;  // no reason queued: the session is unusable
  return {static_cast<int>(code), boost::asio::error::get_ssl_category()};
}

}  // namespace

tls_sealer::~tls_sealer() {
  if (bio_ != nullptr) BIO_free(bio_);
}

bool tls_sealer::seal(SSL* ssl, std::span<const std::byte> plain, boost::system::error_code& ec) {
  ec = {};
  if (bio_ == nullptr) {
    const BIO_METHOD* method = sink_method();
    bio_ = method != nullptr ? BIO_new(method) : nullptr;
    if (bio_ == nullptr) {
      ec = openssl_error();
      return false;
    }
    BIO_set_data(bio_, &out_);
  }
  BIO* stream_bio = SSL_get_wbio(ssl);
  if (stream_bio == nullptr || plain.empty()) return stream_bio != nullptr;
  // The stream's BIO steps aside for the batch. SSL_set0_wbio releases one reference of the BIO
  // it replaces and takes over the one given: one more of each keeps both alive and balanced.
  BIO_up_ref(stream_bio);
  BIO_up_ref(bio_);
  SSL_set0_wbio(ssl, bio_);
  // Whole records in one call (no partial writes), and the record buffer kept for the batch.
  const auto modes = SSL_get_mode(ssl);
  SSL_clear_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_RELEASE_BUFFERS);
  ERR_clear_error();
  std::size_t done = 0;
  bool ok = true;
  while (done < plain.size()) {
    std::size_t n = 0;
    if (SSL_write_ex(ssl, plain.data() + done, plain.size() - done, &n) != 1) {
      ok = false;
      ec = openssl_error();
      break;
    }
    done += n;
  }
  SSL_set_mode(ssl, modes);
  SSL_set0_wbio(ssl, stream_bio);
  return ok;
}

}  // namespace sluice::s3::detail
