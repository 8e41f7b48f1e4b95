// SPDX-License-Identifier: Apache-2.0
// CUDA IPC grants between processes: the server's grant plane (this process, with the real
// device opener) against client processes that each hold device memory of their own (this test
// binary started again with --grant-child). What a hostile or dying client can make the server
// do: touch only the allocation its own user granted, and keep serving everyone else.
#include <sluice/cuda/device.hpp>
#include <sluice/cuda/device_memory.hpp>
#include <sluice/cuda/grant.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/local_plane.hpp>
#include <sluice/s3/rdma_token.hpp>

#include <doctest/doctest.h>

#include "gpu_data.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

using namespace sluice;
using namespace std::chrono_literals;

namespace {

constexpr std::byte poison{0xA5};

/// FNV-1a over the bytes: what a child reports of its whole allocation.
std::uint64_t fnv(const std::byte* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ std::to_integer<std::uint64_t>(p[i])) * 1099511628211ULL;
  return h;
}

}  // namespace

/// The client process: `--grant-child SOCKET USER SECRET BYTES [DEVICE]`. Allocates BYTES of
/// memory on device DEVICE (0) filled with the poison byte, opens a session, then answers one line per command:
///   grant OFFSET LENGTH w|r  →  "token TEXT" (a grant of [OFFSET, OFFSET + LENGTH) of its memory)
///   hash                     →  "hash H" (FNV-1a of the whole allocation, copied to the host)
///   quit                     →  exits 0
int sluice_gpu_grant_child(int argc, char** argv) {
  if (argc != 6 && argc != 7) return 2;
  const std::uint64_t bytes = std::stoull(argv[5]);
  const int device = argc == 7 ? std::stoi(argv[6]) : 0;
  error_code ec;
  auto memory = cuda::device_buffer::allocate(bytes, device, ec);
  if (!ec) ec = cuda::fill(memory.region(), poison);
  std::shared_ptr<s3::local_client_plane> plane;
  if (!ec) plane = s3::local_client_plane::open({argv[2], {argv[3], argv[4]}, cuda::make_grant_exporter(), 5000ms}, ec);
  if (ec) {
    std::printf("error %s\n", ec.message().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::vector<std::unique_ptr<s3::rdma_client_plane::grant>> grants;
  std::vector<std::byte> host;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    if (verb == "grant") {
      std::uint64_t offset = 0;
      std::uint64_t length = 0;
      std::string op;
      in >> offset >> length >> op;
      const region r{memory.region().bytes() + offset, static_cast<std::size_t>(length), memory_kind::cuda_device,
                     device};
      auto g = plane->grant_access(r, op == "r" ? s3::rdma_op::read : s3::rdma_op::write,
                                   std::chrono::system_clock::now() + 1h, ec);
      if (ec) {
        std::printf("error %s\n", ec.message().c_str());
      } else {
        std::printf("token %s\n", g->token().c_str());
        grants.push_back(std::move(g));
      }
    } else if (verb == "hash") {
      host.resize(bytes);
      ec = cuda::copy(host_region(host), memory.region());
      if (ec) {
        std::printf("error %s\n", ec.message().c_str());
      } else {
        std::printf("hash %llx\n", static_cast<unsigned long long>(fnv(host.data(), host.size())));
      }
    } else if (verb == "quit") {
      return 0;
    } else {
      std::printf("error unknown command\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

namespace {

/// One client process and its command pipe.
class child {
 public:
  child(const std::filesystem::path& socket, const std::string& user, const std::string& secret, std::uint64_t bytes,
        int device = 0)
      : bytes_(bytes) {
    int to[2];
    int from[2];
    REQUIRE(::pipe(to) == 0);
    REQUIRE(::pipe(from) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from[1], 1);
    posix_spawn_file_actions_addclose(&actions, to[1]);
    posix_spawn_file_actions_addclose(&actions, from[0]);
    const std::string path = socket.string();
    const std::string size = std::to_string(bytes);
    std::vector<std::string> args = {"/proc/self/exe",      "--grant-child", path, user, secret, size,
                                     std::to_string(device)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(to[0]);
    ::close(from[1]);
    in_ = to[1];
    out_ = from[0];
    REQUIRE(rc == 0);
    const std::string first = read_line();
    REQUIRE_MESSAGE(first == "ready", first);
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() {
    if (pid_ > 0) {
      (void)ask("quit", false);
      ::close(in_);
      int status = 0;
      for (int i = 0; i < 500 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(10ms);
      if (::waitpid(pid_, &status, WNOHANG) == 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    } else {
      ::close(in_);
    }
    ::close(out_);
  }

  /// A token for [offset, offset + length) of the child's allocation.
  s3::rdma_token grant(std::uint64_t offset, std::uint64_t length, s3::rdma_op op) {
    const std::string answer =
        ask("grant " + std::to_string(offset) + " " + std::to_string(length) + (op == s3::rdma_op::read ? " r" : " w"));
    REQUIRE_MESSAGE(answer.rfind("token ", 0) == 0, answer);
    error_code ec;
    auto token = s3::decode_rdma_token(answer.substr(6), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    return token;
  }
  /// FNV-1a of the child's whole allocation.
  std::string hash() {
    const std::string answer = ask("hash");
    REQUIRE_MESSAGE(answer.rfind("hash ", 0) == 0, answer);
    return answer.substr(5);
  }
  /// The allocation's bytes had nothing but `writes` touched them (offset, bytes) since it was made.
  [[nodiscard]] std::string expected(
      const std::vector<std::pair<std::uint64_t, const std::vector<std::byte>*>>& writes) const {
    std::vector<std::byte> image(bytes_, poison);
    for (const auto& [offset, data] : writes) std::memcpy(image.data() + offset, data->data(), data->size());
    char text[32];
    std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(fnv(image.data(), image.size())));
    return text;
  }
  void kill() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  std::string ask(const std::string& command, bool answer = true) {
    const std::string line = command + "\n";
    if (::write(in_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "error write";
    return answer ? read_line() : std::string{};
  }
  std::string read_line() {
    std::string line;
    char c = 0;
    while (true) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 60000) != 1) return "error timed out";
      if (::read(out_, &c, 1) != 1) return "error eof";
      if (c == '\n') return line;
      line.push_back(c);
    }
  }

  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::uint64_t bytes_;
};

s3::rdma_source source_of(const std::vector<std::byte>& bytes) {
  return {host_region(bytes), 0, bytes.size(), nullptr, {}};
}

template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

}  // namespace

TEST_CASE("cuda-ipc grants across processes: only the granted allocation, only for its user") {
  error_code ec;
  auto opener = cuda::make_grant_opener({}, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const auto path =
      std::filesystem::temp_directory_path() / ("sluice-gpu-grants-" + std::to_string(::getpid()) + ".sock");
  s3::local_server_plane_config config;
  config.socket_path = path;
  config.users = {{"alice", "alice-secret"}, {"bob", "bob-secret"}};
  config.device = opener;
  auto server = s3::local_server_plane::open(config, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  REQUIRE(server->serves(s3::cuda_ipc_grant_provider));

  constexpr std::uint64_t mib = 1 << 20;
  child alice(path, "alice", "alice-secret", 64 * mib);
  child bob(path, "bob", "bob-secret", 4 * mib);       // grants another buffer
  child idle(path, "alice", "alice-secret", 4 * mib);  // grants nothing
  const std::string bob_clean = bob.expected({});
  const std::string idle_clean = idle.expected({});

  const auto payload = testing::fast_random_bytes(mib + 4097, 21);
  const s3::rdma_token to_alice = alice.grant(4096, payload.size(), s3::rdma_op::write);
  CHECK(to_alice.provider == s3::cuda_ipc_grant_provider);
  const s3::rdma_token to_bob = bob.grant(0, 4 * mib, s3::rdma_op::write);
  CHECK(opener != nullptr);
  CHECK(cuda::stats_of(*opener).open_handles == 2);

  // Its user: exactly the granted bytes change.
  REQUIRE(!server->write_from({"alice"}, to_alice, source_of(payload)));
  const std::string alice_written = alice.expected({{4096, &payload}});
  CHECK(alice.hash() == alice_written);
  CHECK(bob.hash() == bob_clean);
  CHECK(idle.hash() == idle_clean);

  // Another user naming alice's grant, alice replaying bob's grant, a forged grant id: refused.
  const auto other = testing::fast_random_bytes(payload.size(), 22);
  CHECK(server->write_from({"bob"}, to_alice, source_of(other)) == s3::errc::invalid_rdma_token);
  s3::rdma_token replayed = to_bob;
  replayed.segments[0].length = other.size();
  CHECK(server->write_from({"alice"}, replayed, source_of(other)) == s3::errc::invalid_rdma_token);
  s3::rdma_token forged = to_alice;
  forged.endpoint[3] ^= std::byte{0x40};
  CHECK(server->write_from({"alice"}, forged, source_of(other)) == s3::errc::invalid_rdma_token);
  CHECK(server->read({"bob"}, to_alice, payload.size(), [](auto) { return error_code{}; }) ==
        s3::errc::invalid_rdma_token);

  // Offsets and lengths outside the allocation alice granted: 400, nothing touched.
  for (const std::uint64_t offset : {64 * mib, 64 * mib - 4096, std::uint64_t{1} << 40, ~std::uint64_t{0} - 10}) {
    s3::rdma_token outside = to_alice;
    outside.segments[0].address = offset;
    outside.segments[0].length = std::min<std::uint64_t>(other.size(), ~std::uint64_t{0} - offset);
    s3::rdma_source part = source_of(other);
    part.length = outside.segments[0].length;
    CAPTURE(offset);
    CHECK(server->write_from({"alice"}, outside, part) == s3::errc::invalid_rdma_token);
  }
  CHECK(alice.hash() == alice_written);
  CHECK(bob.hash() == bob_clean);
  CHECK(idle.hash() == idle_clean);

  // The other way (a PUT's source): alice's bytes, to alice only.
  const s3::rdma_token from_alice = alice.grant(4096, payload.size(), s3::rdma_op::read);
  std::vector<std::byte> got;
  REQUIRE(!server->read({"alice"}, from_alice, payload.size(), [&](std::span<const std::byte> d) {
    got.insert(got.end(), d.begin(), d.end());
    return error_code{};
  }));
  CHECK(got == payload);

  // A client killed in the middle of a transfer into its memory: the server drops its grant and
  // closes its handle, and the next request of another user still moves by grant.
  {
    auto doomed = std::make_unique<child>(path, "alice", "alice-secret", 512 * mib);
    const s3::rdma_token to_doomed = doomed->grant(0, 512 * mib, s3::rdma_op::write);
    CHECK(cuda::stats_of(*opener).open_handles == 3);
    const std::vector<std::byte> big(512 * mib, std::byte{0x3C});
    error_code moved;
    std::thread transfer([&] {
      for (int i = 0; i < 20 && !moved; ++i) moved = server->write_from({"alice"}, to_doomed, source_of(big));
    });
    std::this_thread::sleep_for(50ms);
    doomed->kill();
    transfer.join();
    MESSAGE("transfer into a killed client's memory: " << (moved ? moved.message() : "completed before the kill"));
    CHECK(eventually([&] { return cuda::stats_of(*opener).open_handles == 2; }));
    CHECK(server->write_from({"alice"}, to_doomed, source_of(payload)) == s3::errc::invalid_rdma_token);
  }
  REQUIRE(!server->write_from({"bob"}, to_bob, source_of(payload)));
  CHECK(bob.hash() == bob.expected({{0, &payload}}));
  CHECK(alice.hash() == alice_written);
  CHECK(idle.hash() == idle_clean);
  server->close();
}

TEST_CASE("cuda-ipc grants: concurrent first GETs of one object version register each chunk once") {
  constexpr std::uint64_t mib = 1 << 20;
  // The object: 24 MiB + 12345 bytes starting 100 bytes into a page (as an object's data follows
  // its header in the store's file). The source's owner keeps it alive while the opener keeps
  // chunks of it registered (as a store's mapping is kept), so that no registration outlives it.
  auto backing = std::make_shared<std::vector<std::byte>>(26 * mib);
  const auto bytes = testing::fast_random_bytes(24 * mib + 12345, 31);
  const std::size_t lead = 4096 - reinterpret_cast<std::uintptr_t>(backing->data()) % 4096 + 100;
  std::memcpy(backing->data() + lead, bytes.data(), bytes.size());
  error_code ec;
  cuda::grant_opener_config small;
  small.chunk_bytes = 1 * mib;  // 26 chunks, so that ranges start and end inside chunks
  auto opener = cuda::make_grant_opener(small, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const auto path =
      std::filesystem::temp_directory_path() / ("sluice-gpu-grants-c-" + std::to_string(::getpid()) + ".sock");
  s3::local_server_plane_config config;
  config.socket_path = path;
  config.users = {{"alice", "alice-secret"}};
  config.device = opener;
  auto server = s3::local_server_plane::open(config, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  child alice(path, "alice", "alice-secret", 32 * mib);
  s3::rdma_source object{{backing->data() + lead, bytes.size(), memory_kind::host_pageable, -1}, 0, 0, backing, {7, 9}};
  // Ranges that overlap each other and chunk boundaries, all moving at once: each chunk is
  // registered once, whichever transfer asks first, and every transfer waits for the ones it needs.
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges = {
      {0, 5 * mib + 7},  {3 * mib + 1, 9 * mib}, {12 * mib + 5, 12 * mib + 12340},
      {0, bytes.size()}, {20 * mib, 1},          {23 * mib - 3, mib + 12348}};
  const auto run_all = [&] {
    std::vector<s3::rdma_token> tokens;
    for (const auto& [offset, length] : ranges) tokens.push_back(alice.grant(offset, length, s3::rdma_op::write));
    std::vector<error_code> results(ranges.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      threads.emplace_back([&, i] {
        s3::rdma_source part = object;
        part.offset = ranges[i].first;
        part.length = ranges[i].second;
        results[i] = server->write_from({"alice"}, tokens[i], part);
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& r : results) CHECK_MESSAGE(!r, r.message());
  };
  run_all();
  CHECK(alice.hash() == alice.expected({{0, &bytes}}));
  const std::uint64_t chunks = (100 + bytes.size() + mib - 1) / mib;  // 1 MiB chunks from the page of byte 0
  // Chunks the copy threads moved are registered after their transfer, once.
  CHECK(eventually([&] { return cuda::stats_of(*opener).registrations == chunks; }));
  const auto first = cuda::stats_of(*opener);
  CHECK(first.registrations == chunks);
  CHECK(first.registered_bytes == (100 + bytes.size() + 4095) / 4096 * 4096);
  CHECK(first.pageable_copies == 0);
  // Again: everything registered already, nothing registered twice.
  run_all();
  const auto second = cuda::stats_of(*opener);
  CHECK(second.registrations == chunks);
  CHECK(second.cache_hits > first.cache_hits);
  CHECK(alice.hash() == alice.expected({{0, &bytes}}));
  // A GET of the first MiB of another version (memory of its own, as another version's mapping
  // is): the rest of it registers ahead, unasked.
  auto next_backing = std::make_shared<std::vector<std::byte>>(*backing);
  s3::rdma_source head = object;
  head.mapping.data = next_backing->data() + lead;
  head.owner = next_backing;
  head.version = {7, 10};
  head.length = mib;
  REQUIRE(!server->write_from({"alice"}, alice.grant(0, mib, s3::rdma_op::write), head));
  CHECK(eventually([&] { return cuda::stats_of(*opener).registrations == 2 * chunks; }));
  // Closed and released, the opener goes, and its registrations with it.
  const std::weak_ptr<s3::device_grant_opener> watch = opener;
  const std::weak_ptr<std::vector<std::byte>> memory = backing;
  server->close();
  server.reset();
  config.device.reset();
  opener.reset();
  object.owner.reset();
  head.owner.reset();
  backing.reset();
  next_backing.reset();
  CHECK(watch.expired());
  CHECK(memory.expired());
}

TEST_CASE("cuda-ipc grants: clients on different devices each get the object on their own device, at once") {
  constexpr std::uint64_t mib = 1 << 20;
  error_code ec;
  const int devices = cuda::device_count(ec);
  REQUIRE(devices >= 1);
  if (devices == 1) MESSAGE("one GPU on this host: both clients are on device 0 (several devices not tested here)");
  auto backing = std::make_shared<std::vector<std::byte>>(testing::fast_random_bytes(40 * mib + 999, 41));
  cuda::grant_opener_config small;
  small.chunk_bytes = 4 * mib;
  auto opener = cuda::make_grant_opener(small, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const auto path =
      std::filesystem::temp_directory_path() / ("sluice-gpu-grants-d-" + std::to_string(::getpid()) + ".sock");
  s3::local_server_plane_config config;
  config.socket_path = path;
  config.users = {{"alice", "alice-secret"}};
  config.device = opener;
  auto server = s3::local_server_plane::open(config, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  std::vector<std::unique_ptr<child>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(std::make_unique<child>(path, "alice", "alice-secret", 48 * mib, i % devices));
  }
  const s3::rdma_source object{host_region(*backing), 0, backing->size(), backing, {11, 1}};
  // Twice: the first time cold (copies and registrations), then registered.
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    std::vector<s3::rdma_token> tokens;
    for (auto& c : clients) tokens.push_back(c->grant(mib, backing->size(), s3::rdma_op::write));
    std::vector<error_code> results(clients.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < clients.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = server->write_from({"alice"}, tokens[i], object); });
    }
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < clients.size(); ++i) {
      CAPTURE(i);
      CHECK_MESSAGE(!results[i], results[i].message());
      CHECK(clients[i]->hash() == clients[i]->expected({{mib, backing.get()}}));
    }
  }
  server->close();
}

TEST_CASE("cuda-ipc grants: a cold GET's last chunks go through pinned slots while the first ones register") {
  constexpr std::uint64_t mib = 1 << 20;
  // The object in a file, 100 bytes after a header (as fs_store keeps it), mapped for
  // registration and read with pread by the copy threads.
  const auto bytes = testing::fast_random_bytes(96 * mib + 4321, 47);
  const auto file_path =
      std::filesystem::temp_directory_path() / ("sluice-gpu-copy-" + std::to_string(::getpid()) + ".bin");
  {
    const std::vector<std::byte> header(100, std::byte{0x11});
    std::FILE* f = std::fopen(file_path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(header.data(), 1, header.size(), f) == header.size());
    REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    REQUIRE(std::fclose(f) == 0);
  }
  const int fd = ::open(file_path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::filesystem::remove(file_path);
  const std::size_t file_bytes = 100 + bytes.size();
  // One mapping per version, as the store maps each version it serves (a range of host memory
  // registers once: two versions on one mapping would fail the second's registrations).
  std::vector<void*> mappings;
  for (int i = 0; i < 2; ++i) {
    mappings.push_back(::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0));
    REQUIRE(mappings.back() != MAP_FAILED);
  }
  auto owner = std::shared_ptr<void>(nullptr, [fd, file_bytes, mappings](void*) {
    for (void* p : mappings) ::munmap(p, file_bytes);
    ::close(fd);
  });
  const auto version = [&](std::uint64_t v) {
    s3::rdma_source s{{static_cast<std::byte*>(mappings[v - 1]) + 100, bytes.size(), memory_kind::host_pageable, -1},
                      0,
                      bytes.size(),
                      owner,
                      {21, v}};
    s.file = fd;
    s.file_offset = 100;
    return s;
  };
  error_code ec;
  cuda::grant_opener_config config;
  config.chunk_bytes = 1 * mib;  // 97 chunks
  config.copy_slot_bytes = 1 * mib;
  config.copy_threads = 4;
  auto opener = cuda::make_grant_opener(config, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const auto path =
      std::filesystem::temp_directory_path() / ("sluice-gpu-grants-p-" + std::to_string(::getpid()) + ".sock");
  s3::local_server_plane_config plane;
  plane.socket_path = path;
  plane.users = {{"alice", "alice-secret"}};
  plane.device = opener;
  auto server = s3::local_server_plane::open(plane, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const std::uint64_t chunks = (100 + bytes.size() + mib - 1) / mib;

  // The whole object, cold: the registering thread takes the front, the copy threads the back.
  child alice(path, "alice", "alice-secret", 100 * mib);
  REQUIRE(!server->write_from({"alice"}, alice.grant(0, bytes.size(), s3::rdma_op::write), version(1)));
  CHECK(alice.hash() == alice.expected({{0, &bytes}}));
  const auto cold = cuda::stats_of(*opener);
  MESSAGE("cold GET of " << chunks << " chunks: " << cold.copied_chunks << " through pinned slots, "
                         << cold.registrations << " registered during it");
  CHECK(cold.copied_chunks > 0);
  CHECK(cold.copied_chunks < chunks);
  CHECK(cold.pageable_copies == 0);
  // What they copied is registered afterwards, each chunk once: the next GET copies nothing.
  CHECK(eventually([&] { return cuda::stats_of(*opener).registrations == chunks; }));
  child bob(path, "alice", "alice-secret", 100 * mib);
  REQUIRE(!server->write_from({"alice"}, bob.grant(0, bytes.size(), s3::rdma_op::write), version(1)));
  CHECK(bob.hash() == bob.expected({{0, &bytes}}));
  CHECK(cuda::stats_of(*opener).copied_chunks == cold.copied_chunks);
  CHECK(cuda::stats_of(*opener).registrations == chunks);

  // Ranges starting and ending inside chunks, at once, of a version nobody registered: exact bytes
  // in exactly the granted ranges, whichever way each chunk went.
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges = {
      {7, 40 * mib + 3}, {40 * mib + 10, 30 * mib}, {80 * mib + 1, bytes.size() - 80 * mib - 1}};
  child carol(path, "alice", "alice-secret", 100 * mib);
  std::vector<std::vector<std::byte>> pieces;
  std::vector<std::pair<std::uint64_t, const std::vector<std::byte>*>> writes;
  for (const auto& [offset, length] : ranges) {
    pieces.emplace_back(bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                        bytes.begin() + static_cast<std::ptrdiff_t>(offset + length));
  }
  for (std::size_t i = 0; i < ranges.size(); ++i) writes.emplace_back(ranges[i].first, &pieces[i]);
  std::vector<s3::rdma_token> tokens;
  for (const auto& [offset, length] : ranges) tokens.push_back(carol.grant(offset, length, s3::rdma_op::write));
  std::vector<error_code> results(ranges.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    threads.emplace_back([&, i] {
      s3::rdma_source part = version(2);
      part.offset = ranges[i].first;
      part.length = ranges[i].second;
      results[i] = server->write_from({"alice"}, tokens[i], part);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) CHECK_MESSAGE(!r, r.message());
  CHECK(carol.hash() == carol.expected(writes));
  CHECK(eventually([&] { return cuda::stats_of(*opener).registrations == 2 * chunks; }));
  server->close();
}
