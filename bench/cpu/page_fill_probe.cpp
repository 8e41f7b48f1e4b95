// SPDX-License-Identifier: Apache-2.0
// How fast can N threads fill a new file with fresh page-cache pages: the bound of a gateway miss,
// which fills its copy while it serves it. A 1 GiB file under DIR, mapped shared and filled in
// 16 MiB steps taken in turn by N threads, four ways:
//   populate       each thread MADV_POPULATE_WRITEs its step, then writes it (the gateway before);
//   fallocate ahead one thread at a time fallocate()s what is not yet allocated, then as above;
//   fallocate all  the whole file fallocate()d first, then as above;
//   write faults   the threads write, and the faults allocate.
// With a third argument `huge`, each mapping is madvise(MADV_HUGEPAGE)d first (what a tmpfs
// mounted huge=advise needs to give the file 2 MiB pages).
// Not built by CMake (a probe of the machine, not of sluice):
//   g++ -O2 -std=c++20 -pthread bench/cpu/page_fill_probe.cpp -o page_fill_probe
//   ./page_fill_probe /dev/shm 8 [huge]
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t total = std::size_t{1} << 30;
constexpr std::size_t step = std::size_t{16} << 20;
constexpr std::size_t steps = total / step;

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  const std::string path = std::string(argc > 1 ? argv[1] : "/dev/shm") + "/page_fill_probe.tmp";
  const int threads = argc > 2 ? std::atoi(argv[2]) : 8;
  const bool huge = argc > 3 && std::string(argv[3]) == "huge";
  const char* names[] = {"populate", "fallocate ahead", "fallocate all", "write faults"};
  for (int mode = 0; mode < 4; ++mode) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::ftruncate(fd, total) != 0) {
      std::perror(path.c_str());
      return 1;
    }
    void* mapped = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      std::perror("mmap");
      return 1;
    }
    if (huge && ::madvise(mapped, total, MADV_HUGEPAGE) != 0) std::perror("madvise(MADV_HUGEPAGE)");
    auto* data = static_cast<char*>(mapped);
    std::atomic<std::size_t> next{0};
    std::mutex allocating;
    std::size_t allocated = 0;
    const double start = seconds();
    if (mode == 2 && ::fallocate(fd, 0, 0, total) != 0) std::perror("fallocate");
    const double allocated_at = seconds();
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; ++i) {
      workers.emplace_back([&] {
        for (std::size_t s = next.fetch_add(1); s < steps; s = next.fetch_add(1)) {
          if (mode == 1) {
            const std::lock_guard lock(allocating);
            const std::size_t end = (s + 1) * step;
            if (allocated < end &&
                ::fallocate(fd, 0, static_cast<off_t>(allocated), static_cast<off_t>(end - allocated)) != 0) {
              std::perror("fallocate");
            }
            allocated = std::max(allocated, end);
          }
          if (mode != 3 && ::madvise(data + s * step, step, MADV_POPULATE_WRITE) != 0) std::perror("madvise");
          std::memset(data + s * step, 1, step);  // the receive's writes
        }
      });
    }
    for (auto& w : workers) w.join();
    const double took = seconds() - start;
    std::printf("%-16s %2d threads: %.3f s (%.3f s before the threads) -> %.2f GiB/s\n", names[mode], threads, took,
                allocated_at - start, 1.0 / took);
    ::munmap(mapped, total);
    ::close(fd);
    ::unlink(path.c_str());
  }
  return 0;
}
