// SPDX-License-Identifier: Apache-2.0
// sluice S3 RDMA demo, the README's main job. Against a running `sluice serve --fabric auto` it
// PUTs a generated object by RDMA (x-amz-rdma-token), then GETs it back into a fresh host buffer
// by RDMA on each libfabric provider asked for, by HTTP, and with the automatic choice, all
// through the same sluice::s3::client API. Every copy is verified (memcmp against the source,
// and CRC32C computed on both sides); it prints the time, throughput, path report (what carried
// the bytes) and CPU time of each step, then a table with the RDMA/HTTP ratios.
//
//   sluice_s3_rdma_demo --endpoint http://127.0.0.1:9000 --access-key AK --secret-key SK
//                       [--size 1GiB] [--fabric auto|shm|tcp|shm,tcp] [--bucket demo]
//                       [--parts-in-flight 4] [--repeat 1] [--server-pid PID] [--grant-socket PATH]
//
// --grant-socket: the server's same-host grant socket: one more GET, into a sluice::shared_buffer
// (memfd) granted to the server, which reads the object straight into it (no libfabric).
// --fabric takes one provider or a comma-separated list (one GET by RDMA each; the PUT uses the
// first). --server-pid adds the server's CPU time (from /proc/PID/stat) to the report. Exit
// status: 0 when every copy matched, 1 on a mismatch or a failed transfer, 2 on bad arguments.
#include <sluice/fabric/s3_plane.hpp>

#include <sluice/config.hpp>
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/local_plane.hpp>
#include <sluice/shared_buffer.hpp>

#ifdef SLUICE_DEMO_WITH_CUDA
#include <sluice/cuda/device.hpp>
#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/s3.hpp>
#endif

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

using namespace sluice;

struct options {
  std::string endpoint;
  std::string access_key;
  std::string secret_key;
  std::uint64_t size = 1 * gib;
  std::vector<std::string> fabrics{"auto"};
  std::string bucket = "demo";
  std::uint32_t parts_in_flight = 4;
  unsigned repeat = 1;
  int server_pid = 0;  // 0: server CPU not reported
  std::string grant_socket;
};

int usage() {
  std::fprintf(
      stderr,
      "usage: sluice_s3_rdma_demo --endpoint http://HOST:PORT --access-key AK --secret-key SK\n"
      "                           [--size 1GiB] [--fabric auto|shm|tcp|verbs|efa[,...]] [--bucket demo]\n"
      "                           [--parts-in-flight 4] [--repeat 1] [--server-pid PID] [--grant-socket PATH]\n");
  return 2;
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto at = text.find(separator);
    if (at != 0) out.emplace_back(text.substr(0, at));
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}

bool parse(int argc, char** argv, options& opt) {
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (i + 1 >= argc) return false;
      const std::string value = argv[++i];
      if (arg == "--endpoint") {
        opt.endpoint = value;
      } else if (arg == "--access-key") {
        opt.access_key = value;
      } else if (arg == "--secret-key") {
        opt.secret_key = value;
      } else if (arg == "--size") {
        const auto size = parse_size(value);
        if (!size || *size == 0) return false;
        opt.size = *size;
      } else if (arg == "--fabric") {
        opt.fabrics = split(value, ',');
        if (opt.fabrics.empty()) return false;
      } else if (arg == "--bucket") {
        opt.bucket = value;
      } else if (arg == "--parts-in-flight") {
        opt.parts_in_flight = static_cast<std::uint32_t>(std::stoul(value));
      } else if (arg == "--repeat") {
        opt.repeat = static_cast<unsigned>(std::stoul(value));
        if (opt.repeat == 0) return false;
      } else if (arg == "--grant-socket") {
        opt.grant_socket = value;
      } else if (arg == "--server-pid") {
        opt.server_pid = std::stoi(value);
      } else {
        return false;
      }
    }
  } catch (const std::exception&) {  // stoul/stoi: not a number
    return false;
  }
  return !opt.endpoint.empty() && !opt.access_key.empty() && !opt.secret_key.empty();
}

// --fabric: a short name or a libfabric provider name (as `sluice serve --fabric` takes it).
std::string provider_name(std::string_view choice) {
  if (choice == "tcp") return "tcp;ofi_rxm";
  if (choice == "verbs") return "verbs;ofi_rxm";
  return std::string(choice);
}

// Whether the endpoint http://host[:port] names this host (then shm is a candidate provider and
// the client's endpoint binds to loopback, where the server's is).
bool endpoint_is_loopback(std::string_view url) {
  if (url.starts_with("http://")) url.remove_prefix(7);
  url = url.substr(0, url.find('/'));
  const std::string_view host = url.starts_with('[') ? url.substr(0, url.find(']') + 1) : url.substr(0, url.rfind(':'));
  return host == "localhost" || host.starts_with("127.") || host == "[::1]";
}

std::string format_bytes(std::uint64_t bytes) {
  char text[32];
  if (bytes >= gib && bytes % gib == 0) {
    std::snprintf(text, sizeof text, "%llu GiB", static_cast<unsigned long long>(bytes / gib));
  } else if (bytes >= mib && bytes % mib == 0) {
    std::snprintf(text, sizeof text, "%llu MiB", static_cast<unsigned long long>(bytes / mib));
  } else {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return text;
}

double to_gib(std::uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(gib); }

// Owned host memory, left uninitialized until someone writes it (make_unique_for_overwrite).
/// The demo's client settings (8 MiB parts), with `plane` as its data plane.
s3::client_config client_config_for(const options& opt, std::shared_ptr<s3::rdma_client_plane> plane) {
  s3::client_config config;
  config.endpoint = opt.endpoint;
  config.creds = {opt.access_key, opt.secret_key};
  config.part_size = 8 * mib;
  config.parts_in_flight = opt.parts_in_flight;
  config.rdma = std::move(plane);
  return config;
}

/// Host memory for a transfer: ordinary, or (with a grant plane) a shared_buffer granted to the
/// server. `bytes.get()` is the first byte either way.
struct host_buffer {
  struct view {
    std::byte* p = nullptr;
    [[nodiscard]] std::byte* get() const noexcept { return p; }
  };
  explicit host_buffer(std::size_t n, s3::local_client_plane* grants = nullptr) : size(n) {
    if (grants == nullptr) {
      owned = std::make_unique_for_overwrite<std::byte[]>(n);
      bytes.p = owned.get();
      return;
    }
    shared = shared_buffer::create(n);
    error_code ec;
    grants->share(shared, ec);
    if (ec) throw std::system_error(ec, "granting a buffer to the server");
    bytes.p = shared.data();
  }
  [[nodiscard]] sluice::region region() const noexcept { return {bytes.get(), size, memory_kind::host_pageable, -1}; }
  [[nodiscard]] std::span<const std::byte> span() const noexcept { return {bytes.get(), size}; }
  std::unique_ptr<std::byte[]> owned;
  shared_buffer shared;
  view bytes;
  std::size_t size;
};

// xoshiro256** seeded by splitmix64: 8 bytes a step, about 1 GiB/s on one core.
void fill_random(std::span<std::byte> out, std::uint64_t seed) {
  auto splitmix = [&seed] {
    std::uint64_t z = (seed += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31U);
  };
  std::uint64_t s[4] = {splitmix(), splitmix(), splitmix(), splitmix()};
  auto rotl = [](std::uint64_t x, unsigned k) { return (x << k) | (x >> (64U - k)); };
  auto next = [&] {
    const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17U;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  };
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

std::uint32_t crc32c(std::span<const std::byte> bytes) {
  s3::digest d(s3::digest_kind::crc32c);
  d.update(bytes);
  const auto value = d.finish();  // 4 bytes, big-endian
  std::uint32_t out = 0;
  for (const std::byte b : value) out = (out << 8U) | std::to_integer<std::uint32_t>(b);
  return out;
}

// CPU seconds (user + system) of this process, all threads, and of the server when its pid is
// known (negative when it is not, or /proc cannot be read).
struct cpu_sample {
  double self = 0;
  double server = -1;
};

double server_cpu_seconds(int pid) {
  if (pid <= 0) return -1;
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return -1;
  char text[1024];
  const std::size_t n = std::fread(text, 1, sizeof text - 1, file);
  std::fclose(file);
  text[n] = '\0';
  // The command name may hold spaces and parentheses: the fields follow the last ')'. Field 3
  // of proc(5) (state) comes first; utime and stime are fields 14 and 15, in clock ticks.
  const char* at = std::strrchr(text, ')');
  if (at == nullptr) return -1;
  ++at;
  double ticks = 0;
  for (int field = 3; field <= 15; ++field) {
    while (*at == ' ') ++at;
    if (*at == '\0') return -1;
    if (field >= 14) ticks += std::strtod(at, nullptr);
    while (*at != ' ' && *at != '\0') ++at;
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

cpu_sample sample_cpu(int server_pid) {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return {seconds(usage.ru_utime) + seconds(usage.ru_stime), server_cpu_seconds(server_pid)};
}

// One timed transfer.
struct measurement {
  double seconds = 0;
  double client_cpu = 0;
  double server_cpu = -1;  // negative: not known
  s3::transfer_report report;
};

// Runs `transfer` between two CPU and clock samples.
template <class Transfer>
measurement measure(int server_pid, Transfer&& transfer) {
  const cpu_sample cpu0 = sample_cpu(server_pid);
  const auto t0 = std::chrono::steady_clock::now();
  measurement m;
  transfer(m.report);
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const cpu_sample cpu1 = sample_cpu(server_pid);
  m.client_cpu = cpu1.self - cpu0.self;
  if (cpu0.server >= 0 && cpu1.server >= 0) m.server_cpu = cpu1.server - cpu0.server;
  return m;
}

std::string describe_report(const s3::transfer_report& r) {
  std::string text = "rdma " + std::to_string(r.rdma_bytes) + " B in " + std::to_string(r.rdma_requests) +
                     " requests, http " + std::to_string(r.http_bytes) + " B in " + std::to_string(r.http_requests) +
                     " requests";
  if (r.declined > 0) text += ", " + std::to_string(r.declined) + " declined by the server";
  return text;
}

void print_measurement(const measurement& m, std::uint64_t size) {
  std::printf("      %.3f s, %.2f GiB/s\n", m.seconds, to_gib(size) / m.seconds);
  std::printf("      path: %s\n", describe_report(m.report).c_str());
  if (m.server_cpu >= 0) {
    std::printf("      cpu: client %.2f s, server %.2f s (user+sys)\n", m.client_cpu, m.server_cpu);
  } else {
    std::printf("      cpu: client %.2f s (user+sys; server not measured)\n", m.client_cpu);
  }
}

// Progress on a terminal: one line rewritten every 5%; nothing when stdout is not a terminal.
s3::progress_callback terminal_progress() {
  if (::isatty(STDOUT_FILENO) != 1) return {};
  return [last = -1](std::uint64_t done, std::uint64_t total) mutable {
    const int percent = total == 0 ? 100 : static_cast<int>(done * 100 / total);
    if (percent / 5 == last / 5) return;
    last = percent;
    std::printf("\r      %3d%%", percent);
    std::fflush(stdout);
    if (percent == 100) std::printf("\r          \r");
  };
}

// One row of the final table: the best (fastest) of the repeats of one way.
struct row {
  std::string what;
  bool is_get = true;
  bool is_http = false;
  std::optional<measurement> best;
  void add(const measurement& m) {
    if (!best || m.seconds < best->seconds) best = m;
  }
};

/// Whether GETs into GPU memory run too (a device is present and the CUDA tier is built).
bool print_gpu_line() {
#ifdef SLUICE_DEMO_WITH_CUDA
  error_code ec;
  const int devices = cuda::device_count(ec);
  if (devices > 0) {
    const auto props = cuda::properties(0, ec);
    std::printf("GPU present (%d device%s, first: %s): the last GETs land in its memory\n", devices,
                devices == 1 ? "" : "s", ec ? "?" : props.name.c_str());
    return true;
  }
  std::printf("GPU: none (%s); the GETs land in host memory\n", cuda::no_device_reason().c_str());
#else
  std::printf("GPU: not checked (built without sluice::cuda); the GETs land in host memory\n");
#endif
  return false;
}

// One client per provider asked for, each with its own RDMA plane (client_config::rdma), and
// one for the same-host grant socket.
struct rdma_client {
  std::shared_ptr<fabric::client_plane> plane;  // null for the grant client
  std::unique_ptr<s3::client> client;
  std::shared_ptr<s3::local_client_plane> grants;  // the same-host grant plane, or null
};

// Opens the clients of opt.fabrics and opt.grant_socket into `clients`; 0, or the exit status
// when one cannot be made.
int open_clients(const options& opt, bool local, bool gpu, std::vector<rdma_client>& clients) {
  for (const std::string& choice : opt.fabrics) {
    fabric::client_plane_config plane_config;
    plane_config.fabric.provider = provider_name(choice);
    plane_config.fabric.hmem = gpu;  // device memory registered directly where the provider can
    if (local) plane_config.fabric.node = "127.0.0.1";
    error_code ec;
    auto plane = fabric::client_plane::open(plane_config, local, ec);
    if (ec) {
      std::fprintf(stderr, "sluice_s3_rdma_demo: --fabric %s: no libfabric endpoint: %s\n", choice.c_str(),
                   ec.message().c_str());
      return 1;
    }
    const s3::client_config config = client_config_for(opt, plane);
    if (auto problem = config.validate()) {
      std::fprintf(stderr, "sluice_s3_rdma_demo: %s\n", problem->message().c_str());
      return 2;
    }
    std::printf("client plane: --fabric %s -> provider %.*s\n", choice.c_str(),
                static_cast<int>(plane->provider().size()), plane->provider().data());
    clients.push_back({plane, std::make_unique<s3::client>(config), nullptr});
  }
  if (!opt.grant_socket.empty()) {  // same host: grant the server exactly the target buffer
    error_code ec;
    auto grants = s3::local_client_plane::open({opt.grant_socket, {opt.access_key, opt.secret_key}, nullptr}, ec);
    if (ec) {
      std::fprintf(stderr, "sluice_s3_rdma_demo: --grant-socket %s: %s\n", opt.grant_socket.c_str(),
                   ec.message().c_str());
      return 1;
    }
    const s3::client_config config = client_config_for(opt, grants);
    std::printf("client plane: --grant-socket %s -> %.*s\n", opt.grant_socket.c_str(),
                static_cast<int>(grants->provider().size()), grants->provider().data());
    clients.push_back({nullptr, std::make_unique<s3::client>(config), grants});
  }
  return 0;
}

// Says why `step` failed; the exit status 1.
int fail(const char* step, const error_code& ec) {
  std::fprintf(stderr, "sluice_s3_rdma_demo: %s: %s\n", step, ec.message().c_str());
  if (ec == s3::errc::rdma_not_supported) {
    std::fprintf(stderr,
                 "  (the server declined RDMA: start it with `sluice serve --fabric auto` and check that "
                 "it opened this provider)\n");
  }
  return 1;
}

// A way to GET: a client and what it asks for, with the best of its timed GETs.
struct get_way {
  rdma_client* by;
  s3::transfer_via via;
  row result;
};

// The ways to GET: by RDMA on each provider, by HTTP, and automatic (what an application
// would normally ask for: RDMA when both ends can, else HTTP).
std::vector<get_way> ways_to_get(std::vector<rdma_client>& clients, const std::string& first_provider) {
  std::vector<get_way> ways;
  ways.reserve(clients.size() + 2);
  for (auto& c : clients) {
    const std::string provider(c.plane ? c.plane->provider() : c.grants->provider());
    ways.push_back({&c, s3::transfer_via::rdma, {(c.grants ? "GET  grant " : "GET  rdma ") + provider}});
  }
  ways.push_back({&clients.front(), s3::transfer_via::http, {"GET  http", true, true, {}}});
  ways.push_back({&clients.front(), s3::transfer_via::automatic, {"GET  auto " + first_provider, true, false, {}}});
  return ways;
}

// Untimed: one small ranged GET each way, so that connecting the fabric endpoints (address
// vector insert, the provider's first handshake) and the HTTP connections is not what the
// timed GETs measure. 0, or the exit status.
int warm_up(std::vector<get_way>& ways, const options& opt, const std::string& key, const host_buffer& source) {
  std::printf("[4] warm-up: one 4 KiB GET each way (untimed)\n");
  const std::size_t probe_size = std::min<std::size_t>(opt.size, 4 * kib);
  for (auto& way : ways) {
    host_buffer probe(probe_size, way.by->grants.get());
    s3::get_options get(byte_range{0, probe_size});
    get.via = way.via;
    error_code ec;
    way.by->client->get_object(opt.bucket, key, probe.region(), std::move(get), ec);
    if (way.by->plane) way.by->plane->invalidate(probe.region());
    if (ec) return fail(way.result.what.c_str(), ec);
    if (std::memcmp(probe.bytes.get(), source.bytes.get(), probe_size) != 0) {
      std::fprintf(stderr, "sluice_s3_rdma_demo: %s (warm-up): bytes differ from the source\n",
                   way.result.what.c_str());
      return 1;
    }
  }
  return 0;
}

// The timed GETs: opt.repeat rounds of every way, each into a fresh host buffer and verified
// (all_ok false on a mismatch); `step` numbers the steps printed. 0, or the exit status.
int timed_gets(std::vector<get_way>& ways, const options& opt, const std::string& key, const host_buffer& source,
               std::uint32_t source_crc, int& step, bool& all_ok) {
  const std::uint64_t size = opt.size;
  for (unsigned round = 0; round < opt.repeat; ++round) {
    for (auto& way : ways) {
      std::printf("[%d] %s into a fresh host buffer", step++, way.result.what.c_str());
      if (way.via != s3::transfer_via::http) {
        std::printf(", parts of %s, %u in flight", format_bytes(8 * mib).c_str(), opt.parts_in_flight);
      }
      if (opt.repeat > 1) std::printf(" (round %u of %u)", round + 1, opt.repeat);
      std::printf(" ...\n");
      std::fflush(stdout);
      // Filled before the clock starts: stale bytes cannot pass the check, and the page faults
      // of fresh memory are not what is measured.
      host_buffer target(size, way.by->grants.get());
      std::memset(target.bytes.get(), 0xA5, size);
      std::uint64_t bytes = 0;
      error_code ec;
      const measurement m = measure(opt.server_pid, [&](s3::transfer_report& report) {
        s3::get_options get;
        get.via = way.via;
        get.report = &report;
        get.progress = terminal_progress();
        bytes = way.by->client->get_object(opt.bucket, key, target.region(), std::move(get), ec);
      });
      // The buffer is freed below: drop any cached registration of it first (a plane with
      // client_plane_config::cached_registrations > 0 keeps them; providers that pin pages
      // would otherwise keep the old ones).
      if (way.by->plane) way.by->plane->invalidate(target.region());
      if (ec) return fail(way.result.what.c_str(), ec);
      print_measurement(m, size);
      const bool same = bytes == size && std::memcmp(target.bytes.get(), source.bytes.get(), size) == 0;
      const std::uint32_t crc = crc32c(target.span());
      const bool ok = same && crc == source_crc;
      std::printf("      verify: memcmp with the source %s, CRC32C %08x %s source %08x: %s\n",
                  same ? "equal" : "DIFFERENT", crc, crc == source_crc ? "=" : "!=", source_crc,
                  ok ? "OK" : "MISMATCH");
      all_ok = all_ok && ok;
      way.result.add(m);
    }
  }
  return 0;
}

#ifdef SLUICE_DEMO_WITH_CUDA
// Into GPU memory: direct (the provider registers device memory, FI_HMEM) when it can,
// else through the pinned ring; then by HTTP through the same ring. Verified on the host
// (all_ok false on a mismatch), a row each in `gpu_rows`. 0, or the exit status.
int gpu_gets(s3::client& first, const options& opt, const std::string& key, const host_buffer& source,
             std::uint32_t source_crc, int& step, bool& all_ok, std::vector<row>& gpu_rows) {
  const std::uint64_t size = opt.size;
  error_code ec;
  auto device = cuda::device_buffer::allocate(size, 0, ec);
  if (ec) return fail("cudaMalloc", ec);
  for (const auto via : {s3::transfer_via::automatic, s3::transfer_via::http}) {
    std::printf("[%d] GET  %s into GPU memory ...\n", step++, via == s3::transfer_via::http ? "http" : "auto");
    std::fflush(stdout);
    if ((ec = cuda::fill(device.region(), std::byte{0xA5}))) return fail("cudaMemset", ec);
    cuda::device_transfer_report gpu_report;
    const measurement m = measure(opt.server_pid, [&](s3::transfer_report& report) {
      cuda::device_transfer_options options;
      options.via = via;
      options.progress = terminal_progress();
      (void)cuda::get_object_to_device(first, opt.bucket, key, device.region(), options, &gpu_report, ec);
      report.rdma_bytes = gpu_report.rdma_bytes;
      report.http_bytes = gpu_report.http_bytes;
    });
    if (ec) return fail("GET into GPU memory", ec);
    print_measurement(m, size);
    std::printf("      device path: %s, pinned staging %s\n", cuda::to_string(gpu_report.path),
                format_bytes(gpu_report.pinned_bytes).c_str());
    host_buffer back(size);
    if ((ec = cuda::copy(back.region(), device.region()))) return fail("cudaMemcpy", ec);
    const std::uint32_t crc = crc32c(back.span());
    const bool ok = std::memcmp(back.bytes.get(), source.bytes.get(), size) == 0 && crc == source_crc;
    std::printf("      verify (copied back): CRC32C %08x %s source %08x: %s\n", crc,
                crc == source_crc ? "=" : "!=", source_crc, ok ? "OK" : "MISMATCH");
    all_ok = all_ok && ok;
    row r{std::string("GET  ") + (via == s3::transfer_via::http ? "http" : "auto") + " -> GPU " +
              cuda::to_string(gpu_report.path),
          true,
          false,
          {}};
    r.add(m);
    gpu_rows.push_back(std::move(r));
  }
  return 0;
}
#endif

// The final table: the best of the repeats of every step, with the RDMA/HTTP ratios.
void print_results(const options& opt, const row& put_row, const std::vector<get_way>& ways,
                   const std::vector<row>& gpu_rows, bool all_ok) {
  const std::uint64_t size = opt.size;
  const row* http = nullptr;
  for (const auto& way : ways) {
    if (way.result.is_http) http = &way.result;
  }
  std::printf("\nresult: %s, %s; best of %u; cpu = user+sys seconds per GiB moved\n", format_bytes(size).c_str(),
              all_ok ? "every GET verified" : "VERIFICATION FAILED", opt.repeat);
  std::printf("  %-30s %8s %8s %10s %11s %11s %10s\n", "", "seconds", "GiB/s", "vs http", "cpu client", "cpu server",
              "cpu total");
  auto print_row = [&](const row& r) {
    const measurement& m = *r.best;
    std::string what = r.what;
    if (r.what.starts_with("GET  auto")) {
      what += m.report.http_bytes == 0 ? " -> rdma" : m.report.rdma_bytes == 0 ? " -> http" : " -> mixed";
    }
    const double per_gib = 1 / to_gib(size);
    char ratio[16] = "-";
    if (r.is_get && http != nullptr) std::snprintf(ratio, sizeof ratio, "%.2fx", http->best->seconds / m.seconds);
    char server[16] = "n/a";
    char total[16] = "n/a";
    if (m.server_cpu >= 0) {
      std::snprintf(server, sizeof server, "%.2f", m.server_cpu * per_gib);
      std::snprintf(total, sizeof total, "%.2f", (m.client_cpu + m.server_cpu) * per_gib);
    }
    std::printf("  %-30s %8.3f %8.2f %10s %11.2f %11s %10s\n", what.c_str(), m.seconds, to_gib(size) / m.seconds, ratio,
                m.client_cpu * per_gib, server, total);
  };
  print_row(put_row);
  for (const auto& way : ways) print_row(way.result);
  for (const auto& r : gpu_rows) print_row(r);
  std::printf("  (PUT: the server makes every object durable before it answers, fsync included.)\n");
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse(argc, argv, opt)) return usage();
  const bool local = endpoint_is_loopback(opt.endpoint);
  const std::uint64_t size = opt.size;
  const std::string key = "rdma-demo-" + std::to_string(size) + ".bin";

  std::printf("sluice S3 RDMA demo: %s object s3://%s/%s at %s\n", format_bytes(size).c_str(), opt.bucket.c_str(),
              key.c_str(), opt.endpoint.c_str());
  const bool gpu = print_gpu_line();

  std::vector<rdma_client> clients;
  if (const int status = open_clients(opt, local, gpu, clients); status != 0) return status;
  s3::client& first = *clients.front().client;
  const std::string first_provider(clients.front().plane->provider());

  std::printf("[1] generate %s (xoshiro256**) ...\n", format_bytes(size).c_str());
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  host_buffer source(size);
  fill_random({source.bytes.get(), size}, 0x5EED);
  const std::uint32_t source_crc = crc32c(source.span());
  std::printf("      %.2f s (with the CRC32C), CRC32C %08x\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), source_crc);

  std::printf("[2] create bucket %s\n", opt.bucket.c_str());
  error_code ec;
  first.create_bucket(opt.bucket, ec);
  if (ec == s3::errc::bucket_already_owned_by_you) ec = {};
  if (ec) return fail("create bucket", ec);

  std::printf("[3] PUT by RDMA (%s), parts of %s, %u in flight ...\n", first_provider.c_str(),
              format_bytes(8 * mib).c_str(), opt.parts_in_flight);
  std::fflush(stdout);
  row put_row{"PUT  rdma " + first_provider, false, false, {}};
  {
    const measurement m = measure(opt.server_pid, [&](s3::transfer_report& report) {
      s3::put_options put;
      put.via = s3::transfer_via::rdma;
      put.report = &report;
      put.progress = terminal_progress();
      first.put_object(opt.bucket, key, source.region(), std::move(put), ec);
    });
    if (ec) return fail("PUT", ec);
    print_measurement(m, size);
    put_row.add(m);
  }

  std::vector<get_way> ways = ways_to_get(clients, first_provider);
  if (const int status = warm_up(ways, opt, key, source); status != 0) return status;

  bool all_ok = true;
  int step = 5;
  if (const int status = timed_gets(ways, opt, key, source, source_crc, step, all_ok); status != 0) return status;

  std::vector<row> gpu_rows;
#ifdef SLUICE_DEMO_WITH_CUDA
  if (gpu) {
    if (const int status = gpu_gets(first, opt, key, source, source_crc, step, all_ok, gpu_rows); status != 0) {
      return status;
    }
  }
#endif

  // Leave nothing behind on a long-lived server (best effort).
  first.delete_object(opt.bucket, key, ec);

  print_results(opt, put_row, ways, gpu_rows, all_ok);
  if (!all_ok) {
    std::fprintf(stderr, "sluice_s3_rdma_demo: a GET returned bytes different from the source\n");
    return 1;
  }
  return 0;
}
