// SPDX-License-Identifier: Apache-2.0
// The registrar conformance suite, written once and run for every registrar
// (docs/requirements/registrar.md).
//
// A registrar joins the suite with a fixture type and one line:
//   TEST_CASE_TEMPLATE_INVOKE(registrar_conformance, my_fixture);
// The fixture provides:
//   using registrar_type;
//   registrar_type make_registrar()              a fresh registrar
//   memory_type make_memory(std::size_t size)    memory it accepts, starting on a page: .region()
//   sluice::region refused(std::span<std::byte> scratch)
//                                                a region of a memory kind it refuses; the suite
//                                                gives host scratch bytes, nothing reads them
//   static constexpr bool overlapping            whether registrations of overlapping memory may
//                                                be held at once (cudaHostRegister pins a page once)
// The suite only sees registrations through region(); whether a transport can use one is the
// transport suite's question (transport_conformance.hpp).
#pragma once

#include <sluice/concepts.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::testing {

/// Whether `got` is what registering `asked` must give: the same bytes on the same device, of the
/// same kind or refined to pinned (docs/requirements/registrar.md: region()).
inline bool covers_exactly(const region& got, const region& asked) {
  const bool kind =
      got.kind == asked.kind || (asked.kind == memory_kind::host_pageable && got.kind == memory_kind::host_pinned);
  return got.data == asked.data && got.size == asked.size && kind &&
         (asked.host_accessible() || got.device == asked.device);
}

inline bool unregistered(const region& r) { return r.data == nullptr && r.size == 0; }

}  // namespace sluice::testing

TEST_CASE_TEMPLATE_DEFINE("registrar conformance", Fixture, registrar_conformance) {
  using namespace sluice;
  using sluice::testing::covers_exactly;
  using sluice::testing::unregistered;
  using registrar_type = typename Fixture::registrar_type;
  using registration_type = typename registrar_type::registration_type;
  static_assert(registrar<registrar_type>);
  static_assert(registration<registration_type>);
  static_assert(!std::is_copy_constructible_v<registration_type>);

  Fixture fixture;
  registrar_type registrar = fixture.make_registrar();
  constexpr std::size_t slice = 64 * 1024;
  auto memory = fixture.make_memory(8 * slice);
  const region all = memory.region();
  REQUIRE(all.size == 8 * slice);

  SUBCASE("a registration covers exactly the region asked for, and success clears the error") {
    for (const std::size_t size : {std::size_t{1}, std::size_t{4095}, slice + 7, 3 * slice}) {
      for (const std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, slice - 3}) {
        CAPTURE(size);
        CAPTURE(offset);
        error_code ec = errc::declined;
        const region asked = all.subregion(offset, size, ec);
        REQUIRE(!ec);
        ec = errc::declined;
        const registration_type g = registrar.register_region(asked, ec);
        REQUIRE_MESSAGE(!ec, ec.message());
        CHECK(covers_exactly(g.region(), asked));
      }
    }
  }

  SUBCASE("an empty region of a kind it takes is accepted, with or without a pointer") {
    for (const region asked : {region{nullptr, 0, all.kind, all.device}, region{all.data, 0, all.kind, all.device}}) {
      error_code ec = errc::declined;
      const registration_type g = registrar.register_region(asked, ec);
      CHECK_MESSAGE(!ec, ec.message());
      CHECK(g.region().size == 0);
    }
  }

  SUBCASE("a null pointer with a size is invalid_argument, and the registration is empty") {
    error_code ec;
    const registration_type g = registrar.register_region(region{nullptr, 64, all.kind, all.device}, ec);
    CHECK(ec == errc::invalid_argument);
    CHECK(unregistered(g.region()));
  }

  SUBCASE("memory of a kind it cannot use is unsupported_memory, and the registration is empty") {
    std::array<std::byte, 256> scratch{};
    error_code ec;
    const registration_type g = registrar.register_region(fixture.refused(scratch), ec);
    CHECK(ec == errc::unsupported_memory);
    CHECK(unregistered(g.region()));
  }

  SUBCASE("a registration moves: the moved-from one is empty, an assigned-over one is undone") {
    error_code ec;
    registration_type first = registrar.register_region(all.subregion(0, slice, ec), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    registration_type moved(std::move(first));
    CHECK(unregistered(first.region()));  // NOLINT(bugprone-use-after-move): the contract under test
    CHECK(covers_exactly(moved.region(), all.subregion(0, slice, ec)));
    registration_type second = registrar.register_region(all.subregion(2 * slice, slice, ec), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    moved = std::move(second);             // the first registration is undone here
    CHECK(unregistered(second.region()));  // NOLINT(bugprone-use-after-move)
    CHECK(covers_exactly(moved.region(), all.subregion(2 * slice, slice, ec)));
    // What the assignment undid can be registered again.
    const registration_type again = registrar.register_region(all.subregion(0, slice, ec), ec);
    CHECK_MESSAGE(!ec, ec.message());
    CHECK(covers_exactly(again.region(), all.subregion(0, slice, ec)));
  }

  SUBCASE("released memory registers again, as often as asked") {
    for (int round = 0; round < 20; ++round) {
      error_code ec = errc::declined;
      const registration_type g = registrar.register_region(all, ec);
      REQUIRE_MESSAGE(!ec, "round ", round, ": ", ec.message());
      CHECK(covers_exactly(g.region(), all));
    }
  }

  SUBCASE("a registration outlives the registrar that made it") {
    error_code ec;
    const region asked = all.subregion(slice, slice, ec);
    std::optional<registration_type> g;
    {
      registrar_type brief = fixture.make_registrar();  // registrars need not move (fabric's has a mutex)
      g.emplace(brief.register_region(asked, ec));
      REQUIRE_MESSAGE(!ec, ec.message());
    }
    CHECK(covers_exactly(g->region(), asked));
    g.reset();  // undone after its registrar is gone
    const registration_type again = registrar.register_region(asked, ec);
    CHECK_MESSAGE(!ec, ec.message());
    CHECK(covers_exactly(again.region(), asked));
  }

  if constexpr (Fixture::overlapping) {
    SUBCASE("registrations of overlapping memory are held at once and undone in any order") {
      error_code ec;
      std::optional<registration_type> whole(registrar.register_region(all, ec));
      REQUIRE_MESSAGE(!ec, ec.message());
      const region inner = all.subregion(slice + 5, slice, ec);
      const registration_type part = registrar.register_region(inner, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      const registration_type twice = registrar.register_region(inner, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      whole.reset();
      CHECK(covers_exactly(part.region(), inner));
      CHECK(covers_exactly(twice.region(), inner));
      const region across = all.subregion(slice / 2, 2 * slice, ec);
      const registration_type straddling = registrar.register_region(across, ec);
      CHECK_MESSAGE(!ec, ec.message());
      CHECK(covers_exactly(straddling.region(), across));
    }
  }

  SUBCASE("threads register at once (each its own slice), and every registration covers its slice") {
    constexpr int threads = 4;
    constexpr int rounds = 25;
    std::vector<std::thread> workers;
    std::vector<int> failures(threads, 0);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        error_code ec;
        const region mine = all.subregion(static_cast<std::uint64_t>(2 * t) * slice, slice, ec);
        for (int r = 0; r < rounds; ++r) {
          const registration_type g = registrar.register_region(mine, ec);
          if (ec || !covers_exactly(g.region(), mine)) ++failures[static_cast<std::size_t>(t)];
        }
      });
    }
    for (auto& w : workers) w.join();
    for (int t = 0; t < threads; ++t) CHECK_MESSAGE(failures[static_cast<std::size_t>(t)] == 0, "thread ", t);
  }
}
