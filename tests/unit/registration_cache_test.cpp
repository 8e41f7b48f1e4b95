// SPDX-License-Identifier: Apache-2.0
#include <sluice/detail/registration_cache.hpp>
#include <sluice/pinned_budget.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>

namespace {

using cache = sluice::detail::registration_cache<std::string, const int>;

bool never(const std::string&, const int&) { return false; }

auto named(const std::string& name) {
  return [name](const std::string& k, const int&) { return k == name; };
}

}  // namespace

TEST_CASE("registration_cache: found by predicate, least recently used out first, bounded by bytes and entries") {
  cache c(100, 3);
  CHECK(c.insert("a", std::make_shared<const int>(1), 10, never));
  CHECK(c.insert("b", std::make_shared<const int>(2), 10, never));
  CHECK(c.insert("c", std::make_shared<const int>(3), 10, never));
  REQUIRE(c.find(named("a")) != nullptr);  // a is now the most recently used: b goes first
  CHECK(c.insert("d", std::make_shared<const int>(4), 10, never));
  CHECK(c.find(named("b")) == nullptr);
  CHECK(*c.find(named("a")) == 1);
  CHECK(c.stats().entries == 3);
  CHECK(c.stats().evictions == 1);
  // Bytes: 80 more pushes out the least recently used (c) until 100 holds.
  CHECK(c.insert("big", std::make_shared<const int>(5), 80, never));
  CHECK(c.stats().bytes == 100);
  CHECK(c.find(named("c")) == nullptr);
  CHECK(c.find(named("d")) != nullptr);
  CHECK(c.find(named("a")) != nullptr);
  // Too large to keep at all, and a cache of no entries keeps nothing.
  CHECK_FALSE(c.takes(101));
  CHECK_FALSE(c.insert("huge", std::make_shared<const int>(6), 101, never));
  cache none(100, 0);
  CHECK_FALSE(none.insert("a", std::make_shared<const int>(1), 1, never));
  CHECK(none.stats().entries == 0);
}

TEST_CASE("registration_cache: what a transfer holds is never evicted, the bound is exceeded only meanwhile") {
  cache c(20, 2);
  auto held = std::make_shared<const int>(1);
  CHECK(c.insert("held", held, 10, never));
  CHECK(c.insert("b", std::make_shared<const int>(2), 10, never));
  CHECK(c.insert("c", std::make_shared<const int>(3), 10, never));  // evicts b, not held (older)
  CHECK(c.find(named("held")) == held);
  CHECK(c.find(named("b")) == nullptr);
  auto c_held = c.find(named("c"));
  auto d = std::make_shared<const int>(4);
  CHECK(c.insert("d", d, 10, never));  // all in use: kept over the bound
  CHECK(c.stats().entries == 3);
  CHECK(c.stats().bytes == 30);
  held.reset();
  c_held.reset();
  d.reset();
  CHECK(c.insert("e", std::make_shared<const int>(5), 10, never));  // now the unheld oldest go
  CHECK(c.stats().entries == 2);
  CHECK(c.stats().bytes == 20);
  CHECK(c.find(named("held")) == nullptr);
  CHECK(c.find(named("e")) != nullptr);
}

TEST_CASE("registration_cache: a second miss of the same registration keeps the first, erase_if and clear") {
  cache c(100, 10);
  auto first = std::make_shared<const int>(1);
  CHECK(c.insert("x", first, 10, never));
  CHECK_FALSE(c.insert("x", std::make_shared<const int>(2), 10, named("x")));
  CHECK(c.find(named("x")) == first);
  CHECK(c.stats().insertions == 1);
  CHECK(c.insert("y", std::make_shared<const int>(3), 10, never));
  c.erase_if([](const std::string& k, const int& v) { return k == "x" || v == 3; });
  CHECK(c.stats().entries == 0);
  CHECK(c.stats().bytes == 0);
  CHECK(*first == 1);  // the holder keeps it
  CHECK(c.insert("z", std::make_shared<const int>(4), 10, never));
  c.clear();
  CHECK(c.stats().entries == 0);
  CHECK(c.find(named("z")) == nullptr);
}

TEST_CASE("registration_cache: caches sharing a pinned budget never hold more than it together") {
  auto budget = std::make_shared<sluice::pinned_budget>(100);
  cache grants(1000, 10, budget);  // each cache's own bound is far above the shared one
  cache fabric(1000, 10, budget);
  CHECK(fabric.insert("f1", std::make_shared<const int>(1), 40, never));
  const auto held = fabric.find(named("f1"));  // a transfer holds it: never evicted
  CHECK(grants.insert("g1", std::make_shared<const int>(2), 30, never));
  CHECK(grants.insert("g2", std::make_shared<const int>(3), 30, never));
  CHECK(budget->used() == 100);
  // Full: g3 fits only by evicting this cache's own least recently used (g1), never the other's.
  CHECK(grants.insert("g3", std::make_shared<const int>(4), 30, never));
  CHECK(grants.find(named("g1")) == nullptr);
  CHECK(fabric.find(named("f1")) != nullptr);
  CHECK(budget->used() == 100);
  // Larger than what this cache can free (60, with 40 the other's): not kept, nothing pinned
  // more, and nothing evicted for it.
  CHECK_FALSE(grants.insert("g4", std::make_shared<const int>(5), 70, never));
  CHECK(budget->used() == 100);
  CHECK(grants.find(named("g2")) != nullptr);
  CHECK(budget->stats().refused > 0);
  // Gone from the cache: given back.
  fabric.clear();
  CHECK(budget->used() == 60);
  grants.clear();
  CHECK(budget->used() == 0);
  {
    cache scoped(1000, 10, budget);
    CHECK(scoped.insert("s", std::make_shared<const int>(6), 50, never));
    CHECK(budget->used() == 50);
  }
  CHECK(budget->used() == 0);  // a cache destroyed gives its entries' bytes back
}

TEST_CASE("pinned_budget: takes what fits, refuses the rest, a quarter of RAM by default") {
  sluice::pinned_budget b(10);
  CHECK(b.try_take(6));
  CHECK_FALSE(b.try_take(5));
  CHECK(b.try_take(4));
  CHECK_FALSE(b.try_take(1));
  b.give_back(10);
  CHECK(b.used() == 0);
  CHECK_FALSE(b.try_take(11));
  CHECK(b.stats().refused == 3);
  CHECK(sluice::pinned_budget::default_limit() > 0);
}
