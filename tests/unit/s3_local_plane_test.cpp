// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/local_plane.hpp>

#include <sluice/memory_store.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/server.hpp>

#include <doctest/doctest.h>

#include "conformance/transport_conformance.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace sluice;
using namespace std::chrono_literals;

using sluice::testing::random_bytes;

std::filesystem::path socket_path() {
  static int counter = 0;
  return std::filesystem::temp_directory_path() /
         ("sluice-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".sock");
}

std::shared_ptr<s3::local_server_plane> open_server(const std::filesystem::path& path,
                                                    std::vector<s3::credentials> users) {
  s3::local_server_plane_config config;
  config.socket_path = path;
  config.users = std::move(users);
  config.handshake_timeout = 2000ms;
  error_code ec;
  auto plane = s3::local_server_plane::open(config, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  return plane;
}

std::shared_ptr<s3::local_client_plane> open_client(const std::filesystem::path& path, s3::credentials creds,
                                                    error_code& ec) {
  return s3::local_client_plane::open({path, std::move(creds), nullptr, 2000ms}, ec);
}

/// Waits up to 2 s for `pred`.
template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 200; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

const auto far_future = std::chrono::system_clock::now() + 1h;

s3::rdma_token token_of(const std::unique_ptr<s3::rdma_client_plane::grant>& g) {
  error_code ec;
  auto t = s3::decode_rdma_token(g->token(), ec);
  REQUIRE(!ec);
  return t;
}

s3::rdma_source source_of(const std::vector<std::byte>& bytes) {
  return {host_region(bytes), 0, bytes.size(), nullptr, {}};
}

}  // namespace

TEST_CASE("shared_buffer: a sealed memfd mapping, zero-filled") {
  error_code ec;
  auto buffer = shared_buffer::create(1 << 20, ec);
  REQUIRE(!ec);
  CHECK(buffer.size() == 1 << 20);
  CHECK(std::all_of(buffer.data(), buffer.data() + buffer.size(), [](std::byte b) { return b == std::byte{0}; }));
  const int seals = ::fcntl(buffer.native_handle(), F_GET_SEALS);
  CHECK((seals & F_SEAL_SHRINK) != 0);
  CHECK(::ftruncate(buffer.native_handle(), 4096) != 0);  // nobody can shrink it under a peer's mapping
  bool released = false;
  {
    shared_buffer moved = std::move(buffer);
    moved.on_release([&] { released = true; });
    CHECK(buffer.native_handle() == -1);
  }
  CHECK(released);
  (void)shared_buffer::create(0, ec);
  CHECK(ec == errc::invalid_argument);
}

TEST_CASE("local plane: the handshake needs the user's secret on both ends") {
  const auto path = socket_path();
  auto server = open_server(path, {{"alice", "alice-secret"}, {"bob", "bob-secret"}});
  error_code ec;
  CHECK(open_client(path, {"alice", "alice-secret"}, ec));
  CHECK(!ec);
  CHECK(!open_client(path, {"alice", "wrong"}, ec));
  CHECK(ec == s3::errc::access_denied);
  CHECK(!open_client(path, {"mallory", "x"}, ec));
  CHECK(ec == s3::errc::access_denied);
  // A server that does not hold alice's secret (a process that took the socket's path) is not
  // trusted with any memory: the client refuses before it registers anything.
  const auto other = socket_path();
  auto impostor = open_server(other, {{"alice", "guessed"}});
  CHECK(!open_client(other, {"alice", "alice-secret"}, ec));
  CHECK(ec == s3::errc::access_denied);
  CHECK(impostor->grant_count() == 0);
  CHECK(!open_client(path.string() + ".missing", {"alice", "alice-secret"}, ec));
  CHECK(ec);
  // A second server on a live socket is refused; a stale one is replaced.
  s3::local_server_plane_config again;
  again.socket_path = path;
  again.users = {{"alice", "alice-secret"}};
  CHECK(!s3::local_server_plane::open(again, ec));
  CHECK(ec.value() == EADDRINUSE);
}

TEST_CASE("local plane: a memfd grant carries exactly the granted bytes, to its user only") {
  const auto path = socket_path();
  auto server = open_server(path, {{"alice", "a"}, {"bob", "b"}});
  error_code ec;
  auto alice = open_client(path, {"alice", "a"}, ec);
  REQUIRE(alice);
  auto bob = open_client(path, {"bob", "b"}, ec);
  REQUIRE(bob);

  auto a_buffer = shared_buffer::create(4 << 20, ec);
  REQUIRE(!ec);
  alice->share(a_buffer, ec);
  REQUIRE(!ec);
  auto b_buffer = shared_buffer::create(1 << 20, ec);
  std::memset(b_buffer.data(), 0x5a, b_buffer.size());
  bob->share(b_buffer, ec);
  REQUIRE(!ec);
  CHECK(server->grant_count() == 2);

  // Memory outside a shared buffer is not granted by this plane (another plane may).
  std::vector<std::byte> plain(4096);
  CHECK(!alice->grant_access(host_region(plain), s3::rdma_op::write, far_future, ec));
  CHECK(ec == errc::unsupported_memory);

  const auto payload = random_bytes(1 << 20, 1);
  const region target{a_buffer.data() + 4096, payload.size(), memory_kind::host_pageable, -1};
  auto grant = alice->grant_access(target, s3::rdma_op::write, far_future, ec);
  REQUIRE(!ec);
  const s3::rdma_token token = token_of(grant);
  CHECK(token.provider == s3::memfd_grant_provider);
  REQUIRE(token.segments.size() == 1);
  CHECK(token.segments[0].address == 4096);

  SUBCASE("its user writes and reads it") {
    REQUIRE(!server->write_from({"alice"}, token, source_of(payload)));
    CHECK(std::memcmp(a_buffer.data() + 4096, payload.data(), payload.size()) == 0);
    CHECK(a_buffer.data()[4095] == std::byte{0});
    CHECK(a_buffer.data()[4096 + payload.size()] == std::byte{0});
    std::vector<std::byte> got;
    REQUIRE(!server->read({"alice"}, token, payload.size(), [&](std::span<const std::byte> d) {
      got.insert(got.end(), d.begin(), d.end());
      return error_code{};
    }));
    CHECK(got == payload);
  }
  SUBCASE("another user's request naming it is refused, nothing touched") {
    CHECK(server->write_from({"bob"}, token, source_of(payload)) == s3::errc::invalid_rdma_token);
    CHECK(server->read({"bob"}, token, payload.size(), [](auto) { return error_code{}; }) ==
          s3::errc::invalid_rdma_token);
    CHECK(a_buffer.data()[4096] == std::byte{0});
  }
  SUBCASE("a segment outside the buffer is refused, nothing touched") {
    for (const std::uint64_t offset :
         {std::uint64_t{4} << 20, (std::uint64_t{4} << 20) - 4096, ~std::uint64_t{0} - 10}) {
      s3::rdma_token bad = token;
      bad.segments[0].address = offset;
      bad.segments[0].length = std::min<std::uint64_t>(payload.size(), ~std::uint64_t{0} - offset);
      const auto source = source_of(payload);
      s3::rdma_source part = source;
      part.length = bad.segments[0].length;
      CHECK(server->write_from({"alice"}, bad, part) == s3::errc::invalid_rdma_token);
    }
    CHECK(
        std::all_of(a_buffer.data(), a_buffer.data() + a_buffer.size(), [](std::byte b) { return b == std::byte{0}; }));
    CHECK(std::all_of(b_buffer.data(), b_buffer.data() + b_buffer.size(),
                      [](std::byte b) { return b == std::byte{0x5a}; }));
  }
  SUBCASE("a forged grant id, a fabric-style token or the other grant kind is refused") {
    s3::rdma_token forged = token;
    forged.endpoint[0] ^= std::byte{1};
    CHECK(server->write_from({"alice"}, forged, source_of(payload)) == s3::errc::invalid_rdma_token);
    s3::rdma_token virt = token;
    virt.virtual_addresses = true;
    CHECK(server->write_from({"alice"}, virt, source_of(payload)) == s3::errc::invalid_rdma_token);
    s3::rdma_token device = token;
    device.provider = s3::cuda_ipc_grant_provider;
    CHECK(!server->serves(s3::cuda_ipc_grant_provider));  // no device opener
    CHECK(server->write_from({"alice"}, device, source_of(payload)) == s3::errc::invalid_rdma_token);
    CHECK(a_buffer.data()[4096] == std::byte{0});
  }
  SUBCASE("the grant ends with the buffer, and with the client's session") {
    { shared_buffer gone = std::move(a_buffer); }
    CHECK(eventually([&] { return server->grant_count() == 1; }));
    CHECK(server->write_from({"alice"}, token, source_of(payload)) == s3::errc::invalid_rdma_token);
    bob.reset();  // bob's process exits: its session closes and the server unmaps its buffer
    CHECK(eventually([&] { return server->grant_count() == 0; }));
  }
}

TEST_CASE("local plane: S3 GET and PUT by memfd grant through a real server and client") {
  memory_store store;
  const auto path = socket_path();
  s3::server_config config;
  config.port = 0;
  config.users = {{"AK", "SK"}};
  auto local = open_server(path, {{"AK", "SK"}});
  config.rdma = std::make_shared<s3::rdma_server_planes>(std::vector<std::shared_ptr<s3::rdma_server_plane>>{local});
  s3::server server(store, config);
  server.listen();

  error_code ec;
  auto plane = open_client(path, {"AK", "SK"}, ec);
  REQUIRE(plane);
  s3::client_config c;
  c.endpoint = "http://127.0.0.1:" + std::to_string(server.local_endpoint().port());
  c.creds = {"AK", "SK"};
  c.part_size = 5 * mib;
  c.multipart_threshold = 6 * mib;
  c.rdma = plane;
  s3::client client(c);
  client.create_bucket("grants");

  const auto payload = random_bytes(13 * mib + 123, 7);  // three parts, each its own token
  auto source = shared_buffer::create(payload.size(), ec);
  REQUIRE(!ec);
  std::memcpy(source.data(), payload.data(), payload.size());
  plane->share(source, ec);
  REQUIRE(!ec);
  s3::transfer_report report;
  s3::put_options put;
  put.via = s3::transfer_via::rdma;
  put.report = &report;
  client.put_object("grants", "k", source.region(), std::move(put), ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(report.rdma_bytes == payload.size());
  CHECK(report.http_bytes == 0);

  auto destination = shared_buffer::create(payload.size(), ec);
  plane->share(destination, ec);
  REQUIRE(!ec);
  s3::get_options get;
  get.via = s3::transfer_via::rdma;
  get.report = &report;
  CHECK(client.get_object("grants", "k", destination.region(), std::move(get), ec) == payload.size());
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(report.rdma_bytes == payload.size());
  CHECK(std::memcmp(destination.data(), payload.data(), payload.size()) == 0);

  // Ordinary memory through the same client: not granted, so the body comes over HTTP.
  std::vector<std::byte> plain(payload.size());
  s3::get_options automatic;
  automatic.report = &report;
  CHECK(client.get_object("grants", "k", host_region(plain), std::move(automatic), ec) == payload.size());
  CHECK(!ec);
  CHECK(report.http_bytes == payload.size());
  CHECK(plain == payload);
  server.stop();
}

// -- issue 37: hostile local processes -------------------------------------------------------

namespace {

/// A connection to `path` that never says anything, once the server accepted it (a full listen
/// backlog waits, up to 2 s).
int silent_connection(const std::filesystem::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  const timeval limit{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.native().size() + 1);
  (void)::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  return fd;
}

}  // namespace

TEST_CASE("local plane: 300 silent connections do not keep a client out") {
  // Finding 2 of issue 37: connections that never authenticate wait in handshake slots, apart
  // from the sessions; a local user past its share of them loses its own oldest silent one.
  const auto path = socket_path();
  auto server = open_server(path, {{"alice", "a"}, {"bob", "b"}});
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) silent.push_back(silent_connection(path));
  int refused = 0;
  auto slowest = 0ms;
  for (int i = 0; i < 18; ++i) {
    error_code ec;
    const auto started = std::chrono::steady_clock::now();
    auto client = open_client(path, i % 2 ? s3::credentials{"bob", "b"} : s3::credentials{"alice", "a"}, ec);
    slowest = std::max(
        slowest, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started));
    if (!client) ++refused;
  }
  CHECK_MESSAGE(refused == 0, refused << " of 18 sessions refused while 300 silent connections stay");
  CHECK_MESSAGE(slowest < 1000ms, "slowest session took " << slowest.count() << " ms");
  for (const int fd : silent) ::close(fd);
}

TEST_CASE("local plane: a connect that waits on a full backlog ends at the client's timeout") {
  // A listener that never accepts, its backlog (of one) taken: connect waits, then ETIMEDOUT.
  const auto path = socket_path();
  const int listener = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.native().size() + 1);
  REQUIRE(::bind(listener, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 0) == 0);
  const int first = silent_connection(path);
  error_code ec;
  const auto started = std::chrono::steady_clock::now();
  auto client = s3::local_client_plane::open({path, {"alice", "a"}, nullptr, 300ms}, ec);
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(!client);
  CHECK_MESSAGE(ec == error_code(ETIMEDOUT, boost::system::generic_category()), ec.message());
  CHECK(took >= 250ms);
  CHECK(took < 2s);
  ::close(first);
  ::close(listener);
  std::filesystem::remove(path);
}

TEST_CASE("local plane: a local user's sessions are capped, and a session that holds nothing closes when idle") {
  const auto path = socket_path();
  s3::local_server_plane_config config;
  config.socket_path = path;
  config.users = {{"alice", "a"}};
  config.max_sessions_per_user = 4;
  config.idle_timeout = 300ms;
  error_code ec;
  auto server = s3::local_server_plane::open(config, ec);
  REQUIRE(!ec);
  std::vector<std::shared_ptr<s3::local_client_plane>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(open_client(path, {"alice", "a"}, ec));
    REQUIRE_MESSAGE(held.back(), ec.message());
  }
  // The fifth of this uid is refused after its proof, with a reason, and holds no slot.
  CHECK(!open_client(path, {"alice", "a"}, ec));
  CHECK(ec == error_code(EUSERS, boost::system::generic_category()));
  CHECK(server->session_count() == 4);
  CHECK(eventually([&] { return server->handshake_count() == 0; }));

  // One of them holds a buffer: it stays; the three that hold nothing are closed when idle.
  auto buffer = shared_buffer::create(1 << 20, ec);
  REQUIRE(!ec);
  held[0]->share(buffer, ec);
  REQUIRE(!ec);
  std::this_thread::sleep_for(600ms);
  CHECK(eventually([&] { return server->session_count() == 1; }));
  CHECK(server->grant_count() == 1);
  // A client whose idle session was closed opens a new one when it next needs it.
  auto later = shared_buffer::create(1 << 20, ec);
  held[1]->share(later, ec);
  CHECK_MESSAGE(!ec, ec.message());
  CHECK(server->grant_count() == 2);
  CHECK(server->session_count() == 2);
}

TEST_CASE("local plane: a PUT by grant hands the sink the server's copy, not the client's memory") {
  // Finding 4 of issue 37: the server's sink hashes a piece, then writes it. A client that
  // changes its buffer between the two must not make the server write bytes other than those it
  // hashed: the piece the sink sees must not change when the client's memory does.
  const auto path = socket_path();
  auto server = open_server(path, {{"alice", "a"}});
  error_code ec;
  auto alice = open_client(path, {"alice", "a"}, ec);
  REQUIRE(alice);
  auto buffer = shared_buffer::create(12 << 20, ec);
  REQUIRE(!ec);
  const auto payload = random_bytes(buffer.size(), 11);
  std::memcpy(buffer.data(), payload.data(), payload.size());
  alice->share(buffer, ec);
  REQUIRE(!ec);
  auto grant = alice->grant_access(buffer.region(), s3::rdma_op::read, far_future, ec);
  REQUIRE(!ec);
  std::vector<std::byte> hashed, written;
  std::size_t pieces = 0;
  REQUIRE(!server->read({"alice"}, token_of(grant), payload.size(), [&](std::span<const std::byte> d) {
    hashed.insert(hashed.end(), d.begin(), d.end());                                            // what the digest reads
    for (std::size_t i = 0; i < buffer.size(); i += 4096) buffer.data()[i] ^= std::byte{0xff};  // the client flips
    written.insert(written.end(), d.begin(), d.end());                                          // what the store writes
    ++pieces;
    return error_code{};
  }));
  CHECK(pieces > 1);
  CHECK(hashed == written);
  CHECK(hashed.size() == payload.size());
}

TEST_CASE("local plane: the default socket is in a private directory, refused when it is not ours") {
  CHECK(s3::default_grant_socket(9000, "/run/user/1000") == "/run/user/1000/sluice/sluice-9000.sock");
  CHECK(s3::default_grant_socket(9000, "") ==
        std::filesystem::path("/tmp/sluice-" + std::to_string(::geteuid())) / "sluice-9000.sock");

  const auto base = std::filesystem::temp_directory_path() / ("sluice-private-" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  const auto dir = base / "sluice";
  s3::local_server_plane_config config;
  config.socket_path = dir / "grants.sock";
  config.users = {{"alice", "a"}};
  config.private_directory = true;
  error_code ec;
  {
    auto server = s3::local_server_plane::open(config, ec);  // made 0700
    REQUIRE_MESSAGE(!ec, ec.message());
    struct stat st {};
    REQUIRE(::lstat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0700);
    CHECK(open_client(config.socket_path, {"alice", "a"}, ec));
  }
  std::filesystem::remove_all(dir);
  // A directory others may enter, and a symlink (even to a private directory), are refused.
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  CHECK(!s3::local_server_plane::open(config, ec));
  CHECK(ec.value() == EPERM);
  std::filesystem::remove_all(dir);
  const auto elsewhere = base / "elsewhere";
  REQUIRE(::mkdir(elsewhere.c_str(), 0700) == 0);
  std::filesystem::create_directory_symlink(elsewhere, dir);
  CHECK(!s3::local_server_plane::open(config, ec));
  CHECK(ec.value() == EPERM);
  CHECK(std::filesystem::is_empty(elsewhere));
  std::filesystem::remove_all(base);
}
