// SPDX-License-Identifier: Apache-2.0
// The negotiator conformance suite, written once and run for every negotiator
// (docs/requirements/negotiator.md): what a path relies on when it composes one with a transport.
//
// A negotiator joins the suite with a fixture type and one line:
//   TEST_CASE_TEMPLATE_INVOKE(negotiator_conformance, my_fixture);
// The fixture provides:
//   using negotiator_type, transport_type, registrar_type;   negotiates_for<negotiator, transport>
//   negotiator_type negotiator; transport_type transport; registrar_type registrar;
//   object_ref seed(std::span<const std::byte> data)   an object (or file) holding `data`
//   object_ref absent()                                 a name with nothing behind it yet
//   local_type make_local(std::size_t size)             -> .region(), .contents()
//   std::optional<std::vector<std::byte>> published(const object_ref&)
//                                                       what a get would read now, nullopt when
//                                                       nothing is there (writing negotiators only)
// and may declare (all false when absent):
//   static constexpr bool reads_only        every put is errc::invalid_argument (files)
//   static constexpr bool missing_is_errno  a missing object fails with the errno of open
//                                           (ENOENT), not with an error equal to
//                                           sluice::condition::not_found
// The bytes move through the fixture's transport, as a path moves them; the suite checks what the
// negotiator agreed and what its completion reports.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/error.hpp>

#include <doctest/doctest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace sluice::testing {

/// How one asynchronous operation completed.
template <class Value>
struct async_outcome {
  error_code ec;
  std::optional<Value> value;
  int completions = 0;
  bool on_executor = true;         ///< every completion ran inside the handler's associated executor
  bool inline_completion = false;  ///< it completed inside the initiating function
};

/// Starts an operation whose handler is bound to a private io_context and runs that context until
/// the operation completed (at most 60 s): the completion must come through the handler's executor,
/// never inside the initiating function.
template <class Value, class Start>
async_outcome<Value> run_async(Start&& start) {
  boost::asio::io_context context;
  auto work = boost::asio::make_work_guard(context);
  async_outcome<Value> out;
  start(boost::asio::bind_executor(context, [&](error_code ec, Value v) {
    out.ec = ec;
    out.value.emplace(std::move(v));
    ++out.completions;
    out.on_executor = out.on_executor && context.get_executor().running_in_this_thread();
    work.reset();
  }));
  out.inline_completion = out.completions != 0;
  context.run_for(std::chrono::seconds(60));
  return out;
}

/// `n` bytes of seeded random data.
inline std::vector<std::byte> negotiated_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(dist(gen));
  return out;
}

/// Negotiates, moves and completes one transfer with a fixture's parts, checking each step's
/// completion. Returns the completion's error and result.
template <class Fixture>
class negotiator_driver {
 public:
  using negotiator_type = typename Fixture::negotiator_type;
  using session_type = typename negotiator_type::session_type;

  explicit negotiator_driver(Fixture& f) : f_(&f) {}

  async_outcome<session_type> negotiate(const transfer_request& request) {
    auto out = run_async<session_type>([&](auto h) { f_->negotiator.async_negotiate(request, std::move(h)); });
    CHECK(out.completions == 1);
    CHECK(out.on_executor);
    CHECK_FALSE(out.inline_completion);
    return out;
  }
  async_outcome<transfer_result> complete(session_type&& s, error_code transport_error, std::uint64_t bytes) {
    auto out = run_async<transfer_result>(
        [&](auto h) { f_->negotiator.async_complete(std::move(s), transport_error, bytes, std::move(h)); });
    CHECK(out.completions == 1);
    CHECK(out.on_executor);
    CHECK_FALSE(out.inline_completion);
    if (out.value) CHECK(out.value->negotiator == negotiator_type::name);
    return out;
  }
  /// Moves the session's span between `local` and the session's remote (get: into local).
  template <class Local>
  async_outcome<std::size_t> move(const session_type& s, Local& local, direction dir) {
    error_code ec;
    auto reg = f_->registrar.register_region(local.region(), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    auto out = run_async<std::size_t>([&](auto h) {
      if (dir == direction::get) {
        f_->transport.async_read(reg, s.remote(), s.span(), std::move(h));
      } else {
        f_->transport.async_write(reg, s.remote(), s.span(), std::move(h));
      }
    });
    CHECK(out.completions == 1);
    return out;
  }

 private:
  Fixture* f_;
};

}  // namespace sluice::testing

TEST_CASE_TEMPLATE_DEFINE("negotiator conformance", Fixture, negotiator_conformance) {
  using namespace sluice;
  using namespace sluice::testing;
  using negotiator_type = typename Fixture::negotiator_type;
  static_assert(negotiator<negotiator_type>);
  static_assert(negotiates_for<negotiator_type, typename Fixture::transport_type>);
  constexpr bool reads_only = requires { requires Fixture::reads_only; };
  constexpr bool missing_is_errno = requires { requires Fixture::missing_is_errno; };

  Fixture f;
  negotiator_driver<Fixture> d(f);
  const auto get = [](const object_ref& obj, byte_range range) { return transfer_request{obj, range, direction::get}; };
  const auto put = [](const object_ref& obj, byte_range range) { return transfer_request{obj, range, direction::put}; };

  SUBCASE("a get agrees the whole object, the transport moves it, completion reports the bytes") {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{70001}}) {
      CAPTURE(n);
      const auto data = negotiated_bytes(n, static_cast<std::uint32_t>(n) + 3);
      const object_ref obj = f.seed(data);
      auto agreed = d.negotiate(get(obj, {}));
      REQUIRE_MESSAGE(!agreed.ec, agreed.ec.message());
      CHECK(agreed.value->span().length == n);
      auto local = f.make_local(n);
      const auto moved = d.move(*agreed.value, local, direction::get);
      REQUIRE_MESSAGE(!moved.ec, moved.ec.message());
      CHECK(*moved.value == n);
      CHECK(local.contents() == data);
      const auto done = d.complete(std::move(*agreed.value), {}, n);
      CHECK_MESSAGE(!done.ec, done.ec.message());
      CHECK(done.value->bytes == n);
    }
  }
  SUBCASE("a get of a range agrees exactly those bytes") {
    const auto data = negotiated_bytes(5000, 5);
    const object_ref obj = f.seed(data);
    for (const byte_range range : {byte_range{100, 1000}, byte_range{4000, std::nullopt}, byte_range{5000, 0}}) {
      CAPTURE(range.offset);
      const std::uint64_t length = range.length.value_or(data.size() - range.offset);
      auto agreed = d.negotiate(get(obj, range));
      REQUIRE_MESSAGE(!agreed.ec, agreed.ec.message());
      CHECK(agreed.value->span().length == length);
      auto local = f.make_local(length);
      const auto moved = d.move(*agreed.value, local, direction::get);
      REQUIRE_MESSAGE(!moved.ec, moved.ec.message());
      const auto first = data.begin() + static_cast<std::ptrdiff_t>(range.offset);
      CHECK(local.contents() == std::vector<std::byte>(first, first + static_cast<std::ptrdiff_t>(length)));
      CHECK_MESSAGE(!d.complete(std::move(*agreed.value), {}, length).ec, "complete");
    }
  }
  SUBCASE("a range outside the object is bad_range; a missing object fails") {
    const auto data = negotiated_bytes(100, 6);
    const object_ref obj = f.seed(data);
    for (const byte_range range : {byte_range{101, std::nullopt}, byte_range{0, 101}, byte_range{90, 11}}) {
      CAPTURE(range.offset);
      CHECK(d.negotiate(get(obj, range)).ec == errc::bad_range);
    }
    const auto missing = d.negotiate(get(f.absent(), {}));
    CHECK(missing.ec);
    if constexpr (!missing_is_errno) CHECK(missing.ec == condition::not_found);
  }
  SUBCASE("completion: a transport's error is the result, a short move is protocol_violation") {
    const object_ref obj = f.seed(negotiated_bytes(64, 7));
    auto agreed = d.negotiate(get(obj, {}));
    REQUIRE_MESSAGE(!agreed.ec, agreed.ec.message());
    CHECK(d.complete(std::move(*agreed.value), errc::region_too_small, 0).ec == errc::region_too_small);
    agreed = d.negotiate(get(obj, {}));
    REQUIRE_MESSAGE(!agreed.ec, agreed.ec.message());
    CHECK(d.complete(std::move(*agreed.value), {}, 63).ec == errc::protocol_violation);
  }
  if constexpr (reads_only) {
    SUBCASE("a put is invalid_argument") { CHECK(d.negotiate(put(f.absent(), {0, 10})).ec == errc::invalid_argument); }
  } else {
    SUBCASE("a put agrees the whole source; the moved bytes are published whole at completion") {
      for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{70001}}) {
        CAPTURE(n);
        const auto data = negotiated_bytes(n, static_cast<std::uint32_t>(n) + 9);
        const object_ref obj = f.absent();
        auto agreed = d.negotiate(put(obj, {0, n}));
        REQUIRE_MESSAGE(!agreed.ec, agreed.ec.message());
        CHECK(agreed.value->span().length == n);
        auto local = f.make_local(n);
        local.fill(data);
        const auto moved = d.move(*agreed.value, local, direction::put);
        REQUIRE_MESSAGE(!moved.ec, moved.ec.message());
        const auto done = d.complete(std::move(*agreed.value), {}, n);
        CHECK_MESSAGE(!done.ec, done.ec.message());
        CHECK(done.value->bytes == n);
        CHECK(f.published(obj) == std::optional(data));
      }
    }
    SUBCASE("a put whose transport failed publishes nothing") {
      const object_ref obj = f.absent();
      auto agreed = d.negotiate(put(obj, {0, 10}));
      REQUIRE_MESSAGE(!agreed.ec, agreed.ec.message());
      CHECK(d.complete(std::move(*agreed.value), errc::region_too_small, 0).ec == errc::region_too_small);
      CHECK(f.published(obj) == std::nullopt);
    }
    SUBCASE("a put's range must be {0, size}: else invalid_argument") {
      CHECK(d.negotiate(put(f.absent(), {5, 10})).ec == errc::invalid_argument);
      CHECK(d.negotiate(put(f.absent(), {0, std::nullopt})).ec == errc::invalid_argument);
    }
  }
}
