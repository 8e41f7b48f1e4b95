// SPDX-License-Identifier: Apache-2.0
#include <sluice/file/uring_reader.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using sluice::errc;
using sluice::error_code;
using sluice::mib;
using sluice::file::uring_config;
using sluice::file::uring_reader;

constexpr std::size_t block = sluice::file::direct_alignment;
constexpr std::byte poison{0xAB};

static_assert(!std::is_copy_constructible_v<uring_reader> && !std::is_copy_assignable_v<uring_reader>);
static_assert(std::is_nothrow_move_constructible_v<uring_reader> && std::is_nothrow_move_assignable_v<uring_reader>);

// Seeded random bytes, fast enough for 64 MiB in a debug build (splitmix64, 8 bytes a step).
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

// A directory of its own under `parent`, removed with its files at the end of the test.
class temp_dir {
 public:
  explicit temp_dir(const fs::path& parent) {
    static int counter = 0;
    path_ = parent / ("sluice-file-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  [[nodiscard]] fs::path write(const std::string& name, std::span<const std::byte> data) const {
    const fs::path file = path_ / name;
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    REQUIRE(out.good());
    return file;
  }
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Host memory poisoned with 0xAB, with a guard block on each side, whose usable part starts
// `misalign` bytes past a 4 KiB boundary (so that O_DIRECT can, or cannot, read into it).
class guarded_buffer {
 public:
  guarded_buffer(std::size_t size, std::size_t misalign)
      : total_(size + misalign + 2 * block),
        base_(static_cast<std::byte*>(::operator new[](total_, std::align_val_t{block}))),
        data_(base_.get() + block + misalign),
        size_(size) {
    std::fill_n(base_.get(), total_, poison);
  }
  [[nodiscard]] std::span<std::byte> span() const { return {data_, size_}; }
  [[nodiscard]] bool guards_intact() const {
    const auto poisoned = [](const std::byte* first, const std::byte* last) {
      return std::all_of(first, last, [](std::byte b) { return b == poison; });
    };
    return poisoned(base_.get(), data_) && poisoned(data_ + size_, base_.get() + total_);
  }

 private:
  struct aligned_delete {
    void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{block}); }
  };
  std::size_t total_;
  std::unique_ptr<std::byte[], aligned_delete> base_;
  std::byte* data_;
  std::size_t size_;
};

bool same_bytes(std::span<const std::byte> got, std::span<const std::byte> want) {
  return got.size() == want.size() && std::equal(got.begin(), got.end(), want.begin());
}

// Reads [offset, offset + length) of `file` with `reader` into memory aligned like the file
// offset (direct_memory) or off by one byte, and checks the bytes and the guards.
void check_range(uring_reader& reader, std::span<const std::byte> file, std::uint64_t offset, std::size_t length,
                 bool direct_memory) {
  CAPTURE(offset);
  CAPTURE(length);
  CAPTURE(direct_memory);
  const std::size_t misalign = (offset + (direct_memory ? 0 : 1)) % block;
  guarded_buffer into(length, misalign);
  error_code ec;
  const std::size_t n = reader.read(offset, into.span(), ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(n == length);
  CHECK(same_bytes(into.span(), file.subspan(static_cast<std::size_t>(offset), length)));
  CHECK(into.guards_intact());
}

// Offsets and lengths worth reading in a file of `size` bytes: the whole, unaligned heads and
// tails, a range inside one block, a range that crosses a block boundary.
std::vector<std::pair<std::uint64_t, std::size_t>> ranges_of(std::size_t size) {
  std::vector<std::pair<std::uint64_t, std::size_t>> out{{0, size}};
  if (size > 2) out.emplace_back(1, size - 2);
  if (size > block + 13) out.emplace_back(block - 7, size - block);  // starts 7 bytes before a block
  if (size > 3 * block) out.emplace_back(block, 2 * block);          // aligned both ends
  if (size > 100) out.emplace_back(13, 50);                          // inside the first block
  if (size > block + 20) out.emplace_back(block - 10, 20);           // across the first boundary
  if (size > 1) out.emplace_back(size - 1, 1);                       // the last byte
  out.emplace_back(size, 0);                                         // empty, at the end
  return out;
}

}  // namespace

TEST_CASE("file uring_reader: uring_config validates queue depth and chunk size") {
  CHECK_FALSE(uring_config{}.validate());
  CHECK(uring_config{.queue_depth = 0}.validate()->field == "queue_depth");
  CHECK(uring_config{.queue_depth = 1025}.validate()->field == "queue_depth");
  CHECK(uring_config{.chunk_bytes = 4095}.validate()->field == "chunk_bytes");
  CHECK(uring_config{.chunk_bytes = 6000}.validate()->field == "chunk_bytes");
  CHECK(uring_config{.chunk_bytes = std::size_t{2} << 30}.validate()->field == "chunk_bytes");
  CHECK_FALSE(uring_config{.queue_depth = 1, .chunk_bytes = 4096}.validate());

  temp_dir dir(fs::temp_directory_path());
  const auto file = dir.write("f", random_bytes(10, 1));
  error_code ec;
  const uring_reader reader = uring_reader::open(file, uring_config{.queue_depth = 0}, ec);
  CHECK(ec == errc::invalid_config);
  CHECK(reader.native_handle() == nullptr);
}

TEST_CASE("file uring_reader: reads any range of files of many sizes, O_DIRECT and buffered") {
  temp_dir dir(fs::temp_directory_path());
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096},
                                 std::size_t{4097}, std::size_t{mib + 13}, std::size_t{64 * mib + 1}}) {
    CAPTURE(size);
    const auto data = random_bytes(size, size + 1);
    const auto file = dir.write("f" + std::to_string(size), data);
    for (const bool direct : {true, false}) {
      CAPTURE(direct);
      // Small chunks, so that even the 1 MiB file has many reads in flight.
      error_code ec;
      uring_reader reader =
          uring_reader::open(file, uring_config{.queue_depth = 4, .chunk_bytes = 64 * 1024, .direct = direct}, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      CHECK(reader.size() == size);
      CHECK(reader.native_handle() != nullptr);
      if (!direct) CHECK_FALSE(reader.direct());
      // O_DIRECT is taken on ext4, xfs, btrfs and tmpfs since Linux 6.6; say which ran.
      if (direct && size == 0) MESSAGE("O_DIRECT taken in " << dir.path() << ": " << reader.direct());
      for (const auto& [offset, length] : ranges_of(size)) {
        check_range(reader, data, offset, length, true);
        check_range(reader, data, offset, length, false);
      }
    }
  }
}

TEST_CASE("file uring_reader: one read in flight and one-block chunks") {
  temp_dir dir(fs::temp_directory_path());
  const auto data = random_bytes(5 * block + 77, 5);
  const auto file = dir.write("f", data);
  uring_reader reader = uring_reader::open(file, uring_config{.queue_depth = 1, .chunk_bytes = block});
  for (const auto& [offset, length] : ranges_of(data.size())) {
    check_range(reader, data, offset, length, true);
    check_range(reader, data, offset, length, false);
  }
}

TEST_CASE("file uring_reader: read_chunks hands back each chunk in the caller's buffer, several in flight") {
  temp_dir dir(fs::temp_directory_path());
  const std::size_t chunk = 256 * 1024;
  const auto data = random_bytes(8 * mib + 5, 9);
  const auto file = dir.write("f", data);
  uring_reader reader = uring_reader::open(file, uring_config{.queue_depth = 4, .chunk_bytes = chunk});
  const std::uint64_t offset = 1000;  // unaligned: with O_DIRECT the first chunk ends at 4096
  const std::uint64_t length = data.size() - offset;

  // Slots like a stager's: aligned, chunk_bytes long (room for a whole tail block).
  guarded_buffer slots(4 * chunk, 0);
  std::vector<bool> slot_busy(4, false);
  struct given {
    std::uint64_t offset;
    std::size_t length;
    std::size_t slot;
  };
  std::vector<given> outstanding;
  std::vector<std::pair<std::uint64_t, std::size_t>> chunks;  // as handed back
  std::size_t most_in_flight = 0;
  const error_code ec = reader.read_chunks(
      offset, length,
      [&](std::uint64_t chunk_offset, std::size_t chunk_length, error_code&) -> std::span<std::byte> {
        const auto free =
            static_cast<std::size_t>(std::find(slot_busy.begin(), slot_busy.end(), false) - slot_busy.begin());
        REQUIRE(free < slot_busy.size());  // never more than queue_depth chunks outstanding
        slot_busy[free] = true;
        outstanding.push_back({chunk_offset, chunk_length, free});
        most_in_flight = std::max(most_in_flight, outstanding.size());
        return slots.span().subspan(free * chunk, chunk);
      },
      [&](std::uint64_t chunk_offset, std::span<std::byte> filled) {
        const auto it = std::find_if(outstanding.begin(), outstanding.end(),
                                     [&](const given& g) { return g.offset == chunk_offset; });
        REQUIRE(it != outstanding.end());
        CHECK(filled.size() == it->length);
        CHECK(filled.data() == slots.span().data() + it->slot * chunk);
        CHECK(same_bytes(filled, std::span(data).subspan(static_cast<std::size_t>(chunk_offset), filled.size())));
        slot_busy[it->slot] = false;
        chunks.emplace_back(chunk_offset, filled.size());
        outstanding.erase(it);
        return error_code{};
      });
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(outstanding.empty());
  CHECK(slots.guards_intact());
  CHECK(most_in_flight == 4);
  // The chunks tile the range exactly.
  std::sort(chunks.begin(), chunks.end());
  std::uint64_t expect = offset;
  for (const auto& [chunk_offset, chunk_length] : chunks) {
    CHECK(chunk_offset == expect);
    expect += chunk_length;
  }
  CHECK(expect == offset + length);
  if (reader.direct()) {
    CHECK(chunks.front().second == block - offset);  // the unaligned head has a chunk of its own
    CHECK(chunks[1].first % block == 0);
  }
}

TEST_CASE("file uring_reader: read_chunks stops at the first callback error and waits for the reads in flight") {
  temp_dir dir(fs::temp_directory_path());
  const auto data = random_bytes(4 * mib, 11);
  const auto file = dir.write("f", data);
  uring_reader reader = uring_reader::open(file, uring_config{.queue_depth = 4, .chunk_bytes = 64 * 1024});
  std::vector<std::byte> memory(data.size());
  const auto buffer_for = [&](std::uint64_t chunk_offset, std::size_t chunk_length, error_code&) {
    return std::span(memory).subspan(static_cast<std::size_t>(chunk_offset), chunk_length);
  };

  SUBCASE("on_filled") {
    int handed = 0;
    const error_code ec = reader.read_chunks(0, data.size(), buffer_for, [&](std::uint64_t, std::span<std::byte>) {
      return ++handed == 3 ? error_code(errc::capacity_exceeded) : error_code{};
    });
    CHECK(ec == errc::capacity_exceeded);
    CHECK(handed == 3);  // nothing handed back after the error
  }
  SUBCASE("next_buffer") {
    int asked = 0;
    int handed = 0;
    const error_code ec = reader.read_chunks(
        0, data.size(),
        [&](std::uint64_t chunk_offset, std::size_t chunk_length, error_code& e) {
          if (++asked == 6) e = errc::capacity_exceeded;
          return buffer_for(chunk_offset, chunk_length, e);
        },
        [&](std::uint64_t, std::span<std::byte>) {
          ++handed;
          return error_code{};
        });
    CHECK(ec == errc::capacity_exceeded);
    CHECK(asked == 6);
    CHECK(handed <= 5);
  }
  SUBCASE("a buffer shorter than the chunk") {
    const error_code ec = reader.read_chunks(
        0, data.size(), [&](std::uint64_t, std::size_t, error_code&) { return std::span(memory).first(10); },
        [&](std::uint64_t, std::span<std::byte>) { return error_code{}; });
    CHECK(ec == errc::region_too_small);
  }
  SUBCASE("an exception") {
    int handed = 0;
    CHECK_THROWS_AS(static_cast<void>(reader.read_chunks(0, data.size(), buffer_for,
                                                         [&](std::uint64_t, std::span<std::byte>) -> error_code {
                                                           if (++handed == 2) throw std::runtime_error("stop");
                                                           return {};
                                                         })),
                    std::runtime_error);
    CHECK(handed == 2);
  }
  // The reader is usable after a stopped read.
  check_range(reader, data, 5, data.size() - 5, true);
}

TEST_CASE("file uring_reader: a range outside the file is bad_range, and nothing is written") {
  temp_dir dir(fs::temp_directory_path());
  const auto data = random_bytes(10000, 3);
  const auto file = dir.write("f", data);
  uring_reader reader = uring_reader::open(file);
  for (const auto& [offset, length] : std::vector<std::pair<std::uint64_t, std::size_t>>{
           {0, 10001}, {9999, 2}, {10001, 0}, {20000, 10}, {~std::uint64_t{0}, 2}}) {
    CAPTURE(offset);
    CAPTURE(length);
    guarded_buffer into(length, 0);
    error_code ec;
    CHECK(reader.read(offset, into.span(), ec) == 0);
    CHECK(ec == errc::bad_range);
    CHECK(std::all_of(into.span().begin(), into.span().end(), [](std::byte b) { return b == poison; }));
    CHECK(into.guards_intact());
    CHECK_THROWS_AS(static_cast<void>(reader.read(offset, into.span())), sluice::system_error);
  }
}

TEST_CASE("file uring_reader: a file that shrank after open ends the read with bad_range") {
  temp_dir dir(fs::temp_directory_path());
  const auto data = random_bytes(mib, 4);
  const auto file = dir.write("f", data);
  uring_reader reader = uring_reader::open(file, uring_config{.chunk_bytes = 64 * 1024});
  fs::resize_file(file, mib / 2);
  std::vector<std::byte> into(mib);
  error_code ec;
  CHECK(reader.read(0, into, ec) == 0);
  CHECK(ec == errc::bad_range);
}

TEST_CASE("file uring_reader: opening what cannot be read is an error") {
  error_code ec;
  const uring_reader missing = uring_reader::open("/nonexistent/sluice/file", {}, ec);
  CHECK(ec == std::errc::no_such_file_or_directory);
  CHECK(missing.native_handle() == nullptr);
  CHECK_THROWS_AS(static_cast<void>(uring_reader::open("/nonexistent/sluice/file")), sluice::system_error);

  temp_dir dir(fs::temp_directory_path());
  const uring_reader directory = uring_reader::open(dir.path(), {}, ec);
  CHECK(ec);  // EISDIR with O_DIRECT on some file systems, else not a regular file
}

TEST_CASE("file uring_reader: an empty or moved-from reader refuses to read") {
  temp_dir dir(fs::temp_directory_path());
  const auto data = random_bytes(100, 8);
  uring_reader reader = uring_reader::open(dir.write("f", data));
  uring_reader moved = std::move(reader);
  CHECK(reader.native_handle() == nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  CHECK(moved.native_handle() != nullptr);
  std::vector<std::byte> into(10);
  error_code ec;
  CHECK(reader.read(0, into, ec) == 0);  // NOLINT(bugprone-use-after-move)
  CHECK(ec == errc::invalid_argument);
  CHECK(moved.read(0, into, ec) == 10);
  CHECK(same_bytes(into, std::span(data).first(10)));
  reader = std::move(moved);
  CHECK(reader.size() == 100);
}

TEST_CASE("file uring_reader: buffered reads where the file system refuses O_DIRECT") {
  // sysfs has no O_DIRECT (open fails with EINVAL): the reader must fall back and say so. Its
  // files claim 4096 bytes but hold fewer, so read what a plain read finds.
  const fs::path file = "/sys/devices/system/cpu/online";
  std::ifstream plain(file, std::ios::binary);
  if (!plain) {
    MESSAGE("skipped: " << file << " is not readable here");
    return;
  }
  const std::string text((std::istreambuf_iterator<char>(plain)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(text.empty());
  error_code ec;
  uring_reader reader = uring_reader::open(file, uring_config{.direct = true}, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK_FALSE(reader.direct());
  std::vector<std::byte> into(text.size());
  CHECK(reader.read(0, into, ec) == text.size());
  CHECK_MESSAGE(!ec, ec.message());
  CHECK(std::memcmp(into.data(), text.data(), text.size()) == 0);
}

TEST_CASE("file uring_reader: files on tmpfs read with whichever mode the kernel allows") {
  // tmpfs takes O_DIRECT since Linux 6.6; older kernels refuse it and the reader falls back.
  if (!fs::is_directory("/dev/shm")) {
    MESSAGE("skipped: no /dev/shm");
    return;
  }
  temp_dir dir("/dev/shm");
  const auto data = random_bytes(mib + 13, 21);
  const auto file = dir.write("f", data);
  uring_reader reader = uring_reader::open(file, uring_config{.queue_depth = 4, .chunk_bytes = 64 * 1024});
  MESSAGE("O_DIRECT on tmpfs: " << reader.direct());
  for (const auto& [offset, length] : ranges_of(data.size())) {
    check_range(reader, data, offset, length, true);
    check_range(reader, data, offset, length, false);
  }
}
