// SPDX-License-Identifier: Apache-2.0
// The transport conformance suite, written once and run for every transport.
//
// A transport joins the suite with a fixture type and one line:
//   TEST_CASE_TEMPLATE_INVOKE(transport_conformance, my_fixture);
// The fixture provides (a transport that declares `reads_only` never has its remotes written):
//   using transport_type, registrar_type;
//   transport_type transport; registrar_type registrar;
//   local_type make_local(std::size_t size)   -> .region(), .contents() -> std::vector<std::byte>,
//                                                .fill(std::span<const std::byte>),
//                                                .fill_at(std::size_t offset, std::span<const std::byte>)
//   remote_type make_remote(std::span<const std::byte> initial)
//                                             -> .descriptor(), .contents() -> std::vector<std::byte>
// Local and remote memory may live anywhere (host, GPU, another process); the suite only sees
// bytes through the fixture.
#pragma once

#include <sluice/concepts.hpp>

#include <doctest/doctest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace sluice::testing {

inline constexpr std::byte poison{0xA5};
inline constexpr std::size_t guard_bytes = 64;

/// `n` bytes of seeded random data (never zeros, which hide unwritten bytes).
inline std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(dist(gen));
  return out;
}

inline std::vector<std::byte> poisoned(std::size_t n) { return std::vector<std::byte>(n, poison); }

inline bool all_poison(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == poison; });
}

struct move_outcome {
  error_code ec;
  std::size_t bytes = 0;
  int completions = 0;
};

/// Runs one transport operation on a private io_context and records its completion(s).
template <class Start>
move_outcome run_move(Start&& start) {
  boost::asio::io_context context;
  move_outcome out;
  start(boost::asio::bind_executor(context, [&](error_code ec, std::size_t n) {
    out.ec = ec;
    out.bytes = n;
    ++out.completions;
  }));
  context.run();
  return out;
}

/// Sizes every transport must move exactly.
inline constexpr std::size_t conformance_sizes[] = {0, 1, 4095, 4096, 1024 * 1024 + 1};

}  // namespace sluice::testing

TEST_CASE_TEMPLATE_DEFINE("transport conformance", Fixture, transport_conformance) {
  using namespace sluice;
  using namespace sluice::testing;
  using transport_type = typename Fixture::transport_type;
  using registration_type = typename Fixture::registrar_type::registration_type;
  static_assert(sluice::transport<transport_type, registration_type>);

  // Transports whose far end is an object written whole (an S3 PUT) declare
  // `writes_whole_objects`: a write must then cover the remote, from offset 0.
  constexpr bool whole_objects = requires { requires transport_type::writes_whole_objects; };
  // Transports that only read (files) declare `reads_only`: every write is invalid_argument.
  constexpr bool reads_only = requires { requires transport_type::reads_only; };

  Fixture f;
  auto register_local = [&](auto& local) {
    error_code ec;
    auto reg = f.registrar.register_region(local.region(), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    return reg;
  };
  auto read = [&](const registration_type& reg, auto& remote, transfer_span span) {
    return run_move([&](auto h) { f.transport.async_read(reg, remote.descriptor(), span, std::move(h)); });
  };
  auto write = [&](const registration_type& reg, auto& remote, transfer_span span) {
    return run_move([&](auto h) { f.transport.async_write(reg, remote.descriptor(), span, std::move(h)); });
  };

  SUBCASE("read: every size arrives exactly, nothing outside the span is written") {
    for (std::size_t n : conformance_sizes) {
      CAPTURE(n);
      const auto data = random_bytes(n, static_cast<std::uint32_t>(n) + 1);
      auto remote = f.make_remote(data);
      auto local = f.make_local(n + 2 * guard_bytes);
      local.fill(poisoned(n + 2 * guard_bytes));
      auto reg = register_local(local);
      const auto out = read(reg, remote, {guard_bytes, 0, n});
      REQUIRE_MESSAGE(!out.ec, out.ec.message());
      CHECK(out.bytes == n);
      CHECK(out.completions == 1);
      const auto got = local.contents();
      CHECK(all_poison(std::span(got).first(guard_bytes)));
      CHECK(std::equal(data.begin(), data.end(), got.begin() + guard_bytes));
      CHECK(all_poison(std::span(got).last(guard_bytes)));
    }
  }

  if constexpr (reads_only) {
    SUBCASE("reads-only transports: a write is invalid_argument, nothing written") {
      auto sink = f.make_remote(poisoned(4096));
      auto local = f.make_local(4096);
      local.fill(random_bytes(4096, 11));
      auto reg = register_local(local);
      const auto out = write(reg, sink, {0, 0, 4096});
      CHECK(out.ec == errc::invalid_argument);
      CHECK(out.completions == 1);
      CHECK(all_poison(sink.contents()));
    }
  } else {
    SUBCASE("write: every size arrives exactly, nothing outside the span is written") {
      for (std::size_t n : conformance_sizes) {
        CAPTURE(n);
        const auto data = random_bytes(n, static_cast<std::uint32_t>(n) + 7);
        // A transport that writes whole objects replaces the remote: no guard bytes around it.
        const std::size_t guard = whole_objects ? 0 : guard_bytes;
        auto remote = f.make_remote(poisoned(n + 2 * guard));
        auto local = f.make_local(n + guard);
        local.fill(poisoned(n + guard));
        local.fill_at(guard, data);
        auto reg = register_local(local);
        const auto out = write(reg, remote, {guard, guard, n});
        REQUIRE_MESSAGE(!out.ec, out.ec.message());
        CHECK(out.bytes == n);
        CHECK(out.completions == 1);
        const auto got = remote.contents();
        REQUIRE(got.size() == n + 2 * guard);
        CHECK(all_poison(std::span(got).first(guard)));
        CHECK(std::equal(data.begin(), data.end(), got.begin() + static_cast<std::ptrdiff_t>(guard)));
        CHECK(all_poison(std::span(got).last(guard)));
      }
    }
  }

  if constexpr (whole_objects) {
    SUBCASE("whole-object writes: a span that is not the whole remote is invalid_argument, nothing written") {
      auto sink = f.make_remote(poisoned(4096));
      auto local = f.make_local(4096);
      local.fill(random_bytes(4096, 10));
      auto reg = register_local(local);
      for (auto span : {transfer_span{0, 0, 4095}, transfer_span{0, 1, 4095}, transfer_span{0, 0, 0}}) {
        CAPTURE(span.remote_offset);
        CAPTURE(span.length);
        const auto out = write(reg, sink, span);
        CHECK(out.ec == errc::invalid_argument);
        CHECK(out.completions == 1);
        CHECK(all_poison(sink.contents()));
      }
    }
  }

  SUBCASE("ranges: a span from the middle of the remote lands at the local offset") {
    const std::size_t size = 256 * 1024 + 3;
    const auto data = random_bytes(size, 42);
    auto remote = f.make_remote(data);
    for (const auto& c : {std::array<std::size_t, 3>{1, 4095, 0},
                          {4096, 4096, 17},
                          {size - 1, 1, 3},
                          {12345, size - 12345, 0},
                          {size, 0, 0}}) {
      const std::size_t remote_offset = c[0];
      const std::size_t length = c[1];
      const std::size_t local_offset = c[2];
      CAPTURE(remote_offset);
      CAPTURE(length);
      auto local = f.make_local(local_offset + length + guard_bytes);
      local.fill(poisoned(local_offset + length + guard_bytes));
      auto reg = register_local(local);
      const auto out = read(reg, remote, {local_offset, remote_offset, length});
      REQUIRE_MESSAGE(!out.ec, out.ec.message());
      CHECK(out.bytes == length);
      const auto got = local.contents();
      CHECK(all_poison(std::span(got).first(local_offset)));
      CHECK(std::equal(data.begin() + static_cast<std::ptrdiff_t>(remote_offset),
                       data.begin() + static_cast<std::ptrdiff_t>(remote_offset + length),
                       got.begin() + static_cast<std::ptrdiff_t>(local_offset)));
      CHECK(all_poison(std::span(got).last(guard_bytes)));
    }
  }

  SUBCASE("local region too small: region_too_small, nothing written anywhere") {
    const auto data = random_bytes(4096, 5);
    auto remote = f.make_remote(data);
    auto local = f.make_local(4095);
    local.fill(poisoned(4095));
    auto reg = register_local(local);
    auto out = read(reg, remote, {0, 0, 4096});
    CHECK(out.ec == errc::region_too_small);
    CHECK(out.completions == 1);
    CHECK(all_poison(local.contents()));

    out = read(reg, remote, {1, 0, 4095});  // fits in size, not at that offset
    CHECK(out.ec == errc::region_too_small);
    CHECK(all_poison(local.contents()));

    if constexpr (!reads_only) {
      auto sink = f.make_remote(poisoned(8192));
      out = write(reg, sink, {0, 0, 4096});
      CHECK(out.ec == errc::region_too_small);
      CHECK(all_poison(sink.contents()));
    }
  }

  SUBCASE("bad remote range: bad_range, nothing written anywhere") {
    const auto data = random_bytes(4096, 6);
    auto remote = f.make_remote(data);
    auto local = f.make_local(8192);
    local.fill(poisoned(8192));
    auto reg = register_local(local);
    for (auto span : {transfer_span{0, 1, 4096}, transfer_span{0, 4097, 0}, transfer_span{0, 4000, 97}}) {
      const auto out = read(reg, remote, span);
      CHECK(out.ec == errc::bad_range);
      CHECK(all_poison(local.contents()));
    }
    if constexpr (!reads_only) {
      auto sink = f.make_remote(poisoned(100));
      const auto out = write(reg, sink, {0, 50, 51});
      CHECK(out.ec == errc::bad_range);
      CHECK(all_poison(sink.contents()));
    }
  }

  SUBCASE("offsets near 2^64 are rejected, not wrapped") {
    auto remote = f.make_remote(random_bytes(4096, 8));
    auto local = f.make_local(4096);
    local.fill(poisoned(4096));
    auto reg = register_local(local);
    constexpr auto huge = std::numeric_limits<std::uint64_t>::max();
    CHECK(read(reg, remote, {0, huge, 2}).ec == errc::bad_range);
    CHECK(read(reg, remote, {huge, 0, 2}).ec == errc::region_too_small);
    CHECK(read(reg, remote, {0, 1, huge}).ec == errc::region_too_small);
    CHECK(all_poison(local.contents()));
  }

  SUBCASE("many operations in flight at once each complete exactly once") {
    constexpr std::size_t parts = 16;
    constexpr std::size_t part = 65536 + 1;
    const auto data = random_bytes(parts * part, 9);
    auto remote = f.make_remote(data);
    auto local = f.make_local(parts * part);
    local.fill(poisoned(parts * part));
    auto reg = register_local(local);
    boost::asio::io_context context;
    int completed = 0;
    std::size_t moved = 0;
    for (std::size_t i = 0; i < parts; ++i) {
      f.transport.async_read(reg, remote.descriptor(), {i * part, (parts - 1 - i) * part, part},
                             boost::asio::bind_executor(context, [&](error_code ec, std::size_t n) {
                               CHECK(!ec);
                               moved += n;
                               ++completed;
                             }));
    }
    context.run();
    CHECK(completed == static_cast<int>(parts));
    CHECK(moved == parts * part);
    const auto got = local.contents();
    for (std::size_t i = 0; i < parts; ++i) {
      CHECK(std::equal(data.begin() + static_cast<std::ptrdiff_t>((parts - 1 - i) * part),
                       data.begin() + static_cast<std::ptrdiff_t>((parts - i) * part),
                       got.begin() + static_cast<std::ptrdiff_t>(i * part)));
    }
  }
}
