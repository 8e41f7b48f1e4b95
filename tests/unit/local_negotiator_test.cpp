// SPDX-License-Identifier: Apache-2.0
#include <sluice/local_negotiator.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/path.hpp>

#include <doctest/doctest.h>

#include "conformance/host_fixtures.hpp"
#include "conformance/negotiator_conformance.hpp"
#include "conformance/transport_conformance.hpp"

namespace {

using namespace sluice;

// A store that cannot lend its bytes in place: exercises the negotiator's staged-read branch.
class unmappable_store {
 public:
  using writer_type = memory_store::writer_type;
  explicit unmappable_store(memory_store& inner) : inner_(&inner) {}
  void create_bucket(std::string_view b, error_code& ec) { inner_->create_bucket(b, ec); }
  void remove_bucket(std::string_view b, error_code& ec) { inner_->remove_bucket(b, ec); }
  std::vector<bucket_info> list_buckets(error_code& ec) { return inner_->list_buckets(ec); }
  object_info head(const object_ref& o, error_code& ec) {
    ++heads;
    return inner_->head(o, ec);
  }
  std::size_t read(const object_ref& o, std::uint64_t off, std::span<std::byte> out, error_code& ec) {
    ++reads;
    return inner_->read(o, off, out, ec);
  }
  writer_type begin_put(const object_ref& o, error_code& ec) { return inner_->begin_put(o, ec); }
  void remove(const object_ref& o, error_code& ec) { inner_->remove(o, ec); }
  list_result list(const list_request& l, error_code& ec) { return inner_->list(l, ec); }
  int heads = 0;
  int reads = 0;

 private:
  memory_store* inner_;
};

static_assert(object_store<unmappable_store>);
static_assert(!mappable_store<unmappable_store>);
static_assert(mappable_store<memory_store>);
static_assert(negotiator<local_negotiator<memory_store>>);
static_assert(negotiator<local_negotiator<unmappable_store>>);

// The negotiator conformance suite over a memory_store, lent in place or (unmappable_store) staged.
struct local_fixture_base {
  using transport_type = loopback_transport;
  using registrar_type = host_registrar;
  local_fixture_base() {
    error_code ec;
    inner.create_bucket("bucket", ec);
    REQUIRE_MESSAGE(!ec, ec.message());
  }
  object_ref seed(std::span<const std::byte> data) {
    const object_ref obj = absent();
    error_code ec;
    auto w = inner.begin_put(obj, ec);
    w.write(data, ec);
    (void)w.commit({}, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    return obj;
  }
  object_ref absent() { return {"bucket", "key-" + std::to_string(next++)}; }
  std::optional<std::vector<std::byte>> published(const object_ref& obj) {
    error_code ec;
    const object_info info = inner.head(obj, ec);
    if (ec) return std::nullopt;
    std::vector<std::byte> out(static_cast<std::size_t>(info.size));
    out.resize(inner.read(obj, 0, out, ec));
    REQUIRE_MESSAGE(!ec, ec.message());
    return out;
  }
  static testing::host_buffer make_local(std::size_t size) { return testing::host_buffer(size); }

  memory_store inner;
  int next = 0;
  loopback_transport transport;
  host_registrar registrar;
};
struct local_mapped_fixture : local_fixture_base {
  using negotiator_type = local_negotiator<memory_store>;
  negotiator_type negotiator{inner};
};
struct local_staged_fixture : local_fixture_base {
  using negotiator_type = local_negotiator<unmappable_store>;
  unmappable_store store{inner};
  negotiator_type negotiator{store};
};

}  // namespace

TYPE_TO_STRING(local_mapped_fixture);
TYPE_TO_STRING(local_staged_fixture);
TEST_CASE_TEMPLATE_INVOKE(negotiator_conformance, local_mapped_fixture, local_staged_fixture);

TEST_CASE("a store without map is read through a staging buffer, with the same results") {
  memory_store inner;
  unmappable_store store(inner);
  error_code ec;
  store.create_bucket("bucket", ec);
  path p{local_negotiator<unmappable_store>{store}, host_registrar{}, loopback_transport{}};
  auto data = testing::random_bytes(70001, 12);
  p.put({"bucket", "k"}, host_region(data));
  auto out = testing::poisoned(1000);
  CHECK(p.get({"bucket", "k"}, host_region(out), byte_range{69001, 1000}).bytes == 1000);
  CHECK(std::equal(data.begin() + 69001, data.end(), out.begin()));
  CHECK(store.heads == 1);
  CHECK(store.reads == 1);

  p.get({"bucket", "k"}, host_region(out), byte_range{69002, 1000}, ec);
  CHECK(ec == errc::bad_range);
  CHECK(store.reads == 1);  // the range is checked before any byte is read
}

TEST_CASE("a get keeps reading the version it negotiated while a put replaces it") {
  memory_store store;
  error_code ec;
  store.create_bucket("bucket", ec);
  local_negotiator<memory_store> n{store};
  auto v1 = testing::random_bytes(4096, 1);
  auto v2 = testing::random_bytes(4096, 2);
  path p{local_negotiator<memory_store>{store}, host_registrar{}, loopback_transport{}};
  p.put({"bucket", "k"}, host_region(v1));

  // Negotiate a get by hand, replace the object, then let the transport run.
  boost::asio::io_context context;
  std::optional<local_negotiator<memory_store>::session_type> session;
  n.async_negotiate(transfer_request{{"bucket", "k"}, {}, direction::get},
                    boost::asio::bind_executor(context, [&](error_code e, auto s) {
                      REQUIRE(!e);
                      session.emplace(std::move(s));
                    }));
  context.run();
  REQUIRE(session);
  p.put({"bucket", "k"}, host_region(v2));
  auto out = testing::poisoned(4096);
  CHECK(loopback_transport::copy(direction::get, host_region(out), session->remote(), session->span(), ec) == 4096);
  CHECK(out == v1);
  auto now = testing::poisoned(4096);
  p.get({"bucket", "k"}, host_region(now));
  CHECK(now == v2);
}

TEST_CASE("a put whose transport moved fewer bytes than agreed is not published") {
  memory_store store;
  error_code ec;
  store.create_bucket("bucket", ec);
  local_negotiator<memory_store> n{store};
  boost::asio::io_context context;
  std::optional<local_negotiator<memory_store>::session_type> session;
  n.async_negotiate(transfer_request{{"bucket", "k"}, {0, 100}, direction::put},
                    boost::asio::bind_executor(context, [&](error_code e, auto s) {
                      REQUIRE(!e);
                      session.emplace(std::move(s));
                    }));
  context.run();
  context.restart();
  error_code result;
  n.async_complete(std::move(*session), error_code{}, 99,
                   boost::asio::bind_executor(context, [&](error_code e, transfer_result) { result = e; }));
  context.run();
  CHECK(result == errc::protocol_violation);
  store.head({"bucket", "k"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(store.used_bytes() == 0);
}
