// SPDX-License-Identifier: Apache-2.0
// The cufile transport: a file range read straight into GPU memory by NVIDIA's cuFile library
// (GPUDirect Storage). libcufile.so.0 is loaded at run time (dlopen), so sluice neither links
// against it nor needs cufile.h to build; a host without it gets errc::unavailable.
//
// What cuFile does with a read depends on the host: with the nvidia-fs driver (or PCIe P2PDMA)
// and a supported file system, the NVMe DMA engine writes into device memory; otherwise, when
// its configuration allows "compatibility mode" (the default), it reads into host memory with
// POSIX calls and copies to the device itself. properties() says which of these the host offers.
#pragma once

#include <sluice/config.hpp>
#include <sluice/error.hpp>
#include <sluice/region.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace sluice::file {

/// The category of cuFile's CUfileOpError values (5001 and up); its name() is "cufile".
[[nodiscard]] const boost::system::error_category& cufile_category() noexcept;

/// How a cufile_reader reads.
struct cufile_config {
  std::size_t chunk_bytes = 16 * mib;  ///< bytes per cuFileRead call; a multiple of 4096
  bool direct = true;                  ///< open the file O_DIRECT (GDS needs it; falls back without on EINVAL)
  /// cuFileBufRegister the destination for the duration of each read: pays off for large reads
  /// into memory read into again; costly for one-off small reads, and refused when the GPU's BAR1
  /// space is exhausted (the read then proceeds unregistered: see cufile_reader::registered()).
  bool register_buffer = false;

  /// Valid when chunk_bytes is a multiple of 4096 between 4 KiB and 1 GiB.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// What the cuFile driver reports about this host (cuFileDriverGetProperties).
struct cufile_properties {
  unsigned nvfs_major = 0;  ///< nvidia-fs kernel driver version; 0.0 when the driver is not loaded
  unsigned nvfs_minor = 0;
  /// properties.allow_compat_mode: where no direct path exists, reads go through host memory
  /// (POSIX reads plus a copy, done by cuFile) instead of failing.
  bool compat_mode_allowed = false;
  /// Our reading of the above: no nvidia-fs driver, compat mode allowed, so reads most likely
  /// bounce through host memory (cuFile can still go direct by PCIe P2PDMA on recent kernels).
  [[nodiscard]] bool compat_mode_likely() const noexcept {
    return nvfs_major == 0 && nvfs_minor == 0 && compat_mode_allowed;
  }
};

/// True when libcufile.so.0 loads and exports what cufile_reader calls (the driver is not
/// opened). False: errc::unavailable in `ec`, the loader's words in cufile_unavailable_reason().
[[nodiscard]] bool cufile_available(error_code& ec) noexcept;

/// Why cufile_available is false (dlopen's or dlsym's message), "" when it is true.
[[nodiscard]] std::string cufile_unavailable_reason();

/// A reference to the cuFile driver (cuFileDriverOpen, released with cuFileDriverClose_v2).
/// cuFile sets itself up when the first reference opens and tears down when the last one closes,
/// each way taking a good part of a second: hold one for as long as files are read, so that
/// each cufile_reader (which takes a reference of its own) does not pay it again. Move-only.
class cufile_driver {
 public:
  /// No reference.
  cufile_driver() noexcept = default;
  /// Loads libcufile (once per process, never unloaded: cuFile keeps threads of its own) and
  /// opens the driver. Errors: errc::unavailable (no libcufile), a cufile_category error.
  [[nodiscard]] static cufile_driver open(error_code& ec);
  /// Throwing overload.
  [[nodiscard]] static cufile_driver open();

  cufile_driver(cufile_driver&& other) noexcept;
  cufile_driver& operator=(cufile_driver&& other) noexcept;
  cufile_driver(const cufile_driver&) = delete;
  cufile_driver& operator=(const cufile_driver&) = delete;
  ~cufile_driver();

  /// True when this object holds a reference (false when empty, or when the library predates
  /// reference counting, GDS < 1.6: the driver then stays open until the process exits).
  [[nodiscard]] bool holds_reference() const noexcept { return owned_; }
  /// The driver's properties (cuFileDriverGetProperties); all zero when they cannot be read.
  [[nodiscard]] cufile_properties properties() const;

 private:
  explicit cufile_driver(bool owned) noexcept : owned_(owned) {}
  void reset() noexcept;
  bool owned_ = false;
};

/// A file opened for cuFile reads: a cuFile driver reference, the file descriptor and its cuFile
/// handle, released in reverse order on destruction. Move-only; thread-safe as cuFile is.
class cufile_reader {
 public:
  /// An empty reader; only assignment and destruction are valid.
  cufile_reader() noexcept;
  /// Opens a cufile_driver reference, opens `path` (O_DIRECT when config.direct, without on
  /// EINVAL) and registers it with cuFileHandleRegister. Errors: errc::invalid_config,
  /// errc::unavailable (no libcufile), a cufile_category error (driver or handle registration
  /// refused: cuFile needs the udev database to classify the file's block device, so in a
  /// container without /run/udev registration fails with "file descriptor not registered"),
  /// the errno of open/fstat.
  [[nodiscard]] static cufile_reader open(const std::filesystem::path& path, const cufile_config& config,
                                          error_code& ec);
  /// Throwing overload.
  [[nodiscard]] static cufile_reader open(const std::filesystem::path& path, const cufile_config& config = {});

  cufile_reader(cufile_reader&& other) noexcept;
  cufile_reader& operator=(cufile_reader&& other) noexcept;
  cufile_reader(const cufile_reader&) = delete;
  cufile_reader& operator=(const cufile_reader&) = delete;
  ~cufile_reader();

  /// The file's size in bytes when it was opened.
  [[nodiscard]] std::uint64_t size() const noexcept;
  /// True when the file descriptor was opened with O_DIRECT.
  [[nodiscard]] bool direct() const noexcept;
  /// The driver's properties, read when the reader was opened.
  [[nodiscard]] const cufile_properties& properties() const noexcept;
  /// Whether the last read's destination was registered (config.register_buffer and accepted).
  [[nodiscard]] bool registered() const noexcept;
  /// The CUfileHandle_t, nullptr for an empty reader.
  [[nodiscard]] void* native_handle() const noexcept;

  /// Reads the file range [offset, offset + destination.size) into `destination` (cuda_device
  /// memory of the calling thread's current CUDA device: call cudaSetDevice first) in
  /// chunk_bytes cuFileRead calls, continuing short reads; blocks until done. Returns
  /// destination.size, or 0 on error. Errors: errc::bad_range (the range is not inside the
  /// file, or the file ended early), errc::unsupported_memory (not device memory), a
  /// cufile_category error, the errno of a failed read (system_category).
  std::size_t read(std::uint64_t offset, const region& destination, error_code& ec);
  /// Throwing overload.
  std::size_t read(std::uint64_t offset, const region& destination);

 private:
  struct state;
  explicit cufile_reader(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> state_;
};

}  // namespace sluice::file
