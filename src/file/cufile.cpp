// SPDX-License-Identifier: Apache-2.0
// Compiled part of sluice::file: the cuFile transport's driver and reader
// (include/sluice/file/cufile.hpp), libcufile loaded with dlopen so that a host without it runs
// everything else.
#include <sluice/file/cufile.hpp>

#include <dlfcn.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

#include "file_support.hpp"

namespace sluice::file {

using namespace file_impl;  // this tier's helpers (file_support.hpp)

// -- cufile -----------------------------------------------------------------------------------------

namespace {

// The cuFile ABI, declared here so that sluice builds without cufile.h. Layouts and names from
// NVIDIA's "GDS cuFile API Reference Guide" (docs.nvidia.com/gpudirect-storage/api-reference-guide,
// §4.1 data types, §4.2–4.5 driver, I/O, handle and buffer APIs) and cuda-python's cuFile
// bindings generated from cufile.h 12.9–13.0 (NVIDIA/cuda-python, cuda_bindings/cuda/bindings/
// cycufile.pxd). cufile.h renames cuFileDriverClose to cuFileDriverClose_v2 (reference-counted
// since GDS 1.6); libcufile exports both names.
namespace abi {

constexpr int base_error = 5000;                   // CUFILEOP_BASE_ERR: cuFile errors are above it
constexpr int driver_already_open = 5026;          // CU_FILE_DRIVER_ALREADY_OPEN
constexpr int handle_type_opaque_fd = 1;           // CU_FILE_HANDLE_TYPE_OPAQUE_FD
constexpr unsigned control_allow_compat_mode = 1;  // bit index CU_FILE_ALLOW_COMPAT_MODE in dcontrolflags

// CUfileError_t { CUfileOpError err; CUresult cu_err; }: two enums, 4 bytes each.
struct error_t {
  int err;
  int cu_err;
};

// CUfileDescr_t { CUfileFileHandleType type; union { int fd; void* handle; } handle;
//                 const CUfileFSOps_t* fs_ops; }
struct descr_t {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
static_assert(sizeof(descr_t) == 24 && offsetof(descr_t, handle) == 8 && offsetof(descr_t, fs_ops) == 16);

// The first member of CUfileDrvProps_t; the members after it changed between GDS versions, so
// cuFileDriverGetProperties writes into a larger buffer and only this prefix is read.
struct drv_props_nvfs {
  unsigned major_version;
  unsigned minor_version;
  std::size_t poll_thresh_size;
  std::size_t max_direct_io_size;
  unsigned dstatusflags;
  unsigned dcontrolflags;
};

using handle_t = void*;  // CUfileHandle_t
using driver_open_fn = error_t (*)();
using driver_close_fn = error_t (*)();
using get_properties_fn = error_t (*)(void* props);
using handle_register_fn = error_t (*)(handle_t* fh, descr_t* descr);
using handle_deregister_fn = void (*)(handle_t fh);
using buf_register_fn = error_t (*)(const void* base, std::size_t length, int flags);
using buf_deregister_fn = error_t (*)(const void* base);
using read_fn = ssize_t (*)(handle_t fh, void* base, std::size_t size, off_t file_offset, off_t base_offset);

}  // namespace abi

class cufile_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "cufile"; }
  [[nodiscard]] std::string message(int value) const override {
    // CUfileOpError, in the words of the API reference (§4.1.3).
    switch (value) {
      case 5001: return "cuFile: the nvidia-fs driver is not loaded";
      case 5002: return "cuFile: invalid property";
      case 5003: return "cuFile: property range error";
      case 5004: return "cuFile: nvidia-fs driver version mismatch";
      case 5005: return "cuFile: nvidia-fs driver version read error";
      case 5006: return "cuFile: driver shutdown in progress";
      case 5007: return "cuFile: GDS is not supported on this platform";
      case 5008: return "cuFile: GDS is not supported on this file";
      case 5009: return "cuFile: GDS is not supported on this GPU";
      case 5010: return "cuFile: nvidia-fs driver ioctl error";
      case 5011: return "cuFile: CUDA driver API error";
      case 5012: return "cuFile: invalid device pointer";
      case 5013: return "cuFile: invalid pointer memory type";
      case 5014: return "cuFile: pointer range exceeds the allocated address range";
      case 5015: return "cuFile: CUDA context mismatch";
      case 5016: return "cuFile: access beyond the maximum pinned memory size";
      case 5017: return "cuFile: access beyond the mapped size";
      case 5018: return "cuFile: unsupported file type";
      case 5019: return "cuFile: unsupported file open flags";
      case 5020: return "cuFile: the file descriptor is not opened with O_DIRECT";
      case 5022: return "cuFile: invalid API arguments";
      case 5023: return "cuFile: device pointer already registered";
      case 5024: return "cuFile: device pointer lookup failure";
      case 5025: return "cuFile: driver or file access error";
      case 5026: return "cuFile: driver already open";
      case 5027: return "cuFile: file descriptor not registered";
      case 5028: return "cuFile: file descriptor already registered";
      case 5029: return "cuFile: GPU device not found";
      case 5030: return "cuFile: internal error";
      case 5031: return "cuFile: failed to obtain a new file descriptor";
      case 5033: return "cuFile: nvidia-fs driver initialization error";
      case 5034: return "cuFile: GDS disabled by configuration for this file";
      case 5036: return "cuFile: failed to allocate pinned GPU memory";
      case 5043: return "cuFile: out of memory";
      case 5044: return "cuFile: I/O error";
      case 5045: return "cuFile: buffer registration error";
      case 5047: return "cuFile: invalid CUDA context";
      case 5048: return "cuFile: nvidia-fs internal driver error";
      case 5049: return "cuFile: compatibility mode is off";
      default: return "cuFile error " + std::to_string(value);
    }
  }
};

error_code cufile_error(const abi::error_t& e) noexcept { return {e.err, cufile_category()}; }

/// libcufile's entry points, resolved once per process. The library is never unloaded: cuFile
/// starts threads of its own, and a driver reference of another component may still be open.
struct cufile_library {
  std::string error;  // why it is unusable; empty when it is usable
  abi::driver_open_fn driver_open = nullptr;
  abi::driver_close_fn driver_close = nullptr;  // cuFileDriverClose_v2; null before GDS 1.6
  abi::get_properties_fn get_properties = nullptr;
  abi::handle_register_fn handle_register = nullptr;
  abi::handle_deregister_fn handle_deregister = nullptr;
  abi::buf_register_fn buf_register = nullptr;
  abi::buf_deregister_fn buf_deregister = nullptr;
  abi::read_fn read = nullptr;
};

template <class Fn>
void resolve(void* library, const char* symbol, Fn& fn) noexcept {
  // POSIX guarantees that a dlsym result converts to the function pointer type it names.
  fn = reinterpret_cast<Fn>(::dlsym(library, symbol));
}

cufile_library load_cufile() {
  cufile_library lib;
  void* handle = ::dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    // dlerror's buffer is per thread in glibc; this runs once, under the static's guard.
    const char* why = ::dlerror();  // NOLINT(concurrency-mt-unsafe)
    lib.error = why != nullptr ? why : "libcufile.so.0 could not be loaded";
    return lib;
  }
  resolve(handle, "cuFileDriverOpen", lib.driver_open);
  resolve(handle, "cuFileDriverClose_v2", lib.driver_close);
  resolve(handle, "cuFileDriverGetProperties", lib.get_properties);
  resolve(handle, "cuFileHandleRegister", lib.handle_register);
  resolve(handle, "cuFileHandleDeregister", lib.handle_deregister);
  resolve(handle, "cuFileBufRegister", lib.buf_register);
  resolve(handle, "cuFileBufDeregister", lib.buf_deregister);
  resolve(handle, "cuFileRead", lib.read);
  const std::pair<const char*, bool> required[] = {
      {"cuFileDriverOpen", lib.driver_open != nullptr},
      {"cuFileHandleRegister", lib.handle_register != nullptr},
      {"cuFileHandleDeregister", lib.handle_deregister != nullptr},
      {"cuFileBufRegister", lib.buf_register != nullptr},
      {"cuFileBufDeregister", lib.buf_deregister != nullptr},
      {"cuFileRead", lib.read != nullptr},
  };
  for (const auto& [symbol, found] : required) {
    if (!found) {
      lib.error = std::string("libcufile.so.0 does not export ") + symbol;
      break;
    }
  }
  return lib;
}

const cufile_library& cufile() {
  static const cufile_library lib = load_cufile();
  return lib;
}

/// A registered CUfileHandle_t, deregistered on destruction.
class file_handle {
 public:
  file_handle() = default;
  explicit file_handle(abi::handle_t h) noexcept : handle_(h) {}
  file_handle(file_handle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  file_handle& operator=(file_handle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  file_handle(const file_handle&) = delete;
  file_handle& operator=(const file_handle&) = delete;
  ~file_handle() { reset(); }
  [[nodiscard]] abi::handle_t get() const noexcept { return handle_; }

 private:
  void reset() noexcept {
    if (handle_ != nullptr) cufile().handle_deregister(std::exchange(handle_, nullptr));
  }
  abi::handle_t handle_ = nullptr;
};

/// Device memory registered with cuFileBufRegister for one read, deregistered on destruction.
class buffer_registration {
 public:
  buffer_registration(const void* base, std::size_t length) noexcept
      : base_(cufile().buf_register(base, length, 0).err == 0 ? base : nullptr) {}
  buffer_registration(const buffer_registration&) = delete;
  buffer_registration& operator=(const buffer_registration&) = delete;
  ~buffer_registration() {
    if (base_ != nullptr) static_cast<void>(cufile().buf_deregister(base_));
  }
  [[nodiscard]] bool registered() const noexcept { return base_ != nullptr; }

 private:
  const void* base_;
};

}  // namespace

const boost::system::error_category& cufile_category() noexcept {
  static const cufile_category_impl category;
  return category;
}

std::optional<config_error> cufile_config::validate() const { return check_chunk_bytes(chunk_bytes); }

bool cufile_available(error_code& ec) noexcept {
  try {
    ec = cufile().error.empty() ? error_code{} : error_code(errc::unavailable);
  } catch (const std::bad_alloc&) {
    ec = make_error_code(boost::system::errc::not_enough_memory);
  }
  return !ec;
}

std::string cufile_unavailable_reason() { return cufile().error; }

cufile_driver cufile_driver::open(error_code& ec) {
  const cufile_library& lib = cufile();
  if (!lib.error.empty()) {
    ec = errc::unavailable;
    return {};
  }
  const abi::error_t e = lib.driver_open();
  if (e.err == abi::driver_already_open) {
    ec = {};  // a library without reference counting, opened before: nothing of ours to close
    return {};
  }
  if (e.err != 0) {
    ec = cufile_error(e);
    return {};
  }
  ec = {};
  // Without cuFileDriverClose_v2 closing would tear the driver down under every other user.
  return cufile_driver(lib.driver_close != nullptr);
}

cufile_driver cufile_driver::open() {
  error_code ec;
  cufile_driver driver = open(ec);
  detail::throw_on_error(ec, "sluice::file::cufile_driver::open");
  return driver;
}

cufile_driver::cufile_driver(cufile_driver&& other) noexcept : owned_(std::exchange(other.owned_, false)) {}
cufile_driver& cufile_driver::operator=(cufile_driver&& other) noexcept {
  if (this != &other) {
    reset();
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}
cufile_driver::~cufile_driver() { reset(); }

void cufile_driver::reset() noexcept {
  if (std::exchange(owned_, false)) static_cast<void>(cufile().driver_close());
}

cufile_properties cufile_driver::properties() const {
  cufile_properties out;
  const cufile_library& lib = cufile();
  if (!lib.error.empty() || lib.get_properties == nullptr) return out;
  // Room for every CUfileDrvProps_t layout so far (under 100 bytes) and then some.
  alignas(std::max_align_t) std::byte props[512]{};
  if (lib.get_properties(props).err != 0) return out;
  abi::drv_props_nvfs nvfs{};
  std::memcpy(&nvfs, props, sizeof nvfs);
  out.nvfs_major = nvfs.major_version;
  out.nvfs_minor = nvfs.minor_version;
  out.compat_mode_allowed = (nvfs.dcontrolflags & (1U << abi::control_allow_compat_mode)) != 0;
  return out;
}

struct cufile_reader::state {
  cufile_config config;
  // Declared in acquisition order: destroyed handle first, then the descriptor, then the driver.
  cufile_driver driver;
  unique_fd fd;
  file_handle handle;
  std::uint64_t size = 0;
  bool direct = false;
  bool registered = false;
  cufile_properties properties;
};

cufile_reader::cufile_reader() noexcept = default;
cufile_reader::cufile_reader(std::unique_ptr<state> s) noexcept : state_(std::move(s)) {}
cufile_reader::cufile_reader(cufile_reader&& other) noexcept = default;
cufile_reader& cufile_reader::operator=(cufile_reader&& other) noexcept = default;
cufile_reader::~cufile_reader() = default;

cufile_reader cufile_reader::open(const std::filesystem::path& path, const cufile_config& config, error_code& ec) {
  if (config.validate()) {
    ec = errc::invalid_config;
    return {};
  }
  auto s = std::make_unique<state>();
  s->config = config;
  s->driver = cufile_driver::open(ec);
  if (ec) return {};
  s->properties = s->driver.properties();
  opened_file file = open_for_reading(path, config.direct, ec);
  if (ec) return {};
  s->fd = std::move(file.fd);
  s->size = file.size;
  s->direct = file.direct;
  abi::descr_t descr{};
  descr.type = abi::handle_type_opaque_fd;
  descr.handle.fd = s->fd.get();
  abi::handle_t handle = nullptr;
  if (const abi::error_t e = cufile().handle_register(&handle, &descr); e.err != 0) {
    ec = cufile_error(e);
    return {};
  }
  s->handle = file_handle(handle);
  ec = {};
  return cufile_reader(std::move(s));
}

cufile_reader cufile_reader::open(const std::filesystem::path& path, const cufile_config& config) {
  error_code ec;
  cufile_reader reader = open(path, config, ec);
  detail::throw_on_error(ec, "sluice::file::cufile_reader::open");
  return reader;
}

std::uint64_t cufile_reader::size() const noexcept { return state_ ? state_->size : 0; }
bool cufile_reader::direct() const noexcept { return state_ && state_->direct; }
const cufile_properties& cufile_reader::properties() const noexcept {
  static const cufile_properties none{};
  return state_ ? state_->properties : none;
}
bool cufile_reader::registered() const noexcept { return state_ && state_->registered; }
void* cufile_reader::native_handle() const noexcept { return state_ ? state_->handle.get() : nullptr; }

std::size_t cufile_reader::read(std::uint64_t offset, const region& destination, error_code& ec) {
  if (!state_ || (destination.data == nullptr && destination.size != 0)) {
    ec = errc::invalid_argument;
    return 0;
  }
  if (destination.kind != memory_kind::cuda_device) {
    ec = errc::unsupported_memory;
    return 0;
  }
  if (!range_inside(offset, destination.size, state_->size)) {
    ec = errc::bad_range;
    return 0;
  }
  state_->registered = false;
  ec = {};
  if (destination.size == 0) return 0;
  std::optional<buffer_registration> registration;
  if (state_->config.register_buffer) {
    registration.emplace(destination.data, destination.size);
    state_->registered = registration->registered();
  }
  const cufile_library& lib = cufile();
  std::size_t done = 0;
  while (done < destination.size) {
    const std::size_t length = std::min(state_->config.chunk_bytes, destination.size - done);
    // Base and offset rather than base + done: a registered buffer is found by its base.
    const ssize_t r = lib.read(state_->handle.get(), destination.data, length, static_cast<off_t>(offset + done),
                               static_cast<off_t>(done));
    if (r > 0) {
      done += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) {
      ec = errc::bad_range;  // end of file before the range's end: the file shrank
    } else if (r == -1) {
      if (errno == EINTR || errno == EAGAIN) continue;
      ec = errno_error(errno);
    } else if (-r > abi::base_error) {
      ec = {static_cast<int>(-r), cufile_category()};
    } else {
      ec = errno_error(static_cast<int>(-r));
    }
    return 0;
  }
  return destination.size;
}

std::size_t cufile_reader::read(std::uint64_t offset, const region& destination) {
  error_code ec;
  const std::size_t n = read(offset, destination, ec);
  detail::throw_on_error(ec, "sluice::file::cufile_reader::read");
  return n;
}

}  // namespace sluice::file
