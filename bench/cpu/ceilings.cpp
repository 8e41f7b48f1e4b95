// SPDX-License-Identifier: Apache-2.0
// The ceilings the CPU set of the benchmark harness (bench/run.py) sets the S3 paths against:
// what one host moves without S3 in the way.
//
//   sluice_ceilings --what memcpy|tcp|fi_rma --size BYTES [--provider shm|tcp] [--repeat 3]
//                   [--chunk 8MiB]
//
// memcpy: one thread copies --size bytes between two pre-faulted buffers, --chunk at a time.
// tcp:    a loopback TCP connection (plain sockets): a sender thread writes --size bytes from a
//         pre-faulted buffer, --chunk per send(); the main thread reads them into another. Timed
//         from the first send to the last byte received; the connection is opened before.
// fi_rma: the raw libfabric RMA write loop of sluice::fabric::endpoint: two endpoints of
//         --provider (tcp is tcp;ofi_rxm, bound to 127.0.0.1) in this process, --size registered
//         for remote writes on one and as a write source on the other, post_write of --chunk
//         pieces with up to 8 in flight until all --size bytes are written and completed.
//         Registration and the first connection (one untimed write) are not timed.
//
// Each runs --repeat times (default 3). Output: one JSON line on stdout with the median run's
// time and CPU (getrusage of this process, every thread: both ends of tcp and fi_rma, with the
// endpoints' progress threads); errors on stderr. Exit status: 0 done (for tcp and fi_rma the
// bytes received are checked), 1 a failure, 2 bad arguments.
#include <sluice/config.hpp>

#ifdef SLUICE_CEILINGS_WITH_FABRIC
#include <sluice/fabric/endpoint.hpp>
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
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
#include <thread>
#include <vector>

namespace {

using namespace sluice;

struct options {
  std::string what;
  std::uint64_t size = 0;
  std::string provider = "shm";
  unsigned repeat = 3;
  std::uint64_t chunk = 8 * mib;
};

int usage(const char* why) {
  std::fprintf(stderr, "sluice_ceilings: %s\n", why);
  std::fprintf(stderr,
               "usage: sluice_ceilings --what memcpy|tcp|fi_rma --size BYTES [--provider shm|tcp] [--repeat 3]\n"
               "                       [--chunk 8MiB]\n");
  return 2;
}

std::optional<std::string> parse(int argc, char** argv, options& opt) {
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view flag = argv[i];
      if (i + 1 >= argc) return std::string(flag) + " needs a value";
      const std::string value = argv[++i];
      if (flag == "--what") {
        opt.what = value;
      } else if (flag == "--size" || flag == "--chunk") {
        const auto n = parse_size(value);
        if (!n || *n == 0) return std::string(flag) + ": not a size: " + value;
        (flag == "--size" ? opt.size : opt.chunk) = *n;
      } else if (flag == "--provider") {
        opt.provider = value;
      } else if (flag == "--repeat") {
        opt.repeat = static_cast<unsigned>(std::stoul(value));
      } else {
        return "unknown argument " + std::string(flag);
      }
    }
  } catch (const std::exception& e) {  // stoul: not a number
    return std::string("bad number: ") + e.what();
  }
  if (opt.what != "memcpy" && opt.what != "tcp" && opt.what != "fi_rma") return "--what must be memcpy, tcp or fi_rma";
  if (opt.size == 0) return "--size is required";
  if (opt.provider != "shm" && opt.provider != "tcp") return "--provider must be shm or tcp";
  if (opt.repeat == 0) return "--repeat must be at least 1";
  return std::nullopt;
}

double cpu_now() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](timeval t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

using clock_type = std::chrono::steady_clock;

/// One timed run: wall seconds (of what the case measures) and this process's CPU seconds.
struct run {
  double seconds = 0;
  double cpu_seconds = 0;
};

/// Owned host memory, written through once so that no page fault lands in a timed region.
struct host_buffer {
  explicit host_buffer(std::size_t n, std::byte fill) : bytes(std::make_unique_for_overwrite<std::byte[]>(n)), size(n) {
    std::memset(bytes.get(), std::to_integer<int>(fill), n);
  }
  [[nodiscard]] std::byte* data() const noexcept { return bytes.get(); }
  std::unique_ptr<std::byte[]> bytes;
  std::size_t size;
};

/// Writes a recognizable pattern (the offset of every 8-byte word) into `b`, so that a receiver
/// can tell the bytes arrived where they belong.
void fill_offsets(host_buffer& b) {
  std::size_t i = 0;
  for (; i + 8 <= b.size; i += 8) {
    const std::uint64_t v = i;
    std::memcpy(b.data() + i, &v, 8);
  }
  for (; i < b.size; ++i) b.data()[i] = std::byte{0xEE};  // not 0, what the target starts as
}

// -- memcpy ------------------------------------------------------------------------------------

std::optional<std::vector<run>> run_memcpy(const options& opt) {
  host_buffer from(opt.size, std::byte{0x5A});
  host_buffer to(opt.size, std::byte{0});
  std::vector<run> runs;
  for (unsigned i = 0; i < opt.repeat; ++i) {
    const double cpu0 = cpu_now();
    const auto t0 = clock_type::now();
    for (std::uint64_t offset = 0; offset < opt.size; offset += opt.chunk) {
      std::memcpy(to.data() + offset, from.data() + offset, std::min(opt.chunk, opt.size - offset));
    }
    const auto t1 = clock_type::now();
    runs.push_back({std::chrono::duration<double>(t1 - t0).count(), cpu_now() - cpu0});
  }
  if (std::memcmp(from.data(), to.data(), opt.size) != 0) {
    std::fprintf(stderr, "sluice_ceilings: memcpy: the copy differs\n");
    return std::nullopt;
  }
  return runs;
}

// -- tcp ---------------------------------------------------------------------------------------

/// A socket closed on destruction.
struct socket_fd {
  explicit socket_fd(int f = -1) noexcept : fd(f) {}
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd() {
    if (fd >= 0) ::close(fd);
  }
  int fd;
};

/// A connected loopback pair (sender, receiver); false with the reason on stderr when it fails.
bool connect_loopback(socket_fd& sender, socket_fd& receiver) {
  const auto failed = [](const char* what) {
    std::fprintf(stderr, "sluice_ceilings: tcp: %s: %s\n", what, std::strerror(errno));
    return false;
  };
  socket_fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.fd < 0) return failed("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  // The sockets API takes every address family through sockaddr*.
  auto* generic = reinterpret_cast<sockaddr*>(&address);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  if (::bind(listener.fd, generic, sizeof address) != 0) return failed("bind");
  if (::listen(listener.fd, 1) != 0) return failed("listen");
  if (::getsockname(listener.fd, generic, &length) != 0) return failed("getsockname");
  sender.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sender.fd < 0) return failed("socket");
  if (::connect(sender.fd, generic, sizeof address) != 0) return failed("connect");
  receiver.fd = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (receiver.fd < 0) return failed("accept");
  return true;
}

std::optional<std::vector<run>> run_tcp(const options& opt) {
  socket_fd sender;
  socket_fd receiver;
  if (!connect_loopback(sender, receiver)) return std::nullopt;
  host_buffer from(opt.size, std::byte{0});
  fill_offsets(from);
  host_buffer to(opt.size, std::byte{0});

  std::vector<run> runs;
  for (unsigned i = 0; i < opt.repeat; ++i) {
    std::memset(to.data(), 0, to.size);  // the last run's bytes cannot pass the check
    std::atomic<bool> send_failed{false};
    clock_type::time_point t0;
    std::atomic<bool> started{false};
    const double cpu0 = cpu_now();
    std::thread send_thread([&] {
      t0 = clock_type::now();
      started.store(true, std::memory_order_release);
      for (std::uint64_t offset = 0; offset < opt.size;) {
        const std::size_t n = static_cast<std::size_t>(std::min(opt.chunk, opt.size - offset));
        const ssize_t sent = ::send(sender.fd, from.data() + offset, n, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) {
          std::fprintf(stderr, "sluice_ceilings: tcp: send: %s\n", std::strerror(errno));
          send_failed = true;
          ::shutdown(sender.fd, SHUT_WR);  // the receiver sees the end and stops
          return;
        }
        offset += static_cast<std::uint64_t>(sent);
      }
    });
    std::uint64_t received = 0;
    while (received < opt.size) {
      const std::size_t n = static_cast<std::size_t>(std::min(opt.chunk, opt.size - received));
      const ssize_t got = ::recv(receiver.fd, to.data() + received, n, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      received += static_cast<std::uint64_t>(got);
    }
    const auto t1 = clock_type::now();
    const double cpu1 = cpu_now();
    send_thread.join();
    if (send_failed || received != opt.size || !started.load(std::memory_order_acquire)) {
      std::fprintf(stderr, "sluice_ceilings: tcp: received %llu of %llu bytes\n",
                   static_cast<unsigned long long>(received), static_cast<unsigned long long>(opt.size));
      return std::nullopt;
    }
    if (std::memcmp(from.data(), to.data(), opt.size) != 0) {
      std::fprintf(stderr, "sluice_ceilings: tcp: the bytes received differ from those sent\n");
      return std::nullopt;
    }
    runs.push_back({std::chrono::duration<double>(t1 - t0).count(), cpu1 - cpu0});
  }
  return runs;
}

// -- fi_rma ------------------------------------------------------------------------------------

#ifdef SLUICE_CEILINGS_WITH_FABRIC

/// Counts RMAs in flight; the completions (on the progress thread) wake the poster.
class in_flight_counter {
 public:
  void add() {
    std::lock_guard lock(mutex_);
    ++count_;
  }
  void done(error_code ec) {
    std::lock_guard lock(mutex_);
    --count_;
    if (ec && !error_) error_ = ec;
    changed_.notify_all();
  }
  /// Waits until at most `limit` are in flight; the first completion error, if any.
  error_code wait_below(std::size_t limit) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return count_ <= limit; });
    return error_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t count_ = 0;
  error_code error_;
};

constexpr std::size_t rma_in_flight = 8;

std::optional<std::vector<run>> run_fi_rma(const options& opt, std::string& provider) {
  provider = opt.provider == "tcp" ? "tcp;ofi_rxm" : "shm";
  fabric::fabric_config config;
  if (opt.provider == "tcp") config.node = "127.0.0.1";
  error_code ec;
  const auto failed = [&](const char* step) {
    std::fprintf(stderr, "sluice_ceilings: fi_rma (%s): %s: %s\n", provider.c_str(), step, ec.message().c_str());
    return std::nullopt;
  };
  auto local = fabric::endpoint::open(provider, config, ec);
  if (ec) return failed("open the local endpoint");
  auto remote = fabric::endpoint::open(provider, config, ec);
  if (ec) return failed("open the remote endpoint");
  const fi_addr_t peer = local->resolve(remote->name(), ec);
  if (ec) return failed("resolve the remote endpoint");

  host_buffer from(opt.size, std::byte{0});
  fill_offsets(from);
  host_buffer to(opt.size, std::byte{0});
  const fabric::memory_region source = local->register_memory({from.data(), from.size, memory_kind::host_pageable, -1},
                                                              fabric::access::write_source, ec);
  if (ec) return failed("register the source");
  const fabric::memory_region target =
      remote->register_memory({to.data(), to.size, memory_kind::host_pageable, -1}, fabric::access::remote_write, ec);
  if (ec) return failed("register the target");
  // As for a client's token: the target's progress thread polls while peers may write.
  const fabric::endpoint::remote_access_window window(remote);

  // Writes [offset, offset + length) of the source to the same place in the target, up to
  // rma_in_flight pieces of --chunk at once, and waits for every completion.
  in_flight_counter counter;
  const auto write_all = [&](std::uint64_t length) -> error_code {
    for (std::uint64_t offset = 0; offset < length; offset += opt.chunk) {
      if (const error_code e = counter.wait_below(rma_in_flight - 1)) return e;
      counter.add();
      const error_code e =
          local->post_write(source, offset, std::min(opt.chunk, length - offset), peer, target.remote_address(offset),
                            target.key(), [&counter](error_code done) { counter.done(done); });
      if (e) {
        counter.done({});  // never posted: its completion never runs
        counter.wait_below(0);
        return e;
      }
    }
    return counter.wait_below(0);
  };
  // Untimed: the first write to a new peer connects (tcp;ofi_rxm's handshake).
  if ((ec = write_all(std::min<std::uint64_t>(opt.size, 4 * kib)))) return failed("first write");

  std::vector<run> runs;
  for (unsigned i = 0; i < opt.repeat; ++i) {
    std::memset(to.data(), 0, to.size);  // the last run's bytes cannot pass the check
    const double cpu0 = cpu_now();
    const auto t0 = clock_type::now();
    ec = write_all(opt.size);
    const auto t1 = clock_type::now();
    const double cpu1 = cpu_now();
    if (ec) return failed("post_write");
    if (std::memcmp(from.data(), to.data(), opt.size) != 0) {
      std::fprintf(stderr, "sluice_ceilings: fi_rma: the target differs from the source\n");
      return std::nullopt;
    }
    runs.push_back({std::chrono::duration<double>(t1 - t0).count(), cpu1 - cpu0});
  }
  return runs;
}

#endif

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (const auto problem = parse(argc, argv, opt)) return usage(problem->c_str());

  std::string provider = "none";
  std::optional<std::vector<run>> runs;
  if (opt.what == "memcpy") {
    runs = run_memcpy(opt);
  } else if (opt.what == "tcp") {
    runs = run_tcp(opt);
  } else {
#ifdef SLUICE_CEILINGS_WITH_FABRIC
    runs = run_fi_rma(opt, provider);
#else
    std::fprintf(stderr, "sluice_ceilings: fi_rma: built without sluice::fabric\n");
    return 1;
#endif
  }
  if (!runs) return 1;

  std::sort(runs->begin(), runs->end(), [](const run& a, const run& b) { return a.seconds < b.seconds; });
  const run& median = (*runs)[runs->size() / 2];
  const double gibs = static_cast<double>(opt.size) / static_cast<double>(gib);
  std::printf(
      "{\"what\":\"%s\",\"provider\":\"%s\",\"bytes\":%llu,\"chunk\":%llu,\"repeat\":%u,\"seconds_median\":%.6f,"
      "\"gib_per_s\":%.4f,\"cpu_s_per_gib\":%.5f}\n",
      opt.what.c_str(), provider.c_str(), static_cast<unsigned long long>(opt.size),
      static_cast<unsigned long long>(opt.chunk), opt.repeat, median.seconds, gibs / median.seconds,
      median.cpu_seconds / gibs);
  return 0;
}
