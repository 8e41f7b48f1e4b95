// SPDX-License-Identifier: Apache-2.0
// What registering a file's page cache with CUDA costs, and which way of doing it copies a
// resident file into device memory fastest: the question behind the first grant GET of an object
// (the server registers the object's mapping in chunks as it copies). Each case maps the file
// afresh (as the store does per request), registers it read-only in chunks, and unregisters it.
//   sluice_gpu_regprobe [--file /tmp/regprobe.bin] [--size 4GiB] [--repeat 3] [--existing yes]
// Writes the file twice, as the store does (2 MiB pwrites) and in 64 KiB pwrites, and prints one
// table row per case: median seconds and GiB/s of register alone, and of register + copy.
// --existing yes: probes the file as it is (an object file of a store, say), read first so that
// it is resident, and leaves it in place.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

constexpr std::uint64_t mib = std::uint64_t{1} << 20;
constexpr std::uint64_t gib = std::uint64_t{1} << 30;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

bool write_file(const std::string& path, std::uint64_t size, std::uint64_t unit) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::vector<std::uint64_t> buffer(unit / 8);
  std::mt19937_64 gen(unit);
  for (std::uint64_t at = 0; at < size; at += unit) {
    for (auto& w : buffer) w = gen();
    if (::pwrite(fd, buffer.data(), unit, static_cast<off_t>(at)) != static_cast<ssize_t>(unit)) {
      ::close(fd);
      return false;
    }
  }
  ::close(fd);
  return true;
}

struct timing {
  double map = 0, reg = 0, copy_end = 0, unreg = 0, calls = 0;  // calls: inside cudaMemcpyAsync
};

/// One case: map the file, register chunks of `chunk` bytes with `threads` threads (chunks taken
/// in order), and, with `copy`, queue each chunk's H2D copy as soon as it is registered (in order,
/// on 4 streams), then unregister everything. With `bounce` (4 device buffers of `chunk` bytes),
/// each chunk goes to a bounce buffer first and from there to `device` (device to device).
bool run_case(int fd, std::uint64_t size, std::uint64_t chunk, unsigned threads, bool copy, int map_flags, void* device,
              CUcontext other, timing& t, std::byte* bounce = nullptr) {
  const double t0 = now();
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | map_flags, fd, 0);
  if (p == MAP_FAILED) return false;
  auto* base = static_cast<std::byte*>(p);
  const double t1 = now();
  const std::uint64_t chunks = (size + chunk - 1) / chunk;
  std::vector<std::atomic<int>> state(chunks);  // 0 absent, 1 registered, 2 failed
  std::atomic<std::uint64_t> next{0};
  // With `other`: registered (portable) by threads whose current context is a second context of
  // the device, while the copies run in the primary one.
  const auto registrar = [&] {
    if (other != nullptr) (void)cuCtxSetCurrent(other);
    for (std::uint64_t i = next++; i < chunks; i = next++) {
      const std::uint64_t n = std::min(chunk, size - i * chunk);
      bool ok = false;
      if (other != nullptr) {
        ok = cuMemHostRegister(base + i * chunk, n, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY) ==
             CUDA_SUCCESS;
      } else {
        ok = cudaHostRegister(base + i * chunk, n, cudaHostRegisterReadOnly | cudaHostRegisterPortable) == cudaSuccess;
      }
      state[i].store(ok ? 1 : 2);
      state[i].notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i) pool.emplace_back(registrar);
  bool ok = true;
  double reg_end = 0;
  if (copy) {
    cudaStream_t streams[4];
    for (auto& s : streams) (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (std::uint64_t i = 0; i < chunks && ok; ++i) {
      state[i].wait(0);
      if (state[i].load() != 1) {
        ok = false;
        break;
      }
      const std::uint64_t n = std::min(chunk, size - i * chunk);
      const double c0 = now();
      std::byte* to = static_cast<std::byte*>(device) + i * chunk;
      if (bounce == nullptr) {
        ok = check(cudaMemcpyAsync(to, base + i * chunk, n, cudaMemcpyHostToDevice, streams[i % 4]), "cudaMemcpyAsync");
      } else {
        std::byte* slot = bounce + (i % 4) * chunk;  // the stream's own slot: reuse is ordered
        ok = check(cudaMemcpyAsync(slot, base + i * chunk, n, cudaMemcpyHostToDevice, streams[i % 4]),
                   "cudaMemcpyAsync") &&
             check(cudaMemcpyAsync(to, slot, n, cudaMemcpyDeviceToDevice, streams[i % 4]), "cudaMemcpyAsync D2D");
      }
      t.calls += now() - c0;
    }
    for (auto& th : pool) th.join();
    reg_end = now();
    for (auto& s : streams) ok = check(cudaStreamSynchronize(s), "sync") && ok;
    for (auto& s : streams) (void)cudaStreamDestroy(s);
  } else {
    for (auto& th : pool) th.join();
    reg_end = now();
  }
  const double t2 = now();
  std::thread unregister([&] {
    if (other != nullptr) (void)cuCtxSetCurrent(other);
    for (std::uint64_t i = 0; i < chunks; ++i) {
      if (state[i].load() != 1) {
        ok = false;
      } else if (other != nullptr) {
        (void)cuMemHostUnregister(base + i * chunk);
      } else {
        (void)cudaHostUnregister(base + i * chunk);
      }
    }
  });
  unregister.join();
  const double t3 = now();
  ::munmap(p, size);
  t.map = t1 - t0;
  t.reg = reg_end - t1;
  t.copy_end = t2 - t1;
  t.unreg = t3 - t2;
  return ok;
}

/// `--ipc-child BYTES`: allocates BYTES of device memory, prints its IPC handle in hex and waits
/// to be killed (the other process's allocation that a grant server copies into).
int ipc_child(std::uint64_t bytes) {
  void* p = nullptr;
  cudaIpcMemHandle_t handle{};
  if (!check(cudaMalloc(&p, bytes), "cudaMalloc") || !check(cudaIpcGetMemHandle(&handle, p), "cudaIpcGetMemHandle")) {
    return 1;
  }
  const auto* b = reinterpret_cast<const unsigned char*>(&handle);
  for (std::size_t i = 0; i < sizeof handle; ++i) std::printf("%02x", b[i]);
  std::printf("\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

/// Starts an ipc_child and opens its allocation here; null when that fails.
void* open_other_process_memory(std::uint64_t bytes, pid_t& pid) {
  int out[2];
  if (::pipe(out) != 0) return nullptr;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::string size = std::to_string(bytes);
  std::string flag = "--ipc-child";
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), flag.data(), size.data(), nullptr};
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) return nullptr;
  std::string hex;
  char c = 0;
  while (::read(out[0], &c, 1) == 1 && c != '\n') hex.push_back(c);
  ::close(out[0]);
  cudaIpcMemHandle_t handle{};
  if (hex.size() != 2 * sizeof handle) return nullptr;
  auto* b = reinterpret_cast<unsigned char*>(&handle);
  for (std::size_t i = 0; i < sizeof handle; ++i)
    b[i] = static_cast<unsigned char>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  void* p = nullptr;
  if (!check(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle")) return nullptr;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--ipc-child") return ipc_child(std::stoull(argv[2]));
  std::string file = "/tmp/regprobe.bin";
  std::uint64_t size = 4 * gib;
  unsigned repeat = 3;
  bool existing = false;
  bool ipc = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--file")
      file = argv[i + 1];
    else if (flag == "--size")
      size = std::stoull(argv[i + 1]) * mib;  // MiB
    else if (flag == "--repeat")
      repeat = static_cast<unsigned>(std::stoul(argv[i + 1]));
    else if (flag == "--existing")
      existing = std::string(argv[i + 1]) == "yes";
    else if (flag == "--ipc")
      ipc = std::string(argv[i + 1]) == "yes";
    else {
      std::fprintf(stderr,
                   "usage: sluice_gpu_regprobe [--file PATH] [--size MiB] [--repeat 3] [--existing yes] [--ipc yes]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: needs a CUDA device\n");
    return 77;
  }
  if (existing) {
    // The whole file, read once so that it is resident (as a store's object is after its PUT).
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::perror(file.c_str());
      return 1;
    }
    size = static_cast<std::uint64_t>(::lseek(fd, 0, SEEK_END));
    std::vector<char> buffer(16 * mib);
    for (off_t at = 0; ::pread(fd, buffer.data(), buffer.size(), at) > 0; at += static_cast<off_t>(buffer.size())) {
    }
    ::close(fd);
  }
  utsname u{};
  ::uname(&u);
  std::string thp;
  std::getline(std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"), thp);
  std::printf("kernel %s; THP %s; %u cores; %.2f GiB file\n", u.release, thp.c_str(),
              std::thread::hardware_concurrency(), static_cast<double>(size) / gib);
  void* device = nullptr;
  if (!check(cudaMalloc(&device, size), "cudaMalloc")) return 1;
  (void)cudaFree(nullptr);
  {  // the ceiling of the same run: pinned H2D, 1 GiB from one pinned buffer, 4 times
    void* pinned = nullptr;
    if (!check(cudaMallocHost(&pinned, gib), "cudaMallocHost")) return 1;
    std::memset(pinned, 1, gib);
    (void)cudaMemcpy(device, pinned, gib, cudaMemcpyHostToDevice);
    const double t0 = now();
    for (int i = 0; i < 4; ++i)
      (void)cudaMemcpy(static_cast<std::byte*>(device) + i * gib % size, pinned, gib, cudaMemcpyHostToDevice);
    std::printf("ceiling: pinned H2D %.1f GiB/s\n", 4.0 / (now() - t0));
    (void)cudaFreeHost(pinned);
  }
  std::printf(
      "| file written in | case | map s | register s | register GiB/s | register+copy s | GiB/s | unregister s |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  struct config {
    const char* name;
    std::uint64_t chunk;
    unsigned threads;
    bool copy;
    int flags;
    bool other_context = false;
  };
  // A second context of device 0, for registering while the primary context copies.
  CUcontext other = nullptr;
  {
    CUdevice dev = 0;
    CUcontext primary = nullptr;
    (void)cuCtxGetCurrent(&primary);
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuCtxCreate(&other, nullptr, 0, dev) != CUDA_SUCCESS) {
      std::printf("no second context: those cases are skipped\n");
      other = nullptr;
    }
    (void)cuCtxSetCurrent(primary);
  }
  const config cases[] = {
      {"64 MiB chunks, 1 thread", 64 * mib, 1, false, 0},
      {"64 MiB chunks, 2 threads", 64 * mib, 2, false, 0},
      {"64 MiB chunks, 4 threads", 64 * mib, 4, false, 0},
      {"64 MiB chunks, 8 threads", 64 * mib, 8, false, 0},
      {"16 MiB chunks, 4 threads", 16 * mib, 4, false, 0},
      {"256 MiB chunks, 4 threads", 256 * mib, 4, false, 0},
      {"MAP_POPULATE, 64 MiB chunks, 1 thread", 64 * mib, 1, false, MAP_POPULATE},
      {"MAP_POPULATE, 64 MiB chunks, 4 threads", 64 * mib, 4, false, MAP_POPULATE},
      {"+copy: 64 MiB chunks, 1 thread", 64 * mib, 1, true, 0},
      {"+copy: 64 MiB chunks, 2 threads", 64 * mib, 2, true, 0},
      {"+copy: 64 MiB chunks, 4 threads", 64 * mib, 4, true, 0},
      {"+copy: 32 MiB chunks, 4 threads", 32 * mib, 4, true, 0},
      {"second context registers: 64 MiB chunks, 1 thread", 64 * mib, 1, false, 0, true},
      {"+copy, second context registers: 64 MiB chunks, 1 thread", 64 * mib, 1, true, 0, true},
      {"+copy, second context registers: 64 MiB chunks, 4 threads", 64 * mib, 4, true, 0, true},
      {"+copy, second context registers: 16 MiB chunks, 2 threads", 16 * mib, 2, true, 0, true},
  };
  if (ipc) {
    // Where the copies go: memory of this process, or another process's allocation opened by
    // CUDA IPC (what the grant server copies into), directly or through device bounce buffers.
    if (!existing && !write_file(file, size, 2 * mib)) {
      std::perror("write");
      return 1;
    }
    pid_t child = -1;
    void* other_memory = open_other_process_memory(size, child);
    void* bounce = nullptr;
    if (other_memory == nullptr || !check(cudaMalloc(&bounce, 4 * 64 * mib), "cudaMalloc")) return 1;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    struct ipc_case {
      const char* name;
      void* to;
      bool second_context;
      std::byte* bounce;
    };
    const ipc_case ipc_cases[] = {
        {"this process's memory, second context registers", device, true, nullptr},
        {"other process's memory (IPC), second context registers", other_memory, true, nullptr},
        {"other process's memory (IPC) through bounce buffers, second context registers", other_memory, true,
         static_cast<std::byte*>(bounce)},
        {"this process's memory, primary context registers", device, false, nullptr},
        {"other process's memory (IPC), primary context registers", other_memory, false, nullptr},
    };
    std::printf(
        "| destination, 64 MiB chunks, 1 registering thread | register s | register+copy s | GiB/s | in "
        "cudaMemcpyAsync s |\n|---|---:|---:|---:|---:|\n");
    for (const ipc_case& c : ipc_cases) {
      std::vector<timing> runs;
      for (unsigned r = 0; r < repeat; ++r) {
        timing t;
        if (c.second_context && other == nullptr) break;
        if (!run_case(fd, size, 64 * mib, 1, true, 0, c.to, c.second_context ? other : nullptr, t, c.bounce)) break;
        runs.push_back(t);
      }
      if (runs.size() != repeat) {
        std::printf("| %s | failed |\n", c.name);
        continue;
      }
      std::sort(runs.begin(), runs.end(), [](const timing& a, const timing& b) { return a.copy_end < b.copy_end; });
      const timing& m = runs[runs.size() / 2];
      std::printf("| %s | %.3f | %.3f | %.1f | %.3f |\n", c.name, m.reg, m.copy_end,
                  static_cast<double>(size) / gib / m.copy_end, m.calls);
      std::fflush(stdout);
    }
    ::close(fd);
    (void)cudaIpcCloseMemHandle(other_memory);
    ::kill(child, SIGKILL);
    if (!existing) ::unlink(file.c_str());
    return 0;
  }
  for (const std::uint64_t unit : {2 * mib, 64 * std::uint64_t{1024}}) {
    if (existing && unit != 2 * mib) break;
    if (!existing && !write_file(file, size, unit)) {
      std::perror("write");
      return 1;
    }
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    char unit_name[32];
    std::snprintf(unit_name, sizeof unit_name, "%llu KiB pwrites", static_cast<unsigned long long>(unit >> 10));
    if (existing) std::snprintf(unit_name, sizeof unit_name, "existing file");
    for (const config& c : cases) {
      std::vector<timing> runs;
      for (unsigned r = 0; r < repeat; ++r) {
        timing t;
        if (c.other_context && other == nullptr) break;
        if (!run_case(fd, size, c.chunk, c.threads, c.copy, c.flags, device, c.other_context ? other : nullptr, t)) {
          std::printf("| %s | %s | failed |\n", unit_name, c.name);
          break;
        }
        runs.push_back(t);
      }
      if (runs.size() != repeat) continue;
      std::sort(runs.begin(), runs.end(), [](const timing& a, const timing& b) { return a.copy_end < b.copy_end; });
      const timing& m = runs[runs.size() / 2];
      const double g = static_cast<double>(size) / gib;
      std::printf("| %s | %s | %.3f | %.3f | %.1f | %.3f | %.1f | %.3f |\n", unit_name, c.name, m.map, m.reg, g / m.reg,
                  m.copy_end, g / (m.copy_end + m.map), m.unreg);
      std::fflush(stdout);
    }
    ::close(fd);
  }
  if (!existing) ::unlink(file.c_str());
  (void)cudaFree(device);
  return 0;
}
