// SPDX-License-Identifier: Apache-2.0
// One S3 transfer, measured: the CPU set of the benchmark harness (bench/run.py) runs it once per
// case and reads the one JSON line it prints.
//
//   sluice_s3_bench --endpoint URL --bucket B --key K --op get|put|gen|fill|list --size BYTES
//                   [--access-key AK --secret-key SK | --anonymous] [--via rdma|http|auto]
//                   [--fabric auto|shm|tcp] [--endpoints 4] [--part-size 8MiB] [--parts-in-flight 4]
//                   [--repeat 3] [--seed 1] [--out PATH] [--grant-socket PATH]
//
// gen: writes --size bytes of the pattern for --seed (xoshiro256** seeded by splitmix64, as
//      examples/s3_rdma_demo makes its objects) to --out; no network. Another server (nginx) can
//      then serve the same bytes for `get`.
// put: makes the pattern (untimed), creates the bucket when missing, PUTs the object --repeat
//      times, then reads it back over HTTP, a range at a time, and compares (untimed).
// get: GETs the whole object --repeat times into one host buffer of --size, pre-faulted and
//      refilled before each run, and compares it with the pattern regenerated a MiB at a time
//      (untimed), so that the peak RSS is the buffer's and not twice that.
// Both run one untimed 4 KiB request first by the same path: the TCP connection, the fabric
// address vector insert and the provider's first handshake are not what the runs measure.
// fill: PUTs --count objects of --size bytes (default 1) named --key (a prefix, default "list/")
//      and 8 digits, --threads (default 8) at a time, over HTTP.
// list: lists that prefix with ListObjectsV2 in pages of 1000 (checking every name, in order),
//      then HEADs every key, --threads at a time: keys/s of the listing and of the HEADs.
//
// The client splits transfers into --part-size parts (multipart_threshold = part size), with
// --parts-in-flight at once; unless --via http it has an RDMA plane of --endpoints endpoints on
// --fabric (tcp is tcp;ofi_rxm). An anonymous client sends unsigned requests and never RDMA
// tokens (a token is only honoured when signed), so --anonymous allows --via http or auto only.
//
// --grant-socket: the same-host grant plane of a `sluice serve` on this host (its --grant-socket):
// the buffer is a sluice::shared_buffer (memfd) granted to the server, and the server copies the
// object's bytes straight into it (GET) or out of it (PUT); the fabric plane is not opened.
//
// Output: one JSON line on stdout (the median run's numbers; CPU is getrusage of this process,
// every thread, user + system); progress and errors on stderr. Exit status: 0 done and
// verified, 1 a failed transfer or a mismatch, 2 bad arguments.
#include <sluice/fabric/s3_plane.hpp>

#include <sluice/config.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/local_plane.hpp>
#include <sluice/shared_buffer.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

namespace {

using namespace sluice;

struct options {
  std::string endpoint;
  std::string bucket;
  std::string key;
  std::string op;
  std::uint64_t size = 0;
  std::string access_key;
  std::string secret_key;
  bool anonymous = false;
  std::string via = "auto";
  std::string fabric = "auto";
  std::size_t endpoints = 4;
  std::uint64_t part_size = 8 * mib;
  std::uint32_t parts_in_flight = 4;
  unsigned repeat = 3;
  std::uint64_t seed = 1;
  std::string out;
  std::string grant_socket;
  std::uint64_t count = 0;  // fill, list: how many keys
  unsigned threads = 8;     // fill, list: requests in flight (one blocking client call per thread)
};

int usage(const char* why) {
  std::fprintf(stderr, "sluice_s3_bench: %s\n", why);
  std::fprintf(stderr,
               "usage: sluice_s3_bench --endpoint URL --bucket B --key K --op get|put|gen --size BYTES\n"
               "                       [--access-key AK --secret-key SK | --anonymous] [--via rdma|http|auto]\n"
               "                       [--fabric auto|shm|tcp] [--endpoints 4] [--part-size 8MiB]\n"
               "                       [--parts-in-flight 4] [--repeat 3] [--seed 1] [--out PATH (gen)]\n"
               "                       [--grant-socket PATH] [--count N --threads N (fill, list)]\n");
  return 2;
}

/// Parses argv into `opt`; the reason when it cannot.
std::optional<std::string> parse(int argc, char** argv, options& opt) {
  const auto size_of = [](const std::string& text, const char* flag) {
    const auto n = parse_size(text);
    if (!n || *n == 0) throw std::invalid_argument(std::string(flag) + ": not a size: " + text);
    return *n;
  };
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view flag = argv[i];
      if (flag == "--anonymous") {
        opt.anonymous = true;
        continue;
      }
      if (i + 1 >= argc) return std::string(flag) + " needs a value";
      const std::string value = argv[++i];
      if (flag == "--endpoint") {
        opt.endpoint = value;
      } else if (flag == "--bucket") {
        opt.bucket = value;
      } else if (flag == "--key") {
        opt.key = value;
      } else if (flag == "--op") {
        opt.op = value;
      } else if (flag == "--size") {
        opt.size = size_of(value, "--size");
      } else if (flag == "--access-key") {
        opt.access_key = value;
      } else if (flag == "--secret-key") {
        opt.secret_key = value;
      } else if (flag == "--via") {
        opt.via = value;
      } else if (flag == "--grant-socket") {
        opt.grant_socket = value;
      } else if (flag == "--fabric") {
        opt.fabric = value;
      } else if (flag == "--endpoints") {
        opt.endpoints = std::stoul(value);
      } else if (flag == "--part-size") {
        opt.part_size = size_of(value, "--part-size");
      } else if (flag == "--parts-in-flight") {
        opt.parts_in_flight = static_cast<std::uint32_t>(std::stoul(value));
      } else if (flag == "--repeat") {
        opt.repeat = static_cast<unsigned>(std::stoul(value));
      } else if (flag == "--seed") {
        opt.seed = std::stoull(value);
      } else if (flag == "--out") {
        opt.out = value;
      } else if (flag == "--count") {
        opt.count = std::stoull(value);
      } else if (flag == "--threads") {
        opt.threads = static_cast<unsigned>(std::stoul(value));
      } else {
        return "unknown argument " + std::string(flag);
      }
    }
  } catch (const std::exception& e) {  // stoul: not a number; size_of: not a size
    return std::string("bad number: ") + e.what();
  }
  if (opt.op != "get" && opt.op != "put" && opt.op != "gen" && opt.op != "fill" && opt.op != "list") {
    return "--op must be get, put, gen, fill or list";
  }
  if (opt.op == "fill" || opt.op == "list") {
    if (opt.count == 0 || opt.threads == 0) return "--op fill and list need --count N and --threads N (> 0)";
    if (opt.size == 0) opt.size = 1;
    opt.key = opt.key.empty() ? "list/" : opt.key;
    opt.via = "http";
  }
  if (opt.size == 0) return "--size is required";
  if (opt.op == "gen") {
    if (opt.out.empty()) return "--op gen needs --out PATH";
    return std::nullopt;
  }
  if (opt.endpoint.empty() || opt.bucket.empty() || opt.key.empty())
    return "--endpoint, --bucket and --key are required";
  if (opt.via != "rdma" && opt.via != "http" && opt.via != "auto") return "--via must be rdma, http or auto";
  if (opt.fabric != "auto" && opt.fabric != "shm" && opt.fabric != "tcp") return "--fabric must be auto, shm or tcp";
  if (opt.repeat == 0) return "--repeat must be at least 1";
  if (opt.anonymous && (!opt.access_key.empty() || !opt.secret_key.empty())) {
    return "--anonymous and --access-key/--secret-key exclude each other";
  }
  if (!opt.anonymous && (opt.access_key.empty() || opt.secret_key.empty())) {
    return "give --access-key and --secret-key, or --anonymous";
  }
  if (opt.anonymous && opt.via == "rdma") {
    return "--anonymous cannot use --via rdma: the client sends RDMA tokens only on signed requests";
  }
  return std::nullopt;
}

// Whether the endpoint http://host[:port] names this host (then shm is a candidate provider and
// the client's endpoints bind to loopback, where the server's are).
bool endpoint_is_loopback(std::string_view url) {
  if (url.starts_with("http://")) url.remove_prefix(7);
  url = url.substr(0, url.find('/'));
  const std::string_view host = url.starts_with('[') ? url.substr(0, url.find(']') + 1) : url.substr(0, url.rfind(':'));
  return host == "localhost" || host.starts_with("127.") || host == "[::1]";
}

/// The pattern of one seed: xoshiro256** seeded by splitmix64, 8 little-endian bytes a step (the
/// generator of examples/s3_rdma_demo). Produced in pieces: every piece but the last must be a
/// multiple of 8 bytes, and the concatenation is then the same stream whatever the pieces.
class pattern_stream {
 public:
  explicit pattern_stream(std::uint64_t seed) {
    for (auto& word : s_) {
      std::uint64_t z = (seed += 0x9E3779B97F4A7C15ULL);
      z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
      word = z ^ (z >> 31U);
    }
  }

  void fill(std::span<std::byte> out) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= out.size(); i += 8) {
      const std::uint64_t v = next();
      std::memcpy(out.data() + i, &v, 8);
    }
    if (i < out.size()) {
      const std::uint64_t v = next();
      std::memcpy(out.data() + i, &v, out.size() - i);
    }
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, unsigned k) noexcept { return (x << k) | (x >> (64U - k)); }
  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17U;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  std::uint64_t s_[4] = {};
};

constexpr std::size_t pattern_piece = 1 * mib;  // a multiple of 8: see pattern_stream

/// Whether `bytes` is the start of the pattern of `seed`; the first differing offset goes to stderr.
bool matches_pattern(std::span<const std::byte> bytes, std::uint64_t seed) {
  pattern_stream pattern(seed);
  std::vector<std::byte> expected(pattern_piece);
  for (std::size_t offset = 0; offset < bytes.size(); offset += pattern_piece) {
    const std::size_t n = std::min(pattern_piece, bytes.size() - offset);
    pattern.fill({expected.data(), n});
    if (std::memcmp(bytes.data() + offset, expected.data(), n) != 0) {
      std::size_t at = 0;
      while (bytes[offset + at] == expected[at]) ++at;
      std::fprintf(stderr, "sluice_s3_bench: MISMATCH at byte %zu\n", offset + at);
      return false;
    }
  }
  return true;
}

/// `text` as a JSON string, quoted and escaped.
std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

/// --op gen: the pattern into a file, a piece at a time.
int generate_file(const options& opt) {
  std::FILE* file = std::fopen(opt.out.c_str(), "wb");
  if (file == nullptr) {
    std::fprintf(stderr, "sluice_s3_bench: cannot create %s: %s\n", opt.out.c_str(), std::strerror(errno));
    return 1;
  }
  pattern_stream pattern(opt.seed);
  std::vector<std::byte> piece(8 * mib);  // a multiple of 8
  bool ok = true;
  for (std::uint64_t done = 0; ok && done < opt.size;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), opt.size - done));
    pattern.fill({piece.data(), n});
    ok = std::fwrite(piece.data(), 1, n, file) == n;
    done += n;
  }
  ok = std::fclose(file) == 0 && ok;
  if (!ok) {
    std::fprintf(stderr, "sluice_s3_bench: cannot write %s: %s\n", opt.out.c_str(), std::strerror(errno));
    return 1;
  }
  std::printf("{\"op\":\"gen\",\"bytes\":%llu,\"seed\":%llu,\"out\":%s}\n", static_cast<unsigned long long>(opt.size),
              static_cast<unsigned long long>(opt.seed), json_string(opt.out).c_str());
  return 0;
}

double cpu_now() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](timeval t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

/// One timed transfer.
struct run {
  double seconds = 0;
  double cpu_seconds = 0;
  s3::transfer_report report;
};

/// Runs `transfer(report, ec)` between two clock and CPU samples.
template <class Transfer>
run measure(Transfer&& transfer, error_code& ec) {
  run r;
  const double cpu0 = cpu_now();
  const auto t0 = std::chrono::steady_clock::now();
  transfer(r.report, ec);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cpu_seconds = cpu_now() - cpu0;
  return r;
}

s3::transfer_via via_of(std::string_view text) {
  if (text == "rdma") return s3::transfer_via::rdma;
  if (text == "http") return s3::transfer_via::http;
  return s3::transfer_via::automatic;
}

int fail(const char* step, const error_code& ec) {
  std::fprintf(stderr, "sluice_s3_bench: %s: %s\n", step, ec.message().c_str());
  if (ec == s3::errc::rdma_not_supported) {
    std::fprintf(stderr,
                 "  (the server declined RDMA: is it `sluice serve --fabric auto`, with this provider open?)\n");
  }
  return 1;
}

void print_json(const options& opt, const std::string& provider, const std::vector<run>& runs, bool verified) {
  std::vector<std::size_t> order(runs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return runs[a].seconds < runs[b].seconds; });
  const run& median = runs[order[order.size() / 2]];
  const double gibs = static_cast<double>(opt.size) / static_cast<double>(gib);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  std::string all;
  for (const run& r : runs) {
    char text[32];
    std::snprintf(text, sizeof text, "%s%.6f", all.empty() ? "" : ",", r.seconds);
    all += text;
  }
  std::printf(
      "{\"op\":\"%s\",\"via\":\"%s\",\"fabric\":\"%s\",\"provider\":\"%s\",\"bytes\":%llu,\"part_size\":%llu,"
      "\"parts_in_flight\":%u,\"endpoints\":%zu,\"repeat\":%u,\"seconds_median\":%.6f,\"seconds_all\":[%s],"
      "\"gib_per_s\":%.4f,\"cpu_s_per_gib\":%.5f,\"peak_rss_bytes\":%llu,\"rdma_bytes\":%llu,\"http_bytes\":%llu,"
      "\"verified\":%s}\n",
      opt.op.c_str(), opt.via.c_str(), opt.fabric.c_str(), provider.c_str(), static_cast<unsigned long long>(opt.size),
      static_cast<unsigned long long>(opt.part_size), opt.parts_in_flight, opt.endpoints, opt.repeat, median.seconds,
      all.c_str(), gibs / median.seconds, median.cpu_seconds / gibs,
      static_cast<unsigned long long>(usage.ru_maxrss) * 1024ULL,
      static_cast<unsigned long long>(median.report.rdma_bytes),
      static_cast<unsigned long long>(median.report.http_bytes), verified ? "true" : "false");
  std::fflush(stdout);
}

/// Owned host memory, left uninitialized until written (make_unique_for_overwrite).
/// The transfer's buffer: ordinary memory, or a shared_buffer granted to the server through the
/// same-host plane when there is one.
struct host_buffer {
  host_buffer(std::size_t n, s3::local_client_plane* grants) : size(n) {
    if (grants == nullptr) {
      owned = std::make_unique_for_overwrite<std::byte[]>(n);
      bytes = owned.get();
      return;
    }
    shared = shared_buffer::create(n);
    error_code ec;
    grants->share(shared, ec);
    if (ec) throw std::system_error(ec, "granting the buffer");
    bytes = shared.data();
  }
  [[nodiscard]] sluice::region region() const noexcept { return {bytes, size, memory_kind::host_pageable, -1}; }
  [[nodiscard]] std::span<std::byte> span() const noexcept { return {bytes, size}; }
  std::unique_ptr<std::byte[]> owned;
  shared_buffer shared;
  std::byte* bytes = nullptr;
  std::size_t size;
};

constexpr std::size_t warm_up_bytes = 4 * kib;

int run_put(const options& opt, s3::client& client, const std::string& provider, s3::local_client_plane* grants) {
  std::fprintf(stderr, "sluice_s3_bench: generating %llu bytes (seed %llu)\n",
               static_cast<unsigned long long>(opt.size), static_cast<unsigned long long>(opt.seed));
  host_buffer source(opt.size, grants);
  pattern_stream(opt.seed).fill(source.span());

  error_code ec;
  client.create_bucket(opt.bucket, ec);
  if (ec == s3::errc::bucket_already_owned_by_you) ec = {};
  if (ec) return fail("create bucket", ec);

  const s3::transfer_via via = via_of(opt.via);
  {  // untimed: connect (HTTP, fabric) by the path the runs take; the runs overwrite the object
    s3::put_options put;
    put.via = via;
    const region head{source.bytes, std::min<std::size_t>(source.size, warm_up_bytes), memory_kind::host_pageable, -1};
    client.put_object(opt.bucket, opt.key, head, std::move(put), ec);
    if (ec) return fail("PUT (warm-up)", ec);
  }

  std::vector<run> runs;
  for (unsigned i = 0; i < opt.repeat; ++i) {
    const run r = measure(
        [&](s3::transfer_report& report, error_code& e) {
          s3::put_options put;
          put.via = via;
          put.report = &report;
          client.put_object(opt.bucket, opt.key, source.region(), std::move(put), e);
        },
        ec);
    if (ec) return fail("PUT", ec);
    std::fprintf(stderr, "sluice_s3_bench: PUT %u/%u: %.3f s, rdma %llu B, http %llu B\n", i + 1, opt.repeat, r.seconds,
                 static_cast<unsigned long long>(r.report.rdma_bytes),
                 static_cast<unsigned long long>(r.report.http_bytes));
    runs.push_back(r);
  }

  // Read it back over HTTP, a range at a time (bounded memory), and compare with the source.
  bool verified = true;
  const std::size_t window = static_cast<std::size_t>(std::min<std::uint64_t>(opt.size, 64 * mib));
  std::vector<std::byte> back(window);
  for (std::uint64_t offset = 0; verified && offset < opt.size; offset += window) {
    const std::uint64_t n = std::min<std::uint64_t>(window, opt.size - offset);
    s3::get_options get(byte_range{offset, n});
    get.via = s3::transfer_via::http;
    const std::uint64_t got = client.get_object(opt.bucket, opt.key, host_region(back), std::move(get), ec);
    if (ec) return fail("GET (read back)", ec);
    verified = got == n && std::memcmp(back.data(), source.bytes + offset, n) == 0;
    if (!verified) {
      std::fprintf(stderr, "sluice_s3_bench: MISMATCH reading back bytes %llu..%llu\n",
                   static_cast<unsigned long long>(offset), static_cast<unsigned long long>(offset + n));
    }
  }
  print_json(opt, provider, runs, verified);
  return verified ? 0 : 1;
}

int run_get(const options& opt, s3::client& client, const std::string& provider, s3::local_client_plane* grants) {
  host_buffer target(opt.size, grants);
  std::memset(target.bytes, 0xA5, target.size);  // faulted in before any clock starts

  const s3::transfer_via via = via_of(opt.via);
  error_code ec;
  {  // untimed: connect (HTTP, fabric) by the path the runs take, with the object's last bytes (a
     // gateway fetches such a range alone: the first run is then its miss)
    const std::size_t n = std::min<std::size_t>(target.size, warm_up_bytes);
    s3::get_options get(byte_range{target.size - n, n});
    get.via = via;
    client.get_object(opt.bucket, opt.key, target.region(), std::move(get), ec);
    if (ec) return fail("GET (warm-up)", ec);
  }

  std::vector<run> runs;
  bool verified = true;
  for (unsigned i = 0; i < opt.repeat; ++i) {
    std::memset(target.bytes, 0xA5, target.size);  // stale bytes of the last run cannot pass
    std::uint64_t bytes = 0;
    const run r = measure(
        [&](s3::transfer_report& report, error_code& e) {
          s3::get_options get;
          get.via = via;
          get.report = &report;
          bytes = client.get_object(opt.bucket, opt.key, target.region(), std::move(get), e);
        },
        ec);
    if (ec) return fail("GET", ec);
    const bool same = bytes == opt.size && matches_pattern(target.span(), opt.seed);
    if (bytes != opt.size) {
      std::fprintf(stderr, "sluice_s3_bench: GET returned %llu bytes, not %llu\n",
                   static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(opt.size));
    }
    std::fprintf(stderr, "sluice_s3_bench: GET %u/%u: %.3f s, rdma %llu B, http %llu B, %s\n", i + 1, opt.repeat,
                 r.seconds, static_cast<unsigned long long>(r.report.rdma_bytes),
                 static_cast<unsigned long long>(r.report.http_bytes), same ? "verified" : "MISMATCH");
    verified = verified && same;
    runs.push_back(r);
  }
  print_json(opt, provider, runs, verified);
  return verified ? 0 : 1;
}

/// The key of object i of a listing set: `prefix` and i as 8 digits, so that key order is i order.
std::string list_key(const options& opt, std::uint64_t i) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%08llu", static_cast<unsigned long long>(i));
  return opt.key + digits;
}

/// Runs work(i) for i in [0, count) on opt.threads threads; the first error wins.
template <class Work>
error_code on_threads(const options& opt, Work work) {
  std::atomic<std::uint64_t> next{0};
  std::mutex failure_mutex;
  error_code failure;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < opt.threads; ++t) {
    threads.emplace_back([&] {
      for (std::uint64_t i = next++; i < opt.count; i = next++) {
        error_code ec;
        work(i, ec);
        if (ec) {
          const std::lock_guard lock(failure_mutex);
          if (!failure) failure = ec;
          next = opt.count;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return failure;
}

/// fill: PUTs --count objects of --size bytes under --key (a prefix), --threads at a time.
int run_fill(const options& opt, s3::client& client) {
  error_code ec;
  client.create_bucket(opt.bucket, ec);
  if (ec == s3::errc::bucket_already_owned_by_you) ec = {};
  if (ec) return fail("create bucket", ec);
  std::vector<std::byte> body(static_cast<std::size_t>(opt.size), std::byte{'x'});
  const auto start = std::chrono::steady_clock::now();
  ec = on_threads(opt, [&](std::uint64_t i, error_code& e) {
    client.put_object(opt.bucket, list_key(opt, i), host_region(body), s3::put_options{}, e);
  });
  if (ec) return fail("PUT", ec);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"op\":\"fill\",\"count\":%llu,\"seconds\":%.4f,\"keys_per_s\":%.1f}\n",
              static_cast<unsigned long long>(opt.count), seconds, static_cast<double>(opt.count) / seconds);
  return 0;
}

/// list: ListObjectsV2 of the --key prefix in pages of 1000 (every key checked against the
/// fill's names, in order), then a HEAD of each key, --threads at a time; keys/s of each.
int run_list(const options& opt, s3::client& client) {
  error_code ec;
  s3::list_options page;
  page.prefix = opt.key;
  std::uint64_t seen = 0;
  std::uint64_t pages = 0;
  bool in_order = true;
  const auto list_start = std::chrono::steady_clock::now();
  for (;;) {
    const auto result = client.list_objects(opt.bucket, page, ec);
    if (ec) return fail("ListObjectsV2", ec);
    ++pages;
    for (const auto& object : result.objects) in_order = in_order && object.key == list_key(opt, seen++);
    if (!result.truncated) break;
    page.continuation_token = result.next_continuation_token;
  }
  const double list_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - list_start).count();
  const auto head_start = std::chrono::steady_clock::now();
  ec = on_threads(opt, [&](std::uint64_t i, error_code& e) {
    const object_info info = client.head_object(opt.bucket, list_key(opt, i), e);
    if (!e && info.size != opt.size) e = sluice::errc::protocol_violation;
  });
  if (ec) return fail("HEAD", ec);
  const double head_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - head_start).count();
  const bool verified = in_order && seen == opt.count;
  if (!verified) {
    std::fprintf(stderr, "sluice_s3_bench: listed %llu keys (%s), expected %llu\n",
                 static_cast<unsigned long long>(seen), in_order ? "in order" : "NOT in order",
                 static_cast<unsigned long long>(opt.count));
  }
  std::printf(
      "{\"op\":\"list\",\"count\":%llu,\"pages\":%llu,\"list_seconds\":%.4f,\"list_keys_per_s\":%.1f,"
      "\"head_seconds\":%.4f,\"head_keys_per_s\":%.1f,\"threads\":%u,\"verified\":%s}\n",
      static_cast<unsigned long long>(opt.count), static_cast<unsigned long long>(pages), list_seconds,
      static_cast<double>(seen) / list_seconds, head_seconds, static_cast<double>(opt.count) / head_seconds,
      opt.threads, verified ? "true" : "false");
  return verified ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (const auto problem = parse(argc, argv, opt)) return usage(problem->c_str());
  if (opt.op == "gen") return generate_file(opt);

  s3::client_config config;
  config.endpoint = opt.endpoint;
  if (!opt.anonymous) config.creds = {opt.access_key, opt.secret_key};
  config.part_size = opt.part_size;
  config.multipart_threshold = opt.part_size;  // every transfer longer than a part is split into parts
  config.parts_in_flight = opt.parts_in_flight;
  config.max_connections_per_host = std::max<std::size_t>(config.max_connections_per_host, opt.parts_in_flight + 1);

  // Checked before a plane is opened (validate does not look at it). client_config applies S3's
  // part limits (5 MiB..5 GiB) to the ranged GETs of a download too.
  if (const auto problem = config.validate()) {
    const std::string why =
        "client configuration: " + problem->message() +
        (problem->field == "part_size" ? " (sluice's client applies S3's multipart limit to GET parts too)" : "");
    return usage(why.c_str());
  }
  std::string provider = "none";
  std::shared_ptr<fabric::client_plane> plane;
  std::shared_ptr<s3::local_client_plane> grants;
  if (!opt.grant_socket.empty()) {
    if (opt.anonymous) return usage("--grant-socket needs credentials");
    error_code ec;
    grants = s3::local_client_plane::open({opt.grant_socket, {opt.access_key, opt.secret_key}, nullptr}, ec);
    if (ec) {
      std::fprintf(stderr, "sluice_s3_bench: --grant-socket %s: %s\n", opt.grant_socket.c_str(), ec.message().c_str());
      return 1;
    }
    provider = std::string(grants->provider());
    config.rdma = grants;
  } else if (opt.via != "http" && opt.anonymous) {
    std::fprintf(stderr, "sluice_s3_bench: --anonymous: no RDMA plane (tokens need signed requests); HTTP only\n");
  } else if (opt.via != "http") {
    const bool local = endpoint_is_loopback(opt.endpoint);
    fabric::client_plane_config plane_config;
    plane_config.fabric.provider = opt.fabric == "tcp" ? "tcp;ofi_rxm" : opt.fabric;
    if (local) plane_config.fabric.node = "127.0.0.1";
    plane_config.endpoints = opt.endpoints;
    if (const auto problem = plane_config.validate()) return usage(problem->message().c_str());
    error_code ec;
    plane = fabric::client_plane::open(plane_config, local, ec);
    if (ec) {
      std::fprintf(stderr, "sluice_s3_bench: --fabric %s: no libfabric endpoint: %s\n", opt.fabric.c_str(),
                   ec.message().c_str());
      return 1;
    }
    provider = std::string(plane->provider());
    config.rdma = plane;
    std::fprintf(stderr, "sluice_s3_bench: client plane %s, %zu endpoints\n", provider.c_str(),
                 plane->endpoint_count());
  }
  if (opt.op == "fill" || opt.op == "list") {
    config.max_connections_per_host = std::max<std::size_t>(config.max_connections_per_host, opt.threads);
  }
  s3::client client(config);
  if (opt.op == "fill") return run_fill(opt, client);
  if (opt.op == "list") return run_list(opt, client);
  return opt.op == "put" ? run_put(opt, client, provider, grants.get()) : run_get(opt, client, provider, grants.get());
}
