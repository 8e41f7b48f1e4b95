#include <sluice/cuda/file.hpp>

#include <sluice/cuda/device_memory.hpp>
#include <sluice/file/cufile.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace sluice;

constexpr std::byte poison{0xAB};
constexpr std::size_t guard = 4096;

// Seeded random bytes (splitmix64, 8 bytes a step: 256 MiB in well under a second).
std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::uint64_t state = seed;
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    z ^= z >> 31U;
    std::memcpy(out.data() + i, &z, std::min<std::size_t>(8, n - i));
  }
  return out;
}

// One file of random bytes in the temp directory (ext4 on the device machine: O_DIRECT works),
// shared by the cases, removed at exit.
struct test_file {
  static constexpr std::size_t size = (std::size_t{256} << 20) + 3 + 3 * 4096;
  fs::path path = fs::temp_directory_path() / ("sluice-gpu-file-" + std::to_string(::getpid()));
  std::vector<std::byte> data = random_bytes(size, 42);
  test_file() {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!out.good()) throw std::runtime_error("cannot write " + path.string());
  }
  test_file(const test_file&) = delete;
  test_file& operator=(const test_file&) = delete;
  ~test_file() {
    std::error_code ignored;
    fs::remove(path, ignored);
  }
};

const test_file& shared_file() {
  static const test_file file;
  return file;
}

// Reads [offset, offset + length) of the shared file into the middle of a poisoned device buffer
// with `options`, copies everything back and checks the bytes and the guards on either side.
void check_read(const cuda::file_to_device_options& options, std::uint64_t offset, std::size_t length) {
  const std::string method = cuda::to_string(options.method);
  CAPTURE(method);
  CAPTURE(offset);
  CAPTURE(length);
  const test_file& file = shared_file();
  auto device = cuda::device_buffer::allocate(length + 2 * guard);
  REQUIRE(!cuda::fill(device.region(), poison));
  error_code ec;
  const region destination = device.region().subregion(guard, length, ec);
  REQUIRE(!ec);
  cuda::file_to_device_report report;
  const std::uint64_t n = cuda::read_file_to_device(file.path, offset, destination, options, &report, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(n == length);
  CHECK(report.method == options.method);
  CHECK(report.bytes == length);
  if (options.method == cuda::file_method::mapped) {
    CHECK(report.pinned_bytes == 0);  // the page cache itself is registered, no ring
    CHECK(report.resident_fraction >= 0);
  } else if (options.method == cuda::file_method::cufile) {
    CHECK(report.pinned_bytes == 0);
    MESSAGE("cufile: O_DIRECT " << report.direct_io << ", compat mode likely " << report.cufile_compat_mode);
  } else {
    CHECK(report.pinned_bytes > 0);
    if (options.method == cuda::file_method::buffered) CHECK_FALSE(report.direct_io);
  }

  std::vector<std::byte> back(device.size());
  REQUIRE(!cuda::copy(host_region(back), device.region()));
  const auto* want = file.data.data() + offset;
  CHECK(std::equal(back.begin() + guard, back.begin() + static_cast<std::ptrdiff_t>(guard + length), want));
  CHECK(std::all_of(back.begin(), back.begin() + guard, [](std::byte b) { return b == poison; }));
  CHECK(std::all_of(back.end() - guard, back.end(), [](std::byte b) { return b == poison; }));
}

void check_sizes(const cuda::file_to_device_options& options) {
  for (const std::size_t length :
       {std::size_t{1}, std::size_t{4095}, (std::size_t{8} << 20) + 1, (std::size_t{256} << 20) + 3}) {
    check_read(options, 0, length);
    check_read(options, 4097, length);  // an unaligned offset
  }
}

}  // namespace

TEST_CASE("file to device: through the stager with O_DIRECT io_uring reads") {
  cuda::file_to_device_options options;
  options.method = cuda::file_method::uring;
  check_sizes(options);

  // O_DIRECT on the device machine's ext4 temp directory.
  const test_file& file = shared_file();
  auto device = cuda::device_buffer::allocate(1 << 20);
  cuda::file_to_device_report report;
  static_cast<void>(cuda::read_file_to_device(file.path, 0, device.region(), options, &report));
  MESSAGE("uring: O_DIRECT " << report.direct_io << ", pinned " << report.pinned_bytes);
  CHECK(report.direct_io);
}

TEST_CASE("file to device: through the stager with buffered reads") {
  cuda::file_to_device_options options;
  options.method = cuda::file_method::buffered;
  check_sizes(options);
}

TEST_CASE("file to device: DMA from the registered page cache (mapped)") {
  cuda::file_to_device_options options;
  options.method = cuda::file_method::mapped;
  check_sizes(options);  // every size and the unaligned offset: chunk and page edges
}

TEST_CASE("file to device: automatic picks mapped for a resident file, uring for a cold one") {
  const test_file& file = shared_file();
  auto device = cuda::device_buffer::allocate(8 << 20);
  cuda::file_to_device_options options;
  options.method = cuda::file_method::automatic;
  cuda::file_to_device_report report;
  std::vector<std::byte> warm(8 << 20);
  {  // read once: resident now
    const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::pread(fd, warm.data(), warm.size(), 0) == static_cast<ssize_t>(warm.size()));
    ::close(fd);
  }
  static_cast<void>(cuda::read_file_to_device(file.path, 0, device.region(), options, &report));
  CHECK(report.method == cuda::file_method::mapped);
  CHECK(report.resident_fraction >= 0.9);
  {  // out of the page cache (the file is written and synced)
    const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::fsync(fd) == 0);
    CHECK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
  }
  static_cast<void>(cuda::read_file_to_device(file.path, 0, device.region(), options, &report));
  MESSAGE("automatic on a dropped file: " << cuda::to_string(report.method) << ", resident "
                                          << report.resident_fraction);
  CHECK(report.method == cuda::file_method::uring);
  std::vector<std::byte> back(device.size());
  REQUIRE(!cuda::copy(host_region(back), device.region()));
  CHECK(std::equal(back.begin(), back.end(), file.data.begin()));
}

TEST_CASE("file to device: reuses a caller's ring and small slots") {
  error_code ec;
  auto ring = cuda::stager::create({.slot_bytes = 64 * 1024, .slots = 3, .device = 0}, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  cuda::file_to_device_options options;
  options.ring = ring.get();
  options.queue_depth = 8;  // more than the slots: capped, never deadlocked
  check_read(options, 13, (std::size_t{4} << 20) + 5);
  check_read(options, 0, 4096);
}

TEST_CASE("file to device: with cuFile") {
  error_code ec;
  if (!file::cufile_available(ec)) {
    MESSAGE("skipped: libcufile is not installed here: " << file::cufile_unavailable_reason());
    return;
  }
  // Keeps cuFile set up across the reads (each would otherwise open and tear down the driver).
  const file::cufile_driver driver = file::cufile_driver::open(ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const file::cufile_properties properties = driver.properties();
  MESSAGE("cuFile: nvidia-fs " << properties.nvfs_major << "." << properties.nvfs_minor << ", compat mode allowed "
                               << properties.compat_mode_allowed);
  // cuFile classifies a file's block device through the udev database; a container without
  // /run/udev cannot register any file. That is the host, not this code: skip, saying so.
  if (const file::cufile_reader probe = file::cufile_reader::open(shared_file().path, {}, ec);
      ec && &ec.category() == &file::cufile_category()) {
    MESSAGE("skipped: cuFile cannot register a file here (" << ec.message() << "); see cufile.log");
    return;
  }
  REQUIRE_MESSAGE(!ec, ec.message());
  cuda::file_to_device_options options;
  options.method = cuda::file_method::cufile;
  check_sizes(options);
  SUBCASE("registered destination") {
    options.cufile.register_buffer = true;
    check_read(options, 4097, (std::size_t{8} << 20) + 1);
  }
}

TEST_CASE("file to device: errors") {
  const test_file& file = shared_file();
  auto device = cuda::device_buffer::allocate(4096);
  error_code ec;
  for (const auto method : {cuda::file_method::uring, cuda::file_method::buffered}) {
    cuda::file_to_device_options options;
    options.method = method;
    CHECK(cuda::read_file_to_device(file.path, file.size - 100, device.region(), options, nullptr, ec) == 0);
    CHECK(ec == errc::bad_range);
    CHECK(cuda::read_file_to_device("/nonexistent/sluice", 0, device.region(), options, nullptr, ec) == 0);
    CHECK(ec == std::errc::no_such_file_or_directory);
  }
  std::vector<std::byte> host(4096);
  CHECK(cuda::read_file_to_device(file.path, 0, host_region(host), {}, nullptr, ec) == 0);
  CHECK(ec == errc::unsupported_memory);
  CHECK_THROWS_AS(static_cast<void>(cuda::read_file_to_device(file.path, 0, host_region(host))), system_error);
}
