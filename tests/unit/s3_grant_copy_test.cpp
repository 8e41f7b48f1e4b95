// SPDX-License-Identifier: Apache-2.0
// The host-memory grant's copy (src/s3/grant_copy.hpp): pieces that cover the range exactly, and
// workers posted on a pool that copy them all, complete once, and never wait for each other (a
// pool of one thread finishes a transfer of several pieces).
#include "s3/grant_copy.hpp"

#include <doctest/doctest.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <future>
#include <vector>

namespace {

using namespace sluice;
namespace grant_copy = sluice::s3::grant_copy;

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 131 + i / 4096) & 0xFF);
  return out;
}

/// Runs async_copy on `pool` and returns what its completion said and how often it ran.
std::pair<bool, int> copy_on(boost::asio::thread_pool& pool, const s3::rdma_source& source,
                             std::vector<grant_copy::piece> pieces, std::size_t workers) {
  std::promise<bool> result;
  std::atomic<int> calls{0};
  grant_copy::async_copy(source, std::move(pieces), workers, pool.get_executor(), nullptr, [&](bool ok) {
    if (calls++ == 0) result.set_value(ok);
  });
  const bool ok = result.get_future().get();
  pool.wait();  // nothing may run after the completion; let a stray one show up in `calls`
  return {ok, calls.load()};
}

}  // namespace

TEST_CASE("grant copy: split covers the range in page-multiple pieces of at least 4 MiB") {
  std::vector<std::byte> to(1);
  std::vector<grant_copy::piece> pieces;
  grant_copy::split(pieces, to.data(), 100, std::size_t{1} << 20, 4);
  REQUIRE(pieces.size() == 1);  // under two pieces' worth: one piece
  CHECK(pieces[0].at == 100);
  CHECK(pieces[0].length == std::size_t{1} << 20);

  pieces.clear();
  const std::size_t n = (std::size_t{64} << 20) + 12345;
  grant_copy::split(pieces, to.data(), 7, n, 4);
  REQUIRE(pieces.size() == 4);
  std::size_t covered = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    CHECK(pieces[i].to == to.data() + covered);
    CHECK(pieces[i].at == 7 + covered);
    if (i + 1 < pieces.size()) CHECK(pieces[i].length % 4096 == 0);
    CHECK(pieces[i].length >= grant_copy::min_piece);
    covered += pieces[i].length;
  }
  CHECK(covered == n);

  pieces.clear();
  grant_copy::split(pieces, to.data(), 0, std::size_t{40} << 20, 64);  // at most n / 4 MiB pieces
  CHECK(pieces.size() == 10);
}

TEST_CASE("grant copy: one pool thread copies every piece from the mapping, completing once") {
  const auto source_bytes = pattern((std::size_t{24} << 20) + 333);
  std::vector<std::byte> to(source_bytes.size() - 1000);
  const s3::rdma_source source{const_region(source_bytes.data(), source_bytes.size()), 1000, to.size(), nullptr, {}};
  std::vector<grant_copy::piece> pieces;
  grant_copy::split(pieces, to.data(), 1000, to.size(), 4);
  REQUIRE(pieces.size() == 4);
  boost::asio::thread_pool pool(1);
  const auto [ok, calls] = copy_on(pool, source, std::move(pieces), 4);
  CHECK(ok);
  CHECK(calls == 1);
  CHECK(std::memcmp(to.data(), source_bytes.data() + 1000, to.size()) == 0);
}

TEST_CASE("grant copy: pieces read from the store's file, and a short file fails the transfer") {
  const auto bytes = pattern(std::size_t{9} << 20);
  char name[] = "/tmp/sluice-grant-copy-XXXXXX";
  const int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  ::unlink(name);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  std::vector<std::byte> to(bytes.size() - 4096);
  s3::rdma_source source{const_region(nullptr, bytes.size()), 4096, to.size(), nullptr, {}};
  source.file = fd;
  boost::asio::thread_pool pool(2);
  std::vector<grant_copy::piece> pieces;
  grant_copy::split(pieces, to.data(), 4096, to.size(), 2);
  REQUIRE(pieces.size() == 2);
  auto [ok, calls] = copy_on(pool, source, pieces, 2);
  CHECK(ok);
  CHECK(calls == 1);
  CHECK(std::memcmp(to.data(), bytes.data() + 4096, to.size()) == 0);

  REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes.size() / 2)) == 0);
  boost::asio::thread_pool again(2);
  std::tie(ok, calls) = copy_on(again, source, pieces, 2);
  CHECK(!ok);
  CHECK(calls == 1);
  ::close(fd);
}

TEST_CASE("grant copy: nothing to copy completes on the executor") {
  boost::asio::thread_pool pool(1);
  const s3::rdma_source source{};
  const auto [ok, calls] = copy_on(pool, source, {}, 4);
  CHECK(ok);
  CHECK(calls == 1);
}
