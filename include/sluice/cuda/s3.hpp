// SPDX-License-Identifier: Apache-2.0
// S3 objects into and out of GPU memory through sluice::s3::client. Compiled into sluice::cuda
// when the S3 tier is built.
//
// Each call is a fallback_path over the device paths of sluice/cuda/s3_path.hpp, tried in order:
// - direct (s3::negotiator × device_registrar × s3::rdma_transport): the server's RMA lands in, or
//   reads out of, device memory (a same-host CUDA IPC grant, or a provider with FI_HMEM); no host
//   copy at all;
// - staged by RDMA, then staged over HTTP (× staged_transport): each part is a ranged GET into a
//   slot of a stager (pinned host ring), copied to the device while the next parts are in flight;
//   a PUT copies each part device → pinned slot, then uploads it.
// A path the server declines, or whose fabric fails, hands over to the next; the report says which
// ran and why the others did not. Pinned memory is bounded by the stager (default 64 MiB) whatever
// the object size.
#pragma once

#include <sluice/cuda/stager.hpp>
#include <sluice/detail/completion.hpp>
#include <sluice/fallback_path.hpp>
#include <sluice/s3/client.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::cuda {

/// How device memory meets the network.
enum class device_path : std::uint8_t {
  automatic,  ///< direct, then staged: the first the server and the fabric accept
  direct,     ///< RDMA into/out of device memory only (needs `via` rdma or automatic)
  staged,     ///< through the stager's pinned slots only (RDMA, then HTTP, as `via` allows)
};

[[nodiscard]] const char* to_string(device_path p) noexcept;

struct device_transfer_options {
  s3::transfer_via via = s3::transfer_via::automatic;  ///< for the staged path's parts; direct is RDMA
  device_path path = device_path::automatic;
  stager_config staging;              ///< the ring of the staged path (slot_bytes = part size); device = the region's
  std::uint32_t parts_in_flight = 4;  ///< staged parts moving at once (at most staging.slots)
  s3::progress_callback progress;     ///< called as parts complete
};

/// What a transfer did.
struct device_transfer_report {
  device_path path = device_path::automatic;  ///< direct or staged, as taken
  std::uint64_t rdma_bytes = 0;               ///< object bytes that moved by RDMA
  std::uint64_t http_bytes = 0;               ///< object bytes that came in an HTTP body
  std::uint64_t pinned_bytes = 0;             ///< pinned staging memory held (0 for direct)
  std::vector<skipped_path> skipped;          ///< the paths tried first, each with why it was passed over
};

namespace detail {

/// The fallback_path of get_object_to_device (`dir` get) or put_object_from_device (put) for
/// `memory` and `options`, after checking them: errc::invalid_argument (not device memory, a null
/// pointer, path direct with via http), errc::invalid_config (the ring).
[[nodiscard]] std::shared_ptr<fallback_path> device_paths(s3::client& client, const region& memory,
                                                          const device_transfer_options& options, direction dir,
                                                          error_code& ec);

/// What `result` says as a device_transfer_report (its `skipped` is moved out).
[[nodiscard]] device_transfer_report device_report(transfer_result& result, const device_transfer_options& options);

/// Runs the device paths for one transfer; completes `handler(ec, value-of-result, report)`.
template <class Handler, class Value>
void run_device_paths(s3::client& client, const object_ref& object, const region& memory,
                      const device_transfer_options& options, direction dir, Handler handler, Value value) {
  error_code ec;
  std::shared_ptr<fallback_path> paths = device_paths(client, memory, options, dir, ec);
  if (ec) {
    transfer_result none;
    sluice::detail::post_completion(std::move(handler), ec, value(none), device_transfer_report{});
    return;
  }
  fallback_path& running = *paths;
  const auto executor = boost::asio::get_associated_executor(handler, client.get_executor());
  // The paths live until the transfer completes: the completion handler owns them.
  auto done =
      boost::asio::bind_executor(executor, [paths = std::move(paths), options, h = std::move(handler),
                                            value = std::move(value)](error_code e, transfer_result result) mutable {
        device_transfer_report report = device_report(result, options);
        auto v = value(result);
        std::move(h)(e, e ? decltype(v){} : std::move(v), std::move(report));
      });
  if (dir == direction::get) {
    running.async_get(object, memory, byte_range{}, std::move(done));
  } else {
    running.async_put(object, memory, std::move(done));
  }
}

}  // namespace detail

/// GETs the whole object `bucket`/`key` into `destination` (device memory, at least as large as
/// the object); returns its size. Errors: the client's (NoSuchKey, …), errc::region_too_small,
/// errc::invalid_argument (host memory, or path direct with via http), the last path's error when
/// every path was declined or its fabric failed (path direct without an FI_HMEM provider), a cuda
/// error.
std::uint64_t get_object_to_device(s3::client& client, const std::string& bucket, const std::string& key,
                                   const region& destination, const device_transfer_options& options,
                                   device_transfer_report* report, error_code& ec);

/// PUTs all of `source` (device memory) as `bucket`/`key`; returns the ETag. Direct (automatic
/// tries it first): one PUT the server reads out of the device memory through the client's
/// plane (a same-host CUDA IPC grant, or a fabric with FI_HMEM), up to 5 GiB; its ETag is opaque
/// (no MD5: the bytes are not on the host) and the server keeps a CRC32C. Staged: parts through
/// the pinned slots (multipart when larger than one slot). Errors as get_object_to_device.
std::string put_object_from_device(s3::client& client, const std::string& bucket, const std::string& key,
                                   const const_region& source, const device_transfer_options& options,
                                   device_transfer_report* report, error_code& ec);

/// get_object_to_device without blocking a thread: the paths run on the handler's associated
/// executor (else the client's), and the staged path's waits for the GPU are CUDA callbacks that
/// post to it. `destination` must stay valid until completion. Completion: `void(error_code,
/// std::uint64_t bytes, device_transfer_report)`; errors as get_object_to_device.
template <class CompletionToken>
auto async_get_object_to_device(s3::client& client, std::string bucket, std::string key, const region& destination,
                                device_transfer_options options, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::uint64_t, device_transfer_report)>(
      [&client](auto handler, const object_ref& object, const region& memory, const device_transfer_options& o) {
        detail::run_device_paths(client, object, memory, o, direction::get, std::move(handler),
                                 [](const transfer_result& r) { return r.bytes; });
      },
      token, object_ref{std::move(bucket), std::move(key)}, destination, std::move(options));
}

/// put_object_from_device without blocking a thread, as async_get_object_to_device. `source` must
/// stay valid and unchanged until completion. Completion: `void(error_code, std::string etag,
/// device_transfer_report)`; errors as put_object_from_device.
template <class CompletionToken>
auto async_put_object_from_device(s3::client& client, std::string bucket, std::string key, const const_region& source,
                                  device_transfer_options options, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::string, device_transfer_report)>(
      [&client](auto handler, const object_ref& object, const region& memory, const device_transfer_options& o) {
        detail::run_device_paths(client, object, memory, o, direction::put, std::move(handler),
                                 [](transfer_result& r) { return std::move(r.version); });
      },
      token, object_ref{std::move(bucket), std::move(key)}, sluice::detail::readable_as_region(source),
      std::move(options));
}

}  // namespace sluice::cuda
