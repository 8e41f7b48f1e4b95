// SPDX-License-Identifier: Apache-2.0
// fallback_path: paths in order of preference, chosen per transfer. The first path runs; when
// it fails in a way that says "this path, not this transfer" (declined by the peer, the fabric
// failed) the next one runs, and the result says which ran and why the others did not.
#pragma once

#include <sluice/any_path.hpp>
#include <sluice/detail/blocking.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/system_executor.hpp>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace sluice {

/// The default test of fallback_path: the peer declined this path (s3::errc::rdma_not_supported,
/// errc::declined) or its fabric failed (a libfabric error, s3::errc::rdma_transfer_failed).
/// Everything else (no such object, access denied, a bad range, a full store) would fail the same
/// way on every path, so it ends the transfer.
[[nodiscard]] inline bool falls_back_on(const error_code& ec) noexcept {
  return ec == condition::declined || ec == condition::fabric_failed;
}

/// Tries `paths` in order for each transfer. A path that fails with an error `falls_back`
/// accepts is recorded in transfer_result::skipped and the next path runs from the start: a get
/// writes the whole range again, a put sends the whole source again (an object is published only
/// by a transfer that succeeded, so nothing half-written is ever visible). The last path's error,
/// and any error `falls_back` refuses, ends the transfer. Same operations and guarantees as path;
/// several transfers may run at once.
class fallback_path : public detail::blocking_transfers<fallback_path> {
 public:
  using executor_type = boost::asio::any_io_executor;

  /// Throws std::invalid_argument when `paths` is empty.
  explicit fallback_path(std::vector<any_path> paths, std::function<bool(const error_code&)> falls_back = falls_back_on,
                         executor_type executor = boost::asio::system_executor())
      : paths_(std::move(paths)), falls_back_(std::move(falls_back)), executor_(std::move(executor)) {
    if (paths_.empty()) throw std::invalid_argument("sluice::fallback_path: no paths");
  }

  [[nodiscard]] executor_type get_executor() const noexcept { return executor_; }
  /// The paths, in the order they are tried.
  [[nodiscard]] const std::vector<any_path>& paths() const noexcept { return paths_; }

  /// As path::async_get. Completion: `void(error_code, transfer_result)`.
  template <class CompletionToken>
  auto async_get(const object_ref& object, const region& destination, const byte_range& range,
                 CompletionToken&& token) {
    return boost::asio::async_compose<CompletionToken, void(error_code, transfer_result)>(
        operation{this, object, destination, range, direction::get}, token, executor_);
  }

  /// As path::async_put. Completion: `void(error_code, transfer_result)`.
  template <class CompletionToken>
  auto async_put(const object_ref& object, const const_region& source, CompletionToken&& token) {
    return boost::asio::async_compose<CompletionToken, void(error_code, transfer_result)>(
        operation{this, object, detail::readable_as_region(source), byte_range{0, source.size}, direction::put}, token,
        executor_);
  }

 private:
  struct operation {
    fallback_path* owner;
    object_ref object;
    region memory;
    byte_range range;
    direction dir;
    std::size_t next = 0;
    std::vector<skipped_path> skipped{};

    template <class Self>
    void operator()(Self& self) {
      start(self);
    }

    template <class Self>
    void operator()(Self& self, error_code ec, transfer_result result) {
      const any_path& tried = owner->paths_[next - 1];
      if (ec && next < owner->paths_.size() && owner->falls_back_(ec)) {
        skipped.push_back({tried.negotiator_name(), tried.transport_name(), ec});
        start(self);
        return;
      }
      result.negotiator = tried.negotiator_name();
      result.transport = tried.transport_name();
      result.skipped = std::move(skipped);
      self.complete(ec, std::move(result));
    }

    // The arguments are copied out first: moving `self` into the handler moves this operation,
    // and the path copies what it keeps before its initiation returns.
    template <class Self>
    void start(Self& self) {
      any_path& p = owner->paths_[next++];
      const object_ref o = object;
      const region m = memory;
      const byte_range r = range;
      if (dir == direction::get) {
        p.async_get(o, m, r, std::move(self));
      } else {
        p.async_put(o, m, std::move(self));
      }
    }
  };

  std::vector<any_path> paths_;
  std::function<bool(const error_code&)> falls_back_;
  executor_type executor_;
};

}  // namespace sluice
