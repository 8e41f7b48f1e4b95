// SPDX-License-Identifier: Apache-2.0
// S3 objects into and out of GPU memory as path<N, R, T>: the S3 negotiator, the device registrar,
// and a transport that reaches device memory.
//
//   direct_path            s3::negotiator × device_registrar × s3::rdma_transport
//                          the server's RMA lands in (or reads from) device memory: a same-host
//                          CUDA IPC grant, or a fabric with FI_HMEM
//   staged_path<Via>       s3::negotiator × device_registrar × staged_transport<Via>
//                          ranged GETs into the stager's pinned slots, each slot copied to the
//                          device while the next parts are in flight; a PUT reads the device
//                          memory a part at a time through pinned slots
//
// cuda::get_object_to_device and put_object_from_device (sluice/cuda/s3.hpp) are a fallback_path
// over these, in the order direct → staged RDMA → staged HTTP.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/cuda/device_registrar.hpp>
#include <sluice/cuda/stager.hpp>
#include <sluice/detail/completion.hpp>
#include <sluice/path.hpp>
#include <sluice/s3/path.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice::cuda {

/// Device memory as an upload_source: each part is copied into a pinned slot of `ring` (a
/// worker keeps one slot from its first part on), or through the worker's scratch when a part is
/// larger than a slot or every slot is taken. The copy waits for the device (a part's bytes must
/// be on the host before the client sends them).
[[nodiscard]] std::shared_ptr<s3::upload_source> make_device_source(const region& source, std::unique_ptr<stager> ring);

/// Moves an S3 object's bytes between the server and device memory through a stager's pinned
/// slots, by the path `Via` names (transfer_via::rdma: a token per part, strict; transfer_via::http:
/// the bodies).
/// - async_read: the span is cut into slot-sized parts; up to `parts_in_flight` ranged GETs (each
///   If-Match the remote's ETag) fill slots at once, and each filled slot is copied to the device
///   on its own stream while the next parts arrive. No thread blocks: a slot is handed on when its
///   copy finished (stager::async_acquire), and the read completes once the last copy finished
///   (stager::async_drain). One stager is made at the first read and kept (slots × slot_bytes of
///   pinned memory), shared by the transport's reads.
/// - async_write: one PUT of the whole object (multipart when larger than the client's threshold)
///   whose parts are copied out of device memory through a stager of its own.
/// Errors before any request: as s3::check_object_span, then errc::unsupported_memory when the
/// local region is not device memory. Then the client's and the device's. The client must
/// outlive the transport, and the transport its operations.
template <s3::transfer_via Via>
class staged_transport {
 public:
  using remote_type = s3::object_remote;
  static constexpr std::string_view name = Via == s3::transfer_via::rdma ? "s3-staged-rdma" : "s3-staged-http";
  static constexpr bool writes_whole_objects = true;

  /// `ring.device` is replaced by the local region's device. `progress`, when given, is called as
  /// parts land on the device (reads) or as the client sends them (writes).
  staged_transport(s3::client& c, stager_config ring, std::uint32_t parts_in_flight = 4,
                   s3::progress_callback progress = {})
      : client_(&c),
        config_(ring),
        parts_in_flight_(std::max<std::uint32_t>(parts_in_flight, 1)),
        progress_(std::move(progress)) {}

  /// Reads `span.length` bytes of `remote` at `span.remote_offset` into device memory `local` at
  /// `span.local_offset`. Completion: `void(error_code, std::size_t bytes)`, once the bytes are in
  /// device memory.
  template <registration G, class CompletionToken>
  auto async_read(const G& local, const s3::object_remote& remote, transfer_span span, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [this](auto handler, region here, s3::object_remote there, transfer_span s) {
          error_code ec = check(here, there, s, direction::get);
          std::shared_ptr<stager> ring;
          if (!ec && s.length != 0) ring = stager_for(here.device, ec);
          if (ec || s.length == 0) {
            sluice::detail::post_completion(std::move(handler), ec, std::size_t{0});
            return;
          }
          const region into = here.subregion(s.local_offset, s.length, ec);
          auto op = std::make_shared<read_op<decltype(handler)>>(this, std::move(ring), into, std::move(there),
                                                                 s.remote_offset, std::move(handler));
          op->start();
        },
        token, local.region(), remote, span);
  }

  /// Writes `local` at `span.local_offset` as the whole of `remote`, published atomically when the
  /// server acknowledges. Completion: `void(error_code, std::size_t bytes)`.
  template <registration G, class CompletionToken>
  auto async_write(const G& local, const s3::object_remote& remote, transfer_span span, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [this](auto handler, region here, s3::object_remote there, transfer_span s) {
          error_code ec = check(here, there, s, direction::put);
          const region from = ec ? region{} : here.subregion(s.local_offset, s.length, ec);
          stager_config config = config_;
          config.device = from.device < 0 ? 0 : from.device;
          std::unique_ptr<stager> ring = ec ? nullptr : stager::create(config, ec);
          if (ec) {
            sluice::detail::post_completion(std::move(handler), ec, std::size_t{0});
            return;
          }
          s3::put_options options;
          options.via = Via;
          options.progress = progress_;
          client_->async_put_object(
              std::move(there.bucket), std::move(there.key), make_device_source(from, std::move(ring)),
              std::move(options),
              s3::report_created(std::move(handler), client_->get_executor(), std::move(there.created), s.length));
        },
        token, local.region(), remote, span);
  }

 private:
  static error_code check(const region& local, const s3::object_remote& remote, transfer_span span, direction dir) {
    if (const error_code ec = s3::check_object_span(local, remote, span, dir)) return ec;
    if (local.kind != memory_kind::cuda_device) return sluice::errc::unsupported_memory;
    return {};
  }

  std::shared_ptr<stager> stager_for(int device, error_code& ec) {
    const std::lock_guard lock(shared_->mutex);
    std::shared_ptr<stager>& ring = shared_->ring;
    if (!ring) {
      stager_config config = config_;
      config.device = device < 0 ? 0 : device;
      ring = stager::create(config, ec);
    } else if (ring->config().device != (device < 0 ? 0 : device)) {
      ec = sluice::errc::invalid_argument;  // one transport, one device
      return nullptr;
    }
    return ring;
  }

  // One read: parts in slot-sized pieces, `lanes` of them moving at once. Every step after the
  // initiation runs on a strand of the handler's executor.
  template <class Handler>
  struct read_op : std::enable_shared_from_this<read_op<Handler>> {
    // decay: prefer() returns its argument itself (a reference) when it is already tracked.
    using executor = std::decay_t<decltype(boost::asio::prefer(
        boost::asio::get_associated_executor(std::declval<Handler&>(), std::declval<s3::client&>().get_executor()),
        boost::asio::execution::outstanding_work.tracked))>;

    read_op(staged_transport* t, std::shared_ptr<stager> r, region into, s3::object_remote there,
            std::uint64_t remote_offset, Handler h)
        : owner(t),
          ring(std::move(r)),
          device(into),
          remote(std::move(there)),
          first(remote_offset),
          piece(ring->config().slot_bytes),
          pieces((into.size + piece - 1) / piece),
          work(boost::asio::prefer(boost::asio::get_associated_executor(h, t->client_->get_executor()),
                                   boost::asio::execution::outstanding_work.tracked)),
          strand(boost::asio::make_strand(work)),
          handler(std::move(h)) {}

    void start() {
      lanes = static_cast<std::size_t>(std::min<std::uint64_t>(
          {owner->parts_in_flight_, std::max<std::size_t>(ring->config().slots - 1, 1), pieces}));
      for (std::size_t i = 0; i < lanes; ++i) {
        boost::asio::post(strand, [self = this->shared_from_this()] { self->next_part(); });
      }
    }

    void next_part() {
      if (failure || next >= pieces) {
        if (--lanes == 0) finish();
        return;
      }
      const std::uint64_t index = next++;
      ring->async_acquire(in_order(
          [self = this->shared_from_this(), index](error_code ec, stager::slot held) { self->fill(index, ec, held); }));
    }

    void fill(std::uint64_t index, error_code ec, const stager::slot& held) {
      if (ec) {
        fail(ec);
        next_part();
        return;
      }
      const std::uint64_t offset = index * piece;
      const std::uint64_t length = std::min<std::uint64_t>(piece, device.size - offset);
      s3::get_options options{byte_range{first + offset, length}};
      options.via = Via;
      options.if_match = remote.etag;
      const region landing{held.host.data, static_cast<std::size_t>(length), memory_kind::host_pinned, -1};
      owner->client_->async_get_object(
          remote.bucket, remote.key, landing, std::move(options),
          in_order([self = this->shared_from_this(), held, offset, length](error_code e, std::uint64_t got) {
            self->landed(e, got, held, offset, length);
          }));
    }

    void landed(error_code ec, std::uint64_t got, const stager::slot& held, std::uint64_t offset,
                std::uint64_t length) {
      if (!ec && got != length) ec = sluice::errc::protocol_violation;  // the object changed under us
      if (ec) {
        ring->release(held);
        fail(ec);
      } else if ((ec = ring->to_device(held, {device.bytes() + offset, static_cast<std::size_t>(length),
                                              memory_kind::cuda_device, device.device}))) {
        fail(ec);
      } else {
        done += length;
        if (owner->progress_) owner->progress_(done, device.size);
      }
      next_part();
    }

    // A completion handler for the client or the stager, bound to the handler's executor (the
    // executor they know), whose body runs on the strand (the op's state is the strand's).
    template <class F>
    auto in_order(F f) {
      return boost::asio::bind_executor(work, [this, f = std::move(f)](auto... args) mutable {
        boost::asio::dispatch(strand, [f = std::move(f), args...]() mutable { f(args...); });
      });
    }

    void fail(error_code ec) {
      if (!failure) failure = ec;
    }

    // Every lane has stopped: complete once the copies this read enqueued finished.
    void finish() {
      ring->async_drain(in_order([self = this->shared_from_this()](error_code ec) {
        if (!self->failure) self->failure = ec;
        const error_code result = self->failure;
        const std::size_t bytes = result ? 0 : static_cast<std::size_t>(self->device.size);
        sluice::detail::post_completion(std::move(self->handler), result, bytes);
      }));
    }

    staged_transport* owner;
    std::shared_ptr<stager> ring;
    region device;
    s3::object_remote remote;
    std::uint64_t first;
    std::uint64_t piece;
    std::uint64_t pieces;
    executor work;
    boost::asio::strand<executor> strand;
    Handler handler;
    std::uint64_t next = 0;
    std::uint64_t done = 0;
    std::size_t lanes = 0;
    error_code failure{};
  };

  s3::client* client_;
  stager_config config_;
  std::uint32_t parts_in_flight_;
  s3::progress_callback progress_;
  // The stager, made at the first read (a transport is moved into its path: the mutex stays put).
  struct lazy_ring {
    std::mutex mutex;
    std::shared_ptr<stager> ring;
  };
  std::shared_ptr<lazy_ring> shared_ = std::make_shared<lazy_ring>();
};

/// RMA straight into and out of device memory.
using direct_path = path<s3::negotiator, device_registrar, s3::rdma_transport>;
/// Through the pinned ring, the parts by `Via`.
template <s3::transfer_via Via>
using staged_path = path<s3::negotiator, device_registrar, staged_transport<Via>>;

}  // namespace sluice::cuda
