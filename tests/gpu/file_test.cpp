// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/file.hpp>

#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/grant.hpp>
#include <sluice/cuda/pinned.hpp>
#include <sluice/file/cufile.hpp>
#include <sluice/file/residency.hpp>
#include <sluice/file/uring_reader.hpp>

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>
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
  fs::path path;
  std::vector<std::byte> data;
  explicit test_file(const std::string& name = "file", std::uint64_t seed = 42)
      : path(fs::temp_directory_path() / ("sluice-gpu-" + name + "-" + std::to_string(::getpid()))),
        data(random_bytes(size, seed)) {
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
    CHECK(report.residency_probe != file::residency_probe::automatic);  // names the call that ran
    CHECK(report.pageable_bytes == 0);                                  // every chunk registered
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

namespace {

// An opener of its own (cuda/grant.hpp) with the smallest chunks it takes (1 MiB) and no
// registration ahead, so that the cases below see chunk edges and count what they register.
std::shared_ptr<s3::device_grant_opener> small_chunk_opener(std::size_t copy_threads) {
  cuda::grant_opener_config config;
  config.chunk_bytes = std::size_t{1} << 20;
  config.register_ahead_bytes = 0;
  config.copy_threads = copy_threads;
  error_code ec;
  auto opener = cuda::make_grant_opener(config, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  return opener;
}

}  // namespace

TEST_CASE("file to device: mapped with small chunks, with and without copy threads") {
  for (const std::size_t copy_threads : {std::size_t{0}, std::size_t{4}}) {
    CAPTURE(copy_threads);
    cuda::file_to_device_options options;
    options.method = cuda::file_method::mapped;
    options.registrations = small_chunk_opener(copy_threads);
    check_sizes(options);                                // up to 257 chunks
    check_read(options, (std::size_t{1} << 20) - 1, 2);  // across a chunk edge
    check_read(options, 4095, 2);
    check_read(options, 1, 4096);
  }
}

TEST_CASE("file to device: a second mapped read of a file version copies from the registrations kept") {
  const auto opener = small_chunk_opener(0);
  cuda::file_to_device_options options;
  options.method = cuda::file_method::mapped;
  options.registrations = opener;
  const std::size_t length = std::size_t{32} << 20;
  check_read(options, 8192, length);
  const cuda::grant_opener_stats first = cuda::stats_of(*opener);
  CHECK(first.registrations >= length >> 20);
  CHECK(first.cached_versions == 1);
  check_read(options, 8192, length);
  check_read(options, 8192 + 4096, length - 8192);  // another range of the same version
  const cuda::grant_opener_stats second = cuda::stats_of(*opener);
  CHECK(second.registrations == first.registrations);  // nothing registered again
  CHECK(second.cache_hits >= first.cache_hits + 2 * (length >> 20));
  CHECK(second.cached_versions == 1);
}

TEST_CASE("file to device: a file rewritten after a mapped read is read anew") {
  // Truncated and written again with other bytes of the same size: new pages in the page cache,
  // while the first read's registrations still pin the old ones. The version (size, mtime,
  // ctime) differs, so the second read registers the new pages.
  const test_file file("rewritten", 7);
  const auto opener = small_chunk_opener(0);
  cuda::file_to_device_options options;
  options.method = cuda::file_method::mapped;
  options.registrations = opener;
  const std::size_t length = std::size_t{4} << 20;
  auto device = cuda::device_buffer::allocate(length);
  REQUIRE(cuda::read_file_to_device(file.path, 0, device.region(), options) == length);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the file system's timestamp tick
  const std::vector<std::byte> other = random_bytes(file.size, 8);
  {
    std::ofstream out(file.path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(other.data()), static_cast<std::streamsize>(other.size()));
    REQUIRE(out.good());
  }
  REQUIRE(cuda::read_file_to_device(file.path, 0, device.region(), options) == length);
  std::vector<std::byte> back(length);
  REQUIRE(!cuda::copy(host_region(back), device.region()));
  CHECK(std::equal(back.begin(), back.end(), other.begin()));
  CHECK(cuda::stats_of(*opener).cached_versions == 2);
}

TEST_CASE("file to device: mapped reads a cold file too (resident_threshold 0)") {
  const test_file& file = shared_file();
  {
    const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::fsync(fd) == 0);
    CHECK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
  }
  cuda::file_to_device_options options;
  options.method = cuda::file_method::automatic;
  options.resident_threshold = 0;  // whatever the cache holds
  const std::size_t length = std::size_t{32} << 20;
  auto device = cuda::device_buffer::allocate(length);
  REQUIRE(!cuda::fill(device.region(), poison));
  cuda::file_to_device_report report;
  CHECK(cuda::read_file_to_device(file.path, 8192, device.region(), options, &report) == length);
  CHECK(report.method == cuda::file_method::mapped);
  MESSAGE("mapped on a dropped file: resident " << report.resident_fraction << " by "
                                                << std::string(file::to_string(report.residency_probe)));
  std::vector<std::byte> back(length);
  REQUIRE(!cuda::copy(host_region(back), device.region()));
  CHECK(std::equal(back.begin(), back.end(), file.data.begin() + 8192));
}

TEST_CASE("file to device: automatic picks mapped for a resident file, uring for a cold one") {
  // A file of its own: the shared one is held registered (pinned, so resident for good) by the
  // process's opener after the mapped cases.
  const test_file file("automatic", 43);
  auto device = cuda::device_buffer::allocate(8 << 20);
  cuda::file_to_device_options options;
  options.method = cuda::file_method::automatic;
  options.registrations = small_chunk_opener(0);  // dropped before the file is: its pages unpinned
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
  options.registrations.reset();  // the opener goes, and its registrations with it
  {                               // out of the page cache (the file is written and synced)
    const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::fsync(fd) == 0);
    CHECK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
  }
  static_cast<void>(cuda::read_file_to_device(file.path, 0, device.region(), options, &report));
  MESSAGE("automatic on a dropped file: " << std::string(cuda::to_string(report.method)) << ", resident "
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
  for (const auto method : {cuda::file_method::mapped, cuda::file_method::automatic}) {
    cuda::file_to_device_options options;
    options.method = method;
    CHECK(cuda::read_file_to_device(file.path, file.size - 100, device.region(), options, nullptr, ec) == 0);
    CHECK(ec == errc::bad_range);
    CHECK(cuda::read_file_to_device("/nonexistent/sluice", 0, device.region(), options, nullptr, ec) == 0);
    CHECK(ec == std::errc::no_such_file_or_directory);
  }
  const auto refused = [&](const std::function<void(cuda::file_to_device_options&)>& set) {
    cuda::file_to_device_options options;
    options.method = cuda::file_method::mapped;
    set(options);
    CHECK(options.validate().has_value());
    CHECK(cuda::read_file_to_device(file.path, 0, device.region(), options, nullptr, ec) == 0);
    CHECK(ec == errc::invalid_config);
  };
  refused([](auto& o) { o.mapped_chunk_bytes = std::size_t{2} << 30; });
  refused([](auto& o) { o.mapped_chunk_bytes = 1000; });
  refused([](auto& o) { o.mapped_chunk_bytes = 0; });
  refused([](auto& o) { o.resident_threshold = 1.5; });
  refused([](auto& o) { o.resident_threshold = -0.1; });
  CHECK_FALSE(cuda::file_to_device_options{}.validate().has_value());
  std::vector<std::byte> host(4096);
  CHECK(cuda::read_file_to_device(file.path, 0, host_region(host), {}, nullptr, ec) == 0);
  CHECK(ec == errc::unsupported_memory);
  CHECK_THROWS_AS(static_cast<void>(cuda::read_file_to_device(file.path, 0, host_region(host))), system_error);
}

// -- 4 GiB rates (skipped in the suite; `run.sh file` runs it) ------------------------------------

namespace {

constexpr std::size_t big_size = std::size_t{4} << 30;
constexpr std::size_t big_piece = std::size_t{64} << 20;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double cpu_seconds() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double gib_per_s(double seconds) {
  return static_cast<double>(big_size) / static_cast<double>(std::size_t{1} << 30) / seconds;
}

// A 4 GiB file of seeded random bytes (64 MiB pieces), written and fsynced, removed at the end;
// `expected` holds its bytes.
struct big_file {
  fs::path path = fs::temp_directory_path() / ("sluice-gpu-file-4g-" + std::to_string(::getpid()));
  std::vector<std::byte> expected;
  big_file() {
    expected.resize(big_size);
    for (std::size_t at = 0; at < big_size; at += big_piece) {
      const auto piece = random_bytes(big_piece, 1000 + at / big_piece);
      std::memcpy(expected.data() + at, piece.data(), big_piece);
    }
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    for (std::size_t done = 0; done < big_size;) {
      const ssize_t n = ::write(fd, expected.data() + done, std::min(big_size - done, big_piece));
      REQUIRE(n > 0);
      done += static_cast<std::size_t>(n);
    }
    REQUIRE(::fsync(fd) == 0);
    ::close(fd);
  }
  big_file(const big_file&) = delete;
  big_file& operator=(const big_file&) = delete;
  ~big_file() {
    std::error_code ignored;
    fs::remove(path, ignored);
  }
  // Out of the page cache (written and synced, so DONTNEED drops every page).
  void drop() const {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::fsync(fd) == 0);
    CHECK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
  }
  // Every page read once through the cache.
  void warm() const {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::vector<std::byte> buffer(big_piece);
    while (::read(fd, buffer.data(), buffer.size()) > 0) {
    }
    ::close(fd);
  }
  [[nodiscard]] double resident() const { return file::page_cache_residency(path, 0, big_size).fraction(); }
};

// Copies the device buffer back in 256 MiB pieces and compares it with the file's bytes.
bool device_matches(const cuda::device_buffer& device, const big_file& file) {
  std::vector<std::byte> back(std::size_t{256} << 20);
  for (std::size_t at = 0; at < big_size; at += back.size()) {
    error_code ec;
    const region piece = device.region().subregion(at, back.size(), ec);
    if (ec || cuda::copy(host_region(back), piece)) return false;
    if (std::memcmp(back.data(), file.expected.data() + at, back.size()) != 0) return false;
  }
  return true;
}

struct aligned_free {
  void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{4096}); }
};

}  // namespace

TEST_CASE("file to device: 4 GiB rates against the pinned ceiling and the disk" * doctest::skip()) {
  const big_file file;
  auto device = cuda::device_buffer::allocate(big_size);
  std::printf("\n== file -> GPU, 4 GiB (%s); GiB/s, median of the runs listed\n", file.path.c_str());
  const auto runs_text = [](const std::vector<double>& seconds) {
    std::string out;
    for (const double t : seconds) {
      if (!out.empty()) out += ' ';
      out += std::to_string(gib_per_s(t)).substr(0, 5);
    }
    return out;
  };

  // Pinned H2D ceiling: one 256 MiB pinned buffer copied 16 times (as the GPU bench does).
  auto pinned = cuda::pinned_buffer::allocate(std::size_t{256} << 20);
  std::memcpy(pinned.native_handle(), file.expected.data(), pinned.size());
  const auto h2d = [&] {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t at = 0; at < big_size; at += pinned.size()) {
      error_code ec;
      REQUIRE(!cuda::copy(device.region().subregion(at, pinned.size(), ec), pinned.region()));
    }
    return seconds_since(start);
  };
  static_cast<void>(h2d());  // warm-up
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) times.push_back(h2d());
  const double ceiling = gib_per_s(median(times));
  std::printf("%-52s %6.2f  (%s)\n", "ceiling: pinned H2D (cudaMemcpy, 256 MiB pieces)", ceiling,
              runs_text(times).c_str());

  // One read_file_to_device run after `prepare`, verified when `verify`; its seconds.
  cuda::file_to_device_report report;
  double cpu = 0;
  const auto run_once = [&](const cuda::file_to_device_options& options, const std::function<void()>& prepare,
                            bool verify) {
    REQUIRE(!cuda::fill(device.region(), poison));
    prepare();
    const double cpu_start = cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    error_code ec;
    const std::uint64_t n = cuda::read_file_to_device(file.path, 0, device.region(), options, &report, ec);
    const double seconds = seconds_since(start);
    cpu = cpu_seconds() - cpu_start;
    REQUIRE_MESSAGE(!ec, ec.message());
    REQUIRE(n == big_size);
    if (verify) CHECK(device_matches(device, file));
    return seconds;
  };
  const auto describe = [&] {
    return std::string(cuda::to_string(report.method)) + (report.direct_io ? ", O_DIRECT" : "") + ", resident " +
           std::to_string(static_cast<int>(report.resident_fraction * 100)) + " % by " +
           file::to_string(report.residency_probe) + ", " + std::to_string(cpu / 4).substr(0, 5) + " CPU-s/GiB";
  };

  // Cold: the disk's O_DIRECT rate into host memory (three shapes) and automatic on the dropped
  // file, interleaved round by round so that a drift of the disk hits every row alike.
  std::unique_ptr<std::byte[], aligned_free> host(
      static_cast<std::byte*>(::operator new[](big_size, std::align_val_t{4096})));
  const auto disk_pread = [&] {
    file.drop();
    const int fd = ::open(file.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t done = 0; done < big_size;) {
      const ssize_t n = ::pread(fd, host.get() + done, big_piece, static_cast<off_t>(done));
      REQUIRE(n > 0);
      done += static_cast<std::size_t>(n);
    }
    const double seconds = seconds_since(start);
    ::close(fd);
    return seconds;
  };
  const auto disk_uring = [&](std::uint32_t depth) {
    file.drop();
    auto reader = file::uring_reader::open(file.path,
                                           {.queue_depth = depth, .chunk_bytes = std::size_t{8} << 20, .direct = true});
    REQUIRE(reader.direct());
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(reader.read(0, {host.get(), big_size}) == big_size);
    return seconds_since(start);
  };
  cuda::file_to_device_options automatic;
  automatic.method = cuda::file_method::automatic;
  cuda::file_to_device_options automatic_deep = automatic;
  automatic_deep.queue_depth = 8;
  std::vector<double> t_pread;
  std::vector<double> t_uring4;
  std::vector<double> t_uring8;
  std::vector<double> t_cold;
  std::vector<double> t_cold8;
  std::string cold_how;
  for (int round = 0; round < 3; ++round) {
    t_pread.push_back(disk_pread());
    t_uring4.push_back(disk_uring(4));
    t_uring8.push_back(disk_uring(8));
    t_cold.push_back(run_once(
        automatic, [&] { file.drop(); }, round == 0));
    CHECK(report.method == cuda::file_method::uring);
    CHECK(report.resident_fraction < 0.1);
    cold_how = describe();
    t_cold8.push_back(run_once(
        automatic_deep, [&] { file.drop(); }, round == 0));
  }
  CHECK(std::memcmp(host.get(), file.expected.data(), big_size) == 0);
  const double disk = std::max({gib_per_s(median(t_pread)), gib_per_s(median(t_uring4)), gib_per_s(median(t_uring8))});
  std::printf("%-52s %6.2f  (%s)\n", "ceiling: disk O_DIRECT pread 64 MiB -> host", gib_per_s(median(t_pread)),
              runs_text(t_pread).c_str());
  std::printf("%-52s %6.2f  (%s)\n", "ceiling: disk O_DIRECT io_uring 4 x 8 MiB -> host", gib_per_s(median(t_uring4)),
              runs_text(t_uring4).c_str());
  std::printf("%-52s %6.2f  (%s)\n", "ceiling: disk O_DIRECT io_uring 8 x 8 MiB -> host", gib_per_s(median(t_uring8)),
              runs_text(t_uring8).c_str());
  const double cold = gib_per_s(median(t_cold));
  std::printf("%-52s %6.2f  (%s)  %.2fx disk  [%s]\n", "automatic, cold file (queue_depth 4)", cold,
              runs_text(t_cold).c_str(), cold / disk, cold_how.c_str());
  const double cold8 = gib_per_s(median(t_cold8));
  std::printf("%-52s %6.2f  (%s)  %.2fx disk  [%s]\n", "automatic, cold file (queue_depth 8)", cold8,
              runs_text(t_cold8).c_str(), cold8 / disk, describe().c_str());

  // Resident: mapped through a grant opener of the test's own (made before the clock starts,
  // as a process makes one once): the first read of the file version (a fresh opener each run:
  // registration from the front, copy threads from the back), then reads of a version held
  // registered; the first read for the chunk sizes too.
  file.warm();
  const auto opener_with = [](std::size_t chunk) {
    cuda::grant_opener_config config;
    config.chunk_bytes = chunk;
    error_code ec;
    auto opener = cuda::make_grant_opener(config, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    return opener;
  };
  cuda::file_to_device_options mapped = automatic;
  double first = 0;  // the first read with the default 64 MiB chunks
  for (const std::size_t chunk_mib : {std::size_t{64}, std::size_t{16}, std::size_t{256}}) {
    times.clear();
    for (int i = 0; i < 3; ++i) {
      mapped.registrations = opener_with(chunk_mib << 20);
      times.push_back(run_once(
          mapped, [] {}, i == 0));
      CHECK(report.method == cuda::file_method::mapped);
    }
    mapped.registrations.reset();
    if (chunk_mib == 64) first = gib_per_s(median(times));
    const std::string name = "automatic, resident, first read (" + std::to_string(chunk_mib) + " MiB chunks)";
    std::printf("%-52s %6.2f  (%s)  %.2fx pinned  [%s]\n", name.c_str(), gib_per_s(median(times)),
                runs_text(times).c_str(), gib_per_s(median(times)) / ceiling, describe().c_str());
  }
  mapped.registrations = opener_with(std::size_t{64} << 20);
  static_cast<void>(run_once(
      mapped, [] {}, false));                            // the first read: registers the version
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the chunks the copy threads moved register too
  times.clear();
  for (int i = 0; i < 5; ++i)
    times.push_back(run_once(
        mapped, [] {}, i == 0));
  CHECK(report.method == cuda::file_method::mapped);
  CHECK(file.resident() > 0.99);
  const cuda::grant_opener_stats held = cuda::stats_of(*mapped.registrations);
  mapped.registrations.reset();
  const double again = gib_per_s(median(times));
  std::printf("%-52s %6.2f  (%s)  %.2fx pinned  [%s; %llu chunks registered, %llu copied by copy threads]\n",
              "automatic, resident, read again (registered)", again, runs_text(times).c_str(), again / ceiling,
              describe().c_str(), static_cast<unsigned long long>(held.registrations),
              static_cast<unsigned long long>(held.copied_chunks));

  // What one 4 GiB registration costs, step by step, on a fresh mapping of the resident file.
  const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  {
    auto start = std::chrono::steady_clock::now();
    const file::page_residency by_cachestat =
        file::page_cache_residency(file.path, 0, big_size, file::residency_probe::automatic);
    const double t_probe = seconds_since(start);
    start = std::chrono::steady_clock::now();
    const file::page_residency by_mincore =
        file::page_cache_residency(file.path, 0, big_size, file::residency_probe::mincore);
    const double t_mincore = seconds_since(start);
    start = std::chrono::steady_clock::now();
    void* map = ::mmap(nullptr, big_size, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    const double t_mmap = seconds_since(start);
    start = std::chrono::steady_clock::now();
    const cudaError_t registered = cudaHostRegister(map, big_size, cudaHostRegisterReadOnly);
    const double t_register = seconds_since(start);
    start = std::chrono::steady_clock::now();
    REQUIRE(cudaMemcpy(device.native_handle(), map, big_size, cudaMemcpyHostToDevice) == cudaSuccess);
    const double t_copy = seconds_since(start);
    start = std::chrono::steady_clock::now();
    if (registered == cudaSuccess) CHECK(cudaHostUnregister(map) == cudaSuccess);
    const double t_unregister = seconds_since(start);
    start = std::chrono::steady_clock::now();
    ::munmap(map, big_size);
    const double t_munmap = seconds_since(start);
    std::printf(
        "one 4 GiB registration, step by step: probe %.4f s (%s, %.0f %%), mincore %.4f s (%.0f %%), mmap "
        "%.4f s, cudaHostRegister %.4f s (%s), copy %.4f s (%.2f GiB/s), cudaHostUnregister %.4f s, munmap "
        "%.4f s\n",
        t_probe, file::to_string(by_cachestat.probe), by_cachestat.fraction() * 100, t_mincore,
        by_mincore.fraction() * 100, t_mmap, t_register, cudaGetErrorString(registered), t_copy, gib_per_s(t_copy),
        t_unregister, t_munmap);
  }
  // An experiment, not the library's method: 64 MiB chunks registered and copied on this thread
  // while a second thread unregisters each chunk as soon as its copy is done (does unregistering
  // stall the registrations and copies running beside it?).
  {
    constexpr std::size_t chunk = std::size_t{64} << 20;
    constexpr std::size_t n = big_size / chunk;
    void* map = ::mmap(nullptr, big_size, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    auto* base = static_cast<std::byte*>(map);
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    std::vector<cudaEvent_t> done(n);
    for (auto& e : done) REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
    std::atomic<std::size_t> queued{0};
    double t_register_total = 0;
    const auto start = std::chrono::steady_clock::now();
    std::thread unregister([&] {
      for (std::size_t i = 0; i < n; ++i) {
        while (queued.load() <= i) std::this_thread::yield();
        static_cast<void>(cudaEventSynchronize(done[i]));
        static_cast<void>(cudaHostUnregister(base + i * chunk));
      }
    });
    bool ok = true;  // no REQUIRE while the other thread runs: it would never be joined
    for (std::size_t i = 0; i < n && ok; ++i) {
      const auto r = std::chrono::steady_clock::now();
      ok = cudaHostRegister(base + i * chunk, chunk, cudaHostRegisterReadOnly) == cudaSuccess;
      t_register_total += seconds_since(r);
      ok = ok && cudaMemcpyAsync(static_cast<std::byte*>(device.native_handle()) + i * chunk, base + i * chunk, chunk,
                                 cudaMemcpyHostToDevice, stream) == cudaSuccess;
      ok = ok && cudaEventRecord(done[i], stream) == cudaSuccess;
      queued.store(i + 1);
    }
    queued.store(n);  // after a failure: events never recorded complete at once
    const double t_queued = seconds_since(start);
    ok = cudaStreamSynchronize(stream) == cudaSuccess && ok;
    const double t_copied = seconds_since(start);
    unregister.join();
    CHECK(ok);
    const double t_all = seconds_since(start);
    ::munmap(map, big_size);
    for (auto& e : done) static_cast<void>(cudaEventDestroy(e));
    static_cast<void>(cudaStreamDestroy(stream));
    std::printf(
        "experiment, 64 MiB chunks, unregistering on a second thread: registrations %.4f s (all queued at "
        "%.4f s), copies done %.4f s, unregistered %.4f s: %.2f GiB/s\n",
        t_register_total, t_queued, t_copied, t_all, gib_per_s(t_all));
  }
  ::close(fd);

  std::printf(
      "targets: resident, first read %.2fx pinned H2D (>= 0.65), read again %.2fx (>= 0.85); cold %.2fx the "
      "disk's best O_DIRECT rate (>= 0.90)\n",
      first / ceiling, again / ceiling, cold / disk);
}
