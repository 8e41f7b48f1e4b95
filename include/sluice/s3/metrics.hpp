// SPDX-License-Identifier: Apache-2.0
// sluice::s3 server metrics: counters a server keeps while it answers (atomics, relaxed: a few
// increments per request), rendered in the Prometheus text exposition format 0.0.4 for the admin
// listener's GET /metrics, followed by the families of the host's metrics sources.
#pragma once

#include <sluice/s3/router.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace sluice::s3 {

/// Which way payload bytes moved, as the server sees them.
enum class byte_direction { in, out };
/// How payload bytes moved.
enum class byte_path { http, rdma, grant };
/// Why an x-amz-rdma-token was declined (the answer carried x-amz-rdma-reply: 501).
enum class rdma_decline_reason {
  no_plane,  ///< the server has no data plane
  provider,  ///< the token's provider is not one the server serves
  plane,     ///< the plane declined the transfer (it could not reach or register the memory)
};

/// The kind of a metric family that a metrics_source writes.
enum class metric_type { counter, gauge };

/// One label of a sample: name="value".
struct metric_label {
  std::string_view name;   ///< [a-zA-Z_][a-zA-Z0-9_]*
  std::string_view value;  ///< any bytes; escaped as the text format wants
};

/// Appends metric families to a /metrics answer in the Prometheus text format: each family's
/// # HELP and # TYPE, then its samples. The server hands one to each metrics_source.
class metrics_writer {
 public:
  explicit metrics_writer(std::string& out) noexcept : out_(&out) {}

  /// Starts the family `name` ([a-zA-Z_:][a-zA-Z0-9_:]*; counters end in _total); the samples
  /// that follow belong to it. An invalid name skips the family and its samples, so that a
  /// scrape never fails to parse.
  void family(std::string_view name, metric_type type, std::string_view help);
  /// One sample of the current family, with `labels` (a sample with an invalid label name, or
  /// before any family, is skipped).
  void sample(std::uint64_t value, std::initializer_list<metric_label> labels = {});

 private:
  std::string* out_;
  std::string name_;  // the current family; empty: none, or skipped
};

/// Metrics a host keeps of parts the S3 tier does not link (CUDA grant registration caches,
/// libfabric endpoints), appended to /metrics after the server's own at every scrape
/// (server_config::metrics_sources). Called on an io thread, at once from concurrent scrapes:
/// thread-safe, quick and non-blocking. Names must differ from the server's own families. If it
/// throws, what it wrote is dropped and a comment says so.
using metrics_source = std::function<void(metrics_writer&)>;

/// The metrics of one server. Every member function is thread-safe; the recording ones are
/// lock-free and cheap enough for every request.
class server_metrics {
 public:
  /// Upper bounds (seconds) of sluice_request_duration_seconds' buckets, +Inf implied.
  static constexpr std::array<double, 16> duration_buckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60};
  /// The same bounds in microseconds (a duration is compared as an integer: no rounding).
  static constexpr std::array<std::int64_t, 16> duration_bucket_us = {
      100,    250,     500,     1'000,   2'500,     5'000,     10'000,     25'000,
      50'000, 100'000, 250'000, 500'000, 1'000'000, 2'500'000, 10'000'000, 60'000'000};

  /// One answered request (status 0: the client went away before an answer); `error` is the
  /// S3 error code answered, empty on success.
  void record(operation op, unsigned status, std::string_view error, std::chrono::microseconds duration) noexcept;
  void add_bytes(byte_direction direction, byte_path path, std::uint64_t n) noexcept;
  void rdma_declined(rdma_decline_reason reason) noexcept;

  /// Every metric with # HELP and # TYPE; series of requests and errors only once they counted;
  /// then what each of `sources` writes, in order.
  [[nodiscard]] std::string render(std::size_t open_connections, std::span<const metrics_source> sources = {}) const;

 private:
  static constexpr std::size_t operation_count = static_cast<std::size_t>(operation::delete_bucket_tagging) + 1;
  // HTTP statuses a server answers; the last slot counts any other.
  static constexpr std::array<unsigned, 18> statuses = {0,   200, 204, 206, 304, 400, 403, 404, 405,
                                                        409, 411, 412, 416, 500, 501, 503, 507, 999};
  static constexpr std::size_t error_count = 64;  // s3::errc values; 0 counts codes outside it
  using counter = std::atomic<std::uint64_t>;
  struct per_operation {
    std::array<counter, statuses.size()> by_status{};
    std::array<counter, error_count> by_error{};
    std::array<counter, duration_buckets.size() + 1> buckets{};  // not cumulative; the last is +Inf
    counter sum_us{0};
  };
  // Each thread counts in one of `shard_count` copies (threads are dealt out in turn), so io
  // threads do not contend for the cache lines of the counters they all touch; render() sums.
  static constexpr std::size_t shard_count = 8;
  struct alignas(64) shard {
    std::array<per_operation, operation_count> operations{};
    std::array<counter, 6> bytes{};  // direction × path
  };
  static std::size_t this_shard() noexcept;
  std::array<shard, shard_count> shards_{};
  std::array<counter, 3> declines_{};
};

/// Appends `value` as a Prometheus label value (quotes, backslashes and newlines escaped).
void append_label_value(std::string& out, std::string_view value);

}  // namespace sluice::s3
