// SPDX-License-Identifier: Apache-2.0
#include <sluice/concepts.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/s3/fs_store.hpp>  // header only here: no link to sluice::s3
#ifdef SLUICE_TEST_WITH_S3
#include <sluice/s3/gateway_store.hpp>
#endif

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

// The optional capabilities each shipped store models, and those it does not: the server uses
// exactly these (s3::any_store::wrap), so a member renamed or retyped fails here, not silently.
static_assert(conditional_writer<memory_store::writer_type>);
static_assert(conditional_upload_store<memory_store>);
static_assert(!remote_store<memory_store>);
static_assert(!owner_recording_store<memory_store> && !owner_reporting_store<memory_store>);
static_assert(settings_keeping_store<memory_store>);
static_assert(!describing_store<memory_store> && !range_mapping_store<memory_store>);
static_assert(!streaming_store<memory_store> && !speculating_store<memory_store>);
static_assert(!async_mapping_store<memory_store>);
static_assert(object_mapping<memory_store::mapping_type>);
static_assert(!partial_mapping<memory_store::mapping_type> && !file_backed_mapping<memory_store::mapping_type>);
static_assert(!growing_mapping<memory_store::mapping_type>);

using s3::fs_store;
static_assert(servable_store<fs_store>);
static_assert(owner_recording_store<fs_store> && owner_reporting_store<fs_store>);
static_assert(describing_store<fs_store>);
static_assert(settings_keeping_store<fs_store>);
static_assert(conditional_upload_store<fs_store>);
static_assert(conditional_writer<fs_store::writer_type> && conditional_writer<fs_store::part_writer_type>);
static_assert(file_backed_mapping<fs_store::mapping_type> && offset_file_mapping<fs_store::mapping_type>);
static_assert(!remote_store<fs_store> && !range_mapping_store<fs_store>);
static_assert(!streaming_store<fs_store> && !speculating_store<fs_store>);
static_assert(!async_mapping_store<fs_store>);
static_assert(!partial_mapping<fs_store::mapping_type> && !growing_mapping<fs_store::mapping_type>);

#ifdef SLUICE_TEST_WITH_S3
using s3::gateway_store;
static_assert(servable_store<gateway_store>);
static_assert(remote_store<gateway_store>);
static_assert(describing_store<gateway_store> && range_mapping_store<gateway_store>);
static_assert(streaming_store<gateway_store> && speculating_store<gateway_store>);
static_assert(async_mapping_store<gateway_store>);
static_assert(conditional_upload_store<gateway_store>);
static_assert(conditional_writer<gateway_store::writer_type>);
static_assert(conditional_writer<gateway_store::part_writer_type>);  // an fs_store writer
static_assert(partial_mapping<gateway_store::mapping_type> && growing_mapping<gateway_store::mapping_type>);
static_assert(file_backed_mapping<gateway_store::mapping_type> && offset_file_mapping<gateway_store::mapping_type>);
static_assert(!owner_recording_store<gateway_store> && !owner_reporting_store<gateway_store>);
static_assert(!settings_keeping_store<gateway_store>);
#endif

}  // namespace

TEST_CASE("transfer_span compares by value") {
  CHECK(transfer_span{1, 2, 3} == transfer_span{1, 2, 3});
  CHECK(transfer_span{1, 2, 3} != transfer_span{1, 2, 4});
}
