// SPDX-License-Identifier: Apache-2.0
// What the file transports share: reads that block a thread, run on an executor the host gives
// (else on the handler's), and no writes.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/detail/completion.hpp>
#include <sluice/file/negotiator.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <cstddef>
#include <tuple>
#include <utility>

namespace sluice::file {

/// CRTP base of a transport that reads negotiated files: `Derived` provides `name` and a blocking
/// `std::size_t read(const region&, const file_remote&, transfer_span, error_code&) const`, and
/// this provides the concept's asynchronous operations around it. Reads only (`reads_only`).
/// The transport must outlive its operations.
template <class Derived>
class reading_transport {
 public:
  using remote_type = file_remote;
  static constexpr bool reads_only = true;

  /// Runs `read` for `span` on the executor given at construction, or else on the handler's
  /// associated executor, and completes on the latter. Completion: `void(error_code,
  /// std::size_t bytes)`.
  template <registration G, class CompletionToken>
  auto async_read(const G& local, const file_remote& remote, transfer_span span, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [this](auto handler, region here, const file_remote& there, transfer_span s) {
          sluice::detail::complete_after_blocking(reads_, std::move(handler), [this, here, there, s] {
            error_code ec;
            const std::size_t n = static_cast<const Derived*>(this)->read(here, there, s, ec);
            return std::make_tuple(ec, n);
          });
        },
        token, local.region(), remote, span);
  }

  /// Files are read only: completes with errc::invalid_argument, nothing written.
  template <registration G, class CompletionToken>
  auto async_write(const G&, const file_remote&, transfer_span, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [](auto handler) {
          sluice::detail::post_completion(std::move(handler), error_code(errc::invalid_argument), std::size_t{0});
        },
        token);
  }

 protected:
  explicit reading_transport(boost::asio::any_io_executor reads) : reads_(std::move(reads)) {}

 private:
  boost::asio::any_io_executor reads_;
};

}  // namespace sluice::file
