// SPDX-License-Identifier: Apache-2.0
// vectors_from_s3: the vector-database use case (Milvus, say). A float32 vector set lives in S3 as
// one object; the search runs on the GPU. The program loads the object into GPU memory two ways
// and times each:
//   (a) sluice: cuda::get_object_to_device, RDMA into device memory (direct, with an FI_HMEM
//       provider) or through a pinned stager, as the library decides and reports;
//   (b) naive: an HTTP GET into a pageable std::vector, then cudaMemcpy to the device.
// Then it checks that both copies hold the object's bytes (checksums on the GPU, against the
// generated set when it uploaded it), runs the same brute-force top-k search (squared L2) on both
// and requires identical results, and checks the GPU's answer against the CPU (every distance it
// returned, and a full scan for the first query).
//
//   vectors_from_s3 --endpoint http://127.0.0.1:9000 --access-key AK --secret-key SK
//                   [--bucket vectors] [--fabric auto|shm|tcp|verbs|efa|off] [--grant-socket PATH] [--vectors 1000000]
//                   [--dim 128] [--queries 16] [--k 10] [--device 0] [--repeat 1] [--upload]
//   vectors_from_s3 --check-device
//
// --upload first generates the set (deterministic, seeded) and PUTs it as vectors-N-D.f32;
// without it the object must be there already. --repeat N loads each way N times and reports the
// fastest (the bytes checked are those of the last load). --check-device only says whether a CUDA
// device is usable. Exit status: 0 when everything matched, 1 on a mismatch or a failed step, 2 on
// bad arguments, 77 when there is no CUDA device. examples/vectors_from_s3/run.sh starts a server
// and runs it.
#include "topk.hpp"

#include <sluice/config.hpp>
#include <sluice/cuda/device.hpp>
#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/error.hpp>
#include <sluice/cuda/grant.hpp>
#include <sluice/cuda/s3.hpp>
#include <sluice/fabric/s3_plane.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/local_plane.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace cuda = sluice::cuda;
namespace fabric = sluice::fabric;
namespace s3 = sluice::s3;
using sluice::error_code;
using vectors_from_s3::neighbours;

constexpr std::uint64_t dataset_seed = 0x5EED'0000'F1EC'7025ULL;
constexpr std::uint64_t query_seed = 0x0000'0E4E'5EED'0001ULL;
constexpr float query_perturbation = 0.05F;  // each query coordinate moves by at most this much
constexpr int exit_no_device = 77;           // automake's and CTest's "skipped"

// -- options ---------------------------------------------------------------------------------

struct options {
  std::string endpoint;
  std::string access_key;
  std::string secret_key;
  std::string bucket = "vectors";
  std::string fabric = "auto";
  std::string grant_socket;  // the server's same-host grant socket: GPU memory granted by CUDA IPC
  std::uint64_t vectors = 1'000'000;
  std::uint64_t dim = 128;
  std::uint64_t queries = 16;
  std::uint64_t k = 10;
  int device = 0;
  unsigned repeat = 1;
  bool upload = false;
  bool check_device_only = false;

  [[nodiscard]] std::uint64_t object_bytes() const { return vectors * dim * sizeof(float); }
  [[nodiscard]] std::string object_key() const {
    return "vectors-" + std::to_string(vectors) + "-" + std::to_string(dim) + ".f32";
  }
};

void print_usage(std::FILE* to) {
  std::fprintf(to,
               "usage: vectors_from_s3 --endpoint http://HOST:PORT --access-key AK --secret-key SK\n"
               "                       [--bucket vectors] [--fabric auto|shm|tcp|verbs|efa|off] [--grant-socket PATH]\n"
               "                       [--vectors 1000000] [--dim 128] [--queries 16] [--k 10] [--device 0]\n"
               "                       [--repeat 1] [--upload]\n"
               "       vectors_from_s3 --check-device\n"
               "Loads the float32 vector set s3://BUCKET/vectors-N-D.f32 into GPU memory by sluice (RDMA or\n"
               "staged) and naively (HTTP into pageable memory, then cudaMemcpy), times both, and runs the same\n"
               "brute-force top-k search on both copies. --upload generates and PUTs the set first; --repeat N\n"
               "loads each way N times and reports the fastest.\n"
               "Exit: 0 ok, 1 mismatch or failure, 2 bad arguments, 77 no CUDA device.\n");
}

enum class parsed { run, help, bad };

parsed parse(int argc, char** argv, options& opt) {
  auto number = [](const std::string& text) {
    std::size_t used = 0;
    const unsigned long long value = std::stoull(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    return static_cast<std::uint64_t>(value);
  };
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg == "--help" || arg == "-h") return parsed::help;
      if (arg == "--upload") {
        opt.upload = true;
        continue;
      }
      if (arg == "--check-device") {
        opt.check_device_only = true;
        continue;
      }
      if (i + 1 >= argc) {
        std::fprintf(stderr, "vectors_from_s3: %s needs a value\n", argv[i]);
        return parsed::bad;
      }
      const std::string value = argv[++i];
      if (arg == "--endpoint") {
        opt.endpoint = value;
      } else if (arg == "--access-key") {
        opt.access_key = value;
      } else if (arg == "--secret-key") {
        opt.secret_key = value;
      } else if (arg == "--bucket") {
        opt.bucket = value;
      } else if (arg == "--fabric") {
        opt.fabric = value;
      } else if (arg == "--grant-socket") {
        opt.grant_socket = value;
      } else if (arg == "--vectors") {
        opt.vectors = number(value);
      } else if (arg == "--dim") {
        opt.dim = number(value);
      } else if (arg == "--queries") {
        opt.queries = number(value);
      } else if (arg == "--k") {
        opt.k = number(value);
      } else if (arg == "--repeat") {
        opt.repeat = static_cast<unsigned>(std::min<std::uint64_t>(number(value), 1000));
      } else if (arg == "--device") {
        opt.device = static_cast<int>(number(value));
      } else {
        std::fprintf(stderr, "vectors_from_s3: unknown option %s\n", argv[i - 1]);
        return parsed::bad;
      }
    }
  } catch (const std::exception&) {  // stoull: not a number, or out of range
    std::fprintf(stderr, "vectors_from_s3: a number option has a value that is not a number\n");
    return parsed::bad;
  }
  if (opt.check_device_only) return parsed::run;
  const char* problem = nullptr;
  if (opt.endpoint.empty() || opt.access_key.empty() || opt.secret_key.empty()) {
    problem = "--endpoint, --access-key and --secret-key are required";
  } else if (opt.vectors == 0 || opt.vectors >= 0xFFFF'FFFFULL) {
    problem = "--vectors must be 1 .. 2^32-2 (ids are 32-bit)";
  } else if (opt.dim == 0 || opt.dim > 1365) {
    problem = "--dim must be 1 .. 1365 (the distance kernel keeps 9 x dim floats in 48 KiB of shared memory)";
  } else if (opt.queries == 0 || opt.queries > opt.vectors) {
    problem = "--queries must be 1 .. --vectors (the queries are perturbed copies of the first vectors)";
  } else if (opt.repeat == 0) {
    problem = "--repeat must be at least 1";
  } else if (opt.k == 0 || opt.k > vectors_from_s3::max_k || opt.k > opt.vectors) {
    problem = "--k must be 1 .. min(64, --vectors)";
  }
  if (problem != nullptr) {
    std::fprintf(stderr, "vectors_from_s3: %s\n", problem);
    return parsed::bad;
  }
  return parsed::run;
}

// -- small helpers -----------------------------------------------------------------------------

// --fabric: a short name or a libfabric provider name (as `sluice serve --fabric` takes it).
std::string provider_name(std::string_view choice) {
  if (choice == "tcp") return "tcp;ofi_rxm";
  if (choice == "verbs") return "verbs;ofi_rxm";
  return std::string(choice);
}

// Whether http://host[:port] names this host: then shm is a candidate provider and the client's
// fabric endpoint binds to loopback, where the server's is.
bool endpoint_is_loopback(std::string_view url) {
  if (url.starts_with("http://")) url.remove_prefix(7);
  url = url.substr(0, url.find('/'));
  const std::string_view host = url.starts_with('[') ? url.substr(0, url.find(']') + 1) : url.substr(0, url.rfind(':'));
  return host == "localhost" || host.starts_with("127.") || host == "[::1]";
}

double gib_of(std::uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(sluice::gib); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int fail(const char* step, const error_code& ec) {
  std::fprintf(stderr, "vectors_from_s3: %s: %s\n", step, ec.message().c_str());
  if (ec == sluice::condition::not_found) {
    std::fprintf(stderr, "  (run with --upload to generate and PUT the vector set first)\n");
  } else if (ec == s3::errc::rdma_not_supported) {
    std::fprintf(stderr, "  (the server declined RDMA: start it with `sluice serve --fabric auto`)\n");
  }
  return 1;
}

int fail(const char* step, int cuda_error) { return fail(step, cuda::make_cuda_error(cuda_error)); }

// The splitmix64 finalizer, as a counter-based generator: value i of a stream is mix(seed + i·φ).
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31U);
}

// A float in [0, 1) from the top 24 bits of a 64-bit value (exact: 24 bits fit a float).
float unit_float(std::uint64_t bits) { return static_cast<float>(bits >> 40U) * 0x1p-24F; }

// -- the steps ---------------------------------------------------------------------------------

// Device `ordinal`, or nullopt after printing why there is none.
std::optional<cuda::device_properties> check_device(int ordinal) {
  error_code ec;
  const int count = cuda::device_count(ec);
  if (ec || count <= ordinal) {
    const std::string reason = ec ? cuda::no_device_reason() : "device " + std::to_string(ordinal) + " does not exist";
    std::printf("vectors_from_s3: needs a CUDA device (%s)\n", reason.empty() ? ec.message().c_str() : reason.c_str());
    return std::nullopt;
  }
  auto props = cuda::properties(ordinal, ec);
  if (ec) {
    std::printf("vectors_from_s3: needs a CUDA device (device %d: %s)\n", ordinal, ec.message().c_str());
    return std::nullopt;
  }
  return props;
}

// An S3 client whose RDMA plane (client_config::rdma) is opened on the --fabric provider; with
// --fabric off, a client without one (HTTP bodies only: the sluice path is then staged).
struct connection {
  std::shared_ptr<fabric::client_plane> plane;
  std::shared_ptr<s3::local_client_plane> grants;  // --grant-socket: tried before the fabric plane
  std::unique_ptr<s3::client> client;
};

std::optional<connection> connect(const options& opt) {
  connection c;
  if (opt.fabric != "off") {
    const bool local = endpoint_is_loopback(opt.endpoint);
    fabric::client_plane_config plane_config;
    plane_config.fabric.provider = provider_name(opt.fabric);
    if (local) plane_config.fabric.node = "127.0.0.1";
    plane_config.fabric.hmem = true;  // direct into GPU memory where the provider can
    plane_config.endpoints = 4;       // the staged parts land through 4 progress threads at once
    error_code ec;
    c.plane = fabric::client_plane::open(plane_config, local, ec);
    if (ec) {
      std::fprintf(stderr, "vectors_from_s3: --fabric %s: no libfabric endpoint: %s\n", opt.fabric.c_str(),
                   ec.message().c_str());
      return std::nullopt;
    }
  }
  s3::client_config config;
  config.endpoint = opt.endpoint;
  config.creds = {opt.access_key, opt.secret_key};
  config.part_size = 8 * sluice::mib;
  config.parts_in_flight = 4;
  config.rdma = c.plane;
  if (!opt.grant_socket.empty()) {
    // Same host: the server copies the segment straight into this process's GPU memory (CUDA
    // IPC grant) by DMA from its page cache; larger parts, since a grant stages nothing.
    error_code ec;
    c.grants = s3::local_client_plane::open(
        {opt.grant_socket, {opt.access_key, opt.secret_key}, cuda::make_grant_exporter()}, ec);
    if (ec) {
      std::fprintf(stderr, "vectors_from_s3: --grant-socket %s: %s\n", opt.grant_socket.c_str(), ec.message().c_str());
      return std::nullopt;
    }
    std::vector<std::shared_ptr<s3::rdma_client_plane>> planes{c.grants};
    if (c.plane) planes.push_back(c.plane);
    config.rdma = std::make_shared<s3::rdma_client_planes>(std::move(planes));
    config.part_size = 256 * sluice::mib;
    config.multipart_threshold = 256 * sluice::mib;
  }
  if (auto problem = config.validate()) {
    std::fprintf(stderr, "vectors_from_s3: %s\n", problem->message().c_str());
    return std::nullopt;
  }
  c.client = std::make_unique<s3::client>(config);
  return c;
}

// The deterministic vector set: coordinates uniform in [0, 1), value i of the seeded stream.
std::vector<float> generate_vectors(const options& opt) {
  std::vector<float> v(opt.vectors * opt.dim);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = unit_float(mix(dataset_seed + i * 0x9E3779B97F4A7C15ULL));
  return v;
}

// Generates the set, PUTs it (host memory, RDMA when the server accepts) and returns the
// checksum of what was sent, or nullopt after printing the error.
std::optional<std::uint64_t> upload(s3::client& client, const options& opt) {
  const std::string key = opt.object_key();
  std::printf("[upload] generate %llu x %llu float32 (%.2f GiB, seed %016llx) ...\n",
              static_cast<unsigned long long>(opt.vectors), static_cast<unsigned long long>(opt.dim),
              gib_of(opt.object_bytes()), static_cast<unsigned long long>(dataset_seed));
  std::fflush(stdout);
  std::vector<float> vectors = generate_vectors(opt);
  const std::uint64_t checksum = vectors_from_s3::checksum_host(vectors.data(), opt.object_bytes());

  error_code ec;
  client.create_bucket(opt.bucket, ec);
  if (ec == s3::errc::bucket_already_owned_by_you) ec = {};
  if (ec) {
    fail("create bucket", ec);
    return std::nullopt;
  }
  std::printf("[upload] PUT s3://%s/%s ...\n", opt.bucket.c_str(), key.c_str());
  std::fflush(stdout);
  s3::transfer_report report;
  s3::put_options put;
  put.report = &report;
  const auto start = std::chrono::steady_clock::now();
  client.put_object(opt.bucket, key, sluice::host_region(vectors), std::move(put), ec);
  const double seconds = seconds_since(start);
  if (ec) {
    fail("PUT", ec);
    return std::nullopt;
  }
  std::printf("         %.3f s, %.2f GiB/s (rdma %llu B, http %llu B)\n", seconds, gib_of(opt.object_bytes()) / seconds,
              static_cast<unsigned long long>(report.rdma_bytes), static_cast<unsigned long long>(report.http_bytes));
  return checksum;
}

// The object must be there with the size the options say (HEAD).
bool check_object(s3::client& client, const options& opt) {
  error_code ec;
  const auto info = client.head_object(opt.bucket, opt.object_key(), ec);
  if (ec) {
    fail("HEAD", ec);
    return false;
  }
  if (info.size != opt.object_bytes()) {
    std::fprintf(stderr, "vectors_from_s3: s3://%s/%s holds %llu bytes, not %llu (= %llu x %llu x 4)\n",
                 opt.bucket.c_str(), opt.object_key().c_str(), static_cast<unsigned long long>(info.size),
                 static_cast<unsigned long long>(opt.object_bytes()), static_cast<unsigned long long>(opt.vectors),
                 static_cast<unsigned long long>(opt.dim));
    return false;
  }
  return true;
}

// Untimed: one 4 KiB ranged GET each way, so that the timed loads do not measure the first
// connection (TCP, and the fabric's address exchange); with same-host grants, `device` (the
// sluice copy) is granted to the server once (its CUDA IPC handle opened there), as a fabric
// registers memory once. No GET of the segment goes into it: the server registers none of the
// segment's page cache before the timed load.
bool warm_up(s3::client& client, const std::shared_ptr<fabric::client_plane>& plane, const options& opt,
             const std::shared_ptr<s3::local_client_plane>& grants, const sluice::region& device) {
  std::vector<std::byte> probe(std::min<std::uint64_t>(opt.object_bytes(), 4 * sluice::kib));
  if (grants) {
    error_code ec;
    const auto granted = grants->grant_access(device, s3::rdma_op::write,
                                              std::chrono::system_clock::now() + std::chrono::minutes(1), ec);
    if (ec) {  // not fatal: the load then takes another path, and says which
      std::printf("    granting the device buffer to the server: %s\n", ec.message().c_str());
    }
  }
  for (const auto via : {s3::transfer_via::automatic, s3::transfer_via::http}) {
    s3::get_options get(sluice::byte_range{0, probe.size()});
    get.via = via;
    error_code ec;
    client.get_object(opt.bucket, opt.object_key(), sluice::host_region(probe), std::move(get), ec);
    if (plane) plane->invalidate(sluice::host_region(probe));
    if (ec) {
      fail("warm-up GET", ec);
      return false;
    }
  }
  return true;
}

// How one load of the object into device memory went.
struct load_timing {
  double seconds = 0;                   // object → device memory, end to end
  double http_seconds = 0;              // naive: the GET into pageable memory
  double copy_seconds = 0;              // naive: the cudaMemcpy
  cuda::device_transfer_report report;  // sluice: the path taken
};

// One copy of the object in device memory, and its fastest load.
struct device_copy {
  cuda::device_buffer memory;
  std::vector<float> host;  // naive: the pageable copy (kept for the CPU check)
  load_timing best;
};

// Device memory for the object; with `pageable`, the host vector of the naive path too, allocated
// and its pages touched here, off the clock, which favours that path.
std::optional<device_copy> allocate_copy(const options& opt, bool pageable) {
  error_code ec;
  device_copy copy{.memory = cuda::device_buffer::allocate(opt.object_bytes(), opt.device, ec)};
  if (ec) {
    fail("device memory", ec);
    return std::nullopt;
  }
  if (pageable) copy.host.assign(opt.vectors * opt.dim, 0.0F);
  return copy;
}

// (a) sluice::cuda::get_object_to_device: RDMA into device memory, or through the stager.
std::optional<load_timing> load_with_sluice(s3::client& client, const std::shared_ptr<fabric::client_plane>& plane,
                                            const options& opt, const device_copy& copy) {
  cuda::device_transfer_options transfer;
  transfer.staging.device = opt.device;
  load_timing t;
  error_code ec;
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t bytes =
      cuda::get_object_to_device(client, opt.bucket, opt.object_key(), copy.memory.region(), transfer, &t.report, ec);
  t.seconds = seconds_since(start);
  if (plane) plane->invalidate(copy.memory.region());
  if (ec) {
    fail("get_object_to_device", ec);
    return std::nullopt;
  }
  if (bytes != opt.object_bytes()) {
    std::fprintf(stderr, "vectors_from_s3: get_object_to_device returned %llu bytes, expected %llu\n",
                 static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(opt.object_bytes()));
    return std::nullopt;
  }
  return t;
}

// (b) naive: GET over HTTP into the pageable std::vector, then cudaMemcpy to the device.
std::optional<load_timing> load_naively(s3::client& client, const options& opt, device_copy& copy) {
  s3::get_options get;
  get.via = s3::transfer_via::http;
  load_timing t;
  error_code ec;
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t bytes =
      client.get_object(opt.bucket, opt.object_key(), sluice::host_region(copy.host), std::move(get), ec);
  t.http_seconds = seconds_since(start);
  if (ec) {
    fail("GET over HTTP", ec);
    return std::nullopt;
  }
  if (bytes != opt.object_bytes()) {
    std::fprintf(stderr, "vectors_from_s3: GET returned %llu bytes, expected %llu\n",
                 static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(opt.object_bytes()));
    return std::nullopt;
  }
  const auto copy_start = std::chrono::steady_clock::now();
  ec = cuda::copy(copy.memory.region(), sluice::host_region(copy.host));
  t.copy_seconds = seconds_since(copy_start);
  t.seconds = seconds_since(start);
  if (ec) {
    fail("cudaMemcpy to the device", ec);
    return std::nullopt;
  }
  return t;
}

void print_load(const char* what, const load_timing& t, std::uint64_t bytes, bool naive) {
  std::printf("    %-6s %.3f s, %6.2f GiB/s", what, t.seconds, gib_of(bytes) / t.seconds);
  if (naive) {
    std::printf(" (GET %.3f s, cudaMemcpy from pageable %.3f s)\n", t.http_seconds, t.copy_seconds);
  } else {
    std::printf(", path %s, rdma %llu B, http %llu B, pinned staging %llu B\n", cuda::to_string(t.report.path),
                static_cast<unsigned long long>(t.report.rdma_bytes),
                static_cast<unsigned long long>(t.report.http_bytes),
                static_cast<unsigned long long>(t.report.pinned_bytes));
  }
}

// Runs `load` --repeat times into `copy` and keeps the fastest. Before each, off the clock, the
// memory is filled with a pattern (the pageable copy too, if any), so that bytes the load did not
// write show in the check.
template <class Load>
bool repeat_load(const char* what, device_copy& copy, const options& opt, Load&& load) {
  for (unsigned round = 0; round < opt.repeat; ++round) {
    if (const error_code ec = cuda::fill(copy.memory.region(), std::byte{0xA5})) {
      fail("device memory", ec);
      return false;
    }
    std::fill(copy.host.begin(), copy.host.end(), -1.0F);
    const std::optional<load_timing> t = load();
    if (!t) return false;
    print_load(what, *t, opt.object_bytes(), !copy.host.empty());
    if (round == 0 || t->seconds < copy.best.seconds) copy.best = *t;
  }
  return true;
}

// Both device copies hold the same bytes as the pageable copy (and as the generated set, when
// this run generated it): checksums computed on the GPU and the CPU.
bool verify_bytes(const device_copy& by_sluice, const device_copy& naive, std::optional<std::uint64_t> generated,
                  const options& opt) {
  std::uint64_t sluice_sum = 0;
  std::uint64_t naive_sum = 0;
  if (const int e =
          vectors_from_s3::checksum_device(by_sluice.memory.native_handle(), opt.object_bytes(), sluice_sum)) {
    fail("checksum (sluice copy)", e);
    return false;
  }
  if (const int e = vectors_from_s3::checksum_device(naive.memory.native_handle(), opt.object_bytes(), naive_sum)) {
    fail("checksum (naive copy)", e);
    return false;
  }
  const std::uint64_t host_sum = vectors_from_s3::checksum_host(naive.host.data(), opt.object_bytes());
  const std::uint64_t expected = generated.value_or(host_sum);
  const bool ok = sluice_sum == expected && naive_sum == expected && host_sum == expected;
  std::printf("    checksum: sluice copy %016llx, naive copy %016llx, pageable %016llx, %s %016llx: %s\n",
              static_cast<unsigned long long>(sluice_sum), static_cast<unsigned long long>(naive_sum),
              static_cast<unsigned long long>(host_sum), generated ? "generated" : "expected",
              static_cast<unsigned long long>(expected), ok ? "OK" : "MISMATCH");
  return ok;
}

// Query j: dataset vector j, each coordinate moved by up to ±query_perturbation (seeded).
std::vector<float> make_queries(std::span<const float> dataset, const options& opt) {
  std::vector<float> queries(opt.queries * opt.dim);
  for (std::size_t i = 0; i < queries.size(); ++i) {
    const float u = unit_float(mix(query_seed + i * 0x9E3779B97F4A7C15ULL));
    queries[i] = dataset[i] + query_perturbation * (2.0F * u - 1.0F);
  }
  return queries;
}

std::optional<neighbours> search(const device_copy& copy, const std::vector<float>& queries, const options& opt,
                                 const char* what) {
  neighbours result;
  const int e = vectors_from_s3::search(static_cast<const float*>(copy.memory.native_handle()), opt.vectors, opt.dim,
                                        queries.data(), opt.queries, opt.k, result);
  if (e != 0) {
    fail(what, e);
    return std::nullopt;
  }
  return result;
}

// Bit for bit: the same ids and the same distances.
bool same_results(const neighbours& a, const neighbours& b) {
  return a.ids == b.ids && a.distances.size() == b.distances.size() &&
         std::memcmp(a.distances.data(), b.distances.data(), a.distances.size() * sizeof(float)) == 0;
}

double distance(std::span<const float> x, std::span<const float> q) {
  double sum = 0;
  for (std::size_t d = 0; d < x.size(); ++d) {
    const double diff = static_cast<double>(x[d]) - static_cast<double>(q[d]);
    sum += diff * diff;
  }
  return sum;
}

bool close_enough(double gpu, double cpu) { return std::abs(gpu - cpu) <= 1e-4 * std::max(1.0, std::abs(cpu)); }

// Against the CPU (in double): every distance the GPU returned is the distance of its id, and
// for query 0 (a full scan) the k smallest distances are the GPU's. Tolerant to float rounding
// and so to the order of near ties.
bool check_on_cpu(const neighbours& result, std::span<const float> dataset, const std::vector<float>& queries,
                  const options& opt) {
  const std::size_t dim = opt.dim;
  auto row = [&](std::span<const float> all, std::size_t i) { return all.subspan(i * dim, dim); };
  std::size_t wrong = 0;
  std::size_t self_first = 0;  // queries whose nearest is the vector they were made from
  for (std::size_t j = 0; j < opt.queries; ++j) {
    for (std::size_t r = 0; r < opt.k; ++r) {
      const std::uint32_t id = result.ids[j * opt.k + r];
      if (id >= opt.vectors ||
          !close_enough(result.distances[j * opt.k + r], distance(row(dataset, id), row(queries, j)))) {
        ++wrong;
      }
      if (r > 0 && result.distances[j * opt.k + r] < result.distances[j * opt.k + r - 1]) ++wrong;
    }
    if (result.ids[j * opt.k] == j) ++self_first;
  }
  std::vector<double> all(opt.vectors);
  for (std::size_t i = 0; i < opt.vectors; ++i) all[i] = distance(row(dataset, i), row(queries, 0));
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(opt.k), all.end());
  std::size_t scan_wrong = 0;
  for (std::size_t r = 0; r < opt.k; ++r) {
    if (!close_enough(result.distances[r], all[r])) ++scan_wrong;
  }
  std::printf(
      "    cpu check: %zu of %llu (id, distance) pairs wrong or out of order; query 0 full scan: %zu of %llu "
      "distances differ; nearest is the query's own source vector for %zu of %llu queries\n",
      wrong, static_cast<unsigned long long>(opt.queries) * opt.k, scan_wrong, static_cast<unsigned long long>(opt.k),
      self_first, static_cast<unsigned long long>(opt.queries));
  return wrong == 0 && scan_wrong == 0;
}

void print_neighbours(const neighbours& result, std::size_t shown_queries) {
  for (std::size_t j = 0; j < std::min(shown_queries, result.queries); ++j) {
    std::printf("    query %zu:", j);
    for (std::size_t r = 0; r < std::min<std::size_t>(result.k, 5); ++r) {
      std::printf(" %u (%.3f)", result.ids[j * result.k + r], static_cast<double>(result.distances[j * result.k + r]));
    }
    std::printf("%s\n", result.k > 5 ? " ..." : "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  switch (parse(argc, argv, opt)) {
    case parsed::help: print_usage(stdout); return 0;
    case parsed::bad: print_usage(stderr); return 2;
    case parsed::run: break;
  }
  const auto device = check_device(opt.device);
  if (!device) return exit_no_device;
  if (opt.check_device_only) {
    std::printf("vectors_from_s3: CUDA device %d: %s\n", opt.device, device->name.c_str());
    return 0;
  }
  if (const int e = vectors_from_s3::set_device(opt.device)) return fail("cudaSetDevice", e);

  const std::uint64_t bytes = opt.object_bytes();
  std::printf("vectors_from_s3: s3://%s/%s (%llu x %llu float32, %.2f GiB) at %s; GPU %d: %s\n", opt.bucket.c_str(),
              opt.object_key().c_str(), static_cast<unsigned long long>(opt.vectors),
              static_cast<unsigned long long>(opt.dim), gib_of(bytes), opt.endpoint.c_str(), opt.device,
              device->name.c_str());
  auto conn = connect(opt);
  if (!conn) return 1;
  s3::client& client = *conn->client;
  std::printf("    fabric: %s; same-host grants: %s\n",
              conn->plane ? std::string(conn->plane->provider()).c_str() : "off (HTTP bodies only)",
              conn->grants ? opt.grant_socket.c_str() : "off");

  std::optional<std::uint64_t> generated;
  if (opt.upload) {
    generated = upload(client, opt);
    if (!generated) return 1;
  }
  auto by_sluice = allocate_copy(opt, false);
  if (!by_sluice || !check_object(client, opt) ||
      !warm_up(client, conn->plane, opt, conn->grants, by_sluice->memory.region())) {
    return 1;
  }

  std::printf("[1] load into GPU memory with sluice (cuda::get_object_to_device) ...\n");
  std::fflush(stdout);
  if (!repeat_load("sluice", *by_sluice, opt, [&] { return load_with_sluice(client, conn->plane, opt, *by_sluice); })) {
    return 1;
  }
  std::printf("[2] load into GPU memory naively (HTTP GET into a std::vector, then cudaMemcpy) ...\n");
  std::fflush(stdout);
  auto naive = allocate_copy(opt, true);
  if (!naive || !repeat_load("naive", *naive, opt, [&] { return load_naively(client, opt, *naive); })) return 1;

  std::printf("[3] verify the bytes of both copies\n");
  const bool bytes_ok = verify_bytes(*by_sluice, *naive, generated, opt);

  std::printf("[4] top-%llu search of %llu queries (squared L2, brute force) on each copy\n",
              static_cast<unsigned long long>(opt.k), static_cast<unsigned long long>(opt.queries));
  const std::vector<float> queries = make_queries(naive->host, opt);
  const auto on_sluice = search(*by_sluice, queries, opt, "search (sluice copy)");
  const auto on_naive = search(*naive, queries, opt, "search (naive copy)");
  if (!on_sluice || !on_naive) return 1;
  std::printf("    kernel time: %.3f ms on the sluice copy (the first launch), %.3f ms on the naive copy\n",
              static_cast<double>(on_sluice->kernel_ms), static_cast<double>(on_naive->kernel_ms));
  print_neighbours(*on_sluice, 3);
  const bool results_same = same_results(*on_sluice, *on_naive);
  std::printf("    results on the two copies: %s\n", results_same ? "identical (ids and distances)" : "DIFFERENT");
  const bool cpu_ok = check_on_cpu(*on_sluice, naive->host, queries, opt);

  const bool ok = bytes_ok && results_same && cpu_ok;
  const std::string sluice_label = std::string("sluice (") + cuda::to_string(by_sluice->best.report.path) + ")";
  std::printf("\nresult: %.2f GiB into GPU memory%s\n", gib_of(bytes),
              opt.repeat > 1 ? (", best of " + std::to_string(opt.repeat)).c_str() : "");
  std::printf("  %-22s %8.3f s %8.2f GiB/s\n", sluice_label.c_str(), by_sluice->best.seconds,
              gib_of(bytes) / by_sluice->best.seconds);
  std::printf("  %-22s %8.3f s %8.2f GiB/s\n", "naive (http + memcpy)", naive->best.seconds,
              gib_of(bytes) / naive->best.seconds);
  std::printf("  sluice / naive speed: %.2fx; search %.3f ms; %s\n", naive->best.seconds / by_sluice->best.seconds,
              static_cast<double>(on_naive->kernel_ms), ok ? "all checks passed" : "CHECKS FAILED");
  return ok ? 0 : 1;
}
