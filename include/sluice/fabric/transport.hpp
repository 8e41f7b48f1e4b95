// SPDX-License-Identifier: Apache-2.0
// The fabric transport: libfabric RMA between a local registration and a peer's registered
// memory, on any provider (verbs, efa, shm, tcp;ofi_rxm).
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/fabric/registrar.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <memory>
#include <string_view>
#include <utility>

namespace sluice::fabric {

/// A peer's registered memory: which peer (an fi_addr_t of the transport's endpoint) and the
/// segment it granted.
struct remote_memory {
  fi_addr_t peer = FI_ADDR_UNSPEC;
  remote_segment segment;
};

/// Moves bytes with fi_write / fi_read on one endpoint. Any number of operations may run at
/// once; each completes exactly once.
class transport {
 public:
  using remote_type = remote_memory;
  static constexpr std::string_view name = "fabric";

  explicit transport(std::shared_ptr<endpoint> ep) noexcept : endpoint_(std::move(ep)) {}

  /// RMA-reads `span.length` bytes of `remote` at `span.remote_offset` into `local` at
  /// `span.local_offset`. Completion: `void(error_code, std::size_t bytes)` on the handler's
  /// associated executor, whose work is kept outstanding meanwhile; a handler with no executor
  /// of its own (a plain function object: Asio's system executor) runs on the endpoint's
  /// progress thread, so it must not block. Errors (nothing moved):
  /// region_too_small (span outside `local`), bad_range (outside the remote segment); fabric
  /// errors from posting or from the completion queue. Not cancellable: an RMA in flight
  /// cannot be recalled, so `local` must stay valid until the completion.
  template <class CompletionToken>
  auto async_read(const registration& local, const remote_memory& remote, transfer_span span, CompletionToken&& token) {
    return initiate(false, local, remote, span, std::forward<CompletionToken>(token));
  }

  /// RMA-writes `span.length` bytes of `local` at `span.local_offset` to `remote` at
  /// `span.remote_offset`; as async_read. The completion means the provider completed the
  /// write (for delivery to the peer's memory, follow it with a read: see docs/protocol.md).
  template <class CompletionToken>
  auto async_write(const registration& local, const remote_memory& remote, transfer_span span,
                   CompletionToken&& token) {
    return initiate(true, local, remote, span, std::forward<CompletionToken>(token));
  }

  [[nodiscard]] const std::shared_ptr<endpoint>& get_endpoint() const noexcept { return endpoint_; }

 private:
  template <class CompletionToken>
  auto initiate(bool write, const registration& local, const remote_memory& remote, transfer_span span,
                CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [this, write, &local, remote, span](auto handler) {
          using handler_type = decltype(handler);
          auto executor = boost::asio::get_associated_executor(handler);
          auto fail = [&](error_code ec) {
            boost::asio::post(executor, [h = std::move(handler), ec]() mutable { std::move(h)(ec, 0); });
          };
          if (!local.region().contains(span.local_offset, span.length)) return fail(errc::region_too_small);
          if (span.remote_offset > remote.segment.length || span.length > remote.segment.length - span.remote_offset) {
            return fail(errc::bad_range);
          }
          // The handler waits in a shared holder with a work guard on its executor, so a
          // blocking io_context.run() does not return before the progress thread completes it.
          struct pending {
            handler_type handler;
            boost::asio::executor_work_guard<decltype(executor)> work;
          };
          auto holder = std::make_shared<pending>(pending{std::move(handler), boost::asio::make_work_guard(executor)});
          const std::uint64_t length = span.length;
          auto finish = [holder, length](error_code ec) {
            std::move(holder->handler)(ec, ec ? 0 : static_cast<std::size_t>(length));
            holder->work.reset();
          };
          // From the progress thread (or the thread that closes the endpoint): dispatched, as
          // Asio completes its own operations, so a handler whose executor is not running on
          // that thread is posted to it, and one without an executor of its own (the system
          // executor) runs right there, with no thread hop on the data path.
          auto done = [holder, finish](error_code ec) {
            boost::asio::dispatch(holder->work.get_executor(), [finish, ec] { finish(ec); });
          };
          const std::uint64_t remote_address = remote.segment.address + span.remote_offset;
          const std::uint64_t local_offset = local.offset_in_mr() + span.local_offset;
          const error_code ec = write ? endpoint_->post_write(local.mr(), local_offset, length, remote.peer,
                                                              remote_address, remote.segment.key, done)
                                      : endpoint_->post_read(local.mr(), local_offset, length, remote.peer,
                                                             remote_address, remote.segment.key, done);
          if (ec) {  // nothing was posted: never complete inside the initiating function
            boost::asio::post(holder->work.get_executor(), [finish, ec] { finish(ec); });
          }
        },
        token);
  }

  std::shared_ptr<endpoint> endpoint_;
};

}  // namespace sluice::fabric
