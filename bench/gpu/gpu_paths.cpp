// SPDX-License-Identifier: Apache-2.0
// The GPU set of the benchmark harness: every storage → GPU path of sluice beside its baseline,
// in one run, on one object / file of --size bytes (default 4 GiB).
//
//   S3 GET → GPU: direct (RMA into device memory, FI_HMEM), staged over RDMA, staged over HTTP,
//                 and naive (HTTP GET into pageable memory, then cudaMemcpy), against a running
//                 `sluice serve --fabric auto` (bench/gpu.sh starts one).
//   file → GPU:   io_uring + O_DIRECT through the pinned ring, cuFile, and naive (pread into
//                 pageable memory, then cudaMemcpy), on --file.
//   ceilings:     pinned host → device copy (cudaMemcpy from cudaMallocHost memory), and the
//                 pageable one.
//
//   same-host grant: with --grant-socket (the server's), GET into device memory through a CUDA IPC
//                 grant: the first GET of a fresh object version (the server registers its page
//                 cache as the copy goes), then repeated GETs (registered); PUT from device memory
//                 the same way is not built yet. --aggregate N adds N client processes × 16
//                 concurrent 64 MiB GETs each, summed. --server-pid adds the server's CPU.
//                 --only upload: only the PUT of "object"; --only restart: the ceilings and one
//                 GET of the "object" an earlier run left in the store (run.sh restarts the
//                 server between, with the object's file in the page cache and then dropped).
//
// Each case runs --repeat times (default 3); the median wall time is reported, with the client
// CPU seconds per GiB (getrusage of this process) of that run and the pinned bytes the path
// held. Every copy into the GPU is checked against the source (a sample of 64 spans). Output: a
// table on stdout and, with --json FILE, one JSON object per case.
#include <sluice/cuda/device.hpp>
#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/grant.hpp>
#include <sluice/cuda/pinned.hpp>
#include <sluice/cuda/s3.hpp>
#include <sluice/fabric/s3_plane.hpp>
#include <sluice/s3/local_plane.hpp>
#if __has_include(<sluice/cuda/file.hpp>)
#include <sluice/cuda/file.hpp>
#define SLUICE_BENCH_FILE 1
#endif

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace {

using namespace sluice;

struct options {
  std::string endpoint;
  std::string access_key = "SLUICEBENCH";
  std::string secret_key = "sluice-bench-secret";
  std::string fabric = "auto";
  std::string file = "/tmp/sluice-gpu-bench.bin";
  std::string json;
  std::uint64_t size = 4 * gib;
  unsigned repeat = 3;
  std::size_t endpoints = 4;          // of the client's RDMA plane
  std::uint32_t parts_in_flight = 4;  // staged parts moving at once
  std::string grant_socket;           // the server's same-host grant socket; empty: no grant cases
  unsigned aggregate = 4;             // client processes of the concurrent grant case
  int server_pid = 0;                 // for the server's CPU seconds
  bool child = false;                 // one process of the concurrent case (internal)
  int device = 0;                     // the child's device (internal)
  std::string only;                   // "grant": the ceilings and the grant GETs only
  // The grant GETs' "parts" case: grant_in_flight threads, each one ranged GET of grant_part
  // bytes at once (the client's own grant GET into device memory is one request).
  std::uint64_t grant_part = 1 * gib;
  std::uint32_t grant_in_flight = 4;
};

/// The server's user + system CPU seconds (/proc/PID/stat); 0 when unknown.
double server_cpu(int pid) {
  if (pid <= 0) return 0;
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return 0;
  char buffer[1024] = {};
  const std::size_t n = std::fread(buffer, 1, sizeof buffer - 1, f);
  std::fclose(f);
  const std::string text(buffer, n);
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields;
  std::size_t at = close + 2;
  while (at < text.size() && fields.size() < 15) {
    const auto space = text.find(' ', at);
    fields.push_back(text.substr(at, space - at));
    at = space == std::string::npos ? text.size() : space + 1;
  }
  if (fields.size() < 13) return 0;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;  // utime, stime
}

struct measured {
  double seconds = 0;
  double own_seconds = -1;  // set by a body that times only part of itself (its setup untimed)
  double cpu_seconds = 0;
  std::uint64_t pinned = 0;
  std::string note;
};

struct result {
  std::string group;
  std::string name;
  std::optional<measured> value;  // nullopt: not run (note says why)
  std::string note;
};

double cpu_now() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](timeval t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

/// Runs `body` repeat times; the run with the median wall time. `body` returns false (with a
/// note) when the case cannot run here.
std::optional<measured> median_of(unsigned repeat, const std::function<bool(measured&)>& body, std::string& note) {
  std::vector<measured> runs;
  for (unsigned i = 0; i < repeat; ++i) {
    measured m;
    const double cpu = cpu_now();
    const auto start = std::chrono::steady_clock::now();
    if (!body(m)) {
      note = m.note;
      return std::nullopt;
    }
    m.seconds = m.own_seconds >= 0 ? m.own_seconds
                                   : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (m.own_seconds < 0) m.cpu_seconds = cpu_now() - cpu;
    note = m.note;
    runs.push_back(m);
  }
  std::sort(runs.begin(), runs.end(), [](const measured& a, const measured& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

std::vector<std::byte> pattern(std::uint64_t n) {
  std::vector<std::byte> out(n);
  std::uint64_t x = 0x243F6A8885A308D3ULL;
  std::uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const std::uint64_t v = x * 0x2545F4914F6CDD1DULL;
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<std::byte>(i);
  return out;
}

/// 64 spans of 64 KiB (first, last and evenly between) of device memory equal the source.
bool verify(const region& device, const std::vector<std::byte>& source) {
  const std::uint64_t span = std::min<std::uint64_t>(64 * kib, source.size());
  std::vector<std::byte> back(span);
  for (int i = 0; i < 64; ++i) {
    const std::uint64_t offset = source.size() <= span ? 0 : (source.size() - span) / 63 * static_cast<unsigned>(i);
    const region part{static_cast<std::byte*>(device.data) + offset, span, memory_kind::cuda_device, device.device};
    if (cuda::copy(host_region(back), part) || std::memcmp(back.data(), source.data() + offset, span) != 0) {
      std::fprintf(stderr, "MISMATCH at offset %llu\n", static_cast<unsigned long long>(offset));
      return false;
    }
  }
  return true;
}

void print_table(const std::vector<result>& results, std::uint64_t size, double ceiling) {
  std::printf("\n| group | path | GiB/s | vs pinned H2D | client CPU s/GiB | pinned MiB | note |\n");
  std::printf("|---|---|---:|---:|---:|---:|---|\n");
  const double gibs = static_cast<double>(size) / static_cast<double>(gib);
  for (const auto& r : results) {
    if (!r.value) {
      std::printf("| %s | %s | n/a | | | | %s |\n", r.group.c_str(), r.name.c_str(), r.note.c_str());
      continue;
    }
    const double rate = gibs / r.value->seconds;
    std::printf("| %s | %s | %.2f | %.2f | %.3f | %.0f | %s |\n", r.group.c_str(), r.name.c_str(), rate,
                ceiling > 0 ? rate / ceiling : 0.0, r.value->cpu_seconds / gibs,
                static_cast<double>(r.value->pinned) / static_cast<double>(mib), r.note.c_str());
  }
}

void write_json(const std::string& path, const std::vector<result>& results, std::uint64_t size) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return;
  const double gibs = static_cast<double>(size) / static_cast<double>(gib);
  std::fprintf(f, "[\n");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    std::fprintf(f, "  {\"group\": \"%s\", \"path\": \"%s\", \"bytes\": %llu", r.group.c_str(), r.name.c_str(),
                 static_cast<unsigned long long>(size));
    if (r.value) {
      std::fprintf(f, ", \"seconds\": %.6f, \"gib_per_s\": %.4f, \"cpu_s_per_gib\": %.5f, \"pinned_bytes\": %llu",
                   r.value->seconds, gibs / r.value->seconds, r.value->cpu_seconds / gibs,
                   static_cast<unsigned long long>(r.value->pinned));
    }
    std::fprintf(f, ", \"note\": \"%s\"}%s\n", r.note.c_str(), i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "]\n");
  std::fclose(f);
}

/// An S3 client whose plane grants device memory over the server's grant socket (CUDA IPC),
/// with parts as large as `part` (a grant has no staging to bound: fewer, larger requests).
std::unique_ptr<s3::client> grant_client(const options& opt, std::uint64_t part, std::uint32_t in_flight,
                                         error_code& ec) {
  auto plane = s3::local_client_plane::open(
      {opt.grant_socket, {opt.access_key, opt.secret_key}, cuda::make_grant_exporter()}, ec);
  if (ec) return nullptr;
  s3::client_config config;
  config.endpoint = opt.endpoint;
  config.creds = {opt.access_key, opt.secret_key};
  config.part_size = part;
  config.multipart_threshold = part;
  config.parts_in_flight = in_flight;
  config.max_connections_per_host = std::max<std::size_t>(config.max_connections_per_host, in_flight + 1);
  config.rdma = plane;
  return std::make_unique<s3::client>(config);
}

/// One process of the concurrent case: 16 threads, each GETting 64 MiB ranges of the object into
/// its own 64 MiB of device memory through the grant, `rounds` times; prints "bytes seconds".
int run_child(const options& opt) {
  constexpr std::uint64_t piece = 64 * mib;
  constexpr unsigned threads = 16;
  constexpr unsigned rounds = 4;
  error_code ec;
  auto client = grant_client(opt, piece, threads, ec);
  if (!client) {
    std::fprintf(stderr, "child: %s\n", ec.message().c_str());
    return 1;
  }
  auto device = cuda::device_buffer::allocate(piece * threads, opt.device);
  const std::uint64_t ranges = std::max<std::uint64_t>(opt.size / piece, 1);
  const auto one = [&](unsigned t, unsigned round) {
    const std::uint64_t offset = ((static_cast<std::uint64_t>(round) * threads + t) % ranges) * piece;
    const region to{static_cast<std::byte*>(device.native_handle()) + t * piece, piece, memory_kind::cuda_device,
                    opt.device};
    s3::get_options get(byte_range{offset, piece});
    get.via = s3::transfer_via::rdma;
    error_code e;
    return client->get_object("bench", "object", to, get, e) == piece && !e;
  };
  for (unsigned t = 0; t < threads; ++t) (void)one(t, 0);  // untimed: every allocation registered once
  // All processes start together: ready, then wait for the parent's go (one byte on stdin).
  std::printf("ready\n");
  std::fflush(stdout);
  char go = 0;
  if (::read(0, &go, 1) != 1) return 1;
  std::atomic<bool> ok{true};
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (unsigned r = 1; r <= rounds; ++r) {
          if (!one(t, r)) ok = false;
        }
      });
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%llu %.6f\n", static_cast<unsigned long long>(piece * threads * rounds), seconds);
  return ok ? 0 : 1;
}

/// `processes` child processes × 16 concurrent 64 MiB GETs each, started together, child c on
/// device c % `devices`: the aggregate rate, as seconds for --size.
result aggregate_case(const options& opt, const std::string& group, unsigned processes, unsigned devices) {
  std::vector<pid_t> children;
  std::vector<FILE*> pipes;
  std::vector<int> gos;
  for (unsigned c = 0; c < processes; ++c) {
    int fds[2];
    int in[2];
    if (::pipe(fds) != 0) break;
    if (::pipe(in) != 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      break;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    const std::string size_text = std::to_string(opt.size);
    std::vector<std::string> args = {"/proc/self/exe",
                                     "--endpoint",
                                     opt.endpoint,
                                     "--access-key",
                                     opt.access_key,
                                     "--secret-key",
                                     opt.secret_key,
                                     "--grant-socket",
                                     opt.grant_socket,
                                     "--size",
                                     size_text,
                                     "--child",
                                     "1",
                                     "--device",
                                     std::to_string(c % devices)};
    std::vector<char*> argv_child;
    for (auto& a : args) argv_child.push_back(a.data());
    argv_child.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv_child.data(), environ) == 0) {
      children.push_back(pid);
      pipes.push_back(::fdopen(fds[0], "r"));
      gos.push_back(in[1]);
    } else {
      ::close(fds[0]);
      ::close(in[1]);
    }
    ::close(fds[1]);
    ::close(in[0]);
    posix_spawn_file_actions_destroy(&actions);
  }
  bool children_ok = children.size() == processes;
  char line[128] = {};
  for (FILE* f : pipes) {  // every child has warmed up
    if (std::fgets(line, sizeof line, f) == nullptr || std::strncmp(line, "ready", 5) != 0) children_ok = false;
  }
  const auto start = std::chrono::steady_clock::now();
  for (const int go : gos) {
    if (::write(go, "g", 1) != 1) children_ok = false;
    ::close(go);
  }
  double bytes = 0;
  for (std::size_t c = 0; c < children.size(); ++c) {
    unsigned long long b = 0;
    double sec = 0;
    if (std::fgets(line, sizeof line, pipes[c]) == nullptr || std::sscanf(line, "%llu %lf", &b, &sec) != 2) {
      children_ok = false;
    }
    bytes += static_cast<double>(b);
  }
  // From the common start to the last child's last byte.
  const double slowest = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (std::size_t c = 0; c < children.size(); ++c) {
    std::fclose(pipes[c]);
    int status = 0;
    ::waitpid(children[c], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) children_ok = false;
  }
  const std::string name = std::to_string(processes) + " processes × 16 concurrent 64 MiB GETs" +
                           (devices > 1 ? ", one per GPU on " + std::to_string(devices) + " GPUs" : "");
  if (!children_ok || slowest <= 0) return {group, name, std::nullopt, "a client process failed"};
  measured m;
  m.seconds = slowest * static_cast<double>(opt.size) / bytes;  // as if moving --size at the aggregate rate
  m.note = "aggregate " + std::to_string(bytes / gib / slowest).substr(0, 5) + " GiB/s over " +
           std::to_string(static_cast<unsigned long long>(bytes) >> 20) + " MiB";
  return {group, name, m, m.note};
}

int usage() {
  std::fprintf(
      stderr,
      "usage: sluice_gpu_bench --endpoint http://HOST:PORT [--access-key AK --secret-key SK]\n"
      "                        [--size 4GiB] [--fabric auto|shm|tcp] [--file PATH] [--repeat 3]\n"
      "                        [--endpoints 4] [--parts-in-flight 4] [--json FILE]\n"
      "                        [--grant-socket PATH [--aggregate 4] [--server-pid PID]] [--only grant|restart|upload]\n"
      "                        [--grant-part MiB (1024)] [--grant-in-flight 4]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--endpoint")
      opt.endpoint = value;
    else if (flag == "--access-key")
      opt.access_key = value;
    else if (flag == "--secret-key")
      opt.secret_key = value;
    else if (flag == "--fabric")
      opt.fabric = value;
    else if (flag == "--file")
      opt.file = value;
    else if (flag == "--json")
      opt.json = value;
    else if (flag == "--repeat")
      opt.repeat = static_cast<unsigned>(std::stoul(value));
    else if (flag == "--endpoints")
      opt.endpoints = std::stoul(value);
    else if (flag == "--grant-socket")
      opt.grant_socket = value;
    else if (flag == "--aggregate")
      opt.aggregate = static_cast<unsigned>(std::stoul(value));
    else if (flag == "--server-pid")
      opt.server_pid = std::stoi(value);
    else if (flag == "--child")
      opt.child = value == "1";
    else if (flag == "--device")
      opt.device = std::stoi(value);
    else if (flag == "--only" && (value == "grant" || value == "restart" || value == "upload"))
      opt.only = value;
    else if (flag == "--grant-part")
      opt.grant_part = std::stoull(value) * mib;
    else if (flag == "--grant-in-flight")
      opt.grant_in_flight = static_cast<std::uint32_t>(std::stoul(value));
    else if (flag == "--size") {
      const auto n = parse_size(value);
      if (!n || *n == 0) return usage();
      opt.size = *n;
    } else {
      return usage();
    }
  }
  if (opt.endpoint.empty() || argc % 2 == 0) return usage();
  error_code ec;
  if (cuda::device_count(ec) == 0) {
    std::printf("SKIPPED: needs a CUDA device: %s\n", cuda::no_device_reason().c_str());
    return 77;
  }
  if (opt.child) return run_child(opt);
  const auto props = cuda::properties(0, ec);
  std::printf("device: %s; object/file size %.2f GiB; %u runs per case (median)\n", props.name.c_str(),
              static_cast<double>(opt.size) / static_cast<double>(gib), opt.repeat);

  const std::vector<std::byte> source = pattern(opt.size);
  auto device = cuda::device_buffer::allocate(opt.size);
  std::vector<result> results;
  std::string note;

  // -- ceilings ------------------------------------------------------------------------------
  const std::uint64_t chunk = std::min<std::uint64_t>(256 * mib, opt.size);
  auto pinned = cuda::pinned_buffer::allocate(chunk);
  std::memcpy(pinned.native_handle(), source.data(), chunk);
  const auto h2d = [&](const region& from, measured& m) {
    for (std::uint64_t offset = 0; offset < opt.size; offset += chunk) {
      const std::uint64_t n = std::min(chunk, opt.size - offset);
      const region to{static_cast<std::byte*>(device.native_handle()) + offset, n, memory_kind::cuda_device, 0};
      const region src{from.data, n, from.kind, -1};
      if (const auto e = cuda::copy(to, src)) {
        m.note = e.message();
        return false;
      }
    }
    return true;
  };
  {
    measured warm;  // untimed: the first copies pay the context's and the link's warm-up
    (void)h2d(pinned.region(), warm);
  }
  results.push_back({"ceiling", "pinned H2D (cudaMemcpy, 256 MiB chunks)",
                     median_of(
                         opt.repeat,
                         [&](measured& m) {
                           m.pinned = chunk;
                           return h2d(pinned.region(), m);
                         },
                         note),
                     "the bound every path is measured against"});
  const double ceiling = results.back().value ? static_cast<double>(opt.size) / gib / results.back().value->seconds : 0;
  {
    std::vector<std::byte> pageable(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(chunk));
    results.push_back({"ceiling", "pageable H2D (cudaMemcpy, 256 MiB chunks)",
                       median_of(
                           opt.repeat, [&](measured& m) { return h2d(host_region(pageable), m); }, note),
                       ""});
  }

  // -- S3 GET → GPU --------------------------------------------------------------------------
  s3::client_config config;
  config.endpoint = opt.endpoint;
  config.creds = {opt.access_key, opt.secret_key};
  fabric::client_plane_config plane;
  plane.fabric.provider = opt.fabric;
  plane.fabric.node = "127.0.0.1";
  plane.fabric.hmem = true;
  plane.endpoints = opt.endpoints;
  auto rdma = fabric::client_plane::open(plane, true, ec);
  if (ec) {
    std::fprintf(stderr, "sluice_gpu_bench: no RDMA plane (%s): %s\n", opt.fabric.c_str(), ec.message().c_str());
    return 1;
  }
  const bool hmem = rdma->get_endpoint()->traits().hmem;
  const std::string provider(rdma->provider());
  std::printf("client RDMA plane: %s, %zu endpoints, FI_HMEM %s\n", provider.c_str(), rdma->endpoint_count(),
              hmem ? "yes" : "no");
  config.rdma = rdma;
  s3::client client(config);
  client.create_bucket("bench", ec);  // exists already: fine
  if (opt.only != "restart") {
    s3::put_options put;
    const auto start = std::chrono::steady_clock::now();
    client.put_object("bench", "object", host_region(std::as_const(source)), put, ec);
    if (ec) {
      std::fprintf(stderr, "sluice_gpu_bench: PUT failed: %s\n", ec.message().c_str());
      return 1;
    }
    std::printf("uploaded %.2f GiB in %.1f s\n", static_cast<double>(opt.size) / gib,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (opt.only == "upload") return 0;
  }
  bool all_ok = true;
  // The same staged RDMA path through a plane of one endpoint: what spreading parts buys.
  plane.endpoints = 1;
  auto single = fabric::client_plane::open(plane, true, ec);
  s3::client_config single_config = config;
  single_config.rdma = single;
  s3::client single_client(single_config);
  // The same plane keeping its MRs (cached_registrations): the default registers the request's
  // memory per GET and deregisters it after; this client's repeated direct GETs into the same
  // device buffer find it registered. The pair prices a registration of device memory. (Not
  // for the staged path: each get_object_to_device makes its own stager, so its slots are new
  // memory every call.)
  plane.endpoints = opt.endpoints;
  plane.cached_registrations = 64;
  auto cached = fabric::client_plane::open(plane, true, ec);
  s3::client_config cached_config = config;
  cached_config.rdma = cached;
  s3::client cached_client(cached_config);
  const auto s3_case = [&](const char* name, cuda::device_path path, s3::transfer_via via, s3::client& through) {
    std::string why;
    auto value = median_of(
        opt.repeat,
        [&](measured& m) {
          (void)cuda::fill(device.region(), std::byte{0xAB});
          cuda::device_transfer_options o;
          o.path = path;
          o.via = via;
          o.parts_in_flight = opt.parts_in_flight;
          cuda::device_transfer_report report;
          error_code e;
          (void)cuda::get_object_to_device(through, "bench", "object", device.region(), o, &report, e);
          if (e) {
            m.note = e.message();
            return false;
          }
          m.pinned = report.pinned_bytes;
          m.note = std::string(cuda::to_string(report.path)) + ", rdma " + std::to_string(report.rdma_bytes >> 20) +
                   " MiB, http " + std::to_string(report.http_bytes >> 20) + " MiB";
          if (!verify(device.region(), source)) all_ok = false;
          return true;
        },
        why);
    results.push_back({"S3 GET → GPU (" + provider + ")", name, value, why});
  };
  // The grant GETs come first, right after the upload: "the first GET after server start". The
  // staged and naive paths below allocate and free tens of GiB of pageable memory, after which
  // registering page cache took 0.20-0.22 s per 4 GiB instead of 0.12-0.13 s (H100 runs 8-9).
  const bool every = opt.only.empty();
  // -- S3 GET → GPU through a same-host grant (CUDA IPC) --------------------------------------
  if (!opt.grant_socket.empty()) {
    const std::string group = "S3 GET → GPU (same-host grant, cuda-ipc)";
    // The client's defaults (the plane asks for a device grant's GET in one request), with
    // connections for the parts case's threads.
    auto granted = grant_client(opt, s3::client_config{}.part_size, opt.grant_in_flight, ec);
    if (!granted) {
      results.push_back({group, "grant GET", std::nullopt, "no grant session: " + ec.message()});
    } else {
      bool in_parts = false;  // grant_get: grant_in_flight concurrent ranged GETs of grant_part
      const auto grant_get = [&](s3::client& by, const std::string& key, measured& m) {
        (void)cuda::fill(device.region(), std::byte{0xAB});
        const double server0 = server_cpu(opt.server_pid);
        s3::transfer_report report;
        error_code e;
        std::uint64_t got = 0;
        if (!in_parts) {
          s3::get_options get;
          get.via = s3::transfer_via::rdma;
          get.report = &report;
          got = by.get_object("bench", key, device.region(), get, e);
        } else {
          const std::uint64_t part = std::min(opt.size, opt.grant_part);
          const std::uint64_t parts = (opt.size + part - 1) / part;
          std::atomic<std::uint64_t> next{0}, total{0}, requests{0};
          std::mutex failure_mutex;
          const auto worker = [&] {
            for (std::uint64_t i = next++; i < parts; i = next++) {
              const std::uint64_t at = i * part;
              const std::uint64_t n = std::min(part, opt.size - at);
              s3::transfer_report r;
              s3::get_options get(byte_range{at, n});
              get.via = s3::transfer_via::rdma;
              get.report = &r;
              error_code pe;
              const region whole = device.region();
              const region into{whole.bytes() + at, static_cast<std::size_t>(n), memory_kind::cuda_device,
                                whole.device};
              total += by.get_object("bench", key, into, get, pe);
              requests += r.rdma_requests;
              if (pe) {
                const std::lock_guard lock(failure_mutex);
                e = pe;
                return;
              }
            }
          };
          std::vector<std::jthread> threads;
          for (std::uint32_t t = 0; t < std::min<std::uint64_t>(opt.grant_in_flight, parts); ++t) {
            threads.emplace_back(worker);
          }
          threads.clear();
          got = total;
          report.rdma_bytes = got;
          report.rdma_requests = static_cast<std::uint32_t>(requests.load());
        }
        if (e || got != opt.size) {
          m.note = e ? e.message() : "short GET";
          return false;
        }
        const double server = server_cpu(opt.server_pid) - server0;
        char text[160];
        std::snprintf(text, sizeof text, "rdma %llu MiB in %u requests; server %.3f CPU-s/GiB",
                      static_cast<unsigned long long>(report.rdma_bytes >> 20), report.rdma_requests,
                      server / (static_cast<double>(opt.size) / gib));
        m.note = text;
        if (!verify(device.region(), source)) all_ok = false;
        return true;
      };
      // The first GET of an object version nobody registered yet: a fresh key each run (the page
      // cache holds it: it was just written).
      unsigned cold_run = 0;
      std::string why;
      // `pause`: between the PUT and the GET (the server registers a new version when it is
      // written: after a pause, the first GET finds it registered).
      const auto first_get = [&](s3::client& by, std::chrono::milliseconds pause) {
        return median_of(
            opt.repeat,
            [&](measured& m) {
              const std::string key = "cold-" + std::to_string(cold_run++);
              s3::put_options put;
              error_code e;
              client.put_object("bench", key, host_region(std::as_const(source)), put, e);
              if (e) {
                m.note = e.message();
                return false;
              }
              std::this_thread::sleep_for(pause);
              // Only the GET is timed, not the PUT before it.
              const double cpu = cpu_now();
              const auto start = std::chrono::steady_clock::now();
              if (!grant_get(by, key, m)) return false;
              const auto end = std::chrono::steady_clock::now();
              m.own_seconds = std::chrono::duration<double>(end - start).count();
              if (std::getenv("SLUICE_GRANT_TRACE") != nullptr) {  // NOLINT(concurrency-mt-unsafe)
                // steady_clock is CLOCK_MONOTONIC, the same in the server's trace lines
                std::printf("bench: first GET of %s from %.4f to %.4f\n", key.c_str(),
                            std::chrono::duration<double>(start.time_since_epoch()).count(),
                            std::chrono::duration<double>(end.time_since_epoch()).count());
              }
              m.cpu_seconds = cpu_now() - cpu;
              return true;
            },
            why);
      };
      if (opt.only == "restart") {
        // One GET of "object", which an earlier run of the same --size left in the store, from a
        // server started since: its first GET, whatever the page cache holds of it.
        std::string failed;
        auto once = median_of(
            1, [&](measured& m) { return grant_get(*granted, "object", m); }, failed);
        results.push_back({group, "first GET of the object since the server started (one request)", once, failed});
      }
      if (opt.only != "restart") {
        using std::chrono::milliseconds;
        auto cold = first_get(*granted, milliseconds(0));
        results.push_back({group, "first GET of the version (client default: one request)", cold, why});
        // The same object range split by the caller: concurrent ranged GETs, each one request.
        const std::string parts_name = std::to_string(opt.grant_in_flight) + " concurrent ranged GETs of " +
                                       std::to_string(std::min(opt.size, opt.grant_part) >> 20) + " MiB";
        in_parts = true;
        auto split = first_get(*granted, milliseconds(0));
        results.push_back({group, "first GET, " + parts_name, split, why});
        in_parts = false;
        auto later = first_get(*granted, milliseconds(1000));
        results.push_back({group, "first GET, 1 s after its PUT (one request)", later, why});
        in_parts = true;
        auto later_split = first_get(*granted, milliseconds(1000));
        results.push_back({group, "first GET, 1 s after its PUT, " + parts_name, later_split, why});
        in_parts = false;
        {
          // "object" has not been read through a grant yet: one untimed GET, then a pause for
          // the registering thread to register what the copy threads moved (in the background).
          measured ignored;
          (void)grant_get(*granted, "object", ignored);
          std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        auto warm = median_of(
            opt.repeat, [&](measured& m) { return grant_get(*granted, "object", m); }, why);
        results.push_back({group, "GET, already registered", warm, why});
        in_parts = true;
        auto warm_split = median_of(
            opt.repeat, [&](measured& m) { return grant_get(*granted, "object", m); }, why);
        results.push_back({group, "GET, already registered, " + parts_name, warm_split, why});
        in_parts = false;
        for (unsigned i = 0; i < cold_run; ++i) client.delete_object("bench", "cold-" + std::to_string(i), ec);

        // N processes × 16 concurrent 64 MiB GETs each, on device 0; with several GPUs, the same
        // processes one per device as well (a client on device k gets its bytes on device k).
        if (opt.aggregate > 0) {
          results.push_back(aggregate_case(opt, group, opt.aggregate, 1));
          const int devices = cuda::device_count(ec);
          if (devices >= 2) {
            const auto k = static_cast<unsigned>(devices);
            results.push_back(aggregate_case(opt, group, k, 1));
            results.push_back(aggregate_case(opt, group, k, k));
          } else {
            results.push_back({group, "processes on several GPUs", std::nullopt,
                               "one GPU on this host: not measured (the grant test runs two clients on one device)"});
          }
        }
      }
    }
  }

  // -- S3 GET → GPU, staged and naive ------------------------------------------------------
  if (!every) {
    // --only grant: the grant cases below, nothing else
  } else if (hmem) {
    s3_case("direct (RMA into HBM)", cuda::device_path::direct, s3::transfer_via::rdma, client);
    s3_case("direct (RMA into HBM), MRs cached", cuda::device_path::direct, s3::transfer_via::rdma, cached_client);
    cached->invalidate(device.region());
  } else {
    results.push_back({"S3 GET → GPU (" + provider + ")", "direct (RMA into HBM)", std::nullopt,
                       "provider " + provider + " has no FI_HMEM here"});
  }
  const std::string staged_rdma = "staged, RDMA parts, " + std::to_string(rdma->endpoint_count()) + " endpoints";
  if (every) s3_case(staged_rdma.c_str(), cuda::device_path::staged, s3::transfer_via::rdma, client);
  if (every)
    s3_case("staged, RDMA parts, 1 endpoint", cuda::device_path::staged, s3::transfer_via::rdma, single_client);
  if (every) s3_case("staged, HTTP parts", cuda::device_path::staged, s3::transfer_via::http, client);
  if (every) {
    std::string why;
    std::vector<std::byte> pageable;
    auto value = median_of(
        opt.repeat,
        [&](measured& m) {
          (void)cuda::fill(device.region(), std::byte{0xAB});
          pageable.assign(opt.size, std::byte{0});  // a fresh pageable buffer, as a naive loader has
          s3::get_options get;
          get.via = s3::transfer_via::http;
          error_code e;
          (void)client.get_object("bench", "object", host_region(pageable), get, e);
          if (!e) e = cuda::copy(device.region(), host_region(pageable));
          if (e) {
            m.note = e.message();
            return false;
          }
          m.note = "HTTP into a pageable buffer, then one cudaMemcpy";
          if (!verify(device.region(), source)) all_ok = false;
          return true;
        },
        why);
    results.push_back({"S3 GET → GPU (" + provider + ")", "naive (HTTP → pageable → cudaMemcpy)", value, why});
  }

  // -- S3 PUT from GPU through a same-host grant, against the disk's durable write rate --------
  if (every && !opt.grant_socket.empty()) {
    const std::string group = "S3 PUT ← GPU (same-host grant, cuda-ipc)";
    // The baseline: dd of the same size with conv=fsync on the file system of --file (the
    // store's, in run.sh), one run before each PUT.
    const std::string dd_target = opt.file + ".dd";
    const std::string dd = "dd if=/dev/zero of='" + dd_target + "' bs=16M count=" + std::to_string(opt.size >> 24) +
                           " conv=fsync status=none";
    auto granted = grant_client(opt, std::min<std::uint64_t>(opt.size, 1 * gib), 4, ec);
    std::string why;
    std::vector<double> dd_seconds;
    std::vector<std::byte> back;  // reused: a fresh 4 GiB buffer per run would time page faults
    unsigned put_run = 0;
    auto put = median_of(
        opt.repeat,
        [&](measured& m) {
          if (!granted) {
            m.note = "no grant session";
            return false;
          }
          const auto d0 = std::chrono::steady_clock::now();
          const int rc = std::system(dd.c_str());
          dd_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count());
          ::unlink(dd_target.c_str());
          if (rc != 0) {
            m.note = "dd failed";
            return false;
          }
          // The device buffer holds the source's bytes (the GETs above verified them).
          const std::string key = "put-" + std::to_string(put_run++);
          s3::put_options o;
          s3::transfer_report report;
          o.report = &report;
          o.via = s3::transfer_via::rdma;
          const double server0 = server_cpu(opt.server_pid);
          const double cpu = cpu_now();
          const auto start = std::chrono::steady_clock::now();
          error_code e;
          (void)granted->put_object("bench", key, device.region(), o, e);
          m.own_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          m.cpu_seconds = cpu_now() - cpu;
          if (e) {
            m.note = e.message();
            return false;
          }
          const double server = server_cpu(opt.server_pid) - server0;
          // Read it back by HTTP into host memory and compare with the source.
          back.assign(opt.size, std::byte{0});
          s3::get_options g;
          g.via = s3::transfer_via::http;
          const std::uint64_t got = client.get_object("bench", key, host_region(back), g, e);
          if (e || got != opt.size || back != source) {
            std::fprintf(stderr, "MISMATCH: PUT from GPU stored other bytes\n");
            all_ok = false;
          }
          client.delete_object("bench", key, e);
          char text[200];
          std::snprintf(text, sizeof text, "rdma %llu MiB; server %.3f CPU-s/GiB; dd conv=fsync %.2f GiB/s",
                        static_cast<unsigned long long>(report.rdma_bytes >> 20),
                        server / (static_cast<double>(opt.size) / gib),
                        static_cast<double>(opt.size) / gib / dd_seconds.back());
          m.note = text;
          return true;
        },
        why);
    if (!dd_seconds.empty()) {
      std::sort(dd_seconds.begin(), dd_seconds.end());
      measured d;
      d.seconds = dd_seconds[dd_seconds.size() / 2];
      d.note = "dd if=/dev/zero bs=16M conv=fsync, the store's file system";
      results.push_back({group, "baseline: durable write rate (dd conv=fsync)", d, d.note});
    }
    results.push_back({group, "PUT of the device buffer (one request)", put, why});
    if (put && !dd_seconds.empty()) {
      std::printf("PUT from GPU vs dd conv=fsync: %.2fx (target >= 0.80)\n",
                  dd_seconds[dd_seconds.size() / 2] / put->seconds);
    }
  }

  // -- file → GPU ----------------------------------------------------------------------------
  if (every) {  // not with --only grant
    {
      const int fd = ::open(opt.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      bool written = fd >= 0;
      for (std::uint64_t done = 0; written && done < opt.size;) {
        const ssize_t n = ::write(fd, source.data() + done, std::min<std::uint64_t>(opt.size - done, 64 * mib));
        if (n <= 0)
          written = false;
        else
          done += static_cast<std::uint64_t>(n);
      }
      if (fd >= 0) {
        written = written && ::fsync(fd) == 0;
        ::close(fd);
      }
      if (!written) std::fprintf(stderr, "sluice_gpu_bench: cannot write %s\n", opt.file.c_str());
    }
    // Every case starts with the file out of the page cache (written and fsynced, so DONTNEED
    // drops it): each reads from the disk, as a cold load does.
    const auto drop_cache = [&] {
      const int fd = ::open(opt.file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
      }
    };
    // Untimed: reads the whole file once, so that it is in the page cache.
    const auto warm_cache = [&] {
      const int fd = ::open(opt.file.c_str(), O_RDONLY | O_CLOEXEC);
      std::vector<std::byte> buffer(64 * mib);
      while (fd >= 0 && ::read(fd, buffer.data(), buffer.size()) > 0) {
      }
      if (fd >= 0) ::close(fd);
    };
    {  // the disk's own rate: O_DIRECT reads of the cold file into host memory
      std::string why;
      void* raw = nullptr;
      const bool aligned = ::posix_memalign(&raw, 4096, 64 * mib) == 0;
      auto value = median_of(
          opt.repeat,
          [&](measured& m) {
            drop_cache();
            const int fd = ::open(opt.file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
            std::uint64_t done = 0;
            while (aligned && fd >= 0 && done < opt.size) {
              const ssize_t n = ::pread(fd, raw, 64 * mib, static_cast<off_t>(done));
              if (n <= 0) break;
              done += static_cast<std::uint64_t>(n);
            }
            if (fd >= 0) ::close(fd);
            m.note = "O_DIRECT pread, 64 MiB, into host memory";
            return done == opt.size;
          },
          why);
      std::free(raw);
      results.push_back({"file → GPU", "ceiling: the disk's O_DIRECT read rate (to host)", value, why});
    }
#ifdef SLUICE_BENCH_FILE
    const auto file_case = [&](const char* name, cuda::file_method method, bool resident = false) {
      std::string why;
      auto value = median_of(
          opt.repeat,
          [&](measured& m) {
            (void)cuda::fill(device.region(), std::byte{0xAB});
            if (resident) {
              warm_cache();
            } else {
              drop_cache();
            }
            const auto start = std::chrono::steady_clock::now();
            const double cpu = cpu_now();
            cuda::file_to_device_options o;
            o.method = method;
            cuda::file_to_device_report report;
            error_code e;
            (void)cuda::read_file_to_device(opt.file, 0, device.region(), o, &report, e);
            m.own_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            m.cpu_seconds = cpu_now() - cpu;
            if (e) {
              m.note = e.message();
              return false;
            }
            m.pinned = report.pinned_bytes;
            m.note = std::string(cuda::to_string(report.method)) + (report.method == cuda::file_method::mapped
                                                                        ? " (registered page cache)"
                                                                    : report.direct_io ? ", O_DIRECT"
                                                                                       : ", buffered");
            if (report.resident_fraction >= 0) {
              m.note += ", resident " + std::to_string(static_cast<int>(report.resident_fraction * 100)) + " %";
            }
            if (!verify(device.region(), source)) all_ok = false;
            return true;
          },
          why);
      results.push_back({"file → GPU", name, value, why});
    };
    file_case("io_uring through the pinned ring", cuda::file_method::uring);
    file_case("cuFile", cuda::file_method::cufile);
    file_case("automatic, file in the page cache", cuda::file_method::automatic, true);
    file_case("automatic, cold file", cuda::file_method::automatic, false);
#else
    results.push_back({"file → GPU", "io_uring / cuFile", std::nullopt, "built without the file tier (liburing)"});
#endif
    {
      std::string why;
      std::vector<std::byte> pageable;
      auto value = median_of(
          opt.repeat,
          [&](measured& m) {
            (void)cuda::fill(device.region(), std::byte{0xAB});
            drop_cache();
            pageable.assign(opt.size, std::byte{0});
            const int fd = ::open(opt.file.c_str(), O_RDONLY | O_CLOEXEC);
            std::uint64_t done = 0;
            while (fd >= 0 && done < opt.size) {
              const ssize_t n = ::pread(fd, pageable.data() + done, std::min<std::uint64_t>(opt.size - done, 64 * mib),
                                        static_cast<off_t>(done));
              if (n <= 0) break;
              done += static_cast<std::uint64_t>(n);
            }
            if (fd >= 0) ::close(fd);
            if (done != opt.size) {
              m.note = "pread failed";
              return false;
            }
            if (const auto e = cuda::copy(device.region(), host_region(pageable))) {
              m.note = e.message();
              return false;
            }
            m.note = "pread into a pageable buffer, then one cudaMemcpy";
            if (!verify(device.region(), source)) all_ok = false;
            return true;
          },
          why);
      results.push_back({"file → GPU", "naive (pread → pageable → cudaMemcpy)", value, why});
    }
    ::unlink(opt.file.c_str());
  }

  print_table(results, opt.size, ceiling);
  if (!opt.json.empty()) write_json(opt.json, results, opt.size);
  std::printf("\nverification: %s\n", all_ok ? "every copy matched its source" : "MISMATCH");
  return all_ok ? 0 : 1;
}
