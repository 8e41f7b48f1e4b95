// SPDX-License-Identifier: Apache-2.0
// S3 objects into and out of device memory: a fallback_path over the device paths of
// sluice/cuda/s3_path.hpp (direct, then staged by RDMA, then staged over HTTP), and the upload
// source the staged PUT reads device memory through.
#include <sluice/cuda/s3.hpp>

#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/s3_path.hpp>
#include <sluice/fallback_path.hpp>

#include <map>
#include <mutex>
#include <utility>
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

/// Device memory read a part at a time: each worker's part is copied into a stager slot of its
/// own (pinned, so the copy runs at full speed and an RDMA plane can register it), or into the
/// worker's scratch when a part is larger than a slot.
class device_source final : public s3::upload_source {
 public:
  device_source(region source, std::unique_ptr<stager> ring) : source_(source), ring_(std::move(ring)) {}
  device_source(const device_source&) = delete;
  device_source& operator=(const device_source&) = delete;
  ~device_source() override {
    for (const auto& [scratch, held] : held_) ring_->release(held);
  }
  [[nodiscard]] std::uint64_t size() const noexcept override { return source_.size; }
  std::span<const std::byte> read(std::uint64_t offset, std::size_t length, std::vector<std::byte>& scratch,
                                  error_code& ec) override {
    ec = {};
    const region part{source_.bytes() + offset, length, memory_kind::cuda_device, source_.device};
    const auto held = length > ring_->config().slot_bytes ? std::nullopt : slot_for(scratch, ec);
    if (ec) return {};
    if (!held) {  // a part larger than a slot, or more workers than slots: through the scratch
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

/// The paths `options` allows, in the order direct → staged RDMA → staged HTTP. `direct_possible`
/// is false for an empty PUT (nothing for the server to read out of device memory).
std::vector<any_path> paths_for(s3::client& client, const device_transfer_options& options, bool direct_possible) {
  using s3::transfer_via;
  std::vector<any_path> paths;
  const bool by_rdma = options.via != transfer_via::http;
  const bool by_http = options.via != transfer_via::rdma;
  const bool direct = direct_possible && by_rdma && options.path != device_path::staged;
  const bool staged = options.path != device_path::direct || !direct_possible;
  const auto parts = options.parts_in_flight;
  if (direct) {
    paths.emplace_back(
        direct_path(s3::negotiator(client), device_registrar{}, s3::rdma_transport(client, options.progress)));
  }
  if (staged && by_rdma) {
    paths.emplace_back(staged_path<transfer_via::rdma>(
        s3::negotiator(client), device_registrar{},
        staged_transport<transfer_via::rdma>(client, options.staging, parts, options.progress)));
  }
  if (staged && by_http) {
    paths.emplace_back(staged_path<transfer_via::http>(
        s3::negotiator(client), device_registrar{},
        staged_transport<transfer_via::http>(client, options.staging, parts, options.progress)));
  }
  return paths;
}

/// Checks what every device transfer needs; errc::invalid_argument or invalid_config.
error_code check(const region& memory, const device_transfer_options& options) {
  if (memory.kind != memory_kind::cuda_device || (memory.data == nullptr && memory.size != 0)) {
    return errc::invalid_argument;
  }
  stager_config ring = options.staging;
  ring.device = memory.device < 0 ? 0 : memory.device;
  if (ring.validate()) return errc::invalid_config;
  if (options.path == device_path::direct && options.via == s3::transfer_via::http) return errc::invalid_argument;
  return {};
}

}  // namespace

std::shared_ptr<s3::upload_source> make_device_source(const region& source, std::unique_ptr<stager> ring) {
  return std::make_shared<device_source>(source, std::move(ring));
}

namespace detail {

std::shared_ptr<fallback_path> device_paths(s3::client& client, const region& memory,
                                            const device_transfer_options& options, direction dir, error_code& ec) {
  if ((ec = check(memory, options))) return nullptr;
  // An empty PUT has nothing for the server to read out of device memory: staged only.
  return std::make_shared<fallback_path>(paths_for(client, options, dir == direction::get || memory.size > 0));
}

device_transfer_report device_report(transfer_result& result, const device_transfer_options& options) {
  device_transfer_report out;
  const bool direct = result.transport == s3::rdma_transport::name;
  out.path = direct ? device_path::direct : device_path::staged;
  const bool by_rdma = direct || result.transport == staged_transport<s3::transfer_via::rdma>::name;
  (by_rdma ? out.rdma_bytes : out.http_bytes) = result.bytes;
  out.pinned_bytes = direct ? 0 : options.staging.slots * options.staging.slot_bytes;
  out.skipped = std::move(result.skipped);
  return out;
}

}  // namespace detail

std::uint64_t get_object_to_device(s3::client& client, const std::string& bucket, const std::string& key,
                                   const region& destination, const device_transfer_options& options,
                                   device_transfer_report* report, error_code& ec) {
  if (report != nullptr) *report = {};
  const auto paths = detail::device_paths(client, destination, options, direction::get, ec);
  if (ec) return 0;
  transfer_result result = paths->get({bucket, key}, destination, ec);
  if (report != nullptr) *report = detail::device_report(result, options);
  return ec ? 0 : result.bytes;
}

std::string put_object_from_device(s3::client& client, const std::string& bucket, const std::string& key,
                                   const const_region& source, const device_transfer_options& options,
                                   device_transfer_report* report, error_code& ec) {
  if (report != nullptr) *report = {};
  const auto paths =
      detail::device_paths(client, sluice::detail::readable_as_region(source), options, direction::put, ec);
  if (ec) return {};
  transfer_result result = paths->put({bucket, key}, source, ec);
  if (report != nullptr) *report = detail::device_report(result, options);
  return ec ? std::string{} : std::move(result.version);
}

}  // namespace sluice::cuda
