// SPDX-License-Identifier: Apache-2.0
#include <sluice/file/residency.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using sluice::errc;
using sluice::error_code;
using sluice::file::page_cache_residency;
using sluice::file::page_residency;
using sluice::file::residency_probe;

const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));

// A file of `size` bytes in the temp directory, written and fsynced, removed at the end.
class synced_file {
 public:
  explicit synced_file(std::size_t size) : size_(size) {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("sluice-residency-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::vector<char> data(size);
    for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 131 + 7);
    {
      std::ofstream out(path_, std::ios::binary);
      out.write(data.data(), static_cast<std::streamsize>(size));
      REQUIRE(out.good());
    }
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::fsync(fd) == 0);
    ::close(fd);
  }
  synced_file(const synced_file&) = delete;
  synced_file& operator=(const synced_file&) = delete;
  ~synced_file() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }
  [[nodiscard]] std::size_t size() const { return size_; }

  // Asks the kernel to drop the (clean) pages; tmpfs keeps them, other file systems drop them.
  void drop() const {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    ::close(fd);
  }
  // Reads every byte once: the whole file is in the page cache afterwards.
  void warm() const {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::vector<char> buffer(size_);
    CHECK(::pread(fd, buffer.data(), buffer.size(), 0) == static_cast<ssize_t>(size_));
    ::close(fd);
  }
  [[nodiscard]] bool on_tmpfs() const {
    struct statfs st {};
    return ::statfs(path_.c_str(), &st) == 0 && st.f_type == 0x01021994;  // TMPFS_MAGIC
  }

 private:
  fs::path path_;
  std::size_t size_;
};

page_residency probe(const synced_file& file, std::uint64_t offset, std::uint64_t length, residency_probe how) {
  error_code ec;
  const page_residency r = page_cache_residency(file.path(), offset, length, how, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  return r;
}

}  // namespace

TEST_CASE("residency: to_string names every probe") {
  CHECK(std::string(to_string(residency_probe::automatic)) == "automatic");
  CHECK(std::string(to_string(residency_probe::cachestat)) == "cachestat");
  CHECK(std::string(to_string(residency_probe::mincore)) == "mincore");
}

TEST_CASE("residency: a file just read is resident, whichever call counts") {
  const synced_file file(64 * page + 100);
  file.warm();
  const page_residency automatic = probe(file, 0, file.size(), residency_probe::automatic);
  MESSAGE("automatic probe ran as " << std::string(to_string(automatic.probe)));
  CHECK(automatic.probe != residency_probe::automatic);
  CHECK(automatic.pages == 65);
  CHECK(automatic.resident == 65);
  CHECK(automatic.fraction() == 1.0);

  const page_residency mincore = probe(file, 0, file.size(), residency_probe::mincore);
  CHECK(mincore.probe == residency_probe::mincore);
  CHECK(mincore.pages == 65);
  CHECK(mincore.resident == 65);

  error_code ec;
  const page_residency cachestat = page_cache_residency(file.path(), 0, file.size(), residency_probe::cachestat, ec);
  if (ec == std::errc::function_not_supported || ec == std::errc::operation_not_supported ||
      ec == std::errc::operation_not_permitted) {
    MESSAGE("no cachestat on this kernel: " << ec.message());
    CHECK(automatic.probe == residency_probe::mincore);
  } else {
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(cachestat.probe == residency_probe::cachestat);
    CHECK(cachestat.pages == 65);
    CHECK(cachestat.resident == 65);
    CHECK(automatic.probe == residency_probe::cachestat);
  }
}

TEST_CASE("residency: cachestat and mincore agree on a dropped file, and on a part read again") {
  const synced_file file(256 * page);
  file.drop();
  const page_residency dropped = probe(file, 0, file.size(), residency_probe::automatic);
  const page_residency dropped_mincore = probe(file, 0, file.size(), residency_probe::mincore);
  CHECK(dropped.pages == 256);
  CHECK(dropped.resident == dropped_mincore.resident);
  MESSAGE("dropped: " << dropped.resident << " of " << dropped.pages << " pages resident"
                      << std::string(file.on_tmpfs() ? " (tmpfs keeps them)" : ""));
  if (!file.on_tmpfs()) CHECK(dropped.fraction() < 0.5);

  // One page read again: at least that page is back (readahead may bring more).
  const int fd = ::open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  char byte = 0;
  CHECK(::pread(fd, &byte, 1, static_cast<off_t>(100 * page)) == 1);
  error_code ec;
  const page_residency one = page_cache_residency(fd, 100 * page, 1, residency_probe::automatic, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(one.pages == 1);
  CHECK(one.resident == 1);
  const page_residency again = page_cache_residency(fd, 0, file.size(), residency_probe::automatic, ec);
  const page_residency again_mincore = page_cache_residency(fd, 0, file.size(), residency_probe::mincore, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(again.resident >= 1);
  CHECK(again.resident == again_mincore.resident);
  CHECK(::lseek(fd, 0, SEEK_CUR) == 0);  // the descriptor's offset is left alone
  ::close(fd);
}

TEST_CASE("residency: pages of unaligned ranges, empty ranges") {
  const synced_file file(8 * page);
  file.warm();
  for (const auto how : {residency_probe::automatic, residency_probe::mincore}) {
    const std::string how_name = to_string(how);
    CAPTURE(how_name);
    CHECK(probe(file, 0, 1, how).pages == 1);
    CHECK(probe(file, page - 1, 2, how).pages == 2);  // one byte on each side of a page edge
    CHECK(probe(file, page - 1, 2, how).resident == 2);
    CHECK(probe(file, page, page, how).pages == 1);
    CHECK(probe(file, 1, 8 * page - 1, how).pages == 8);
    const page_residency empty = probe(file, 3 * page, 0, how);
    CHECK(empty.pages == 0);
    CHECK(empty.fraction() == 1.0);
    CHECK(probe(file, file.size(), 0, how).pages == 0);  // empty at the very end: inside
  }
}

TEST_CASE("residency: errors") {
  const synced_file file(4 * page);
  error_code ec;
  CHECK(page_cache_residency(file.path(), 0, file.size() + 1, residency_probe::automatic, ec).pages == 0);
  CHECK(ec == errc::bad_range);
  CHECK(page_cache_residency(file.path(), file.size() + 1, 0, residency_probe::mincore, ec).pages == 0);
  CHECK(ec == errc::bad_range);
  CHECK(page_cache_residency(file.path(), ~std::uint64_t{0}, 2, residency_probe::automatic, ec).pages == 0);
  CHECK(ec == errc::bad_range);  // offset + length overflows
  CHECK(page_cache_residency(file.path(), 0, 1, static_cast<residency_probe>(9), ec).pages == 0);
  CHECK(ec == errc::invalid_config);
  CHECK(page_cache_residency("/nonexistent/sluice-residency", 0, 1, residency_probe::automatic, ec).pages == 0);
  CHECK(ec == std::errc::no_such_file_or_directory);
  CHECK(page_cache_residency(fs::temp_directory_path(), 0, 0, residency_probe::automatic, ec).pages == 0);
  CHECK(ec == errc::invalid_argument);  // a directory
  CHECK(page_cache_residency(-1, 0, 0, residency_probe::automatic, ec).pages == 0);
  CHECK(ec == std::errc::bad_file_descriptor);
  CHECK_THROWS_AS(static_cast<void>(page_cache_residency("/nonexistent/sluice-residency", 0, 1)), sluice::system_error);
  CHECK_NOTHROW(static_cast<void>(page_cache_residency(file.path(), 0, file.size())));
}
