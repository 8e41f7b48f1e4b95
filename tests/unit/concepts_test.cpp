#include <sluice/concepts.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>

#include <doctest/doctest.h>

// What each concept accepts and rejects. Rejections that must stop a build are in
// tests/compile_fail/; these are the same facts as static_asserts, cheap to keep next to the models.
namespace {

using namespace sluice;

struct copyable_registration {
  sluice::region r;
  [[nodiscard]] const sluice::region& region() const { return r; }
};
struct registrar_without_type {
  host_registration register_region(const sluice::region&, error_code&) { return {}; }
};
struct transport_without_name {
  using remote_type = sluice::region;
  template <class G, class H>
  void async_read(const G&, const sluice::region&, transfer_span, H&&) {}
  template <class G, class H>
  void async_write(const G&, const sluice::region&, transfer_span, H&&) {}
};

static_assert(registration<host_registration>);
static_assert(!registration<copyable_registration>);
static_assert(registrar<host_registrar>);
static_assert(!registrar<registrar_without_type>);
static_assert(transport<loopback_transport, host_registration>);
static_assert(!transport<transport_without_name, host_registration>);
static_assert(!transport<loopback_transport, copyable_registration>);
static_assert(negotiator<local_negotiator<memory_store>>);
static_assert(!negotiator<loopback_transport>);
static_assert(object_store<memory_store>);
static_assert(mappable_store<memory_store>);
static_assert(servable_store<memory_store>);
static_assert(!object_store<host_registrar>);
static_assert(object_writer<memory_store::writer_type>);

}  // namespace

TEST_CASE("transfer_span compares by value") {
  CHECK(transfer_span{1, 2, 3} == transfer_span{1, 2, 3});
  CHECK(transfer_span{1, 2, 3} != transfer_span{1, 2, 4});
}
