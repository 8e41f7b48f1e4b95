// S3 objects into and out of device memory: the direct path (the client's RDMA plane registers
// device memory) and the staged path (a stager's pinned slots between the client and the GPU).
#include <sluice/cuda/s3.hpp>

#include <sluice/cuda/device_memory.hpp>
#include <sluice/s3/error.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::cuda {

const char* to_string(device_path p) noexcept {
  switch (p) {
    case device_path::automatic: return "automatic";
    case device_path::direct: return "direct";
    case device_path::staged: return "staged";
  }
  return "?";
}

namespace {

/// The first error of several workers, and whether to stop.
class first_error {
 public:
  void set(error_code ec) {
    const std::lock_guard lock(mutex_);
    if (!ec_) ec_ = ec;
    failed_ = true;
  }
  [[nodiscard]] bool failed() const noexcept { return failed_.load(); }
  [[nodiscard]] error_code get() {
    const std::lock_guard lock(mutex_);
    return ec_;
  }

 private:
  std::mutex mutex_;
  error_code ec_;
  std::atomic<bool> failed_{false};
};

/// Whether a direct transfer's failure means "take the staged path": the plane cannot register
/// device memory (no FI_HMEM, or the provider's CUDA support failed to load: a fabric error), the
/// object is larger than one PUT, or the server cannot reach the memory or declined. An S3 answer
/// (NoSuchKey, AccessDenied, ...) would be the same staged, so it ends the transfer.
bool stage_instead(const error_code& ec) { return ec == condition::declined || ec == condition::fabric_failed; }

stager_config ring_for(const device_transfer_options& options, const region& device_memory) {
  stager_config config = options.staging;
  config.device = device_memory.device < 0 ? 0 : device_memory.device;
  return config;
}

std::uint64_t get_staged(s3::client& client, const std::string& bucket, const std::string& key,
                         const region& destination, const device_transfer_options& options,
                         device_transfer_report& report, error_code& ec) {
  const object_info info = client.head_object(bucket, key, ec);
  if (ec) return 0;
  if (info.size > destination.size) {
    ec = errc::region_too_small;
    return 0;
  }
  auto ring = stager::create(ring_for(options, destination), ec);
  if (ec) return 0;
  report.pinned_bytes = ring->pinned_bytes();
  const std::uint64_t slot = ring->config().slot_bytes;
  const std::uint64_t parts = (info.size + slot - 1) / slot;
  // Each worker holds at most one slot while its GET runs; the others' copies drain meanwhile.
  const std::size_t workers = static_cast<std::size_t>(
      std::min<std::uint64_t>({std::max<std::uint32_t>(options.parts_in_flight, 1), ring->config().slots - 1, parts}));
  std::atomic<std::uint64_t> next{0}, done{0}, rdma{0}, http{0};
  std::mutex progress_mutex;
  first_error failure;
  const auto work = [&] {
    while (!failure.failed()) {
      const std::uint64_t index = next++;
      if (index >= parts) return;
      const std::uint64_t offset = index * slot;
      const auto length = static_cast<std::size_t>(std::min(slot, info.size - offset));
      error_code e;
      const auto held = ring->acquire(e);
      if (!held) {
        failure.set(e);
        return;
      }
      s3::transfer_report paths;
      s3::get_options get(byte_range{offset, length});
      get.via = options.via;
      get.report = &paths;
      const region landing{held->host.data, length, memory_kind::host_pinned, -1};
      const std::uint64_t got = client.get_object(bucket, key, landing, std::move(get), e);
      if (!e && got != length) e = errc::protocol_violation;  // the object changed size under us
      if (e) {
        ring->release(*held);
        failure.set(e);
        return;
      }
      const region target{destination.bytes() + offset, length, memory_kind::cuda_device, destination.device};
      if ((e = ring->to_device(*held, target))) {
        failure.set(e);
        return;
      }
      rdma += paths.rdma_bytes;
      http += paths.http_bytes;
      const std::uint64_t now = done += length;
      if (options.progress) {
        const std::lock_guard lock(progress_mutex);
        options.progress(now, info.size);
      }
    }
  };
  std::vector<std::jthread> threads;
  for (std::size_t i = 1; i < workers; ++i) threads.emplace_back(work);
  work();
  threads.clear();  // joins
  const error_code drained = ring->drain();
  ec = failure.get();
  if (!ec) ec = drained;
  report.rdma_bytes = rdma;
  report.http_bytes = http;
  return ec ? 0 : info.size;
}

/// Device memory read a part at a time: each worker's part is copied into a stager slot of its
/// own (pinned, so the copy runs at full speed and an RDMA plane can register it), or into the
/// worker's scratch when a part is larger than a slot.
class device_source final : public s3::upload_source {
 public:
  device_source(region source, std::unique_ptr<stager> ring) : source_(source), ring_(std::move(ring)) {}
  ~device_source() override {
    for (const auto& [scratch, held] : held_) ring_->release(held);
  }
  [[nodiscard]] std::uint64_t size() const noexcept override { return source_.size; }
  std::span<const std::byte> read(std::uint64_t offset, std::size_t length, std::vector<std::byte>& scratch,
                                  error_code& ec) override {
    ec = {};
    const region part{source_.bytes() + offset, length, memory_kind::cuda_device, source_.device};
    if (length > ring_->config().slot_bytes) {
      scratch.resize(length);
      ec = copy({scratch.data(), length, memory_kind::host_pageable, -1}, part);
      return ec ? std::span<const std::byte>{} : std::span<const std::byte>(scratch.data(), length);
    }
    const auto held = slot_for(scratch, ec);
    if (ec) return {};
    if (!held) {  // more workers than slots: this one copies through its scratch
      scratch.resize(length);
      ec = copy({scratch.data(), length, memory_kind::host_pageable, -1}, part);
      return ec ? std::span<const std::byte>{} : std::span<const std::byte>(scratch.data(), length);
    }
    ec = ring_->from_device(*held, part);
    if (ec) return {};
    return {held->host.bytes(), length};
  }

 private:
  std::optional<stager::slot> slot_for(const std::vector<std::byte>& scratch, error_code& ec) {
    // A worker's first part takes a slot for it from now on; when every slot is taken the
    // worker gets none (and copies through its scratch) rather than waiting for one.
    const std::lock_guard lock(mutex_);
    if (const auto it = held_.find(&scratch); it != held_.end()) return it->second;
    if (held_.size() == ring_->config().slots) return std::nullopt;
    auto held = ring_->acquire(ec);  // one is free: it returns at once
    if (held) held_.emplace(&scratch, *held);
    return held;
  }

  region source_;
  std::unique_ptr<stager> ring_;
  std::mutex mutex_;
  std::map<const std::vector<std::byte>*, stager::slot> held_;
};

}  // namespace

std::uint64_t get_object_to_device(s3::client& client, const std::string& bucket, const std::string& key,
                                   const region& destination, const device_transfer_options& options,
                                   device_transfer_report* report, error_code& ec) {
  device_transfer_report local;
  device_transfer_report& out = report != nullptr ? *report : local;
  out = {};
  if (destination.kind != memory_kind::cuda_device || (destination.data == nullptr && destination.size != 0)) {
    ec = errc::invalid_argument;
    return 0;
  }
  if (const auto problem = ring_for(options, destination).validate()) {
    ec = errc::invalid_config;
    return 0;
  }
  if (options.path != device_path::staged && options.via != s3::transfer_via::http) {
    s3::transfer_report paths;
    s3::get_options get;
    get.via = s3::transfer_via::rdma;
    get.report = &paths;
    get.progress = options.progress;
    const std::uint64_t got = client.get_object(bucket, key, destination, std::move(get), ec);
    out.path = device_path::direct;
    out.rdma_bytes = paths.rdma_bytes;
    if (!ec || options.path == device_path::direct || !stage_instead(ec)) return got;
  }
  out = {};
  out.path = device_path::staged;
  return get_staged(client, bucket, key, destination, options, out, ec);
}

std::string put_object_from_device(s3::client& client, const std::string& bucket, const std::string& key,
                                   const region& source, const device_transfer_options& options,
                                   device_transfer_report* report, error_code& ec) {
  device_transfer_report local;
  device_transfer_report& out = report != nullptr ? *report : local;
  out = {};
  if (source.kind != memory_kind::cuda_device || (source.data == nullptr && source.size != 0)) {
    ec = errc::invalid_argument;
    return {};
  }
  if (const auto problem = ring_for(options, source).validate()) {
    ec = errc::invalid_config;
    return {};
  }
  if (options.path != device_path::staged && options.via != s3::transfer_via::http && source.size > 0) {
    // Direct: one PUT whose bytes the server takes out of the device memory through the
    // client's plane (a same-host CUDA IPC grant, or a fabric that registers device memory).
    s3::transfer_report paths;
    s3::put_options put;
    put.via = s3::transfer_via::rdma;
    put.report = &paths;
    put.progress = options.progress;
    std::string etag = client.put_object(bucket, key, source, std::move(put), ec);
    out.path = device_path::direct;
    out.rdma_bytes = paths.rdma_bytes;
    if (!ec || options.path == device_path::direct || !stage_instead(ec)) return etag;
  }
  out = {};
  out.path = device_path::staged;
  auto ring = stager::create(ring_for(options, source), ec);
  if (ec) return {};
  out.pinned_bytes = ring->pinned_bytes();
  s3::transfer_report paths;
  s3::put_options put;
  put.via = options.via;
  put.report = &paths;
  put.progress = options.progress;
  std::string etag =
      client.put_object(bucket, key, std::make_shared<device_source>(source, std::move(ring)), std::move(put), ec);
  out.rdma_bytes = paths.rdma_bytes;
  out.http_bytes = paths.http_bytes;
  return etag;
}

}  // namespace sluice::cuda
