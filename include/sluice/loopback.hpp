// SPDX-License-Identifier: Apache-2.0
// The loopback transport: memcpy between two regions of this process. The data plane of
// in-process paths (tests, examples, embedding both ends in one binary).
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/detail/completion.hpp>

#include <boost/asio/async_result.hpp>

#include <cstring>
#include <string_view>

namespace sluice {

/// Moves bytes between a local registration and a remote region in the same process with
/// memcpy. Both regions must be host-accessible (GPU memory: errc::unsupported_memory).
/// Stateless; any number of operations may run at once.
class loopback_transport {
 public:
  /// The far side is another region of this process.
  using remote_type = region;
  static constexpr std::string_view name = "loopback";

  /// Copies `span.length` bytes from `remote` at `span.remote_offset` into `local` at
  /// `span.local_offset`. Completion: `void(error_code, std::size_t bytes)`, on the handler's
  /// associated executor. Errors (nothing written): region_too_small (span outside `local`),
  /// bad_range (span outside `remote`), unsupported_memory. Both regions must stay valid
  /// until completion.
  template <registration G, class CompletionToken>
  auto async_read(const G& local, const region& remote, transfer_span span, CompletionToken&& token) {
    return initiate(direction::get, local.region(), remote, span, std::forward<CompletionToken>(token));
  }

  /// Copies `span.length` bytes from `local` at `span.local_offset` into `remote` at
  /// `span.remote_offset`. Same completion, errors and lifetimes as async_read.
  template <registration G, class CompletionToken>
  auto async_write(const G& local, const region& remote, transfer_span span, CompletionToken&& token) {
    return initiate(direction::put, local.region(), remote, span, std::forward<CompletionToken>(token));
  }

  /// The synchronous core: checks the span against both regions, then copies remote → local
  /// (get) or local → remote (put). Returns the bytes copied; on error copies nothing.
  static std::size_t copy(direction dir, const region& local, const region& remote, transfer_span span,
                          error_code& ec) {
    if (!local.contains(span.local_offset, span.length)) {
      ec = errc::region_too_small;
      return 0;
    }
    if (!remote.contains(span.remote_offset, span.length)) {
      ec = errc::bad_range;
      return 0;
    }
    if (!local.host_accessible() || !remote.host_accessible()) {
      ec = errc::unsupported_memory;
      return 0;
    }
    ec = {};
    const auto length = static_cast<std::size_t>(span.length);
    if (length != 0) {
      std::byte* here = local.bytes() + span.local_offset;
      std::byte* there = remote.bytes() + span.remote_offset;
      if (dir == direction::get) {
        std::memmove(here, there, length);
      } else {
        std::memmove(there, here, length);
      }
    }
    return length;
  }

 private:
  template <class CompletionToken>
  static auto initiate(direction dir, region local, region remote, transfer_span span, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [](auto handler, direction d, region here, region there, transfer_span s) {
          error_code ec;
          const std::size_t n = copy(d, here, there, s, ec);
          detail::post_completion(std::move(handler), ec, n);
        },
        token, dir, local, remote, span);
  }
};

}  // namespace sluice
