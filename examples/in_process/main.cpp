// SPDX-License-Identifier: Apache-2.0
// sluice demo (in-process): put a generated object into an in-memory store and get it back
// through a composed path, whole and as parallel ranged parts; verify the bytes and print the
// throughput and the path that carried them.
//   sluice_demo [--size 256MiB] [--parts 8]
// The S3 → GPU demo over RDMA replaces this one when those tiers land; the shape stays the same.
#include <sluice/sluice.hpp>

#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct options {
  std::uint64_t size = 256 * sluice::mib;
  unsigned parts = 8;
};

bool parse(int argc, char** argv, options& opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--size" && has_value) {
      auto size = sluice::parse_size(argv[++i]);
      if (!size) return false;
      opt.size = *size;
    } else if (arg == "--parts" && has_value) {
      opt.parts = static_cast<unsigned>(std::stoul(argv[++i]));
      if (opt.parts == 0) return false;
    } else {
      return false;
    }
  }
  return true;
}

// Fast deterministic non-zero test data (xorshift64*), 8 bytes at a time.
void fill(std::vector<std::byte>& bytes) {
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    const std::uint64_t v = state * 0x2545F4914F6CDD1DULL;
    std::memcpy(bytes.data() + i, &v, 8);
  }
  for (; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 131 + 7);
}

// FNV-1a over 8-byte words: a checksum printed for both sides.
std::uint64_t checksum(const std::vector<std::byte>& bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data() + i, 8);
    h = (h ^ v) * 0x100000001b3ULL;
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<std::uint64_t>(bytes[i])) * 0x100000001b3ULL;
  return h;
}

double gib_per_s(std::uint64_t bytes, std::chrono::steady_clock::duration d) {
  return static_cast<double>(bytes) / static_cast<double>(sluice::gib) / std::chrono::duration<double>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse(argc, argv, opt)) {
    std::fprintf(stderr, "usage: sluice_demo [--size 256MiB] [--parts 8]\n");
    return 2;
  }
  using clock = std::chrono::steady_clock;
  using store_type = sluice::memory_store;

  store_type store(sluice::memory_store_config{.max_bytes = opt.size + sluice::mib, .max_object_bytes = opt.size + 1});
  sluice::error_code ec;
  store.create_bucket("demo", ec);
  boost::asio::thread_pool pool(opt.parts);
  sluice::path path{pool.get_executor(), sluice::local_negotiator<store_type>{store}, sluice::host_registrar{},
                    sluice::loopback_transport{}};
  const sluice::object_ref object{"demo", "generated.bin"};

  std::printf("sluice demo: %llu bytes, in-process path (no GPU or network needed)\n",
              static_cast<unsigned long long>(opt.size));
  std::vector<std::byte> source(opt.size);
  fill(source);
  const std::uint64_t expected = checksum(source);

  auto t0 = clock::now();
  const sluice::transfer_result put = path.put(object, sluice::host_region(source));
  const auto put_time = clock::now() - t0;

  std::vector<std::byte> whole(opt.size);
  t0 = clock::now();
  const sluice::transfer_result get = path.get(object, sluice::host_region(whole));
  const auto get_time = clock::now() - t0;

  // The same object as `parts` ranged gets in flight at once, each into its slice.
  std::vector<std::byte> parted(opt.size);
  const std::uint64_t part = (opt.size + opt.parts - 1) / opt.parts;
  std::vector<std::future<sluice::transfer_result>> futures;
  t0 = clock::now();
  for (std::uint64_t offset = 0; offset < opt.size; offset += part) {
    const std::uint64_t length = std::min(part, opt.size - offset);
    futures.push_back(path.async_get(object, sluice::host_region(parted).subregion(offset, length, ec),
                                     sluice::byte_range{offset, length}, boost::asio::use_future));
  }
  std::uint64_t parted_bytes = 0;
  for (auto& f : futures) parted_bytes += f.get().bytes;
  const auto parted_time = clock::now() - t0;

  const std::uint64_t got_whole = checksum(whole);
  const std::uint64_t got_parted = checksum(parted);
  const bool ok = got_whole == expected && got_parted == expected && whole == source && parted == source &&
                  put.bytes == opt.size && get.bytes == opt.size && parted_bytes == opt.size;

  std::printf("  put            %8.2f GiB/s  via %.*s/%.*s\n", gib_per_s(put.bytes, put_time),
              static_cast<int>(put.negotiator.size()), put.negotiator.data(), static_cast<int>(put.transport.size()),
              put.transport.data());
  std::printf("  get (whole)    %8.2f GiB/s  via %.*s/%.*s\n", gib_per_s(get.bytes, get_time),
              static_cast<int>(get.negotiator.size()), get.negotiator.data(), static_cast<int>(get.transport.size()),
              get.transport.data());
  std::printf("  get (%u parts) %8.2f GiB/s\n", opt.parts, gib_per_s(parted_bytes, parted_time));
  std::printf("  checksum       %016llx expected, %016llx whole, %016llx parts: %s\n",
              static_cast<unsigned long long>(expected), static_cast<unsigned long long>(got_whole),
              static_cast<unsigned long long>(got_parted), ok ? "OK" : "MISMATCH");
  pool.join();
  return ok ? 0 : 1;
}
