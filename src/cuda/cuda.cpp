// SPDX-License-Identifier: Apache-2.0
// Compiled part of sluice::cuda: every call into the CUDA runtime lives here, so the headers
// need no CUDA headers and a host without a GPU gets error codes, never a crash.
#include <sluice/cuda/device.hpp>
#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/device_registrar.hpp>
#include <sluice/cuda/error.hpp>
#include <sluice/cuda/pinned.hpp>
#include <sluice/cuda/stager.hpp>
#include <sluice/host_registrar.hpp>

#include "driver.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>

namespace sluice::cuda {

namespace {

class cuda_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "cuda"; }
  [[nodiscard]] std::string message(int value) const override {
    return cudaGetErrorString(static_cast<cudaError_t>(value));
  }
};

error_code from(cudaError_t e) noexcept { return make_cuda_error(static_cast<int>(e)); }

}  // namespace

const boost::system::error_category& cuda_category() noexcept {
  static const cuda_category_impl category;
  return category;
}

int device_count(error_code& ec) noexcept {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    ec = errc::no_device;
    return 0;
  }
  ec = {};
  return count;
}

std::string no_device_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (e != cudaSuccess) return cudaGetErrorString(e);
  return count == 0 ? "the CUDA runtime reports 0 devices" : "";
}

device_properties properties(int ordinal, error_code& ec) {
  cudaDeviceProp prop{};
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, ordinal); e != cudaSuccess) {
    ec = from(e);
    return {};
  }
  ec = {};
  return {ordinal, prop.name, prop.totalGlobalMem, prop.major, prop.minor};
}

pinned_buffer pinned_buffer::allocate(std::size_t size, error_code& ec) {
  if (device_count(ec) == 0) return {};
  void* data = nullptr;
  if (size != 0) {
    if (const cudaError_t e = cudaMallocHost(&data, size); e != cudaSuccess) {
      ec = from(e);
      return {};
    }
  }
  ec = {};
  return {data, size};
}

pinned_buffer pinned_buffer::allocate(std::size_t size) {
  error_code ec;
  pinned_buffer buffer = allocate(size, ec);
  detail::throw_on_error(ec, "cudaMallocHost");
  return buffer;
}

void pinned_buffer::reset() noexcept {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
}

void pinned_registration::reset() noexcept {
  if (owns_pin_ && region_.data != nullptr) (void)cudaHostUnregister(region_.data);
  region_ = {};
  owns_pin_ = false;
}

pinned_registration pinning_registrar::register_region(const region& mem, error_code& ec) const {
  if (!host_region_usable(mem, ec)) return {};
  if (mem.kind == memory_kind::host_pinned || mem.size == 0) {
    ec = {};
    return {mem, false};
  }
  if (device_count(ec) == 0) return {};
  if (const cudaError_t e = cudaHostRegister(mem.data, mem.size, cudaHostRegisterDefault); e != cudaSuccess) {
    ec = from(e);
    return {};
  }
  ec = {};
  return {{mem.data, mem.size, memory_kind::host_pinned, -1}, true};
}

device_registration device_registrar::register_region(const region& mem, error_code& ec) const {
  if (mem.kind != memory_kind::cuda_device) {
    ec = errc::unsupported_memory;
    return {};
  }
  if (mem.size == 0) {
    ec = {};
    return device_registration{mem};
  }
  if (mem.data == nullptr) {
    ec = errc::invalid_argument;
    return {};
  }
  if (device_count(ec) == 0) return {};
  cudaPointerAttributes attributes{};
  if (const cudaError_t e = cudaPointerGetAttributes(&attributes, mem.data); e != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer the runtime knows: clear the error for later calls
    ec = errc::invalid_argument;
    return {};
  }
  if (attributes.type != cudaMemoryTypeDevice || attributes.device != mem.device) {
    ec = errc::invalid_argument;
    return {};
  }
  // The whole region inside the allocation that holds its first byte: a transport moves bytes
  // into every byte of it, and past the allocation lies memory the caller was never given.
  std::byte* base = nullptr;
  std::uint64_t allocated = 0;
  if (driver::allocation_of(mem.data, base, allocated) &&
      mem.size > allocated - static_cast<std::uint64_t>(mem.bytes() - base)) {
    ec = errc::invalid_argument;
    return {};
  }
  ec = {};
  return device_registration{mem};
}

// -- device memory and streams ----------------------------------------------------------------

device_buffer device_buffer::allocate(std::size_t size, int device, error_code& ec) {
  if (device_count(ec) == 0) return {};
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    ec = from(e);
    return {};
  }
  void* data = nullptr;
  if (size != 0) {
    if (const cudaError_t e = cudaMalloc(&data, size); e != cudaSuccess) {
      ec = from(e);
      return {};
    }
  }
  ec = {};
  return {data, size, device};
}

device_buffer device_buffer::allocate(std::size_t size, int device) {
  error_code ec;
  device_buffer buffer = allocate(size, device, ec);
  detail::throw_on_error(ec, "cudaMalloc");
  return buffer;
}

void device_buffer::reset() noexcept {
  if (data_ != nullptr) (void)cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

stream stream::create(int device, error_code& ec) {
  stream out;
  if (device_count(ec) == 0) return out;
  cudaStream_t handle = nullptr;
  if (cudaError_t e = cudaSetDevice(device);
      e != cudaSuccess || (e = cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking)) != cudaSuccess) {
    ec = from(e);
    return out;
  }
  out.handle_ = handle;
  out.device_ = device;
  ec = {};
  return out;
}

error_code stream::synchronize() const noexcept {
  return from(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

void stream::reset() noexcept {
  if (handle_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
  handle_ = nullptr;
}

error_code copy(const region& dst, const region& src) noexcept {
  if (dst.size != src.size || (dst.size != 0 && (dst.data == nullptr || src.data == nullptr))) {
    return errc::invalid_argument;
  }
  if (dst.size == 0) return {};
  return from(cudaMemcpy(dst.data, src.data, dst.size, cudaMemcpyDefault));
}

error_code fill(const region& dst, std::byte value) noexcept {
  if (dst.size == 0) return {};
  if (dst.data == nullptr) return errc::invalid_argument;
  if (dst.host_accessible()) {
    std::memset(dst.data, static_cast<int>(value), dst.size);
    return {};
  }
  if (const cudaError_t e = cudaSetDevice(dst.device); e != cudaSuccess) return from(e);
  if (const cudaError_t e = cudaMemset(dst.data, static_cast<int>(value), dst.size); e != cudaSuccess) return from(e);
  return from(cudaDeviceSynchronize());
}

// -- stager -----------------------------------------------------------------------------------

std::optional<config_error> stager_config::validate() const {
  if (slot_bytes == 0 || slot_bytes % 4096 != 0)
    return config_error{"slot_bytes", "must be a positive multiple of 4096"};
  if (slots < 2) return config_error{"slots", "must be at least 2 (one filling while one copies)"};
  if (slot_bytes > (std::size_t{1} << 40) / slots) return config_error{"slots", "slots × slot_bytes is too large"};
  if (device < 0) return config_error{"device", "must be a device ordinal"};
  return std::nullopt;
}

std::unique_ptr<stager> stager::create(const stager_config& config, error_code& ec) {
  if (config.validate()) {
    ec = errc::invalid_config;
    return nullptr;
  }
  std::unique_ptr<stager> out(new stager());
  out->config_ = config;
  if (const cudaError_t e = cudaSetDevice(config.device); e != cudaSuccess) {
    ec = device_count(ec) == 0 ? error_code(errc::no_device) : from(e);
    return nullptr;
  }
  out->memory_ = pinned_buffer::allocate(config.slot_bytes * config.slots, ec);
  if (ec) return nullptr;
  out->slots_.resize(config.slots);
  for (std::size_t i = 0; i < config.slots; ++i) {
    slot_state& s = out->slots_[i];
    s.copies = stream::create(config.device, ec);
    if (ec) return nullptr;
    cudaEvent_t event = nullptr;
    if (const cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); e != cudaSuccess) {
      ec = from(e);
      return nullptr;
    }
    s.done = event;
    out->ring_.push_back(i);
  }
  ec = {};
  return out;
}

stager::~stager() {
  for (slot_state& s : slots_) {
    // The stream, not only the event: a host callback queued behind the copy refers to *this.
    if (s.copies.native_handle() != nullptr)
      (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s.copies.native_handle()));
    (void)wait(s);
    if (s.done != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(s.done));
  }
}

error_code stager::wait(slot_state& s) noexcept {
  if (!s.pending) return {};
  s.pending = false;
  return from(cudaEventSynchronize(static_cast<cudaEvent_t>(s.done)));
}

stager::slot stager::make_slot(std::size_t index) const noexcept {
  return slot{
      index, {memory_.region().bytes() + index * config_.slot_bytes, config_.slot_bytes, memory_kind::host_pinned, -1}};
}

std::optional<stager::slot> stager::claim(std::size_t index, error_code& ec) {
  // The slot is ours now: nobody else waits on or records its event.
  ec = wait(slots_[index]);
  if (ec) {
    give_back(index);
    return std::nullopt;
  }
  return make_slot(index);
}

std::optional<stager::slot> stager::acquire(error_code& ec) {
  // The asynchronous form, waited for: a blocked caller takes its turn among the waiters, and
  // the slot's last copy is waited for by Asio's system executor, which then hands it over.
  std::promise<std::pair<error_code, slot>> result;
  auto given = result.get_future();
  async_acquire([&result](error_code e, slot s) { result.set_value({e, s}); });
  const auto [e, s] = given.get();
  ec = e;
  if (e) return std::nullopt;
  return s;
}

namespace {

// What a host callback carries: the waiter to tell, and for drain_then how many streams are left.
struct handoff {
  stager* owner;
  std::size_t index;
  void* told;  // the stager::waiter, released from its unique_ptr
  std::atomic<std::size_t>* left = nullptr;
};

}  // namespace

void stager::acquire_then(std::unique_ptr<waiter> w) {
  std::size_t index = 0;
  {
    const std::lock_guard lock(mutex_);
    if (ring_.empty()) {
      waiters_.push_back(std::move(w));
      return;
    }
    index = ring_.front();
    ring_.pop_front();
  }
  hand(index, std::move(w));
}

void stager::hand(std::size_t index, std::unique_ptr<waiter> w) {
  slot_state& state = slots_[index];
  if (state.pending && cudaSetDevice(config_.device) == cudaSuccess) {
    // Behind the slot's last copy on its stream: the callback runs once that copy finished.
    // It must not call CUDA; the waiter only posts to its executor, where claim() settles the event.
    auto* h = new handoff{this, index, w.get()};
    const cudaHostFn_t fire = [](void* p) {
      std::unique_ptr<handoff> done(static_cast<handoff*>(p));
      std::unique_ptr<waiter> told(static_cast<waiter*>(done->told));
      told->ready(*done->owner, done->index);
    };
    if (cudaLaunchHostFunc(static_cast<cudaStream_t>(state.copies.native_handle()), fire, h) == cudaSuccess) {
      (void)w.release();
      return;
    }
    delete h;  // claim() waits for the copy instead (and reports its error)
  }
  w->ready(*this, index);
}

void stager::give_back(std::size_t index) {
  std::unique_ptr<waiter> next;
  {
    const std::lock_guard lock(mutex_);
    if (waiters_.empty()) {
      ring_.push_back(index);
    } else {
      next = std::move(waiters_.front());
      waiters_.pop_front();
    }
  }
  if (next) hand(index, std::move(next));
}

void stager::drain_then(std::unique_ptr<waiter> w) {
  // One callback per stream, each behind what that stream has queued; the last one tells `w`.
  (void)cudaSetDevice(config_.device);
  auto* left = new std::atomic<std::size_t>(slots_.size());
  void* told = w.release();
  const cudaHostFn_t fire = [](void* p) {
    const std::unique_ptr<handoff> done(static_cast<handoff*>(p));
    if (done->left->fetch_sub(1) != 1) return;
    delete done->left;
    const std::unique_ptr<waiter> t(static_cast<waiter*>(done->told));
    t->ready(*done->owner, 0);
  };
  for (slot_state& s : slots_) {
    auto* h = new handoff{this, 0, told, left};
    const auto copies = static_cast<cudaStream_t>(s.copies.native_handle());
    if (cudaLaunchHostFunc(copies, fire, h) != cudaSuccess) {
      (void)cudaStreamSynchronize(copies);  // copy_errors() reports what failed
      fire(h);
    }
  }
}

error_code stager::copy_errors() const noexcept {
  // Each slot's event marks its last copy. A copy still running (another transfer's) is not an
  // error; a failed one is.
  for (const slot_state& s : slots_) {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(s.done));
    if (e != cudaSuccess && e != cudaErrorNotReady) return from(e);
  }
  return {};
}

error_code stager::to_device(const slot& s, const region& dst) {
  slot_state& state = slots_[s.index];
  error_code ec;
  if (dst.size > config_.slot_bytes || dst.kind != memory_kind::cuda_device || (dst.data == nullptr && dst.size != 0)) {
    ec = errc::invalid_argument;
  } else if (dst.size != 0) {
    const auto copies = static_cast<cudaStream_t>(state.copies.native_handle());
    cudaError_t e = cudaSetDevice(config_.device);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst.data, s.host.data, dst.size, cudaMemcpyHostToDevice, copies);
    if (e == cudaSuccess) e = cudaEventRecord(static_cast<cudaEvent_t>(state.done), copies);
    if (e == cudaSuccess) state.pending = true;
    ec = from(e);
  }
  release(s);
  return ec;
}

error_code stager::from_device(const slot& s, const region& src) {
  if (src.size > config_.slot_bytes || src.kind != memory_kind::cuda_device || (src.data == nullptr && src.size != 0)) {
    return errc::invalid_argument;
  }
  if (src.size == 0) return {};
  slot_state& state = slots_[s.index];
  const auto copies = static_cast<cudaStream_t>(state.copies.native_handle());
  cudaError_t e = cudaSetDevice(config_.device);
  if (e == cudaSuccess) e = cudaMemcpyAsync(s.host.data, src.data, src.size, cudaMemcpyDeviceToHost, copies);
  if (e == cudaSuccess) e = cudaStreamSynchronize(copies);
  return from(e);
}

void stager::release(const slot& s) { give_back(s.index); }

error_code stager::drain() {
  // Slots held by callers have nothing pending of theirs to wait for; the others may.
  std::vector<std::size_t> idle;
  {
    std::unique_lock lock(mutex_);
    idle.assign(ring_.begin(), ring_.end());
    ring_.clear();
  }
  error_code first;
  for (const std::size_t i : idle) {
    const error_code e = wait(slots_[i]);
    if (e && !first) first = e;
  }
  for (const std::size_t i : idle) give_back(i);
  return first;
}

}  // namespace sluice::cuda
